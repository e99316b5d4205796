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
//!    watch delivers exactly it, or for [`WRITTEN_TTL`]). A delete leaves a tombstone
//!    while the store still holds the object, until the watch delivers the deletion (so
//!    does a write the server carries out as the deletion: the last finalizer of an object
//!    being deleted removed). So a reconcile never reads an older copy than it wrote,
//!    which would make it write again, nor one it deleted.
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
//! whole ([`Stores::keep_whole`]) until it is deleted: what components read whole is a
//! handful of objects (a CA's Secret, a database's credentials), read on every reconcile.
//! A written copy answers no read the store's newer partial copy shows to be stale.
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

use parking_lot::Mutex;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::time::Instant;

pub use super::echo::WRITTEN_TTL;
use super::echo::{OwnWrites, Write};
use crate::cluster::{Cluster, Deletion, ListQuery, LiveCluster, Scope, WriteMethod};
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef, deleted_by_write, newer_version};

mod packed;
mod store;
#[cfg(test)]
mod tests;
mod written;

pub(crate) use packed::Keep;
use packed::Read;
pub use store::{Cached, Stores};
use written::{Written, WrittenCopies, WrittenCopy};

/// A [`Cluster`] that answers reads from the runtime's watches (see the module docs).
pub struct CachedCluster {
    live: Arc<LiveCluster>,
    stores: Arc<Stores>,
    written: Mutex<WrittenCopies>,
    /// Asked on every read: hashed with foldhash, as the stores are.
    stale: Mutex<foldhash::HashSet<ObjectRef>>,
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

    /// Keep the copy of `reference` this process wrote (or read through) until the watch
    /// delivers it.
    fn remember(&self, reference: ObjectRef, object: &Value) {
        // Packed before the lock is taken: the reconciles' reads wait for none of it.
        let mine = WrittenCopy::new(object);
        let mut written = self.written.lock();
        // The watch may deliver a write before the write's response is back: then the
        // store already has this version, and a copy kept now would never be cleared.
        // Asked under the lock: the router tells `observed` about an echo after the store
        // has it, so an echo the store does not have yet finds the copy kept here.
        if let Some(seen) = self.stores.held_version(&reference)
            && !mine.newer_than(seen.as_deref())
        {
            written.forget(&reference);
            return;
        }
        let at = Instant::now();
        let object = Some(mine);
        written.keep(reference, Written { object, at });
    }

    /// This process learned that `reference` is gone (it deleted it, or the server said
    /// so); `last`, when known, is the version it had. A tombstone is kept only while a
    /// store still holds a copy (not newer than `last`) for it to overrule: once none does,
    /// the watch has delivered the deletion (the store answers "absent") or does not cover
    /// the object (the server is asked), and a tombstone kept then, which nothing the
    /// watch delivers would clear, would hide the object re-created under the same name
    /// until its TTL. Asked under the lock, as in [`CachedCluster::remember`].
    fn remember_gone(&self, reference: ObjectRef, last: Option<&str>) {
        let mut written = self.written.lock();
        match self.stores.held_version(&reference) {
            Some(held) if last.is_none_or(|last| !newer_version(held.as_deref(), Some(last))) => {
                let at = Instant::now();
                written.keep(reference, Written { object: None, at });
            }
            _ => written.forget(&reference),
        }
    }

    /// A write of `reference` answered `stored`: keep the copy it wrote, or, when the
    /// write deleted the object ([`deleted_by_write`]: the answer then carries the version
    /// the object had, which the store may hold already), that it is gone.
    fn landed(&self, reference: ObjectRef, stored: &Value, write: Write<'_>) {
        if deleted_by_write(stored) {
            self.remember_gone(reference, stored.resource_version());
            write.deleted();
        } else {
            self.remember(reference, stored);
            write.landed(stored.resource_version());
        }
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
                // The store holds a copy too partial for this read, but as new as the one
                // written or newer (another writer since): the written copy is stale.
                (Some(written), Cached::Unknown)
                    if written.outdated_by(self.stores.held_version(object)) => {}
                (Some(written), _) => return Ok(written.over(None)),
                (None, Cached::Present(seen)) => return Ok(Some(seen)),
                (None, Cached::Absent) => return Ok(None),
                (None, Cached::Unknown) => {}
            }
        }
        let found = self.live.get(object).await?;
        if read_through {
            match &found {
                Some(found) => self.remember(object.clone(), found),
                None => self.remember_gone(object.clone(), None),
            }
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

    async fn own_version(&self, object: &ObjectRef) -> Result<Option<String>, ClusterError> {
        // Only where `get_own` would answer with the store's copy alone: no read through
        // pending after a conflict, no copy this process wrote to lay over it.
        if self.stale.lock().contains(object) || self.written.lock().fresh(object).is_some() {
            return Ok(None);
        }
        Ok(self.stores.held_version(object).flatten())
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
        self.landed(reference, &stored, write);
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
                self.remember_gone(object.clone(), None);
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
        match &stored {
            Some(stored) => self.landed(object.clone(), stored, write),
            None => {
                self.remember_gone(object.clone(), None);
                write.landed(None);
            }
        }
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
        self.landed(object.clone(), &stored, write);
        Ok(stored)
    }
}
