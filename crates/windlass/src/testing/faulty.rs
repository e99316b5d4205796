//! [`FaultyCluster`]: a cluster that makes chosen calls fail, always or a given number of
//! times, around any other.

use parking_lot::Mutex;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::cluster::{Cluster, Deletion, ListQuery, Scope, WriteMethod};
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef};

/// A cluster operation, for [`FaultyCluster`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`Cluster::scope`]
    Scope,
    /// [`Cluster::get`]
    Get,
    /// [`Cluster::list`]
    List,
    /// [`Cluster::apply`]
    Apply,
    /// [`Cluster::delete`]
    Delete,
    /// [`Cluster::write_status`]
    WriteStatus,
    /// [`Cluster::patch`]
    Patch,
}

#[derive(Debug, Clone)]
struct Fault {
    op: Op,
    kind: Option<String>,
    error: ClusterError,
    remaining: Option<usize>,
}

/// A cluster that fails chosen operations.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use windlass::cluster::{Cluster, MemoryCluster};
/// use windlass::testing::{FaultyCluster, Op};
/// use windlass::{ClusterError, object::ObjectRef};
///
/// let cluster = FaultyCluster::new(Arc::new(MemoryCluster::new()));
/// cluster.fail_times(Op::Get, Some("ConfigMap"), ClusterError::api("down"), 1);
/// let cm = ObjectRef::new("v1", "ConfigMap", Some("default"), "x");
/// assert!(cluster.get(&cm).await.is_err());
/// assert!(cluster.get(&cm).await.is_ok(), "failed once only");
/// # });
/// ```
pub struct FaultyCluster {
    inner: Arc<dyn Cluster>,
    faults: Mutex<Vec<Fault>>,
}

impl FaultyCluster {
    /// Wrap `inner`; nothing fails until told to.
    pub fn new(inner: Arc<dyn Cluster>) -> Self {
        FaultyCluster {
            inner,
            faults: Mutex::new(Vec::new()),
        }
    }

    /// Make every `op` (on objects of `kind`, or any kind) fail with `error`.
    pub fn fail(&self, op: Op, kind: Option<&str>, error: ClusterError) {
        self.push(op, kind, error, None);
    }

    /// Make the next `times` calls of `op` fail.
    pub fn fail_times(&self, op: Op, kind: Option<&str>, error: ClusterError, times: usize) {
        self.push(op, kind, error, Some(times));
    }

    /// Stop failing.
    pub fn heal(&self) {
        self.faults.lock().clear();
    }

    fn push(&self, op: Op, kind: Option<&str>, error: ClusterError, remaining: Option<usize>) {
        self.faults.lock().push(Fault {
            op,
            kind: kind.map(str::to_string),
            error,
            remaining,
        });
    }

    fn check(&self, op: Op, kind: &str) -> std::result::Result<(), ClusterError> {
        let mut faults = self.faults.lock();
        let hit = faults.iter_mut().find(|f| {
            f.op == op
                && f.kind.as_deref().is_none_or(|k| k == kind)
                && f.remaining.is_none_or(|n| n > 0)
        });
        match hit {
            Some(fault) => {
                if let Some(n) = &mut fault.remaining {
                    *n -= 1;
                }
                Err(fault.error.clone())
            }
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Cluster for FaultyCluster {
    async fn scope(&self, type_ref: &TypeRef) -> std::result::Result<Scope, ClusterError> {
        self.check(Op::Scope, &type_ref.kind)?;
        self.inner.scope(type_ref).await
    }
    async fn get(&self, object: &ObjectRef) -> std::result::Result<Option<Value>, ClusterError> {
        self.check(Op::Get, &object.kind)?;
        self.inner.get(object).await
    }
    async fn list(&self, query: &ListQuery) -> std::result::Result<Vec<Value>, ClusterError> {
        self.check(Op::List, &query.type_ref.kind)?;
        self.inner.list(query).await
    }
    async fn apply(
        &self,
        manifest: &Value,
        method: WriteMethod,
    ) -> std::result::Result<Value, ClusterError> {
        self.check(Op::Apply, manifest.kind().unwrap_or_default())?;
        self.inner.apply(manifest, method).await
    }
    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> std::result::Result<Deletion, ClusterError> {
        self.check(Op::Delete, &object.kind)?;
        self.inner.delete(object, uid).await
    }
    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> std::result::Result<Option<Value>, ClusterError> {
        self.check(Op::WriteStatus, &object.kind)?;
        self.inner
            .write_status(object, status, resource_version)
            .await
    }
    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> std::result::Result<Value, ClusterError> {
        self.check(Op::Patch, &object.kind)?;
        self.inner.patch(object, patch).await
    }
}
