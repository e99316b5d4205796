//! Taking CRs from the queue and reconciling them, while this replica may.
//!
//! The worker starts a reconcile only while [`Leadership::is_leader`] holds at that
//! moment; with the per-CR annotation lock it first takes the CR's lock, and gives it up
//! when the reconcile ends, so that the replica that next sees a change of the CR can take
//! it at once. Each reconcile runs as its own task (the queue bounds how many at once, and
//! the shards of a sharded controller, each with a queue of its own, share
//! [`WorkerSettings::permits`]) and reports its [`Action`] back to the queue through
//! [`queue::next_run`](super::queue::next_run). When the queue shuts down, the worker
//! stops taking CRs and waits for the reconciles in flight, up to a bound, then cancels
//! the rest (they are safe to cancel: every step of a reconcile is idempotent).
//!
//! Each reconcile's start and end are logged at debug level (target
//! `windlass::runtime::worker`, fields `cr` and `controller`), after the lock was taken and
//! before it is given up: the record the live tests read to show that no CR is ever
//! reconciled by two replicas at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use tokio::task::JoinSet;
use windlass_tasks::queue::{Action, Lease};

use super::leader::Leadership;
use super::queue::{ReconcileQueue, next_run};
use crate::controller::Controller;
use crate::object::ObjectRef;
use crate::reconcile::Reconciler;

/// What a worker needs besides its reconciler.
#[derive(Clone)]
pub struct WorkerSettings {
    /// The controller's name in logs and metrics.
    pub name: String,
    /// The periodic re-reconcile (`runtime.sync-period`), if on.
    pub period: Option<Duration>,
    /// How soon to try again a CR whose per-CR lock another replica holds.
    pub lock_poll: Duration,
    /// How long reconciles in flight may run on after shutdown begins.
    pub drain: Duration,
    /// Reconciles running at once across the queues that share these permits (the shards
    /// of a sharded controller); `None`: the queue's own bound only.
    pub permits: Option<Arc<Semaphore>>,
}

/// Observes each reconcile (for metrics).
pub trait ReconcileObserver: Send + Sync {
    /// A reconcile starts, after waiting `waited` in the queue.
    fn started(&self, controller: &str, waited: Duration);
    /// A reconcile ended.
    fn finished(&self, controller: &str, report: &crate::reconcile::Report, took: Duration);
    /// The controller's queue as it is now (after each hand-out and each completion).
    fn queue(&self, _controller: &str, _stats: windlass_tasks::queue::QueueStats) {}
}

/// Reconcile CRs from `queue` until it shuts down; then drain (see the module docs).
pub async fn run<C: Controller>(
    reconciler: Reconciler<C>,
    queue: ReconcileQueue,
    leadership: Leadership,
    settings: WorkerSettings,
    observer: Arc<dyn ReconcileObserver>,
    mut stop: watch::Receiver<bool>,
) {
    let mut in_flight = JoinSet::new();
    loop {
        while in_flight.try_join_next().is_some() {}
        if !leadership.is_leader() {
            tokio::select! {
                () = leadership.wait_until_leader() => continue,
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
        // The queue shuts down with `stop`: `acquire` then returns `None`.
        let Some(lease) = queue.acquire().await else {
            break;
        };
        let permit = match &settings.permits {
            None => None,
            Some(permits) => tokio::select! {
                permit = permits.clone().acquire_owned() => permit.ok(),
                _ = stop.wait_for(|stop| *stop) => {
                    lease.complete(Action::RequeueAfter(Duration::ZERO));
                    break;
                }
            },
        };
        if !leadership.is_leader() {
            // Lost it while waiting: leave the CR for whoever leads, as it was queued.
            let priority = lease.priority();
            lease.complete_as(Action::RequeueAfter(Duration::ZERO), priority);
            continue;
        }
        observer.queue(&settings.name, queue.stats());
        in_flight.spawn(reconcile_one(
            permit,
            lease,
            reconciler.clone(),
            leadership.clone(),
            settings.clone(),
            observer.clone(),
            queue.clone(),
        ));
    }
    drain(in_flight, &settings).await;
}

/// The task of one reconcile of the CR `lease` holds: take the CR's own lock if the lock
/// kind has one, reconcile, give the lock up, and tell the queue when the CR is due again.
/// A CR whose lock another replica holds is put back for later, not reconciled. `_permit`
/// is this reconcile's share of [`WorkerSettings::permits`], held until it ends.
async fn reconcile_one<C: Controller>(
    _permit: Option<OwnedSemaphorePermit>,
    lease: Lease<Arc<ObjectRef>>,
    reconciler: Reconciler<C>,
    leadership: Leadership,
    settings: WorkerSettings,
    observer: Arc<dyn ReconcileObserver>,
    queue: ReconcileQueue,
) {
    let key = lease.key().clone();
    match leadership.acquire(&key).await {
        Ok(true) => {}
        Ok(false) => {
            lease.complete(Action::RequeueAfter(settings.lock_poll));
            return;
        }
        Err(e) => {
            tracing::warn!(cr = %key, error = %e, "cannot take the CR's lock");
            lease.complete(Action::Retry);
            return;
        }
    }
    observer.started(&settings.name, lease.waited());
    tracing::debug!(cr = %key, controller = %settings.name, "reconcile started");
    let started = Instant::now();
    let report = reconciler.reconcile(&key).await;
    tracing::debug!(cr = %key, controller = %settings.name, "reconcile finished");
    // With the annotation lock, the next replica to see a change of the CR takes it at
    // once instead of after the lock expires; a failed release expires on its own.
    if let Err(e) = leadership.release(&key).await {
        tracing::debug!(cr = %key, error = %e, "cannot give up the CR's lock; it expires");
    }
    observer.finished(&settings.name, &report, started.elapsed());
    let (next, priority) = next_run(report.outcome, settings.period);
    lease.complete_as(next, priority);
    observer.queue(&settings.name, queue.stats());
}

/// Once the queue has shut down: wait for the reconciles in flight for up to
/// `settings.drain`, then cancel those still running.
async fn drain(mut in_flight: JoinSet<()>, settings: &WorkerSettings) {
    let drained = tokio::time::timeout(settings.drain, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            controller = %settings.name,
            left = in_flight.len(),
            "reconciles still running at the end of the drain: cancelled"
        );
        in_flight.shutdown().await;
    }
}
