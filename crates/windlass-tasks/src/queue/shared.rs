//! What every handle and lease of one queue shares: the state behind its lock, the
//! configuration, and the wake-ups of consumers parked in `acquire`.

use std::hash::Hash;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::lines::Due;
use super::state::State;
use super::{Action, Enqueued, Priority};
use crate::backoff::BackOffPolicy;

/// One queue: its state under the lock, how consumers parked in `acquire` are woken, and
/// its configuration.
pub(super) struct Shared<K> {
    pub(super) state: Mutex<State<K>>,
    pub(super) notify: Notify,
    pub(super) max_concurrent: usize,
    pub(super) backoff: BackOffPolicy,
    pub(super) preempt_backoff: bool,
    pub(super) low_share: usize,
}

impl<K: Hash + Eq + Clone> Shared<K> {
    pub(super) fn enqueue(&self, key: K, due: Due, priority: Priority) -> Enqueued {
        self.enqueue_with(key, due, priority, self.preempt_backoff)
    }

    pub(super) fn enqueue_with(
        &self,
        key: K,
        due: Due,
        priority: Priority,
        preempt: bool,
    ) -> Enqueued {
        let mut state = self.state.lock();
        let (result, wake) = state.enqueue(key, due, priority, preempt);
        let wake = wake && state.waiting > 0;
        drop(state);
        if wake {
            self.notify.notify_one();
        }
        result
    }

    pub(super) fn remove<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.state.lock().remove(key)
    }

    pub(super) fn complete(&self, key: K, outcome: Action, next: Priority) {
        let mut state = self.state.lock();
        state.complete(key, outcome, next, &self.backoff, self.preempt_backoff);
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            // A slot came free, or the key is due again.
            self.notify.notify_one();
        }
    }
}

/// Counts a consumer as parked in `acquire` while it lives.
pub(super) struct Parked<'a, K: Hash + Eq + Clone>(pub(super) &'a Shared<K>);

impl<K: Hash + Eq + Clone> Drop for Parked<'_, K> {
    fn drop(&mut self) {
        self.0.state.lock().waiting -= 1;
    }
}
