//! Kubernetes Events about a CR (`events.k8s.io/v1`), the ones `kubectl describe` shows
//! under the CR: when a rollout starts, completes, fails, and when a component fails.
//!
//! An [`EventSink`] publishes a [`CrEvent`] about the CR whose manifest it is given. Two
//! sinks share the trait:
//!
//! - [`LiveEventSink`] publishes to the API server, and turns a repeated event into a
//!   series on the first Event object (`series.count`) instead of a new object;
//! - [`MemoryEventSink`] keeps the events in memory, for dry runs and tests, and counts
//!   repeats the same way.
//!
//! Both treat two events as the same when they are about the same CR (apiVersion, kind,
//! namespace, name, uid) and have the same type, reason, action and note. The Event of a
//! series keeps pointing at the CR's resourceVersion of its first occurrence.
//!
//! # When to publish
//!
//! | event                             | when                                                                 |
//! |-----------------------------------|----------------------------------------------------------------------|
//! | [`CrEvent::rollout_started`]      | a reconcile starts rolling out a spec or version not yet rolled out (the start status turns `Updating` on) and does not complete it, not on every requeue; a rollout done in one reconcile gets only its RolloutCompleted |
//! | [`CrEvent::rollout_completed`]    | the completion status turns `Ready` true                             |
//! | [`CrEvent::rollout_failed`]       | a reconcile ends in a fatal [`Error`] ([`Error::is_fatal`])           |
//! | [`CrEvent::component_failed`]     | a component fails ([`Event::Halted`] with `failure`) |
//!
//! Publishing is best effort: a sink's error is for the log, never a reason to fail or
//! retry the reconcile.
//!
//!
//! # No secrets
//!
//! A [`CrEvent`] can only be made by its constructors, from windlass's own values: a
//! version, a component name, a phase and an [`Error`]'s message. No constructor takes a
//! manifest, and the sinks keep only an [`ObjectReference`] of the CR, so no object's
//! data (a Secret's in particular) reaches an Event. Notes are cut to the API's limit of
//! 1024 bytes.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::Value;

pub use kube::runtime::events::EventType;

use crate::error::{ClusterError, Error};
use crate::object::ManifestExt;
use crate::progress::{Event, Phase};

/// The longest note `events.k8s.io/v1` accepts, in bytes.
pub(crate) const NOTE_LIMIT: usize = 1024;

/// The reporting controller of [`LiveEventSink::new`].
pub(crate) const DEFAULT_REPORTER: &str = "windlass";

/// Why an event was published (the Event's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A rollout of a new spec or version began.
    RolloutStarted,
    /// A rollout completed: the CR is Ready.
    RolloutCompleted,
    /// A rollout failed.
    RolloutFailed,
    /// A rollout waits for something ("not yet"); published only for a primary whose
    /// status windlass does not write, where no condition can say so.
    RolloutWaiting,
    /// A component failed to deploy or verify.
    ComponentFailed,
}

impl Reason {
    /// The reason as the API shows it, e.g. `RolloutStarted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::RolloutStarted => "RolloutStarted",
            Reason::RolloutCompleted => "RolloutCompleted",
            Reason::RolloutFailed => "RolloutFailed",
            Reason::RolloutWaiting => "RolloutWaiting",
            Reason::ComponentFailed => "ComponentFailed",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event about a CR. Made only by its constructors (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CrEvent {
    type_: EventType,
    reason: Reason,
    action: &'static str,
    note: String,
}

impl CrEvent {
    /// A rollout of `version` (or of the CR's spec, without one) began.
    pub fn rollout_started(version: Option<&str>) -> Self {
        let note = match version {
            Some(v) => format!("Rolling out version {v}"),
            None => "Rolling out".to_string(),
        };
        Self::new(EventType::Normal, Reason::RolloutStarted, "Rollout", note)
    }

    /// The rollout of `version` (or of the CR's spec) completed: the CR is Ready.
    pub fn rollout_completed(version: Option<&str>) -> Self {
        let note = match version {
            Some(v) => format!("Version {v} is ready"),
            None => "Ready".to_string(),
        };
        Self::new(EventType::Normal, Reason::RolloutCompleted, "Rollout", note)
    }

    /// The rollout failed with `error`.
    pub fn rollout_failed(error: &Error) -> Self {
        Self::new(
            EventType::Warning,
            Reason::RolloutFailed,
            "Rollout",
            error.to_string(),
        )
    }

    /// The rollout is not done yet, for `reason`.
    pub fn rollout_waiting(reason: impl Into<String>) -> Self {
        Self::new(
            EventType::Normal,
            Reason::RolloutWaiting,
            "Rollout",
            reason.into(),
        )
    }

    /// Component `component` failed in `phase` with `error`.
    pub fn component_failed(component: &str, phase: Phase, error: &Error) -> Self {
        Self::component_failed_message(component, phase, &error.to_string())
    }

    /// The event a reconcile's progress event calls for: [`Reason::ComponentFailed`] for a
    /// component that failed ([`Event::Halted`] with `failure`), else `None`.
    pub fn from_progress(event: &Event) -> Option<Self> {
        match event {
            Event::Halted {
                component,
                phase,
                failure: true,
                message,
            } => Some(Self::component_failed_message(
                component,
                *phase,
                message.as_deref().unwrap_or("no error message"),
            )),
            _ => None,
        }
    }

    fn component_failed_message(component: &str, phase: Phase, message: &str) -> Self {
        let action = match phase {
            Phase::Deploy => "Deploy",
            Phase::Verify => "Verify",
        };
        Self::new(
            EventType::Warning,
            Reason::ComponentFailed,
            action,
            format!("component {component}: {message}"),
        )
    }

    fn new(type_: EventType, reason: Reason, action: &'static str, note: String) -> Self {
        CrEvent {
            type_,
            reason,
            action,
            note: truncate(note, NOTE_LIMIT),
        }
    }

    /// `Normal` or `Warning`.
    pub fn type_(&self) -> EventType {
        self.type_
    }
    /// Why the event was published.
    pub fn reason(&self) -> Reason {
        self.reason
    }
    /// What windlass was doing: `Rollout`, `Deploy` or `Verify`.
    pub fn action(&self) -> &str {
        self.action
    }
    /// The human-readable message, at most 1024 bytes.
    pub fn note(&self) -> &str {
        &self.note
    }
}

/// `text` cut to at most `limit` bytes at a character boundary, ending with `…` when cut.
fn truncate(mut text: String, limit: usize) -> String {
    const MARK: &str = "…";
    if text.len() <= limit {
        return text;
    }
    let mut end = limit.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
    text
}

/// A reference to the CR of `manifest`: apiVersion, kind, name, namespace, uid and
/// resourceVersion. The manifest must have the first three.
pub(crate) fn object_reference(manifest: &Value) -> Result<ObjectReference, ClusterError> {
    let required = |field: &str, value: Option<&str>| {
        value.map(str::to_string).ok_or_else(|| {
            ClusterError::invalid(
                "the CR of an event".to_string(),
                format!("{field}: required"),
            )
        })
    };
    Ok(ObjectReference {
        api_version: Some(required("apiVersion", manifest.api_version())?),
        kind: Some(required("kind", manifest.kind())?),
        name: Some(required("metadata.name", manifest.name())?),
        namespace: manifest.namespace().map(str::to_string),
        uid: manifest.uid().map(str::to_string),
        resource_version: manifest.resource_version().map(str::to_string),
        ..Default::default()
    })
}

/// What makes two events the same: the CR (without its resourceVersion) and the event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    cr: [Option<String>; 5],
    event: CrEvent,
}

impl SeriesKey {
    fn new(regarding: &ObjectReference, event: &CrEvent) -> Self {
        SeriesKey {
            cr: [
                regarding.api_version.clone(),
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ],
            event: event.clone(),
        }
    }
}

/// Publishes [`CrEvent`]s about CRs. Object-safe: hold an `Arc<dyn EventSink>`.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Publish `event` about the CR whose manifest is `cr` (only its identity is used).
    /// Errors are for the log: see the [module docs](self).
    async fn publish(&self, cr: &Value, event: CrEvent) -> Result<(), ClusterError>;
}

/// A published event, as a [`MemoryEventSink`] keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// The CR, as of the first occurrence.
    pub regarding: ObjectReference,
    /// The event.
    pub event: CrEvent,
    /// How often it was published.
    pub count: u32,
}

/// Keeps published events in memory, in first-published order, counting repeats.
#[derive(Debug, Default)]
pub struct MemoryEventSink {
    events: Mutex<Vec<(SeriesKey, RecordedEvent)>>,
}

impl MemoryEventSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every distinct event so far, in the order first published.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events.lock().iter().map(|(_, e)| e.clone()).collect()
    }

    /// Forget every event.
    pub fn clear(&self) {
        self.events.lock().clear();
    }
}

#[async_trait]
impl EventSink for MemoryEventSink {
    async fn publish(&self, cr: &Value, event: CrEvent) -> Result<(), ClusterError> {
        let regarding = object_reference(cr)?;
        let key = SeriesKey::new(&regarding, &event);
        let mut events = self.events.lock();
        match events.iter_mut().find(|(k, _)| *k == key) {
            Some((_, recorded)) => recorded.count = recorded.count.saturating_add(1),
            None => events.push((
                key,
                RecordedEvent {
                    regarding,
                    event,
                    count: 1,
                },
            )),
        }
        Ok(())
    }
}

/// How long a series is continued; after that a repeat is a new Event object (as
/// kube-runtime's recorder does).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// Series remembered at most; the least recently continued ones are forgotten first.
const MAX_SERIES: usize = 1024;

/// Publishes events to the API server (`events.k8s.io/v1`): the first of a series is
/// created, each repeat patches its `series` (count and last time seen).
///
/// It writes the Events itself rather than through kube-runtime's `Recorder`, which
/// continues a series for events of the same type, reason and action about the same
/// object whatever their note, and only while the object reference is equal,
/// resourceVersion included. windlass wants a different note to be a different Event, and
/// a repeat to continue its series after the CR changed; with the recorder that took one
/// recorder per series, each with a map of whole Events (about 6.6 kB a series, 6.8 MiB
/// at the bound below, in every replica). A series here is its Event's name and count.
///
/// Series are remembered for 6 minutes, at most 1024 of them. Needs `create` and `patch`
/// on `events` in the `events.k8s.io` group, which the `rbac` and `manifests` commands
/// grant.
pub struct LiveEventSink {
    client: kube::Client,
    controller: String,
    instance: String,
    series: Mutex<SeriesTable>,
}

/// One series: the Event that holds it.
struct Series {
    namespace: String,
    name: String,
    /// Occurrences published, the first included.
    count: i32,
    used: Instant,
    /// Its place in [`SeriesTable::by_use`].
    turn: u64,
}

/// The series remembered, and the order they were last continued in, so that the expired
/// and the least recently continued ones are found without a walk over all of them: a CR's
/// rollout publishes at least one event, and a fleet of more CRs than [`MAX_SERIES`] keeps
/// the table full.
#[derive(Default)]
struct SeriesTable {
    series: HashMap<Arc<SeriesKey>, Series>,
    /// The series by when they were last continued, oldest first (a counter, not the
    /// `Instant`, which two publishes may share).
    by_use: BTreeMap<u64, Arc<SeriesKey>>,
    next_turn: u64,
}

impl SeriesTable {
    /// The series of `key` continued now (its count one more), or `None` when it has none;
    /// the series unused for [`SERIES_TTL`] are forgotten first.
    fn continue_series(&mut self, key: &SeriesKey, now: Instant) -> Option<&Series> {
        self.expire(now);
        let turn = self.turn();
        let series = self.series.get_mut(key)?;
        let shared = self.by_use.remove(&series.turn)?;
        series.count += 1;
        series.used = now;
        series.turn = turn;
        self.by_use.insert(turn, shared);
        Some(series)
    }

    /// Remember the new series `key`, forgetting the least recently continued one when
    /// [`MAX_SERIES`] are remembered.
    fn insert(&mut self, key: SeriesKey, mut series: Series) {
        self.expire(series.used);
        self.forget(&key);
        if self.series.len() >= MAX_SERIES
            && let Some((_, oldest)) = self.by_use.pop_first()
        {
            self.series.remove(&oldest);
        }
        series.turn = self.turn();
        let key = Arc::new(key);
        self.by_use.insert(series.turn, Arc::clone(&key));
        self.series.insert(key, series);
    }

    /// Forget the series unused for [`SERIES_TTL`]: the oldest first, until one is not.
    fn expire(&mut self, now: Instant) {
        while let Some(oldest) = self.by_use.first_entry() {
            let expired = self
                .series
                .get(oldest.get())
                .is_none_or(|s| now.duration_since(s.used) >= SERIES_TTL);
            if !expired {
                break;
            }
            self.series.remove(&oldest.remove());
        }
    }

    fn turn(&mut self) -> u64 {
        self.next_turn += 1;
        self.next_turn
    }

    fn forget(&mut self, key: &SeriesKey) {
        if let Some(series) = self.series.remove(key) {
            self.by_use.remove(&series.turn);
        }
    }
}

impl LiveEventSink {
    /// A sink reporting as `windlass`, with the instance from `$POD_NAME` or
    /// `$HOSTNAME` when set.
    pub fn new(client: kube::Client) -> Self {
        let instance = ["POD_NAME", "HOSTNAME"]
            .into_iter()
            .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()));
        Self::with_reporter(client, DEFAULT_REPORTER, instance)
    }

    /// A sink reporting as `controller` (the Event's `reportingController`, a qualified
    /// name such as `example.com/app-operator`) from `instance` (e.g. the pod name; the
    /// controller name when `None`).
    pub fn with_reporter(
        client: kube::Client,
        controller: impl Into<String>,
        instance: Option<String>,
    ) -> Self {
        let controller = controller.into();
        LiveEventSink {
            client,
            instance: instance.unwrap_or_else(|| controller.clone()),
            controller,
            series: Mutex::new(SeriesTable::default()),
        }
    }

    /// The Event object of the first occurrence of `event`.
    fn first_event(&self, regarding: ObjectReference, event: &CrEvent) -> KubeEvent {
        let now = jiff::Timestamp::now();
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        KubeEvent {
            metadata: ObjectMeta {
                // As kube-runtime names them: the object, then the time in hex.
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: Some(
                    regarding
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                ),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(event.action.to_string()),
            reason: Some(event.reason.as_str().to_string()),
            note: Some(event.note.clone()),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(regarding),
            ..Default::default()
        }
    }

    /// Create the first Event of the series `key`, and remember the series.
    async fn create(&self, key: SeriesKey, event: KubeEvent) -> Result<(), kube::Error> {
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), &namespace);
        let created = events.create(&PostParams::default(), &event).await?;
        let series = Series {
            namespace,
            name: created.metadata.name.unwrap_or_default(),
            count: 1,
            used: Instant::now(),
            turn: 0,
        };
        self.series.lock().insert(key, series);
        Ok(())
    }
}

#[async_trait]
impl EventSink for LiveEventSink {
    async fn publish(&self, cr: &Value, event: CrEvent) -> Result<(), ClusterError> {
        let regarding = object_reference(cr)?;
        let key = SeriesKey::new(&regarding, &event);
        let what = || {
            format!(
                "event {} about {}/{}",
                event.reason,
                regarding.kind.as_deref().unwrap_or_default(),
                regarding.name.as_deref().unwrap_or_default()
            )
        };
        let error = |e: kube::Error| match e {
            kube::Error::Api(status) if status.code == 403 => {
                ClusterError::Forbidden(format!("{}: {}", what(), status.message))
            }
            e => ClusterError::api(format!("{}: {e}", what())),
        };
        let continued = self
            .series
            .lock()
            .continue_series(&key, Instant::now())
            .map(|s| (s.namespace.clone(), s.name.clone(), s.count));
        if let Some((namespace, name, count)) = continued {
            let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), &namespace);
            let series = serde_json::json!({"series": {
                "count": count,
                "lastObservedTime": MicroTime(jiff::Timestamp::now()),
            }});
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return Ok(()),
                // The Event is gone (expired, or deleted by hand): the series starts afresh.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.series.lock().forget(&key);
                }
                Err(e) => return Err(error(e)),
            }
        }
        let first = self.first_event(regarding.clone(), &event);
        self.create(key, first).await.map_err(error)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_repeated_event_is_counted_as_a_series_not_recorded_twice() {
        use serde_json::json;

        let cr = json!({"apiVersion": "example.com/v1", "kind": "App",
                        "metadata": {"name": "shop", "namespace": "prod", "uid": "1234"}});
        let sink = MemoryEventSink::new();
        sink.publish(&cr, CrEvent::rollout_started(Some("1.4.0")))
            .await
            .unwrap();
        sink.publish(&cr, CrEvent::rollout_started(Some("1.4.0")))
            .await
            .unwrap();
        let events = sink.events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].count, 2);
        assert_eq!(events[0].event.reason().as_str(), "RolloutStarted");
    }
    use serde_json::json;

    fn cr(name: &str, resource_version: &str) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "App",
            "metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}"),
                         "resourceVersion": resource_version},
            "spec": {"adminPassword": "hunter2"}})
    }

    #[tokio::test]
    async fn repeats_are_counted_per_cr_reason_and_note() {
        let sink = MemoryEventSink::new();
        let failed = CrEvent::rollout_failed(&Error::config("spec.replicas: must be positive"));
        sink.publish(&cr("a", "1"), failed.clone()).await.unwrap();
        // The CR changed (its resourceVersion), the event did not: the same series.
        sink.publish(&cr("a", "2"), failed.clone()).await.unwrap();
        // Another note, another CR: new events.
        let other = CrEvent::rollout_failed(&Error::config("spec.image: required"));
        sink.publish(&cr("a", "3"), other.clone()).await.unwrap();
        sink.publish(&cr("b", "1"), failed.clone()).await.unwrap();
        let events = sink.events();
        let summary: Vec<(&str, &str, u32)> = events
            .iter()
            .map(|e| {
                (
                    e.regarding.name.as_deref().unwrap(),
                    e.event.note(),
                    e.count,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("a", failed.note(), 2),
                ("a", other.note(), 1),
                ("b", failed.note(), 1)
            ]
        );
        assert_eq!(
            events[0].regarding.resource_version.as_deref(),
            Some("1"),
            "a series points at its first occurrence"
        );
        assert_eq!(events[0].event.type_(), EventType::Warning);
        assert_eq!(events[0].event.reason().as_str(), "RolloutFailed");
        sink.clear();
        assert!(sink.events().is_empty());
    }

    #[test]
    fn notes_are_cut_at_the_api_limit_on_a_character_boundary() {
        // 'é' is two bytes: a cut at byte 1024 - 3 would split one.
        let long = "é".repeat(1000);
        let event = CrEvent::rollout_failed(&Error::rollout(long));
        assert!(event.note().len() <= NOTE_LIMIT, "{}", event.note().len());
        assert!(event.note().len() > NOTE_LIMIT - 8);
        assert!(event.note().ends_with("é…"), "{}", event.note());
        let short = CrEvent::rollout_failed(&Error::rollout("short"));
        assert_eq!(short.note(), "rollout error: short");
        assert_eq!(truncate("abcdef".into(), 6), "abcdef");
        assert_eq!(truncate("abcdefg".into(), 6), "abc…");
    }

    #[tokio::test]
    async fn an_event_about_a_secret_carries_its_name_but_never_its_data() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "shop-db-credentials", "namespace": "prod"},
            "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "s3cr3t-t0ken"}});
        let error = Error::Cluster(ClusterError::invalid(
            "v1/Secret/shop-db-credentials",
            "metadata.labels: invalid",
        ));
        let sink = MemoryEventSink::new();
        sink.publish(
            &cr("shop", "7"),
            CrEvent::component_failed("credentials", Phase::Deploy, &error),
        )
        .await
        .unwrap();
        let recorded = format!("{:?}", sink.events());
        assert!(recorded.contains("shop-db-credentials"), "{recorded}");
        assert!(recorded.contains("component credentials"), "{recorded}");
        for data in ["aHVudGVyMg==", "hunter2", "s3cr3t-t0ken", "adminPassword"] {
            assert!(!recorded.contains(data), "{data} leaked: {recorded}");
        }
        assert!(!recorded.contains(&secret["data"]["password"].to_string()));
        assert_eq!(sink.events()[0].event.action(), "Deploy");
    }

    #[test]
    fn only_failed_components_make_events_from_progress() {
        let halted = |failure| Event::Halted {
            component: "db".into(),
            phase: Phase::Verify,
            failure,
            message: Some("verification incomplete: 0/1 ready".into()),
        };
        let event = CrEvent::from_progress(&halted(true)).unwrap();
        assert_eq!(event.reason(), Reason::ComponentFailed);
        assert_eq!(event.action(), "Verify");
        assert_eq!(
            event.note(),
            "component db: verification incomplete: 0/1 ready"
        );
        assert_eq!(CrEvent::from_progress(&halted(false)), None);
        assert_eq!(
            CrEvent::from_progress(&Event::PhaseStarted(Phase::Deploy)),
            None
        );
    }

    #[tokio::test]
    async fn a_manifest_without_identity_is_rejected() {
        let sink = MemoryEventSink::new();
        let err = sink
            .publish(&json!({"kind": "App"}), CrEvent::rollout_completed(None))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("apiVersion: required"), "{err}");
        let reference = object_reference(&cr("a", "5")).unwrap();
        assert_eq!(reference.uid.as_deref(), Some("uid-a"));
        assert_eq!(reference.namespace.as_deref(), Some("prod"));
        assert_eq!(reference.resource_version.as_deref(), Some("5"));
    }

    /// A series about the CR `name`, first published at `now`, for a table's test.
    fn series_about(name: &str, now: Instant) -> Series {
        Series {
            namespace: "prod".into(),
            name: format!("{name}.1"),
            count: 1,
            used: now,
            turn: 0,
        }
    }

    fn key(name: &str) -> SeriesKey {
        SeriesKey::new(
            &object_reference(&cr(name, "1")).unwrap(),
            &CrEvent::rollout_completed(None),
        )
    }

    #[test]
    fn a_full_table_forgets_the_series_least_recently_continued() {
        let mut table = SeriesTable::default();
        let start = Instant::now();
        for i in 0..MAX_SERIES {
            let name = format!("cr-{i}");
            table.insert(key(&name), series_about(&name, start));
        }
        assert_eq!(table.series.len(), MAX_SERIES);
        // The first series made is continued: the second is now the least recent.
        let later = start + Duration::from_secs(1);
        let first = table.continue_series(&key("cr-0"), later).unwrap();
        assert_eq!((first.name.as_str(), first.count), ("cr-0.1", 2));
        table.insert(key("new"), series_about("new", later));
        assert_eq!(table.series.len(), MAX_SERIES);
        assert!(table.series.contains_key(&key("cr-0")), "continued: kept");
        assert!(
            !table.series.contains_key(&key("cr-1")),
            "least recent: forgotten"
        );
        assert!(table.series.contains_key(&key("cr-2")));
        assert_eq!(
            table.by_use.len(),
            table.series.len(),
            "one place in the order each"
        );
    }

    #[test]
    fn a_series_unused_for_its_ttl_is_forgotten_and_starts_anew() {
        let mut table = SeriesTable::default();
        let start = Instant::now();
        table.insert(key("a"), series_about("a", start));
        table.insert(key("b"), series_about("b", start));
        // b is continued just before a's TTL ends; a is not.
        let before = start + SERIES_TTL - Duration::from_secs(1);
        assert!(table.continue_series(&key("b"), before).is_some());
        let after = start + SERIES_TTL;
        assert!(table.continue_series(&key("c"), after).is_none());
        assert!(!table.series.contains_key(&key("a")), "unused for its TTL");
        assert!(table.series.contains_key(&key("b")), "continued within it");
        assert!(
            table.continue_series(&key("a"), after).is_none(),
            "a forgotten series is not continued"
        );
        table.insert(key("a"), series_about("a", after));
        table.insert(key("c"), series_about("c", after));
        assert_eq!((table.series.len(), table.by_use.len()), (3, 3));
        assert_eq!(table.continue_series(&key("a"), after).unwrap().count, 2);
    }
}
