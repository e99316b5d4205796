//! [`Lease`]: the right to run one key, handed out by the queue, and the report of how the
//! run ended.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::shared::Shared;
use super::{Action, Priority};

/// The right to run one key, handed out by [`TaskQueue::acquire`](super::TaskQueue::acquire).
///
/// Report how the run ended with [`complete`](Self::complete). Dropping a lease without
/// completing it reports [`Action::Retry`].
pub struct Lease<K: Hash + Eq + Clone + Send + 'static> {
    shared: Arc<Shared<K>>,
    key: Option<K>,
    retries: u32,
    waited: Duration,
    priority: Priority,
}

impl<K: Hash + Eq + Clone + Send + 'static> Lease<K> {
    /// The lease of `key`, which waited `waited` for this run at `priority` after
    /// `retries` failed ones.
    pub(super) fn new(
        shared: Arc<Shared<K>>,
        key: K,
        retries: u32,
        waited: Duration,
        priority: Priority,
    ) -> Self {
        Self {
            shared,
            key: Some(key),
            retries,
            waited,
            priority,
        }
    }

    /// The priority the key was handed out at: to put it back as it was
    /// ([`complete_as`](Self::complete_as)).
    pub const fn priority(&self) -> Priority {
        self.priority
    }

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

    /// Ends the run and schedules what comes next for the key; a requeue
    /// ([`Action::RequeueAfter`]) runs at [`Priority::High`].
    pub fn complete(self, outcome: Action) {
        self.complete_as(outcome, Priority::High);
    }

    /// Ends the run and schedules what comes next for the key; a requeue
    /// ([`Action::RequeueAfter`]) runs at `priority` (a periodic resync: [`Priority::Low`]),
    /// raised to that of an enqueue made during the run. A retry keeps the priority the key
    /// ran at (rule 8 of the [module docs](super)).
    pub fn complete_as(mut self, outcome: Action, priority: Priority) {
        self.finish(outcome, priority);
    }

    fn finish(&mut self, outcome: Action, priority: Priority) {
        if let Some(key) = self.key.take() {
            self.shared.complete(key, outcome, priority);
        }
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Drop for Lease<K> {
    fn drop(&mut self) {
        self.finish(Action::Retry, Priority::High);
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
