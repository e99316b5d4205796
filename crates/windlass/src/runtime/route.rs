//! From watch events to CRs to reconcile: filter every event, name the CR it concerns, and
//! put that CR in the queue.
//!
//! - An event of the **primary kind** concerns the CR itself. It passes the configured
//!   global filter ([`GlobalFilter`](crate::watch::filter::GlobalFilter)) and the controller's
//!   filter for its kind, so a status-only change (windlass's own status write among
//!   them) starts nothing. A CR that passes is queued with
//!   [`ReconcileQueue::enqueue_preempting`]: a user's change may be the fix a failing CR
//!   waits for, so it does not wait out the back-off. A deleted CR leaves the queue.
//! - **Priority.** A CR is queued at [`Priority::Low`] for an object that a list (the
//!   watch's first, or a relist) reports and the router has not seen before: at start-up
//!   every CR and every child is such an object, and a user's change made meanwhile must
//!   not wait behind ten thousand of them. Everything else a filter passes is a real change
//!   (a new generation, a child someone else changed or deleted, an object a relist finds
//!   changed or gone) and is queued at [`Priority::High`], which promotes a CR already
//!   waiting low. The queue keeps a share of its runs for the low line (see
//!   [`windlass_tasks::queue`], rule 8), and the periodic resync queues low too
//!   ([`super::queue::next_run`]).
//! - An event of an **owned kind** concerns the CR named by its ownership label
//!   ([`crate::annotations::OWNER_UID`]), looked up among the primary objects the watch
//!   has seen. It passes a deletion or a version not seen before ([`ResourceVersion`]: no
//!   replays) and the controller's filters for the kind ([`WatchFilters::for_kind`]),
//!   unless it is the echo of windlass's own write of that very version (or an older one)
//!   ([`CachedCluster::is_own_write`]). It is queued with a plain enqueue, which keeps a
//!   failing CR's back-off.
//! - An event of a kind the controller asked to watch ([`ExtraWatch`]) concerns the CRs its
//!   mapping names (and its owner, if windlass applied it), with the same filters.
//! - An event of a Secret or ConfigMap a CR's pods read without owning it (see
//!   `rollout::dependency_hash`) concerns the CRs that read it ([`Dependents`]), with the
//!   same filters. The echo of windlass's own write of one still concerns them, unless it
//!   is the CR whose reconcile wrote it (the one its ownership label names): another
//!   CR's reconcile wrote data their pods read.
//!
//!   Owned kinds get no filter that refuses every "added" event, though one would keep a
//!   reconcile from starting on the creation of an object it created itself: a kind's watch
//!   starts after the first reconcile created objects of it, so its first list reports as
//!   "added" an object that may already have changed since (a Job that completed
//!   meanwhile), and refusing it would leave the CR waiting for its periodic requeue. The
//!   echo check refuses only the versions windlass's own writes made (or superseded), and
//!   nothing else.
//!
//! - An event of an object windlass is **writing right now** cannot be judged yet: the
//!   watch often delivers a write before its response is back, and only the response
//!   tells which version is windlass's own ([`super::echo`]). The router holds it
//!   ([`Held`]), routes the other events meanwhile, and judges it once the write has
//!   landed: its echo is dropped, a newer version is someone else's change and is queued.
//!   A failed write, or one slower than [`super::held::HOLD_LIMIT`], lets the held events
//!   through as they are.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::cache::{Cached, CachedCluster};
use super::dependencies::Dependents;
use super::held::{Held, Released, Woken};
use super::queue::ReconcileQueue;
use super::source::SourceEvent;
use crate::annotations;
use crate::object::newer_version;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::watch::ExtraWatch;
use crate::watch::filter::{
    EventKind, FilterSpec, FilterTracker, WatchEvent, WatchFilters, new_version,
};
use windlass_tasks::queue::Priority;

/// Routes the events of one controller's watches to its queue.
pub struct Router {
    primary: TypeRef,
    queue: ReconcileQueue,
    cluster: Arc<CachedCluster>,
    filters: WatchFilters,
    /// The primary kind's filter state.
    crs: FilterTracker<Arc<ObjectRef>>,
    /// The owned kinds' filter state, each object's under the CRs it concerns.
    owned: FilterTracker<Arc<ObjectRef>>,
    /// The CR of each uid seen, to map an owned object's label to its CR. The filter state
    /// of the CR and of every object it owns names the CR by this one shared reference
    /// (see [`Router::interned`]): a copy each would cost more than the state itself.
    by_uid: foldhash::HashMap<String, Arc<ObjectRef>>,
    /// The uid last seen of each CR: whether a CR is known, without a scan of `by_uid`
    /// (a rollout asks once per component).
    uid_of: foldhash::HashMap<Arc<ObjectRef>, String>,
    /// Filter specs built once per kind.
    specs: HashMap<TypeRef, FilterSpec>,
    /// The controller's extra watches, by kind.
    extra: HashMap<TypeRef, ExtraWatch>,
    /// Events waiting for windlass's writes of their objects to land.
    held: Held,
    /// The Secrets and ConfigMaps the CRs read without owning them.
    dependents: Dependents,
}

impl Router {
    /// A router for the controller of `primary`, with the configured `global` filter and
    /// the controller's own `filters`.
    pub fn new(
        primary: TypeRef,
        queue: ReconcileQueue,
        cluster: Arc<CachedCluster>,
        global: FilterSpec,
        filters: WatchFilters,
        extra: Vec<ExtraWatch>,
    ) -> Self {
        Router {
            primary,
            queue,
            cluster,
            filters,
            crs: FilterTracker::new(global),
            // Deletions pass (a child deleted by hand is put back); replays do not.
            owned: FilterTracker::new(new_version()),
            by_uid: foldhash::HashMap::default(),
            uid_of: foldhash::HashMap::default(),
            specs: HashMap::new(),
            extra: extra.into_iter().map(|w| (w.type_ref.clone(), w)).collect(),
            held: Held::default(),
            dependents: Dependents::new(),
        }
    }

    /// `component` of `cr` now reads `objects` it does not own (see
    /// [`Dependents::record`]), each with the `resourceVersion` its rollout read (`None`:
    /// absent). Returns the kinds reported for the first time: each needs a watch of all
    /// its objects, unless the controller watches it already ([`Router::watches_extra`]).
    ///
    /// A change of one of them between the rollout's read and this call was routed before
    /// the CR was known to read it: when the store already holds another version than
    /// the one read (newer, or the object appeared or went), the CR is queued.
    pub fn depend(
        &mut self,
        cr: &ObjectRef,
        component: &str,
        objects: impl IntoIterator<Item = (ObjectRef, Option<String>)>,
    ) -> Vec<TypeRef> {
        // A report can come after the CR's deletion was routed (they travel on different
        // channels): recording it then would keep it for good.
        if !self.uid_of.contains_key(cr) {
            tracing::debug!(%cr, component, "dependencies of a CR not (or no longer) known: ignored");
            return Vec::new();
        }
        let objects: Vec<(ObjectRef, Option<String>)> = objects.into_iter().collect();
        self.queue_if_changed(cr, &objects);
        self.dependents
            .record(cr, component, objects.into_iter().map(|(object, _)| object))
    }

    /// Queue `cr` if the store holds another version of one of `objects` than the one its
    /// rollout read (newer, or the object appeared or went): a change routed before the
    /// CR was known to read it, or seen by a watch before this router heard of it.
    pub fn queue_if_changed(&mut self, cr: &ObjectRef, objects: &[(ObjectRef, Option<String>)]) {
        if !self.uid_of.contains_key(cr) {
            return;
        }
        let changed = objects.iter().find(|(object, read)| {
            // Only its version is read: a partial copy tells it as well.
            let held = match self.cluster.stores().lookup_metadata(object) {
                Cached::Unknown => return false,
                Cached::Absent => None,
                Cached::Present(held) => Some(held.resource_version().map(str::to_string)),
            };
            match (read, held) {
                (None, None) => false,
                (None, Some(_)) | (Some(_), None) => true,
                // A copy without a version cannot be told newer.
                (Some(read), Some(held)) => held
                    .as_deref()
                    .is_some_and(|held| newer_version(Some(held), Some(read))),
            }
        });
        if let Some((object, _)) = changed {
            tracing::debug!(%cr, %object, "a dependency changed before its reader was known: queued");
            self.queue.enqueue(self.interned(cr));
        }
    }

    /// Whether `kind` has an extra watch of the controller's (so it needs no other).
    pub fn watches_extra(&self, kind: &TypeRef) -> bool {
        self.extra.contains_key(kind)
    }

    /// The controller's extra watches.
    pub fn extra_watches(&self) -> impl Iterator<Item = &ExtraWatch> {
        self.extra.values()
    }

    /// The controller's primary kind.
    pub fn primary(&self) -> &TypeRef {
        &self.primary
    }

    /// Route one event; returns the CRs it queued. An event of an object windlass is
    /// writing is held instead, and comes out of [`Router::released`] later.
    pub fn route(&mut self, event: &SourceEvent) -> Vec<ObjectRef> {
        // The primary kind's events need no echo check (the filters drop windlass's status
        // writes), so they are never held.
        if event.reference.type_ref() != self.primary {
            if self.held.queue_behind(event) {
                return Vec::new();
            }
            if let Some(landing) = self.cluster.own_writes().landing(&event.reference) {
                tracing::debug!(object = %event.reference, "held until windlass's write of it lands");
                self.held
                    .hold(event.reference.clone(), vec![event.clone()], landing, None);
                return Vec::new();
            }
        }
        self.deliver(event)
    }

    /// The next held events that may go on: their object's writes have landed, or they
    /// waited long enough. `None` at once when no event is held. Cancel-safe.
    pub async fn released(&mut self) -> Option<Released> {
        self.held.next().await
    }

    /// Route held events that came out of [`Router::released`]; returns the CRs queued.
    pub fn release(&mut self, released: Released) -> Vec<ObjectRef> {
        let Released {
            object,
            events,
            woken,
            deadline,
        } = released;
        let mut queued = Vec::new();
        let mut events = events.into_iter();
        while let Some(event) = events.next() {
            if woken == Woken::Landed
                && let Some(landing) = self.cluster.own_writes().landing(&object)
            {
                // Another write of the object went out meanwhile: the rest may be its echo.
                let rest = std::iter::once(event).chain(events).collect();
                self.held.hold(object, rest, landing, Some(deadline));
                break;
            }
            queued.extend(self.deliver(&event));
        }
        queued
    }

    /// Whether no event is held.
    #[cfg(test)]
    pub fn holds_nothing(&self) -> bool {
        self.held.is_empty()
    }

    /// Route one event now.
    fn deliver(&mut self, event: &SourceEvent) -> Vec<ObjectRef> {
        let meta = match ObjectMeta::deserialize(&event.object["metadata"]) {
            Ok(meta) => meta,
            Err(e) => {
                tracing::warn!(object = %event.reference, error = %e, "event without valid metadata");
                return Vec::new();
            }
        };
        let primary = event.reference.type_ref() == self.primary;
        // The watch tells added from modified for events; a relist reports everything as
        // added, which the filter state corrects.
        let kind = match event.kind {
            EventKind::Deleted => EventKind::Deleted,
            _ if primary => self.crs.apply_kind(&meta),
            _ => self.owned.apply_kind(&meta),
        };
        // Whether this is the version (or the deletion) windlass itself wrote, asked
        // before the cache hears that the watch delivered it.
        let echo = if kind == EventKind::Deleted {
            self.cluster.own_writes().is_own_delete(&event.reference)
        } else {
            self.cluster
                .is_own_write(&event.reference, meta.resource_version.as_deref())
        };
        self.cluster.observed(
            &event.reference,
            (kind != EventKind::Deleted).then_some(event.object.as_ref()),
        );
        let watch_event = WatchEvent::new(kind, &meta).with_body(&event.object);
        // First seen in a list: start-up or relist work, not a change anyone waits for.
        let priority = if event.listed && kind == EventKind::Added {
            Priority::Low
        } else {
            Priority::High
        };
        if primary {
            self.route_primary(event, &meta, watch_event, priority)
        } else {
            self.route_owned(event, &meta, watch_event, echo, priority)
        }
    }

    /// The shared reference of `cr` when it is known, else a new one.
    fn interned(&self, cr: &ObjectRef) -> Arc<ObjectRef> {
        match self.uid_of.get_key_value(cr) {
            Some((known, _)) => known.clone(),
            None => Arc::new(cr.clone()),
        }
    }

    fn spec(&mut self, kind: &TypeRef) -> FilterSpec {
        let filters = &self.filters;
        self.specs
            .entry(kind.clone())
            .or_insert_with(|| filters.for_kind(kind))
            .clone()
    }

    fn route_primary(
        &mut self,
        event: &SourceEvent,
        meta: &ObjectMeta,
        watch_event: WatchEvent<'_>,
        priority: Priority,
    ) -> Vec<ObjectRef> {
        let cr = self.interned(&event.reference);
        let spec = self.spec(&self.primary.clone());
        let admitted = self.crs.admit(watch_event, [(cr.clone(), &spec)]);
        if watch_event.kind == EventKind::Deleted {
            if let Some(uid) = &meta.uid {
                self.by_uid.remove(uid);
                if self.uid_of.get(&cr).is_some_and(|known| known != uid) {
                    // An older CR of this name: the one seen since stays, with its queue
                    // entry and what it reads.
                    return Vec::new();
                }
                self.uid_of.remove(&cr);
            }
            // Gone: nothing left to reconcile, whatever the filters said.
            self.queue.remove(&event.reference);
            self.dependents.forget(&event.reference);
            // The state kept for it of the objects it only read: their events do not say
            // it is gone.
            self.owned.forget_requester(&cr);
            return Vec::new();
        }
        if let Some(uid) = &meta.uid {
            self.by_uid.insert(uid.clone(), cr.clone());
            self.uid_of.insert(cr.clone(), uid.clone());
        }
        for cr in &admitted {
            match priority {
                Priority::High => self.queue.enqueue_preempting(cr.clone()),
                Priority::Low => self.queue.enqueue_as(cr.clone(), Priority::Low),
            };
        }
        admitted.iter().map(|cr| ObjectRef::clone(cr)).collect()
    }

    fn route_owned(
        &mut self,
        event: &SourceEvent,
        meta: &ObjectMeta,
        watch_event: WatchEvent<'_>,
        echo: bool,
        priority: Priority,
    ) -> Vec<ObjectRef> {
        // The CR whose label the object carries (whose reconcile writes it), and the CRs
        // whose pods read it without owning it.
        let writer = event
            .object
            .label(annotations::OWNER_UID)
            .and_then(|uid| self.by_uid.get(uid))
            .cloned();
        let readers = self.dependents.concerned(&event.reference);
        let mut concerned: Vec<Arc<ObjectRef>> = writer.iter().cloned().collect();
        if let Some(extra) = self.extra.get(&event.reference.type_ref()) {
            let mapped = (extra.map)(&event.object).unwrap_or_default();
            concerned.extend(mapped.iter().map(|cr| self.interned(cr)));
        }
        for cr in &readers {
            if !concerned.iter().any(|known| **known == *cr) {
                concerned.push(self.interned(cr));
            }
        }
        if concerned.is_empty() {
            // Its CR is gone, or not seen yet (the primary watch lists it soon, and that
            // reconciles it anyway).
            if watch_event.kind == EventKind::Deleted
                && let Some(uid) = &meta.uid
            {
                self.owned.forget(uid);
            }
            return Vec::new();
        }
        let spec = self.spec(&event.reference.type_ref());
        let admitted = self
            .owned
            .admit(watch_event, concerned.into_iter().map(|cr| (cr, &spec)));
        tracing::debug!(
            object = %event.reference,
            kind = ?watch_event.kind,
            admitted = admitted.len(),
            echo,
            "owned object changed"
        );
        let admitted: Vec<Arc<ObjectRef>> = admitted
            .into_iter()
            // windlass's own write: the writer needs nothing, but the readers do: their
            // hash is now stale.
            .filter(|cr| !echo || (Some(cr) != writer.as_ref() && readers.contains(cr)))
            .collect();
        for cr in &admitted {
            self.queue.enqueue_as(cr.clone(), priority);
        }
        admitted.iter().map(|cr| ObjectRef::clone(cr)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::LiveCluster;
    use crate::runtime::cache::Stores;
    use crate::runtime::held::HOLD_LIMIT;
    use crate::runtime::queue;
    use crate::watch::filter::GlobalFilter;
    use serde_json::{Value, json};
    use tokio::time::Instant;

    /// A router of Widgets that has seen the Widget `w`, over a cluster that never gets
    /// a request (the writes here are only entered in its ledger).
    fn router() -> (Router, Arc<CachedCluster>, ObjectRef) {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let live = LiveCluster::new(kube::Client::try_from(config).unwrap());
        let cluster = Arc::new(CachedCluster::new(Arc::new(live), Arc::new(Stores::new())));
        let cr = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "uid": "w-uid",
                "resourceVersion": "1", "generation": 1}});
        let mut router = Router::new(
            TypeRef::new("test.windlass.dev/v1", "Widget"),
            queue::new_queue(1, Default::default()).unwrap(),
            cluster.clone(),
            GlobalFilter::Default.spec(),
            WatchFilters::default(),
            Vec::new(),
        );
        let queued = router.route(&event(cr));
        assert_eq!(queued.len(), 1, "the new CR");
        (router, cluster, queued[0].clone())
    }

    fn event(object: Value) -> SourceEvent {
        SourceEvent {
            kind: EventKind::Modified,
            reference: ObjectRef::from_manifest(&object).unwrap(),
            object: Arc::new(object),
            listed: false,
        }
    }

    /// The watch's event of the ConfigMap `name` of the Widget `w` at `rv`.
    fn child(name: &str, rv: &str) -> SourceEvent {
        event(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                "resourceVersion": rv, "labels": {annotations::OWNER_UID: "w-uid"}}}))
    }

    fn reference(name: &str) -> ObjectRef {
        ObjectRef::new("v1", "ConfigMap", Some("ns"), name)
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_of_a_dependency_queues_the_crs_that_read_it_and_nothing_else() {
        let (mut router, _, cr) = router();
        let external = |name: &str, rv: &str| {
            event(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                    "resourceVersion": rv}}))
        };
        assert!(
            router.route(&external("settings", "20")).is_empty(),
            "not read yet"
        );
        let kinds = router.depend(&cr, "web", [(reference("settings"), None)]);
        assert_eq!(
            kinds,
            [TypeRef::new("v1", "ConfigMap")],
            "to be watched whole"
        );
        assert_eq!(router.route(&external("settings", "21")), vec![cr.clone()]);
        assert!(
            router.route(&external("settings", "21")).is_empty(),
            "no replays"
        );
        assert!(router.route(&external("unrelated", "22")).is_empty());
        // The component stopped reading it.
        assert!(router.depend(&cr, "web", []).is_empty());
        assert!(router.route(&external("settings", "23")).is_empty());
    }

    /// The Widget `name` (uid `<name>-uid`) as its watch reports it.
    fn widget(name: &str) -> SourceEvent {
        event(
            json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                "resourceVersion": "1", "generation": 1}}),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn the_echo_of_a_write_by_one_cr_queues_the_other_crs_that_read_it() {
        let (mut router, cluster, writer) = router();
        let reader = router.route(&widget("v"))[0].clone();
        router.depend(&reader, "web", [(reference("a"), Some("9".into()))]);
        // `a` belongs to `w` (its label), which wrote it; `v`'s pods read it.
        cluster
            .own_writes()
            .begin(&reference("a"))
            .landed(Some("10"));
        assert_eq!(router.route(&child("a", "10")), vec![reader.clone()]);
        // The writer reads it too (a create-only Secret it read back): still not queued.
        router.depend(&writer, "web", [(reference("a"), Some("10".into()))]);
        cluster
            .own_writes()
            .begin(&reference("a"))
            .landed(Some("11"));
        assert_eq!(router.route(&child("a", "11")), vec![reader]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_cr_leaves_nothing_behind_even_when_its_reads_come_late() {
        let (mut router, _, cr) = router();
        let external = |rv: &str| {
            event(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "ns", "uid": "settings-uid",
                    "resourceVersion": rv}}))
        };
        router.depend(&cr, "web", [(reference("settings"), None)]);
        assert_eq!(router.route(&external("20")), vec![cr.clone()]);
        assert_eq!(router.owned.len(), 1, "filter state for (settings, w)");
        let deleted = SourceEvent {
            kind: EventKind::Deleted,
            ..widget("w")
        };
        assert!(router.route(&deleted).is_empty());
        assert!(router.dependents.is_empty());
        assert_eq!(router.owned.len(), 0, "the state of what it only read");
        // A report of its last reconcile that arrives after the deletion.
        assert!(
            router
                .depend(&cr, "web", [(reference("settings"), None)])
                .is_empty()
        );
        assert!(router.dependents.is_empty(), "not recorded");
        assert!(router.route(&external("21")).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cr_created_again_under_its_name_stays_known_when_the_old_ones_deletion_comes_late() {
        let (mut router, _, cr) = router();
        // `w` deleted and created again, and the old one's deletion routed after the new
        // one (one ordered watch makes this unlikely: this guards rather than expects it).
        let again = |uid: &str| {
            event(
                json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
                "metadata": {"name": "w", "namespace": "ns", "uid": uid,
                    "resourceVersion": "5", "generation": 1}}),
            )
        };
        router.route(&again("w-uid-2"));
        assert_eq!(
            router.depend(&cr, "web", [(reference("settings"), None)]),
            [TypeRef::new("v1", "ConfigMap")],
            "the new `w`'s reads are recorded"
        );
        let old_deleted = SourceEvent {
            kind: EventKind::Deleted,
            ..widget("w")
        };
        router.route(&old_deleted);
        assert!(
            !router.dependents.is_empty(),
            "the old `w`'s deletion leaves the new one's reads"
        );
        assert!(
            router.uid_of.contains_key(&cr),
            "the new `w` is still known"
        );
        let new_deleted = SourceEvent {
            kind: EventKind::Deleted,
            ..again("w-uid-2")
        };
        router.route(&new_deleted);
        assert!(
            router
                .depend(&cr, "web", [(reference("settings"), None)])
                .is_empty(),
            "gone for good"
        );
        assert!(router.dependents.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dependency_that_changed_before_its_reader_was_recorded_queues_the_reader() {
        let (mut router, cluster, cr) = router();
        let kind = TypeRef::new("v1", "ConfigMap");
        let map = |name: &str, rv: &str| {
            Arc::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}))
        };
        cluster
            .stores()
            .declare(&kind, None, crate::runtime::cache::Keep::Whole);
        cluster.stores().replace(
            &kind,
            None,
            vec![
                (reference("settings"), map("settings", "30")),
                (reference("same"), map("same", "7")),
            ],
        );
        assert!(router.queue.remove(&cr), "queued when first seen");
        // Read at the version the store holds, or absent and still absent: nothing to do.
        router.depend(
            &cr,
            "web",
            [
                (reference("same"), Some("7".into())),
                (reference("missing"), None),
            ],
        );
        assert!(!router.queue.contains(&cr));
        // Read at 20; the store has 30 already: that event was routed before `w` read it.
        router.depend(&cr, "web", [(reference("settings"), Some("20".into()))]);
        assert!(router.queue.contains(&cr));
        assert!(router.queue.remove(&cr));
        // Read absent; it exists now.
        router.depend(&cr, "web", [(reference("settings"), None)]);
        assert!(router.queue.contains(&cr));
        assert!(router.queue.remove(&cr));
        // Read present; it is gone now.
        router.depend(&cr, "web", [(reference("missing"), Some("3".into()))]);
        assert!(router.queue.contains(&cr));
        assert!(newer_version(Some("b"), Some("a")) && !newer_version(Some("9"), Some("10")));
    }

    #[tokio::test(start_paused = true)]
    async fn what_a_list_reports_first_is_queued_low_and_a_real_change_high() {
        let (mut router, _, w) = router();
        let priority =
            |router: &Router, cr: &ObjectRef| router.queue.inspect(cr).map(|state| state.priority);
        assert_eq!(priority(&router, &w), Some(Priority::High), "a watch event");
        let listed = SourceEvent {
            kind: EventKind::Added,
            listed: true,
            ..widget("v")
        };
        let v = router.route(&listed)[0].clone();
        assert_eq!(priority(&router, &v), Some(Priority::Low), "start-up work");
        assert!(
            router.route(&listed).is_empty(),
            "a relist of the same: nothing"
        );
        let changed = event(
            json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": "v", "namespace": "ns", "uid": "v-uid",
                "resourceVersion": "2", "generation": 2}}),
        );
        assert_eq!(router.route(&changed), vec![v.clone()]);
        assert_eq!(priority(&router, &v), Some(Priority::High), "promoted");

        // A child first reported by a list, then changed by someone else.
        assert!(router.queue.remove(&w));
        let listed_child = SourceEvent {
            kind: EventKind::Added,
            listed: true,
            ..child("a", "10")
        };
        assert_eq!(router.route(&listed_child), vec![w.clone()]);
        assert_eq!(priority(&router, &w), Some(Priority::Low));
        assert_eq!(router.route(&child("a", "11")), vec![w.clone()]);
        assert_eq!(priority(&router, &w), Some(Priority::High));
        // A relist that finds a child gone: someone deleted it.
        assert!(router.queue.remove(&w));
        let gone = SourceEvent {
            kind: EventKind::Deleted,
            listed: true,
            ..child("a", "12")
        };
        assert_eq!(router.route(&gone), vec![w.clone()]);
        assert_eq!(priority(&router, &w), Some(Priority::High));
    }

    #[tokio::test(start_paused = true)]
    async fn an_echo_that_outruns_its_write_is_held_then_dropped() {
        let (mut router, cluster, cr) = router();
        let write = cluster.own_writes().begin(&reference("a"));
        assert!(router.route(&child("a", "10")).is_empty(), "held");
        assert!(!router.holds_nothing());
        // Meanwhile the other objects' events go on.
        assert_eq!(router.route(&child("b", "11")), vec![cr]);

        write.landed(Some("10"));
        let released = router.released().await.unwrap();
        assert!(router.release(released).is_empty(), "windlass's own echo");
        assert!(router.holds_nothing());
    }

    #[tokio::test(start_paused = true)]
    async fn an_echo_that_comes_after_its_write_is_dropped_at_once() {
        let (mut router, cluster, _) = router();
        cluster
            .own_writes()
            .begin(&reference("a"))
            .landed(Some("10"));
        assert!(router.route(&child("a", "10")).is_empty());
        assert!(router.holds_nothing());
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_by_someone_else_during_a_write_is_queued_once_it_lands() {
        let (mut router, cluster, cr) = router();
        let write = cluster.own_writes().begin(&reference("a"));
        assert!(router.route(&child("a", "10")).is_empty());
        assert!(
            router.route(&child("a", "12")).is_empty(),
            "behind the first"
        );
        write.landed(Some("10"));
        let released = router.released().await.unwrap();
        assert_eq!(released.events.len(), 2);
        assert_eq!(router.release(released), vec![cr], "12 is someone else's");
    }

    #[tokio::test(start_paused = true)]
    async fn windlass_deleting_a_child_is_an_echo_and_someone_else_deleting_it_is_not() {
        let (mut router, cluster, cr) = router();
        let deleted = |name: &str| SourceEvent {
            kind: EventKind::Deleted,
            ..child(name, "20")
        };
        let delete = cluster.own_writes().begin(&reference("a"));
        assert!(router.route(&deleted("a")).is_empty(), "held");
        delete.deleted();
        let released = router.released().await.unwrap();
        assert!(router.release(released).is_empty(), "windlass's own delete");
        assert_eq!(
            router.route(&deleted("b")),
            vec![cr],
            "a child deleted by hand is put back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_write_lets_its_held_event_through() {
        let (mut router, cluster, cr) = router();
        let write = cluster.own_writes().begin(&reference("a"));
        assert!(router.route(&child("a", "10")).is_empty());
        drop(write);
        let released = router.released().await.unwrap();
        assert_eq!(router.release(released), vec![cr]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_slower_than_the_limit_lets_its_held_event_through() {
        let (mut router, cluster, cr) = router();
        let write = cluster.own_writes().begin(&reference("a"));
        let held_at = Instant::now();
        assert!(router.route(&child("a", "10")).is_empty());
        let released = router.released().await.unwrap();
        assert_eq!(held_at.elapsed(), HOLD_LIMIT);
        assert_eq!(router.release(released), vec![cr]);
        write.landed(Some("10"));
        assert!(router.holds_nothing());
    }

    #[tokio::test(start_paused = true)]
    async fn events_held_for_a_write_wait_for_the_next_one_too_within_their_limit() {
        let (mut router, cluster, cr) = router();
        let first = cluster.own_writes().begin(&reference("a"));
        assert!(router.route(&child("a", "10")).is_empty());
        assert!(router.route(&child("a", "11")).is_empty());
        // The first lands, and a second write goes out before the router looks.
        first.landed(Some("10"));
        let second = cluster.own_writes().begin(&reference("a"));
        let released = router.released().await.unwrap();
        assert!(router.release(released).is_empty(), "held for the second");
        second.landed(Some("11"));
        let released = router.released().await.unwrap();
        assert_eq!(released.events.len(), 2);
        assert!(router.release(released).is_empty(), "both echoes");

        // Held again, events keep their first deadline.
        let third = cluster.own_writes().begin(&reference("a"));
        let held_at = Instant::now();
        assert!(router.route(&child("a", "12")).is_empty());
        tokio::time::advance(HOLD_LIMIT / 2).await;
        drop(third);
        let _fourth = cluster.own_writes().begin(&reference("a"));
        let released = router.released().await.unwrap();
        assert!(router.release(released).is_empty(), "held for the fourth");
        let released = router.released().await.unwrap();
        assert_eq!(released.woken, Woken::TimedOut);
        assert_eq!(held_at.elapsed(), HOLD_LIMIT);
        assert_eq!(router.release(released), vec![cr]);
    }
}
