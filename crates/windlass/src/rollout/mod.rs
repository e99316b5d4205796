//! One rollout of a component graph: deploy phase, the `after_phase` hook, verify phase,
//! the hook again, and the set arithmetic that turns the phases into one
//! [`CompletionState`].
//!
//! 1. **Deploy.** Every enabled component is rendered and applied in dependency order;
//!    every disabled one is rendered and its objects deleted. The phase is complete when
//!    every node verified its deploy step (`verify_completed`, not merely
//!    `deploy_completed`), and failed when a node failed or a fatal error was recorded.
//! 2. **After deploy.** `after_phase(Deploy, outcome)`: completed, incomplete or failed.
//!    A "not yet" from the hook is a *non-fatal* verification error: incomplete, not
//!    failed.
//! 3. **Verify.** Unless phase 1 failed, the components that deployed are verified in
//!    dependency order; the rest are left out. An enabled component verifies by its
//!    [`Component::verify`](crate::component::Component::verify); a disabled one verifies
//!    once its objects are gone, without sending the delete again. A `false` verify leaves
//!    the component unverified, not failed.
//! 4. **After verify.** `after_phase(Verify, outcome)` runs when phases 1 and 2
//!    completed.
//!
//! The final state: verified = verified in phase 3; failed = failed in either phase;
//! unverified = everything else that deployed; unstarted = what phase 1 never started;
//! error = the first of the deploy, after-deploy, verify and after-verify errors.

pub(crate) mod dependency_hash;
pub(crate) mod drift;
mod dump;
pub(crate) mod patch;

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};

use crate::annotations;
use crate::cluster::{Deletion, Scope};
use crate::component::{ManagedObject, ResourceOptions, Resources};
use crate::controller::{ComponentEntry, Components, Controller, EdgeCondition};
use crate::dag::{CompletionState, Halt, NodeId, Runner};
use crate::error::{ClusterError, Error, Result};
use crate::object::{ManifestExt, ObjectRef};
use crate::progress::{Event, Phase, PhaseOutcome};
use crate::session::Session;
use crate::verify::Readiness;

/// Roll out `components` for the session's CR and report what was achieved.
pub async fn run<C: Controller>(
    controller: &C,
    session: &Session<C>,
    components: &Components<C>,
) -> CompletionState {
    let rollout = Rollout {
        session,
        components,
        rendered: Mutex::new(HashMap::new()),
        waiting: Mutex::new(BTreeMap::new()),
    };
    let rollout = &rollout;
    let graph = &components.graph;
    let check_conditions = !session.dry_run();
    let condition = |node, upstream, edge: &Option<EdgeCondition<C>>| {
        rollout.check_edge(node, upstream, edge.clone())
    };

    // Phase 1: deploy.
    session.emit(Event::PhaseStarted(Phase::Deploy));
    let deploy = Runner::new(graph)
        .threads(session.operator_config().rollout.deploy_concurrency)
        .check_conditions(check_conditions)
        .run(|id| rollout.deploy_node(id), condition)
        .await;
    let p1_complete = deploy.verify_completed();
    let p1_failed = deploy.failed();

    // Phase 2: the after-deploy hook.
    let deployed = phase_outcome(p1_complete, p1_failed);
    let p2_error = after_phase(controller, session, Phase::Deploy, deployed)
        .await
        .err();
    let p2_complete = p1_complete && p2_error.is_none();

    // Phase 3: verify what was deployed, unless the deploy phase failed.
    let verify = if p1_failed {
        CompletionState::default()
    } else {
        session.emit(Event::PhaseStarted(Phase::Verify));
        let mut runner = Runner::new(graph)
            .threads(session.operator_config().rollout.verify_concurrency)
            .check_conditions(check_conditions);
        for id in graph.ids() {
            if !deployed_in(&deploy, graph.name(id)) {
                runner.disable(id);
            }
        }
        runner.run(|id| rollout.verify_node(id), condition).await
    };

    // Phase 4: the after-verify hook, once deploy and its hook completed.
    let p4_error = if p2_complete {
        let verified = phase_outcome(verify.verify_completed(), verify.failed());
        after_phase(controller, session, Phase::Verify, verified)
            .await
            .err()
    } else {
        None
    };

    let waiting = std::mem::take(&mut *rollout.waiting.lock())
        .into_iter()
        .collect();
    let errors = [
        deploy.error().cloned(),
        p2_error,
        verify.error().cloned(),
        p4_error,
    ];
    combine(&deploy, &verify, errors).with_waiting(waiting)
}

/// Whether `component` got through the deploy phase (verified its deploy step or only
/// stayed unverified), so that the verify phase checks it.
fn deployed_in(deploy: &CompletionState, component: &str) -> bool {
    (deploy.verified().contains(component) || deploy.unverified().contains(component))
        && !deploy.failed_nodes().contains(component)
}

/// The final state of a rollout from its two phases.
fn combine(
    deploy: &CompletionState,
    verify: &CompletionState,
    errors: [Option<Error>; 4],
) -> CompletionState {
    let verified = verify.verified().clone();
    let failed: BTreeSet<String> = verify
        .failed_nodes()
        .union(deploy.failed_nodes())
        .cloned()
        .collect();
    let unverified: BTreeSet<String> = deploy
        .verified()
        .iter()
        .chain(deploy.unverified())
        .chain(verify.unverified())
        .filter(|n| !verified.contains(*n) && !failed.contains(*n))
        .cloned()
        .collect();
    let error = errors.into_iter().flatten().next();
    let unstarted = deploy.unstarted().clone();
    CompletionState::new(
        verified,
        unverified,
        failed,
        unstarted.clone(),
        error.clone(),
    )
    .unwrap_or_else(|bug| {
        let none: [String; 0] = [];
        CompletionState::new(
            none.clone(),
            none.clone(),
            none,
            unstarted,
            Some(error.unwrap_or(bug)),
        )
        .unwrap_or_default()
    })
}

/// How a phase ended, from whether it completed and whether it failed.
fn phase_outcome(complete: bool, failed: bool) -> PhaseOutcome {
    match (complete, failed) {
        (_, true) => PhaseOutcome::Failed,
        (true, false) => PhaseOutcome::Completed,
        (false, false) => PhaseOutcome::Incomplete,
    }
}

/// Run the controller's `after_phase` hook and report its verdict. Its "not yet" (or a
/// precondition error it propagated) reads as a verification that has not passed, naming
/// the phase.
async fn after_phase<C: Controller>(
    controller: &C,
    session: &Session<C>,
    phase: Phase,
    outcome: PhaseOutcome,
) -> Result<()> {
    let result = controller.after_phase(session, phase, outcome).await;
    session.emit(Event::Hook {
        phase,
        outcome,
        passed: matches!(result, Ok(Readiness::Ready)),
    });
    match result {
        Ok(Readiness::Ready) => Ok(()),
        Ok(Readiness::NotYet(reason))
        | Err(Error::Precondition(reason) | Error::Verification(reason)) => Err(
            Error::verification(format!("after the {phase} phase ({outcome}): {reason}")),
        ),
        Err(other) => Err(other),
    }
}

struct Rollout<'a, C: Controller> {
    session: &'a Session<C>,
    components: &'a Components<C>,
    /// Rendering happens once per component per rollout; the verify phase reuses it.
    rendered: Mutex<HashMap<NodeId, Arc<Vec<ManagedObject>>>>,
    /// Why each component that is not ready (or not started) yet waits, by component.
    waiting: Mutex<BTreeMap<String, String>>,
}

impl<C: Controller> Rollout<'_, C> {
    /// Whether the edge from `node` to `upstream` lets `node` start. An edge condition
    /// that says "not yet" keeps the component it gates waiting (the runner checks it
    /// again), its reason kept for the status; one that errs or panics fails the
    /// component.
    async fn check_edge(
        &self,
        node: NodeId,
        upstream: NodeId,
        edge: Option<EdgeCondition<C>>,
    ) -> std::result::Result<bool, Halt> {
        let component = self.name(node).to_string();
        let check = match edge {
            None => return Ok(true),
            Some(EdgeCondition::UpstreamReady) => self.upstream_ready(upstream).boxed(),
            Some(EdgeCondition::Check(check)) => check(self.session.clone()),
        };
        match AssertUnwindSafe(check).catch_unwind().await {
            Ok(Ok(Readiness::Ready)) => {
                self.waiting_for(&component, None);
                Ok(true)
            }
            Ok(Ok(Readiness::NotYet(reason)))
            | Ok(Err(Error::Precondition(reason) | Error::Verification(reason))) => {
                self.waiting_for(&component, Some(reason));
                Ok(false)
            }
            Ok(Err(e)) => Err(Halt {
                failure: e.is_fatal(),
                error: Some(e),
            }),
            Err(panic) => Err(Halt::failed(Error::from_panic(
                format!("the condition component \"{component}\" waits for"),
                panic.as_ref(),
            ))),
        }
    }

    fn name(&self, id: NodeId) -> &str {
        self.components.graph.name(id)
    }

    /// Note why `component` waits, or that it no longer does.
    fn waiting_for(&self, component: &str, reason: Option<String>) {
        let mut waiting = self.waiting.lock();
        match reason {
            Some(reason) => waiting.insert(component.to_string(), reason),
            None => waiting.remove(component),
        };
    }

    async fn deploy_node(&self, id: NodeId) -> std::result::Result<(), Halt> {
        let disabled = self.components.graph.data(id).disabled;
        self.guard(id, Phase::Deploy, async {
            let objects = self.render(id).await?;
            if disabled {
                self.disable(id, &objects).await?;
            } else {
                self.deploy(id, &objects).await?;
            }
            Ok(true)
        })
        .await
    }

    /// A component that is not ready yet stays unverified, not failed; why is kept for
    /// the status message.
    async fn verify_node(&self, id: NodeId) -> std::result::Result<(), Halt> {
        self.guard(id, Phase::Verify, async {
            let verdict = self.check_ready(id).await;
            self.session.emit(Event::Verified {
                component: self.name(id).to_string(),
                ok: matches!(verdict, Ok(Readiness::Ready)),
            });
            match verdict? {
                Readiness::Ready => {
                    self.waiting_for(self.name(id), None);
                    Ok(true)
                }
                Readiness::NotYet(reason) => {
                    self.waiting_for(self.name(id), Some(reason));
                    Ok(false)
                }
            }
        })
        .await
    }

    /// Whether the component is ready: an enabled one by its own verify, a disabled one
    /// once its objects are gone. A precondition error that a verify propagated from a
    /// helper (a Secret not there yet) is a "not yet" too, not a failure.
    async fn check_ready(&self, id: NodeId) -> Result<Readiness> {
        let entry = self.components.graph.data(id);
        let objects = self.render(id).await?;
        if entry.disabled {
            return Ok(match self.all_gone(id) {
                true => Readiness::Ready,
                false => Readiness::not_yet(format!(
                    "the objects of disabled component \"{}\" are not gone yet",
                    self.name(id)
                )),
            });
        }
        match entry.component.verify(self.session, &objects).await {
            Err(Error::Precondition(reason) | Error::Verification(reason)) => {
                Ok(Readiness::NotYet(reason))
            }
            verdict => verdict,
        }
    }

    /// The condition of a [`Components::depends_on_ready`] edge: the upstream component,
    /// deployed already, verifies.
    async fn upstream_ready(&self, upstream: NodeId) -> Result<Readiness> {
        Ok(match self.check_ready(upstream).await? {
            Readiness::Ready => Readiness::Ready,
            Readiness::NotYet(reason) => Readiness::NotYet(format!(
                "waiting for \"{}\" to be ready: {reason}",
                self.name(upstream)
            )),
        })
    }

    /// Run one node's work and map its outcome to the runner's: `true` succeeds,
    /// `false` (a component not verified yet) halts without failing, an error halts and is
    /// a failure iff fatal ("not yet" is not), and a panic is caught and becomes a fatal
    /// error naming the component.
    async fn guard(
        &self,
        id: NodeId,
        phase: Phase,
        work: impl Future<Output = Result<bool>>,
    ) -> std::result::Result<(), Halt> {
        let component = self.name(id).to_string();
        let outcome = match AssertUnwindSafe(work).catch_unwind().await {
            Ok(Ok(true)) => return Ok(()),
            Ok(Ok(false)) => Halt {
                failure: false,
                error: None,
            },
            Ok(Err(e)) => Halt {
                failure: e.is_fatal(),
                error: Some(e),
            },
            Err(panic) => Halt::failed(Error::from_panic(
                format!("component \"{component}\" during {phase}"),
                panic.as_ref(),
            )),
        };
        if phase == Phase::Deploy || outcome.failure || outcome.error.is_some() {
            self.session.emit(Event::Halted {
                component,
                phase,
                failure: outcome.failure,
                message: outcome.error.as_ref().map(ToString::to_string),
            });
        }
        Err(outcome)
    }

    async fn render(&self, id: NodeId) -> Result<Arc<Vec<ManagedObject>>> {
        if let Some(done) = self.rendered.lock().get(&id) {
            return Ok(done.clone());
        }
        let session = self.session;
        let entry = self.components.graph.data(id);
        let name = self.name(id);
        let rendered = render_component(session, entry, name).await?;
        let mut objects = Vec::with_capacity(rendered.len());
        let mut restart_on_change = Vec::with_capacity(rendered.len());
        for (internal_name, mut manifest, options) in rendered {
            // Patches and the hook may have broken what `Resources::add` checked.
            let mut reference = ObjectRef::from_manifest(&manifest).map_err(|e| {
                Error::config(format!(
                    "{internal_name} after temporary patches and update_object_definition: {e}"
                ))
            })?;
            // Resolve the kind's scope once: cluster-scoped objects have no namespace.
            match session.cluster().scope(&reference.type_ref()).await {
                Ok(Scope::Namespaced) => {}
                Ok(Scope::Cluster) => {
                    manifest.metadata_mut().remove("namespace");
                    reference.namespace = None;
                }
                // A disabled component's object of a kind the server does not serve
                // cannot exist: there is nothing to delete or wait for.
                Err(ClusterError::UnknownKind { .. }) if entry.disabled => continue,
                Err(e) => return Err(e.into()),
            }
            restart_on_change.push(options.restart_on_dependency_change);
            objects.push(ManagedObject {
                internal_name,
                reference,
                manifest,
                verify: options.verify,
                method: options.method,
                recreate: options.recreate,
                create_only: options.create_only,
            });
        }
        if !entry.disabled {
            self.stamp_dependency_hashes(id, &mut objects, &restart_on_change)
                .await?;
        } else {
            // Its pods are being deleted: whatever it read before concerns the CR no more.
            session.emit(Event::Dependencies {
                cr: session.cr_ref(),
                component: name.to_string(),
                objects: Vec::new(),
            });
        }
        crate::rollout::dump::dump_component(session, name, entry.disabled, &objects)?;
        session.emit(Event::Rendered {
            component: name.to_string(),
            disabled: entry.disabled,
            objects: objects.iter().map(|o| o.reference.clone()).collect(),
        });
        let objects = Arc::new(objects);
        self.rendered.lock().insert(id, objects.clone());
        Ok(objects)
    }

    /// Stamp the dependency hash on the objects rendered with
    /// [`ResourceOptions::restart_on_dependency_change`](crate::component::ResourceOptions::restart_on_dependency_change)
    /// (see [`crate::rollout::dependency_hash`]), from this component's Secrets and ConfigMaps and
    /// those of the enabled components it depends on (transitively), else from the
    /// cluster; report
    /// what came from the cluster and is not the CR's own (the runtime watches it).
    async fn stamp_dependency_hashes(
        &self,
        id: NodeId,
        objects: &mut [ManagedObject],
        restart_on_change: &[bool],
    ) -> Result<()> {
        let session = self.session;
        let mut external = BTreeMap::new();
        if restart_on_change.contains(&true) {
            let is_data = |o: &&ManagedObject| {
                o.reference.api_version == "v1"
                    && matches!(o.reference.kind.as_str(), "Secret" | "ConfigMap")
            };
            // Only what this component waits for, directly or not: the runner renders
            // those before it, every time. A component rendered concurrently (or not) by
            // chance would make the hash depend on timing, flipping it between passes
            // whenever its rendered copy and the cluster's differ.
            let graph = &self.components.graph;
            let earlier: Vec<Arc<Vec<ManagedObject>>> = self
                .rendered
                .lock()
                .iter()
                .filter(|(other, _)| {
                    **other != id && graph.depends_on(id, **other) && !graph.data(**other).disabled
                })
                .map(|(_, rendered)| rendered.clone())
                .collect();
            // Secrets and ConfigMaps are never targets: a copy of them serves every target.
            let own: Vec<ManagedObject> = objects.iter().filter(is_data).cloned().collect();
            let sources: Vec<crate::rollout::dependency_hash::Rendered<'_>> = own
                .iter()
                .chain(earlier.iter().flat_map(|r| r.iter().filter(is_data)))
                .map(|o| crate::rollout::dependency_hash::Rendered {
                    reference: &o.reference,
                    manifest: &o.manifest,
                    create_only: o.create_only,
                })
                .collect();
            let uid = session.manifest().uid();
            for (object, _) in objects
                .iter_mut()
                .zip(restart_on_change)
                .filter(|(_, restart)| **restart)
            {
                // Noted before the reads: a write of one of them by another component of
                // this rollout after this point makes the hash stale, and the CR is
                // requeued (the echo of its own write does not reconcile it).
                let namespace = object.manifest.namespace().map(str::to_string);
                for dependency in crate::rollout::dependency_hash::dependencies(&object.manifest) {
                    let reference = dependency.object_ref(namespace.as_deref());
                    if !sources.iter().any(|s| *s.reference == reference) {
                        session.ledger().dependency_read(reference);
                    }
                }
                let read = crate::rollout::dependency_hash::annotate(
                    session.cluster(),
                    &mut object.manifest,
                    &sources,
                )
                .await?;
                // What this rollout renders (a create-only Secret read back), or what
                // carries this CR's ownership label, reconciles it through that label.
                external.extend(
                    read.into_iter()
                        .filter(|(reference, _)| !sources.iter().any(|s| s.reference == reference))
                        .filter(|(_, found)| {
                            found.as_ref().and_then(|f| f.label(annotations::OWNER_UID)) != uid
                                || uid.is_none()
                        })
                        .map(|(reference, found)| {
                            let version = found
                                .as_ref()
                                .and_then(|f| f.resource_version())
                                .map(str::to_string);
                            (reference, version)
                        }),
                );
            }
        }
        session.emit(Event::Dependencies {
            cr: session.cr_ref(),
            component: self.name(id).to_string(),
            objects: external.into_iter().collect(),
        });
        Ok(())
    }

    /// Apply every object in render order; the first error stops the component.
    /// Once all are applied, what the component applied before and no longer renders is
    /// deleted.
    async fn deploy(&self, id: NodeId, objects: &[ManagedObject]) -> Result<()> {
        let component = self.name(id);
        let mut applied = Vec::new();
        let mut unchanged = Vec::new();
        for object in objects {
            let (reference, changed) = self.deploy_object(component, object).await?;
            if changed && self.session.ledger().dependency_written(&reference) {
                tracing::debug!(object = %reference, component, "written after a dependency hash was computed from its old data: the CR is requeued");
            }
            if changed {
                applied.push(reference);
            } else {
                unchanged.push(reference);
            }
        }
        let rendered: BTreeSet<&ObjectRef> = objects.iter().map(|o| &o.reference).collect();
        let leftovers = self
            .session
            .ledger()
            .inventory()
            .of(component)
            .into_iter()
            .filter(|(r, _)| !rendered.contains(r))
            .collect::<Vec<_>>();
        let pruned = delete_recorded(self.session, component, leftovers).await?;
        self.session.emit(Event::Deployed {
            component: component.to_string(),
            applied,
            unchanged,
        });
        if !pruned.is_empty() {
            self.session.emit(Event::Disabled {
                component: component.to_string(),
                deleted: pruned,
            });
        }
        Ok(())
    }

    /// Apply one object unless windlass already applied exactly this and still owns every
    /// field of it (see [`crate::rollout::drift`]). Returns its reference and whether a write
    /// happened.
    async fn deploy_object(
        &self,
        component: &str,
        object: &ManagedObject,
    ) -> Result<(ObjectRef, bool)> {
        let session = self.session;
        let cr = session.manifest();
        let mut manifest = object.manifest.clone();
        let reference = object.reference.clone();
        // A component may render the CR itself (to rewrite its own spec): it is not its
        // own child.
        let itself = reference == session.cr_ref();
        add_owner_reference(&mut manifest, cr);
        if !itself {
            stamp_labels(&mut manifest, cr, component);
        }
        crate::rollout::drift::stamp(&mut manifest);
        // About to write it: a watch of windlass's own objects may answer for it.
        let live = session.cluster().get_own(&reference).await?;
        if let Some(live) = &live
            && !itself
        {
            refuse_foreign(&reference, live, cr)?;
        }
        let drift = match (&live, object.create_only) {
            // Created once; what it holds now is what it keeps.
            (Some(_), true) => crate::rollout::drift::Drift::InSync,
            _ => crate::rollout::drift::drift(
                &manifest,
                live.as_ref(),
                object.method,
                crate::FIELD_MANAGER,
            ),
        };
        let stored = if drift.needs_write() {
            tracing::debug!(object = %reference, ?drift, "writing");
            if !itself
                && !crate::cluster::finalizer::collected_with(reference.namespace.as_deref(), cr)
            {
                session.hold_for_cleanup().await?;
            }
            self.write(object, &manifest).await?
        } else {
            live.unwrap_or_default()
        };
        if let Some(uid) = stored.uid() {
            session
                .ledger()
                .inventory_mut(|i| i.record(component, reference.clone(), uid));
        }
        Ok((reference, drift.needs_write()))
    }

    /// Write `manifest` by the object's method. Conflicts (HTTP 409) are retried with a
    /// linear back-off; server-side apply sends no resourceVersion and cannot conflict on
    /// it, so the retry is for the replace method, whose cluster call reads the live
    /// resourceVersion afresh. A refused change of an immutable field recreates the object
    /// when the resource asked for it. A refused apply is never retried as a replace: on a
    /// real server the replace meets the same validation, so it would only cost requests.
    async fn write(&self, object: &ManagedObject, manifest: &Value) -> Result<Value> {
        let cluster = self.session.cluster();
        let operator = self.session.operator_config();
        let mut attempt = 0;
        let method = object.method;
        let mut recreated = false;
        loop {
            match cluster.apply(manifest, method).await {
                Ok(stored) => return Ok(stored),
                Err(ClusterError::Conflict { .. })
                    if attempt < operator.rollout.conflict_retries =>
                {
                    attempt += 1;
                    let wait = Duration::from(operator.rollout.conflict_backoff) * attempt;
                    tokio::time::sleep(wait).await;
                }
                Err(e) if e.is_immutable_field() && object.recreate && !recreated => {
                    tracing::info!(object = %object.reference, error = %e, "recreating: an immutable field changed");
                    recreated = true;
                    cluster.delete(&object.reference, None).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Delete a disabled component's objects, dependents first: the ones it applied
    /// and that are still there. Nothing is sent once they are gone.
    async fn disable(&self, id: NodeId, objects: &[ManagedObject]) -> Result<()> {
        let component = self.name(id);
        let recorded = self.session.ledger().inventory().of(component);
        // Rendered order reversed first, then whatever else was recorded.
        let position = |r: &ObjectRef| objects.iter().position(|o| o.reference == *r);
        let mut ordered = recorded;
        ordered.sort_by_key(|(r, _)| std::cmp::Reverse(position(r)));
        let deleted = delete_recorded(self.session, component, ordered).await?;
        self.session.emit(Event::Disabled {
            component: component.to_string(),
            deleted,
        });
        Ok(())
    }

    /// Whether a disabled component's objects are all gone.
    fn all_gone(&self, id: NodeId) -> bool {
        self.session.dry_run()
            || self
                .session
                .ledger()
                .inventory()
                .of(self.name(id))
                .is_empty()
    }
}

/// Delete what the inventory holds for components that are no longer in the graph at all.
pub(crate) async fn prune_removed_components<C: Controller>(
    session: &Session<C>,
    components: &Components<C>,
) -> Result<()> {
    let known: BTreeSet<&str> = components
        .names(false)
        .into_iter()
        .chain(components.names(true))
        .collect();
    let inventory = session.ledger().inventory();
    for component in inventory.components() {
        if !known.contains(component.as_str()) {
            let deleted = delete_recorded(session, &component, inventory.of(&component)).await?;
            session.emit(Event::Disabled { component, deleted });
        }
    }
    Ok(())
}

/// Delete recorded objects of `component`, each only if it is still the object windlass
/// applied for this CR: it carries this CR's ownership label, and the uid recorded (a
/// precondition the server checks too, for a replacement made meanwhile). The inventory
/// lives in the status, which others may be allowed to write: an entry naming someone
/// else's object must never get it deleted. Entries for objects that are gone or not this
/// CR's are forgotten. Returns what was deleted.
async fn delete_recorded<C: Controller>(
    session: &Session<C>,
    component: &str,
    objects: Vec<(ObjectRef, String)>,
) -> Result<Vec<ObjectRef>> {
    let owner = session.manifest().uid();
    let forget = |reference: &ObjectRef| {
        session
            .ledger()
            .inventory_mut(|i| i.forget(component, reference));
    };
    let mut deleted = Vec::new();
    for (reference, uid) in objects {
        let live = match session.cluster().get_own(&reference).await {
            // The kind is no longer served: nothing of it can exist.
            Err(ClusterError::UnknownKind { .. }) => None,
            other => other?,
        };
        let Some(live) = live else {
            forget(&reference);
            continue;
        };
        if owner.is_none() || live.label(annotations::OWNER_UID) != owner {
            tracing::warn!(
                object = %reference,
                component,
                "status.inventory names an object that does not carry this resource's {} label; it is left alone",
                annotations::OWNER_UID
            );
            forget(&reference);
            continue;
        }
        if live.uid() != Some(uid.as_str()) {
            // Replaced since windlass applied it: not the object recorded.
            forget(&reference);
            continue;
        }
        match session.cluster().delete(&reference, Some(&uid)).await? {
            Deletion::Deleted => {
                forget(&reference);
                deleted.push(reference);
            }
            // Finalizers hold it: it stays recorded until it is gone.
            Deletion::Terminating => deleted.push(reference),
            Deletion::NotFound => forget(&reference),
        }
    }
    Ok(deleted)
}

/// Refuse to write an object another CR's rollout applied: two CRs rendering the same
/// object would overwrite each other on every reconcile.
fn refuse_foreign(reference: &ObjectRef, live: &Value, cr: &Value) -> Result<()> {
    match (live.label(annotations::OWNER_UID), cr.uid()) {
        (Some(owner), Some(uid)) if owner != uid => Err(Error::config(format!(
            "{reference} belongs to another {} (uid {owner}, label {}); two resources cannot render the same object: give this one another name",
            cr.kind().unwrap_or("resource"),
            annotations::OWNER_UID
        ))),
        _ => Ok(()),
    }
}

/// Label an object with the CR it was rendered for and the component that rendered it,
/// and with the recommended `app.kubernetes.io/…` labels, where the component did not set them.
fn stamp_labels(manifest: &mut Value, cr: &Value, component: &str) {
    let standard = annotations::labels::standard(
        cr.kind().unwrap_or_default(),
        cr.name().unwrap_or_default(),
        component,
    );
    let metadata = manifest.metadata_mut();
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let Some(map) = labels.as_object_mut() else {
        return;
    };
    if let Some(uid) = cr.uid() {
        map.insert(annotations::OWNER_UID.into(), json!(uid));
        map.insert(
            annotations::COMPONENT.into(),
            json!(crate::object::label_value(component)),
        );
    }
    for (key, value) in standard {
        map.entry(key).or_insert(Value::String(value));
    }
}

/// Make the CR an owner of the object, so deleting the CR garbage-collects it.
/// A namespaced CR owns objects in its own namespace only (Kubernetes forbids owners in
/// another namespace and cluster-scoped dependents of namespaced owners); a cluster-scoped
/// CR owns everything it renders. Never the CR itself; `blockOwnerDeletion`, and the
/// controller reference unless the component set one.
fn add_owner_reference(manifest: &mut Value, owner: &Value) {
    let (Some(uid), Some(name), Some(kind), Some(api_version)) =
        (owner.uid(), owner.name(), owner.kind(), owner.api_version())
    else {
        return;
    };
    let same_object = manifest.kind() == Some(kind)
        && manifest.api_version() == Some(api_version)
        && manifest.name() == Some(name);
    if same_object || !crate::cluster::finalizer::collected_with(manifest.namespace(), owner) {
        return;
    }
    // The CR is the object's controller, as `kubectl` and other controllers expect,
    // unless the component named another one (there can be only one).
    let controlled = manifest["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true));
    let reference = json!({
        "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "blockOwnerDeletion": true, "controller": !controlled,
    });
    let metadata = manifest.metadata_mut();
    let refs = metadata
        .entry("ownerReferences")
        .or_insert_with(|| json!([]));
    if let Some(list) = refs.as_array_mut()
        && !list.iter().any(|r| r["uid"] == uid)
    {
        list.push(reference);
    }
}

/// What the component `entry` (named `name`) renders for the session's CR, as the rollout
/// applies it: after the temporary patches, the internal-name annotation and the
/// component's `update_object_definition`; before the owner reference, windlass's labels,
/// the scope check and the dependency hash. Each object with its internal name and options.
pub(crate) async fn render_component<C: Controller>(
    session: &Session<C>,
    entry: &ComponentEntry<C>,
    name: &str,
) -> Result<Vec<(String, Value, ResourceOptions)>> {
    let mut resources = Resources::new(name, session.namespace(), session.kind(), session.name());
    entry.component.render(session, &mut resources).await?;
    let mut rendered = Vec::with_capacity(resources.len());
    for (internal_name, manifest, options) in resources.into_ordered() {
        let mut manifest = crate::rollout::patch::apply_patches(
            &internal_name,
            manifest,
            session.temporary_patches(),
        )?;
        if session.operator_config().rollout.internal_name_annotation {
            let metadata = manifest.metadata_mut();
            let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
            if let Some(map) = annotations.as_object_mut() {
                map.insert(annotations::INTERNAL_NAME.into(), json!(internal_name));
            }
        }
        let manifest =
            entry
                .component
                .update_object_definition(session, &internal_name, manifest)?;
        rendered.push((internal_name, manifest, options));
    }
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_references_only_within_the_namespace_and_never_self() {
        let owner = json!({"apiVersion": "x.io/v1", "kind": "App", "metadata": {"name": "a", "namespace": "ns", "uid": "u1"}});
        let mut child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}});
        add_owner_reference(&mut child, &owner);
        add_owner_reference(&mut child, &owner);
        assert_eq!(
            child["metadata"]["ownerReferences"],
            json!([{"apiVersion": "x.io/v1", "kind": "App", "name": "a", "uid": "u1",
                     "blockOwnerDeletion": true, "controller": true}])
        );
        // A component that named another controller keeps it; the CR only owns.
        let mut adopted = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u0", "controller": true}]}});
        add_owner_reference(&mut adopted, &owner);
        assert_eq!(
            adopted["metadata"]["ownerReferences"][1]["controller"],
            false
        );
        let mut elsewhere = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}});
        add_owner_reference(&mut elsewhere, &owner);
        assert!(elsewhere["metadata"].get("ownerReferences").is_none());
        let mut itself = owner.clone();
        add_owner_reference(&mut itself, &owner);
        assert!(itself["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn combine_follows_the_set_arithmetic() {
        let none: [&str; 0] = [];
        let deploy = CompletionState::new(["a", "b", "c"], ["d"], ["e"], ["f"], None).unwrap();
        let verify =
            CompletionState::new(["a"], ["b"], ["c"], none, Some(Error::verification("v")))
                .unwrap();
        let state = combine(
            &deploy,
            &verify,
            [
                None,
                Some(Error::config("hook")),
                verify.error().cloned(),
                None,
            ],
        );
        let set = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(state.verified(), &set(&["a"]));
        assert_eq!(state.failed_nodes(), &set(&["c", "e"]));
        assert_eq!(state.unverified(), &set(&["b", "d"]));
        assert_eq!(state.unstarted(), &set(&["f"]));
        assert_eq!(
            state.error(),
            Some(&Error::config("hook")),
            "after-deploy error precedes the verify error"
        );
    }
}
