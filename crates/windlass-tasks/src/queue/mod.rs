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
//! 8. **Two priorities, and the low one is never starved.** A key is pending at
//!    [`Priority::High`] (the default: [`enqueue`](TaskQueue::enqueue) and every other call
//!    without a priority) or [`Priority::Low`] ([`enqueue_as`](TaskQueue::enqueue_as),
//!    [`Lease::complete_as`]): an operator puts the keys of an initial list, a relist or a
//!    periodic resync low, so that a user's change is not queued behind ten thousand of
//!    them. Due high keys are handed out before due low ones, each line first in, first
//!    out; but while keys wait in both lines, after
//!    [`low_share`](TaskQueueBuilder::low_share) high keys in a row (default 4) the next
//!    one handed out is the oldest low key, so low keys get at least one run in
//!    `low_share + 1` however many high keys keep coming (controller-runtime's priority
//!    queue has no such share, and its low keys could wait forever:
//!    kubernetes-sigs/controller-runtime#3496). Merging keeps the **higher priority**: a
//!    high enqueue of a key pending low promotes it (it joins the back of the high line,
//!    keeping its due time and the time it became due); a low enqueue never demotes a high
//!    key. A rerun mark keeps the higher of its enqueues' priorities, and a failed run's
//!    retry keeps the priority the key ran at (or its rerun mark's, if higher).
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
//! # Layout
//!
//! This module holds the vocabulary of the queue ([`Action`], [`Enqueued`], [`KeyState`],
//! [`QueueStats`]…); the rest is one file per concept, each using only those below it:
//!
//! | file | what it holds |
//! |---|---|
//! | `task_queue.rs` | [`TaskQueue`] and its [`TaskQueueBuilder`]: the handle producers and consumers use |
//! | `lease.rs` | [`Lease`]: the right to run one key, and the report of how the run ended |
//! | `shared.rs` | what the handles and leases share: the locked state and the wake-ups of parked consumers |
//! | `state.rs` | the state under the lock: one entry per key, the counts, and the rules of the module docs above |
//! | `lines.rs` | where pending keys wait: the FIFO ready lines, one per priority, and the timer heap, with lazy deletion |
//!
//! [`BackOffPolicy`]: crate::backoff::BackOffPolicy

use std::time::Duration;

use tokio::time::Instant;

mod lease;
mod lines;
mod shared;
mod state;
mod task_queue;

pub use lease::Lease;
pub use task_queue::{DEFAULT_LOW_SHARE, TaskQueue, TaskQueueBuilder};

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

/// How urgent a key's next run is (rule 8 of the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// Background work: an initial list, a relist, a periodic resync. Runs after due high
    /// keys, but gets a bounded share of the runs while high keys keep coming.
    Low,
    /// A change someone is waiting for. The default.
    #[default]
    High,
}

/// What an enqueue call did, for callers that count or log it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// The key was not in the queue; it now is.
    Added,
    /// The key was pending with a later due time, or at low priority; it is now due
    /// earlier, or at high priority.
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
    /// `low_share` was zero.
    #[error(
        "low_share must be at least 1 (got 0): it is how many high-priority runs may go before a waiting low-priority one"
    )]
    ZeroLowShare,
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
    /// The priority of its pending run; of a running key, that of the run (or of its
    /// rerun mark, if higher).
    pub priority: Priority,
}

/// Counts for metrics and health checks: a snapshot taken under the queue's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Keys due now, waiting for a free slot (client-go's "depth"), of both priorities.
    pub ready: usize,
    /// Of [`ready`](Self::ready), the keys of [`Priority::Low`].
    pub ready_low: usize,
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

#[cfg(test)]
mod tests;
