//! Telling windlass's own writes from changes by others: the ledger behind the router's
//! echo check.
//!
//! A reconcile writes a child; the watch then delivers that version back. That event is an
//! echo: reconciling the CR for it would find nothing to do, so the router drops it
//! ([`super::route`]). To know an echo, [`OwnWrites`] keeps, per object, the version its
//! last write returned until the watch delivers that version or a newer one.
//!
//! The watch is often faster than the write: the API server sends the watch event when
//! etcd commits, and the write's response only after, so under load the event regularly
//! arrives first, when there is nothing yet to compare it with. So a write is also marked
//! **in flight** from before its request is sent until its response (or error) is back
//! ([`OwnWrites::begin`]); the router holds the events of an object with a write in flight
//! ([`OwnWrites::landing`]) and judges them once the write has landed.
//!
//! An event is an echo when its version is the one windlass wrote or an older one: an
//! older version is superseded by windlass's write, which the reconcile that made it
//! carries on from. Anything newer is someone else's change. A deletion windlass made
//! (a disabled component's object, one recreated because it is immutable) is an echo
//! too, until the watch delivers it: the reconcile that deleted it knows it is gone.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::object::{ObjectRef, newer_version};

/// How long a written copy or a tombstone outlives a watch that never delivers it: how long
/// windlass remembers a write of its own (here, and in the watch caches).
pub const WRITTEN_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// windlass's writes of each object: in flight, or landed and not yet seen on the watch.
#[derive(Debug, Default)]
pub struct OwnWrites {
    /// Hashed with foldhash: every write and every watch event looks up here.
    objects: Mutex<foldhash::HashMap<ObjectRef, Entry>>,
}

/// What the ledger knows of one object. It has an entry only while a write of it is in
/// flight or a landed version awaits its echo, so it stays small.
#[derive(Debug, Default)]
struct Entry {
    /// Writes sent and not returned (two reconciles may write one object at once).
    in_flight: usize,
    /// Who waits for those writes to land.
    waiters: Vec<oneshot::Sender<()>>,
    /// The newest version a write returned that the watch has not delivered yet, and when.
    landed: Option<(String, Instant)>,
    /// When a delete of windlass's removed the object, until the watch delivers that.
    deleted: Option<Instant>,
    /// The newest version the watch delivered while writes were in flight (for events
    /// that were not held: the primary kind's, or held past the limit), so a write that
    /// lands after its own echo leaves nothing behind.
    seen: Option<String>,
    /// Whether the watch delivered the object's deletion while writes were in flight.
    seen_deleted: bool,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.in_flight == 0 && self.landed.is_none() && self.deleted.is_none()
    }
}

impl OwnWrites {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// A write of `object` is about to be sent. Tell the returned [`Write`] what it
    /// returned; dropped untold (an error, a cancelled reconcile), it counts as failed.
    pub fn begin(&self, object: &ObjectRef) -> Write<'_> {
        self.objects
            .lock()
            .entry(object.clone())
            .or_default()
            .in_flight += 1;
        Write {
            ledger: self,
            object: object.clone(),
            told: false,
        }
    }

    /// If a write of `object` is in flight: a future that resolves once every write of it
    /// in flight has landed or failed. `None`: nothing in flight, judge at once.
    pub fn landing(&self, object: &ObjectRef) -> Option<Landing> {
        let mut objects = self.objects.lock();
        let entry = objects.get_mut(object).filter(|e| e.in_flight > 0)?;
        let (tx, rx) = oneshot::channel();
        entry.waiters.push(tx);
        Some(Landing(rx))
    }

    /// Whether `object` at `resource_version` is windlass's own write: the version a write
    /// of it returned, or an older one (see the module docs).
    pub fn is_own(&self, object: &ObjectRef, resource_version: Option<&str>) -> bool {
        let objects = self.objects.lock();
        match (
            objects.get(object).and_then(|e| e.landed.as_ref()),
            resource_version,
        ) {
            (Some((mine, _)), Some(seen)) => !newer_version(Some(seen), Some(mine)),
            _ => false,
        }
    }

    /// Whether windlass's own delete removed `object` and the watch has not delivered
    /// the deletion yet.
    pub fn is_own_delete(&self, object: &ObjectRef) -> bool {
        self.objects
            .lock()
            .get(object)
            .is_some_and(|e| e.deleted.is_some())
    }

    /// The watch delivered `object` at `resource_version` (`None`: deleted): a landed
    /// version it reaches has had its echo, and so has a deletion.
    pub fn observed(&self, object: &ObjectRef, resource_version: Option<&str>) {
        let mut objects = self.objects.lock();
        let Some(entry) = objects.get_mut(object) else {
            return;
        };
        if resource_version.is_none() {
            entry.deleted = None;
            entry.seen_deleted = entry.in_flight > 0;
        }
        if let Some((mine, _)) = &entry.landed
            && (resource_version.is_none() || !newer_version(Some(mine), resource_version))
        {
            entry.landed = None;
        }
        if entry.in_flight > 0
            && let Some(rv) = resource_version
            && (entry.seen.is_none() || newer_version(Some(rv), entry.seen.as_deref()))
        {
            entry.seen = Some(rv.to_string());
        }
        if entry.is_empty() {
            objects.remove(object);
        }
    }

    /// A write of `object` returned `returned` (`Landed::Deleted`: the object is gone).
    fn finish(&self, object: &ObjectRef, returned: Landed<'_>) {
        let mut objects = self.objects.lock();
        // A landed version or a deletion whose echo never comes (a kind no router
        // watches) goes in time.
        objects.retain(|_, e| {
            if e.landed
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() > WRITTEN_TTL)
            {
                e.landed = None;
            }
            if e.deleted.is_some_and(|at| at.elapsed() > WRITTEN_TTL) {
                e.deleted = None;
            }
            !e.is_empty()
        });
        let Some(entry) = objects.get_mut(object) else {
            return;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        let returned = match returned {
            Landed::Version(rv) => rv,
            Landed::Deleted => {
                entry.landed = None;
                entry.deleted = Some(Instant::now());
                None
            }
        };
        if let Some(rv) = returned
            && entry
                .landed
                .as_ref()
                .is_none_or(|(mine, _)| newer_version(Some(rv), Some(mine)))
        {
            entry.landed = Some((rv.to_string(), Instant::now()));
        }
        if entry.in_flight > 0 {
            return;
        }
        if let Some((mine, _)) = &entry.landed
            && entry.seen.is_some()
            && !newer_version(Some(mine), entry.seen.as_deref())
        {
            // Its echo went by while it was in flight.
            entry.landed = None;
        }
        if entry.deleted.is_some() && entry.seen_deleted {
            entry.deleted = None;
        }
        entry.seen_deleted = false;
        entry.seen = None;
        for waiter in entry.waiters.drain(..) {
            let _ = waiter.send(());
        }
        if entry.is_empty() {
            objects.remove(object);
        }
    }
}

/// One write in flight (see [`OwnWrites::begin`]).
#[must_use = "a write in flight stays so until it is told it landed or dropped"]
pub struct Write<'a> {
    ledger: &'a OwnWrites,
    object: ObjectRef,
    told: bool,
}

impl Write<'_> {
    /// The write returned the object at `resource_version` (`None`: it returned nothing
    /// to compare, which counts as a failure).
    pub fn landed(mut self, resource_version: Option<&str>) {
        self.told = true;
        self.ledger
            .finish(&self.object, Landed::Version(resource_version));
    }

    /// The write was a delete, and the object is gone.
    pub fn deleted(mut self) {
        self.told = true;
        self.ledger.finish(&self.object, Landed::Deleted);
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        if !self.told {
            self.ledger.finish(&self.object, Landed::Version(None));
        }
    }
}

/// What a write returned.
enum Landed<'a> {
    /// The object at this version (`None`: nothing to compare).
    Version(Option<&'a str>),
    /// The object is gone.
    Deleted,
}

/// Resolves once the writes of an object in flight when it was made have landed or
/// failed (see [`OwnWrites::landing`]).
#[derive(Debug)]
pub struct Landing(oneshot::Receiver<()>);

impl Future for Landing {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A dropped sender (a ledger gone) wakes the waiter too: nothing will land.
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn cm(name: &str) -> ObjectRef {
        ObjectRef::new("v1", "ConfigMap", Some("ns"), name)
    }

    #[test]
    fn a_landed_version_and_older_ones_are_own_until_the_watch_delivers_it() {
        let ledger = OwnWrites::new();
        let a = cm("a");
        ledger.begin(&a).landed(Some("10"));
        assert!(ledger.is_own(&a, Some("10")));
        assert!(ledger.is_own(&a, Some("9")), "superseded by the write");
        assert!(!ledger.is_own(&a, Some("11")), "someone else's");
        assert!(!ledger.is_own(&cm("b"), Some("10")));
        ledger.observed(&a, Some("10"));
        assert!(!ledger.is_own(&a, Some("10")), "the echo came: forgotten");
        assert!(ledger.objects.lock().is_empty());
    }

    #[test]
    fn a_landing_resolves_when_the_last_write_in_flight_returns() {
        let ledger = OwnWrites::new();
        let a = cm("a");
        assert!(ledger.landing(&a).is_none(), "nothing in flight");
        let first = ledger.begin(&a);
        let second = ledger.begin(&a);
        let mut landing = ledger.landing(&a).expect("in flight");
        first.landed(Some("10"));
        assert!(
            (&mut landing).now_or_never().is_none(),
            "one still in flight"
        );
        drop(second);
        assert!(landing.now_or_never().is_some());
        assert!(
            ledger.is_own(&a, Some("10")),
            "the failed write takes nothing away"
        );
    }

    #[test]
    fn a_write_that_lands_after_its_echo_leaves_nothing_behind() {
        let ledger = OwnWrites::new();
        let a = cm("a");
        let write = ledger.begin(&a);
        ledger.observed(&a, Some("10"));
        write.landed(Some("10"));
        assert!(ledger.objects.lock().is_empty());
    }

    #[test]
    fn a_deletion_is_own_until_the_watch_delivers_it() {
        let ledger = OwnWrites::new();
        let a = cm("a");
        ledger.begin(&a).landed(Some("10"));
        ledger.begin(&a).deleted();
        assert!(ledger.is_own_delete(&a));
        assert!(
            !ledger.is_own(&a, Some("10")),
            "the version is gone with it"
        );
        assert!(!ledger.is_own_delete(&cm("b")));
        ledger.observed(&a, None);
        assert!(!ledger.is_own_delete(&a));
        assert!(ledger.objects.lock().is_empty());

        // The watch delivers the deletion before the delete's response is back.
        let delete = ledger.begin(&a);
        ledger.observed(&a, None);
        delete.deleted();
        assert!(ledger.objects.lock().is_empty(), "nothing left behind");
    }

    #[test]
    fn resource_versions_that_are_not_integers_match_only_exactly() {
        let ledger = OwnWrites::new();
        let a = cm("a");
        ledger.begin(&a).landed(Some("abc"));
        assert!(ledger.is_own(&a, Some("abc")));
        assert!(!ledger.is_own(&a, Some("abd")));
    }
}
