//! A cluster that answers reads from another and writes nothing: it records what a
//! reconcile would write, and why. `describe` reconciles a live CR through it to show what
//! the operator would do now, without doing it.

use parking_lot::Mutex;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::cluster::{Cluster, Deletion, ListQuery, Scope, WriteMethod};
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::rollout::drift::{Drift, drift};

/// A write a reconcile asked for and [`Plan`] did not make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Planned {
    /// The object would be applied, for this reason ([`Drift::Absent`]: created).
    Apply(ObjectRef, Drift),
    /// The object would be deleted.
    Delete(ObjectRef),
}

/// Reads from `inner`; every write is recorded instead of made (see the module docs).
pub(super) struct Plan {
    inner: Arc<dyn Cluster>,
    planned: Mutex<Vec<Planned>>,
}

impl Plan {
    /// A plan over `inner`.
    pub(super) fn new(inner: Arc<dyn Cluster>) -> Self {
        Plan {
            inner,
            planned: Mutex::new(Vec::new()),
        }
    }

    /// The writes asked for so far, in order. Status writes and finalizer patches are not
    /// among them: they are bookkeeping, not changes to what the CR describes.
    pub(super) fn planned(&self) -> Vec<Planned> {
        self.planned.lock().clone()
    }

    fn record(&self, planned: Planned) {
        self.planned.lock().push(planned);
    }
}

#[async_trait]
impl Cluster for Plan {
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.inner.scope(type_ref).await
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.inner.get(object).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        self.inner.list(query).await
    }

    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError> {
        let reference = ObjectRef::from_manifest(manifest)
            .map_err(|e| ClusterError::invalid("a rendered object".to_string(), e.to_string()))?;
        let live = self.inner.get(&reference).await?;
        let why = drift(manifest, live.as_ref(), method, crate::FIELD_MANAGER);
        self.record(Planned::Apply(reference.clone(), why));
        // What the rest of the reconcile reads back: the live object where there is one
        // (its uid and status are real), else the manifest as a server would store it.
        Ok(live.unwrap_or_else(|| {
            let mut stored = manifest.clone();
            let metadata = stored.metadata_mut();
            metadata.insert("uid".into(), json!(format!("planned-{reference}")));
            metadata.insert("resourceVersion".into(), json!("0"));
            stored
        }))
    }

    async fn delete(
        &self,
        object: &ObjectRef,
        _uid: Option<&str>,
    ) -> Result<Deletion, ClusterError> {
        if self.inner.get(object).await?.is_none() {
            return Ok(Deletion::NotFound);
        }
        self.record(Planned::Delete(object.clone()));
        Ok(Deletion::Deleted)
    }

    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        _resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        Ok(self.inner.get(object).await?.map(|mut live| {
            live["status"] = status.clone();
            live
        }))
    }

    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError> {
        let mut live = self
            .inner
            .get(object)
            .await?
            .ok_or_else(|| ClusterError::NotFound(object.to_string()))?;
        crate::values::apply_json_patch(&mut live, patch)
            .map_err(|e| ClusterError::invalid(object.to_string(), e.to_string()))?;
        Ok(live)
    }
}
