//! The objects the watches have seen, by kind ([`Stores`]): what each store covers, what
//! it keeps of each object, and what it can answer for whom.

use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::packed::{Keep, Key, Packed, Read};
use crate::cluster::ListQuery;
use crate::object::{ManifestExt, ObjectRef, TypeRef};

/// What one watch of one kind has seen.
#[derive(Debug, Default)]
struct KindStore {
    /// Namespaces covered, once listed; `None` in the set's place: every namespace.
    synced: HashSet<Option<String>>,
    /// Whether the watch sees every object of the kind (not label-scoped).
    complete: bool,
    /// Whether the watch sees every object carrying windlass's ownership label.
    owned: bool,
    /// What is kept of each object.
    keep: Keep,
    /// The objects of a store that keeps part of each that a reader read whole: kept
    /// whole from then on, so that the next whole read of one is answered from memory;
    /// and whether the copy held is whole yet.
    kept_whole: foldhash::HashMap<Key, bool>,
    /// Hashed with foldhash, not SipHash: every watch event and every read looks up here.
    objects: foldhash::HashMap<Key, Packed>,
    /// The bytes of the objects' texts, for `windlass_cache_bytes`.
    bytes: usize,
}

impl KindStore {
    /// What is kept of the object `key` when the watch delivers it.
    fn keep_of(&self, key: &Key) -> Keep {
        if self.kept_whole.contains_key(key) {
            Keep::Whole
        } else {
            self.keep
        }
    }

    /// What the copy held of the object `key` keeps.
    fn held_keep(&self, key: &Key) -> Keep {
        if self.kept_whole.get(key) == Some(&true) {
            Keep::Whole
        } else {
            self.keep
        }
    }

    /// Keep `packed` as `key`; returns whether it replaces a copy.
    fn insert(&mut self, key: Key, packed: Packed) -> bool {
        self.bytes += packed.0.len();
        match self.objects.insert(key, packed) {
            Some(old) => {
                self.bytes -= old.0.len();
                true
            }
            None => false,
        }
    }

    /// Drop the copy of `key`, if any.
    fn take(&mut self, key: &Key) -> Option<Packed> {
        self.kept_whole.remove(key);
        let old = self.objects.remove(key)?;
        self.bytes -= old.0.len();
        Some(old)
    }

    /// The copy held of `key` in `namespace` when it is partial (the store keeps part of
    /// each object) and the watch has listed there.
    fn partial_copy(&self, key: &Key, namespace: &Option<String>) -> Option<&Packed> {
        if self.keep == Keep::Whole || !self.covers(namespace) {
            return None;
        }
        self.objects.get(key)
    }

    /// Whether a watch sees every object of the kind in `namespace` (`None`: in every
    /// namespace) and has listed them.
    fn covers(&self, namespace: &Option<String>) -> bool {
        self.synced.contains(&None) || self.synced.contains(namespace)
    }
}

/// The objects the runtime's watches have seen, by kind. Shared by the watches (which
/// write) and the [`CachedCluster`]s (which read).
///
/// The stores of one shard of a sharded controller answer for some kinds from the
/// replica's shared stores ([`Stores::over`], [`Stores::lend`]): the kinds watched whole
/// are watched once per replica, not once per shard it holds.
#[derive(Debug, Default)]
pub struct Stores {
    kinds: RwLock<foldhash::HashMap<TypeRef, KindStore>>,
    /// The stores that answer for the kinds in `lent`.
    shared: Option<Arc<Stores>>,
    /// The kinds `shared` answers for.
    lent: RwLock<HashSet<TypeRef>>,
}

/// The answer of a store for one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Cached {
    /// The watch has the object (a copy of its own, parsed from the store).
    Present(Value),
    /// The watch sees every object of the kind there and does not have it.
    Absent,
    /// The store cannot tell: ask the API server.
    Unknown,
}

impl Stores {
    /// Empty stores.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty stores that will answer for the kinds [`lend`](Self::lend) names from
    /// `shared`.
    pub(crate) fn over(shared: Arc<Stores>) -> Self {
        Stores {
            shared: Some(shared),
            ..Self::default()
        }
    }

    /// From now on the shared stores answer for `kind` (whose watch they are fed by), and
    /// what these stores held of it is dropped. Without shared stores: nothing changes.
    pub(crate) fn lend(&self, kind: &TypeRef) {
        if self.shared.is_some() {
            write(&self.lent).insert(kind.clone());
            write(&self.kinds).remove(kind);
        }
    }

    /// The stores that answer for `kind`: the shared ones if it is lent to them.
    pub(super) fn of(&self, kind: &TypeRef) -> &Stores {
        match &self.shared {
            Some(shared) if read(&self.lent).contains(kind) => shared,
            _ => self,
        }
    }

    /// What the watches know of `object`, whole: a store that keeps only part of its
    /// objects ([`Keep::Slim`], [`Keep::Digest`]) cannot tell.
    #[cfg(test)]
    pub(super) fn lookup(&self, object: &ObjectRef) -> Cached {
        self.lookup_with(object, Read::Whole)
    }

    /// What the watches know of `object` that windlass is about to write: a watch of
    /// every object carrying windlass's ownership label knows it is absent too (see
    /// [`Cluster::get_own`]); and the copy may be the part a store of the kind keeps.
    #[cfg(test)]
    pub(crate) fn lookup_own(&self, object: &ObjectRef) -> Cached {
        self.lookup_with(object, Read::Own)
    }

    /// What the watches know of `object`, for a reader of its metadata only: the copy may
    /// be the part a store of the kind keeps.
    pub(crate) fn lookup_metadata(&self, object: &ObjectRef) -> Cached {
        self.lookup_with(object, Read::Metadata)
    }

    /// The resourceVersion of the copy the watches hold of `object` (`Some(None)`: a copy
    /// without one), or `None` when no store that covers it holds it: what
    /// [`Stores::lookup_metadata`] would answer `Present` with, without parsing the copy.
    pub(super) fn held_version(&self, object: &ObjectRef) -> Option<Option<String>> {
        let type_ref = object.type_ref();
        let kinds = read(&self.of(&type_ref).kinds);
        let store = kinds.get(&type_ref)?;
        if !store.covers(&object.namespace) {
            return None;
        }
        store
            .objects
            .get(&Key::of(object))
            .map(Packed::resource_version)
    }

    /// What the watches know of `object` for a reader of `what`: a store whose copies do
    /// not hold that much cannot tell.
    pub(super) fn lookup_with(&self, object: &ObjectRef, what: Read) -> Cached {
        let type_ref = object.type_ref();
        let kinds = read(&self.of(&type_ref).kinds);
        let Some(store) = kinds.get(&type_ref) else {
            return Cached::Unknown;
        };
        if !store.covers(&object.namespace) {
            return Cached::Unknown;
        }
        let key = Key::of(object);
        match store.objects.get(&key) {
            Some(found) if store.held_keep(&key).serves(what) => {
                found.unpack().map_or(Cached::Unknown, Cached::Present)
            }
            Some(_) => Cached::Unknown,
            None if store.complete || (what == Read::Own && store.owned) => Cached::Absent,
            None => Cached::Unknown,
        }
    }

    /// Every object of `type_ref` the watches have, e.g. to find a CR by uid.
    #[cfg(any(test, feature = "testing"))]
    pub fn objects(&self, type_ref: &TypeRef) -> Vec<Value> {
        read(&self.of(type_ref).kinds)
            .get(type_ref)
            .map(|s| s.objects.values().filter_map(Packed::unpack).collect())
            .unwrap_or_default()
    }

    /// The objects of `query.type_ref` in `query.namespace` (`None`: every namespace)
    /// when a watch sees every object of the kind there and has listed it; `None` when
    /// the store cannot tell. Selectors are not applied here.
    pub(super) fn list(&self, query: &ListQuery) -> Option<Vec<(ObjectRef, Value)>> {
        let kinds = read(&self.of(&query.type_ref).kinds);
        let store = kinds.get(&query.type_ref)?;
        if !store.complete || !store.covers(&query.namespace) || store.keep != Keep::Whole {
            return None;
        }
        Some(
            store
                .objects
                .iter()
                .filter(|(key, _)| in_namespace(key.namespace(), query.namespace.as_deref()))
                .filter_map(|(key, o)| Some((key.reference(&query.type_ref), o.unpack()?)))
                .collect(),
        )
    }

    /// Whether the watch of `type_ref` over `namespace` (`None`: all) has listed.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_synced(&self, type_ref: &TypeRef, namespace: Option<&str>) -> bool {
        read(&self.of(type_ref).kinds)
            .get(type_ref)
            .is_some_and(|s| s.synced.contains(&namespace.map(str::to_string)))
    }

    /// A watch of `type_ref` starts with the label selector `labels` (`None`: every
    /// object), its store keeping `keep` of each object.
    pub(crate) fn declare(&self, type_ref: &TypeRef, labels: Option<&str>, keep: Keep) {
        let mut kinds = write(&self.kinds);
        let store = kinds.entry(type_ref.clone()).or_default();
        if labels.is_none() && !store.complete {
            // A whole watch replaces a label-scoped one: until it has listed, what the
            // store lacks may exist.
            store.synced.clear();
        }
        if keep.keeps_more_than(store.keep) {
            // Its copies lack what the new keep serves (a whole read, a digest), so the
            // watch that replaces the one that kept them lists the kind afresh.
            store.objects.clear();
            store.kept_whole.clear();
            store.bytes = 0;
            store.synced.clear();
        }
        store.keep = keep;
        store.complete = labels.is_none();
        store.owned = labels.is_none() || labels == Some(crate::annotations::OWNER_UID);
    }

    /// A (re)list of `type_ref` over `namespace` returned `objects`: they replace what the
    /// store held there. Returns the objects that were held and are gone.
    #[cfg(test)]
    pub(crate) fn replace(
        &self,
        type_ref: &TypeRef,
        namespace: Option<&str>,
        objects: Vec<(ObjectRef, Arc<Value>)>,
    ) -> Vec<Arc<Value>> {
        let listed = objects.iter().map(|(r, _)| r.clone()).collect();
        for (reference, object) in objects {
            self.upsert(reference, &object);
        }
        self.retain_listed(type_ref, namespace, &listed)
    }

    /// A (re)list of `type_ref` over `namespace` is complete; its objects, stored as they
    /// came ([`Stores::upsert`]), are `listed`. What else the store held there is dropped
    /// (returned: it went while the watch was down), and the store answers for the
    /// namespace from now on.
    pub(crate) fn retain_listed(
        &self,
        type_ref: &TypeRef,
        namespace: Option<&str>,
        listed: &HashSet<ObjectRef>,
    ) -> Vec<Arc<Value>> {
        let mut kinds = write(&self.kinds);
        let store = kinds.entry(type_ref.clone()).or_default();
        let listed: HashSet<Key> = listed.iter().map(Key::of).collect();
        let gone: Vec<Key> = store
            .objects
            .keys()
            .filter(|key| namespace.is_none() || key.namespace() == namespace)
            .filter(|key| !listed.contains(key))
            .cloned()
            .collect();
        let removed = gone
            .iter()
            .filter_map(|r| store.take(r)?.unpack().map(Arc::new))
            .collect();
        store.synced.insert(namespace.map(str::to_string));
        removed
    }

    /// The watch saw `object` (added or modified, or listed). Returns whether it replaces
    /// a copy.
    pub(crate) fn upsert(&self, reference: ObjectRef, object: &Value) -> bool {
        let type_ref = reference.type_ref();
        let key = Key::of(&reference);
        let keep = read(&self.kinds)
            .get(&type_ref)
            .map_or(Keep::Whole, |store| store.keep_of(&key));
        // Packed outside the lock: readers wait for none of it.
        let packed = Packed::new(object, keep);
        let mut kinds = write(&self.kinds);
        let store = kinds.entry(type_ref).or_default();
        let packed = if store.keep_of(&key) == keep {
            packed
        } else {
            // Declared otherwise, or read whole, meanwhile.
            Packed::new(object, store.keep_of(&key))
        };
        if let Some(whole) = store.kept_whole.get_mut(&key) {
            *whole = true;
        }
        store.insert(key, packed)
    }

    /// A whole read of `object` went to the API server, which answered `found`, because
    /// the store of its kind keeps part of each object: keep this one whole from now on
    /// (the watch's next copy, and `found` itself if it is the version the store holds),
    /// so that the next whole read of it is answered from memory. What components read
    /// whole of a kind (a Secret's data) is a handful of its objects; the rest stay
    /// partial. Nothing changes for an object the store does not hold (out of its watch's
    /// selector, or gone).
    pub(crate) fn keep_whole(&self, object: &ObjectRef, found: &Value) {
        let type_ref = object.type_ref();
        let stores = self.of(&type_ref);
        let key = Key::of(object);
        // Whether the held copy is the version the server answered with.
        let answered = |held: &Packed| {
            held.resource_version()
                .is_some_and(|held| found.resource_version() == Some(held.as_str()))
        };
        // Asked under the read lock first: most reads that reach the server are of objects
        // no partial store holds (a user's Secret outside a label-scoped watch), and need
        // nothing packed.
        let current = match read(&stores.kinds).get(&type_ref) {
            Some(store) => match store.partial_copy(&key, &object.namespace) {
                Some(held) => answered(held),
                None => return,
            },
            None => return,
        };
        // Packed outside the write lock, as `upsert` does: a Secret may be a mebibyte.
        let packed = current.then(|| Packed::new(found, Keep::Whole));
        let mut kinds = write(&stores.kinds);
        let Some(store) = kinds.get_mut(&type_ref) else {
            return;
        };
        let Some(held) = store.partial_copy(&key, &object.namespace) else {
            return;
        };
        if answered(held) {
            // (Packed here only if the watch delivered that version meanwhile.)
            let packed = packed.unwrap_or_else(|| Packed::new(found, Keep::Whole));
            store.kept_whole.insert(key.clone(), true);
            store.insert(key, packed);
        } else {
            store.kept_whole.entry(key).or_insert(false);
        }
    }

    /// The watch saw `object` deleted.
    pub(crate) fn remove(&self, reference: &ObjectRef) {
        let mut kinds = write(&self.kinds);
        if let Some(store) = kinds.get_mut(&reference.type_ref()) {
            store.take(&Key::of(reference));
        }
    }

    /// Per kind, how many objects the stores hold and the bytes of their texts (what
    /// `windlass_cache_objects` and `windlass_cache_bytes` export).
    pub(crate) fn sizes(&self) -> Vec<(TypeRef, usize, usize)> {
        read(&self.kinds)
            .iter()
            .map(|(kind, store)| (kind.clone(), store.objects.len(), store.bytes))
            .collect()
    }
}

/// Whether an object of the namespace `object` (`None`: cluster-scoped) is in `namespace`
/// (`None`: any); a cluster-scoped object is in every namespace a query names, as the API
/// server ignores the namespace for such kinds.
pub(super) fn in_namespace(object: Option<&str>, namespace: Option<&str>) -> bool {
    namespace.is_none() || object.is_none() || object == namespace
}

fn read<T>(lock: &RwLock<T>) -> parking_lot::RwLockReadGuard<'_, T> {
    lock.read()
}

fn write<T>(lock: &RwLock<T>) -> parking_lot::RwLockWriteGuard<'_, T> {
    lock.write()
}
