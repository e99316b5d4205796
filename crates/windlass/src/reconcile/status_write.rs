//! The status write: the start status computed before the rollout, the completion (or
//! error) status after it, written together in one conditional write, recomputed and
//! retried on a conflict.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::controller::Controller;
use crate::dag::CompletionState;
use crate::error::{ClusterError, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::progress::{Event, emit};
use crate::session::Session;
use crate::status::{self, NextStatus, ReadyReason, StatusUpdate, UpdatingReason, condition};

use super::{Failure, Reconciler};
use crate::status::{Inventory, reasons_for_error};

/// How often a status write is tried when other writers keep changing the CR.
pub const STATUS_WRITE_ATTEMPTS: u32 = 5;

/// What a failed reconcile writes to the CR's status: how it failed, and what it got to.
pub(super) struct ErrorStatus<'a> {
    /// The CR as the reconcile read it: its generation is the one the status observed.
    pub(super) manifest: &'a Value,
    /// The error, with the rollout state it carries.
    pub(super) failure: &'a Failure,
    /// What windlass applied for the CR, as far as the reconcile got.
    pub(super) inventory: Arc<Inventory>,
    /// The start status, if the reconcile got that far.
    pub(super) start: Option<&'a StatusUpdate>,
    /// The author's status changes (see [`Session::update_status`]), if the reconcile
    /// made a session.
    pub(super) author: Option<Map<String, Value>>,
}

impl<C: Controller> Reconciler<C> {
    /// The status after a failed reconcile: the start status (if the reconcile got that
    /// far) and the error's reasons, with the inventory and the author's changes, in one
    /// write. The CR as the last write of the reconcile left it is `current`.
    pub(super) async fn write_error_status(
        &self,
        cr: &ObjectRef,
        current: Arc<Value>,
        error: ErrorStatus<'_>,
    ) -> Result<Option<Arc<Value>>> {
        let ErrorStatus {
            manifest,
            failure,
            inventory,
            start,
            author,
        } = error;
        let (ready, updating) = reasons_for_error(&failure.error);
        let message = failure.error.to_string();
        let update = StatusUpdate {
            ready: ready.map(|r| (r, message.clone())),
            updating: Some((updating, message)),
            components: failure.state.clone(),
            observed_generation: manifest.generation(),
            inventory: Some(inventory),
            ..Default::default()
        };
        self.write_status(cr, current, |status| {
            self.after_start(status, &cr.kind, start, author.as_ref(), |_| update.clone())
        })
        .await
    }

    /// `status` with the author's changes (see [`Session::update_status`]), the start
    /// status of this reconcile (if it got that far) and then `then` (told the started
    /// status's `Ready` reason) applied: all land in one write.
    pub(super) fn after_start<'s>(
        &self,
        status: &'s Value,
        kind: &str,
        start: Option<&StatusUpdate>,
        author: Option<&Map<String, Value>>,
        then: impl FnOnce(Option<ReadyReason>) -> StatusUpdate,
    ) -> NextStatus<'s> {
        let mut next = NextStatus::over(status);
        for (key, value) in author.into_iter().flatten() {
            match value {
                Value::Null => next.remove(key),
                value => next.set(key, value.clone()),
            }
        }
        let now = crate::object::timestamp_now();
        if let Some(start) = start {
            self.update(&mut next, kind, start.clone(), &now);
        }
        let update = then(next.condition_reason(status::READY));
        self.update(&mut next, kind, update, &now);
        next
    }

    /// Apply `update` to `status`, stamped `now`.
    fn update(&self, status: &mut NextStatus<'_>, kind: &str, mut update: StatusUpdate, now: &str) {
        update.operator_version = self.operator.status.operator_version.clone();
        status::apply_update(status, kind, &update, now);
    }

    /// Compute the CR's next status from `current` (the CR as last read or written) with
    /// `next`, and write it if anything but timestamps changed, conditional on
    /// `current`'s resourceVersion. On a conflict the CR is read again and the status
    /// recomputed from what is stored now, so another writer's conditions survive; after
    /// [`STATUS_WRITE_ATTEMPTS`] conflicts in a row the conflict is returned (a transient
    /// error: the reconcile is retried). Returns the CR as stored after the write, or
    /// `None` if it is gone.
    pub(super) async fn write_status(
        &self,
        cr: &ObjectRef,
        mut current: Arc<Value>,
        next: impl for<'s> Fn(&'s Value) -> NextStatus<'s>,
    ) -> Result<Option<Arc<Value>>> {
        let mut attempt = 1;
        loop {
            let status = current.get("status").unwrap_or(&Value::Null);
            let next = next(status);
            let changed = next.changes_anything();
            let reason = |t| next.condition_reason::<String>(t).unwrap_or_default();
            let (ready, updating) = (reason(status::READY), reason(status::UPDATING));
            let written = if changed {
                let next = next.into_value();
                match self
                    .cluster
                    .write_status(cr, &next, current.resource_version())
                    .await
                {
                    Ok(Some(written)) => Some(written),
                    Ok(None) => return Ok(None),
                    Err(ClusterError::Conflict { .. }) if attempt < STATUS_WRITE_ATTEMPTS => {
                        attempt += 1;
                        tracing::debug!("status write conflicted; reading the CR again");
                        match self.cluster.get_shared(cr).await? {
                            Some(fresh) => current = fresh,
                            None => return Ok(None),
                        }
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            } else {
                None
            };
            emit(
                self.observer.as_ref(),
                Event::Status {
                    ready,
                    updating,
                    written: changed,
                },
            );
            return Ok(Some(written.map(Arc::new).unwrap_or(current)));
        }
    }
}

/// The status at the start of a reconcile: `Ready` keeps its reason (or
/// `Initializing` before the first verified version); a version change sets
/// `Updating=VersionChange` and `Ready=InProgress`.
///
/// A CR without a version has no `versions.reconciled` to wait for: its `Ready` reason
/// simply carries over; resetting it to `Initializing` on every reconcile would make the
/// condition flap. Dropping the version from a CR is not a version change.
pub(super) fn start_status<C: Controller>(session: &Session<C>, current: &Value) -> StatusUpdate {
    let ready = condition(current, status::READY).ok().flatten();
    let first_rollout_pending = session.version().is_some() && session.current_version().is_none();
    let mut reason = ready
        .and_then(|c| c["reason"].as_str())
        .and_then(|r| r.parse::<ReadyReason>().ok())
        .filter(|_| !first_rollout_pending)
        .unwrap_or(ReadyReason::Initializing);
    let message = ready
        .and_then(|c| c["message"].as_str())
        .unwrap_or("Initial Rollout Started")
        .to_string();
    let mut updating = None;
    if let (Some(old), Some(new)) = (session.current_version(), session.version())
        && old != new
    {
        updating = Some((
            UpdatingReason::VersionChange,
            format!("Version Change Started: [{old}] -> [{new}]"),
        ));
        reason = ReadyReason::InProgress;
    }
    StatusUpdate {
        ready: Some((reason, message)),
        updating,
        supported_versions: Some(session.supported_versions().names()),
        observed_generation: session.manifest().generation(),
        ..Default::default()
    }
}

/// The status after a rollout that raised no error, following a status whose `Ready`
/// reason is `ready`.
pub(super) fn completion_status<C: Controller>(
    session: &Session<C>,
    state: &CompletionState,
    ready: Option<ReadyReason>,
) -> StatusUpdate {
    let mut update = StatusUpdate {
        components: Some(state.clone()),
        observed_generation: session.manifest().generation(),
        ..Default::default()
    };
    if state.verify_completed() {
        update.ready = Some((ReadyReason::Stable, "Verify Complete".into()));
        update.updating = Some((UpdatingReason::Stable, "Rollout Complete".into()));
        update.reconciled_version = session.version().map(str::to_string);
    } else {
        let initializing = ready == Some(ReadyReason::Initializing);
        if !initializing {
            update.ready = Some((ReadyReason::InProgress, "Verify InProgress".into()));
        }
        // A component whose edge condition said "not yet" has not started: it waits for
        // a precondition, not for verification.
        let unstarted = state
            .waiting()
            .iter()
            .filter(|(c, _)| state.unstarted().contains(c));
        let gated = waiting_message(unstarted);
        let all = waiting_message(state.waiting().iter());
        update.updating = Some(match (gated.is_empty(), all.is_empty()) {
            (false, _) => (
                UpdatingReason::PreconditionWait,
                format!("Waiting: {gated}"),
            ),
            (true, true) => (
                UpdatingReason::VerifyWait,
                "Component verification incomplete".into(),
            ),
            (true, false) => (
                UpdatingReason::VerifyWait,
                format!("Component verification incomplete: {all}"),
            ),
        });
    }
    update
}

/// `<component>: <reason>; …` of components that wait.
pub(super) fn waiting_message<'a>(waiting: impl Iterator<Item = &'a (String, String)>) -> String {
    let reasons: Vec<String> = waiting
        .map(|(component, reason)| format!("{component}: {reason}"))
        .collect();
    reasons.join("; ")
}
