//! The operator's HTTP endpoints: `/metrics`, `/healthz` and `/readyz` (issue 8), on axum.
//!
//! Kubernetes asks two different questions and they get different answers here:
//!
//! - **Liveness** (`/healthz`): is the process alive? Answered 200 by the server itself.
//!   It deliberately checks nothing else: a watch that cannot reach the API server, or a
//!   standby replica, must not get the Pod restarted; the runtime retries those on its
//!   own, and a restart would only lose the caches.
//! - **Readiness** (`/readyz`): is this replica doing its job? 200 only once every declared
//!   watch has synced (listed its kind into the cache; a watch that lost its stream and
//!   relists is not synced until the relist is done) and, where leader election is on,
//!   once this replica knows whether it leads (a standby that knows it is a standby is
//!   ready: it is what the rollout of a Deployment waits for), and the API server says it
//!   is ready itself. Otherwise 503, with a short text body saying what is missing, so
//!   `kubectl describe pod` tells why.
//!
//! Why ask the API server: with etcd gone, kube-apiserver keeps the watches open (its
//! watch cache simply stops sending), so every watch still looks synced while no write
//! can succeed. The API server's own `/readyz` checks etcd. It is asked only when
//! `/readyz` is (so an operator nobody probes sends nothing), at most once per
//! [`API_PROBE_TTL`] however many probers ask, and an answer slower than
//! [`API_PROBE_TIMEOUT`] counts as not ready.
//!
//! [`Health`] is the state the runtime sets; [`serve`] answers from it and from
//! [`Metrics`].

use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::time::{Duration, Instant};

use super::metrics::{CONTENT_TYPE, Metrics};
use super::source::Watch;

/// What readiness waits for; see the [module docs](self). Cheap to share in an `Arc`.
///
/// Tested by `a_standby_is_ready_once_its_watches_synced`.
#[derive(Debug, Default)]
pub struct Health {
    state: Mutex<Readiness>,
    api: std::sync::OnceLock<ApiProbe>,
}

/// How long one answer of the API server's `/readyz` is reused.
pub const API_PROBE_TTL: Duration = Duration::from_secs(2);

/// How long the API server's `/readyz` may take before it counts as not ready.
pub const API_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The API server's readiness, asked through the operator's own client (see the
/// [module docs](self)).
struct ApiProbe {
    client: kube::Client,
    /// The last answer (`Some`: what is wrong) and when it came. A lock held across the
    /// request, so concurrent probers share one.
    last: tokio::sync::Mutex<Option<(Instant, Option<String>)>>,
}

impl std::fmt::Debug for ApiProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiProbe").finish_non_exhaustive()
    }
}

impl ApiProbe {
    /// What is wrong with the API server, if anything.
    async fn problem(&self) -> Option<String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = &*last
            && at.elapsed() < API_PROBE_TTL
        {
            return answer.clone();
        }
        let request = http::Request::get("/readyz").body(Vec::new());
        let answer = match request {
            Err(e) => Some(format!("API server: cannot build the request: {e}")),
            Ok(request) => {
                match tokio::time::timeout(API_PROBE_TIMEOUT, self.client.request_text(request))
                    .await
                {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(format!("API server not ready: {}", first_line(&e))),
                    Err(_) => Some(format!(
                        "API server not ready: no answer within {API_PROBE_TIMEOUT:?}"
                    )),
                }
            }
        };
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}

/// The first line of an error: the API server's readiness report is one line per check.
fn first_line(error: &kube::Error) -> String {
    let text = error.to_string();
    text.lines().next().unwrap_or_default().to_string()
}

#[derive(Debug, Default)]
struct Readiness {
    /// Declared watches, by description: whether their cache is synced.
    watches: BTreeMap<String, bool>,
    leadership: Leadership,
    shutting_down: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Leadership {
    /// No leader election: nothing to wait for.
    #[default]
    NotRequired,
    /// Election is on, no answer yet.
    Unknown,
    /// Election is on, and this replica leads (`true`) or stands by.
    Known(bool),
}

impl Health {
    /// Nothing declared: ready until watches or leadership are required. Declare the
    /// watches before [`serve`] answers, or `/readyz` is briefly ready with nothing synced.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, Readiness> {
        // Every change is one assignment: a poisoned lock holds a consistent state.
        self.state.lock()
    }

    /// Readiness waits for `watch` to sync. Declaring it again keeps what it reported.
    pub(crate) fn declare_watch(&self, watch: &Watch) {
        self.state().watches.entry(describe(watch)).or_insert(false);
    }

    /// Readiness no longer waits for `watch`: it was stopped for good.
    pub(crate) fn retire_watch(&self, watch: &Watch) {
        self.state().watches.remove(&describe(watch));
    }

    /// Whether `watch`'s cache is synced: `true` once its list is in the store, `false`
    /// again while it relists after losing its stream. Declares the watch if needed.
    pub(crate) fn set_synced(&self, watch: &Watch, synced: bool) {
        self.state().watches.insert(describe(watch), synced);
    }

    /// Leader election is on: readiness waits until [`set_leader`](Self::set_leader)
    /// says whether this replica leads.
    pub fn require_leadership(&self) {
        let mut state = self.state();
        if state.leadership == Leadership::NotRequired {
            state.leadership = Leadership::Unknown;
        }
    }

    /// This replica now knows that it leads (`true`) or stands by (`false`). Call it once
    /// the first election attempt has ended either way, and on every change. Implies
    /// [`require_leadership`](Self::require_leadership).
    pub fn set_leader(&self, leader: bool) {
        self.state().leadership = Leadership::Known(leader);
    }

    /// Readiness also asks the API server behind `client` whether it is ready (see the
    /// [module docs](self)). Set once; later calls are ignored.
    pub fn probe_api(&self, client: kube::Client) {
        let _ = self.api.set(ApiProbe {
            client,
            last: tokio::sync::Mutex::new(None),
        });
    }

    /// [`readiness`](Self::readiness), and the API server's own where
    /// [`probe_api`](Self::probe_api) set it up.
    pub async fn readiness_with_api(&self) -> Result<(), Vec<String>> {
        let mut missing = self.readiness().err().unwrap_or_default();
        if let Some(probe) = self.api.get()
            && let Some(problem) = probe.problem().await
        {
            missing.push(problem);
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing)
        }
    }

    /// The process is stopping: not ready any more, so no new traffic or rollout step
    /// counts on this replica.
    pub fn set_shutting_down(&self) {
        self.state().shutting_down = true;
    }

    /// Whether this replica is ready; if not, what is missing, one item per entry (the
    /// body of a 503 from `/readyz`).
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let state = self.state();
        let mut missing = Vec::new();
        if state.shutting_down {
            missing.push("shutting down".to_string());
        }
        missing.extend(
            state
                .watches
                .iter()
                .filter(|(_, synced)| !**synced)
                .map(|(watch, _)| format!("watch not synced: {watch}")),
        );
        if state.leadership == Leadership::Unknown {
            missing.push("leader election: no answer yet".to_string());
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing)
        }
    }
}

/// `apps/v1/Deployment in all namespaces (labels app=x)`.
fn describe(watch: &Watch) -> String {
    let mut text = format!("{} in ", watch.type_ref);
    match &watch.namespace {
        Some(namespace) => text.push_str(&format!("namespace {namespace}")),
        None => text.push_str("all namespaces"),
    }
    if let Some(labels) = &watch.labels {
        text.push_str(&format!(" (labels {labels})"));
    }
    text
}

/// What one server answers: both kinds of endpoints on one port, or one kind each on two
/// (`server.health-probe-bind-address`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// `/metrics`, `/healthz` and `/readyz`.
    Everything,
    /// `/metrics` only.
    Metrics,
    /// `/healthz` and `/readyz` only.
    Probes,
}

impl Serves {
    fn paths(self) -> &'static str {
        match self {
            Serves::Everything => "/metrics, /healthz and /readyz",
            Serves::Metrics => "/metrics",
            Serves::Probes => "/healthz and /readyz",
        }
    }
}

/// Serve what `serves` says on `addr` until `shutdown` completes; `bound` is told the
/// address bound (the port the system picked for port 0) before the first request.
///
/// # Errors
/// The address cannot be bound (in use, not permitted), or the server failed.
pub async fn serve(
    addr: SocketAddr,
    serves: Serves,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
    bound: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    bound(listener.local_addr()?);
    serve_listener(listener, serves, endpoints, shutdown).await
}

/// [`serve`] on a listener bound already, e.g. to port 0 to learn the port it got.
///
/// # Errors
/// The server failed.
pub async fn serve_listener(
    listener: TcpListener,
    serves: Serves,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, secure = endpoints.authorizer.is_some(), "serving {}", serves.paths());
    }
    if endpoints.authorizer.is_some() {
        return serve_secure(listener, serves, endpoints, shutdown).await;
    }
    axum::serve(listener, router(serves, endpoints))
        .with_graceful_shutdown(shutdown)
        .await
}

/// [`serve_listener`] over HTTPS with a self-signed certificate, `/metrics` and the debug
/// endpoints behind the [`Authorizer`](super::secure::Authorizer).
async fn serve_secure(
    listener: TcpListener,
    serves: Serves,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let other = |e: crate::Error| std::io::Error::other(e.to_string());
    let hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let material = crate::webhook::certificate::self_signed(&hosts).map_err(other)?;
    let certificate =
        Arc::new(crate::webhook::server::CurrentCertificate::new(&material).map_err(other)?);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    crate::webhook::server::serve(listener, certificate, router(serves, endpoints), stopped).await;
    Ok(())
}

/// What the server answers from.
#[derive(Clone)]
pub struct Endpoints {
    /// `/metrics`.
    pub metrics: Arc<Metrics>,
    /// `/healthz` and `/readyz`.
    pub health: Arc<Health>,
    /// `/debug/windlass/…`, when on (see `runtime::debug`).
    pub(crate) debug: Option<Arc<super::debug::Debug>>,
    /// With `server.secure-metrics`: who may read `/metrics` and the debug endpoints.
    pub(crate) authorizer: Option<Arc<super::secure::Authorizer>>,
}

impl Endpoints {
    /// Metrics and health, no debug endpoint.
    #[cfg(test)]
    pub fn new(metrics: Arc<Metrics>, health: Arc<Health>) -> Self {
        Endpoints {
            metrics,
            health,
            debug: None,
            authorizer: None,
        }
    }
}

fn router(serves: Serves, endpoints: Endpoints) -> Router {
    let mut router = Router::new();
    if serves != Serves::Probes {
        router = router.route("/metrics", get(scrape));
        if endpoints.debug.is_some() {
            router = router.route("/debug/windlass/{kind}/{namespace}/{name}", get(debug_view));
        }
        if let Some(authorizer) = &endpoints.authorizer {
            // Only the routes added so far: the probes stay open to the kubelet.
            router = router.route_layer(axum::middleware::from_fn_with_state(
                authorizer.clone(),
                super::secure::authorize,
            ));
        }
    }
    if serves != Serves::Metrics {
        router = router
            .route("/healthz", get(alive))
            .route("/readyz", get(ready));
    }
    router.with_state(endpoints)
}

async fn debug_view(
    extract::State(endpoints): extract::State<Endpoints>,
    extract::Path((kind, namespace, name)): extract::Path<(String, String, String)>,
) -> Response {
    let namespace = (namespace != "-").then_some(namespace.as_str());
    match endpoints
        .debug
        .as_ref()
        .and_then(|debug| debug.view(&kind, namespace, &name))
    {
        Some(view) => (
            [(header::CONTENT_TYPE, "application/json")],
            view.to_string(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, TEXT)],
            format!("no controller of {kind} here\n"),
        )
            .into_response(),
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

async fn scrape(extract::State(endpoints): extract::State<Endpoints>) -> Response {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        endpoints.metrics.encode(),
    )
        .into_response()
}

async fn alive() -> Response {
    ([(header::CONTENT_TYPE, TEXT)], "ok\n").into_response()
}

async fn ready(extract::State(endpoints): extract::State<Endpoints>) -> Response {
    match endpoints.health.readiness_with_api().await {
        Ok(()) => ([(header::CONTENT_TYPE, TEXT)], "ok\n".to_string()).into_response(),
        Err(missing) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, TEXT)],
            format!("not ready:\n{}\n", missing.join("\n")),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;

    use super::*;
    use crate::Action;
    use crate::object::TypeRef;

    fn watch(kind: &str, namespace: Option<&str>) -> Watch {
        Watch {
            type_ref: TypeRef::new("v1", kind),
            namespace: namespace.map(str::to_string),
            labels: None,
            shard: None,
        }
    }

    /// `GET path` over a fresh connection: (status code, content type, body).
    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
        let content_type = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-type")
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_default();
        (code, content_type, body.to_string())
    }

    struct Server {
        addr: SocketAddr,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<std::io::Result<()>>,
    }

    async fn start(metrics: Arc<Metrics>, health: Arc<Health>) -> Server {
        start_serving(Serves::Everything, metrics, health).await
    }

    async fn start_serving(serves: Serves, metrics: Arc<Metrics>, health: Arc<Health>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_listener(
            listener,
            serves,
            Endpoints::new(metrics, health),
            async move {
                let _ = stopped.await;
            },
        ));
        Server { addr, stop, task }
    }

    #[tokio::test]
    async fn a_probe_server_answers_only_the_probes_and_a_metrics_server_only_metrics() {
        let (metrics, health) = (Arc::new(Metrics::new()), Arc::new(Health::new()));
        let probes = start_serving(Serves::Probes, metrics.clone(), health.clone()).await;
        let scrapes = start_serving(Serves::Metrics, metrics, health).await;
        assert_eq!(get(probes.addr, "/healthz").await.0, 200);
        assert_eq!(get(probes.addr, "/readyz").await.0, 200);
        assert_eq!(get(probes.addr, "/metrics").await.0, 404);
        assert_eq!(get(scrapes.addr, "/metrics").await.0, 200);
        assert_eq!(get(scrapes.addr, "/healthz").await.0, 404);
        for server in [probes, scrapes] {
            let _ = server.stop.send(());
            server.task.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn healthz_is_ok_while_readyz_waits_for_every_watch_and_leadership() {
        let health = Arc::new(Health::new());
        let (pods, maps) = (watch("Pod", Some("shop")), watch("ConfigMap", None));
        health.declare_watch(&pods);
        health.declare_watch(&maps);
        health.require_leadership();
        let server = start(Arc::new(Metrics::new()), health.clone()).await;

        let (code, _, body) = get(server.addr, "/healthz").await;
        assert_eq!((code, body.as_str()), (200, "ok\n"));
        let (code, content_type, body) = get(server.addr, "/readyz").await;
        assert_eq!(code, 503);
        assert!(content_type.starts_with("text/plain"), "{content_type}");
        assert_eq!(
            body,
            "not ready:\n\
             watch not synced: v1/ConfigMap in all namespaces\n\
             watch not synced: v1/Pod in namespace shop\n\
             leader election: no answer yet\n"
        );

        health.set_synced(&pods, true);
        let (code, _, body) = get(server.addr, "/readyz").await;
        assert_eq!(code, 503);
        assert!(!body.contains("Pod"), "{body}");
        assert!(body.contains("v1/ConfigMap"), "{body}");

        health.set_synced(&maps, true);
        let (code, _, body) = get(server.addr, "/readyz").await;
        assert_eq!(code, 503);
        assert_eq!(body, "not ready:\nleader election: no answer yet\n");

        // A standby is ready: it knows where it stands.
        health.set_leader(false);
        assert_eq!(get(server.addr, "/readyz").await.0, 200);

        // An outage: the watch relists, readiness drops until it is done; liveness stays.
        health.set_synced(&maps, false);
        let (code, _, body) = get(server.addr, "/readyz").await;
        assert_eq!(code, 503);
        assert!(body.contains("v1/ConfigMap in all namespaces"), "{body}");
        assert_eq!(get(server.addr, "/healthz").await.0, 200);
        health.set_synced(&maps, true);
        let (code, _, body) = get(server.addr, "/readyz").await;
        assert_eq!((code, body.as_str()), (200, "ok\n"));

        health.set_shutting_down();
        let (code, _, body) = get(server.addr, "/readyz").await;
        assert_eq!((code, body.as_str()), (503, "not ready:\nshutting down\n"));

        server.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server.task)
            .await
            .expect("the server stops when told to")
            .unwrap()
            .unwrap();
        assert!(
            TcpStream::connect(server.addr).await.is_err(),
            "nothing listens after shutdown"
        );
    }

    #[tokio::test]
    async fn without_election_readiness_needs_only_the_watches() {
        let health = Health::new();
        let pods = watch("Pod", None);
        health.declare_watch(&pods);
        assert_eq!(
            health.readiness(),
            Err(vec![
                "watch not synced: v1/Pod in all namespaces".to_string()
            ])
        );
        health.set_synced(&pods, true);
        // Declaring again does not forget that it synced.
        health.declare_watch(&pods);
        assert_eq!(health.readiness(), Ok(()));
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_openmetrics_format() {
        let metrics = Arc::new(Metrics::new());
        metrics.reconcile_started("webapp");
        metrics.reconcile_finished("webapp", Action::Done, Duration::from_millis(5), false);
        let server = start(metrics, Arc::new(Health::new())).await;
        let (code, content_type, body) = get(server.addr, "/metrics").await;
        assert_eq!(code, 200);
        assert_eq!(content_type, CONTENT_TYPE);
        assert!(
            body.contains(r#"windlass_reconciles_total{controller="webapp",outcome="done"} 1"#),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"), "{body}");
        assert_eq!(get(server.addr, "/nope").await.0, 404);
    }

    #[tokio::test]
    async fn serve_reports_an_address_in_use() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = serve(
            taken.local_addr().unwrap(),
            Serves::Everything,
            Endpoints::new(Arc::new(Metrics::new()), Arc::new(Health::new())),
            std::future::pending(),
            |_| panic!("nothing is bound"),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    }

    /// A stand-in for kube-apiserver's `/readyz`: answers `status`, counts the requests.
    async fn fake_api(
        status: Arc<std::sync::atomic::AtomicU16>,
        hits: Arc<std::sync::atomic::AtomicUsize>,
    ) -> kube::Client {
        use std::sync::atomic::Ordering;
        let app = Router::new().route(
            "/readyz",
            axum::routing::get(move || {
                let (status, hits) = (status.clone(), hits.clone());
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let code = StatusCode::from_u16(status.load(Ordering::SeqCst)).unwrap();
                    (code, "[-]etcd failed: reason withheld\n")
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn readiness_asks_the_api_server_once_for_concurrent_probers() {
        use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
        let status = Arc::new(AtomicU16::new(500));
        let hits = Arc::new(AtomicUsize::new(0));
        let health = Health::new();
        assert_eq!(health.readiness_with_api().await, Ok(()), "no probe set up");
        health.probe_api(fake_api(status.clone(), hits.clone()).await);

        let (a, b) = tokio::join!(health.readiness_with_api(), health.readiness_with_api());
        for answer in [a, b] {
            let missing = answer.unwrap_err();
            assert_eq!(missing.len(), 1, "{missing:?}");
            assert!(
                missing[0].starts_with("API server not ready"),
                "{missing:?}"
            );
        }
        assert_eq!(hits.load(Ordering::SeqCst), 1, "one request for both");
        assert!(health.readiness().is_ok(), "the local part alone is ready");

        // The API server recovers: ready again once the last answer is old enough (its TTL;
        // the deadline leaves a loaded machine room).
        status.store(200, Ordering::SeqCst);
        let deadline = Instant::now() + API_PROBE_TTL + Duration::from_secs(30);
        while health.readiness_with_api().await.is_err() {
            assert!(Instant::now() < deadline, "still not ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(hits.load(Ordering::SeqCst) >= 2);
    }

    #[test]
    fn a_standby_is_ready_once_its_watches_synced() {
        use crate::object::TypeRef;

        let health = Health::new();
        let widgets = Watch {
            type_ref: TypeRef::new("example.com/v1", "Widget"),
            namespace: None,
            labels: None,
            shard: None,
        };
        health.declare_watch(&widgets);
        health.require_leadership();
        assert!(health.readiness().is_err());
        health.set_synced(&widgets, true);
        health.set_leader(false); // a standby that knows it is one is ready
        assert!(health.readiness().is_ok());
    }
}
