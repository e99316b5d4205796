//! Where pending keys wait: two ready lines (FIFO, keys due now), one per [`Priority`], and
//! the timer heap (keys due later), all with lazy deletion: a slot whose `seq` no longer
//! matches its entry is stale and skipped when it surfaces.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::Priority;

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

/// Where an entry is. `seq` identifies the one live slot in a ready line or the timer heap;
/// slots whose `seq` no longer matches their entry are stale and skipped. A ready key
/// knows its line and since when it is due (a key promoted to the other line keeps it).
#[derive(Clone, Copy, Debug)]
pub(super) enum Slot {
    Ready {
        seq: u64,
        line: Priority,
        since: Instant,
    },
    Delayed {
        due: Instant,
        seq: u64,
    },
    Running {
        rerun: Option<(Due, Priority)>,
    },
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

/// One ready line: keys due now, in the order they became due, and how many of its slots
/// are stale.
pub(super) struct Line<K> {
    pub(super) keys: VecDeque<(u64, K)>,
    pub(super) stale: usize,
}

impl<K> Line<K> {
    fn new() -> Self {
        Line {
            keys: VecDeque::new(),
            stale: 0,
        }
    }

    /// Live keys in the line.
    pub(super) fn len(&self) -> usize {
        self.keys.len() - self.stale
    }
}

/// The queue's lines: where pending keys wait. Kept apart from the entry map so that both can
/// be borrowed at once (one hash lookup per operation).
pub(super) struct Lines<K> {
    /// Ready keys of high priority.
    pub(super) high: Line<K>,
    /// Ready keys of low priority.
    pub(super) low: Line<K>,
    pub(super) timers: BinaryHeap<Timer<K>>,
    next_seq: u64,
    pub(super) stale_timers: usize,
    pub(super) delayed: usize,
}

impl<K> Lines<K> {
    /// Empty lines.
    pub(super) fn new() -> Self {
        Self {
            high: Line::new(),
            low: Line::new(),
            timers: BinaryHeap::new(),
            next_seq: 0,
            stale_timers: 0,
            delayed: 0,
        }
    }

    /// The ready line of `priority`.
    pub(super) fn line(&mut self, priority: Priority) -> &mut Line<K> {
        match priority {
            Priority::High => &mut self.high,
            Priority::Low => &mut self.low,
        }
    }

    /// Puts a key into the ready line of `priority` or the timer heap. Returns its slot and
    /// whether a consumer should be woken (it is due now, or it is the new earliest timer).
    pub(super) fn place(&mut self, key: K, due: Due, priority: Priority) -> (Slot, bool) {
        self.place_since(key, due, priority, Instant::now())
    }

    /// [`Lines::place`] for a key due since `since` (a timer that expired then, or a key
    /// moved to another line).
    pub(super) fn place_since(
        &mut self,
        key: K,
        due: Due,
        priority: Priority,
        since: Instant,
    ) -> (Slot, bool) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match due {
            Due::Now => {
                self.line(priority).keys.push_back((seq, key));
                (
                    Slot::Ready {
                        seq,
                        line: priority,
                        since,
                    },
                    true,
                )
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
            Slot::Ready { line, .. } => self.line(line).stale += 1,
            Slot::Delayed { .. } => {
                self.stale_timers += 1;
                self.delayed -= 1;
            }
            Slot::Running { .. } => {}
        }
    }

    pub(super) fn ready_len(&self) -> usize {
        self.high.len() + self.low.len()
    }
}
