//! Counting the requests a kube client sends: a `tower` layer that sits on the client's
//! service stack and tallies every request by verb, resource and outcome.
//!
//! Tests assert on these counts ("a steady-state reconcile issues no write"), the benchmark
//! reports them, and the runtime will export them on `/metrics`. It is hand-written because
//! it has to understand Kubernetes request paths (which resource, which verb: a `PATCH` with
//! `application/apply-patch+yaml` is an apply, a `GET` with `watch=true` is a watch), which
//! no general HTTP metrics layer does.
//!
//! The layer counts logical requests as the client's caller sees them: it wraps the whole
//! stack kube builds, so the retries kube's own retry layer makes beneath it for 429/503/504
//! are one request here.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use windlass::cluster::{LiveCluster, RequestCounter, Verb};
//!
//! let counter = RequestCounter::new();
//! let client = counter.client(kube::Config::infer().await?)?;
//! let cluster = LiveCluster::new(client);
//! // … reconcile …
//! let counts = counter.take();
//! println!("{} writes, {} reads", counts.mutating(), counts.reads());
//! # Ok(()) }
//! ```

// The runtime reads only totals for its metrics; the rest of the API is for tests, which
// get it through the `testing` feature.
#![cfg_attr(not(feature = "testing"), allow(dead_code))]

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response};

/// What a request did, in the API server's vocabulary (its RBAC verbs, with `apply` told
/// apart from other patches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// Read one object.
    Get,
    /// Read a collection.
    List,
    /// Open a watch.
    Watch,
    /// Create an object (`POST`).
    Create,
    /// Replace an object (`PUT`).
    Update,
    /// Server-side apply (`PATCH` with `application/apply-patch+yaml`).
    Apply,
    /// Any other `PATCH` (merge, strategic merge, JSON patch).
    Patch,
    /// Delete one object.
    Delete,
    /// Delete a collection.
    DeleteCollection,
    /// Anything else (discovery of API groups, `OPTIONS`, …).
    Other,
}

impl Verb {
    /// Every verb, in declaration order.
    pub const ALL: [Verb; 10] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Apply,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
        Verb::Other,
    ];

    /// The verb [`Verb::as_str`] spells `name` (the `verb` label of
    /// `windlass_api_requests_total`); [`Verb::Other`] for any other name.
    ///
    /// ```
    /// use windlass::cluster::Verb;
    /// assert!(Verb::from_name("apply").is_mutating());
    /// assert_eq!(Verb::from_name("proxy"), Verb::Other);
    /// ```
    pub fn from_name(name: &str) -> Verb {
        Verb::ALL
            .into_iter()
            .find(|v| v.as_str() == name)
            .unwrap_or(Verb::Other)
    }

    /// Whether the verb changes what the server stores.
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Verb::Create
                | Verb::Update
                | Verb::Apply
                | Verb::Patch
                | Verb::Delete
                | Verb::DeleteCollection
        )
    }

    /// Whether the verb reads objects (`get` or `list`; watches are counted apart).
    pub fn is_read(self) -> bool {
        matches!(self, Verb::Get | Verb::List)
    }

    /// The verb's name as RBAC spells it (`apply` is RBAC's `patch`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Apply => "apply",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Other => "other",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of the tally: which verb on which resource, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// The verb.
    pub verb: Verb,
    /// The resource's plural name, with the subresource if any: `configmaps`,
    /// `widgets/status`; `discovery` for the API's own listings.
    pub resource: String,
    /// The HTTP status code, or 0 when no response came (a transport error).
    pub code: u16,
}

/// A snapshot of counted requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts(BTreeMap<RequestKey, u64>);

impl RequestCounts {
    /// Every row, sorted by verb, resource and code.
    pub fn rows(&self) -> impl Iterator<Item = (&RequestKey, u64)> {
        self.0.iter().map(|(k, n)| (k, *n))
    }
    /// All requests.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
    /// Requests that change what the server stores.
    pub fn mutating(&self) -> u64 {
        self.count(|k| k.verb.is_mutating())
    }
    /// `get` and `list` requests.
    pub fn reads(&self) -> u64 {
        self.count(|k| k.verb.is_read())
    }
    /// Requests with `verb`.
    pub fn verb(&self, verb: Verb) -> u64 {
        self.count(|k| k.verb == verb)
    }
    /// Requests with `verb` on `resource` (e.g. `"configmaps"`, `"widgets/status"`).
    pub fn of(&self, verb: Verb, resource: &str) -> u64 {
        self.count(|k| k.verb == verb && k.resource == resource)
    }
    /// Requests matching `pred`.
    pub fn count(&self, pred: impl Fn(&RequestKey) -> bool) -> u64 {
        self.0.iter().filter(|(k, _)| pred(k)).map(|(_, n)| n).sum()
    }
    /// Requests whose key is not in `other` or counted more often here.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        let mut rows = BTreeMap::new();
        for (key, n) in &self.0 {
            let before = earlier.0.get(key).copied().unwrap_or(0);
            if *n > before {
                rows.insert(key.clone(), n - before);
            }
        }
        RequestCounts(rows)
    }
}

impl fmt::Display for RequestCounts {
    /// One line per row: `apply configmaps 200 ×3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, n) in &self.0 {
            writeln!(f, "{} {} {} ×{n}", key.verb, key.resource, key.code)?;
        }
        Ok(())
    }
}

/// Counts the requests of every client built with its [`layer`](RequestCounter::layer).
/// Cheap to clone; clones share the tally.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<Mutex<RequestCounts>>);

impl RequestCounter {
    /// A counter with nothing counted.
    pub fn new() -> Self {
        Self::default()
    }

    /// The layer to put on a kube client's stack
    /// (`kube::client::ClientBuilder::with_layer`).
    pub fn layer(&self) -> CountingLayer {
        CountingLayer(self.clone())
    }

    /// A kube client for `config` (kube's default stack, retries included) whose requests
    /// this counter counts.
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&self.layer())
            .build())
    }

    /// [`client`](Self::client) whose requests but watches fail after `timeout` (none when
    /// zero): see [`TimeoutLayer`](super::TimeoutLayer).
    pub fn client_with_timeout(
        &self,
        config: kube::Config,
        timeout: std::time::Duration,
    ) -> Result<kube::Client, kube::Error> {
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&super::TimeoutLayer::new(timeout))
            .with_layer(&self.layer())
            .build())
    }

    /// What was counted so far.
    pub fn snapshot(&self) -> RequestCounts {
        self.0.lock().clone()
    }

    /// What was counted so far, and start again from zero.
    pub fn take(&self) -> RequestCounts {
        std::mem::take(&mut *self.0.lock())
    }

    fn record(&self, key: RequestKey) {
        *self.0.lock().0.entry(key).or_insert(0) += 1;
    }
}

/// The `tower` layer of a [`RequestCounter`].
#[derive(Debug, Clone)]
pub struct CountingLayer(RequestCounter);

impl<S> tower_layer::Layer<S> for CountingLayer {
    type Service = Counting<S>;
    fn layer(&self, inner: S) -> Counting<S> {
        Counting {
            inner,
            counter: self.0.clone(),
        }
    }
}

/// The service [`CountingLayer`] wraps around a client's stack.
#[derive(Debug, Clone)]
pub struct Counting<S> {
    inner: S,
    counter: RequestCounter,
}

impl<S, B, R> tower_service::Service<Request<B>> for Counting<S>
where
    S: tower_service::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (verb, resource) = classify(&request);
        let counter = self.counter.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = result.as_ref().map_or(0, |r| r.status().as_u16());
            counter.record(RequestKey {
                verb,
                resource,
                code,
            });
            result
        })
    }
}

/// The verb and resource of a Kubernetes API request, from its method, path and query.
/// Whether `request` opens a watch (`watch=true` in its query).
pub(crate) fn is_watch<B>(request: &Request<B>) -> bool {
    request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
}

fn classify<B>(request: &Request<B>) -> (Verb, String) {
    let uri = request.uri();
    let watch = is_watch(request);
    let Some((resource, named)) = resource_of(uri.path()) else {
        return (Verb::Other, "discovery".into());
    };
    let apply = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/apply-patch"));
    let verb = match *request.method() {
        Method::GET if watch => Verb::Watch,
        Method::GET if named => Verb::Get,
        Method::GET => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH if apply => Verb::Apply,
        Method::PATCH => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => Verb::Other,
    };
    (verb, resource)
}

/// `(resource[/subresource], names one object)` of an API path, `None` for discovery
/// paths (`/api`, `/apis/apps/v1`, `/version`).
fn resource_of(path: &str) -> Option<(String, bool)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    // `namespaces/<ns>/<resource>…` is a namespaced path unless it stops at the namespace.
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    match rest {
        [] => None,
        [resource] => Some(((*resource).to_string(), false)),
        [resource, _name] => Some(((*resource).to_string(), true)),
        [resource, _name, sub, ..] => Some((format!("{resource}/{sub}"), true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_is_read_back_from_its_name() {
        for verb in Verb::ALL {
            assert_eq!(Verb::from_name(verb.as_str()), verb);
        }
        assert_eq!(Verb::from_name("escalate"), Verb::Other);
    }

    fn req(method: Method, uri: &str, content_type: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().method(method).uri(uri);
        if let Some(ct) = content_type {
            builder = builder.header(http::header::CONTENT_TYPE, ct);
        }
        builder.body(()).expect("a valid request")
    }

    #[test]
    fn paths_and_methods_become_verbs_and_resources() {
        let cases = [
            (
                req(Method::GET, "/api/v1/namespaces/ns/configmaps/a", None),
                Verb::Get,
                "configmaps",
            ),
            (
                req(
                    Method::GET,
                    "/api/v1/namespaces/ns/configmaps?labelSelector=x",
                    None,
                ),
                Verb::List,
                "configmaps",
            ),
            (
                req(
                    Method::GET,
                    "/api/v1/configmaps?watch=true&resourceVersion=1",
                    None,
                ),
                Verb::Watch,
                "configmaps",
            ),
            (
                req(Method::GET, "/api/v1/namespaces/ns", None),
                Verb::Get,
                "namespaces",
            ),
            (
                req(Method::GET, "/api/v1/namespaces", None),
                Verb::List,
                "namespaces",
            ),
            (
                req(
                    Method::PATCH,
                    "/apis/apps/v1/namespaces/ns/deployments/web?fieldManager=w&force=true",
                    Some("application/apply-patch+yaml"),
                ),
                Verb::Apply,
                "deployments",
            ),
            (
                req(
                    Method::PATCH,
                    "/apis/x.io/v1/namespaces/ns/widgets/a",
                    Some("application/json-patch+json"),
                ),
                Verb::Patch,
                "widgets",
            ),
            (
                req(
                    Method::PUT,
                    "/apis/x.io/v1/namespaces/ns/widgets/a/status",
                    None,
                ),
                Verb::Update,
                "widgets/status",
            ),
            (
                req(Method::POST, "/api/v1/namespaces/ns/secrets", None),
                Verb::Create,
                "secrets",
            ),
            (
                req(Method::DELETE, "/api/v1/namespaces/ns/secrets/s", None),
                Verb::Delete,
                "secrets",
            ),
            (
                req(Method::DELETE, "/api/v1/namespaces/ns/secrets", None),
                Verb::DeleteCollection,
                "secrets",
            ),
            (
                req(
                    Method::GET,
                    "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
                    None,
                ),
                Verb::Get,
                "clusterroles",
            ),
            (
                req(Method::GET, "/apis/apps/v1", None),
                Verb::Other,
                "discovery",
            ),
            (req(Method::GET, "/api", None), Verb::Other, "discovery"),
        ];
        for (request, verb, resource) in cases {
            assert_eq!(
                classify(&request),
                (verb, resource.to_string()),
                "{} {}",
                request.method(),
                request.uri()
            );
        }
    }

    #[test]
    fn counts_add_up_and_subtract() {
        let counter = RequestCounter::new();
        for (verb, code) in [(Verb::Get, 200), (Verb::Get, 404), (Verb::Apply, 200)] {
            counter.record(RequestKey {
                verb,
                resource: "configmaps".into(),
                code,
            });
        }
        let before = counter.snapshot();
        assert_eq!(
            (before.total(), before.reads(), before.mutating()),
            (3, 2, 1)
        );
        counter.record(RequestKey {
            verb: Verb::Update,
            resource: "widgets/status".into(),
            code: 409,
        });
        let delta = counter.snapshot().since(&before);
        assert_eq!(delta.total(), 1);
        assert_eq!(delta.of(Verb::Update, "widgets/status"), 1);
        assert_eq!(counter.take().total(), 4);
        assert_eq!(counter.snapshot().total(), 0);
    }
}
