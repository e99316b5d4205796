//! What a reconcile reports while it runs: one typed event per step, logged with `tracing`
//! and handed to an [`Observer`] (the CLI prints them as the rollout happens).

use std::fmt;

use crate::object::ObjectRef;

/// The two phases of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Render and apply (or delete, for disabled components).
    Deploy,
    /// Check that what was applied became healthy.
    Verify,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Deploy => "deploy",
            Phase::Verify => "verify",
        })
    }
}

/// How a rollout phase ended, as [`Controller::after_phase`] is told.
///
/// [`Controller::after_phase`]: crate::controller::Controller::after_phase
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseOutcome {
    /// Every component got through the phase.
    Completed,
    /// Some component is not through yet ("not yet", or it never started); nothing failed.
    Incomplete,
    /// A component failed.
    Failed,
}

impl fmt::Display for PhaseOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PhaseOutcome::Completed => "completed",
            PhaseOutcome::Incomplete => "incomplete",
            PhaseOutcome::Failed => "failed",
        })
    }
}

/// One step of a reconcile.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A reconcile of the CR began.
    ReconcileStarted {
        /// The CR.
        cr: ObjectRef,
        /// The reconcile id that tags its log lines.
        id: String,
    },
    /// A rollout phase began.
    PhaseStarted(Phase),
    /// A component rendered its objects (a disabled one too: those are what it deletes).
    Rendered {
        /// The component.
        component: String,
        /// Whether it is disabled.
        disabled: bool,
        /// The objects, in apply order.
        objects: Vec<ObjectRef>,
    },
    /// The Secrets and ConfigMaps the pods of an enabled component read (see
    /// `rollout::dependency_hash`) that its rollout took from the cluster, not from what it
    /// renders: a change of one of them concerns the CR. Empty when there are none, and
    /// for a disabled component, so that what a component stopped reading is forgotten.
    Dependencies {
        /// The CR.
        cr: ObjectRef,
        /// The component.
        component: String,
        /// The dependencies, sorted, each with the `resourceVersion` of the copy the hash
        /// was computed from (`None`: it was absent), so that a change between the read
        /// and the runtime's hearing of this report is not missed.
        objects: Vec<(ObjectRef, Option<String>)>,
    },
    /// A component's objects were applied; `unchanged` ones needed no write.
    Deployed {
        /// The component.
        component: String,
        /// Objects written.
        applied: Vec<ObjectRef>,
        /// Objects already as desired.
        unchanged: Vec<ObjectRef>,
    },
    /// A disabled component's objects were deleted.
    Disabled {
        /// The component.
        component: String,
        /// Objects that existed and were deleted.
        deleted: Vec<ObjectRef>,
    },
    /// A component verified, or not yet.
    Verified {
        /// The component.
        component: String,
        /// Whether it is healthy.
        ok: bool,
    },
    /// A component failed or stopped short in a phase.
    Halted {
        /// The component.
        component: String,
        /// The phase.
        phase: Phase,
        /// Whether this is a failure (or only "not yet").
        failure: bool,
        /// What went wrong, if known.
        message: Option<String>,
    },
    /// The controller's `after_phase` hook ran.
    Hook {
        /// After which phase.
        phase: Phase,
        /// How that phase ended.
        outcome: PhaseOutcome,
        /// Its verdict.
        passed: bool,
    },
    /// The CR's status was written (or found unchanged).
    Status {
        /// `Ready` reason.
        ready: String,
        /// `Updating` reason.
        updating: String,
        /// Whether a write happened.
        written: bool,
    },
}

/// Receives reconcile events, e.g. to print progress. Must not block.
pub trait Observer: Send + Sync {
    /// Called for every event, in order, from the reconciling task.
    fn event(&self, event: &Event);

    /// Whether [`Observer::event`] does anything with events. When it does not and the log
    /// does not show them either, the events of each component's steps are not made at all
    /// (a rollout makes several per component).
    fn listens(&self) -> bool {
        true
    }
}

/// An observer that ignores everything (events are still logged).
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn event(&self, _: &Event) {}

    fn listens(&self) -> bool {
        false
    }
}

/// Whether an event would go anywhere: `observer` listens, or the log shows events (they
/// are logged at `debug` and `trace`; halts, at `warn`, are always made).
pub(crate) fn wanted(observer: &dyn Observer) -> bool {
    observer.listens() || tracing::enabled!(tracing::Level::DEBUG)
}

/// Log the event with `tracing`, then hand it to the observer.
pub(crate) fn emit(observer: &dyn Observer, event: Event) {
    log(&event);
    observer.event(&event);
}

/// Log an event about the reconcile as a whole; those about one component go to
/// [`log_component_step`]. Each at its level: `warn` for a halt, `trace` for the detail
/// of renders, `debug` for the rest.
fn log(event: &Event) {
    match event {
        Event::ReconcileStarted { cr, id } => tracing::debug!(%cr, id, "reconcile started"),
        Event::PhaseStarted(phase) => tracing::debug!(%phase, "phase started"),
        Event::Hook {
            phase,
            outcome,
            passed,
        } => tracing::debug!(%phase, %outcome, passed, "after_phase hook ran"),
        Event::Status {
            ready,
            updating,
            written,
        } => {
            tracing::debug!(ready, updating, written, "status")
        }
        Event::Rendered { .. }
        | Event::Dependencies { .. }
        | Event::Deployed { .. }
        | Event::Disabled { .. }
        | Event::Verified { .. }
        | Event::Halted { .. } => log_component_step(event),
    }
}

/// Log an event about one component's step in the rollout.
fn log_component_step(event: &Event) {
    match event {
        Event::Rendered {
            component,
            disabled,
            objects,
        } => tracing::trace!(
            component,
            disabled,
            objects = objects.len(),
            "component rendered"
        ),
        Event::Dependencies {
            cr,
            component,
            objects,
        } => tracing::trace!(
            %cr,
            component,
            dependencies = objects.len(),
            "component reads dependencies"
        ),
        Event::Deployed {
            component,
            applied,
            unchanged,
        } => tracing::debug!(
            component,
            applied = applied.len(),
            unchanged = unchanged.len(),
            "component deployed"
        ),
        Event::Disabled { component, deleted } => {
            tracing::debug!(component, deleted = deleted.len(), "component disabled")
        }
        Event::Verified { component, ok } => tracing::debug!(component, ok, "component verified"),
        Event::Halted {
            component,
            phase,
            failure,
            message,
        } => tracing::warn!(
            component,
            %phase,
            failure,
            message = message.as_deref().unwrap_or(""),
            "component halted"
        ),
        // About the reconcile as a whole: logged by `log`.
        Event::ReconcileStarted { .. }
        | Event::PhaseStarted(_)
        | Event::Hook { .. }
        | Event::Status { .. } => {}
    }
}
