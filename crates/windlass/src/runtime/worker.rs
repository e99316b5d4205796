//! Taking CRs from the queue and reconciling them, while this replica may.
//!
//! The worker starts a reconcile only while [`Leadership::is_leader`] holds at that
//! moment; with the per-CR annotation lock it first takes the CR's lock, and gives it up
//! when the reconcile ends, so that the replica that next sees a change of the CR can take
//! it at once. The queue bounds how many reconciles run at once (and the shards of a
//! sharded controller, each with a queue of its own, share [`WorkerSettings::permits`]);
//! each reports its [`Action`] back to the queue through
//! [`queue::next_run`](super::queue::next_run). When the queue shuts down, the worker
//! stops taking CRs and waits for the reconciles in flight, up to a bound, then cancels
//! the rest (they are safe to cancel: every step of a reconcile is idempotent).
//!
//! Reconciles run on a pool of tasks that live as long as the worker, not on a task each:
//! a reconcile's state is a few KiB, and a task spawned for each one asks the allocator for
//! that much every time. glibc's malloc answers any request of 1 KiB or more after small
//! frees by first merging its lists of small free blocks, which then no longer serve the
//! next small requests quickly: in a profile of an operator's periodic reconciles, a sixth
//! of their CPU was that merging after the spawn's allocation. The pool
//! grows only when a CR is taken and no task is idle, so it holds as many tasks as
//! reconciles ever ran at once (at most the queue's bound), a few KiB each.
//!
//! Each reconcile's start and end are logged at debug level (target
//! `windlass::runtime::worker`, fields `cr` and `controller`), after the lock was taken and
//! before it is given up: the record the live tests read to show that no CR is ever
//! reconciled by two replicas at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use windlass_tasks::queue::{Action, Lease, Priority};

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
    let pool = Arc::new(Pool {
        reconciler,
        leadership,
        settings,
        observer,
        queue,
        idle: Mutex::new(Some(Vec::new())),
    });
    let (leadership, settings, queue) = (&pool.leadership, &pool.settings, &pool.queue);
    let mut tasks = JoinSet::new();
    loop {
        while let Some(ended) = tasks.try_join_next() {
            if let Err(e) = ended {
                tracing::error!(controller = %settings.name, error = %e, "a reconcile task ended abnormally");
            }
        }
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
        pool.observer.queue(&settings.name, queue.stats());
        pool.hand_out(Job { permit, lease }, &mut tasks);
    }
    // Idle tasks end when their next job can no longer come; busy ones after their job.
    pool.idle.lock().take();
    drain(tasks, settings).await;
}

/// One reconcile handed to a task of the pool: the CR's lease and, with shared permits,
/// its share of them, held until the reconcile ends.
struct Job {
    permit: Option<OwnedSemaphorePermit>,
    lease: Lease<Arc<ObjectRef>>,
}

/// The tasks reconciles run on (see the module docs), and what they share.
struct Pool<C: Controller> {
    reconciler: Reconciler<C>,
    leadership: Leadership,
    settings: WorkerSettings,
    observer: Arc<dyn ReconcileObserver>,
    queue: ReconcileQueue,
    /// The idle tasks, each by the sending end of its next job's channel; `None` once the
    /// worker hands out no more.
    idle: Mutex<Option<Vec<oneshot::Sender<Job>>>>,
}

impl<C: Controller> Pool<C> {
    /// Give `job` to an idle task, or to a new one if none is idle.
    fn hand_out(self: &Arc<Self>, mut job: Job, tasks: &mut JoinSet<()>) {
        while let Some(idle) = self.idle.lock().as_mut().and_then(Vec::pop) {
            // A task that has ended since it became idle gives the job back.
            match idle.send(job) {
                Ok(()) => return,
                Err(back) => job = back,
            }
        }
        tasks.spawn(self.clone().serve(job));
    }

    /// One task of the pool: reconcile its job, then wait idle for the next one until the
    /// worker stops handing them out.
    async fn serve(self: Arc<Self>, mut job: Job) {
        loop {
            let (lease, next, priority) = self.reconcile_one(job.lease).await;
            // Idle before the lease is given back: the worker may take the next CR as soon
            // as the queue has a free slot, and should find this task waiting for it.
            let (tx, rx) = oneshot::channel();
            let open = self
                .idle
                .lock()
                .as_mut()
                .map(|idle| idle.push(tx))
                .is_some();
            lease.complete_as(next, priority);
            drop(job.permit);
            self.observer.queue(&self.settings.name, self.queue.stats());
            if !open {
                return;
            }
            match rx.await {
                Ok(next) => job = next,
                Err(_) => return,
            }
        }
    }

    /// One reconcile of the CR `lease` holds: take the CR's own lock if the lock kind has
    /// one, reconcile, give the lock up; returns the lease with when the CR is due again,
    /// for the caller to give back. A CR whose lock another replica holds is put back for
    /// later, not reconciled.
    async fn reconcile_one(
        &self,
        lease: Lease<Arc<ObjectRef>>,
    ) -> (Lease<Arc<ObjectRef>>, Action, Priority) {
        let settings = &self.settings;
        let key = lease.key().clone();
        match self.leadership.acquire(&key).await {
            Ok(true) => {}
            Ok(false) => {
                return (
                    lease,
                    Action::RequeueAfter(settings.lock_poll),
                    Priority::High,
                );
            }
            Err(e) => {
                tracing::warn!(cr = %key, error = %e, "cannot take the CR's lock");
                return (lease, Action::Retry, Priority::High);
            }
        }
        self.observer.started(&settings.name, lease.waited());
        tracing::debug!(cr = %key, controller = %settings.name, "reconcile started");
        let started = Instant::now();
        let report = self.reconciler.reconcile(&key).await;
        tracing::debug!(cr = %key, controller = %settings.name, "reconcile finished");
        // With the annotation lock, the next replica to see a change of the CR takes it at
        // once instead of after the lock expires; a failed release expires on its own.
        if let Err(e) = self.leadership.release(&key).await {
            tracing::debug!(cr = %key, error = %e, "cannot give up the CR's lock; it expires");
        }
        self.observer
            .finished(&settings.name, &report, started.elapsed());
        let (next, priority) = next_run(report.outcome, settings.period);
        (lease, next, priority)
    }
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use windlass_tasks::backoff::BackOffPolicy;

    use super::*;
    use crate::cluster::MemoryCluster;
    use crate::config::OperatorConfig;
    use crate::testing::{DummyController, TEST_NAMESPACE};

    /// Notes the task each reconcile ran on, and how many ran at once at most.
    #[derive(Default)]
    struct Tasks {
        ids: parking_lot::Mutex<HashSet<tokio::task::Id>>,
        running: AtomicUsize,
        most: AtomicUsize,
        finished: AtomicUsize,
    }

    impl ReconcileObserver for Tasks {
        fn started(&self, _: &str, _: Duration) {
            self.ids.lock().insert(tokio::task::id());
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
        }
        fn finished(&self, _: &str, _: &crate::reconcile::Report, _: Duration) {
            self.running.fetch_sub(1, Ordering::SeqCst);
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn cr(i: usize) -> Arc<ObjectRef> {
        Arc::new(ObjectRef::new(
            "test.windlass.dev/v1",
            "Widget",
            Some(TEST_NAMESPACE),
            format!("w-{i}"),
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconciles_reuse_a_pool_no_larger_than_the_queue_bound_and_a_stop_ends_it_at_once() {
        // No components: reconciling a CR that is not there ends at once.
        let reconciler = Reconciler::new(
            DummyController::new(),
            Arc::new(MemoryCluster::new()),
            OperatorConfig::default(),
        );
        let queue = super::super::queue::new_queue(3, BackOffPolicy::default()).unwrap();
        let observer = Arc::new(Tasks::default());
        let settings = WorkerSettings {
            name: "nothing".into(),
            period: None,
            lock_poll: Duration::from_secs(1),
            // Far beyond the test's deadline: ending in time means no task waited for it.
            drain: Duration::from_secs(600),
            permits: None,
        };
        let (stop, stopped) = watch::channel(false);
        let worker = tokio::spawn(run(
            reconciler,
            queue.clone(),
            Leadership::always(),
            settings,
            observer.clone(),
            stopped,
        ));
        let deadline = Duration::from_secs(30);
        // In bursts, so that reconciles run both one at a time and several at once.
        let mut sent = 0;
        for burst in [1, 10, 1, 1, 20, 1] {
            for _ in 0..burst {
                queue.enqueue(cr(sent));
                sent += 1;
            }
            tokio::time::timeout(deadline, async {
                while observer.finished.load(Ordering::SeqCst) < sent {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .expect("every CR is reconciled");
        }
        let tasks = observer.ids.lock().len();
        assert!(
            (1..=3).contains(&tasks),
            "{sent} reconciles ran on {tasks} tasks; the queue runs 3 at once"
        );
        assert!(observer.most.load(Ordering::SeqCst) <= 3);
        let _ = stop.send(true);
        queue.shutdown();
        tokio::time::timeout(deadline, worker)
            .await
            .expect("idle tasks end with the worker, without waiting out the drain")
            .expect("the worker ends normally");
    }
}
