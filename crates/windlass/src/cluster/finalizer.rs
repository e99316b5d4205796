//! Finalizers on the CR, added and removed without losing anyone's update.
//!
//! Both writes are JSON patches that `test` the finalizer list they were computed from,
//! as kube-runtime's `finalizer` helper does: a concurrent edit of anything else (labels,
//! spec, status) does not disturb them, and a concurrent change of the list itself makes
//! the test fail (HTTP 422) so the CR is read again and the patch recomputed. The helper
//! itself is not used because it owns the whole reconcile (apply / cleanup events), where
//! windlass's finalizer is one step of its own pipeline.
//!
//! Two finalizers can hold a CR: the controller's own ([`crate::controller::Controller::finalizer`],
//! which runs its `finalize_components`), and windlass's [`CLEANUP_FINALIZER`], added
//! before windlass first writes an object the garbage collector cannot reach from the
//! CR (an object in another namespace, or a cluster-scoped object, of a namespaced CR:
//! Kubernetes allows no owner reference there). When such a CR is deleted, windlass
//! deletes those objects (as recorded in `status.inventory`) and then removes the
//! cleanup finalizer.

use serde_json::{Value, json};

use super::Cluster;
use crate::error::{ClusterError, Error, Result};
use crate::object::{ManifestExt, ObjectRef, deleted_by_write};

pub(crate) use crate::annotations::CLEANUP_FINALIZER;

/// Whether Kubernetes' garbage collector deletes an object in `namespace` (`None`:
/// cluster-scoped) when `owner` goes: whether an owner reference is allowed there (a
/// cluster-scoped owner, or the owner's own namespace).
pub(crate) fn collected_with(namespace: Option<&str>, owner: &Value) -> bool {
    collected_in(namespace, owner.namespace())
}

/// [`collected_with`] an owner in `owner_namespace` (`None`: cluster-scoped).
pub(crate) fn collected_in(namespace: Option<&str>, owner_namespace: Option<&str>) -> bool {
    match owner_namespace {
        None => true,
        Some(owner_namespace) => namespace == Some(owner_namespace),
    }
}

/// How often a finalizer patch is tried when others keep changing the finalizer list.
const FINALIZER_ATTEMPTS: u32 = 5;

/// Add `finalizer` to the CR with a JSON patch that tests the finalizer list it was
/// computed from: a concurrent edit of anything else (labels, spec) does not disturb it; a
/// concurrent change of the list makes the test fail (HTTP 422), and the CR is read again
/// and the patch recomputed. Returns the CR as stored.
///
/// A 422 whose test held (the list read back is the one tested) is the server refusing the
/// patched CR itself, e.g. a finalizer that is not a qualified name: it is returned as
/// the [`ClusterError::Invalid`] it is, since retrying cannot help.
pub(crate) async fn add(
    cluster: &dyn Cluster,
    cr: &ObjectRef,
    mut current: Value,
    finalizer: &str,
) -> Result<Value> {
    for _ in 1..FINALIZER_ATTEMPTS {
        if current.finalizers().contains(&finalizer) {
            return Ok(current);
        }
        let list = current["metadata"]["finalizers"].clone();
        let ops = if list.is_array() {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": list},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ])
        } else {
            // `test` with null: the list is still absent.
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ])
        };
        match cluster.patch(cr, &finalizer_patch(ops)?).await {
            Ok(written) => return Ok(written),
            Err(e @ (ClusterError::Invalid { .. } | ClusterError::Conflict { .. })) => {
                current = cluster
                    .get(cr)
                    .await?
                    .ok_or_else(|| ClusterError::NotFound(cr.to_string()))?;
                if matches!(e, ClusterError::Invalid { .. })
                    && current["metadata"]["finalizers"] == list
                {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Cluster(ClusterError::Conflict {
        object: cr.to_string(),
        message: format!("the finalizer list kept changing while adding {finalizer}"),
    }))
}

/// Remove `finalizer` from the CR if it is there, testing that the entry at its
/// index is still it; a concurrent change of the list makes the CR be read again. A 422
/// whose test held (the entry is still there) is the server refusing the CR itself (say,
/// a stored CR that a newer CRD schema no longer accepts) and is returned as it is.
/// Returns the CR as stored, or `None` once it is gone.
pub(crate) async fn remove(
    cluster: &dyn Cluster,
    cr: &ObjectRef,
    mut current: Value,
    finalizer: &str,
) -> Result<Option<Value>> {
    for _ in 1..FINALIZER_ATTEMPTS {
        let Some(index) = current.finalizers().iter().position(|f| *f == finalizer) else {
            return Ok(Some(current));
        };
        let path = format!("/metadata/finalizers/{index}");
        let ops = json!([
            {"op": "test", "path": path, "value": finalizer},
            {"op": "remove", "path": path},
        ]);
        match cluster.patch(cr, &finalizer_patch(ops)?).await {
            // The last finalizer of a CR being deleted: the patch deleted it.
            Ok(written) if deleted_by_write(&written) => return Ok(None),
            Ok(written) => return Ok(Some(written)),
            Err(ClusterError::NotFound(_)) => return Ok(None),
            Err(e @ (ClusterError::Invalid { .. } | ClusterError::Conflict { .. })) => {
                match cluster.get(cr).await? {
                    Some(fresh) => current = fresh,
                    None => return Ok(None),
                }
                if matches!(e, ClusterError::Invalid { .. })
                    && current.finalizers().get(index) == Some(&finalizer)
                {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Cluster(ClusterError::Conflict {
        object: cr.to_string(),
        message: format!("the finalizer list kept changing while removing {finalizer}"),
    }))
}

fn finalizer_patch(ops: Value) -> Result<json_patch::Patch> {
    serde_json::from_value(ops).map_err(|e| Error::with_source("finalizer patch", e))
}
