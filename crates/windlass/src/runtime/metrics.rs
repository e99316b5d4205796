//! What the runtime exports on `/metrics` (issue 8): one [`prometheus-client`] registry per
//! process, shared by every controller the process hosts, encoded in the OpenMetrics text
//! format.
//!
//! The runtime reports through a few methods ([`Metrics::reconcile_started`],
//! [`Metrics::reconcile_finished`], [`Metrics::queue_wait`], [`Metrics::set_queue`],
//! [`Metrics::watch_restarted`], [`Metrics::set_leader`]) instead of touching metric
//! objects, so the names, labels and buckets live in this file only and a dashboard can be
//! written against the table below. Requests to the API server are not counted twice: the
//! [`RequestCounter`] on the client's stack already tallies them by verb, resource and
//! code, and a collector reads its snapshot at scrape time.
//!
//! | series | type | labels |
//! |--------|------|--------|
//! | `windlass_reconciles_total` | counter | `controller`, `outcome` (`done`, `requeue`, `retry`) |
//! | `windlass_reconcile_errors_total` | counter | `controller` |
//! | `windlass_reconcile_duration_seconds` | histogram (1 ms – 60 s) | `controller` |
//! | `windlass_reconciles_in_flight` | gauge | `controller` |
//! | `windlass_queue_wait_seconds` | histogram (1 ms – 60 s) | `controller` |
//! | `windlass_queue_depth` | gauge: CRs due now, waiting for a free slot | `controller` |
//! | `windlass_queue_delayed` | gauge: CRs waiting for back-off or requeue-after | `controller` |
//! | `windlass_queue_running` | gauge: CRs being reconciled | `controller` |
//! | `windlass_watch_restarts_total` | counter | `api_version`, `kind` |
//! | `windlass_leader` | gauge: 1 while this replica leads | — |
//! | `windlass_api_requests_total` | counter | `verb`, `resource`, `code` (0: no response) |
//! | `windlass_cache_objects` | gauge: objects the watch caches hold | `api_version`, `kind` |
//! | `windlass_cache_bytes` | gauge: bytes of those objects' JSON texts | `api_version`, `kind` |
//!
//! A series with labels appears once something was reported for those labels; the leader
//! gauge is always there. Operator authors can add metrics of their own to the same
//! registry through [`Metrics::registry`].
//!
//! [`prometheus-client`]: prometheus_client

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use windlass_tasks::queue::QueueStats;

use crate::Action;
use crate::cluster::RequestCounter;
use crate::object::TypeRef;
use crate::runtime::cache::Stores;

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the duration histograms, in seconds: reconciles and queue waits take
/// from about a millisecond (everything cached, nothing to write) to tens of seconds (a
/// slow API server, a long verify), so the buckets cover 1 ms to 60 s, about three per
/// decade.
pub const DURATION_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    controller: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    api_version: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    resource: String,
    code: u16,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The process's metrics: one registry, and the methods the runtime reports through.
///
/// Cheap to share in an `Arc`: every method takes `&self` and only touches atomics (and a
/// family's lock the first time a label set is seen).
///
/// Tested by `a_finished_reconcile_is_counted_by_controller_and_outcome`.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    reconciles: Family<OutcomeLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    duration: HistogramFamily<ControllerLabels>,
    in_flight: Family<ControllerLabels, Gauge>,
    queue_wait: HistogramFamily<ControllerLabels>,
    queue_depth: Family<ControllerLabels, Gauge>,
    queue_delayed: Family<ControllerLabels, Gauge>,
    queue_running: Family<ControllerLabels, Gauge>,
    watch_restarts: Family<KindLabels, Counter>,
    leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics without API request counts (no [`RequestCounter`] to read them from).
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Metrics whose `windlass_api_requests_total` reads `requests` at every scrape: pass
    /// the counter whose layer is on the runtime's kube client.
    ///
    /// The series follows the counter: if someone [`take`](RequestCounter::take)s its
    /// counts, the series drops back, which Prometheus reads as a counter reset.
    pub fn with_requests(requests: RequestCounter) -> Self {
        Self::build(Some(requests))
    }

    /// Fresh metrics, registered; `requests`, if any, feeds `windlass_api_requests_total`.
    fn build(requests: Option<RequestCounter>) -> Self {
        let metrics = Metrics {
            registry: Mutex::new(Registry::with_prefix("windlass")),
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            in_flight: Family::default(),
            queue_wait: Family::new_with_constructor(duration_histogram),
            queue_depth: Family::default(),
            queue_delayed: Family::default(),
            queue_running: Family::default(),
            watch_restarts: Family::default(),
            leader: Gauge::default(),
        };
        metrics.register_series(requests);
        metrics
    }

    /// Register every series of the table in the module docs, in its order (the order
    /// `/metrics` lists them in), and the API request collector if there is a counter to
    /// read.
    fn register_series(&self, requests: Option<RequestCounter>) {
        let mut registry = self.registry();
        registry.register(
            "reconciles",
            "Reconciles that ended, by controller and what they asked for next",
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that ended in an error",
            self.errors.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "How long reconciles took",
            Unit::Seconds,
            self.duration.clone(),
        );
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now",
            self.in_flight.clone(),
        );
        registry.register_with_unit(
            "queue_wait",
            "How long a CR waited in the queue between being due and its reconcile starting",
            Unit::Seconds,
            self.queue_wait.clone(),
        );
        registry.register(
            "queue_depth",
            "CRs due now, waiting for a free reconcile slot",
            self.queue_depth.clone(),
        );
        registry.register(
            "queue_delayed",
            "CRs waiting for their back-off or requeue delay",
            self.queue_delayed.clone(),
        );
        registry.register(
            "queue_running",
            "CRs being reconciled",
            self.queue_running.clone(),
        );
        registry.register(
            "watch_restarts",
            "Watches that failed and were restarted, by kind",
            self.watch_restarts.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica is the leader (always 1 without leader election)",
            self.leader.clone(),
        );
        if let Some(requests) = requests {
            registry.register_collector(Box::new(ApiRequests(requests)));
        }
    }

    /// Export the size of the watch caches `stores` (`windlass_cache_objects`,
    /// `windlass_cache_bytes`), read at every scrape.
    pub(crate) fn watch_caches(&self, stores: std::sync::Arc<Stores>) {
        self.registry()
            .register_collector(Box::new(CacheSizes(stores)));
    }

    /// The registry, to register an operator's own metrics next to windlass's (they are
    /// prefixed `windlass_` too). Do not hold the guard across an `.await`: scrapes wait
    /// for it.
    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        // Registering cannot leave the registry half-changed: a poisoned lock is usable.
        self.registry.lock()
    }

    /// A reconcile of `controller`'s CR started.
    pub fn reconcile_started(&self, controller: &str) {
        self.in_flight
            .get_or_create(&controller_labels(controller))
            .inc();
    }

    /// A reconcile that [`reconcile_started`](Self::reconcile_started) ended after
    /// `duration`, asking for `outcome` next; `failed` if it ended in an error.
    pub fn reconcile_finished(
        &self,
        controller: &str,
        outcome: Action,
        duration: Duration,
        failed: bool,
    ) {
        let labels = controller_labels(controller);
        self.in_flight.get_or_create(&labels).dec();
        self.duration
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
        if failed {
            self.errors.get_or_create(&labels).inc();
        }
        self.reconciles
            .get_or_create(&OutcomeLabels {
                controller: labels.controller,
                outcome: outcome_label(outcome),
            })
            .inc();
    }

    /// A CR of `controller` waited `wait` between being due and its reconcile starting.
    pub fn queue_wait(&self, controller: &str, wait: Duration) {
        self.queue_wait
            .get_or_create(&controller_labels(controller))
            .observe(wait.as_secs_f64());
    }

    /// The state of `controller`'s queue now (call it after queue operations, or
    /// periodically).
    pub fn set_queue(&self, controller: &str, stats: QueueStats) {
        let labels = controller_labels(controller);
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.queue_depth
            .get_or_create(&labels)
            .set(gauge(stats.ready));
        self.queue_delayed
            .get_or_create(&labels)
            .set(gauge(stats.delayed));
        self.queue_running
            .get_or_create(&labels)
            .set(gauge(stats.running));
    }

    /// The watch of `kind` failed and is being restarted.
    pub fn watch_restarted(&self, kind: &TypeRef) {
        self.watch_restarts
            .get_or_create(&KindLabels {
                api_version: kind.api_version.clone(),
                kind: kind.kind.clone(),
            })
            .inc();
    }

    /// Whether this replica leads now.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Every metric in the OpenMetrics text format ([`CONTENT_TYPE`]), ending with
    /// `# EOF`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail, and the collector's encoding neither.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry()) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        text
    }
}

fn controller_labels(controller: &str) -> ControllerLabels {
    ControllerLabels {
        controller: controller.to_string(),
    }
}

fn outcome_label(outcome: Action) -> &'static str {
    match outcome {
        Action::Done => "done",
        Action::RequeueAfter(_) => "requeue",
        Action::Retry => "retry",
    }
}

/// `windlass_api_requests_total`, read from the client's [`RequestCounter`] at scrape time.
#[derive(Debug)]
struct ApiRequests(RequestCounter);

impl Collector for ApiRequests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.0.snapshot();
        if counts.total() == 0 {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "api_requests",
            "Requests to the API server, by verb, resource and HTTP status (0: no response)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (key, n) in counts.rows() {
            let labels = RequestLabels {
                verb: key.verb.as_str(),
                resource: key.resource.clone(),
                code: key.code,
            };
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// `windlass_cache_objects` and `windlass_cache_bytes`, read from the stores at scrape time.
#[derive(Debug)]
struct CacheSizes(std::sync::Arc<Stores>);

impl Collector for CacheSizes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sizes = self.0.sizes();
        let labels = |kind: &TypeRef| KindLabels {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
        };
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let mut family = encoder.encode_descriptor(
            "cache_objects",
            "Objects the watch caches hold, by kind",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (kind, objects, _) in &sizes {
            ConstGauge::new(gauge(*objects)).encode(family.encode_family(&labels(kind))?)?;
        }
        let mut family = encoder.encode_descriptor(
            "cache_bytes",
            "Bytes of the JSON texts of the objects the watch caches hold, by kind",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (kind, _, bytes) in &sizes {
            ConstGauge::new(gauge(*bytes)).encode(family.encode_family(&labels(kind))?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::Ready;
    use std::task::{Context, Poll};

    use http::{Request, Response};
    use tower_layer::Layer;
    use tower_service::Service;

    use super::*;

    /// The value of the sample `series` (name with labels, as encoded), if present.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.parse().ok()
        })
    }

    /// Answers every request with `status`.
    #[derive(Clone)]
    struct Answer(u16);

    impl Service<Request<()>> for Answer {
        type Response = Response<()>;
        type Error = std::convert::Infallible;
        type Future = Ready<Result<Response<()>, Self::Error>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: Request<()>) -> Self::Future {
            let mut response = Response::new(());
            *response.status_mut() = http::StatusCode::from_u16(self.0).unwrap();
            std::future::ready(Ok(response))
        }
    }

    async fn send(counter: &RequestCounter, status: u16, method: &str, uri: &str) {
        let mut service = counter.layer().layer(Answer(status));
        let request = Request::builder().method(method).uri(uri).body(()).unwrap();
        service.call(request).await.unwrap();
    }

    #[test]
    fn a_scrape_after_reconciles_shows_outcomes_errors_durations_and_in_flight() {
        let metrics = Metrics::new();
        let ms = Duration::from_millis;
        for _ in 0..3 {
            metrics.reconcile_started("webapp");
        }
        metrics.reconcile_finished("webapp", Action::Done, ms(3), false);
        metrics.reconcile_finished("webapp", Action::Retry, ms(2_000), true);
        metrics.reconcile_started("other");
        metrics.reconcile_finished("other", Action::RequeueAfter(ms(5)), ms(40), false);

        let text = metrics.encode();
        let at = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series}\n{text}"));
        assert_eq!(
            at(r#"windlass_reconciles_total{controller="webapp",outcome="done"}"#),
            1.0
        );
        assert_eq!(
            at(r#"windlass_reconciles_total{controller="webapp",outcome="retry"}"#),
            1.0
        );
        assert_eq!(
            at(r#"windlass_reconciles_total{controller="other",outcome="requeue"}"#),
            1.0
        );
        assert_eq!(
            at(r#"windlass_reconcile_errors_total{controller="webapp"}"#),
            1.0
        );
        assert_eq!(
            sample(
                &text,
                r#"windlass_reconcile_errors_total{controller="other"}"#
            ),
            None,
            "no error, no series"
        );
        // Three started, two finished.
        assert_eq!(
            at(r#"windlass_reconciles_in_flight{controller="webapp"}"#),
            1.0
        );
        assert_eq!(
            at(r#"windlass_reconciles_in_flight{controller="other"}"#),
            0.0
        );
        // 3 ms and 2 s: one under 5 ms, both under 2.5 s, none under 1 ms.
        let bucket = |le: &str| {
            at(&format!(
                r#"windlass_reconcile_duration_seconds_bucket{{le="{le}",controller="webapp"}}"#
            ))
        };
        assert_eq!(bucket("0.001"), 0.0);
        assert_eq!(bucket("0.005"), 1.0);
        assert_eq!(bucket("1.0"), 1.0);
        assert_eq!(bucket("2.5"), 2.0);
        assert_eq!(bucket("60.0"), 2.0);
        assert_eq!(bucket("+Inf"), 2.0);
        assert_eq!(
            at(r#"windlass_reconcile_duration_seconds_count{controller="webapp"}"#),
            2.0
        );
        assert!(
            (at(r#"windlass_reconcile_duration_seconds_sum{controller="webapp"}"#) - 2.003).abs()
                < 1e-9
        );
        assert!(text.contains("# TYPE windlass_reconcile_duration_seconds histogram"));
        assert!(text.contains("# UNIT windlass_reconcile_duration_seconds seconds"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_scrape_shows_the_queue_watch_restarts_and_leadership() {
        let metrics = Metrics::new();
        let text = metrics.encode();
        assert_eq!(sample(&text, "windlass_leader"), Some(0.0), "{text}");
        assert!(
            !text.contains("windlass_queue_depth"),
            "no queue yet: {text}"
        );

        metrics.set_leader(true);
        metrics.queue_wait("webapp", Duration::from_millis(20));
        metrics.queue_wait("webapp", Duration::from_secs(90));
        metrics.set_queue(
            "webapp",
            QueueStats {
                ready: 4,
                delayed: 2,
                running: 1,
                ..Default::default()
            },
        );
        let deployments = TypeRef::new("apps/v1", "Deployment");
        metrics.watch_restarted(&deployments);
        metrics.watch_restarted(&deployments);
        metrics.watch_restarted(&TypeRef::new("v1", "ConfigMap"));

        let text = metrics.encode();
        let at = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series}\n{text}"));
        assert_eq!(at("windlass_leader"), 1.0);
        assert_eq!(at(r#"windlass_queue_depth{controller="webapp"}"#), 4.0);
        assert_eq!(at(r#"windlass_queue_delayed{controller="webapp"}"#), 2.0);
        assert_eq!(at(r#"windlass_queue_running{controller="webapp"}"#), 1.0);
        assert_eq!(
            at(r#"windlass_queue_wait_seconds_bucket{le="0.025",controller="webapp"}"#),
            1.0
        );
        // 90 s is past the last bucket: only +Inf counts it.
        assert_eq!(
            at(r#"windlass_queue_wait_seconds_bucket{le="60.0",controller="webapp"}"#),
            1.0
        );
        assert_eq!(
            at(r#"windlass_queue_wait_seconds_bucket{le="+Inf",controller="webapp"}"#),
            2.0
        );
        assert_eq!(
            at(r#"windlass_watch_restarts_total{api_version="apps/v1",kind="Deployment"}"#),
            2.0
        );
        assert_eq!(
            at(r#"windlass_watch_restarts_total{api_version="v1",kind="ConfigMap"}"#),
            1.0
        );

        // The gauges follow the latest state.
        metrics.set_leader(false);
        metrics.set_queue("webapp", QueueStats::default());
        let text = metrics.encode();
        assert_eq!(sample(&text, "windlass_leader"), Some(0.0));
        assert_eq!(
            sample(&text, r#"windlass_queue_depth{controller="webapp"}"#),
            Some(0.0)
        );
    }

    #[tokio::test]
    async fn api_requests_come_from_the_request_counter_at_scrape_time() {
        let counter = RequestCounter::new();
        let metrics = Metrics::with_requests(counter.clone());
        assert!(
            !metrics.encode().contains("windlass_api_requests"),
            "nothing counted, no series"
        );
        send(&counter, 200, "GET", "/api/v1/namespaces/ns/configmaps/a").await;
        send(&counter, 200, "GET", "/api/v1/namespaces/ns/configmaps/b").await;
        send(&counter, 404, "GET", "/api/v1/namespaces/ns/configmaps/c").await;
        let text = metrics.encode();
        let series = r#"windlass_api_requests_total{verb="get",resource="configmaps",code="200"}"#;
        assert_eq!(sample(&text, series), Some(2.0), "{text}");
        assert_eq!(
            sample(
                &text,
                r#"windlass_api_requests_total{verb="get",resource="configmaps",code="404"}"#
            ),
            Some(1.0)
        );
        assert!(
            text.contains("# TYPE windlass_api_requests counter"),
            "{text}"
        );

        // A request counted after the first scrape shows in the next one.
        send(
            &counter,
            201,
            "POST",
            "/apis/apps/v1/namespaces/ns/deployments",
        )
        .await;
        let text = metrics.encode();
        assert_eq!(
            sample(
                &text,
                r#"windlass_api_requests_total{verb="create",resource="deployments",code="201"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(sample(&text, series), Some(2.0));
    }

    #[test]
    fn operators_can_add_their_own_metrics_to_the_registry() {
        let metrics = Metrics::new();
        let mine: Counter = Counter::default();
        metrics
            .registry()
            .register("webapp_widgets", "Widgets made", mine.clone());
        mine.inc_by(7);
        assert_eq!(
            sample(&metrics.encode(), "windlass_webapp_widgets_total"),
            Some(7.0)
        );
    }

    #[test]
    fn the_watch_caches_are_exported_by_kind() {
        let metrics = Metrics::new();
        let stores = std::sync::Arc::new(Stores::new());
        metrics.watch_caches(stores.clone());
        let object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}});
        let reference = crate::object::ObjectRef::from_manifest(&object).unwrap();
        stores.upsert(reference, &object);
        let text = metrics.encode();
        let labels = r#"{api_version="v1",kind="ConfigMap"}"#;
        assert_eq!(
            sample(&text, &format!("windlass_cache_objects{labels}")),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, &format!("windlass_cache_bytes{labels}")),
            Some(object.to_string().len() as f64)
        );
    }

    #[test]
    fn a_finished_reconcile_is_counted_by_controller_and_outcome() {
        use crate::Action;
        use std::time::Duration;

        let metrics = Metrics::new();
        metrics.reconcile_started("webapp");
        metrics.reconcile_finished("webapp", Action::Done, Duration::from_millis(12), false);
        let text = metrics.encode();
        assert!(
            text.contains(r#"windlass_reconciles_total{controller="webapp",outcome="done"} 1"#)
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
