//! The fence on a reconcile's writes: none is sent once the lock it runs under is no
//! longer held.
//!
//! The worker starts a reconcile only while [`Leadership::is_leader`] holds (for a Lease:
//! before its renew deadline, a fifth of the lease short of its expiry). A reconcile can
//! run on past that instant: a slow rollout, a renewal that failed while it ran. Its writes
//! go through [`Fenced`], which asks the same question again before each one, with the
//! same clock: from the renew deadline on, a write fails at once (a transient error, so the
//! CR is tried again, by whichever replica then holds it) instead of reaching the API
//! server. A write sent just before the deadline may still land after it; the fifth of the
//! lease between the renew deadline and the expiry at the other replicas' end is there for
//! that, as it is for client-go's leader election. Reads pass through.
//!
//! Locks without a deadline (dry-run, the annotation lock, which checks each CR's lock
//! when it takes it) never fence.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::leader::Leadership;
use crate::cluster::{Cluster, Deletion, ListQuery, Scope, WriteMethod};
use crate::error::ClusterError;
use crate::object::{ObjectRef, TypeRef};

/// A [`Cluster`] whose writes pass only while `leadership` holds.
pub(crate) struct Fenced {
    inner: Arc<dyn Cluster>,
    leadership: Leadership,
}

impl Fenced {
    /// Writes to `inner` while `leadership` holds.
    pub(crate) fn new(inner: Arc<dyn Cluster>, leadership: Leadership) -> Self {
        Fenced { inner, leadership }
    }

    /// `Ok` while a write may be sent; the error names the object that was not written.
    fn check(&self, what: impl FnOnce() -> String) -> Result<(), ClusterError> {
        if self.leadership.is_leader() {
            Ok(())
        } else {
            Err(ClusterError::api(format!(
                "{} not written: this replica's lock passed its renew deadline (another \
                 replica may hold it now)",
                what()
            )))
        }
    }
}

#[async_trait]
impl Cluster for Fenced {
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.inner.scope(type_ref).await
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.inner.get(object).await
    }

    async fn get_own(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.inner.get_own(object).await
    }

    async fn get_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        self.inner.get_shared(object).await
    }

    async fn get_own_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        self.inner.get_own_shared(object).await
    }

    fn get_own_is_partial(&self) -> bool {
        self.inner.get_own_is_partial()
    }

    async fn own_version(&self, object: &ObjectRef) -> Result<Option<String>, ClusterError> {
        self.inner.own_version(object).await
    }

    async fn get_dependency(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.inner.get_dependency(object).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        self.inner.list(query).await
    }

    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError> {
        self.check(|| {
            ObjectRef::from_manifest(manifest)
                .map_or_else(|_| "an object".to_string(), |r| r.to_string())
        })?;
        self.inner.apply(manifest, method).await
    }

    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> Result<Deletion, ClusterError> {
        self.check(|| format!("the deletion of {object}"))?;
        self.inner.delete(object, uid).await
    }

    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        self.check(|| format!("the status of {object}"))?;
        self.inner
            .write_status(object, status, resource_version)
            .await
    }

    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError> {
        self.check(|| object.to_string())?;
        self.inner.patch(object, patch).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::cluster::MemoryCluster;
    use crate::runtime::leader::{Attempt, LockError, RenewedLock, Timing};

    /// A lock that is held at the first attempt and never renewed after.
    struct OnceHeld(bool);

    #[async_trait]
    impl RenewedLock for OnceHeld {
        async fn try_acquire(&mut self) -> Result<Attempt, LockError> {
            if std::mem::replace(&mut self.0, false) {
                Ok(Attempt::Held)
            } else {
                Err(LockError::Task("the API server is unreachable".into()))
            }
        }
        async fn release(&mut self) -> Result<(), LockError> {
            Ok(())
        }
    }

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": {"a": "1"}})
    }

    #[tokio::test(start_paused = true)]
    async fn no_write_passes_the_renew_deadline_and_reads_still_do() {
        let memory = Arc::new(MemoryCluster::new());
        // A 10 s lease renewed every 2 s: the renew deadline is 8 s after the last renewal.
        let timing = Timing::for_lease(Duration::from_secs(10), Duration::from_secs(2)).unwrap();
        let leadership = Leadership::elect(OnceHeld(true), timing);
        leadership.wait_until_leader().await;
        let fenced = Fenced::new(memory.clone(), leadership.clone());
        // A reconcile in flight writes while the lock holds...
        fenced
            .apply(&config_map("before"), WriteMethod::Apply)
            .await
            .unwrap();
        // ...and its renewals fail: at the renew deadline every write stops.
        let mut changes = leadership.watch();
        changes.wait_for(|leader| !*leader).await.unwrap();
        let refused = fenced
            .apply(&config_map("after"), WriteMethod::Apply)
            .await
            .unwrap_err();
        assert!(refused.is_transient(), "{refused}");
        assert!(refused.to_string().contains("renew deadline"), "{refused}");
        let cm = ObjectRef::new("v1", "ConfigMap", Some("default"), "before");
        assert!(fenced.delete(&cm, None).await.is_err());
        assert!(fenced.write_status(&cm, &json!({}), None).await.is_err());
        assert!(fenced.get(&cm).await.unwrap().is_some(), "reads pass");
        let after = ObjectRef::new("v1", "ConfigMap", Some("default"), "after");
        assert!(
            memory.get(&after).await.unwrap().is_none(),
            "nothing reached the cluster"
        );
    }

    #[tokio::test]
    async fn locks_without_a_deadline_never_fence() {
        let memory = Arc::new(MemoryCluster::new());
        let fenced = Fenced::new(memory, Leadership::always());
        fenced
            .apply(&config_map("always"), WriteMethod::Apply)
            .await
            .unwrap();
    }

    /// The fence passes on that its inner cluster's own reads are partial (the runtime's
    /// slim caches): a reconcile that read an object to write it, then reads it whole
    /// (a component checking a Secret's data), gets it whole.
    #[tokio::test]
    async fn own_reads_stay_partial_through_the_fence() {
        let partial = Arc::new(crate::session::ledger_tests::Partial::new());
        let fenced = Arc::new(Fenced::new(partial.clone(), Leadership::always()));
        crate::session::ledger_tests::whole_and_own_reads_through(fenced, partial).await;
    }
}
