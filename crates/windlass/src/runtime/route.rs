//! From watch events to CRs to reconcile (oper8 F185–F187): filter every event, name the
//! CR it concerns, and put that CR in the queue.
//!
//! - An event of the **primary kind** concerns the CR itself. It passes the configured
//!   global filter ([`GlobalFilter`](super::filter::GlobalFilter)) and the controller's
//!   filter for its kind, so a status-only change (windlass's own status write among them)
//!   starts nothing. A CR that passes is queued with
//!   [`ReconcileQueue::enqueue_preempting`]: a user's change may be the fix a failing CR
//!   waits for, so it does not wait out the back-off. A deleted CR leaves the queue.
//! - An event of an **owned kind** concerns the CR named by its ownership label
//!   ([`crate::annotations::OWNER_UID`]), looked up among the primary objects the watch
//!   has seen. It passes a deletion or a version not seen before ([`ResourceVersion`]: no
//!   replays) and the controller's filters for the kind ([`WatchFilters::for_kind`]),
//!   unless it is the echo of windlass's own write of that very version
//!   ([`CachedCluster::is_own_write`]). It is queued with a plain enqueue, which keeps a
//!   failing CR's back-off.
//!
//! - An event of a kind the controller asked to watch ([`ExtraWatch`]) concerns the CRs its
//!   mapping names (and its owner, if windlass applied it), with the same filters.
//!
//!   oper8 kept a reconcile from starting on the creation of an object the reconcile
//!   created itself with a filter that refuses every "added" event (F187's
//!   `DependentWatchFilter`). windlass does not: a kind's watch starts after the first
//!   reconcile created objects of it, so its first list reports as "added" an object that
//!   may already have changed since (a Job that completed meanwhile), and refusing it would
//!   leave the CR waiting for its periodic requeue. The echo check refuses exactly the
//!   versions windlass wrote itself, and nothing else.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::cache::CachedCluster;
use super::filter::{
    CreationDeletion, EventKind, FilterSpec, FilterTracker, ResourceVersion, WatchEvent,
    WatchFilters,
};
use super::queue::ReconcileQueue;
use super::source::{ExtraWatch, SourceEvent};
use crate::annotations;
use crate::object::{ManifestExt, ObjectRef, TypeRef};

/// Routes the events of one controller's watches to its queue.
pub struct Router {
    primary: TypeRef,
    queue: ReconcileQueue,
    cluster: Arc<CachedCluster>,
    filters: WatchFilters,
    /// The primary kind's filter state.
    crs: FilterTracker<ObjectRef>,
    /// The owned kinds' filter state.
    owned: FilterTracker<ObjectRef>,
    /// The CR of each uid seen, to map an owned object's label to its CR.
    by_uid: HashMap<String, ObjectRef>,
    /// Filter specs built once per kind.
    specs: HashMap<TypeRef, FilterSpec>,
    /// The controller's extra watches, by kind.
    extra: HashMap<TypeRef, ExtraWatch>,
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
            owned: FilterTracker::new(FilterSpec::any([
                CreationDeletion.into(),
                ResourceVersion::default().into(),
            ])),
            by_uid: HashMap::new(),
            specs: HashMap::new(),
            extra: extra.into_iter().map(|w| (w.type_ref.clone(), w)).collect(),
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

    /// Route one event; returns the CRs it queued.
    pub fn route(&mut self, event: &SourceEvent) -> Vec<ObjectRef> {
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
        // Whether this is the version windlass itself wrote, asked before the cache hears
        // that the watch delivered it.
        let echo = kind != EventKind::Deleted
            && self
                .cluster
                .is_own_write(&event.reference, meta.resource_version.as_deref());
        self.cluster.observed(
            &event.reference,
            (kind != EventKind::Deleted).then_some(event.object.as_ref()),
        );
        let watch_event = WatchEvent::new(kind, &meta).with_body(&event.object);
        if primary {
            self.route_primary(event, &meta, watch_event)
        } else {
            self.route_owned(event, &meta, watch_event, echo)
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
    ) -> Vec<ObjectRef> {
        let cr = event.reference.clone();
        let spec = self.spec(&self.primary.clone());
        let admitted = self.crs.admit(watch_event, [(cr.clone(), &spec)]);
        if watch_event.kind == EventKind::Deleted {
            if let Some(uid) = &meta.uid {
                self.by_uid.remove(uid);
            }
            // Gone: nothing left to reconcile, whatever the filters said.
            self.queue.remove(&cr);
            return Vec::new();
        }
        if let Some(uid) = &meta.uid {
            self.by_uid.insert(uid.clone(), cr.clone());
        }
        for cr in &admitted {
            self.queue.enqueue_preempting(cr.clone());
        }
        admitted
    }

    fn route_owned(
        &mut self,
        event: &SourceEvent,
        meta: &ObjectMeta,
        watch_event: WatchEvent<'_>,
        echo: bool,
    ) -> Vec<ObjectRef> {
        let mut concerned: Vec<ObjectRef> = event
            .object
            .label(annotations::OWNER_UID)
            .and_then(|uid| self.by_uid.get(uid))
            .cloned()
            .into_iter()
            .collect();
        if let Some(extra) = self.extra.get(&event.reference.type_ref()) {
            concerned.extend((extra.map)(&event.object).unwrap_or_default());
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
        if echo {
            return Vec::new();
        }
        for cr in &admitted {
            self.queue.enqueue(cr.clone());
        }
        admitted
    }
}
