//! All cluster access of a rollout goes through one trait, [`Cluster`]. Two implementations
//! share it, so dry-run and production run the same rollout code:
//!
//! - [`MemoryCluster`]: a faithful in-process API server: uids, monotonic resourceVersions,
//!   generation, owner references with garbage collection, finalizers and deletion
//!   timestamps, namespaces, label and field selectors, status apart from spec, watch
//!   events. It is what `--dry-run` and unit tests run on.
//! - [`LiveCluster`]: a kube-rs `Client` (server-side apply with a fixed field manager).
//!
//! The trait speaks JSON manifests ([`serde_json::Value`]) because rollouts patch, merge and
//! compare them generically; typed access is layered on top in [`crate::session`].

pub(crate) mod finalizer;
mod live;
mod memory;
pub(crate) mod parsed;
mod requests;
pub(crate) mod selector;
mod timeout;
pub(crate) mod validation;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub use live::LiveCluster;
pub use memory::MemoryCluster;
pub(crate) use memory::{WatchEvent, WatchEventType};
// Request counting serves the runtime's metrics; its types are public for tests (feature
// `testing`), which count what an operator asks of the API server.
#[cfg(not(feature = "testing"))]
pub(crate) use requests::RequestCounter;
#[cfg(feature = "testing")]
pub use requests::{Counting, CountingLayer, RequestCounter, RequestCounts, RequestKey, Verb};
pub use selector::{FieldSelector, Selector, SelectorError, parse_labels};
pub use timeout::{TimedOut, Timeout, TimeoutLayer};
pub use validation::{LabelError, validate_label_key, validate_label_value};

use crate::error::ClusterError;
use crate::object::{ObjectRef, TypeRef};

/// Whether objects of a kind live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Objects live in a namespace (ConfigMap, Deployment, most CRs).
    Namespaced,
    /// Objects are cluster-wide (Namespace, Node, ClusterRole, CRDs).
    Cluster,
}

/// How a manifest is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum WriteMethod {
    /// Server-side apply with windlass's field manager, conflicts forced: fields this
    /// operator stops setting are removed, fields other managers set are kept.
    #[default]
    Apply,
    /// Merge the manifest into the live object (a JSON merge patch): nothing is removed
    /// unless set to `null`.
    Update,
    /// Replace the whole object (HTTP PUT): fields not in the manifest are dropped.
    Replace,
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// The object is gone.
    Deleted,
    /// The object has finalizers: it now has a deletionTimestamp and goes away once they are
    /// removed.
    Terminating,
    /// There was no such object.
    NotFound,
}

/// Which objects a [`Cluster::list`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// The kind to list.
    pub type_ref: TypeRef,
    /// `None` lists across all namespaces (and is required for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// A label selector (`None`: every object); [`parse_labels`] reads one written as
    /// `app=web,tier in (db,cache)`.
    pub label_selector: Option<Selector>,
    /// A field selector such as `metadata.name=web`.
    pub field_selector: Option<String>,
}

impl ListQuery {
    /// All objects of a kind in one namespace (or all namespaces with `None`).
    pub fn new(type_ref: TypeRef, namespace: Option<&str>) -> Self {
        ListQuery {
            type_ref,
            namespace: namespace.map(str::to_string),
            label_selector: None,
            field_selector: None,
        }
    }
    /// Only objects whose labels match `selector`.
    pub fn labels(mut self, selector: Selector) -> Self {
        self.label_selector = Some(selector);
        self
    }
    /// Only objects whose fields match `selector`.
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// The query's label and field selectors, parsed; a malformed one is
    /// [`ClusterError::Invalid`], as the API server answers it.
    pub(crate) fn selectors(&self) -> Result<(Selector, FieldSelector), ClusterError> {
        let fields = self
            .field_selector
            .as_deref()
            .unwrap_or("")
            .parse()
            .map_err(|e: SelectorError| {
                ClusterError::invalid(self.type_ref.to_string(), e.to_string())
            })?;
        Ok((self.label_selector.clone().unwrap_or_default(), fields))
    }
}

/// Where a copy of a Secret or ConfigMap that keeps the digest of its data in place of the
/// data holds the digest (see [`Cluster::get_dependency`]): a top-level field no
/// Kubernetes object has, so it cannot be mistaken for one of the object's own.
pub const DATA_DIGEST: &str = "windlass.dev/data-digest";

/// The operations a rollout needs from a Kubernetes API server.
///
/// Implementations must be cheap to share (`Arc<dyn Cluster>`) and safe to call
/// concurrently. Every method is one API round trip on a live cluster.
#[async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Whether objects of `type_ref` are namespaced; [`ClusterError::UnknownKind`] if the
    /// server does not serve the kind.
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError>;

    /// The object, or `None` if it does not exist.
    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError>;

    /// The object as [`Cluster::get`] reads it, asked by a rollout about to write it: an
    /// object without windlass's ownership label would be overwritten all the same, so a
    /// cluster that sees every object carrying that label (the runtime's watch caches) may
    /// answer "absent" for one it does not have, without asking the server.
    ///
    /// The copy may hold only what a rollout reads of an object it applied, when
    /// [`Cluster::get_own_is_partial`] says so: `apiVersion`, `kind`, `status`,
    /// `spec.replicas`, and of `metadata` the name, namespace, uid, resourceVersion,
    /// generation, deletionTimestamp, windlass's own (`windlass.dev/…`) labels and
    /// annotations, and the `manager`, `operation`, `subresource` and `fieldsV1` of
    /// windlass's `managedFields` entry.
    async fn get_own(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.get(object).await
    }

    /// Whether [`Cluster::get_own`] may answer with a partial copy (see there): the
    /// runtime's watch caches keep only that much of the objects windlass applied. A
    /// reader that needs more reads with [`Cluster::get`]. Default `false`.
    fn get_own_is_partial(&self) -> bool {
        false
    }

    /// [`Cluster::get`], as a shared copy, for a reader that only looks at the object (a
    /// reconcile reads its CR this way). A cluster that keeps its objects shared answers
    /// without copying one (the in-memory cluster does); the default is `get`'s copy.
    async fn get_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        Ok(self.get(object).await?.map(Arc::new))
    }

    /// [`Cluster::get_own`], as a shared copy: what a rollout reads only to look at it
    /// (every object it renders, on every reconcile); see [`Cluster::get_shared`]. The
    /// default is `get_own`'s copy.
    async fn get_own_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        Ok(self.get_own(object).await?.map(Arc::new))
    }

    /// The resourceVersion of the copy [`Cluster::get_own`] would answer with, when the
    /// cluster holds one and can tell its version without making the copy; `None` when it
    /// cannot (the default), or when the object is absent. A reconcile that finds nothing
    /// to do asks this first: an object it found in sync at that version before needs no
    /// reading (see `session::settled`), and a watch cache, which keeps its copies as JSON
    /// text, would otherwise parse every object of every CR on every periodic resync.
    /// Asking it is not reading: a later [`Cluster::get_own`] reads as if it had not been
    /// asked.
    async fn own_version(&self, object: &ObjectRef) -> Result<Option<String>, ClusterError> {
        let _ = object;
        Ok(None)
    }

    /// The Secret or ConfigMap `object` as [`Cluster::get`] reads it, asked by a dependency
    /// hash, which reads no more of it than its name, labels, resourceVersion and data. A
    /// cluster that keeps such objects without their data (the runtime's watch of a kind
    /// CRs read) may answer with a copy that has, in the place of `data` and `binaryData`,
    /// their digest under [`DATA_DIGEST`], and keeps of the rest what
    /// [`Cluster::get_own`] may keep. Default: [`Cluster::get`].
    async fn get_dependency(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.get(object).await
    }

    /// The objects matching `query`, ordered by namespace and name.
    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError>;

    /// Create or update the object described by `manifest` and return it as stored. The
    /// manifest's `status` is ignored: status is written with [`Cluster::write_status`].
    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError>;

    /// Delete the object. Dependents (objects whose owner references all point at deleted
    /// objects) are garbage-collected by the cluster.
    ///
    /// With `uid`, only the object with that uid is deleted (the server checks it, a
    /// delete precondition): an object of the same name that replaced it, perhaps someone
    /// else's, is left alone and the answer is [`Deletion::NotFound`].
    async fn delete(&self, object: &ObjectRef, uid: Option<&str>)
    -> Result<Deletion, ClusterError>;

    /// Replace the object's status and return the object as stored; `None` if the object
    /// does not exist.
    ///
    /// With `resource_version`, the write succeeds only if the object is still at that
    /// version, else it fails with [`ClusterError::Conflict`]: a status computed from one
    /// read never overwrites what another writer stored since. Without it, the current
    /// version is read first (one more request on a live cluster).
    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError>;

    /// Apply a JSON patch (RFC 6902) to the object, e.g. to add or remove a finalizer with a
    /// `test` guard. A failed `test` is a [`ClusterError::Invalid`], as API servers answer
    /// it with HTTP 422: re-read the object and try again.
    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError>;
}
