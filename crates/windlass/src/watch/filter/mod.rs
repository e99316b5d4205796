//! Which watch events start a reconcile.
//!
//! A watch delivers every write to an object: the status windlass just wrote, the
//! finalizer it added, the `deployment.kubernetes.io/revision` a built-in controller bumps,
//! the same object again after the watch reconnects. Reconciling on each of them would
//! make every reconcile trigger the next. Filters decide which events matter; they are the
//! runtime's equivalent of controller-runtime's predicates, except that a filter may also
//! abstain.
//!
//! # The contract
//!
//! - A [`Filter`] votes on one [`WatchEvent`]: `Some(true)` (reconcile), `Some(false)`
//!   (don't) or `None` (abstain: "not my business").
//! - [`Filter::test`] takes `&self` and cannot change state; [`Filter::update`] takes
//!   `&mut self` and records what the filter needs to remember (a generation, a hash).
//!   [`Filter::evaluate`] tests and then **always** updates, whatever the vote.
//!   The split is deliberate: a group may stop testing once its outcome is decided, and the
//!   type system guarantees that skipping a test cannot change any member's state.
//! - State belongs to one object and one requester (the CR whose reconcile the event would
//!   start): a `FilterTracker` keeps one filter instance per (object uid, requester),
//!   built from a [`FilterSpec`], and drops them when the object is deleted.
//! - [`All`] and [`Any`] combine votes: abstentions are ignored, an empty group passes, a
//!   group in which every member abstains fails, and every member is updated on every
//!   event. At the top of the tracker an abstention counts as "no".
//!
//! # Updating and short-circuiting groups
//!
//! Two rules, pinned by tests, let a group skip tests without losing state:
//!
//! 1. updating a group updates every member, nested groups included;
//! 2. evaluating a group tests members until the outcome is decided — the first `false`
//!    in an [`All`], the first `true` in an [`Any`] — and then updates **every** member,
//!    tested or not. Because tests are pure, the verdict and every member's state are the
//!    same as if all members had been tested.
//!
//! # The global filter
//!
//! `runtime.event-filter` picks the filter applied to every watched object
//! (`default` or `annotation`). The config cannot name
//! code to load; custom filters are passed to the runtime in code: a controller's own
//! filters come from
//! [`Controller::watches`](crate::controller::Controller::watches)
//! ([`Watches::filter`](crate::watch::Watches::filter)), AND-ed with the global one.
//!
//! `default` passes more than changes that bump the generation: a filter that ignored every
//! other change would leave unpausing a CR or editing its labels waiting for the periodic
//! reconcile. It passes creation and deletion, a generation change (for kinds without one,
//! a change of anything but `metadata` and `status`), a label change, a change of a user
//! annotation (pause included) and a deletion request, and rejects status-only changes,
//! finalizer edits, platform annotations, replays of a resourceVersion already seen, and
//! anything on a paused object. windlass's own writes to a CR are its status and its
//! finalizer, so they never start a reconcile; a write to an object it owns that changes
//! the object's spec starts a reconcile of the owner, which finds nothing left to change
//! and writes nothing. The generation-only filter is available as [`generation_only`].
//!
//! # The filters
//!
//! | filter                   | votes yes on                                      |
//! |--------------------------|---------------------------------------------------|
//! | [`CreationDeletion`]     | creation and deletion                             |
//! | [`Generation`]           | a new generation                                  |
//! | [`NoGeneration`]         | a content change, for kinds without a generation  |
//! | [`ResourceVersion`]      | a resourceVersion not seen before                 |
//! | [`Annotations`]          | an annotation change                              |
//! | [`UserAnnotations`]      | a change of annotations the platform does not own |
//! | [`Pause`]                | an object that is not paused                      |
//! | [`DependentWatch`]       | anything but creation                             |
//! | [`Enable`] / [`Disable`] | everything / nothing                              |
//! | [`SubsystemStatus`]      | a new reason of the `Ready` condition             |
//! | [`LabelSelector`]        | an object carrying the given labels               |
//! | [`Labels`]               | a label change                                    |
//! | [`DeletionRequested`]    | a deletion request                                |
//! | [`All`] / [`Any`]        | no member voting no / some member voting yes      |
//!
//! # How the runtime uses it
//!
//! One `FilterTracker` per watch stream, built with the configured global filter. For
//! each event, the runtime names the CRs the event concerns and the filter each one
//! asks for, and gets back the CRs to reconcile:
//!
//! (The unit test `the_tracker_starts_a_reconcile_on_creation_but_not_on_a_status_write`
//! walks through it.)
//!
//! kube-runtime's watcher does not tell an added object from a modified one
//! (`Event::Apply`, `Event::InitApply`); `FilterTracker::apply_kind` does, from whether
//! the object has filter state. After a relist (`Event::InitDone`), the runtime's watch
//! source reports the objects deleted while the watch was down as deletions, which drop
//! their state.

mod builtin;
mod compose;
mod fused;
mod policy;
mod tracker;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

pub use builtin::{
    Annotations, CreationDeletion, DeletionRequested, DependentWatch, Disable, Enable, Generation,
    LabelSelector, Labels, NoGeneration, Pause, ResourceVersion, SubsystemStatus, UserAnnotations,
};
pub use compose::{All, Any, FilterSpec};
pub(crate) use policy::{GlobalFilter, WatchFilters, new_version};
pub use policy::{changed, generation_only};
pub(crate) use tracker::FilterTracker;

/// What happened to the object: the three watch event types of the Kubernetes API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The object appeared (created, or listed for the first time).
    Added,
    /// The object changed; a replay of a version already seen also arrives as this.
    Modified,
    /// The object is gone. Setting `deletionTimestamp` is a [`EventKind::Modified`].
    Deleted,
}

/// One watch event as filters see it: what happened, the object's metadata, and, where
/// the watch carries it, the rest of the object.
///
/// The event borrows: the runtime keeps the object in its store and filters read it in
/// place, so no event is cloned. Metadata is typed because every watch has it — full
/// objects, [`DynamicObject`](kube::core::DynamicObject)s and the metadata-only
/// [`PartialObjectMeta`](kube::core::PartialObjectMeta) of owned kinds alike — and it is
/// all that most filters read (labels, annotations, generation, resourceVersion, uid,
/// deletionTimestamp). The `body` is the object's top-level fields as JSON (`spec`,
/// `status`, `data`, …; `metadata`, `apiVersion` and `kind` are ignored if present): the
/// primary kind's watch has it, a metadata-only watch does not, and the filters that need
/// it ([`NoGeneration`], [`SubsystemStatus`]) abstain without it.
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
/// use serde_json::json;
/// use windlass::watch::filter::{EventKind, WatchEvent};
///
/// let meta = ObjectMeta { generation: Some(3), ..Default::default() };
/// let body = json!({"spec": {"replicas": 2}, "status": {"ready": true}});
/// let event = WatchEvent::new(EventKind::Modified, &meta).with_body(&body);
/// assert_eq!(event.generation(), Some(3));
/// assert_eq!(event.status(), Some(&json!({"ready": true})));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct WatchEvent<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The object's metadata.
    pub meta: &'a ObjectMeta,
    /// The object's top-level fields, when the watch carries the whole object.
    pub body: Option<&'a Value>,
}

impl<'a> WatchEvent<'a> {
    /// An event that carries metadata only.
    pub fn new(kind: EventKind, meta: &'a ObjectMeta) -> Self {
        WatchEvent {
            kind,
            meta,
            body: None,
        }
    }

    /// The same event, carrying the object's fields too: a JSON object such as
    /// `serde_json::to_value(&cr)` or a [`DynamicObject`](kube::core::DynamicObject)'s `data`.
    pub fn with_body(self, body: &'a Value) -> Self {
        WatchEvent {
            body: Some(body),
            ..self
        }
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&'a str> {
        self.meta.uid.as_deref()
    }

    /// `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.meta.generation
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&'a str> {
        self.meta.resource_version.as_deref()
    }

    /// `metadata.annotations`, if any.
    pub fn annotations(&self) -> Option<&'a BTreeMap<String, String>> {
        self.meta.annotations.as_ref()
    }

    /// `metadata.labels`, if any.
    pub fn labels(&self) -> Option<&'a BTreeMap<String, String>> {
        self.meta.labels.as_ref()
    }

    /// Whether `metadata.deletionTimestamp` is set: deletion was requested and waits for
    /// finalizers.
    pub fn is_deleting(&self) -> bool {
        self.meta.deletion_timestamp.is_some()
    }

    /// A top-level field of the object, if the event carries the body.
    pub fn field(&self, name: &str) -> Option<&'a Value> {
        self.body.and_then(|body| body.get(name))
    }

    /// `status`, if the event carries the body and the object has one.
    pub fn status(&self) -> Option<&'a Value> {
        self.field("status")
    }
}

/// Votes on whether a watch event should start a reconcile.
///
/// One instance exists per (object, requester) and may keep state about the object it
/// watches. Implement [`Filter::test`], and [`Filter::update`] if the filter remembers
/// something; callers use [`Filter::evaluate`]. A filter is given to the runtime as a
/// [`FilterSpec`], which builds a fresh instance per (object, requester).
///
/// ```
/// use windlass::watch::filter::{EventKind, Filter, FilterSpec, WatchEvent};
///
/// /// Only objects in namespaces whose name starts with `team-`.
/// #[derive(Clone)]
/// struct TeamNamespaces;
///
/// impl Filter for TeamNamespaces {
///     fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
///         let namespace = event.meta.namespace.as_deref()?; // cluster-scoped: abstain
///         Some(namespace.starts_with("team-"))
///     }
/// }
///
/// let spec = FilterSpec::new(TeamNamespaces);
/// let mut filter = spec.build();
/// let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
///     namespace: Some("team-a".into()),
///     ..Default::default()
/// };
/// assert_eq!(filter.evaluate(WatchEvent::new(EventKind::Added, &meta)), Some(true));
/// ```
pub trait Filter: Send {
    /// The vote on `event`: `Some(true)` to reconcile, `Some(false)` not to, `None` to
    /// abstain. Must not depend on anything but `event` and the state [`Filter::update`]
    /// recorded; a group may skip it once its outcome is decided.
    fn test(&self, event: WatchEvent<'_>) -> Option<bool>;

    /// Record what the filter needs from `event` for later tests. Called after every
    /// test, whatever the vote, and also when the test was skipped. The default keeps
    /// no state.
    fn update(&mut self, _event: WatchEvent<'_>) {}

    /// Test, then update: the vote on `event` as seen before it, with the state moved
    /// past it. There is no reason to override this.
    fn evaluate(&mut self, event: WatchEvent<'_>) -> Option<bool> {
        let vote = self.test(event);
        self.update(event);
        vote
    }

    /// A short name for logs, by default the type's name without its path.
    fn name(&self) -> &'static str {
        short_type_name(std::any::type_name::<Self>())
    }
}

/// `windlass::watch::filter::Generation` → `Generation`.
fn short_type_name(full: &'static str) -> &'static str {
    let path = full.split('<').next().unwrap_or(full);
    path.rsplit("::").next().unwrap_or(path)
}

#[cfg(test)]
mod tests;
