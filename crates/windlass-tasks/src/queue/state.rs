//! The queue's state under its lock: one entry per key (where it is, its back-off), the
//! lines where pending keys wait, and the counts. The rules of the module docs are enforced
//! here.

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::hash::Hash;

use tokio::time::Instant;

use super::lines::{Due, Lines, Slot, deadline_after};
use super::{Action, Enqueued, Priority, QueueStats};
use crate::backoff::{BackOffPolicy, BackOffState};

/// One key in the queue: where it is, its back-off, and the priority of its pending run
/// (of a running key: of the run).
pub(super) struct Entry {
    pub(super) slot: Slot,
    pub(super) backoff: BackOffState,
    pub(super) priority: Priority,
}

/// Everything under the queue's lock.
pub(super) struct State<K> {
    pub(super) entries: HashMap<K, Entry>,
    pub(super) lines: Lines<K>,
    pub(super) running: usize,
    rerun_marked: usize,
    failing: usize,
    /// Consumers parked in `acquire`; notifications are only sent when there is one.
    pub(super) waiting: usize,
    dispatched_total: u64,
    failures_total: u64,
    pub(super) shutdown: bool,
    /// High keys handed out in a row while low keys waited (rule 8).
    high_streak: usize,
}

/// Tables below this size are never shrunk or compacted; the work would cost more than it saves.
pub(super) const COMPACT_MIN: usize = 1024;

fn is_live_timer<K: Hash + Eq>(entries: &HashMap<K, Entry>, key: &K, seq: u64) -> bool {
    matches!(entries.get(key), Some(Entry { slot: Slot::Delayed { seq: live, .. }, .. }) if *live == seq)
}

impl<K: Hash + Eq + Clone> State<K> {
    pub(super) fn new() -> Self {
        Self {
            entries: HashMap::new(),
            lines: Lines::new(),
            running: 0,
            rerun_marked: 0,
            failing: 0,
            waiting: 0,
            dispatched_total: 0,
            failures_total: 0,
            shutdown: false,
            high_streak: 0,
        }
    }

    pub(super) fn stats(&self) -> QueueStats {
        QueueStats {
            ready: self.lines.ready_len(),
            ready_low: self.lines.low.len(),
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
    /// a failing key waiting out its back-off is not brought forward. The key keeps the
    /// higher of its priorities (rule 8).
    pub(super) fn enqueue(
        &mut self,
        key: K,
        due: Due,
        priority: Priority,
        preempt: bool,
    ) -> (Enqueued, bool) {
        if due == Due::Now && !self.lines.timers.is_empty() {
            // Keys whose time has come are ahead of a key enqueued now.
            self.promote_due(Instant::now());
        }
        let result = match self.entries.entry(key) {
            MapEntry::Vacant(vacant) => {
                let (slot, wake) = self.lines.place(vacant.key().clone(), due, priority);
                vacant.insert(Entry {
                    slot,
                    backoff: BackOffState::new(),
                    priority,
                });
                (Enqueued::Added, wake)
            }
            MapEntry::Occupied(mut occupied) => {
                let promoted = priority > occupied.get().priority;
                match occupied.get().slot {
                    Slot::Ready { .. } if !promoted => (Enqueued::Unchanged, false),
                    slot @ Slot::Ready { since, .. } => {
                        // To the back of the high line, due since it was.
                        self.lines.leave(slot);
                        let key = occupied.key().clone();
                        let (slot, wake) = self.lines.place_since(key, Due::Now, priority, since);
                        let entry = occupied.get_mut();
                        entry.slot = slot;
                        entry.priority = priority;
                        (Enqueued::Advanced, wake)
                    }
                    slot @ Slot::Delayed { due: current, .. } => {
                        if promoted {
                            // Its timer puts it in the line of the entry's priority.
                            occupied.get_mut().priority = priority;
                        }
                        if !due.is_earlier_than(Due::At(current)) {
                            let changed = if promoted {
                                Enqueued::Advanced
                            } else {
                                Enqueued::Unchanged
                            };
                            (changed, false)
                        } else if !preempt && occupied.get().backoff.is_failing() {
                            // A failing key's timer is its back-off deadline (only a retry puts
                            // it there, and nothing moves it): max(deadline, due) merged with
                            // the deadline is the deadline.
                            (Enqueued::BackingOff, false)
                        } else {
                            self.lines.leave(slot);
                            let key = occupied.key().clone();
                            let priority = occupied.get().priority;
                            let (slot, wake) = self.lines.place(key, due, priority);
                            occupied.get_mut().slot = slot;
                            (Enqueued::Advanced, wake)
                        }
                    }
                    Slot::Running { rerun } => {
                        let merged = match rerun {
                            None => {
                                self.rerun_marked += 1;
                                (due, priority)
                            }
                            Some((previous, was)) => (previous.min(due), was.max(priority)),
                        };
                        occupied.get_mut().slot = Slot::Running {
                            rerun: Some(merged),
                        };
                        match rerun {
                            Some(previous) if previous == merged => (Enqueued::Unchanged, false),
                            _ => (Enqueued::Rerun, false),
                        }
                    }
                }
            }
        };
        if result.0 == Enqueued::Advanced {
            self.maybe_compact();
        }
        result
    }

    pub(super) fn remove<Q>(&mut self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
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
            let (slot, _) = self
                .lines
                .place_since(timer.key, Due::Now, entry.priority, timer.due);
            entry.slot = slot;
        }
    }

    /// The earliest live timer's due time, dropping stale timers from the top on the way.
    pub(super) fn earliest_timer(&mut self) -> Option<Instant> {
        while let Some(top) = self.lines.timers.peek() {
            if is_live_timer(&self.entries, &top.key, top.seq) {
                return Some(top.due);
            }
            self.lines.timers.pop();
            self.lines.stale_timers -= 1;
        }
        None
    }

    /// Takes the next ready key and marks it running: the oldest high one, unless low ones
    /// wait and `low_share` high ones went in a row (rule 8). Returns the key, its retry
    /// count, whether more work is waiting for another consumer, and since when it was due.
    pub(super) fn take_next(
        &mut self,
        max_concurrent: usize,
        low_share: usize,
    ) -> Option<(K, u32, bool, Instant, Priority)> {
        if !self.lines.timers.is_empty() {
            self.promote_due(Instant::now());
        }
        let low_waits = self.lines.low.len() > 0;
        let line = if self.lines.high.len() == 0 || (low_waits && self.high_streak >= low_share) {
            Priority::Low
        } else {
            Priority::High
        };
        if line == Priority::Low {
            self.high_streak = 0;
        } else if low_waits {
            self.high_streak += 1;
        }
        while let Some((seq, key)) = self.lines.line(line).keys.pop_front() {
            let (entry, since) = match self.entries.get_mut(&key) {
                Some(entry) => match entry.slot {
                    Slot::Ready {
                        seq: live, since, ..
                    } if live == seq => (entry, since),
                    _ => {
                        self.lines.line(line).stale -= 1;
                        continue;
                    }
                },
                None => {
                    self.lines.line(line).stale -= 1;
                    continue;
                }
            };
            entry.slot = Slot::Running { rerun: None };
            let retries = entry.backoff.attempts();
            let priority = entry.priority;
            self.running += 1;
            self.dispatched_total += 1;
            let more = self.running < max_concurrent
                && (self.lines.ready_len() > 0 || self.lines.delayed > 0);
            return Some((key, retries, more, since, priority));
        }
        None
    }

    /// Ends a run and schedules what follows, a success's requeue at `next` priority.
    /// Unless `preempt`, a failed run's rerun mark is folded into the retry at the back-off
    /// deadline.
    pub(super) fn complete(
        &mut self,
        key: K,
        outcome: Action,
        next: Priority,
        policy: &BackOffPolicy,
        preempt: bool,
    ) {
        let (rerun, mut backoff, ran_as) = match self.entries.get(&key) {
            Some(Entry {
                slot: Slot::Running { rerun },
                backoff,
                priority,
            }) => (*rerun, *backoff, *priority),
            // Unreachable while the lease protocol holds; never corrupt the counts if it does not.
            _ => return,
        };
        self.running -= 1;
        if rerun.is_some() {
            self.rerun_marked -= 1;
        }
        let was_failing = backoff.is_failing();
        let marked = rerun.map(|(_, priority)| priority);
        // A retry keeps the priority the key ran at; a success's requeue takes `next`; a
        // rerun mark's priority is kept if higher.
        let priority = match outcome {
            Action::Retry => ran_as,
            Action::Done => marked.unwrap_or(next),
            Action::RequeueAfter(_) => next,
        }
        .max(marked.unwrap_or(Priority::Low));
        let rerun = rerun.map(|(due, _)| due);
        let next = self.next_due(outcome, rerun, &mut backoff, policy, preempt);
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
                let (slot, _) = self.lines.place(key.clone(), next, priority);
                if let Some(entry) = self.entries.get_mut(&key) {
                    entry.slot = slot;
                    entry.backoff = backoff;
                    entry.priority = priority;
                }
            }
        }
    }

    /// When a key whose run ended in `outcome` runs next (`None`: it leaves the queue), with
    /// `rerun` the due time asked for while it ran. A success resets `backoff`, a failure
    /// advances it and is counted. Unless `preempt`, a failed run's rerun mark is folded into
    /// the retry at the back-off deadline.
    fn next_due(
        &mut self,
        outcome: Action,
        rerun: Option<Due>,
        backoff: &mut BackOffState,
        policy: &BackOffPolicy,
        preempt: bool,
    ) -> Option<Due> {
        match outcome {
            Action::Done => {
                *backoff = BackOffState::new();
                rerun
            }
            Action::RequeueAfter(delay) => {
                *backoff = BackOffState::new();
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
        }
    }

    /// Drops stale slots once they outnumber live ones, and gives memory back once tables are
    /// mostly empty, so memory tracks the keys pending now rather than the peak.
    fn maybe_compact(&mut self) {
        let entries = &self.entries;
        let lines = &mut self.lines;
        for line in [&mut lines.high, &mut lines.low] {
            if line.stale > COMPACT_MIN && line.stale > line.keys.len() / 2 {
                line.keys.retain(|(seq, key)| {
                    matches!(entries.get(key), Some(Entry { slot: Slot::Ready { seq: live, .. }, .. }) if live == seq)
                });
                line.stale = 0;
            }
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
        for ready in [&mut self.lines.high.keys, &mut self.lines.low.keys] {
            if ready.capacity() > COMPACT_MIN && ready.len() * 4 < ready.capacity() {
                ready.shrink_to(ready.len() * 2);
            }
        }
    }
}
