//! Where pending keys wait: the ready line (FIFO, keys due now) and the timer heap (keys due
//! later), both with lazy deletion: a slot whose `seq` no longer matches its entry is stale
//! and skipped when it surfaces.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// Thirty years: far enough to mean "later than anything real", near enough for `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// The instant `delay` after `now`, the delay capped at [`FAR_FUTURE`] so that it never
/// overflows.
pub(super) fn deadline_after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay.min(FAR_FUTURE))
        .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        .unwrap_or(now)
}

/// When a key is due: now, or at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Due {
    Now,
    At(Instant),
}

impl Due {
    /// The earlier of the two.
    pub(super) fn min(self, other: Self) -> Self {
        match (self, other) {
            (Due::At(a), Due::At(b)) => Due::At(a.min(b)),
            _ => Due::Now,
        }
    }

    /// Whether `self` comes strictly before `other`.
    pub(super) fn is_earlier_than(self, other: Self) -> bool {
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
pub(super) enum Slot {
    Ready { seq: u64 },
    Delayed { due: Instant, seq: u64 },
    Running { rerun: Option<Due> },
}

/// A key in the timer heap, due at `due`; `seq` tells whether it is still its key's slot.
pub(super) struct Timer<K> {
    pub(super) due: Instant,
    pub(super) seq: u64,
    pub(super) key: K,
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
pub(super) struct Lines<K> {
    /// Ready keys with the instant each became due.
    pub(super) ready: VecDeque<(u64, K, Instant)>,
    pub(super) timers: BinaryHeap<Timer<K>>,
    next_seq: u64,
    pub(super) stale_ready: usize,
    pub(super) stale_timers: usize,
    pub(super) delayed: usize,
}

impl<K> Lines<K> {
    /// Empty lines.
    pub(super) fn new() -> Self {
        Self {
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            next_seq: 0,
            stale_ready: 0,
            stale_timers: 0,
            delayed: 0,
        }
    }

    /// Puts a key into the ready line or the timer heap. Returns its slot and whether a
    /// consumer should be woken (it is due now, or it is the new earliest timer).
    pub(super) fn place(&mut self, key: K, due: Due) -> (Slot, bool) {
        self.place_since(key, due, Instant::now())
    }

    /// [`Lines::place`] for a key due since `since` (a timer that expired then).
    pub(super) fn place_since(&mut self, key: K, due: Due, since: Instant) -> (Slot, bool) {
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
    pub(super) fn leave(&mut self, slot: Slot) {
        match slot {
            Slot::Ready { .. } => self.stale_ready += 1,
            Slot::Delayed { .. } => {
                self.stale_timers += 1;
                self.delayed -= 1;
            }
            Slot::Running { .. } => {}
        }
    }

    pub(super) fn ready_len(&self) -> usize {
        self.ready.len() - self.stale_ready
    }
}
