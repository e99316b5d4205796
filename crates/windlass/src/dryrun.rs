//! Dry-run reconciling driven by the in-memory cluster's own watch events, without
//! recursion.
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

use tokio::sync::broadcast::error::TryRecvError;

use crate::cluster::{MemoryCluster, WatchEvent, WatchEventType};
use crate::controller::Controller;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::reconcile::{Reconciler, Report};

/// Reconciles of one CR in one dry run, at most.
pub const MAX_RECONCILES_PER_CR: usize = 10;

/// Reconciles CRs on an in-memory cluster until no event asks for more.
pub struct DryRun<C: Controller> {
    reconciler: Reconciler<C>,
    memory: Arc<MemoryCluster>,
    kind: TypeRef,
}

impl<C: Controller> DryRun<C> {
    /// A dry run of `reconciler`, whose cluster must be `memory`.
    pub fn new(reconciler: Reconciler<C>, memory: Arc<MemoryCluster>) -> Self {
        use kube::Resource as _;
        let kind = TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()));
        DryRun {
            reconciler,
            memory,
            kind,
        }
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
            let report = self.reconciler.reconcile(&cr).await;
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

    /// The CR an event asks to reconcile: one of our kind that appeared, got a new
    /// generation, or started terminating. Status and metadata writes (the reconciles' own)
    /// ask for nothing.
    fn wants_reconcile(
        &self,
        event: &WatchEvent,
        seen: &mut BTreeMap<ObjectRef, Seen>,
    ) -> Option<ObjectRef> {
        let object = &event.object;
        if object.kind() != Some(self.kind.kind.as_str())
            || object.api_version() != Some(self.kind.api_version.as_str())
        {
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
