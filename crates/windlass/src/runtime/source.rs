//! Watches: where events come from (on kube-runtime's `watcher`).
//!
//! One [`Watch`] per kind and namespace (or all namespaces). Each runs kube-runtime's
//! `watcher` (list, then watch; relist on 410 Gone; bookmarks). The list is a streaming
//! list where the API server offers one (the `WatchList` feature, on by default from
//! Kubernetes 1.34): a single watch that sends the current objects one by one and then a
//! bookmark, served from the API server's watch cache, instead of pages of a LIST that the
//! server must assemble in memory. Each object is decoded once, into the JSON the stores
//! and the router use (see [`super::tolerant`]). A server that refuses it gets paged lists from then on;
//! `KUBE_FEATURE_WatchListClient=false`, client-go's switch for the same feature, turns it
//! off. A watch that fails (the API server or etcd is down, the connection broke) is
//! reported unsynced — `/readyz` answers 503 — and started afresh after a back-off; its
//! relist makes it synced again and resets the back-off. It retries forever: a watch that
//! stopped after some number of failures would leave the operator dead or deaf. Every
//! object seen goes into the [`Stores`], and every change becomes a [`SourceEvent`] on a
//! channel for the controller's dispatcher. A (re)list goes into the store object by object
//! as it arrives, each sent on at once, so that what a list holds at a time is one object,
//! not the whole list; when it is complete, what the store held and the list no longer has
//! went while the watch was down, and is reported deleted.
//!
//! The primary kind is watched whole; the kinds components own are watched
//! label-scoped, only objects that carry windlass's ownership label
//! ([`crate::annotations::OWNER_UID`]). Every event carries the whole object (of its
//! `managedFields`, windlass's own apply entry only), for the filters; what the store
//! keeps of it is the store's choice (see [`super::cache`]: the owned kinds keep what a
//! rollout reads of them).

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::mpsc;

use super::cache::Stores;
use super::tolerant::{Parsed, Tolerant, Watched, too_deep};
use crate::cluster::LiveCluster;
use crate::object::{ObjectRef, TypeRef};
use crate::watch::filter::EventKind;

/// What to watch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Watch {
    /// The kind.
    pub type_ref: TypeRef,
    /// One namespace, or `None` for all (and for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// A label selector, or `None` for every object (the store is then complete).
    pub labels: Option<String>,
    /// The label selector of one shard (`windlass.dev/shard=3`), ANDed with `labels` by the
    /// watch: the store of a shard's watches is the shard's own (see `runtime::shard`), so
    /// it counts as complete, or as seeing every owned object, within the shard.
    pub shard: Option<String>,
}

impl Watch {
    /// The watches of `type_ref` over the namespaces `watched` (empty: one over all of
    /// them), or one for a cluster-scoped kind, each with the selectors `labels` and
    /// `shard`.
    pub(crate) fn spread(
        type_ref: &TypeRef,
        watched: &[String],
        cluster_scoped: bool,
        labels: Option<String>,
        shard: Option<String>,
    ) -> Vec<Watch> {
        let namespaces: Vec<Option<String>> = if cluster_scoped || watched.is_empty() {
            vec![None]
        } else {
            watched.iter().cloned().map(Some).collect()
        };
        namespaces
            .into_iter()
            .map(|namespace| Watch {
                type_ref: type_ref.clone(),
                namespace,
                labels: labels.clone(),
                shard: shard.clone(),
            })
            .collect()
    }
}

/// One change a watch saw.
#[derive(Debug, Clone)]
pub struct SourceEvent {
    /// What happened.
    pub kind: EventKind,
    /// The object (for a deletion: its last state).
    pub object: Arc<Value>,
    /// Its reference.
    pub reference: ObjectRef,
    /// Whether a list (at the watch's start, or a relist) reported it rather than the
    /// watch: the router queues a CR for an object it first learns of this way at low
    /// priority.
    pub listed: bool,
}

/// The capacity of the channel from a dispatcher's own watches to it (and from the
/// replica's shared watches to their relay, and from the watch of unlabelled CRs to the
/// shard labeller, which lists a whole fleet when sharding is turned on for CRs that have
/// no shard label yet): how many decoded events may wait there.
///
/// Each holds the whole decoded object, several KiB as a `Value` tree. When an operator
/// starts over thousands of objects, the watches decode their lists faster than the
/// dispatcher routes them (it shares the cores with the reconciles the lists start), so
/// the channel runs full: at 1024 that was about 9 MiB of decoded objects at N = 1000, the
/// largest part of the restart's peak heap. A small channel holds the watches back
/// instead (the server's stream waits in the socket); the dispatcher's loop takes the
/// next event whenever one is queued, so it routes as many in the same time. The relay
/// from the shared watches to each shard's dispatcher stays unbounded (one busy shard must
/// not hold up the others), so events of the kinds watched whole for every shard are not
/// bounded by this.
pub(super) const EVENTS_IN_FLIGHT: usize = 64;

/// What a watch tells about itself (readiness, metrics).
pub trait WatchObserver: Send + Sync {
    /// The watch is about to start (readiness waits for it from now on).
    fn declare(&self, _watch: &Watch) {}
    /// The watch's store holds a complete list (`true`), or it is relisting (`false`).
    fn synced(&self, watch: &Watch, synced: bool);
    /// The watch failed and will retry with back-off.
    fn failed(&self, watch: &Watch, error: &watcher::Error);
    /// The watch was stopped for good (another watch of its kind replaces it):
    /// readiness no longer waits for it.
    fn retired(&self, _watch: &Watch) {}
}

/// Run `watch` until the receiver of `events` is gone: fill `stores`, send every change;
/// list with `initial_list`, or in pages once the server refuses streaming lists.
/// Never returns on errors: they are logged, reported to `observer`, and retried with
/// back-off. The caller declares the watch in `stores` (`Stores::declare`) before it
/// spawns this, so that the store stops answering for what a replaced watch left behind
/// at once, not when this task first runs.
pub async fn run(
    live: Arc<LiveCluster>,
    stores: Arc<Stores>,
    watch: Watch,
    mut initial_list: InitialList,
    events: mpsc::Sender<SourceEvent>,
    observer: Arc<dyn WatchObserver>,
) {
    // Discovery itself may fail (the CRD is not installed yet): retry like the watch.
    let mut backoff = windlass_tasks::backoff::ExponentialBackOff::new(watch_backoff());
    let (api, tolerant_api) = loop {
        let namespace = watch.namespace.as_deref();
        let apis = match live.api_as::<Parsed>(&watch.type_ref, namespace).await {
            // The kind is resolved now: the second is answered from discovery's cache.
            Ok(api) => live
                .api_as::<Tolerant>(&watch.type_ref, namespace)
                .await
                .map(|tolerant| (api, tolerant)),
            Err(e) => Err(e),
        };
        match apis {
            Ok(apis) => break apis,
            Err(e) => {
                let delay = backoff.next_jittered();
                tracing::warn!(kind = %watch.type_ref, error = %e, ?delay, "cannot watch yet");
                tokio::time::sleep(delay).await;
            }
        }
    };
    // kube-runtime's watcher resumes a broken watch from its last resourceVersion and says
    // nothing when that works again, so after an error nobody could tell when the store is
    // current again. Instead, a failed watch is dropped, reported unsynced, and started
    // afresh after a back-off: its relist (Init … InitDone) reports what changed meanwhile
    // and marks it synced again. The back-off resets once a list has completed.
    backoff.reset();
    // Decoded in one pass until an object too deep for it turns up; then one by one.
    let mut tolerant: Option<kube::Api<Tolerant>> = None;
    loop {
        let config = initial_list.config(&watch);
        let ended = match &tolerant {
            None => {
                let stream = watcher::watcher(api.clone(), config);
                follow(
                    &live,
                    &stores,
                    &watch,
                    initial_list,
                    stream,
                    &events,
                    &*observer,
                    &mut backoff,
                )
                .await
            }
            Some(api) => {
                let stream = watcher::watcher(api.clone(), config);
                follow(
                    &live,
                    &stores,
                    &watch,
                    initial_list,
                    stream,
                    &events,
                    &*observer,
                    &mut backoff,
                )
                .await
            }
        };
        match ended {
            Ended::ReceiverGone => return,
            Ended::StreamingRefused => {
                tracing::warn!(
                    kind = %watch.type_ref,
                    "the API server refuses streaming lists (is its WatchList feature off?); \
                     listing in pages instead"
                );
                initial_list = InitialList::Paged;
            }
            Ended::TooDeep => {
                tracing::warn!(
                    kind = %watch.type_ref,
                    "an object is nested too deep to decode with the others; decoding this \
                     kind's objects one by one from now on"
                );
                tolerant = Some(tolerant_api.clone());
            }
            Ended::Failed => {
                let delay = backoff.next_jittered();
                tracing::debug!(kind = %watch.type_ref, ?delay, "restarting the watch");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The back-off between attempts of one watch: from 0.5 s, doubling, at most
/// [`MAX_WATCH_BACKOFF`] (kube-runtime's default caps at 30 s too), so a watch is back
/// within half a minute of its API server.
fn watch_backoff() -> windlass_tasks::backoff::BackOffPolicy {
    let default = windlass_tasks::backoff::BackOffPolicy::default();
    windlass_tasks::backoff::BackOffPolicy::new(default.start(), default.base(), MAX_WATCH_BACKOFF)
        .and_then(|policy| policy.with_jitter(default.jitter()))
        .unwrap_or(default)
}

/// The longest pause between two attempts of a failing watch.
pub const MAX_WATCH_BACKOFF: std::time::Duration = std::time::Duration::from_secs(30);

/// How a watch lists what exists, at its start and after each failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialList {
    /// One watch with `sendInitialEvents=true`: the objects arrive as events, then a
    /// bookmark says the list is complete.
    Streaming,
    /// LIST in pages of 500, then a watch from the list's resourceVersion.
    Paged,
}

/// client-go's feature switch for streaming lists; `false` turns them off here too.
pub const WATCH_LIST_CLIENT_ENV: &str = "KUBE_FEATURE_WatchListClient";

impl InitialList {
    /// Streaming, unless `KUBE_FEATURE_WatchListClient` is `false`.
    pub fn from_env() -> Self {
        Self::from_switch(std::env::var(WATCH_LIST_CLIENT_ENV).ok().as_deref())
    }

    /// The switch is read as client-go reads it (Go's `strconv.ParseBool`): `0`, `f`, `F`,
    /// `false`, `False` and `FALSE` turn streaming off; anything else leaves it on.
    fn from_switch(value: Option<&str>) -> Self {
        match value {
            Some("0" | "f" | "F" | "false" | "False" | "FALSE") => InitialList::Paged,
            _ => InitialList::Streaming,
        }
    }

    /// The watcher settings for `watch` under this strategy.
    fn config(self, watch: &Watch) -> watcher::Config {
        let mut config = watcher::Config::default();
        if self == InitialList::Streaming {
            config = config.streaming_lists();
        }
        match (&watch.labels, &watch.shard) {
            (Some(labels), Some(shard)) => config = config.labels(&format!("{labels},{shard}")),
            (Some(labels), None) | (None, Some(labels)) => config = config.labels(labels),
            (None, None) => {}
        }
        config
    }
}

/// The query parameters of a streaming list that a server without it refuses: with
/// `WatchList` off, `sendInitialEvents` is forbidden; before Kubernetes 1.27 (and in
/// aggregated API servers built on older libraries) `resourceVersionMatch` is forbidden on a
/// watch.
const STREAMING_PARAMETERS: [&str; 2] = ["sendInitialEvents", "resourceVersionMatch"];

/// Whether `error` is the API server refusing a streaming list's parameters (400 or 422
/// naming one of [`STREAMING_PARAMETERS`], in its causes or its message), rather than a
/// failure worth a retry.
fn refuses_streaming(error: &watcher::Error) -> bool {
    let status = match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status,
        watcher::Error::WatchError(status) => status,
        _ => return false,
    };
    let names = |text: &str| STREAMING_PARAMETERS.iter().any(|p| text.contains(p));
    let in_causes = status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| names(&c.field)));
    matches!(status.code, 400 | 422) && (in_causes || names(&status.message))
}

/// Why [`follow`] returned.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The dispatcher is gone: stop.
    ReceiverGone,
    /// The API server refuses streaming lists: list in pages instead.
    StreamingRefused,
    /// The watch failed (or its stream ended): start a new one.
    Failed,
    /// An object is nested too deep to decode with the others: decode one by one.
    TooDeep,
}

/// Follow one watcher stream, listing with `initial_list`, until it fails or the receiver
/// of `events` is gone.
#[allow(clippy::too_many_arguments)] // one watch's whole context; a struct would only rename it
async fn follow<W: Watched>(
    live: &LiveCluster,
    stores: &Stores,
    watch: &Watch,
    initial_list: InitialList,
    stream: impl futures::Stream<Item = watcher::Result<Event<W>>>,
    events: &mpsc::Sender<SourceEvent>,
    observer: &dyn WatchObserver,
    backoff: &mut windlass_tasks::backoff::ExponentialBackOff,
) -> Ended {
    let mut stream = std::pin::pin!(stream);
    // What the list in progress has reported: at its end, what the store holds besides
    // went while the watch was down.
    let mut listed: HashSet<ObjectRef> = HashSet::new();
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(event) => event,
            Err(e) if initial_list == InitialList::Streaming && refuses_streaming(&e) => {
                return Ended::StreamingRefused;
            }
            Err(e) if too_deep(&e) => {
                observer.synced(watch, false);
                return Ended::TooDeep;
            }
            Err(e) => {
                tracing::warn!(kind = %watch.type_ref, error = %e, "watch failed; restarting it");
                observer.failed(watch, &e);
                observer.synced(watch, false);
                return Ended::Failed;
            }
        };
        let sent = match event {
            Event::Init => {
                listed.clear();
                observer.synced(watch, false);
                Vec::new()
            }
            Event::InitApply(object) => readable(watch, object)
                .and_then(|o| applied(live, stores, watch, o))
                .map(|mut event| {
                    listed.insert(event.reference.clone());
                    // A list reports what exists, added or not.
                    event.kind = EventKind::Added;
                    event.listed = true;
                    event
                })
                .into_iter()
                .collect(),
            Event::InitDone => {
                let changes = relisted(stores, watch, &std::mem::take(&mut listed));
                observer.synced(watch, true);
                backoff.reset();
                changes
            }
            Event::Apply(object) => readable(watch, object)
                .and_then(|o| applied(live, stores, watch, o))
                .into_iter()
                .collect(),
            Event::Delete(object) => readable(watch, object)
                .and_then(|o| deleted(live, stores, watch, o))
                .into_iter()
                .collect(),
        };
        for event in sent {
            if events.send(event).await.is_err() {
                return Ended::ReceiverGone;
            }
        }
    }
    // kube-runtime's watcher stream never ends; if it did, start a new one.
    Ended::Failed
}

/// The object of a watch event, or `None` (logged) when it could not be read: it is left
/// out of the store and of the events, and every other object goes on.
fn readable(watch: &Watch, object: impl Watched) -> Option<Value> {
    match object.into_value() {
        Ok(object) => Some(object),
        Err(invalid) => {
            tracing::warn!(
                kind = %watch.type_ref,
                namespace = invalid.metadata.namespace.as_deref().unwrap_or_default(),
                name = invalid.metadata.name.as_deref().unwrap_or_default(),
                error = %invalid.error,
                "an object the watch cannot read is left out; the others are reconciled"
            );
            None
        }
    }
}

/// A (re)list is complete: its objects, each stored and reported as it came, are `listed`.
/// Every object the store held of the watch that the list no longer has is dropped and
/// reported deleted: it went while the watch was down.
fn relisted(stores: &Stores, watch: &Watch, listed: &HashSet<ObjectRef>) -> Vec<SourceEvent> {
    let gone = stores.retain_listed(&watch.type_ref, watch.namespace.as_deref(), listed);
    gone.into_iter()
        .filter_map(|object| {
            Some(SourceEvent {
                kind: EventKind::Deleted,
                reference: ObjectRef::from_manifest(&object).ok()?,
                object,
                listed: true,
            })
        })
        .collect()
}

/// An object was created or changed: store it, and report it added or modified as the
/// store had it or not.
fn applied(
    live: &LiveCluster,
    stores: &Stores,
    watch: &Watch,
    object: Value,
) -> Option<SourceEvent> {
    let (reference, object) = entry(live, &watch.type_ref, object)?;
    let replaced = stores.upsert(reference.clone(), &object);
    Some(SourceEvent {
        kind: if replaced {
            EventKind::Modified
        } else {
            EventKind::Added
        },
        object,
        reference,
        listed: false,
    })
}

/// An object was deleted: drop it from the store and report it.
fn deleted(
    live: &LiveCluster,
    stores: &Stores,
    watch: &Watch,
    object: Value,
) -> Option<SourceEvent> {
    let (reference, object) = entry(live, &watch.type_ref, object)?;
    stores.remove(&reference);
    Some(SourceEvent {
        kind: EventKind::Deleted,
        object,
        reference,
        listed: false,
    })
}

/// The object as windlass keeps it: of its `managedFields` only windlass's own apply, and its
/// apiVersion and kind (items of a list carry none: they are the watch's).
fn entry(
    live: &LiveCluster,
    type_ref: &TypeRef,
    mut object: Value,
) -> Option<(ObjectRef, Arc<Value>)> {
    let Some(map) = object.as_object_mut() else {
        tracing::warn!(kind = %type_ref, "dropping a watched object that is not a JSON object");
        return None;
    };
    for (key, value) in [
        ("apiVersion", &type_ref.api_version),
        ("kind", &type_ref.kind),
    ] {
        if !map.get(key).is_some_and(Value::is_string) {
            map.insert(key.to_string(), Value::String(value.clone()));
        }
    }
    live.keep_own_managed_fields(&mut object);
    let reference = ObjectRef::from_manifest(&object).ok()?;
    Some((reference, Arc::new(object)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> Box<kube::core::Status> {
        Box::new(kube::core::Status {
            code,
            message: message.to_string(),
            ..Default::default()
        })
    }

    #[test]
    fn lists_stream_unless_client_gos_switch_says_false() {
        assert_eq!(InitialList::from_switch(None), InitialList::Streaming);
        assert_eq!(
            InitialList::from_switch(Some("true")),
            InitialList::Streaming
        );
        for off in ["0", "f", "F", "false", "False", "FALSE"] {
            assert_eq!(
                InitialList::from_switch(Some(off)),
                InitialList::Paged,
                "{off}"
            );
        }
        for on in ["1", "true", "fAlse", "no", ""] {
            assert_eq!(
                InitialList::from_switch(Some(on)),
                InitialList::Streaming,
                "{on}"
            );
        }
        let mut watch = Watch {
            type_ref: TypeRef::new("v1", "ConfigMap"),
            namespace: None,
            labels: Some("a=b".to_string()),
            shard: None,
        };
        let streaming = InitialList::Streaming.config(&watch);
        assert_eq!(
            streaming.initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
        assert_eq!(streaming.label_selector.as_deref(), Some("a=b"));
        assert_eq!(
            InitialList::Paged.config(&watch).initial_list_strategy,
            watcher::InitialListStrategy::ListWatch
        );
        // A shard's watch selects within the shard.
        watch.shard = Some("windlass.dev/shard=3".to_string());
        let sharded = InitialList::Paged.config(&watch);
        assert_eq!(
            sharded.label_selector.as_deref(),
            Some("a=b,windlass.dev/shard=3")
        );
        watch.labels = None;
        let sharded = InitialList::Paged.config(&watch);
        assert_eq!(
            sharded.label_selector.as_deref(),
            Some("windlass.dev/shard=3")
        );
    }

    #[test]
    fn only_a_refusal_of_send_initial_events_switches_to_paged_lists() {
        let refused = "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: \
                       sendInitialEvents is forbidden for watch unless the WatchList feature \
                       gate is enabled";
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(422, refused))
        )));
        assert!(refuses_streaming(&watcher::Error::WatchError(status(
            400, refused
        ))));
        // A server older than streaming lists refuses their resourceVersionMatch, and says
        // which field in the causes.
        let mut older = status(422, "ListOptions.meta.k8s.io \"\" is invalid");
        older.details = Some(kube::core::response::StatusDetails {
            causes: vec![kube::core::response::StatusCause {
                field: "resourceVersionMatch".into(),
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: resourceVersionMatch is forbidden for watch".into(),
            }],
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(
            kube::Error::Api(older)
        )));
        // Anything else is a failure to retry, streaming still.
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(403, "sendInitialEvents: forbidden by RBAC"))
        )));
        assert!(!refuses_streaming(&watcher::Error::WatchError(status(
            410,
            "too old resource version"
        ))));
        assert!(!refuses_streaming(&watcher::Error::NoResourceVersion));
    }
}

#[cfg(test)]
mod follow_tests {
    use parking_lot::Mutex;

    use super::*;

    /// Records what a watch reports about itself.
    #[derive(Default)]
    struct Reports(Mutex<Vec<String>>);

    impl WatchObserver for Reports {
        fn synced(&self, _: &Watch, synced: bool) {
            self.0.lock().push(format!("synced {synced}"));
        }
        fn failed(&self, _: &Watch, _: &watcher::Error) {
            self.0.lock().push("failed".into());
        }
    }

    fn refusal() -> watcher::Error {
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(kube::core::Status {
            code: 422,
            message: "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch \
                      unless the WatchList feature gate is enabled"
                .into(),
            ..Default::default()
        })))
    }

    /// Follow a stream that fails at once with `error`, listing with `initial_list`.
    async fn follow_failing(
        initial_list: InitialList,
        error: watcher::Error,
    ) -> (Ended, Vec<String>) {
        // A cluster that never gets a request: the stream is synthetic.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let live = LiveCluster::new(kube::Client::try_from(config).unwrap());
        let watch = Watch {
            type_ref: TypeRef::new("v1", "ConfigMap"),
            namespace: None,
            labels: None,
            shard: None,
        };
        let (events, _receiver) = mpsc::channel(1);
        let reports = Reports::default();
        let mut backoff = windlass_tasks::backoff::ExponentialBackOff::new(watch_backoff());
        let stream = futures::stream::iter([Err::<Event<Parsed>, _>(error)]);
        let ended = follow(
            &live,
            &Stores::new(),
            &watch,
            initial_list,
            stream,
            &events,
            &reports,
            &mut backoff,
        )
        .await;
        (ended, reports.0.into_inner())
    }

    #[tokio::test]
    async fn a_refused_streaming_list_switches_to_pages_without_counting_as_a_failure() {
        let (ended, reports) = follow_failing(InitialList::Streaming, refusal()).await;
        assert_eq!(ended, Ended::StreamingRefused);
        assert!(reports.is_empty(), "{reports:?}");
    }

    #[tokio::test]
    async fn the_same_error_on_a_paged_watch_is_a_failure_retried_with_back_off() {
        let (ended, reports) = follow_failing(InitialList::Paged, refusal()).await;
        assert_eq!(ended, Ended::Failed);
        assert_eq!(reports, ["failed", "synced false"]);
    }

    /// A ConfigMap `name` as the watch decodes it.
    fn parsed(name: &str) -> Parsed {
        serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
            "managedFields": [
                {"manager": "kubectl", "operation": "Update"},
                {"manager": crate::FIELD_MANAGER, "operation": "Update",
                    "subresource": "status"},
                {"manager": crate::FIELD_MANAGER, "operation": "Apply"},
            ]}}))
        .unwrap()
    }

    #[tokio::test]
    async fn a_list_is_stored_and_sent_object_by_object_and_a_relist_reports_what_went() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let live = LiveCluster::new(kube::Client::try_from(config).unwrap());
        let watch = Watch {
            type_ref: TypeRef::new("v1", "ConfigMap"),
            namespace: None,
            labels: None,
            shard: None,
        };
        let stores = Stores::new();
        let (events, mut received) = mpsc::channel(16);
        let reports = Reports::default();
        let mut backoff = windlass_tasks::backoff::ExponentialBackOff::new(watch_backoff());
        let stream = futures::stream::iter([
            Ok(Event::Init),
            Ok(Event::InitApply(parsed("a"))),
            Ok(Event::InitApply(parsed("b"))),
            Ok(Event::InitDone),
            Ok(Event::Init),
            Ok(Event::InitApply(parsed("b"))),
            Ok(Event::InitDone),
        ]);
        let ended = follow(
            &live,
            &stores,
            &watch,
            InitialList::Streaming,
            stream,
            &events,
            &reports,
            &mut backoff,
        )
        .await;
        assert_eq!(ended, Ended::Failed, "the stream ended");
        let mut seen = Vec::new();
        while let Ok(event) = received.try_recv() {
            seen.push((event.kind, event.reference.name.clone(), event.listed));
            // Of the managedFields, only windlass's own apply of the object is kept.
            if event.kind != EventKind::Deleted {
                assert_eq!(
                    event.object["metadata"]["managedFields"],
                    serde_json::json!([{"manager": crate::FIELD_MANAGER, "operation": "Apply"}])
                );
            }
        }
        let added = |name: &str| (EventKind::Added, name.to_string(), true);
        assert_eq!(
            seen,
            [
                added("a"),
                added("b"),
                added("b"),
                (EventKind::Deleted, "a".to_string(), true)
            ]
        );
        assert_eq!(
            reports.0.into_inner(),
            ["synced false", "synced true", "synced false", "synced true"]
        );
        assert_eq!(stores.sizes()[0].1, 1, "b only");
    }
}
