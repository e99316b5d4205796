//! One reconcile of one CR, from reading it to the outcome: the pipeline, the finalizer,
//! the status at the start and end, and the mapping of every error to a status and a retry.
//! [`Reconciler::reconcile`] never fails and never panics: whatever goes wrong ends in the
//! CR's status, a log line, and an [`Action`].
//!
//! 1. Read the CR. Gone → done. Paused (`windlass.dev/pause-execution: "true"`) → done,
//!    even when it is being deleted, so a paused CR's finalizer stays.
//! 2. Merge the controller's CR defaults under it and parse it into the typed CR; a
//!    malformed spec is a config error naming the field.
//! 3. Check strict versioning; layer the backend config (controller defaults ←
//!    ConfigMap named by `windlass.dev/config-defaults` ← `spec.configOverrides`); load
//!    the temporary patches. While the CR is being deleted none of these may stop the
//!    deletion: a missing ConfigMap or patch (a terminating namespace may have removed it
//!    already) or an unsupported version is logged and skipped.
//! 4. Add the controller's finalizer (not while deleting); compute the start status — it is
//!    written together with the outcome in step 6, not on its own.
//! 5. Build the graph (`components`, or the finalizer's `finalize_components` while deleting) and roll
//!    it out. A recorded error, or a failed rollout, is an error of the reconcile. Objects
//!    of components no longer in the graph are deleted.
//! 6. Write the start and completion status in one write (or the start and error
//!    status, when the reconcile failed); ask `should_requeue`; when deleting and no requeue is
//!    needed, remove the finalizer.
//!
//! # Requests
//!
//! The CR is read once. Every later step works on the copy the last write returned:
//! the finalizer patch, the status writes and `should_requeue` read nothing. Status
//! writes are conditional on the resourceVersion the status was computed from; on a
//! conflict (another writer in between) the CR is read again, the status recomputed from
//! what is stored now (keeping the other writer's conditions) and written again. The
//! finalizer is added and removed with JSON patches that test the finalizer list, so a
//! concurrent label edit does not disturb them.
//!
//! # Outcomes
//!
//! | the reconcile ended with | outcome |
//! | --- | --- |
//! | success, `should_requeue` says no | [`Action::Done`] |
//! | success, requeue wanted; or "not yet" (a precondition, an unverified component) | [`Action::RequeueAfter`] |
//! | success, but a dependency hash was computed from a Secret or ConfigMap the rollout overwrote later (`rollout::dependency_hash`) | [`Action::RequeueAfter`] [`STALE_DEPENDENCY_HASH_REQUEUE`], whatever `should_requeue` says |
//! | invalid input: a config error, an object the server refused as invalid (422) | [`Action::Done`]: nothing changes until the CR (or the operator) does |
//! | anything else (cluster errors, conflicts, forbidden, component failures, panics) | [`Action::Retry`] with back-off |
//!
//! # Files
//!
//! This file holds the pipeline; `input` makes the session (steps 2 and 3),
//! `status_write` computes and writes the status, `finalizing` is what a CR being deleted
//! needs, and `failure` is the error path.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;
use tracing::Instrument;

use crate::Action;
use crate::annotations;
use crate::cluster::Cluster;
use crate::cluster::finalizer;
use crate::config::OperatorConfig;
use crate::controller::{Components, Controller};
pub use crate::dag::CompletionState;
use crate::error::{ClusterError, Error, Result};
use crate::events::{CrEvent, EventSink};
use crate::object::{ManifestExt, ObjectRef};
use crate::progress::{Event, Observer, Quiet, emit};
use crate::session::settled::Settled;
use crate::session::{Ledger, Session};
use crate::status::inventory::Inventory;
use crate::status::{self, StatusUpdate, condition};
use crate::version::Versions;

mod failure;
mod finalizing;
mod input;
mod status_write;

use finalizing::{Finalizers, finalize_components};
use input::reconcile_id;
use status_write::{completion_status, start_status};

/// What one reconcile did.
#[derive(Debug, Clone)]
pub struct Report {
    /// The reconcile id, as in the logs.
    pub id: String,
    /// The CR.
    pub cr: ObjectRef,
    /// What to do next.
    pub outcome: Action,
    /// The rollout's outcome, if a rollout ran.
    pub state: Option<CompletionState>,
    /// The error that ended the reconcile, if any (also written to the status).
    pub error: Option<Error>,
}

/// What a reconcile got to, for its error path: the start status, the session, and the
/// RolloutStarted event not published yet.
struct Progress<'a, C: Controller> {
    start: &'a mut Option<StatusUpdate>,
    made: &'a mut Option<Session<C>>,
    starting: &'a mut Option<CrEvent>,
}

/// An error of the reconcile together with the rollout state it carries.
struct Failure {
    error: Error,
    state: Option<CompletionState>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure { error, state: None }
    }
}

impl From<ClusterError> for Failure {
    fn from(error: ClusterError) -> Self {
        Failure {
            error: error.into(),
            state: None,
        }
    }
}

/// Reconciles CRs of one controller against one cluster.
pub struct Reconciler<C: Controller> {
    controller: Arc<C>,
    /// The versions a CR may ask for: the controller's, narrowed by the configuration.
    versions: Arc<Versions>,
    cluster: Arc<dyn Cluster>,
    operator: Arc<OperatorConfig>,
    observer: Arc<dyn Observer>,
    events: Option<Arc<dyn EventSink>>,
    /// The objects its reconciles found in sync, by version (see
    /// [`crate::session::settled`]): shared by its clones, which reconcile on its cluster.
    settled: Arc<Settled>,
}

impl<C: Controller> Clone for Reconciler<C> {
    fn clone(&self) -> Self {
        Reconciler {
            controller: self.controller.clone(),
            versions: self.versions.clone(),
            cluster: self.cluster.clone(),
            operator: self.operator.clone(),
            observer: self.observer.clone(),
            events: self.events.clone(),
            settled: self.settled.clone(),
        }
    }
}

impl<C: Controller> Reconciler<C> {
    /// A reconciler of `controller`'s CRs on `cluster`.
    pub fn new(controller: C, cluster: Arc<dyn Cluster>, operator: OperatorConfig) -> Self {
        let versions = Versions::effective(controller.versions(), &operator.versions);
        Reconciler {
            versions: Arc::new(versions),
            controller: Arc::new(controller),
            cluster,
            operator: Arc::new(operator),
            observer: Arc::new(Quiet),
            events: None,
            settled: Arc::default(),
        }
    }

    /// Publish Kubernetes Events about each CR to `sink` (see [`crate::events`] for which
    /// and when): rollout started, completed, failed. Best effort: a failed publish is
    /// logged and changes nothing else.
    pub fn with_events(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.events = Some(sink);
        self
    }

    async fn publish(&self, cr: &Value, event: CrEvent) {
        if let Some(sink) = &self.events
            && let Err(e) = sink.publish(cr, event).await
        {
            tracing::debug!(error = %e, "cannot publish an event");
        }
    }

    /// The same reconciler on another cluster (a view over this
    /// one, say).
    pub(crate) fn with_cluster(mut self, cluster: Arc<dyn Cluster>) -> Self {
        self.cluster = cluster;
        // What was in sync on the old cluster says nothing about objects of this one.
        self.settled = Arc::default();
        self
    }

    /// Report progress events to `observer`.
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Arc::new(observer);
        self
    }

    /// The controller.
    pub fn controller(&self) -> &C {
        &self.controller
    }

    /// Reconcile the CR `cr` once. Never fails: errors are written to the CR's status
    /// (when `manage_status`), logged, and returned in the [`Report`].
    pub async fn reconcile(&self, cr: &ObjectRef) -> Report {
        let id = reconcile_id();
        let span = reconcile_span(&id, cr);
        self.reconcile_in_span(&id, cr).instrument(span).await
    }

    /// [`Reconciler::reconcile`], inside the reconcile's span: steps 1 to 6, and the error
    /// path when they fail or panic.
    async fn reconcile_in_span(&self, id: &str, cr: &ObjectRef) -> Report {
        emit(
            self.observer.as_ref(),
            Event::ReconcileStarted {
                cr: cr.clone(),
                id: id.to_string(),
            },
        );
        let report = |outcome, state, error| Report {
            id: id.to_string(),
            cr: cr.clone(),
            outcome,
            state,
            error,
        };
        let manifest = match self.read_cr(cr).await {
            Ok(Some(manifest)) => manifest,
            Ok(None) => return report(Action::Done, None, None),
            Err(e) => return report(Action::Retry, None, Some(e.into())),
        };
        // The CR's own log level, if it asks for one, for the rest of this reconcile.
        let _log = crate::logging::for_cr(id, &manifest);
        if annotations::is_true(manifest.annotation(annotations::PAUSE_EXECUTION)) {
            tracing::info!("paused by {}", annotations::PAUSE_EXECUTION);
            return report(Action::Done, None, None);
        }
        let ledger = Arc::new(Ledger::new(Inventory::from_status(&manifest["status"])));
        ledger.remember(cr.clone(), Some(manifest.clone()));
        // The start status (step 4), not written on its own: the end of the reconcile
        // writes it together with the outcome, one status write per reconcile.
        let mut start = None;
        // The session, once made: the error status carries its author's changes too.
        let mut made = None;
        // A rollout that starts and does not complete in this reconcile is announced.
        let mut starting = None;
        let progress = Progress {
            start: &mut start,
            made: &mut made,
            starting: &mut starting,
        };
        let result = self.run_caught(id, cr, &manifest, &ledger, progress).await;
        // The components that failed, whether the reconcile then failed or not.
        if let Some(session) = &made {
            for event in session.take_component_events() {
                self.publish(&manifest, event).await;
            }
        }
        let failure = match result {
            Ok((outcome, state)) => return report(outcome, state, None),
            Err(failure) => failure,
        };
        let outcome = self.fail(&manifest, &failure.error, starting).await;
        self.record_failure(
            cr,
            &manifest,
            &ledger,
            &failure,
            start.as_ref(),
            made.as_ref(),
        )
        .await;
        report(outcome, failure.state, Some(failure.error))
    }

    /// [`Reconciler::run`], a panic in it caught as a failure of the reconcile.
    async fn run_caught(
        &self,
        id: &str,
        cr: &ObjectRef,
        manifest: &Arc<Value>,
        ledger: &Arc<Ledger>,
        progress: Progress<'_, C>,
    ) -> std::result::Result<(Action, Option<CompletionState>), Failure> {
        let run = AssertUnwindSafe(self.run(id, cr, manifest, ledger, progress)).catch_unwind();
        match run.await {
            Ok(result) => result,
            Err(panic) => Err(Failure::from(Error::from_panic(
                "reconcile",
                panic.as_ref(),
            ))),
        }
    }

    /// Step 1: read the CR (`None`: it is gone), and note its resourceVersion on the
    /// reconcile's span. The copy is shared: the reconcile only looks at it (the session,
    /// the ledger and the status write all start from it).
    async fn read_cr(
        &self,
        cr: &ObjectRef,
    ) -> std::result::Result<Option<Arc<Value>>, ClusterError> {
        let manifest = self.cluster.get_shared(cr).await.inspect_err(|e| {
            tracing::warn!(error = %e, "cannot read the CR");
        })?;
        if let Some(manifest) = &manifest {
            tracing::Span::current().record(
                "resource_version",
                manifest.resource_version().unwrap_or(""),
            );
        }
        Ok(manifest)
    }

    /// The objects the component `component` renders for the CR `cr` (read from the
    /// cluster), as the rollout would apply them — after the temporary patches, the
    /// internal-name annotation and the component's `update_object_definition`, before the
    /// owner reference and windlass's labels — without applying anything: to test one
    /// component (`testing::Harness::render`, with the `testing` feature).
    ///
    /// # Errors
    /// The CR is missing or does not parse, its config is invalid, the graph cannot be
    /// built, no component has that name, or the component fails to render.
    pub async fn render(&self, cr: &ObjectRef, component: &str) -> Result<Vec<Value>> {
        let (session, _) = self.stored_session(cr).await?;
        let components = self.controller.components(&session)?;
        let Some(id) = components.get(component) else {
            return Err(Error::config(format!(
                "{cr} has no component {component} (it has {})",
                components.names(false).join(", ")
            )));
        };
        let entry = components.graph.data(id.0);
        let rendered = crate::rollout::render_component(
            &session,
            entry,
            component,
            &crate::component::CrNames::of(&session),
        )
        .await?;
        Ok(rendered
            .into_iter()
            .map(|(_, manifest, _)| manifest)
            .collect())
    }

    /// The component graph the controller would roll out for the CR now, e.g. to draw it.
    pub async fn components(&self, cr: &ObjectRef) -> Result<Components<C>> {
        let (session, manifest) = self.stored_session(cr).await?;
        if manifest.is_terminating() {
            finalize_components(self.controller.as_ref(), &session)
        } else {
            self.controller.components(&session)
        }
    }

    /// Steps 4 to 6 of the pipeline for the CR `manifest`, as read. What it got to is left
    /// in `progress` for the error path.
    async fn run(
        &self,
        id: &str,
        cr: &ObjectRef,
        manifest: &Arc<Value>,
        ledger: &Arc<Ledger>,
        progress: Progress<'_, C>,
    ) -> std::result::Result<(Action, Option<CompletionState>), Failure> {
        let Progress {
            start,
            made,
            starting,
        } = progress;
        let finalizers = Finalizers::of(self.controller.as_ref(), manifest);
        if finalizers.finalizing && !finalizers.ours_holds(manifest) {
            // Being deleted, and the controller's finalizer does not hold it: only what
            // the garbage collector cannot reach is left to delete.
            if finalizers.cleanup {
                self.clean_up(cr, Value::clone(manifest), ledger).await?;
            }
            return Ok((Action::Done, None));
        }
        let session = self.session(id, cr, manifest, ledger.clone()).await?;
        *made = Some(session.clone());
        let manage_status = status::is_managed::<C>(&self.operator);
        // The CR as stored now: every write below returns the next copy.
        let mut current = manifest.clone();
        if let Some(finalizer) = finalizers.to_add(manifest) {
            let added =
                finalizer::add(self.cluster.as_ref(), cr, Value::clone(&current), finalizer);
            current = Arc::new(added.await?);
            ledger.remember(cr.clone(), Some(current.clone()));
        }
        let rolled_out = announce_start(&session, manifest, manage_status, start, starting);
        let state = self.roll_out(&session, finalizers.finalizing).await?;
        // The rollout may have written the CR (the cleanup finalizer): its copy is newer.
        if let Some(Some(newer)) = ledger.seen(cr) {
            current = newer;
        }
        if manage_status {
            let completion = self.write_completion(cr, current, &session, &state, ledger, start);
            match completion.await? {
                Some(written) => current = written,
                None => return Ok((Action::Done, Some(state))),
            }
        }
        let started = starting.take();
        if state.verify_completed() && !rolled_out && !finalizers.finalizing {
            self.publish(&current, CrEvent::rollout_completed(session.version()))
                .await;
        } else if let Some(started) = started {
            self.publish(manifest, started).await;
        }
        if !state.verify_completed() && !manage_status {
            let waiting = completion_status(&session, &state, None).updating;
            if let Some((_, message)) = waiting {
                self.publish(&current, CrEvent::rollout_waiting(message))
                    .await;
            }
        }
        let outcome = self
            .finish(cr, current, ledger, &session, &state, &finalizers)
            .await?;
        Ok((outcome, Some(state)))
    }

    /// Step 5: build the graph (the finalize graph while deleting), roll it out, and prune
    /// the components no longer in it. A recorded error or a failed rollout is a failure.
    async fn roll_out(
        &self,
        session: &Session<C>,
        finalizing: bool,
    ) -> std::result::Result<CompletionState, Failure> {
        let controller = self.controller.as_ref();
        let components = if finalizing {
            finalize_components(controller, session)?
        } else {
            controller.components(session)?
        };
        let state = crate::rollout::run(controller, session, &components).await;
        let failure = |error: Error, state: &CompletionState| Failure {
            error,
            state: Some(state.clone()),
        };
        if let Some(error) = state.error() {
            return Err(failure(error.clone(), &state));
        }
        if state.failed() {
            return Err(failure(Error::rollout("Deploy phase failed"), &state));
        }
        if !finalizing {
            crate::rollout::prune_removed_components(session, &components)
                .await
                .map_err(|error| failure(error, &state))?;
        }
        Ok(state)
    }

    /// Step 6, the status: the start and completion status in one write, with the
    /// inventory. `None` when the CR is gone.
    async fn write_completion(
        &self,
        cr: &ObjectRef,
        current: Arc<Value>,
        session: &Session<C>,
        state: &CompletionState,
        ledger: &Ledger,
        start: &Option<StatusUpdate>,
    ) -> Result<Option<Arc<Value>>> {
        let inventory = ledger.inventory();
        let author = session.status_changes();
        let next = self.write_status(cr, current, |status| {
            self.after_start(
                status,
                &cr.kind,
                start.as_ref(),
                author.as_ref(),
                |started| StatusUpdate {
                    inventory: Some(inventory.clone()),
                    ..completion_status(session, state, started)
                },
            )
        });
        let written = next.await?;
        if let Some(written) = &written {
            ledger.remember(cr.clone(), Some(written.clone()));
        }
        Ok(written)
    }

    /// Step 6, the end: ask `should_requeue`; when deleting and no requeue is needed,
    /// clean up and remove the finalizer. A stale dependency hash goes again at once.
    async fn finish(
        &self,
        cr: &ObjectRef,
        current: Arc<Value>,
        ledger: &Ledger,
        session: &Session<C>,
        state: &CompletionState,
        finalizers: &Finalizers,
    ) -> Result<Action> {
        let requeue = self.controller.should_requeue(session, state).await?;
        if requeue == Action::Done && finalizers.finalizing {
            let mut current = Arc::unwrap_or_clone(current);
            if finalizers.cleanup {
                match self.clean_up(cr, current, ledger).await? {
                    Some(cleaned) => current = cleaned,
                    None => return Ok(Action::Done),
                }
            }
            if let Some(finalizer) = &finalizers.controllers {
                finalizer::remove(self.cluster.as_ref(), cr, current, finalizer).await?;
            }
        }
        Ok(match requeue {
            // A dependency hash stamped in this rollout was computed from a Secret or
            // ConfigMap the rollout overwrote later (the component that writes it is not
            // upstream of the one that reads it): the echo of that write does not
            // reconcile the CR, so it goes again at once to roll the pods.
            _ if ledger.stale_dependency_hash() && !finalizers.finalizing => {
                Action::RequeueAfter(STALE_DEPENDENCY_HASH_REQUEUE)
            }
            other => other,
        })
    }
}

/// The span of one reconcile: its id and its CR, on every log line of the reconcile. The
/// CR's resourceVersion is recorded once it is read.
fn reconcile_span(id: &str, cr: &ObjectRef) -> tracing::Span {
    tracing::info_span!(
        "reconcile",
        reconciliation_id = %id,
        kind = %cr.kind,
        api_version = %cr.api_version,
        namespace = cr.namespace.as_deref().unwrap_or(""),
        // Not `name`: JSON lines already use that key for the span's own name.
        resource_name = %cr.name,
        resource_version = tracing::field::Empty,
    )
}

/// Step 4: note the start status, and the RolloutStarted Event when this generation of
/// the spec was not rolled out before (the Ready condition describes an older one), not
/// on every requeue. Returns whether this generation was already announced as rolled out.
fn announce_start<C: Controller>(
    session: &Session<C>,
    manifest: &Value,
    manage_status: bool,
    start: &mut Option<StatusUpdate>,
    starting: &mut Option<CrEvent>,
) -> bool {
    let ready_before = condition(&manifest["status"], status::READY).ok().flatten();
    let this_generation =
        ready_before.map(|c| c["observedGeneration"].as_i64()) == Some(manifest.generation());
    // Without a status of its own, every reconcile would look like a new generation: such
    // a primary only hears the outcome. Announced only if this reconcile does not
    // complete it: one that does says so with a single RolloutCompleted.
    if !this_generation && manage_status {
        *starting = Some(CrEvent::rollout_started(session.version()));
    }
    if manage_status {
        *start = Some(start_status(session, &manifest["status"]));
    }
    this_generation && crate::verify::condition_is(manifest, status::READY, true, None)
}

/// How soon a CR goes again when a dependency hash of its rollout was computed from data
/// the same rollout overwrote later (see `rollout::dependency_hash`). Not zero: a
/// component that writes its Secret anew on every reconcile would otherwise keep the CR
/// in a tight loop.
pub const STALE_DEPENDENCY_HASH_REQUEUE: Duration = Duration::from_secs(1);
