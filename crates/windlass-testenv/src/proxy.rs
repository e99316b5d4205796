//! A fault-injecting proxy between an operator and the real API server, on loopback.
//!
//! The operator's client speaks plain HTTP to the proxy; the proxy forwards each request
//! to the API server with the test's admin client (which adds the credentials and TLS, and
//! retries nothing), and streams the answer back, watches included. Before forwarding, the
//! first [`Rule`] that matches a request may answer in the server's place instead: a status
//! (500, or 429 with `Retry-After`), a stall that never answers, a watch that ends at once,
//! or a watch refused with 410 Gone; or it may forward the request and keep the answer
//! from the client ([`Fault::Swallow`]), the moment an operator killed right after its
//! request landed would be in. Every request is logged with when it came, what was
//! injected and the code it was answered with, so a test can check what the client did
//! about it (a client that retries a 429 or a 503 by itself shows here as two requests).
//!
//! Written for tests: a failure to bind or to build a response panics, with the reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What the proxy answers instead of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// This status, with `Retry-After: <seconds>` when given.
    Status(u16, Option<u64>),
    /// No answer until [`Proxy::heal`]; then 410 Gone (a watch resumed from where it
    /// stopped would be told its resourceVersion is too old, so it must list again).
    StallThenGone,
    /// No answer at all, ever.
    Stall,
    /// For a watch: 200 and an empty body, as a dropped connection ends it.
    EndWatch,
    /// For a watch: 410 Gone, as for a resourceVersion too old.
    Gone,
    /// Forward the request, and never pass the answer on: the server did what was asked,
    /// the client never hears of it. [`Proxy::swallowed`] lists these once the server
    /// answered them.
    Swallow,
}

/// Which requests a fault applies to, and how many more times.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The HTTP method, e.g. `PATCH`; `None`: any.
    pub method: Option<&'static str>,
    /// Whether the request is a watch; `None`: either.
    pub watch: Option<bool>,
    /// A part of the path, e.g. `/configmaps`.
    pub path: String,
    /// What to do instead of forwarding (or besides, for [`Fault::Swallow`]).
    pub fault: Fault,
    /// How many requests it still applies to.
    pub times: usize,
}

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When it came.
    pub at: Instant,
    /// Its HTTP method.
    pub method: String,
    /// Its path, without the query.
    pub path: String,
    /// Its query (`labelSelector=…&watch=true`), empty if none.
    pub query: String,
    /// Whether it was a watch.
    pub watch: bool,
    /// The connection it came on, numbered from 0 in the order the proxy accepted them: a
    /// request a killed client had sent before it died comes on one of its own connections,
    /// however late the proxy reads it (see [`Proxy::connections`]).
    pub connection: u64,
    /// The fault injected instead of (or, for a swallow, after) forwarding it.
    pub injected: Option<Fault>,
    /// The status code of the answer, whoever gave it (the server, or a rule in its
    /// place); for a watch, the code it opened with. `None` while none came, and for a
    /// stall. A swallowed request has the server's code although the client never saw it.
    pub code: Option<u16>,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    /// Swallowed requests the server answered: method, path, status code.
    swallowed: Vec<(String, String, u16)>,
}

/// The proxy: its address, its rules and its log.
#[derive(Clone)]
pub struct Proxy {
    /// Where it listens (plain HTTP, loopback).
    pub address: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Bumped by [`Proxy::sever`]: every watch forwarded before ends.
    severed: Arc<tokio::sync::watch::Sender<u64>>,
    /// Bumped by [`Proxy::heal`]: stalled requests go on.
    healed: Arc<tokio::sync::watch::Sender<u64>>,
    /// How many connections it has accepted.
    accepted: Arc<std::sync::atomic::AtomicU64>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Answer = http::Response<UnsyncBoxBody<Bytes, BoxError>>;

/// A body of `bytes`.
fn full(bytes: impl Into<Bytes>) -> UnsyncBoxBody<Bytes, BoxError> {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

impl Proxy {
    /// A proxy to the API server `upstream` reaches, serving until the test ends.
    pub async fn start(upstream: kube::Client) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            address: listener.local_addr().unwrap(),
            state: Arc::default(),
            severed: Arc::new(tokio::sync::watch::channel(0).0),
            healed: Arc::new(tokio::sync::watch::channel(0).0),
            accepted: Arc::default(),
        };
        let serving = proxy.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let connection = serving
                    .accepted
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let proxy = serving.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let proxy = proxy.clone();
                        let upstream = upstream.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                proxy.answer(&upstream, request, connection).await,
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        proxy
    }

    /// A client configuration that reaches the API server through this proxy.
    pub fn config(&self) -> kube::Config {
        kube::Config::new(format!("http://{}", self.address).parse().unwrap())
    }

    /// Apply `rule` to the next matching requests.
    pub fn inject(&self, rule: Rule) {
        self.state.lock().unwrap().rules.push(rule);
    }

    /// How many connections the proxy has accepted so far: the requests of a client started
    /// after this call come on connections numbered this or higher ([`Seen::connection`]).
    pub fn connections(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Forget every rule, and let stalled requests go on.
    pub fn heal(&self) {
        self.state.lock().unwrap().rules.clear();
        self.healed.send_modify(|n| *n += 1);
    }

    /// End every watch open now, as a dropped connection would.
    pub fn sever(&self) {
        self.severed.send_modify(|n| *n += 1);
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The swallowed requests the server has answered (method, path, status code).
    pub fn swallowed(&self) -> Vec<(String, String, u16)> {
        self.state.lock().unwrap().swallowed.clone()
    }

    /// A kubeconfig file in `dir` whose only cluster is this proxy (no credentials: the
    /// proxy adds the test's own), for an operator run as a separate process.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join(format!("proxy-{}.kubeconfig", self.address.port()));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: nobody\n\
             current-context: proxy\nusers:\n- name: nobody\n  user: {{}}\n",
            self.address
        );
        std::fs::write(&path, text).expect("the proxy's kubeconfig is written");
        path
    }

    /// The fault for `request`, if a rule matches it (and is used up by it), and where it
    /// is logged (for [`answered`](Self::answered)).
    fn fault_for(
        &self,
        method: &str,
        path: &str,
        query: &str,
        watch: bool,
        connection: u64,
    ) -> (Option<Fault>, usize) {
        let mut state = self.state.lock().unwrap();
        let fault = state
            .rules
            .iter_mut()
            .find(|r| {
                r.times > 0
                    && r.method.is_none_or(|m| m == method)
                    && r.watch.is_none_or(|w| w == watch)
                    && path.contains(r.path.as_str())
            })
            .map(|r| {
                r.times -= 1;
                r.fault
            });
        state.seen.push(Seen {
            at: Instant::now(),
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            watch,
            connection,
            injected: fault,
            code: None,
        });
        (fault, state.seen.len() - 1)
    }

    /// Log the code `answer` carries on the request logged at `index`.
    fn answered(&self, index: usize, answer: Answer) -> Answer {
        if let Some(seen) = self.state.lock().unwrap().seen.get_mut(index) {
            seen.code = Some(answer.status().as_u16());
        }
        answer
    }

    async fn answer(
        &self,
        upstream: &kube::Client,
        request: http::Request<Incoming>,
        connection: u64,
    ) -> Answer {
        let method = request.method().to_string();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        let watch = query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let (fault, index) = self.fault_for(&method, &path, &query, watch, connection);
        let answer = match fault {
            Some(Fault::Status(code, retry_after)) => {
                let mut response = http::Response::builder()
                    .status(code)
                    .header("Content-Type", "application/json");
                if let Some(seconds) = retry_after {
                    response = response.header("Retry-After", seconds.to_string());
                }
                let body = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Failure", "code": code, "message": "injected by the test proxy"});
                response.body(full(body.to_string())).unwrap()
            }
            Some(Fault::Stall) => std::future::pending().await,
            Some(Fault::StallThenGone) => {
                let mut healed = self.healed.subscribe();
                let _ = healed.changed().await;
                gone()
            }
            Some(Fault::EndWatch) => http::Response::builder()
                .status(200)
                .header("Content-Type", "application/json")
                .body(Empty::new().map_err(|never| match never {}).boxed_unsync())
                .unwrap(),
            Some(Fault::Gone) => gone(),
            Some(Fault::Swallow) => {
                let answer = self.answered(index, self.forward(upstream, request, watch).await);
                self.state
                    .lock()
                    .unwrap()
                    .swallowed
                    .push((method, path, answer.status().as_u16()));
                std::future::pending().await
            }
            None => self.forward(upstream, request, watch).await,
        };
        self.answered(index, answer)
    }

    async fn forward(
        &self,
        upstream: &kube::Client,
        request: http::Request<Incoming>,
        watch: bool,
    ) -> Answer {
        let (parts, body) = request.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut forwarded = http::Request::builder().method(parts.method).uri(parts.uri);
        for (name, value) in &parts.headers {
            if name != http::header::HOST {
                forwarded = forwarded.header(name, value);
            }
        }
        let forwarded = forwarded
            .body(kube::client::Body::from(body.to_vec()))
            .unwrap();
        match upstream.send(forwarded).await {
            Ok(response) if watch => {
                // Streamed until the server ends it or the test severs it.
                let mut severed = self.severed.subscribe();
                let (parts, mut body) = response.into_parts();
                let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            frame = body.frame() => match frame {
                                Some(Ok(frame)) => {
                                    if let Ok(data) = frame.into_data()
                                        && tx.send(data).await.is_err()
                                    {
                                        return;
                                    }
                                }
                                _ => return,
                            },
                            _ = severed.changed() => return,
                        }
                    }
                });
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv()
                        .await
                        .map(|data| (Ok::<_, BoxError>(hyper::body::Frame::data(data)), rx))
                });
                http::Response::from_parts(
                    parts,
                    http_body_util::StreamBody::new(stream).boxed_unsync(),
                )
            }
            Ok(response) => response.map(|body| body.map_err(BoxError::from).boxed_unsync()),
            Err(e) => http::Response::builder()
                .status(502)
                .body(full(e.to_string()))
                .unwrap(),
        }
    }
}

fn gone() -> Answer {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1",
        "status": "Failure", "code": 410, "reason": "Expired",
        "message": "too old resource version (injected by the test proxy)"});
    http::Response::builder()
        .status(410)
        .header("Content-Type", "application/json")
        .body(full(body.to_string()))
        .unwrap()
}

/// The test's admin client, retrying nothing: what the proxy forwards with.
pub fn upstream(env: &crate::TestEnv) -> kube::Client {
    let mut config = env.kube_config();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}
