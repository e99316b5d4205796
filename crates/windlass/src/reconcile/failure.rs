//! The error path of a reconcile: its log line and Events, what the queue does next (the
//! outcomes table in the [module docs](super)), and the error status.

use serde_json::Value;

use crate::controller::Controller;
use crate::error::{ClusterError, Error};
use crate::events::CrEvent;
use crate::object::ObjectRef;
use crate::session::{Ledger, Session};
use crate::status::{self, StatusUpdate};

use super::status_write::ErrorStatus;
use super::{Action, Failure, Reconciler};

impl<C: Controller> Reconciler<C> {
    /// The error path's status: when windlass manages the CR's status and the CR is still
    /// there, write the error status over the CR as the reconcile last saw it. A failure
    /// to write it is logged; the reconcile's outcome stays the same.
    pub(super) async fn record_failure(
        &self,
        cr: &ObjectRef,
        manifest: &Value,
        ledger: &Ledger,
        failure: &Failure,
        start: Option<&StatusUpdate>,
        made: Option<&Session<C>>,
    ) {
        if status::is_managed::<C>(&self.operator)
            && let Some(current) = ledger.seen(cr).flatten()
        {
            let author = made.and_then(Session::status_changes);
            let error = ErrorStatus {
                manifest,
                failure,
                inventory: ledger.inventory(),
                start,
                author,
            };
            if let Err(e) = self.write_error_status(cr, current, error).await {
                tracing::warn!(error = %e, "cannot write the error status");
            }
        }
    }

    /// A failed reconcile's log line and Events; what the queue does next.
    pub(super) async fn fail(
        &self,
        manifest: &Value,
        error: &Error,
        starting: Option<CrEvent>,
    ) -> Action {
        if error.is_fatal() {
            tracing::warn!(error = %error, "reconcile failed");
            self.publish(manifest, CrEvent::rollout_failed(error)).await;
        } else {
            tracing::info!(reason = %error, "not yet");
            if let Some(started) = starting {
                self.publish(manifest, started).await;
            }
            if !status::is_managed::<C>(&self.operator) {
                self.publish(manifest, CrEvent::rollout_waiting(error.to_string()))
                    .await;
            }
        }
        self.failure_outcome(error)
    }

    /// What a reconcile that ended in `error` asks for next (see the module docs).
    fn failure_outcome(&self, error: &Error) -> Action {
        match error {
            e if !e.is_fatal() => Action::RequeueAfter(self.operator.requeue_after()),
            Error::Config(_) | Error::Cluster(ClusterError::Invalid { .. }) => Action::Done,
            _ => Action::Retry,
        }
    }
}
