//! What a reconcile of a CR being deleted does differently: which finalizers matter to it,
//! the graph it rolls out, and the cleanup of what the garbage collector cannot reach.

use serde_json::Value;

use crate::cluster::finalizer::{self, CLEANUP_FINALIZER};
use crate::controller::{Components, Controller};
use crate::error::{ClusterError, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::session::{Ledger, Session};

use super::Reconciler;

impl<C: Controller> Reconciler<C> {
    /// Delete what the CR owns outside the garbage collector's reach (see
    /// [`finalizer`]), each object only if it is still the one windlass applied,
    /// then remove the cleanup finalizer. Returns the CR as stored after, `None` if gone.
    pub(super) async fn clean_up(
        &self,
        cr: &ObjectRef,
        current: Value,
        ledger: &Ledger,
    ) -> Result<Option<Value>> {
        let inventory = ledger.inventory();
        for component in inventory.components() {
            for (object, uid) in inventory.of(&component) {
                if finalizer::collected_with(object.namespace.as_deref(), &current) {
                    continue;
                }
                let uid = match uid.is_empty() {
                    false => uid,
                    // Pending: recorded before its first write, which may not have happened.
                    true => match self.pending_uid(&object, &current).await? {
                        Some(uid) => uid,
                        None => continue,
                    },
                };
                match self.cluster.delete(&object, Some(&uid)).await {
                    Ok(_) | Err(ClusterError::UnknownKind { .. }) => {
                        tracing::info!(object = %object, "deleted with the CR");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        finalizer::remove(self.cluster.as_ref(), cr, current, CLEANUP_FINALIZER).await
    }

    /// The uid of the object a pending inventory entry names, if it exists and carries the
    /// ownership label of the CR `current` (else it is not the CR's to delete).
    async fn pending_uid(&self, object: &ObjectRef, current: &Value) -> Result<Option<String>> {
        let live = match self.cluster.get_own(object).await {
            Err(ClusterError::UnknownKind { .. }) => None,
            other => other?,
        };
        Ok(live
            .filter(|live| {
                current.uid().is_some()
                    && live.label(crate::annotations::OWNER_UID) == current.uid()
            })
            .and_then(|live| live.uid().map(str::to_string)))
    }
}

/// The graph rolled out while a CR is being deleted: the controller's finalization, or none.
pub(super) fn finalize_components<C: Controller>(
    controller: &C,
    session: &Session<C>,
) -> Result<Components<C>> {
    match controller.finalizer() {
        Some(finalize) => finalize.finalize_components(session),
        None => Ok(Components::new()),
    }
}

/// The finalizers that matter to one reconcile of a CR.
pub(super) struct Finalizers {
    /// The CR is being deleted.
    pub(super) finalizing: bool,
    /// The controller's own finalizer, if it has one.
    pub(super) controllers: Option<String>,
    /// windlass's cleanup finalizer is on the CR.
    pub(super) cleanup: bool,
}

impl Finalizers {
    /// The finalizers of the CR `manifest` that matter to `controller`.
    pub(super) fn of<C: Controller>(controller: &C, manifest: &Value) -> Self {
        Finalizers {
            finalizing: manifest.is_terminating(),
            controllers: controller.finalizer().map(|f| f.name()),
            cleanup: manifest.finalizers().contains(&CLEANUP_FINALIZER),
        }
    }

    /// Whether the controller's finalizer is on the CR.
    pub(super) fn ours_holds(&self, manifest: &Value) -> bool {
        self.controllers
            .as_deref()
            .is_some_and(|f| manifest.finalizers().contains(&f))
    }

    /// The controller's finalizer, when it is to be added (not while deleting).
    pub(super) fn to_add(&self, manifest: &Value) -> Option<&str> {
        self.controllers
            .as_deref()
            .filter(|f| !self.finalizing && !manifest.finalizers().contains(f))
    }
}
