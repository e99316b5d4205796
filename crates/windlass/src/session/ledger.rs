//! What one reconcile has seen and applied (the [`Ledger`]), and the cluster as the
//! reconcile sees it through the ledger ([`Recorded`]): each object read at most once, the
//! answer of every write remembered.
//!
//! The ledger keeps its copies shared (`Arc`): the rollout reads or writes each of its
//! objects and only looks at the answer ([`Cluster::get_own_shared`],
//! [`Recorded::apply_shared`]), so the copy it looks at is the one remembered (for the
//! in-memory cluster, the one it stores), not a copy of it. Other callers get a copy of
//! their own, as the trait says.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};

use async_trait::async_trait;
use serde_json::Value;

use crate::cluster::{Cluster, DATA_DIGEST, Deletion, ListQuery, Scope, WriteMethod};
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef, deleted_by_write};
use crate::status::inventory::Inventory;

#[cfg(test)]
thread_local! {
    /// The objects this thread's reconciles read from their cluster, past the ledger: what
    /// a test of reading counts.
    pub(crate) static READ: std::cell::RefCell<Vec<ObjectRef>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A copy the ledger keeps (`None`: found absent), and whether it is partial.
type Seen = (Option<Arc<Value>>, bool);

/// What one reconcile has seen and applied.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The freshest copy of each object read or written; `None` when it was found absent;
    /// and whether the copy is partial (read with a [`Cluster::get_own`] that says so).
    /// Hashed with foldhash, not the standard library's SipHash: a reconcile looks up every
    /// object it renders here, and an object's reference is four strings.
    objects: Mutex<HashMap<ObjectRef, Seen>>,
    /// What windlass applied for the CR, as the rollout updates it; shared with the
    /// snapshots [`Ledger::inventory`] hands out, copied only when changed after one.
    inventory: Mutex<Arc<Inventory>>,
    /// Held while the CR's finalizers are changed, so concurrent components don't race.
    pub(super) finalizers: tokio::sync::Mutex<()>,
    /// The Secrets and ConfigMaps a dependency hash was computed from as the cluster held
    /// them (see [`crate::rollout::dependency_hash`]), and whether the rollout wrote one of them
    /// after that.
    dependencies: Mutex<(HashSet<ObjectRef>, bool)>,
    /// The scope of each kind asked about (a few per reconcile, so a list).
    scopes: Mutex<Vec<(TypeRef, Scope)>>,
}

impl Ledger {
    pub(crate) fn new(inventory: Inventory) -> Self {
        Ledger {
            // Sized for what the CR had applied (and the CR): a reconcile reads each of them,
            // so the map would otherwise grow in steps, rehashing every reference each time.
            objects: Mutex::new(HashMap::with_capacity(inventory.len() + 1)),
            inventory: Mutex::new(Arc::new(inventory)),
            finalizers: tokio::sync::Mutex::new(()),
            dependencies: Mutex::default(),
            scopes: Mutex::default(),
        }
    }

    /// The scope of the kind `api_version`/`kind`, if it was asked about before.
    pub(crate) fn scope(&self, api_version: &str, kind: &str) -> Option<Scope> {
        self.scopes
            .lock()
            .iter()
            .find(|(t, _)| t.kind == kind && t.api_version == api_version)
            .map(|(_, scope)| *scope)
    }

    /// Remember the scope of a kind.
    pub(crate) fn remember_scope(&self, type_ref: TypeRef, scope: Scope) {
        self.scopes.lock().push((type_ref, scope));
    }

    /// A dependency hash is about to be computed from `object` as the cluster holds it.
    pub(crate) fn dependency_read(&self, object: ObjectRef) {
        self.dependencies.lock().0.insert(object);
    }

    /// The rollout wrote `object`. Returns whether a dependency hash was computed from its
    /// copy in the cluster before (that hash is stale; the reconcile is marked for a
    /// requeue, see [`Ledger::stale_dependency_hash`]).
    pub(crate) fn dependency_written(&self, object: &ObjectRef) -> bool {
        let mut dependencies = self.dependencies.lock();
        let stale = dependencies.0.contains(object);
        dependencies.1 |= stale;
        stale
    }

    /// Whether a dependency hash of this reconcile was computed from a copy that the
    /// rollout overwrote later.
    pub(crate) fn stale_dependency_hash(&self) -> bool {
        self.dependencies.lock().1
    }

    /// The copy seen last, if the object was read whole or written in this reconcile.
    pub(crate) fn seen(&self, object: &ObjectRef) -> Option<Option<Arc<Value>>> {
        match self.objects.lock().get(object) {
            Some((value, false)) => Some(value.clone()),
            _ => None,
        }
    }

    /// The copy seen last, whole or partial (see [`Cluster::get_own`]).
    fn seen_own(&self, object: &ObjectRef) -> Option<Option<Arc<Value>>> {
        self.objects
            .lock()
            .get(object)
            .map(|(value, _)| value.clone())
    }

    /// Remember the freshest copy of `object` (`None`: it is absent).
    pub(crate) fn remember(&self, object: ObjectRef, value: Option<Arc<Value>>) {
        self.objects.lock().insert(object, (value, false));
    }

    /// Remember a partial copy of `object`, or that a partial read found it absent.
    fn remember_partial(&self, object: ObjectRef, value: Option<Arc<Value>>) {
        self.objects.lock().insert(object, (value, true));
    }

    /// Forget `object`, so the next look reads it (after a delete, whose outcome the
    /// cluster decides later).
    pub(crate) fn forget(&self, object: &ObjectRef) {
        self.objects.lock().remove(object);
    }

    /// Change the inventory.
    pub(crate) fn inventory_mut<T>(&self, change: impl FnOnce(&mut Inventory) -> T) -> T {
        change(Arc::make_mut(&mut self.inventory.lock()))
    }

    /// The inventory as it is now.
    pub(crate) fn inventory(&self) -> Arc<Inventory> {
        self.inventory.lock().clone()
    }

    /// Look at the inventory as it is now.
    pub(crate) fn inventory_with<T>(&self, read: impl FnOnce(&Inventory) -> T) -> T {
        read(&self.inventory.lock())
    }

    /// What `component` applied, as the inventory holds it now. Asked once per component
    /// per rollout, so it copies that component's entries only, not the whole inventory
    /// (which would make a rollout quadratic in the number of components).
    pub(crate) fn inventory_of(&self, component: &str) -> Vec<(ObjectRef, String)> {
        self.inventory.lock().of(component)
    }
}

/// The cluster as one reconcile sees it: reads answered from the [`Ledger`] when the
/// object was read or written before in this reconcile; every write's answer remembered.
/// Components, verify and the rollout all go through it ([`Session::cluster`]), so no
/// step needs to pass copies along by hand.
pub(crate) struct Recorded {
    inner: Arc<dyn Cluster>,
    ledger: Arc<Ledger>,
}

impl Recorded {
    pub(crate) fn shared(inner: Arc<dyn Cluster>, ledger: Arc<Ledger>) -> Arc<Recorded> {
        Arc::new(Recorded { inner, ledger })
    }

    /// [`Cluster::apply`], the copy the ledger keeps.
    pub(crate) async fn apply_shared(
        &self,
        manifest: &Value,
        method: WriteMethod,
    ) -> Result<Arc<Value>, ClusterError> {
        let stored = Arc::new(self.inner.apply(manifest, method).await?);
        self.remember(&stored);
        Ok(stored)
    }

    /// The copy seen before in this reconcile that serves `reading`, else the inner
    /// cluster's answer to it, remembered (as partial when it may be: an own read of a
    /// cluster that says so, a dependency read answered with a digest). A whole read is
    /// not answered with a partial copy; a dependency read only with a whole copy or one
    /// that carries its data's digest.
    async fn read(
        &self,
        object: &ObjectRef,
        reading: Reading,
    ) -> Result<Option<Arc<Value>>, ClusterError> {
        let seen = match reading {
            Reading::Whole => self.ledger.seen(object),
            Reading::Own => self.ledger.seen_own(object),
            Reading::Dependency => self.ledger.seen(object).or_else(|| {
                self.ledger
                    .seen_own(object)
                    .filter(|seen| seen.as_ref().is_some_and(|s| s.get(DATA_DIGEST).is_some()))
            }),
        };
        if let Some(seen) = seen {
            return Ok(seen);
        }
        #[cfg(test)]
        READ.with(|read| read.borrow_mut().push(object.clone()));
        let found = match reading {
            Reading::Whole => self.inner.get_shared(object).await?,
            Reading::Own => self.inner.get_own_shared(object).await?,
            Reading::Dependency => self.inner.get_dependency(object).await?.map(Arc::new),
        };
        let partial = match reading {
            Reading::Whole => false,
            Reading::Own => self.inner.get_own_is_partial(),
            Reading::Dependency => found.as_ref().is_some_and(|f| f.get(DATA_DIGEST).is_some()),
        };
        if partial {
            self.ledger.remember_partial(object.clone(), found.clone());
        } else {
            self.ledger.remember(object.clone(), found.clone());
        }
        Ok(found)
    }

    /// Remember what a write answered: the copy it stored, or that it deleted the object.
    fn remember(&self, stored: &Arc<Value>) {
        if let Ok(reference) = ObjectRef::from_manifest(stored) {
            self.ledger.remember(reference, kept(stored));
        }
    }
}

/// Which of the inner cluster's reads a [`Recorded`] read stands for.
#[derive(Clone, Copy)]
enum Reading {
    /// [`Cluster::get`].
    Whole,
    /// [`Cluster::get_own`].
    Own,
    /// [`Cluster::get_dependency`].
    Dependency,
}

/// What the ledger keeps of a write's answer `stored`: the copy, or `None` (absent) when
/// the write deleted the object ([`deleted_by_write`]).
fn kept(stored: &Arc<Value>) -> Option<Arc<Value>> {
    (!deleted_by_write(stored)).then(|| stored.clone())
}

/// A copy of `value` of the caller's own (no copy when the ledger did not keep it).
fn owned(value: Arc<Value>) -> Value {
    Arc::unwrap_or_clone(value)
}

#[async_trait]
impl Cluster for Recorded {
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.inner.scope(type_ref).await
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        Ok(self.read(object, Reading::Whole).await?.map(owned))
    }

    async fn get_own(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        Ok(self.read(object, Reading::Own).await?.map(owned))
    }

    async fn get_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        self.read(object, Reading::Whole).await
    }

    async fn get_own_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        self.read(object, Reading::Own).await
    }

    fn get_own_is_partial(&self) -> bool {
        self.inner.get_own_is_partial()
    }

    async fn own_version(&self, object: &ObjectRef) -> Result<Option<String>, ClusterError> {
        // What this reconcile read or wrote of the object is what it would read again.
        if let Some(seen) = self.ledger.seen_own(object) {
            return Ok(seen.and_then(|s| s.resource_version().map(str::to_string)));
        }
        self.inner.own_version(object).await
    }

    async fn get_dependency(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        Ok(self.read(object, Reading::Dependency).await?.map(owned))
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        self.inner.list(query).await
    }

    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError> {
        Ok(owned(self.apply_shared(manifest, method).await?))
    }

    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> Result<Deletion, ClusterError> {
        // Whatever the answer, the cluster decides later when it is gone: read afresh.
        self.ledger.forget(object);
        self.inner.delete(object, uid).await
    }

    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        let stored = self
            .inner
            .write_status(object, status, resource_version)
            .await?;
        let stored = stored.map(Arc::new);
        self.ledger
            .remember(object.clone(), stored.as_ref().and_then(kept));
        Ok(stored.map(owned))
    }

    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError> {
        let stored = Arc::new(self.inner.patch(object, patch).await?);
        self.remember(&stored);
        Ok(owned(stored))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::cluster::MemoryCluster;

    /// A cluster whose own reads drop `data`, and whose dependency reads replace it with
    /// its digest, as the runtime's watch caches do, counting its whole and its
    /// dependency reads.
    pub(crate) struct Partial {
        inner: MemoryCluster,
        whole_reads: AtomicUsize,
        dependency_reads: AtomicUsize,
    }

    impl Partial {
        pub(crate) fn new() -> Self {
            Partial {
                inner: MemoryCluster::new(),
                whole_reads: AtomicUsize::new(0),
                dependency_reads: AtomicUsize::new(0),
            }
        }
    }

    #[async_trait]
    impl Cluster for Partial {
        async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
            self.inner.scope(type_ref).await
        }
        async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
            self.whole_reads.fetch_add(1, Ordering::SeqCst);
            self.inner.get(object).await
        }
        async fn get_own(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
            let mut found = self.inner.get(object).await?;
            if let Some(Value::Object(map)) = &mut found {
                map.remove("data");
            }
            Ok(found)
        }
        fn get_own_is_partial(&self) -> bool {
            true
        }
        async fn get_dependency(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
            self.dependency_reads.fetch_add(1, Ordering::SeqCst);
            let mut found = self.inner.get(object).await?;
            if let Some(found) = &mut found {
                let digest = crate::rollout::dependency_hash::data_digest(found);
                if let Value::Object(map) = found {
                    map.remove("data");
                    map.insert(DATA_DIGEST.into(), json!(digest));
                }
            }
            Ok(found)
        }
        async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
            self.inner.list(query).await
        }
        async fn apply(
            &self,
            manifest: &Value,
            method: WriteMethod,
        ) -> Result<Value, ClusterError> {
            self.inner.apply(manifest, method).await
        }
        async fn delete(
            &self,
            object: &ObjectRef,
            uid: Option<&str>,
        ) -> Result<Deletion, ClusterError> {
            self.inner.delete(object, uid).await
        }
        async fn write_status(
            &self,
            object: &ObjectRef,
            status: &Value,
            resource_version: Option<&str>,
        ) -> Result<Option<Value>, ClusterError> {
            self.inner
                .write_status(object, status, resource_version)
                .await
        }
        async fn patch(
            &self,
            object: &ObjectRef,
            patch: &json_patch::Patch,
        ) -> Result<Value, ClusterError> {
            self.inner.patch(object, patch).await
        }
    }

    #[tokio::test]
    async fn a_whole_read_is_not_answered_with_the_partial_copy_of_an_own_read() {
        let cluster = Arc::new(Partial::new());
        whole_and_own_reads_through(cluster.clone(), cluster).await;
    }

    /// Reads through a [`Recorded`] over `over` (which is, or wraps, `cluster`): an own
    /// read gets the partial copy, a whole read after it asks `cluster`, then both are
    /// answered from the ledger.
    pub(crate) async fn whole_and_own_reads_through(over: Arc<dyn Cluster>, cluster: Arc<Partial>) {
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}});
        cluster.inner.apply(&map, WriteMethod::Apply).await.unwrap();
        let reference = ObjectRef::from_manifest(&map).unwrap();
        let recorded = Recorded::shared(over, Arc::new(Ledger::default()));
        let own = recorded.get_own(&reference).await.unwrap().unwrap();
        assert!(own.get("data").is_none(), "partial");
        assert!(recorded.get_own_is_partial());
        let again = recorded.get_own(&reference).await.unwrap().unwrap();
        assert_eq!(again, own, "from the ledger");
        assert_eq!(cluster.whole_reads.load(Ordering::SeqCst), 0);
        let whole = recorded.get(&reference).await.unwrap().unwrap();
        assert_eq!(whole["data"]["k"], "v", "a whole read is whole");
        assert_eq!(cluster.whole_reads.load(Ordering::SeqCst), 1);
        // Now whole in the ledger: both reads are answered from it.
        recorded.get(&reference).await.unwrap();
        assert_eq!(recorded.get_own(&reference).await.unwrap().unwrap(), whole);
        assert_eq!(cluster.whole_reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_dependency_read_takes_a_digest_or_whole_copy_and_a_whole_read_no_digest_copy() {
        let cluster = Arc::new(Partial::new());
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}});
        cluster.inner.apply(&map, WriteMethod::Apply).await.unwrap();
        let reference = ObjectRef::from_manifest(&map).unwrap();
        let recorded = Recorded::shared(cluster.clone(), Arc::new(Ledger::default()));
        let reads = || {
            (
                cluster.dependency_reads.load(Ordering::SeqCst),
                cluster.whole_reads.load(Ordering::SeqCst),
            )
        };
        // An own read's partial copy has no digest: the dependency read asks.
        recorded.get_own(&reference).await.unwrap().unwrap();
        let digest = recorded.get_dependency(&reference).await.unwrap().unwrap();
        assert!(digest.get("data").is_none());
        assert_eq!(
            digest[DATA_DIGEST],
            json!(crate::rollout::dependency_hash::data_digest(&map))
        );
        assert_eq!(reads(), (1, 0));
        // Then from the ledger; a whole read does not take the digest copy.
        assert_eq!(
            recorded.get_dependency(&reference).await.unwrap().unwrap(),
            digest
        );
        assert_eq!(reads(), (1, 0));
        let whole = recorded.get(&reference).await.unwrap().unwrap();
        assert_eq!(whole["data"]["k"], "v");
        assert_eq!(reads(), (1, 1));
        // Whole in the ledger now: it serves a dependency read too.
        assert_eq!(
            recorded.get_dependency(&reference).await.unwrap().unwrap(),
            whole
        );
        assert_eq!(reads(), (1, 1));
    }

    #[test]
    fn scopes_are_remembered_per_api_version_and_kind() {
        let ledger = Ledger::new(Inventory::default());
        assert_eq!(ledger.scope("v1", "ConfigMap"), None);
        ledger.remember_scope(TypeRef::new("v1", "ConfigMap"), Scope::Namespaced);
        ledger.remember_scope(TypeRef::new("v1", "Namespace"), Scope::Cluster);
        assert_eq!(ledger.scope("v1", "ConfigMap"), Some(Scope::Namespaced));
        assert_eq!(ledger.scope("v1", "Namespace"), Some(Scope::Cluster));
        // The same kind in another group is another kind.
        assert_eq!(ledger.scope("example.com/v1", "ConfigMap"), None);
    }
}
