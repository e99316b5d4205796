//! Reads from the watches: the [`Cluster`] a reconcile uses under the runtime.
//!
//! Every watch of the runtime fills a [`Stores`] entry for its kind; a [`CachedCluster`]
//! answers `get` from there and sends writes to the API server. Three rules keep it
//! correct:
//!
//! 1. **Only what a watch covers.** A store answers for the namespaces its watch covers,
//!    once the watch has listed them (synced). The primary kind is watched whole, so an
//!    object missing from its store does not exist. The kinds the components own are
//!    watched label-scoped (only objects carrying windlass's ownership label), so there
//!    a missing object is asked of the API server: it may exist without the label (an
//!    object a user created, a Secret a component reads).
//! 2. **Read your writes.** The object a write returned is kept until the watch delivers
//!    that version or a newer one (resourceVersions compared as the integers etcd makes
//!    them; a server whose versions are not integers keeps the written copy until the
//!    watch delivers exactly it, or for [`WRITTEN_TTL`]). A delete leaves a tombstone the
//!    same way. So a reconcile never reads an older copy than it wrote, which would make
//!    it write again.
//! 3. **A conflict reads through.** After a write of an object fails with a conflict, the
//!    next `get` of it goes to the API server: the store may be what is stale.
//!
//! A `list` is answered from a store whose watch sees every object of the kind in the
//! namespace asked (the primary kind, a kind watched without a label selector), with the
//! same read-your-writes rule, and otherwise goes to the API server; `scope` and every
//! write go to the API server unchanged. Every write of an object, a delete too, is also
//! entered in an [`OwnWrites`] ledger, in flight and then landed, so that the router can
//! tell the watch's echo of it from a change by someone else (see [`super::echo`]).
//!
//! The stores keep each object as its compact JSON text and parse it when asked: a
//! `serde_json::Value` takes about seven times the memory of its text (a ConfigMap of
//! 1.5 kB of JSON, managedFields included, is 10 kB as a `Value`), and the stores hold
//! every object of the fleet while a reconcile reads a handful.
//!
//! **What the owned kinds keep.** The objects windlass applied (the label-scoped watches of
//! the kinds components deploy, [`Keep::Slim`]) are read by a reconcile for two things,
//! and their stores keep only what those read:
//!
//! - deploying (`rollout::deploy`, `rollout::drift`) and pruning (`rollout::prune`) read
//!   the applied-hash annotation, the `manager`, `operation`, `subresource` and `fieldsV1`
//!   of windlass's own `managedFields` entry, the ownership label, the uid and the
//!   deletionTimestamp; the cache reads the resourceVersion (read-your-writes), and
//!   everyone the name and namespace;
//! - the kinds' readiness rules (`verify::verify_object`, `verify::failure`,
//!   `verify::verify_subsystem`) read `kind`, `metadata.generation`, `status` and
//!   `spec.replicas`.
//!
//! So such a store keeps `apiVersion`, `kind`, `status`, `spec.replicas` and, of `metadata`,
//! the name, namespace, uid, resourceVersion, generation, deletionTimestamp, the labels and
//! annotations of windlass's own (`windlass.dev/…`) and those four fields of windlass's
//! `managedFields` entry; it drops the rest: a ConfigMap's or Secret's data, a workload's
//! pod template, the other labels and annotations (the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation is a copy of the whole
//! object), the owner references, the timestamps. It answers [`Cluster::get_own`] only
//! (whose callers read no more, and which says so: [`Cluster::get_own_is_partial`]); a
//! [`Cluster::get`] of such an object, by a component or a verify check of its own that may
//! read anything, goes to the API server, and from then on the store keeps that object
//! whole ([`Stores::keep_whole`]): what components read whole is a handful of objects (a
//! CA's Secret, a database's credentials), read on every reconcile.
//!
//! **What the kinds CRs read keep.** A kind whose Secrets or ConfigMaps CRs read for a
//! dependency hash is watched whole from then on (see [`super::dispatch`]): every object of
//! the kind in the watched namespaces, most of them not windlass's (a cluster's Helm
//! releases are Secrets of up to 1 MiB each). A dependency hash reads of them the name, the
//! resourceVersion, windlass's ownership label and a digest of `data` and `binaryData`, so
//! such a store ([`Keep::Digest`]) keeps what a slim copy keeps and that digest, under
//! [`DATA_DIGEST`], in place of the data: a few hundred bytes an object, whatever its data,
//! and no Secret's data held in the operator's memory. It answers
//! [`Cluster::get_dependency`] and [`Cluster::get_own`]; a `list` of the kind goes to the
//! API server, and so does the first `get` of an object, which is kept whole from then on
//! as in a slim store.
//!
//! Why not kube-runtime's `reflector::Store`: it keeps typed objects keyed by kube's
//! `ObjectRef`, and has no place for the written copies of rule 2. The watch itself is
//! kube-runtime's `watcher` (see [`super::source`]).

use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::time::Instant;

use super::echo::OwnWrites;
pub use super::echo::WRITTEN_TTL;
use crate::cluster::{Cluster, DATA_DIGEST, Deletion, ListQuery, LiveCluster, Scope, WriteMethod};
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef, newer_version};
use crate::rollout::dependency_hash::data_digest;

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
    kept_whole: HashMap<Key, bool>,
    objects: HashMap<Key, Packed>,
    /// The bytes of the objects' texts, for `windlass_cache_bytes`.
    bytes: usize,
}

/// What a store keeps of each object (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Keep {
    /// The whole object.
    #[default]
    Whole,
    /// What a rollout reads of an object windlass applied (see the module docs).
    Slim,
    /// What [`Keep::Slim`] keeps and the digest of the object's data, in place of the
    /// data: the Secrets and ConfigMaps of a kind CRs read for a dependency hash (see the
    /// module docs).
    Digest,
}

impl Keep {
    /// Whether a copy kept so holds something a copy kept as `other` lacks.
    fn keeps_more_than(self, other: Keep) -> bool {
        let rank = |keep| match keep {
            Keep::Slim => 0,
            Keep::Digest => 1,
            Keep::Whole => 2,
        };
        rank(self) > rank(other)
    }

    /// Whether a copy kept so serves a reader of `what`.
    fn serves(self, what: Read) -> bool {
        match what {
            Read::Whole => self == Keep::Whole,
            Read::Own | Read::Metadata => true,
            Read::Dependency => self != Keep::Slim,
        }
    }
}

/// What a reader of a store reads of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// All of it ([`Cluster::get`]).
    Whole,
    /// What a rollout reads of an object it is about to write ([`Cluster::get_own`]): a
    /// watch of every object with windlass's ownership label knows it absent as well.
    Own,
    /// Its metadata.
    Metadata,
    /// What a dependency hash reads ([`Cluster::get_dependency`]).
    Dependency,
}

/// The prefix of windlass's own labels and annotations.
const OWN_PREFIX: &str = "windlass.dev/";

/// The fields of `metadata` a slim copy keeps as they are.
const SLIM_METADATA: [&str; 6] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
];

/// The fields of a `managedFields` entry a slim copy keeps (what
/// [`crate::object::applied_fields`] reads).
const SLIM_MANAGED: [&str; 4] = ["manager", "operation", "subresource", "fieldsV1"];

/// An object as [`Keep::Slim`] keeps it, written without copying the parts kept; with
/// the digest of its data under [`DATA_DIGEST`] as [`Keep::Digest`] keeps it.
struct Slim<'a>(&'a Value, Option<String>);

/// An object's metadata as [`Keep::Slim`] keeps it.
struct SlimMetadata<'a>(&'a serde_json::Map<String, Value>);

/// A map of which only the keys that its function accepts are written.
struct Only<'a, F: Fn(&str) -> bool>(&'a serde_json::Map<String, Value>, F);

impl<F: Fn(&str) -> bool> serde::Serialize for Only<'_, F> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.0.iter().filter(|(k, _)| (self.1)(k)) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A `managedFields` list of which each entry keeps [`SLIM_MANAGED`].
struct SlimManaged<'a>(&'a [Value]);

impl serde::Serialize for SlimManaged<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for entry in self.0 {
            match entry {
                Value::Object(entry) => {
                    seq.serialize_element(&Only(entry, |k: &str| SLIM_MANAGED.contains(&k)))?;
                }
                other => seq.serialize_element(other)?,
            }
        }
        seq.end()
    }
}

/// A spec of which only `replicas` is kept.
#[derive(serde::Serialize)]
struct Replicas<'a> {
    replicas: &'a Value,
}

impl serde::Serialize for Slim<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(object) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in object {
            match (key.as_str(), value) {
                ("apiVersion" | "kind" | "status", _) => map.serialize_entry(key, value)?,
                ("metadata", Value::Object(metadata)) => {
                    map.serialize_entry(key, &SlimMetadata(metadata))?;
                }
                ("spec", spec) => {
                    if let Some(replicas) = spec.get("replicas") {
                        map.serialize_entry(key, &Replicas { replicas })?;
                    }
                }
                _ => {}
            }
        }
        if let Some(digest) = &self.1 {
            map.serialize_entry(DATA_DIGEST, digest)?;
        }
        map.end()
    }
}

impl serde::Serialize for SlimMetadata<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        let own = |k: &str| k.starts_with(OWN_PREFIX);
        for (key, value) in self.0 {
            match (key.as_str(), value) {
                (name, value) if SLIM_METADATA.contains(&name) => {
                    map.serialize_entry(key, value)?;
                }
                ("labels" | "annotations", Value::Object(entries))
                    if entries.keys().any(|k| own(k)) =>
                {
                    map.serialize_entry(key, &Only(entries, own))?;
                }
                ("managedFields", Value::Array(entries)) => {
                    map.serialize_entry(key, &SlimManaged(entries))?;
                }
                _ => {}
            }
        }
        map.end()
    }
}

/// An object's key in its kind's store: `namespace/name`, or `name` when cluster-scoped
/// (a name never holds a `/`). One string where an [`ObjectRef`] is four: the kind is
/// the store's, and at 60 000 objects the difference is 13 MiB.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key(Box<str>);

impl Key {
    fn of(reference: &ObjectRef) -> Self {
        Key(match &reference.namespace {
            Some(namespace) => format!("{namespace}/{}", reference.name).into(),
            None => reference.name.as_str().into(),
        })
    }

    fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(namespace, _)| namespace)
    }

    /// The reference of the object of `type_ref` so keyed.
    fn reference(&self, type_ref: &TypeRef) -> ObjectRef {
        let (namespace, name) = match self.0.split_once('/') {
            Some((namespace, name)) => (Some(namespace.to_string()), name),
            None => (None, &*self.0),
        };
        ObjectRef {
            api_version: type_ref.api_version.clone(),
            kind: type_ref.kind.clone(),
            namespace,
            name: name.to_string(),
        }
    }
}

/// An object as its compact JSON text (see the module docs).
#[derive(Debug, Clone)]
struct Packed(Arc<str>);

impl Packed {
    fn new(object: &Value, keep: Keep) -> Self {
        // Written with `serde_json::to_string`, not `Value`'s `Display` (`to_string()`),
        // which passes every token through a `fmt::Formatter`; every watched object and
        // every written copy is packed here. Serializing a `Value` cannot fail: its keys
        // are strings.
        let text = match keep {
            Keep::Whole => serde_json::to_string(object),
            Keep::Slim => serde_json::to_string(&Slim(object, None)),
            Keep::Digest => serde_json::to_string(&Slim(object, Some(data_digest(object)))),
        };
        Packed(Arc::from(text.unwrap_or_default()))
    }

    /// The object; `None` only if the text does not parse, which text written by
    /// [`Packed::new`] always does.
    fn unpack(&self) -> Option<Value> {
        serde_json::from_str(&self.0).ok()
    }

    /// The object's resourceVersion, read from the text without building the object: the
    /// parser skips every other field without allocating.
    fn resource_version(&self) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Object<'a> {
            #[serde(borrow, default)]
            metadata: Option<Metadata<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Metadata<'a> {
            #[serde(borrow, default, rename = "resourceVersion")]
            resource_version: Option<std::borrow::Cow<'a, str>>,
        }
        serde_json::from_str::<Object<'_>>(&self.0)
            .ok()?
            .metadata?
            .resource_version
            .map(std::borrow::Cow::into_owned)
    }
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
    kinds: RwLock<HashMap<TypeRef, KindStore>>,
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
    fn of(&self, kind: &TypeRef) -> &Stores {
        match &self.shared {
            Some(shared) if read(&self.lent).contains(kind) => shared,
            _ => self,
        }
    }

    /// What the watches know of `object`, whole: a store that keeps only part of its
    /// objects ([`Keep::Slim`], [`Keep::Digest`]) cannot tell.
    #[cfg(test)]
    fn lookup(&self, object: &ObjectRef) -> Cached {
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
    fn held_version(&self, object: &ObjectRef) -> Option<Option<String>> {
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
    fn lookup_with(&self, object: &ObjectRef, what: Read) -> Cached {
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
    fn list(&self, query: &ListQuery) -> Option<Vec<(ObjectRef, Value)>> {
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
        let mut kinds = write(&self.of(&type_ref).kinds);
        let Some(store) = kinds.get_mut(&type_ref) else {
            return;
        };
        let key = Key::of(object);
        if store.keep == Keep::Whole || !store.covers(&object.namespace) {
            return;
        }
        let Some(held) = store.objects.get(&key) else {
            return;
        };
        let current = held
            .resource_version()
            .is_some_and(|held| found.resource_version() == Some(held.as_str()));
        if current {
            store.kept_whole.insert(key.clone(), true);
            store.insert(key, Packed::new(found, Keep::Whole));
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

/// A copy this process wrote (or deleted: `None`), newer than the watch until it catches up.
///
/// The copy is kept as its compact text, with its resourceVersion beside it: almost every
/// written copy is only compared by version with the watch's echo and then dropped, and
/// packing the object costs one buffer where a clone of the `Value` (and later its drop)
/// costs an allocation per field. It is parsed only for a read that comes before the echo.
#[derive(Debug, Clone)]
struct Written {
    object: Option<WrittenCopy>,
    at: Instant,
}

/// The text and the resourceVersion of a written copy.
#[derive(Debug, Clone)]
struct WrittenCopy {
    packed: Packed,
    resource_version: Option<String>,
}

impl WrittenCopy {
    fn new(object: &Value) -> Self {
        WrittenCopy {
            packed: Packed::new(object, Keep::Whole),
            resource_version: object.resource_version().map(str::to_string),
        }
    }

    /// Whether this copy is newer than a copy at `seen` by resourceVersion; unknown (not
    /// integers, or missing) counts as newer, so the written copy wins until the TTL.
    fn newer_than(&self, seen: Option<&str>) -> bool {
        newer_version(self.resource_version.as_deref(), seen)
    }
}

impl Written {
    /// The object as this process must see it, given the store's copy `seen` (rule 2):
    /// gone after its delete, else the newer of what it wrote and what the watch has.
    fn over(&self, seen: Option<Value>) -> Option<Value> {
        match (&self.object, seen) {
            (None, _) => None,
            (Some(mine), Some(seen)) if !mine.newer_than(seen.resource_version()) => Some(seen),
            // Text packed from a `Value` always parses; were it not to, the store's copy (or
            // none, which makes the reconcile read or write again) is the safe answer.
            (Some(mine), seen) => mine.packed.unpack().or(seen),
        }
    }
}

/// How often at most a write sweeps the written copies whose TTL has passed. Reads ignore
/// such a copy on their own; the sweep only gives the memory back, so a write need not walk
/// every copy the watch has not echoed yet.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The written copies by object, and when they were last swept.
#[derive(Debug)]
struct WrittenCopies {
    copies: HashMap<ObjectRef, Written>,
    swept: Instant,
}

impl Default for WrittenCopies {
    fn default() -> Self {
        WrittenCopies {
            copies: HashMap::new(),
            swept: Instant::now(),
        }
    }
}

impl WrittenCopies {
    /// The copy of `reference`, unless its TTL has passed (it is dropped then: the store
    /// answers again).
    fn fresh(&mut self, reference: &ObjectRef) -> Option<Written> {
        match self.copies.get(reference) {
            Some(w) if w.at.elapsed() > WRITTEN_TTL => {
                self.copies.remove(reference);
                None
            }
            w => w.cloned(),
        }
    }

    /// The copies of `type_ref` in `namespace` (`None`: all) whose TTL has not passed.
    fn fresh_of<'a>(
        &'a self,
        type_ref: &'a TypeRef,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjectRef, &'a Written)> + 'a {
        self.copies.iter().filter(move |(reference, written)| {
            reference.type_ref() == *type_ref
                && in_namespace(reference.namespace.as_deref(), namespace)
                && written.at.elapsed() <= WRITTEN_TTL
        })
    }

    /// The watch delivered `seen` of `reference` (`None`: its deletion): drop the copy it
    /// makes obsolete, or that has outlived its TTL.
    fn observed(&mut self, reference: &ObjectRef, seen: Option<&Value>) {
        let Some(entry) = self.copies.get(reference) else {
            return;
        };
        let obsolete = match (&entry.object, seen) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(mine), Some(seen)) => !mine.newer_than(seen.resource_version()),
        };
        if obsolete || entry.at.elapsed() > WRITTEN_TTL {
            self.copies.remove(reference);
        }
    }

    /// Keep `written` for `reference`, first sweeping the copies past their TTL if the
    /// last sweep is [`SWEEP_EVERY`] old.
    fn keep(&mut self, reference: ObjectRef, written: Written) {
        if written.at.duration_since(self.swept) >= SWEEP_EVERY {
            self.copies.retain(|_, w| w.at.elapsed() <= WRITTEN_TTL);
            self.swept = written.at;
        }
        self.copies.insert(reference, written);
    }

    /// Forget the copy of `reference`.
    fn forget(&mut self, reference: &ObjectRef) {
        self.copies.remove(reference);
    }
}

/// A [`Cluster`] that answers reads from the runtime's watches (see the module docs).
pub struct CachedCluster {
    live: Arc<LiveCluster>,
    stores: Arc<Stores>,
    written: Mutex<WrittenCopies>,
    stale: Mutex<HashSet<ObjectRef>>,
    own: OwnWrites,
}

impl CachedCluster {
    /// Reads from `stores`, falling back to and writing through `live`.
    pub(crate) fn new(live: Arc<LiveCluster>, stores: Arc<Stores>) -> Self {
        CachedCluster {
            live,
            stores,
            written: Mutex::default(),
            stale: Mutex::default(),
            own: OwnWrites::new(),
        }
    }

    /// The stores this cluster reads.
    pub(crate) fn stores(&self) -> &Arc<Stores> {
        &self.stores
    }

    /// This process's writes: in flight, or landed and not yet delivered by the watch.
    pub(crate) fn own_writes(&self) -> &OwnWrites {
        &self.own
    }

    /// What the watches hold of `object` (not what this process wrote since): for the
    /// kinds components deploy and the kinds CRs read, the part of it their stores keep
    /// (see the module docs).
    #[cfg(any(test, feature = "testing"))]
    pub fn lookup(&self, object: &ObjectRef) -> Cached {
        self.stores.lookup_metadata(object)
    }

    /// Every object of `type_ref` the watches have.
    #[cfg(any(test, feature = "testing"))]
    pub fn objects(&self, type_ref: &TypeRef) -> Vec<Value> {
        self.stores.objects(type_ref)
    }

    /// How many objects of `type_ref` the stores hold and the bytes of their texts (what
    /// `windlass_cache_objects` and `windlass_cache_bytes` export).
    #[cfg(any(test, feature = "testing"))]
    pub fn cache_size(&self, type_ref: &TypeRef) -> (usize, usize) {
        self.stores
            .sizes()
            .into_iter()
            .find(|(kind, _, _)| kind == type_ref)
            .map_or((0, 0), |(_, objects, bytes)| (objects, bytes))
    }

    /// Whether the watch of `type_ref` over `namespace` (`None`: all) has listed.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_synced(&self, type_ref: &TypeRef, namespace: Option<&str>) -> bool {
        self.stores.is_synced(type_ref, namespace)
    }

    /// Whether this process deleted `object` and the watch has not delivered the deletion
    /// yet.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_own_delete(&self, object: &ObjectRef) -> bool {
        self.own.is_own_delete(object)
    }

    /// Whether `object` at `resource_version` is a version this process wrote itself (or
    /// an older one) and the watch has not delivered yet: the runtime does not reconcile
    /// on the echo of its own writes. A write still in flight is not known here yet: see
    /// `OwnWrites::landing`.
    pub fn is_own_write(&self, object: &ObjectRef, resource_version: Option<&str>) -> bool {
        self.own.is_own(object, resource_version)
    }

    /// The watch delivered `object` (`None`: a deletion of `reference`): drop the written
    /// copy it makes obsolete, and the landed version whose echo it is.
    pub fn observed(&self, reference: &ObjectRef, object: Option<&Value>) {
        self.own.observed(
            reference,
            object.map(|o| o.resource_version().unwrap_or_default()),
        );
        self.written.lock().observed(reference, object);
    }

    fn remember(&self, reference: ObjectRef, object: Option<&Value>) {
        // Packed before the lock is taken: the reconciles' reads wait for none of it.
        let object = object.map(WrittenCopy::new);
        let mut written = self.written.lock();
        // The watch may deliver a write before the write's response is back: then the
        // store already has this version, and a copy kept now would never be cleared.
        // Asked under the lock: the router tells `observed` about an echo after the store
        // has it, so an echo the store does not have yet finds the copy kept here.
        if let Some(mine) = &object
            && let Some(seen) = self.stores.held_version(&reference)
            && !mine.newer_than(seen.as_deref())
        {
            written.forget(&reference);
            return;
        }
        let at = Instant::now();
        written.keep(reference, Written { object, at });
    }

    /// [`Cluster::get`], [`Cluster::get_own`] or [`Cluster::get_dependency`], as `what`
    /// says (see the module docs).
    async fn get_with(
        &self,
        object: &ObjectRef,
        what: Read,
    ) -> Result<Option<Value>, ClusterError> {
        let read_through = self.stale.lock().remove(object);
        if !read_through {
            // A written copy past its TTL is dropped: the store answers again.
            let written = self.written.lock().fresh(object);
            let cached = self.stores.lookup_with(object, what);
            match (written, cached) {
                (Some(written), Cached::Present(seen)) => return Ok(written.over(Some(seen))),
                (Some(written), _) => return Ok(written.over(None)),
                (None, Cached::Present(seen)) => return Ok(Some(seen)),
                (None, Cached::Absent) => return Ok(None),
                (None, Cached::Unknown) => {}
            }
        }
        let found = self.live.get(object).await?;
        if read_through {
            self.remember(object.clone(), found.as_ref());
        }
        if let (Read::Whole, Some(found)) = (what, &found) {
            self.stores.keep_whole(object, found);
        }
        Ok(found)
    }

    fn on_error<T>(
        &self,
        object: &ObjectRef,
        result: Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        if let Err(ClusterError::Conflict { .. }) = &result {
            self.stale.lock().insert(object.clone());
        }
        result
    }
}

#[async_trait]
impl Cluster for CachedCluster {
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.live.scope(type_ref).await
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.get_with(object, Read::Whole).await
    }

    async fn get_own(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.get_with(object, Read::Own).await
    }

    fn get_own_is_partial(&self) -> bool {
        true
    }

    async fn get_dependency(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.get_with(object, Read::Dependency).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        let (labels, fields) = query.selectors()?;
        // A field the server selects by for some kinds only (e.g. a Pod's spec.nodeName)
        // is the server's to judge, errors included.
        let cached = fields
            .is_universal()
            .then(|| self.stores.list(query))
            .flatten();
        let Some(cached) = cached else {
            return self.live.list(query).await;
        };
        // Read your writes (rule 2): a written copy or a tombstone newer than the store's.
        let mut objects: std::collections::BTreeMap<ObjectRef, Value> =
            cached.into_iter().collect();
        {
            let copies = self.written.lock();
            let namespace = query.namespace.as_deref();
            for (reference, written) in copies.fresh_of(&query.type_ref, namespace) {
                if let Some(current) = written.over(objects.remove(reference)) {
                    objects.insert(reference.clone(), current);
                }
            }
        }
        // In the API server's order: by namespace, then name.
        Ok(objects
            .into_values()
            .filter(|o| crate::cluster::selector::labels_match(&labels, o) && fields.matches(o))
            .collect())
    }

    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError> {
        let reference = ObjectRef::from_manifest(manifest)
            .map_err(|e| ClusterError::invalid("manifest", e.to_string()))?;
        let write = self.own.begin(&reference);
        let stored = self.on_error(&reference, self.live.apply(manifest, method).await)?;
        self.remember(reference, Some(&stored));
        write.landed(stored.resource_version());
        Ok(stored)
    }

    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> Result<Deletion, ClusterError> {
        let write = self.own.begin(object);
        let deletion = self.on_error(object, self.live.delete(object, uid).await)?;
        match deletion {
            Deletion::Deleted | Deletion::NotFound => {
                self.remember(object.clone(), None);
                write.deleted();
            }
            // Still there, with a deletionTimestamp: the watch tells.
            Deletion::Terminating => {
                self.written.lock().forget(object);
                self.stale.lock().insert(object.clone());
            }
        }
        Ok(deletion)
    }

    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        let write = self.own.begin(object);
        let stored = self.on_error(
            object,
            self.live
                .write_status(object, status, resource_version)
                .await,
        )?;
        self.remember(object.clone(), stored.as_ref());
        write.landed(stored.as_ref().and_then(|s| s.resource_version()));
        Ok(stored)
    }

    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError> {
        let write = self.own.begin(object);
        let result = self.live.patch(object, patch).await;
        // A failed `test` (422) means the copy the patch was computed from is stale.
        if let Err(ClusterError::Invalid { .. }) = &result {
            self.stale.lock().insert(object.clone());
        }
        let stored = self.on_error(object, result)?;
        self.remember(object.clone(), Some(&stored));
        write.landed(stored.resource_version());
        Ok(stored)
    }
}

/// Whether an object of the namespace `object` (`None`: cluster-scoped) is in `namespace`
/// (`None`: any); a cluster-scoped object is in every namespace a query names, as the API
/// server ignores the namespace for such kinds.
fn in_namespace(object: Option<&str>, namespace: Option<&str>) -> bool {
    namespace.is_none() || object.is_none() || object == namespace
}

fn read<T>(lock: &RwLock<T>) -> parking_lot::RwLockReadGuard<'_, T> {
    lock.read()
}

fn write<T>(lock: &RwLock<T>) -> parking_lot::RwLockWriteGuard<'_, T> {
    lock.write()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, rv: &str) -> (ObjectRef, Arc<Value>) {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}});
        (ObjectRef::from_manifest(&v).unwrap(), Arc::new(v))
    }

    #[test]
    fn a_kind_lent_to_shared_stores_is_answered_from_there_and_its_own_copies_go() {
        let shared = Arc::new(Stores::new());
        let shard = Stores::over(shared.clone());
        let (a, a_obj) = cm("a", "1");
        let (b, b_obj) = cm("b", "2");
        let kind = a.type_ref();
        // The shard watched the kind by label before; the shared stores watch it whole.
        shard.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
        shard.replace(&kind, Some("ns"), vec![(a.clone(), a_obj.clone())]);
        shared.declare(&kind, None, Keep::Whole);
        shared.replace(&kind, Some("ns"), vec![(b.clone(), b_obj.clone())]);
        assert_eq!(shard.lookup_metadata(&b), Cached::Unknown, "not lent yet");

        shard.lend(&kind);
        assert_eq!(shard.lookup(&b), Cached::Present((*b_obj).clone()));
        assert_eq!(
            shard.lookup(&a),
            Cached::Absent,
            "the shared watch is complete"
        );
        assert!(shard.is_synced(&kind, Some("ns")));
        assert_eq!(shard.held_version(&b), Some(Some("2".into())));
        assert!(shard.sizes().is_empty(), "the shard's own copies are gone");
        let secret = ObjectRef::new("v1", "Secret", Some("ns"), "s");
        assert_eq!(
            shard.lookup(&secret),
            Cached::Unknown,
            "other kinds: its own"
        );

        // Stores over nothing lend nothing.
        let alone = Stores::new();
        alone.declare(&kind, None, Keep::Whole);
        alone.replace(&kind, Some("ns"), vec![(a.clone(), a_obj.clone())]);
        alone.lend(&kind);
        assert_eq!(alone.lookup(&a), Cached::Present((*a_obj).clone()));
    }

    #[test]
    fn a_store_answers_only_for_what_its_watch_covers() {
        let stores = Stores::new();
        let (a, a_obj) = cm("a", "1");
        let (b, _) = cm("b", "1");
        assert_eq!(stores.lookup(&a), Cached::Unknown, "no watch yet");
        stores.declare(
            &a.type_ref(),
            Some(crate::annotations::OWNER_UID),
            Keep::Whole,
        );
        stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
        assert_eq!(stores.lookup(&a), Cached::Present((*a_obj).clone()));
        assert_eq!(
            stores.lookup(&b),
            Cached::Unknown,
            "label-scoped: ask the server"
        );
        let elsewhere = ObjectRef::new("v1", "ConfigMap", Some("other"), "a");
        assert_eq!(
            stores.lookup(&elsewhere),
            Cached::Unknown,
            "namespace not watched"
        );

        assert_eq!(
            stores.lookup_own(&b),
            Cached::Absent,
            "about to write it: no labelled object of that name exists"
        );
        stores.declare(&a.type_ref(), Some("app=other"), Keep::Whole);
        assert_eq!(
            stores.lookup_own(&b),
            Cached::Unknown,
            "another selector cannot tell"
        );
        // A whole watch replaces the label-scoped one: it knows once it has listed.
        stores.declare(&a.type_ref(), None, Keep::Whole);
        assert_eq!(stores.lookup(&b), Cached::Unknown, "not listed yet");
        assert_eq!(stores.lookup(&a), Cached::Unknown, "not listed yet");
        stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
        assert_eq!(stores.lookup(&b), Cached::Absent, "a complete watch knows");
        assert_eq!(stores.lookup(&a), Cached::Present((*a_obj).clone()));
    }

    #[test]
    fn a_relist_removes_what_is_gone_in_its_namespace_only() {
        let stores = Stores::new();
        let (a, a_obj) = cm("a", "1");
        let (b, b_obj) = cm("b", "1");
        let other = ObjectRef::new("v1", "ConfigMap", Some("other"), "c");
        stores.replace(
            &a.type_ref(),
            Some("ns"),
            vec![(a.clone(), a_obj), (b.clone(), b_obj.clone())],
        );
        stores.upsert(other.clone(), &json!({}));
        let gone = stores.replace(&a.type_ref(), Some("ns"), vec![(b.clone(), b_obj)]);
        assert_eq!(gone.len(), 1);
        assert!(
            stores.objects(&a.type_ref()).len() == 2,
            "b and the other namespace's c"
        );
    }

    #[test]
    fn a_store_lists_only_what_a_complete_watch_has_listed() {
        let stores = Stores::new();
        let (a, a_obj) = cm("a", "1");
        let query = ListQuery::new(a.type_ref(), Some("ns"));
        assert!(stores.list(&query).is_none(), "no watch yet");
        stores.declare(
            &a.type_ref(),
            Some(crate::annotations::OWNER_UID),
            Keep::Whole,
        );
        stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
        assert!(
            stores.list(&query).is_none(),
            "label-scoped: objects without the label exist too"
        );
        stores.declare(&a.type_ref(), None, Keep::Whole);
        assert!(
            stores.list(&query).is_none(),
            "the whole watch has not listed"
        );
        stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
        assert_eq!(stores.list(&query).map(|l| l.len()), Some(1));
        let everywhere = ListQuery::new(a.type_ref(), None);
        assert!(
            stores.list(&everywhere).is_none(),
            "only one namespace is listed"
        );
        let other = ListQuery::new(a.type_ref(), Some("other"));
        assert!(stores.list(&other).is_none(), "namespace not watched");

        stores.replace(&a.type_ref(), None, vec![(a.clone(), a_obj)]);
        assert_eq!(stores.list(&other).map(|l| l.len()), Some(0));
        assert_eq!(stores.list(&everywhere).map(|l| l.len()), Some(1));
    }

    /// A Deployment as the API server returns it, with what a rollout does not read.
    fn deployment(rv: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": rv,
                "generation": 2, "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {crate::annotations::OWNER_UID: "cr", "app": "web"},
                "annotations": {crate::annotations::APPLIED_HASH: "h",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"huge\": 1}"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "cr", "uid": "cr"}],
                "managedFields": [{"manager": crate::FIELD_MANAGER, "operation": "Apply",
                    "time": "2026-01-01T00:00:00Z", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "availableReplicas": 2, "conditions": [
                    {"type": "Available", "status": "True"},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})
    }

    #[test]
    fn a_slim_store_keeps_what_a_rollout_reads_and_answers_only_own_reads() {
        let stores = Stores::new();
        let full = deployment("5");
        let reference = ObjectRef::from_manifest(&full).unwrap();
        let kind = reference.type_ref();
        stores.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
        stores.replace(
            &kind,
            Some("ns"),
            vec![(reference.clone(), Arc::new(full.clone()))],
        );
        let Cached::Present(slim) = stores.lookup_own(&reference) else {
            panic!("an own read is answered");
        };
        let mut expected = full.clone();
        expected["spec"] = json!({"replicas": 2});
        let metadata = expected["metadata"].as_object_mut().unwrap();
        for dropped in ["creationTimestamp", "ownerReferences"] {
            metadata.remove(dropped);
        }
        metadata["labels"].as_object_mut().unwrap().remove("app");
        metadata["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("kubectl.kubernetes.io/last-applied-configuration");
        metadata["managedFields"][0]
            .as_object_mut()
            .unwrap()
            .remove("time");
        assert_eq!(slim, expected);
        // What deploying and verifying read answers the same from the slim copy.
        assert_eq!(
            crate::verify::verify_object(&slim),
            crate::verify::verify_object(&full)
        );
        assert!(crate::verify::verify_object(&slim));
        assert_eq!(
            crate::rollout::drift::drift(
                &full,
                Some(&slim),
                crate::cluster::WriteMethod::Apply,
                crate::FIELD_MANAGER
            ),
            crate::rollout::drift::drift(
                &full,
                Some(&full),
                crate::cluster::WriteMethod::Apply,
                crate::FIELD_MANAGER
            ),
        );
        assert_eq!(
            stores.lookup(&reference),
            Cached::Unknown,
            "a whole read asks the server"
        );
        assert_eq!(stores.lookup_metadata(&reference), Cached::Present(slim));
        let sizes = stores.sizes();
        assert_eq!(sizes.len(), 1);
        assert_eq!((sizes[0].1, sizes[0].2), (1, expected.to_string().len()));

        // Watched whole from now on: the partial copies go, and the store answers once listed.
        stores.declare(&kind, None, Keep::Whole);
        assert_eq!(stores.lookup_own(&reference), Cached::Unknown);
        assert_eq!(stores.sizes()[0].2, 0);
        stores.replace(
            &kind,
            Some("ns"),
            vec![(reference.clone(), Arc::new(full.clone()))],
        );
        assert_eq!(stores.lookup(&reference), Cached::Present(full));
    }

    /// A Secret windlass applied (labelled, with its managed fields) and 64 KiB of data.
    fn big_secret(data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "tls", "namespace": "ns", "resourceVersion": "7", "uid": "u1",
                "labels": {crate::annotations::OWNER_UID: "cr-uid", "app": "web"},
                "managedFields": [{"manager": crate::FIELD_MANAGER, "operation": "Apply",
                    "fieldsV1": {"f:data": {"f:key": {}}}, "time": "2026-01-01T00:00:00Z"}]},
            "type": "Opaque",
            "data": {"key": data.repeat(64 * 1024 / data.len())}})
    }

    #[test]
    fn a_digest_store_keeps_a_digest_of_the_data_and_answers_dependency_and_own_reads_only() {
        let stores = Stores::new();
        let secret = big_secret("aGVsbG8h");
        let reference = ObjectRef::from_manifest(&secret).unwrap();
        let kind = reference.type_ref();
        stores.declare(&kind, None, Keep::Digest);
        stores.replace(
            &kind,
            Some("ns"),
            vec![(reference.clone(), Arc::new(secret.clone()))],
        );
        let Cached::Present(kept) = stores.lookup_with(&reference, Read::Dependency) else {
            panic!("a dependency read is answered");
        };
        assert!(kept.get("data").is_none(), "no data is kept: {kept}");
        assert_eq!(kept[DATA_DIGEST], json!(data_digest(&secret)));
        // What a dependency hash and a rollout read of it is the same as of the whole.
        let dependency = crate::rollout::dependency_hash::Dependency {
            kind: crate::rollout::dependency_hash::DependencyKind::Secret,
            name: "tls".into(),
            optional: false,
        };
        assert_eq!(
            crate::rollout::dependency_hash::hash([(&dependency, Some(&kept))]),
            crate::rollout::dependency_hash::hash([(&dependency, Some(&secret))]),
        );
        assert_eq!(kept.resource_version(), Some("7"));
        assert_eq!(
            kept.label(crate::annotations::OWNER_UID),
            Some("cr-uid"),
            "windlass's own label, which the rollout reads"
        );
        assert_eq!(stores.lookup_own(&reference), Cached::Present(kept.clone()));
        let sizes = stores.sizes();
        assert!(
            sizes[0].2 < 1024,
            "{} bytes kept of a 64 KiB Secret",
            sizes[0].2
        );
        // Another object's data changes its digest.
        let changed = big_secret("Ynll");
        assert_ne!(data_digest(&changed), data_digest(&secret));

        // Whole reads, and lists, ask the server: the store has no data to give.
        assert_eq!(stores.lookup(&reference), Cached::Unknown);
        let query = ListQuery::new(kind.clone(), Some("ns"));
        assert!(stores.list(&query).is_none());
        // A store of the kind that is complete knows what is absent.
        let other = ObjectRef::new("v1", "Secret", Some("ns"), "other");
        assert_eq!(stores.lookup_with(&other, Read::Dependency), Cached::Absent);

        // A slim store has no digest to give a dependency read; becoming a digest store,
        // it lists afresh.
        let slim = Stores::new();
        slim.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
        slim.replace(
            &kind,
            Some("ns"),
            vec![(reference.clone(), Arc::new(secret.clone()))],
        );
        assert_eq!(
            slim.lookup_with(&reference, Read::Dependency),
            Cached::Unknown
        );
        slim.declare(&kind, None, Keep::Digest);
        assert_eq!(slim.sizes()[0].2, 0, "the slim copies go");
        assert_eq!(
            slim.lookup_with(&reference, Read::Dependency),
            Cached::Unknown,
            "not listed yet"
        );
    }

    #[test]
    fn an_object_read_whole_from_a_partial_store_is_kept_whole_until_it_goes() {
        let stores = Stores::new();
        let secret = big_secret("aGVsbG8h");
        let reference = ObjectRef::from_manifest(&secret).unwrap();
        let kind = reference.type_ref();
        let mut other = big_secret("Ynll");
        other["metadata"]["name"] = json!("other");
        let other_ref = ObjectRef::from_manifest(&other).unwrap();
        stores.declare(&kind, None, Keep::Digest);
        stores.replace(
            &kind,
            Some("ns"),
            vec![
                (reference.clone(), Arc::new(secret.clone())),
                (other_ref.clone(), Arc::new(other.clone())),
            ],
        );
        let digests = stores.sizes()[0].2;
        assert_eq!(stores.lookup(&reference), Cached::Unknown);

        // The server's answer is the version held: kept whole at once.
        stores.keep_whole(&reference, &secret);
        assert_eq!(stores.lookup(&reference), Cached::Present(secret.clone()));
        assert!(stores.sizes()[0].2 > digests + 60 * 1024);
        assert_eq!(
            stores.lookup(&other_ref),
            Cached::Unknown,
            "the rest stay digests"
        );
        // And so is the watch's next copy of it.
        let mut newer = secret.clone();
        newer["metadata"]["resourceVersion"] = json!("8");
        newer["data"]["key"] = json!("bmV3");
        stores.upsert(reference.clone(), &newer);
        assert_eq!(stores.lookup(&reference), Cached::Present(newer.clone()));
        // Gone: a copy of it that comes back is a digest again.
        stores.remove(&reference);
        stores.upsert(reference.clone(), &newer);
        assert_eq!(stores.lookup(&reference), Cached::Unknown);
        assert_eq!(stores.sizes()[0].2, digests);

        // An answer older or newer than the copy held: the watch's next copy is whole.
        let mut stale = other.clone();
        stale["metadata"]["resourceVersion"] = json!("6");
        stores.keep_whole(&other_ref, &stale);
        assert_eq!(stores.lookup(&other_ref), Cached::Unknown);
        stores.upsert(other_ref.clone(), &other);
        assert_eq!(stores.lookup(&other_ref), Cached::Present(other.clone()));

        // An object the store does not hold (outside its watch) is not marked.
        let label_scoped = Stores::new();
        label_scoped.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
        label_scoped.replace(&kind, Some("ns"), Vec::new());
        label_scoped.keep_whole(&reference, &secret);
        label_scoped.upsert(reference.clone(), &secret);
        assert_eq!(label_scoped.lookup(&reference), Cached::Unknown);
    }

    #[test]
    fn a_list_stored_as_it_came_drops_what_it_no_longer_has_when_it_ends() {
        let stores = Stores::new();
        let (a, a_obj) = cm("a", "1");
        let (b, b_obj) = cm("b", "1");
        let kind = a.type_ref();
        stores.declare(&kind, None, Keep::Whole);
        stores.upsert(a.clone(), &a_obj);
        assert_eq!(stores.lookup(&a), Cached::Unknown, "not listed yet");
        let gone = stores.retain_listed(&kind, Some("ns"), &HashSet::from([a.clone()]));
        assert!(gone.is_empty());
        assert_eq!(stores.lookup(&a), Cached::Present((*a_obj).clone()));
        // A relist that reports b only: a went while the watch was down.
        stores.upsert(b.clone(), &b_obj);
        let gone = stores.retain_listed(&kind, Some("ns"), &HashSet::from([b.clone()]));
        assert_eq!(gone, vec![a_obj]);
        assert_eq!(stores.lookup(&a), Cached::Absent);
        assert_eq!(stores.sizes()[0].1, 1);
        assert_eq!(stores.sizes()[0].2, b_obj.to_string().len());
    }

    /// A cluster over `stores` whose API server is never asked (nothing listens there).
    fn cached(stores: Arc<Stores>) -> CachedCluster {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let live = LiveCluster::new(kube::Client::try_from(config).unwrap());
        CachedCluster::new(Arc::new(live), stores)
    }

    /// The ConfigMap `a` at `rv` with `data`.
    fn cm_with(rv: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
                "managedFields": [{"manager": crate::FIELD_MANAGER, "operation": "Apply",
                    "fieldsV1": {"f:data": {"f:k": {}}}}]},
            "data": {"k": data}})
    }

    #[tokio::test]
    async fn a_written_copy_answers_whole_until_the_watch_delivers_its_version() {
        let stores = Arc::new(Stores::new());
        let v1 = cm_with("1", "old");
        let a = ObjectRef::from_manifest(&v1).unwrap();
        stores.declare(&a.type_ref(), None, Keep::Whole);
        stores.replace(
            &a.type_ref(),
            Some("ns"),
            vec![(a.clone(), Arc::new(v1.clone()))],
        );
        let cluster = cached(stores.clone());

        let v2 = cm_with("2", "new");
        cluster.remember(a.clone(), Some(&v2));
        assert_eq!(
            cluster.get(&a).await.unwrap(),
            Some(v2.clone()),
            "read your write"
        );
        assert_eq!(cluster.get_own(&a).await.unwrap(), Some(v2.clone()));
        let listed = cluster
            .list(&ListQuery::new(a.type_ref(), Some("ns")))
            .await;
        assert_eq!(listed.unwrap(), vec![v2.clone()], "lists read it too");

        // An older version delivered: the copy stays.
        cluster.observed(&a, Some(&v1));
        assert_eq!(cluster.get(&a).await.unwrap(), Some(v2.clone()));
        // Its echo: the store answers, and the copy is gone.
        stores.upsert(a.clone(), &v2);
        cluster.observed(&a, Some(&v2));
        assert!(cluster.written.lock().copies.is_empty());
        assert_eq!(cluster.get(&a).await.unwrap(), Some(v2.clone()));

        // A write whose echo came before its response: nothing is kept.
        let v3 = cm_with("3", "newer");
        stores.upsert(a.clone(), &v3);
        cluster.remember(a.clone(), Some(&v3));
        assert!(
            cluster.written.lock().copies.is_empty(),
            "the store has it already"
        );

        // A delete: gone for this process until the watch says so.
        cluster.remember(a.clone(), None);
        assert_eq!(cluster.get(&a).await.unwrap(), None);
        cluster.observed(&a, None);
        assert!(cluster.written.lock().copies.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_written_copy_past_its_ttl_gives_way_and_is_swept_by_a_later_write() {
        let stores = Arc::new(Stores::new());
        let v1 = cm_with("1", "old");
        let a = ObjectRef::from_manifest(&v1).unwrap();
        let b = ObjectRef::new("v1", "ConfigMap", Some("ns"), "b");
        stores.declare(&a.type_ref(), None, Keep::Whole);
        stores.replace(
            &a.type_ref(),
            Some("ns"),
            vec![(a.clone(), Arc::new(v1.clone()))],
        );
        let cluster = cached(stores);
        // A version the watch never delivers.
        cluster.remember(a.clone(), Some(&cm_with("2", "new")));
        tokio::time::advance(WRITTEN_TTL + std::time::Duration::from_millis(1)).await;
        let listed = cluster
            .list(&ListQuery::new(a.type_ref(), Some("ns")))
            .await;
        assert_eq!(
            listed.unwrap(),
            vec![v1.clone()],
            "past its TTL: the store's"
        );
        assert!(
            cluster.written.lock().copies.contains_key(&a),
            "not swept by a read"
        );
        let mut b_object = cm_with("1", "b");
        b_object["metadata"]["name"] = json!("b");
        cluster.remember(b.clone(), Some(&b_object));
        let written = cluster.written.lock();
        assert!(!written.copies.contains_key(&a), "swept by the next write");
        assert!(written.copies.contains_key(&b));
    }

    #[test]
    fn a_packed_copy_tells_its_resource_version_without_being_unpacked() {
        let whole = Packed::new(&deployment("7"), Keep::Whole);
        let slim = Packed::new(&deployment("8"), Keep::Slim);
        assert_eq!(whole.resource_version().as_deref(), Some("7"));
        assert_eq!(slim.resource_version().as_deref(), Some("8"));
        let without = Packed::new(&json!({"metadata": {"name": "x"}}), Keep::Whole);
        assert_eq!(without.resource_version(), None);
        assert_eq!(
            Packed::new(&json!({}), Keep::Whole).resource_version(),
            None
        );

        let stores = Stores::new();
        let reference = ObjectRef::from_manifest(&deployment("9")).unwrap();
        assert_eq!(stores.held_version(&reference), None, "no watch");
        stores.declare(
            &reference.type_ref(),
            Some(crate::annotations::OWNER_UID),
            Keep::Slim,
        );
        stores.upsert(reference.clone(), &deployment("9"));
        assert_eq!(stores.held_version(&reference), None, "not listed yet");
        stores.retain_listed(
            &reference.type_ref(),
            Some("ns"),
            &HashSet::from([reference.clone()]),
        );
        assert_eq!(stores.held_version(&reference), Some(Some("9".to_string())));
    }

    #[test]
    fn a_key_gives_back_the_reference_it_was_made_of() {
        let kind = TypeRef::new("v1", "ConfigMap");
        let namespaced = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let key = Key::of(&namespaced);
        assert_eq!(key.namespace(), Some("ns"));
        assert_eq!(key.reference(&kind), namespaced);
        let cluster = ObjectRef::new("v1", "Namespace", None, "ns");
        let key = Key::of(&cluster);
        assert_eq!(key.namespace(), None);
        assert_eq!(key.reference(&TypeRef::new("v1", "Namespace")), cluster);
        assert_ne!(
            Key::of(&namespaced),
            Key::of(&ObjectRef::new("v1", "ConfigMap", Some("n"), "sa"))
        );
    }

    #[test]
    fn resource_versions_compare_as_integers() {
        let (_, v9) = cm("a", "9");
        let (_, v10) = cm("a", "10");
        let (v9, v10) = (WrittenCopy::new(&v9), WrittenCopy::new(&v10));
        assert!(v10.newer_than(Some("9")));
        assert!(!v9.newer_than(Some("10")));
        assert!(!v10.newer_than(Some("10")));
        assert!(v10.newer_than(None), "unknown counts as newer");
        assert!(v10.newer_than(Some("abc")), "not an integer: newer");
    }
}
