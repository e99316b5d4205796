//! Dry-run reconciling driven by the in-memory cluster's own watch events, without
//! recursion.
//!
//! One dry run can hold several controllers: each CR goes to the controller of its kind, so
//! a parent whose rollout renders CRs of another hosted controller gets them reconciled by
//! it, as in a live operator hosting both.
//!
//! A CR is not reconciled inside the deploy call that applied it, which would need a guard
//! against re-entering the same CR; a small work loop runs instead, as a real controller
//! would: every CR of the controller's kind that appears, changes its spec (generation) or
//! starts terminating is queued once and reconciled after the current reconcile, until
//! nothing is left. So a parent rollout that renders child CRs of the same kind gets them
//! reconciled too, and deleting a CR with a finalizer runs its finalizer rollout. A CR
//! reconciled more than [`MAX_RECONCILES_PER_CR`] times in one run stops being queued (an
//! operator that keeps changing its own spec would loop forever).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::broadcast::error::TryRecvError;

use crate::cluster::{MemoryCluster, WatchEvent, WatchEventType};
use crate::controller::Controller;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::reconcile::{Reconciler, Report};

/// Reconciles of one CR in one dry run, at most.
pub const MAX_RECONCILES_PER_CR: usize = 10;

/// A reconciler of one kind, whatever its controller's type.
#[async_trait]
trait ReconcileKind: Send + Sync {
    async fn reconcile(&self, cr: &ObjectRef) -> Report;
}

#[async_trait]
impl<C: Controller> ReconcileKind for Reconciler<C> {
    async fn reconcile(&self, cr: &ObjectRef) -> Report {
        Reconciler::reconcile(self, cr).await
    }
}

/// Reconciles CRs on an in-memory cluster until no event asks for more.
pub struct DryRun {
    reconcilers: Vec<(TypeRef, Box<dyn ReconcileKind>)>,
    memory: Arc<MemoryCluster>,
}

impl DryRun {
    /// A dry run of `reconciler`, whose cluster must be `memory`.
    pub fn new<C: Controller>(reconciler: Reconciler<C>, memory: Arc<MemoryCluster>) -> Self {
        DryRun::on(memory).with(reconciler)
    }

    /// A dry run on `memory` with no controller yet: add them with [`DryRun::with`].
    pub fn on(memory: Arc<MemoryCluster>) -> Self {
        DryRun {
            reconcilers: Vec::new(),
            memory,
        }
    }

    /// Also reconcile the CRs of `reconciler`'s kind with it (its cluster must be this dry
    /// run's). A second reconciler of a kind already here is ignored.
    pub fn with<C: Controller>(mut self, reconciler: Reconciler<C>) -> Self {
        use kube::Resource as _;
        let kind = TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()));
        if !self.reconcilers.iter().any(|(k, _)| *k == kind) {
            self.reconcilers.push((kind, Box::new(reconciler)));
        }
        self
    }

    fn reconciler_of(&self, cr: &ObjectRef) -> Option<&dyn ReconcileKind> {
        self.reconcilers
            .iter()
            .find(|(kind, _)| kind.api_version == cr.api_version && kind.kind == cr.kind)
            .map(|(_, r)| r.as_ref())
    }

    /// Reconcile `crs`, then every CR the reconciles create, change or start deleting,
    /// one at a time, handing each report to `on_report` as it comes; returns them all.
    pub async fn run(
        &self,
        crs: impl IntoIterator<Item = ObjectRef>,
        mut on_report: impl FnMut(&Report),
    ) -> Vec<Report> {
        let mut events = self.memory.subscribe();
        let mut queue: VecDeque<ObjectRef> = VecDeque::new();
        for cr in crs {
            if !queue.contains(&cr) {
                queue.push_back(cr);
            }
        }
        let mut seen: BTreeMap<ObjectRef, Seen> = BTreeMap::new();
        let mut counts: BTreeMap<ObjectRef, usize> = BTreeMap::new();
        let mut reports = Vec::new();
        while let Some(cr) = queue.pop_front() {
            let count = counts.entry(cr.clone()).or_default();
            if *count >= MAX_RECONCILES_PER_CR {
                tracing::warn!(%cr, "reconciled {MAX_RECONCILES_PER_CR} times in this dry run; not again");
                continue;
            }
            *count += 1;
            if let Ok(Some(live)) = crate::cluster::Cluster::get(self.memory.as_ref(), &cr).await {
                seen.insert(cr.clone(), Seen::of(&live));
            }
            let Some(reconciler) = self.reconciler_of(&cr) else {
                tracing::warn!(%cr, "no controller of this kind in the dry run");
                continue;
            };
            let report = reconciler.reconcile(&cr).await;
            on_report(&report);
            reports.push(report);
            loop {
                match events.try_recv() {
                    Ok(event) => {
                        if let Some(next) = self.wants_reconcile(&event, &mut seen)
                            && !queue.contains(&next)
                        {
                            queue.push_back(next);
                        }
                    }
                    Err(TryRecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "dry run fell behind the cluster's events");
                    }
                    Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                }
            }
        }
        reports
    }

    /// The CR an event asks to reconcile: one of our kinds that appeared, got a new
    /// generation, or started terminating. Status and metadata writes (the reconciles' own)
    /// ask for nothing.
    fn wants_reconcile(
        &self,
        event: &WatchEvent,
        seen: &mut BTreeMap<ObjectRef, Seen>,
    ) -> Option<ObjectRef> {
        let object = &event.object;
        let ours = self.reconcilers.iter().any(|(kind, _)| {
            object.kind() == Some(kind.kind.as_str())
                && object.api_version() == Some(kind.api_version.as_str())
        });
        if !ours {
            return None;
        }
        let cr = ObjectRef::from_manifest(object).ok()?;
        let now = Seen::of(object);
        let before = seen.insert(cr.clone(), now);
        let wanted = match event.event_type {
            WatchEventType::Added => true,
            WatchEventType::Modified => before.is_none_or(|b| {
                b.generation != now.generation || (!b.terminating && now.terminating)
            }),
            WatchEventType::Deleted => false,
        };
        wanted.then_some(cr)
    }
}

/// What the work loop last saw of a CR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    generation: Option<i64>,
    terminating: bool,
}

impl Seen {
    fn of(object: &serde_json::Value) -> Self {
        Seen {
            generation: object.generation(),
            terminating: object.is_terminating(),
        }
    }
}

#[cfg(test)]
mod tests;
