//! A de-duplicating, retrying task queue keyed by `K` (yaook's `TaskQueue`), shaped to be the
//! reconcile queue of an operator.
//!
//! A [`TaskQueue`] holds at most one entry per key. Producers call [`enqueue`](TaskQueue::enqueue)
//! (run as soon as possible) or [`enqueue_after`](TaskQueue::enqueue_after) /
//! [`enqueue_at`](TaskQueue::enqueue_at) (run later); consumers either let
//! [`run`](TaskQueue::run) call a worker for every due key, or pull keys themselves with
//! [`acquire`](TaskQueue::acquire) (waits) or [`try_acquire`](TaskQueue::try_acquire) (does not)
//! and report back through the returned [`Lease`]. A run ends in
//! a [`Action`]: done, run again after a delay, or failed (retry with back-off).
//!
//! ```
//! use std::time::Duration;
//! use windlass_tasks::queue::{Action, TaskQueue};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), windlass_tasks::queue::QueueConfigError> {
//! let queue: TaskQueue<String> = TaskQueue::builder().max_concurrent(4).build()?;
//! queue.enqueue("default/web".to_string());
//! queue.enqueue("default/web".to_string()); // merged: still one entry
//! assert_eq!(queue.stats().ready, 1);
//!
//! let worker_queue = queue.clone();
//! let runner = tokio::spawn(async move {
//!     worker_queue
//!         .run(|key: String| async move {
//!             println!("reconciling {key}");
//!             Action::Done
//!         })
//!         .await
//! });
//! # tokio::task::yield_now().await;
//! queue.shutdown(); // stop dispatching; `run` returns once running tasks are finished
//! # let _ = runner.await;
//! # Ok(())
//! # }
//! ```
//!
//! # Semantics
//!
//! 1. **One entry per key.** Enqueueing a key that is already pending merges with the pending
//!    entry, and the **earliest due time wins**: a key waiting out a requeue-after delay that
//!    is enqueued again for "now" runs now. A later due time never postpones a pending key.
//!    The one exception is a *failing* key (rule 4): nothing brings it forward of its back-off.
//! 2. **One run per key at a time.** Enqueueing a key while it runs marks it to run once more
//!    after the current run ends (at the earliest due time asked for meanwhile); it is never
//!    handed out twice at once. If that run fails, the mark is folded into the retry, which
//!    comes after the back-off (rule 4).
//! 3. **First runs are FIFO.** Keys are handed out in the order they became due: keys enqueued
//!    for "now" in the order of their `enqueue` calls, a key whose delay expired ahead of keys
//!    enqueued after its due time (ties keep enqueue order).
//! 4. **Failures back off per key and are never dropped.** A run that ends in
//!    [`Action::Retry`] (or panics, or whose [`Lease`] is dropped unfinished) brings the key
//!    back after its own exponential back-off with jitter ([`BackOffPolicy`], yaook's defaults
//!    0.5 s × 2 up to 120 s, ±10 %), **and not before**. While a key is failing (its last run
//!    ended in `Retry` and it has not succeeded since), an enqueue or a rerun mark never brings
//!    it forward of its back-off deadline: it runs at `max(back-off deadline, due time asked
//!    for)`, which merged with the pending retry is the deadline itself, so an enqueue during
//!    the wait reports [`Enqueued::BackingOff`] and changes nothing. Other keys are not held
//!    up. Any successful outcome ([`Done`](Action::Done),
//!    [`RequeueAfter`](Action::RequeueAfter)) resets that key's back-off, and rule 1's
//!    merging applies in full again. (This keeps a reconcile that writes status and then fails
//!    from rerunning at once on the watch event its own write caused; a queue that should let
//!    events cut a back-off short, as client-go's workqueue does, opts in with
//!    [`preempt_backoff`](TaskQueueBuilder::preempt_backoff).)
//! 5. **Bounded concurrency.** At most [`max_concurrent`](TaskQueueBuilder::max_concurrent) keys
//!    are leased at once, over all consumers.
//! 6. **Clean shutdown.** After [`shutdown`](TaskQueue::shutdown) nothing more is dispatched;
//!    runs in flight finish and report as usual, and [`run`](TaskQueue::run) returns when the
//!    last of them has. Pending keys stay visible in [`stats`](TaskQueue::stats).
//! 7. **Memory follows the pending keys.** The queue keeps state only for keys that are pending
//!    or running: a key whose run ends in `Done` with no further enqueue is forgotten, back-off
//!    and all. Re-enqueueing a pending key adds no entry; the stale timer an advanced key
//!    leaves behind is dropped when it surfaces or, if they pile up, once stale slots
//!    outnumber live ones; and the tables shrink when they empty out.
//!
//! Order is not a dependency mechanism: a failing key comes back later while others go ahead.
//!
//! # Why hand-written
//!
//! kube-runtime's `scheduler` + `runner` give de-duplication and one run per key, but no per-key
//! back-off that resets on success (kube-rs #1916), and no way to report an outcome back;
//! client-go's workqueue is the closest model and is what this follows (mutex + condition, dirty
//! set, processing set), with the rate limiter folded into the entry. The timer side is a binary
//! heap with lazy deletion rather than `tokio_util::time::DelayQueue`: keys due now never touch a
//! timer (they go straight to a FIFO), only the earliest deadline needs one `sleep_until`, ties
//! keep their enqueue order, and there is no 1 ms wheel granularity, which keeps paused-time
//! tests exact. Notification is event-driven ([`tokio::sync::Notify`]); nothing polls.
//!
//! [`BackOffPolicy`]: crate::backoff::BackOffPolicy

use std::cmp::Ordering;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backoff::{BackOffPolicy, BackOffState};

/// What next for a key, as one run of it ends: the queue schedules the key's next run from
/// it. windlass's reconciles, status hooks and workers all speak this one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Success; the key leaves the queue (unless it was enqueued again while running) and its
    /// back-off is reset.
    Done,
    /// Success; run the key again after this delay (periodic resync, polling a slow resource).
    /// Resets the back-off. A zero delay puts the key at the back of the ready line.
    RequeueAfter(Duration),
    /// Failure; run the key again after its next back-off delay (with jitter), which grows
    /// with each consecutive failure of this key. Until then the key is *failing*: enqueues do
    /// not bring it forward (unless [`TaskQueueBuilder::preempt_backoff`] is set), and a rerun
    /// mark taken during this run is folded into the retry.
    Retry,
}

/// `Ok(None)` → [`Done`](Action::Done), `Ok(Some(d))` →
/// [`RequeueAfter(d)`](Action::RequeueAfter), `Err(_)` → [`Retry`](Action::Retry):
/// a worker returning `Result<Option<Duration>, E>` can end with `.into()` (log the error first).
impl<E> From<Result<Option<Duration>, E>> for Action {
    fn from(result: Result<Option<Duration>, E>) -> Self {
        match result {
            Ok(None) => Action::Done,
            Ok(Some(delay)) => Action::RequeueAfter(delay),
            Err(_) => Action::Retry,
        }
    }
}

/// What an enqueue call did, for callers that count or log it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// The key was not in the queue; it now is.
    Added,
    /// The key was pending with a later due time; it is now due earlier.
    Advanced,
    /// The key was already pending with an earlier or equal due time; nothing changed.
    Unchanged,
    /// The key is running; it will run once more after the current run ends (after its
    /// back-off, if the current run fails).
    Rerun,
    /// The key is failing and waiting out its back-off, which ends later than the due time
    /// asked for; the key runs at the back-off deadline and nothing changed. Never reported
    /// with [`TaskQueueBuilder::preempt_backoff`].
    BackingOff,
}

/// A [`TaskQueue`] configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueConfigError {
    /// `max_concurrent` was zero.
    #[error("max_concurrent must be at least 1 (got 0): a queue that may run nothing never drains")]
    ZeroConcurrency,
}

/// Where one key is in a [`TaskQueue`] ([`TaskQueue::inspect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPlace {
    /// Due now, waiting for a free slot.
    Ready,
    /// Waiting until this instant: a back-off after a failure, or a requested delay.
    Delayed(Instant),
    /// Leased to a worker; `rerun`: it was enqueued again meanwhile and runs once more.
    Running {
        /// Whether it runs again when this run ends.
        rerun: bool,
    },
}

/// One key's state in a [`TaskQueue`] ([`TaskQueue::inspect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyState {
    /// Where it is.
    pub place: KeyPlace,
    /// Its runs in a row that failed; 0 once one succeeds.
    pub failures: u32,
}

/// Counts for metrics and health checks: a snapshot taken under the queue's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Keys due now, waiting for a free slot (client-go's "depth").
    pub ready: usize,
    /// Keys waiting for a due time (back-off or requeue-after).
    pub delayed: usize,
    /// Keys currently leased to a worker.
    pub running: usize,
    /// Running keys already marked to run again when they end.
    pub rerun_marked: usize,
    /// Keys in the queue whose last run failed (they are backing off or waiting to retry).
    pub failing: usize,
    /// Runs handed out since the queue was created.
    pub dispatched_total: u64,
    /// Runs that ended in failure since the queue was created.
    pub failures_total: u64,
    /// Whether [`TaskQueue::shutdown`] was called.
    pub shut_down: bool,
}

impl QueueStats {
    /// Distinct keys the queue holds (pending or running).
    pub const fn keys(&self) -> usize {
        self.ready + self.delayed + self.running
    }
}

/// Builder for a [`TaskQueue`]; see [`TaskQueue::builder`].
#[derive(Debug, Clone)]
pub struct TaskQueueBuilder {
    max_concurrent: usize,
    backoff: BackOffPolicy,
    preempt_backoff: bool,
}

impl Default for TaskQueueBuilder {
    fn default() -> Self {
        Self {
            max_concurrent: 1,
            backoff: BackOffPolicy::default(),
            preempt_backoff: false,
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
    /// is enqueued meanwhile (rule 4 of the [module docs](self)).
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

    /// Builds the queue.
    ///
    /// # Errors
    /// [`QueueConfigError::ZeroConcurrency`] if `max_concurrent` is 0.
    pub fn build<K: Hash + Eq + Clone + Send + 'static>(
        self,
    ) -> Result<TaskQueue<K>, QueueConfigError> {
        if self.max_concurrent == 0 {
            return Err(QueueConfigError::ZeroConcurrency);
        }
        Ok(TaskQueue::from_parts(self))
    }
}

/// A de-duplicating, retrying queue of keys with bounded concurrency; see the [module docs](self).
///
/// Cloning gives another handle to the same queue.
pub struct TaskQueue<K> {
    shared: Arc<Shared<K>>,
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
            }),
        }
    }

    /// The configured bound on concurrent runs.
    pub fn max_concurrent(&self) -> usize {
        self.shared.max_concurrent
    }

    /// Run `key` as soon as possible (see the merge rules in the [module docs](self)): now,
    /// or after its back-off if it is failing.
    pub fn enqueue(&self, key: K) -> Enqueued {
        self.shared.enqueue(key, Due::Now)
    }

    /// Run `key` as soon as possible, even if it is failing and waiting out its back-off:
    /// for a change that may be the fix (an operator's user edited the spec), where waiting
    /// minutes for the back-off would help no one. The back-off itself is kept (the next
    /// failure waits longer still); only a success resets it. A running key is marked to
    /// run again as with [`enqueue`](Self::enqueue).
    pub fn enqueue_preempting(&self, key: K) -> Enqueued {
        self.shared.enqueue_with(key, Due::Now, true)
    }

    /// Run `key` once `delay` has passed, or earlier if it is already due earlier (never
    /// before the back-off of a failing key ends).
    pub fn enqueue_after(&self, key: K, delay: Duration) -> Enqueued {
        if delay.is_zero() {
            return self.enqueue(key);
        }
        let now = Instant::now();
        self.shared
            .enqueue(key, Due::At(deadline_after(now, delay)))
    }

    /// Run `key` at `when` (a [`tokio::time::Instant`]), or earlier if it is already due
    /// earlier (never before the back-off of a failing key ends).
    pub fn enqueue_at(&self, key: K, when: Instant) -> Enqueued {
        if when <= Instant::now() {
            return self.enqueue(key);
        }
        self.shared.enqueue(key, Due::At(when))
    }

    /// Removes a pending key (and its back-off) so it does not run. Returns whether it was
    /// pending. A running key is not affected: end its run with [`Action::Done`] instead.
    pub fn remove(&self, key: &K) -> bool {
        self.shared.remove(key)
    }

    /// Whether `key` is pending or running.
    pub fn contains(&self, key: &K) -> bool {
        self.shared.state.lock().entries.contains_key(key)
    }

    /// Where `key` is, if the queue holds it (pending or running), and how many of its runs
    /// in a row failed: what an operator's "why is this one not done" needs.
    pub fn inspect(&self, key: &K) -> Option<KeyState> {
        let state = self.shared.state.lock();
        let entry = state.entries.get(key)?;
        let place = match entry.slot {
            Slot::Ready { .. } => KeyPlace::Ready,
            Slot::Delayed { due, .. } => KeyPlace::Delayed(due),
            Slot::Running { rerun } => KeyPlace::Running {
                rerun: rerun.is_some(),
            },
        };
        Some(KeyState {
            place,
            failures: entry.backoff.attempts(),
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
                    state.take_next(max)
                } else {
                    None
                };
                if let Some((key, retries, more, since)) = taken {
                    // Pass the baton: another parked consumer should watch what is left.
                    let baton = more && state.waiting > usize::from(parked.is_some());
                    drop(state);
                    drop(parked);
                    if baton {
                        self.shared.notify.notify_one();
                    }
                    return Some(Lease {
                        shared: Arc::clone(&self.shared),
                        key: Some(key),
                        retries,
                        waited: since.elapsed(),
                    });
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
        let (key, retries, more, since) = state.take_next(self.shared.max_concurrent)?;
        let baton = more && state.waiting > 0;
        drop(state);
        if baton {
            self.shared.notify.notify_one();
        }
        Some(Lease {
            shared: Arc::clone(&self.shared),
            key: Some(key),
            retries,
            waited: since.elapsed(),
        })
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

/// The right to run one key, handed out by [`TaskQueue::acquire`].
///
/// Report how the run ended with [`complete`](Self::complete). Dropping a lease without
/// completing it reports [`Action::Retry`].
pub struct Lease<K: Hash + Eq + Clone + Send + 'static> {
    shared: Arc<Shared<K>>,
    key: Option<K>,
    retries: u32,
    waited: Duration,
}

impl<K: Hash + Eq + Clone + Send + 'static> Lease<K> {
    /// The key to run.
    pub fn key(&self) -> &K {
        // Invariant: `key` is `Some` until `finish`, which only `complete` and `drop` call.
        match &self.key {
            Some(key) => key,
            None => unreachable!("lease key taken before the lease ended"),
        }
    }

    /// How many consecutive failed runs of this key precede this one (0 on a first run or after
    /// a success).
    pub const fn retries(&self) -> u32 {
        self.retries
    }

    /// How long the key waited for this run: from when it became due (enqueued for now,
    /// or its delay or back-off expired) until it was handed out — client-go's queue
    /// latency.
    pub const fn waited(&self) -> Duration {
        self.waited
    }

    /// Ends the run and schedules what comes next for the key.
    pub fn complete(mut self, outcome: Action) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Action) {
        if let Some(key) = self.key.take() {
            self.shared.complete(key, outcome);
        }
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Drop for Lease<K> {
    fn drop(&mut self) {
        self.finish(Action::Retry);
    }
}

impl<K: Hash + Eq + Clone + Send + std::fmt::Debug + 'static> std::fmt::Debug for Lease<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("retries", &self.retries)
            .finish()
    }
}

/// Thirty years: far enough to mean "later than anything real", near enough for `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

fn deadline_after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay.min(FAR_FUTURE))
        .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        .unwrap_or(now)
}

struct Shared<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    max_concurrent: usize,
    backoff: BackOffPolicy,
    preempt_backoff: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Due {
    Now,
    At(Instant),
}

impl Due {
    fn min(self, other: Self) -> Self {
        match (self, other) {
            (Due::At(a), Due::At(b)) => Due::At(a.min(b)),
            _ => Due::Now,
        }
    }

    fn is_earlier_than(self, other: Self) -> bool {
        match (self, other) {
            (Due::Now, Due::At(_)) => true,
            (Due::At(a), Due::At(b)) => a < b,
            (_, Due::Now) => false,
        }
    }
}

/// Where an entry is. `seq` identifies the one live slot in the ready line or timer heap;
/// slots whose `seq` no longer matches their entry are stale and skipped.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Ready { seq: u64 },
    Delayed { due: Instant, seq: u64 },
    Running { rerun: Option<Due> },
}

struct Entry {
    slot: Slot,
    backoff: BackOffState,
}

struct Timer<K> {
    due: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Timer<K> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}
impl<K> Eq for Timer<K> {}
impl<K> PartialOrd for Timer<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Timer<K> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest `(due, seq)` first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// The queue's lines: where pending keys wait. Kept apart from the entry map so that both can
/// be borrowed at once (one hash lookup per operation).
struct Lines<K> {
    /// Ready keys with the instant each became due.
    ready: VecDeque<(u64, K, Instant)>,
    timers: BinaryHeap<Timer<K>>,
    next_seq: u64,
    stale_ready: usize,
    stale_timers: usize,
    delayed: usize,
}

impl<K> Lines<K> {
    /// Puts a key into the ready line or the timer heap. Returns its slot and whether a
    /// consumer should be woken (it is due now, or it is the new earliest timer).
    fn place(&mut self, key: K, due: Due) -> (Slot, bool) {
        self.place_since(key, due, Instant::now())
    }

    /// [`Lines::place`] for a key due since `since` (a timer that expired then).
    fn place_since(&mut self, key: K, due: Due, since: Instant) -> (Slot, bool) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match due {
            Due::Now => {
                self.ready.push_back((seq, key, since));
                (Slot::Ready { seq }, true)
            }
            Due::At(due) => {
                let earliest = self.timers.peek().is_none_or(|top| due < top.due);
                self.timers.push(Timer { due, seq, key });
                self.delayed += 1;
                (Slot::Delayed { due, seq }, earliest)
            }
        }
    }

    /// Marks the slot an entry leaves as stale.
    fn leave(&mut self, slot: Slot) {
        match slot {
            Slot::Ready { .. } => self.stale_ready += 1,
            Slot::Delayed { .. } => {
                self.stale_timers += 1;
                self.delayed -= 1;
            }
            Slot::Running { .. } => {}
        }
    }

    fn ready_len(&self) -> usize {
        self.ready.len() - self.stale_ready
    }
}

struct State<K> {
    entries: HashMap<K, Entry>,
    lines: Lines<K>,
    running: usize,
    rerun_marked: usize,
    failing: usize,
    /// Consumers parked in `acquire`; notifications are only sent when there is one.
    waiting: usize,
    dispatched_total: u64,
    failures_total: u64,
    shutdown: bool,
}

/// Tables below this size are never shrunk or compacted; the work would cost more than it saves.
const COMPACT_MIN: usize = 1024;

fn is_live_timer<K: Hash + Eq>(entries: &HashMap<K, Entry>, key: &K, seq: u64) -> bool {
    matches!(entries.get(key), Some(Entry { slot: Slot::Delayed { seq: live, .. }, .. }) if *live == seq)
}

impl<K: Hash + Eq + Clone> State<K> {
    fn new() -> Self {
        Self {
            entries: HashMap::new(),
            lines: Lines {
                ready: VecDeque::new(),
                timers: BinaryHeap::new(),
                next_seq: 0,
                stale_ready: 0,
                stale_timers: 0,
                delayed: 0,
            },
            running: 0,
            rerun_marked: 0,
            failing: 0,
            waiting: 0,
            dispatched_total: 0,
            failures_total: 0,
            shutdown: false,
        }
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            ready: self.lines.ready_len(),
            delayed: self.lines.delayed,
            running: self.running,
            rerun_marked: self.rerun_marked,
            failing: self.failing,
            dispatched_total: self.dispatched_total,
            failures_total: self.failures_total,
            shut_down: self.shutdown,
        }
    }

    /// Returns what the enqueue did and whether a consumer should be woken. Unless `preempt`,
    /// a failing key waiting out its back-off is not brought forward.
    fn enqueue(&mut self, key: K, due: Due, preempt: bool) -> (Enqueued, bool) {
        if due == Due::Now && !self.lines.timers.is_empty() {
            // Keys whose time has come are ahead of a key enqueued now.
            self.promote_due(Instant::now());
        }
        let result = match self.entries.entry(key) {
            MapEntry::Vacant(vacant) => {
                let (slot, wake) = self.lines.place(vacant.key().clone(), due);
                vacant.insert(Entry {
                    slot,
                    backoff: BackOffState::new(),
                });
                (Enqueued::Added, wake)
            }
            MapEntry::Occupied(mut occupied) => match occupied.get().slot {
                Slot::Ready { .. } => (Enqueued::Unchanged, false),
                slot @ Slot::Delayed { due: current, .. } => {
                    if !due.is_earlier_than(Due::At(current)) {
                        (Enqueued::Unchanged, false)
                    } else if !preempt && occupied.get().backoff.is_failing() {
                        // A failing key's timer is its back-off deadline (only a retry puts
                        // it there, and nothing moves it): max(deadline, due) merged with
                        // the deadline is the deadline.
                        (Enqueued::BackingOff, false)
                    } else {
                        self.lines.leave(slot);
                        let (slot, wake) = self.lines.place(occupied.key().clone(), due);
                        occupied.get_mut().slot = slot;
                        (Enqueued::Advanced, wake)
                    }
                }
                Slot::Running { rerun } => {
                    let merged = match rerun {
                        None => {
                            self.rerun_marked += 1;
                            due
                        }
                        Some(previous) => previous.min(due),
                    };
                    occupied.get_mut().slot = Slot::Running {
                        rerun: Some(merged),
                    };
                    if rerun.is_some_and(|previous| !due.is_earlier_than(previous)) {
                        (Enqueued::Unchanged, false)
                    } else {
                        (Enqueued::Rerun, false)
                    }
                }
            },
        };
        if result.0 == Enqueued::Advanced {
            self.maybe_compact();
        }
        result
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.entries.get(key) {
            None
            | Some(Entry {
                slot: Slot::Running { .. },
                ..
            }) => return false,
            Some(_) => {}
        }
        if let Some(entry) = self.entries.remove(key) {
            if entry.backoff.is_failing() {
                self.failing -= 1;
            }
            self.lines.leave(entry.slot);
        }
        self.maybe_compact();
        true
    }

    /// Moves every timer that is due by now into the ready line, in `(due, seq)` order.
    fn promote_due(&mut self, now: Instant) {
        while let Some(top) = self.lines.timers.peek() {
            if top.due > now {
                break;
            }
            let Some(timer) = self.lines.timers.pop() else {
                break;
            };
            let Some(entry) = self.entries.get_mut(&timer.key) else {
                self.lines.stale_timers -= 1;
                continue;
            };
            if !matches!(entry.slot, Slot::Delayed { seq, .. } if seq == timer.seq) {
                self.lines.stale_timers -= 1;
                continue;
            }
            self.lines.delayed -= 1;
            let (slot, _) = self.lines.place_since(timer.key, Due::Now, timer.due);
            entry.slot = slot;
        }
    }

    /// The earliest live timer's due time, dropping stale timers from the top on the way.
    fn earliest_timer(&mut self) -> Option<Instant> {
        while let Some(top) = self.lines.timers.peek() {
            if is_live_timer(&self.entries, &top.key, top.seq) {
                return Some(top.due);
            }
            self.lines.timers.pop();
            self.lines.stale_timers -= 1;
        }
        None
    }

    /// Takes the next ready key and marks it running. Returns the key, its retry count, and
    /// whether more work is waiting for another consumer.
    fn take_next(&mut self, max_concurrent: usize) -> Option<(K, u32, bool, Instant)> {
        if !self.lines.timers.is_empty() {
            self.promote_due(Instant::now());
        }
        while let Some((seq, key, since)) = self.lines.ready.pop_front() {
            let entry = match self.entries.get_mut(&key) {
                Some(entry) if matches!(entry.slot, Slot::Ready { seq: live } if live == seq) => {
                    entry
                }
                _ => {
                    self.lines.stale_ready -= 1;
                    continue;
                }
            };
            entry.slot = Slot::Running { rerun: None };
            let retries = entry.backoff.attempts();
            self.running += 1;
            self.dispatched_total += 1;
            let more = self.running < max_concurrent
                && (self.lines.ready_len() > 0 || self.lines.delayed > 0);
            return Some((key, retries, more, since));
        }
        None
    }

    /// Ends a run and schedules what follows. Unless `preempt`, a failed run's rerun mark is
    /// folded into the retry at the back-off deadline.
    fn complete(&mut self, key: K, outcome: Action, policy: &BackOffPolicy, preempt: bool) {
        let (rerun, mut backoff) = match self.entries.get(&key) {
            Some(Entry {
                slot: Slot::Running { rerun },
                backoff,
            }) => (*rerun, *backoff),
            // Unreachable while the lease protocol holds; never corrupt the counts if it does not.
            _ => return,
        };
        self.running -= 1;
        if rerun.is_some() {
            self.rerun_marked -= 1;
        }
        let was_failing = backoff.is_failing();
        let next = match outcome {
            Action::Done => {
                backoff = BackOffState::new();
                rerun
            }
            Action::RequeueAfter(delay) => {
                backoff = BackOffState::new();
                let due = if delay.is_zero() {
                    Due::Now
                } else {
                    Due::At(deadline_after(Instant::now(), delay))
                };
                Some(rerun.map_or(due, |r| r.min(due)))
            }
            Action::Retry => {
                self.failures_total += 1;
                let delay = policy.jittered(backoff.advance(policy), &mut rand::rng());
                let due = Due::At(deadline_after(Instant::now(), delay));
                if preempt {
                    Some(rerun.map_or(due, |r| r.min(due)))
                } else {
                    // max(deadline, rerun) merged with the retry at the deadline.
                    Some(due)
                }
            }
        };
        match (was_failing, backoff.is_failing()) {
            (false, true) => self.failing += 1,
            (true, false) => self.failing -= 1,
            _ => {}
        }
        match next {
            None => {
                self.entries.remove(&key);
                self.maybe_compact();
            }
            Some(next) => {
                let (slot, _) = self.lines.place(key.clone(), next);
                if let Some(entry) = self.entries.get_mut(&key) {
                    entry.slot = slot;
                    entry.backoff = backoff;
                }
            }
        }
    }

    /// Drops stale slots once they outnumber live ones, and gives memory back once tables are
    /// mostly empty, so memory tracks the keys pending now rather than the peak.
    fn maybe_compact(&mut self) {
        let entries = &self.entries;
        let lines = &mut self.lines;
        if lines.stale_ready > COMPACT_MIN && lines.stale_ready > lines.ready.len() / 2 {
            lines.ready.retain(|(seq, key, _)| {
                matches!(entries.get(key), Some(Entry { slot: Slot::Ready { seq: live }, .. }) if live == seq)
            });
            lines.stale_ready = 0;
        }
        if lines.stale_timers > COMPACT_MIN && lines.stale_timers > lines.timers.len() / 2 {
            lines
                .timers
                .retain(|timer| is_live_timer(entries, &timer.key, timer.seq));
            lines.stale_timers = 0;
            if lines.timers.capacity() > COMPACT_MIN
                && lines.timers.len() * 4 < lines.timers.capacity()
            {
                lines.timers.shrink_to(lines.timers.len() * 2);
            }
        }
        let cap = self.entries.capacity();
        if cap > COMPACT_MIN && self.entries.len() * 4 < cap {
            self.entries.shrink_to(self.entries.len() * 2);
        }
        let ready = &mut self.lines.ready;
        if ready.capacity() > COMPACT_MIN && ready.len() * 4 < ready.capacity() {
            ready.shrink_to(ready.len() * 2);
        }
    }
}

impl<K: Hash + Eq + Clone> Shared<K> {
    fn enqueue(&self, key: K, due: Due) -> Enqueued {
        self.enqueue_with(key, due, self.preempt_backoff)
    }

    fn enqueue_with(&self, key: K, due: Due, preempt: bool) -> Enqueued {
        let mut state = self.state.lock();
        let (result, wake) = state.enqueue(key, due, preempt);
        let wake = wake && state.waiting > 0;
        drop(state);
        if wake {
            self.notify.notify_one();
        }
        result
    }

    fn remove(&self, key: &K) -> bool {
        self.state.lock().remove(key)
    }

    fn complete(&self, key: K, outcome: Action) {
        let mut state = self.state.lock();
        state.complete(key, outcome, &self.backoff, self.preempt_backoff);
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            // A slot came free, or the key is due again.
            self.notify.notify_one();
        }
    }
}

/// Counts a consumer as parked in `acquire` while it lives.
struct Parked<'a, K: Hash + Eq + Clone>(&'a Shared<K>);

impl<K: Hash + Eq + Clone> Drop for Parked<'_, K> {
    fn drop(&mut self) {
        self.0.state.lock().waiting -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(max: usize) -> TaskQueue<u32> {
        match TaskQueue::builder().max_concurrent(max).build() {
            Ok(q) => q,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn results_map_onto_outcomes() {
        let ok: Result<Option<Duration>, String> = Ok(None);
        assert_eq!(Action::from(ok), Action::Done);
        let requeue: Result<Option<Duration>, String> = Ok(Some(Duration::from_secs(3)));
        assert_eq!(
            Action::from(requeue),
            Action::RequeueAfter(Duration::from_secs(3))
        );
        let failed: Result<Option<Duration>, String> = Err("conflict".into());
        assert_eq!(Action::from(failed), Action::Retry);
    }

    #[test]
    fn zero_concurrency_is_rejected() {
        let err = TaskQueue::builder().max_concurrent(0).build::<u32>();
        assert_eq!(err.err(), Some(QueueConfigError::ZeroConcurrency));
    }

    #[tokio::test(start_paused = true)]
    async fn merge_results_are_reported() {
        let q = queue(1);
        assert_eq!(q.enqueue_after(1, Duration::from_secs(10)), Enqueued::Added);
        assert_eq!(
            q.enqueue_after(1, Duration::from_secs(20)),
            Enqueued::Unchanged
        );
        assert_eq!(
            q.enqueue_after(1, Duration::from_secs(5)),
            Enqueued::Advanced
        );
        assert_eq!(q.enqueue(1), Enqueued::Advanced);
        assert_eq!(q.enqueue(1), Enqueued::Unchanged);
        let s = q.stats();
        assert_eq!((s.ready, s.delayed, s.keys()), (1, 0, 1));
        let Some(lease) = q.acquire().await else {
            panic!("queue shut down")
        };
        assert_eq!(q.enqueue(1), Enqueued::Rerun);
        assert_eq!(q.enqueue(1), Enqueued::Unchanged);
        assert_eq!(q.stats().rerun_marked, 1);
        lease.complete(Action::Done);
        let s = q.stats();
        assert_eq!((s.ready, s.running, s.rerun_marked), (1, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn stale_slots_are_compacted() {
        let q = queue(1);
        // Each advance leaves a stale timer behind.
        for round in 0..10u64 {
            for key in 0..1000u32 {
                q.enqueue_after(key, Duration::from_secs(10_000 - round));
            }
        }
        let state = q.shared.state.lock();
        assert_eq!(state.lines.delayed, 1000);
        assert!(
            state.lines.timers.len() <= 3 * 1000 + COMPACT_MIN,
            "timer heap holds {} slots for 1000 keys",
            state.lines.timers.len()
        );
    }
}
