//! The filters themselves, among them the two that windlass's default filter needs besides
//! the generation and resourceVersion checks ([`Labels`], [`DeletionRequested`]).
//!
//! Filters that compare with the past keep a 64-bit hash rather than a copy (annotations
//! can be large, e.g. `kubectl.kubernetes.io/last-applied-configuration`), so their state
//! stays a few words per object.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

use super::{EventKind, Filter, WatchEvent};
use crate::annotations;
use crate::status;

/// Annotation keys containing one of these belong to the platform, not the user, and are
/// ignored by [`UserAnnotations`].
pub(crate) const PLATFORM_ANNOTATION_DOMAINS: [&str; 3] =
    ["k8s.io", "kubernetes.io", "openshift.io"];

/// How many resourceVersions [`ResourceVersion`] remembers per object.
pub(crate) const RESOURCE_VERSIONS_KEPT: usize = 20;

fn is_added_or_deleted(event: WatchEvent<'_>) -> bool {
    matches!(event.kind, EventKind::Added | EventKind::Deleted)
}

/// The hash of the `(key, value)` pairs of a string map, optionally only some of them.
/// The annotations of the per-CR lock ([`annotations::LEASE_NAME`],
/// [`annotations::LEASE_TIME`]): they say which replica reconciles the CR right now, and
/// change with every reconcile under that lock (taken at its start, given up at its end),
/// so no annotation filter counts them: a change of them starting a reconcile would start
/// the next one, for ever.
fn is_lock_key(key: &str) -> bool {
    key == annotations::LEASE_NAME || key == annotations::LEASE_TIME
}

fn hash_entries(map: Option<&BTreeMap<String, String>>, keep: impl Fn(&str) -> bool) -> u64 {
    let mut hasher = DefaultHasher::new();
    for (key, value) in map.into_iter().flatten() {
        if keep(key) {
            (key, value).hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// The 64-bit hash of one value, as the filters keep what they compare.
fn hash_one<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Yes on [`EventKind::Added`] and [`EventKind::Deleted`]; abstains otherwise.
#[derive(Debug, Clone, Copy, Default)]
pub struct CreationDeletion;

impl Filter for CreationDeletion {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        is_added_or_deleted(event).then_some(true)
    }
}

/// No on [`EventKind::Added`], yes otherwise: for objects the reconcile created
/// itself, whose creation needs no reconcile of their owner.
#[derive(Debug, Clone, Copy, Default)]
pub struct DependentWatch;

impl Filter for DependentWatch {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        Some(event.kind != EventKind::Added)
    }
}

/// Always yes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Enable;

impl Filter for Enable {
    fn test(&self, _event: WatchEvent<'_>) -> Option<bool> {
        Some(true)
    }
}

/// Always no.
#[derive(Debug, Clone, Copy, Default)]
pub struct Disable;

impl Filter for Disable {
    fn test(&self, _event: WatchEvent<'_>) -> Option<bool> {
        Some(false)
    }
}

/// No while the object carries [`annotations::PAUSE_EXECUTION`] = `true` (any case), yes
/// otherwise. It never abstains, so it belongs in an [`All`](super::All): inside an
/// [`Any`](super::Any) it would pass every unpaused event.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pause;

impl Filter for Pause {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        let paused = event
            .annotations()
            .and_then(|a| a.get(annotations::PAUSE_EXECUTION));
        Some(!annotations::is_true(paused.map(String::as_str)))
    }
}

/// Yes when `metadata.generation` differs from the one last seen: the API server
/// bumps it on a change of anything but metadata and status.
///
/// Abstains on [`EventKind::Added`] and [`EventKind::Deleted`], and while no generation
/// has been seen (the first event, and always for kinds without one).
#[derive(Debug, Clone, Default)]
pub struct Generation {
    seen: Option<i64>,
}

impl Filter for Generation {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        let seen = self.seen?;
        if is_added_or_deleted(event) {
            return None;
        }
        Some(event.generation() != Some(seen))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.seen = event.generation();
    }
}

/// For kinds without a generation (ConfigMaps, Secrets): yes when a top-level field other
/// than `metadata`, `status`, `kind` and `apiVersion` changed since the last event.
///
/// Whether the kind has a generation is decided once, from the first object seen; if it
/// has one, this filter always abstains and leaves the work to [`Generation`]. It also
/// abstains on [`EventKind::Added`] and [`EventKind::Deleted`], before anything was
/// recorded, and on events without a body (metadata-only watches).
///
/// A field that appears or disappears counts as a change, and a field that disappeared is
/// forgotten: keeping its last hash would make every later event look like a change.
///
/// The fields are remembered as one hash of them all: a comparison of the whole set is all
/// the filter makes, and one word per object is what the router can afford to keep for
/// every ConfigMap it watches.
#[derive(Debug, Clone, Default)]
pub struct NoGeneration {
    supports_generation: Option<bool>,
    /// The fields' hash; `None` until a body with fields was seen (and when it had none).
    hash: Option<u64>,
}

impl NoGeneration {
    const IGNORED: [&'static str; 4] = ["metadata", "status", "kind", "apiVersion"];

    /// The hash of the fields compared, in key order (a map's order is not part of it).
    fn hash_of(body: &Value) -> Option<u64> {
        let mut fields: Vec<(&String, &Value)> = body
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, _)| !Self::IGNORED.contains(&key.as_str()))
            .collect();
        if fields.is_empty() {
            return None;
        }
        fields.sort_unstable_by_key(|(key, _)| *key);
        let mut hasher = DefaultHasher::new();
        for (key, value) in fields {
            key.hash(&mut hasher);
            value.hash(&mut hasher);
        }
        Some(hasher.finish())
    }
}

impl Filter for NoGeneration {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        if self.supports_generation != Some(false) {
            return None;
        }
        let seen = self.hash?;
        if is_added_or_deleted(event) {
            return None;
        }
        let body = event.body?;
        Some(Self::hash_of(body) != Some(seen))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        let supports = *self
            .supports_generation
            .get_or_insert(event.generation().is_some());
        if supports {
            return;
        }
        if let Some(body) = event.body {
            self.hash = Self::hash_of(body);
        }
    }
}

/// No when the event's resourceVersion is one of the last 20 seen
/// for the object, yes otherwise: drops the replays a watch sends when it
/// reconnects. Abstains on [`EventKind::Deleted`].
///
/// The versions are kept as 64-bit hashes: a version is an opaque string of the server's,
/// only ever compared for equality, and a hash is one word where the string was three
/// and an allocation.
#[derive(Debug, Clone, Default)]
pub struct ResourceVersion {
    seen: VecDeque<u64>,
}

impl Filter for ResourceVersion {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        if event.kind == EventKind::Deleted {
            return None;
        }
        let Some(version) = event.resource_version() else {
            return Some(true);
        };
        Some(!self.seen.contains(&hash_one(version)))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        let Some(version) = event.resource_version() else {
            return;
        };
        let version = hash_one(version);
        if self.seen.contains(&version) {
            return;
        }
        if self.seen.len() == RESOURCE_VERSIONS_KEPT {
            self.seen.pop_front();
        }
        self.seen.push_back(version);
    }
}

/// Yes when the annotations changed since the last event (the per-CR lock's aside);
/// abstains on [`EventKind::Added`] and [`EventKind::Deleted`]. A filter that has seen
/// nothing yet counts any annotations as a change.
#[derive(Debug, Clone, Default)]
pub struct Annotations {
    hash: Option<u64>,
}

impl Filter for Annotations {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        if is_added_or_deleted(event) {
            return None;
        }
        Some(self.hash != Some(hash_entries(event.annotations(), |k| !is_lock_key(k))))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.hash = Some(hash_entries(event.annotations(), |k| !is_lock_key(k)));
    }
}

/// [`Annotations`], ignoring the keys that contain one of the platform's domains
/// (`k8s.io`, `kubernetes.io`, `openshift.io`):
/// `deployment.kubernetes.io/revision` changes when a controller writes it, not a user;
/// and the per-CR lock's.
#[derive(Debug, Clone, Default)]
pub struct UserAnnotations {
    hash: Option<u64>,
}

impl UserAnnotations {
    fn is_user_key(key: &str) -> bool {
        !is_lock_key(key)
            && !PLATFORM_ANNOTATION_DOMAINS
                .iter()
                .any(|domain| key.contains(domain))
    }
}

impl Filter for UserAnnotations {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        if is_added_or_deleted(event) {
            return None;
        }
        Some(self.hash != Some(hash_entries(event.annotations(), Self::is_user_key)))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.hash = Some(hash_entries(event.annotations(), Self::is_user_key));
    }
}

/// Yes when the labels changed since the last event; abstains on [`EventKind::Added`] and
/// [`EventKind::Deleted`]. Part of windlass's default, so that editing a label starts a
/// reconcile.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    hash: Option<u64>,
}

impl Filter for Labels {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        if is_added_or_deleted(event) {
            return None;
        }
        Some(self.hash != Some(hash_entries(event.labels(), |_| true)))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.hash = Some(hash_entries(event.labels(), |_| true));
    }
}

/// Yes when `metadata.deletionTimestamp` was set since the last event: deletion was
/// requested and the finalizer must run. No while it stays set or unset; abstains on
/// [`EventKind::Added`] and [`EventKind::Deleted`]. Part of windlass's default, so a
/// deletion is seen even where the API server does not bump the generation.
#[derive(Debug, Clone, Default)]
pub struct DeletionRequested {
    deleting: Option<bool>,
}

impl Filter for DeletionRequested {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        if is_added_or_deleted(event) {
            return None;
        }
        Some(event.is_deleting() && self.deleting != Some(true))
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        self.deleting = Some(event.is_deleting());
    }
}

/// Yes when the reason of the `Ready` condition in the status changed since the last event:
/// lets a parent react to a child CR's progress. Abstains on [`EventKind::Added`] and
/// [`EventKind::Deleted`] and on events without a body.
#[derive(Debug, Clone, Default)]
pub struct SubsystemStatus {
    reason: Option<String>,
}

impl SubsystemStatus {
    fn ready_reason(event: WatchEvent<'_>) -> Option<Option<String>> {
        event.body?;
        let reason = event
            .status()
            .and_then(|s| status::condition(s, status::READY).ok().flatten())
            .and_then(|c| c.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_string);
        Some(reason)
    }
}

impl Filter for SubsystemStatus {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        if is_added_or_deleted(event) {
            return None;
        }
        Some(Self::ready_reason(event)? != self.reason)
    }

    fn update(&mut self, event: WatchEvent<'_>) {
        if let Some(reason) = Self::ready_reason(event) {
            self.reason = reason;
        }
    }
}

/// Yes when the object carries every listed label with exactly the listed value, no
/// otherwise. An empty selector matches everything.
///
/// ```
/// use windlass::watch::filter::{EventKind, Filter, LabelSelector, WatchEvent};
/// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
/// let tier = LabelSelector::new([("tier", "web")]);
/// let meta = ObjectMeta {
///     labels: Some([("tier".to_string(), "web".to_string())].into()),
///     ..Default::default()
/// };
/// assert_eq!(tier.test(WatchEvent::new(EventKind::Added, &meta)), Some(true));
/// ```
#[derive(Debug, Clone, Default)]
pub struct LabelSelector {
    labels: BTreeMap<String, String>,
}

impl LabelSelector {
    /// A selector requiring each `(key, value)`.
    pub fn new<K: Into<String>, V: Into<String>>(labels: impl IntoIterator<Item = (K, V)>) -> Self {
        LabelSelector {
            labels: labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

impl Filter for LabelSelector {
    fn test(&self, event: WatchEvent<'_>) -> Option<bool> {
        let labels = event.labels();
        Some(
            self.labels
                .iter()
                .all(|(key, value)| labels.and_then(|l| l.get(key)) == Some(value)),
        )
    }
}
