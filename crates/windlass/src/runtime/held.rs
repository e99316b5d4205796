//! Events the router holds back until windlass's write of their object lands.
//!
//! An event of an object windlass is writing may be the echo of that write, delivered by
//! the watch before the write's response (see [`super::echo`]); only the response tells.
//! The router parks such an event here, per object, and goes on routing the others; when
//! the object's writes in flight have landed (or failed) the events come back out
//! ([`Held::next`]) to be judged. Nothing is lost: past [`HOLD_LIMIT`] the events come out
//! anyway, and a later event of an object with events held queues behind them, so the
//! router still sees each object's events in the watch's order.

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::echo::Landing;
use super::source::SourceEvent;
use crate::object::ObjectRef;

/// How long an event is held at most: a write slower than this (an API server in
/// trouble) costs a reconcile rather than a delay.
pub const HOLD_LIMIT: Duration = Duration::from_secs(5);

/// The events held, per object, and the landings they wait for.
pub struct Held {
    limit: Duration,
    objects: foldhash::HashMap<ObjectRef, Parked>,
    /// One wait per object with events held: its landing, or the deadline.
    waits: FuturesUnordered<BoxFuture<'static, (ObjectRef, Woken)>>,
}

/// The events of one object, in the order the watch delivered them.
struct Parked {
    events: Vec<SourceEvent>,
    /// When they come out whatever lands: set by the first event held, kept when they are
    /// held again for a later write, so no event waits longer than the limit.
    deadline: Instant,
}

/// Why held events came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The writes they waited for landed or failed: judge them.
    Landed,
    /// The limit passed first: deliver them as they are, without holding them again.
    TimedOut,
}

/// Events that came out, with why.
pub struct Released {
    /// The object.
    pub object: ObjectRef,
    /// Its events, oldest first.
    pub events: Vec<SourceEvent>,
    /// Why they came out.
    pub woken: Woken,
    /// Their deadline, to hold them again without extending it.
    pub deadline: Instant,
}

impl Default for Held {
    fn default() -> Self {
        Self::new(HOLD_LIMIT)
    }
}

impl Held {
    /// Nothing held; events come out after `limit` at most.
    pub fn new(limit: Duration) -> Self {
        Held {
            limit,
            objects: foldhash::HashMap::default(),
            waits: FuturesUnordered::new(),
        }
    }

    /// If events of `event`'s object are held, queue it behind them (a later event of an
    /// object must not overtake its earlier ones) and return `true`.
    pub fn queue_behind(&mut self, event: &SourceEvent) -> bool {
        match self.objects.get_mut(&event.reference) {
            Some(parked) => {
                parked.events.push(event.clone());
                true
            }
            None => false,
        }
    }

    /// Hold `events` of `object` until `landing` resolves or `deadline` (`None`: the limit
    /// from now) passes.
    pub fn hold(
        &mut self,
        object: ObjectRef,
        events: Vec<SourceEvent>,
        landing: Landing,
        deadline: Option<Instant>,
    ) {
        let deadline = deadline.unwrap_or_else(|| Instant::now() + self.limit);
        let key = object.clone();
        self.waits.push(Box::pin(async move {
            let woken = match tokio::time::timeout_at(deadline, landing).await {
                Ok(()) => Woken::Landed,
                Err(_) => Woken::TimedOut,
            };
            (key, woken)
        }));
        self.objects.insert(object, Parked { events, deadline });
    }

    /// The next object whose events come out; `None` at once when nothing is held.
    pub async fn next(&mut self) -> Option<Released> {
        let (object, woken) = self.waits.next().await?;
        let parked = self.objects.remove(&object)?;
        Some(Released {
            object,
            events: parked.events,
            woken,
            deadline: parked.deadline,
        })
    }

    /// Whether no event is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}
