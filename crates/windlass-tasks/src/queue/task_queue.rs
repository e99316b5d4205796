//! The queue's handle, [`TaskQueue`], and its builder: what producers and consumers call.

use std::borrow::Borrow;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::lease::Lease;
use super::lines::{Due, Slot, deadline_after};
use super::shared::{Parked, Shared};
use super::state::State;
use super::{Action, Enqueued, KeyPlace, KeyState, Priority, QueueConfigError, QueueStats};
use crate::backoff::BackOffPolicy;

/// Builder for a [`TaskQueue`]; see [`TaskQueue::builder`].
#[derive(Debug, Clone)]
pub struct TaskQueueBuilder {
    max_concurrent: usize,
    backoff: BackOffPolicy,
    preempt_backoff: bool,
    low_share: usize,
}

/// The default of [`TaskQueueBuilder::low_share`].
pub const DEFAULT_LOW_SHARE: usize = 4;

impl Default for TaskQueueBuilder {
    fn default() -> Self {
        Self {
            max_concurrent: 1,
            backoff: BackOffPolicy::default(),
            preempt_backoff: false,
            low_share: DEFAULT_LOW_SHARE,
        }
    }
}

impl TaskQueueBuilder {
    /// How many keys may run at once over all consumers. Default 1 (yaook runs one task at a
    /// time, as does controller-runtime by default).
    pub const fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n;
        self
    }

    /// The back-off for failed keys. Default: [`BackOffPolicy::default`] (0.5 s × 2 up to 120 s,
    /// jitter 0.1, as yaook's `TaskQueue`).
    pub const fn backoff(mut self, policy: BackOffPolicy) -> Self {
        self.backoff = policy;
        self
    }

    /// Whether an enqueue may bring a failing key forward of its back-off deadline.
    /// Default `false`: a failing key runs again after its back-off and not before, whatever
    /// is enqueued meanwhile (rule 4 of the [module docs](super)).
    ///
    /// With `true`, the earliest due time always wins (client-go's workqueue behaves so): an
    /// event for a key waiting out its back-off runs it now, and a rerun mark taken during a
    /// failing run runs it as soon as the run ends. The back-off itself is kept (the next
    /// failure waits longer still); only a success resets it. Use it only where events are
    /// known not to be caused by the failing run itself, or a failing key reruns in a loop.
    pub const fn preempt_backoff(mut self, preempt: bool) -> Self {
        self.preempt_backoff = preempt;
        self
    }

    /// How many [`Priority::High`] keys may be handed out in a row while
    /// [`Priority::Low`] keys wait: the next one is the oldest low key. Default
    /// [`DEFAULT_LOW_SHARE`] (4): low keys get at least a fifth of the runs while both
    /// lines hold keys, and all of them once the high line is empty (rule 8 of the
    /// [module docs](super)).
    pub const fn low_share(mut self, n: usize) -> Self {
        self.low_share = n;
        self
    }

    /// Builds the queue.
    ///
    /// # Errors
    /// [`QueueConfigError::ZeroConcurrency`] if `max_concurrent` is 0,
    /// [`QueueConfigError::ZeroLowShare`] if `low_share` is 0.
    pub fn build<K: Hash + Eq + Clone + Send + 'static>(
        self,
    ) -> Result<TaskQueue<K>, QueueConfigError> {
        if self.max_concurrent == 0 {
            return Err(QueueConfigError::ZeroConcurrency);
        }
        if self.low_share == 0 {
            return Err(QueueConfigError::ZeroLowShare);
        }
        Ok(TaskQueue::from_parts(self))
    }
}

/// A de-duplicating, retrying queue of keys with bounded concurrency; see the [module docs](super).
///
/// Cloning gives another handle to the same queue.
pub struct TaskQueue<K> {
    pub(super) shared: Arc<Shared<K>>,
}

impl<K> Clone for TaskQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> std::fmt::Debug for TaskQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskQueue")
            .field("max_concurrent", &self.shared.max_concurrent)
            .field("backoff", &self.shared.backoff)
            .field("preempt_backoff", &self.shared.preempt_backoff)
            .field("low_share", &self.shared.low_share)
            .finish_non_exhaustive()
    }
}

impl TaskQueue<()> {
    /// A builder with the defaults (one run at a time, yaook's back-off).
    pub fn builder() -> TaskQueueBuilder {
        TaskQueueBuilder::default()
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> TaskQueue<K> {
    /// A queue with the default configuration (see [`TaskQueueBuilder`]).
    pub fn new() -> Self {
        Self::from_parts(TaskQueueBuilder::default())
    }

    fn from_parts(config: TaskQueueBuilder) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::new()),
                notify: Notify::new(),
                max_concurrent: config.max_concurrent.max(1),
                backoff: config.backoff,
                preempt_backoff: config.preempt_backoff,
                low_share: config.low_share.max(1),
            }),
        }
    }

    /// The configured bound on concurrent runs.
    pub fn max_concurrent(&self) -> usize {
        self.shared.max_concurrent
    }

    /// Run `key` as soon as possible (see the merge rules in the [module docs](super)): now,
    /// or after its back-off if it is failing.
    pub fn enqueue(&self, key: K) -> Enqueued {
        self.shared.enqueue(key, Due::Now, Priority::High)
    }

    /// [`enqueue`](Self::enqueue) at `priority`: a key pending at a lower one is promoted,
    /// one pending at a higher one keeps it (rule 8 of the [module docs](super)).
    pub fn enqueue_as(&self, key: K, priority: Priority) -> Enqueued {
        self.shared.enqueue(key, Due::Now, priority)
    }

    /// Run `key` as soon as possible, even if it is failing and waiting out its back-off:
    /// for a change that may be the fix (an operator's user edited the spec), where waiting
    /// minutes for the back-off would help no one. The back-off itself is kept (the next
    /// failure waits longer still); only a success resets it. A running key is marked to
    /// run again as with [`enqueue`](Self::enqueue).
    pub fn enqueue_preempting(&self, key: K) -> Enqueued {
        self.shared
            .enqueue_with(key, Due::Now, Priority::High, true)
    }

    /// Run `key` once `delay` has passed, or earlier if it is already due earlier (never
    /// before the back-off of a failing key ends).
    pub fn enqueue_after(&self, key: K, delay: Duration) -> Enqueued {
        self.enqueue_after_as(key, delay, Priority::High)
    }

    /// [`enqueue_after`](Self::enqueue_after) at `priority` (see
    /// [`enqueue_as`](Self::enqueue_as)).
    pub fn enqueue_after_as(&self, key: K, delay: Duration, priority: Priority) -> Enqueued {
        if delay.is_zero() {
            return self.enqueue_as(key, priority);
        }
        let now = Instant::now();
        self.shared
            .enqueue(key, Due::At(deadline_after(now, delay)), priority)
    }

    /// Run `key` at `when` (a [`tokio::time::Instant`]), or earlier if it is already due
    /// earlier (never before the back-off of a failing key ends).
    pub fn enqueue_at(&self, key: K, when: Instant) -> Enqueued {
        if when <= Instant::now() {
            return self.enqueue(key);
        }
        self.shared.enqueue(key, Due::At(when), Priority::High)
    }

    /// Removes a pending key (and its back-off) so it does not run. Returns whether it was
    /// pending. A running key is not affected: end its run with [`Action::Done`] instead.
    /// The key may be given in any form it borrows as (`&str` for `String` keys, `&T`
    /// for `Arc<T>` keys).
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shared.remove(key)
    }

    /// Whether `key` is pending or running.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shared.state.lock().entries.contains_key(key)
    }

    /// Where `key` is, if the queue holds it (pending or running), and how many of its runs
    /// in a row failed: what an operator's "why is this one not done" needs.
    pub fn inspect<Q>(&self, key: &Q) -> Option<KeyState>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = self.shared.state.lock();
        let entry = state.entries.get(key)?;
        let place = match entry.slot {
            Slot::Ready { .. } => KeyPlace::Ready,
            Slot::Delayed { due, .. } => KeyPlace::Delayed(due),
            Slot::Running { rerun } => KeyPlace::Running {
                rerun: rerun.is_some(),
            },
        };
        let priority = match entry.slot {
            Slot::Running {
                rerun: Some((_, marked)),
            } => entry.priority.max(marked),
            _ => entry.priority,
        };
        Some(KeyState {
            place,
            failures: entry.backoff.attempts(),
            priority,
        })
    }

    /// A snapshot of the queue's counts.
    pub fn stats(&self) -> QueueStats {
        self.shared.state.lock().stats()
    }

    /// Stops dispatching: [`acquire`](Self::acquire) returns `None` from now on and
    /// [`run`](Self::run) returns once the runs in flight have finished. Runs in flight still
    /// report their outcome; enqueues are still recorded, so nothing is lost, but not run.
    pub fn shutdown(&self) {
        self.shared.state.lock().shutdown = true;
        self.shared.notify.notify_waiters();
    }

    /// Waits for the next due key and leases it, or returns `None` once the queue is shut down.
    ///
    /// Waits while [`max_concurrent`](Self::max_concurrent) keys are leased. The key is the
    /// holder's until the [`Lease`] is [completed](Lease::complete); dropping the lease without
    /// completing it counts as [`Action::Retry`], so a panicking or cancelled worker never
    /// loses its key. Cancel-safe: dropping the future before it resolves loses nothing.
    pub async fn acquire(&self) -> Option<Lease<K>> {
        let mut parked = None;
        loop {
            // Registered before looking, so a wake-up between the look and the wait is kept.
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            if parked.is_some() {
                notified.as_mut().enable();
            }
            let wake_at = {
                let mut state = self.shared.state.lock();
                if state.shutdown {
                    return None;
                }
                let max = self.shared.max_concurrent;
                let taken = if state.running < max {
                    state.take_next(max, self.shared.low_share)
                } else {
                    None
                };
                if let Some((key, retries, more, since, priority)) = taken {
                    // Pass the baton: another parked consumer should watch what is left.
                    let baton = more && state.waiting > usize::from(parked.is_some());
                    drop(state);
                    drop(parked);
                    if baton {
                        self.shared.notify.notify_one();
                    }
                    return Some(Lease::new(
                        Arc::clone(&self.shared),
                        key,
                        retries,
                        since.elapsed(),
                        priority,
                    ));
                }
                if parked.is_none() {
                    // Nothing to take on the fast path: park, then look again before waiting.
                    state.waiting += 1;
                    drop(state);
                    parked = Some(Parked(&*self.shared));
                    continue;
                }
                if state.running < max {
                    state.earliest_timer()
                } else {
                    None
                }
            };
            match wake_at {
                Some(deadline) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Leases the next due key if one is due and a slot is free, without waiting; `None`
    /// otherwise (and once the queue is shut down). Same lease rules as
    /// [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Option<Lease<K>> {
        let mut state = self.shared.state.lock();
        if state.shutdown || state.running >= self.shared.max_concurrent {
            return None;
        }
        let (key, retries, more, since, priority) =
            state.take_next(self.shared.max_concurrent, self.shared.low_share)?;
        let baton = more && state.waiting > 0;
        drop(state);
        if baton {
            self.shared.notify.notify_one();
        }
        Some(Lease::new(
            Arc::clone(&self.shared),
            key,
            retries,
            since.elapsed(),
            priority,
        ))
    }

    /// Runs `worker` for every due key, at most [`max_concurrent`](Self::max_concurrent) at once,
    /// each on its own Tokio task, until [`shutdown`](Self::shutdown); then waits for the runs in
    /// flight and returns.
    ///
    /// A worker that panics counts as [`Action::Retry`] for its key; the panic is logged
    /// and the queue keeps going. Dropping this future aborts the runs in flight, which also
    /// count as failures (their keys come back after their back-off).
    pub async fn run<F, Fut>(&self, worker: F)
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Action> + Send + 'static,
    {
        let worker = Arc::new(worker);
        let mut running = JoinSet::new();
        let spawn = |running: &mut JoinSet<()>, lease: Lease<K>| {
            let worker = Arc::clone(&worker);
            running.spawn(async move {
                let outcome = worker(lease.key().clone()).await;
                lease.complete(outcome);
            });
        };
        loop {
            while let Some(done) = running.try_join_next() {
                report_join(done);
            }
            // Fast path: no future to build while keys are due and slots are free.
            if let Some(lease) = self.try_acquire() {
                spawn(&mut running, lease);
                continue;
            }
            if running.len() >= self.shared.max_concurrent {
                // Our own runs fill the bound: only a finished one can free a slot.
                if let Some(done) = running.join_next().await {
                    report_join(done);
                }
                continue;
            }
            tokio::select! {
                biased;
                Some(done) = running.join_next(), if !running.is_empty() => report_join(done),
                lease = self.acquire() => match lease {
                    Some(lease) => spawn(&mut running, lease),
                    None => break,
                },
            }
        }
        while let Some(done) = running.join_next().await {
            report_join(done);
        }
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Default for TaskQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

fn report_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(err) = done
        && err.is_panic()
    {
        tracing::error!(error = %err, "task queue worker panicked; its key will be retried after back-off");
    }
}
