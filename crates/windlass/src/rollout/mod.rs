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
//!
//! This file runs the phases and one node of each; the steps of a node live beside it:
//! `render` (a component's objects: patches, scope, dependency hashes, dump), `deploy`
//! (applying them with `drift` detection, deleting a disabled component's), `prune`
//! (components that left the graph), `patch` (temporary patches), `dependency_hash` and
//! `dump`.

pub(crate) mod dependency_hash;
mod deploy;
pub(crate) mod drift;
mod dump;
pub(crate) mod patch;
mod prune;
mod render;
mod stamp;
#[cfg(test)]
pub(crate) use stamp::HASHED;

pub(crate) use prune::prune_removed_components;
pub(crate) use render::render_component;

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;

use crate::component::ManagedObject;
use crate::controller::{Components, Controller, EdgeCondition};
use crate::dag::{CompletionState, Halt, NodeId, Runner};
use crate::error::{Error, Result};
use crate::object::ManifestExt;
use crate::progress::{Event, Phase, PhaseOutcome};
use crate::session::Session;
use crate::verify::Readiness;

/// Roll out `components` for the session's CR and report what was achieved.
pub async fn run<C: Controller>(
    controller: &C,
    session: &Session<C>,
    components: &Components<C>,
) -> CompletionState {
    // The CR's shard, labelled on everything it owns when the CRs are sharded.
    let shard = session
        .manifest()
        .uid()
        .and_then(|uid| session.operator_config().sharding.shard_of(uid));
    let rollout = Rollout {
        session,
        components,
        stamp: stamp::CrStamp::new(session.manifest(), shard),
        cr_names: crate::component::CrNames::of(session),
        rendered: Mutex::new(vec![None; components.len()]),
        waiting: Mutex::new(BTreeMap::new()),
    };

    // Phase 1: deploy.
    let deploy = rollout.deploy_phase().await;
    let p1_complete = deploy.verify_completed();
    let p1_failed = deploy.failed();

    // Phase 2: the after-deploy hook.
    let deployed = phase_outcome(p1_complete, p1_failed);
    let p2_error = after_phase(controller, session, Phase::Deploy, deployed)
        .await
        .err();
    let p2_complete = p1_complete && p2_error.is_none();

    // Phase 3: verify what was deployed, unless the deploy phase failed.
    let verify = match p1_failed {
        true => CompletionState::default(),
        false => rollout.verify_phase(&deploy).await,
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
    /// What every object the rollout applies gets from the CR.
    stamp: stamp::CrStamp<'a>,
    /// What every component's resources take from the CR.
    cr_names: Arc<crate::component::CrNames>,
    /// Rendering happens once per component per rollout; the verify phase reuses it. By
    /// node index: every component has a place from the start.
    rendered: Mutex<Vec<Option<Arc<Vec<ManagedObject>>>>>,
    /// Why each component that is not ready (or not started) yet waits, by component.
    waiting: Mutex<BTreeMap<String, String>>,
}

impl<C: Controller> Rollout<'_, C> {
    /// Phase 1: every component deployed in dependency order (edge conditions checked,
    /// except in a dry run).
    async fn deploy_phase(&self) -> CompletionState {
        self.session.emit(Event::PhaseStarted(Phase::Deploy));
        Runner::new(&self.components.graph)
            .threads(self.session.operator_config().rollout.deploy_concurrency)
            .check_conditions(!self.session.dry_run())
            .run(
                |id| self.deploy_node(id),
                |node, upstream, edge: &Option<EdgeCondition<C>>| {
                    self.check_edge(node, upstream, edge.clone())
                },
            )
            .await
    }

    /// Phase 3: the components that got through `deploy` verified, in dependency order.
    async fn verify_phase(&self, deploy: &CompletionState) -> CompletionState {
        self.session.emit(Event::PhaseStarted(Phase::Verify));
        let graph = &self.components.graph;
        let mut runner = Runner::new(graph)
            .threads(self.session.operator_config().rollout.verify_concurrency)
            .check_conditions(!self.session.dry_run());
        for id in graph.ids() {
            if !deployed_in(deploy, graph.name(id)) {
                runner.disable(id);
            }
        }
        runner
            .run(
                |id| self.verify_node(id),
                |node, upstream, edge: &Option<EdgeCondition<C>>| {
                    self.check_edge(node, upstream, edge.clone())
                },
            )
            .await
    }

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
            self.session.emit_with(|| Event::Verified {
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
    ///
    /// Not an `async fn`: its future would hold `work` twice (as the argument, and as the
    /// future it awaits), and the runner allocates every node's future.
    fn guard<'s>(
        &'s self,
        id: NodeId,
        phase: Phase,
        work: impl Future<Output = Result<bool>> + 's,
    ) -> impl Future<Output = std::result::Result<(), Halt>> + 's {
        AssertUnwindSafe(work)
            .catch_unwind()
            .map(move |outcome| self.halt(id, phase, outcome))
    }

    /// [`Rollout::guard`]'s answer for one node's outcome (its work's, or its panic).
    fn halt(
        &self,
        id: NodeId,
        phase: Phase,
        outcome: std::thread::Result<Result<bool>>,
    ) -> std::result::Result<(), Halt> {
        let outcome = match outcome {
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
                format!("component \"{}\" during {phase}", self.name(id)),
                panic.as_ref(),
            )),
        };
        if phase == Phase::Deploy || outcome.failure || outcome.error.is_some() {
            self.session.emit(Event::Halted {
                component: self.name(id).to_string(),
                phase,
                failure: outcome.failure,
                message: outcome.error.as_ref().map(ToString::to_string),
            });
        }
        Err(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::stamp::add_owner_reference;
    use super::*;
    use serde_json::json;

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
