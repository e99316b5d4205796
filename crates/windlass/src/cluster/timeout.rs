//! A deadline on each request to the API server, watches excepted.
//!
//! kube-rs's client waits up to its read timeout (295 s) for an answer, so that a watch,
//! which may stay silent for minutes, is not cut. A `get` or an `apply` to a stalled server
//! then holds a reconcile, and with it a worker, for five minutes. This layer gives every
//! other request `runtime.request-timeout` (30 s by default) for its whole answer, kube's
//! own retries of 429 and 503 included; a request that takes longer fails as a transient
//! error and its CR is retried with back-off. A `tower` layer of a few lines rather than a
//! general timeout crate: it must tell watches apart, which needs the Kubernetes query.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error of a request that did not end in time.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer within {0:?} (runtime.request-timeout)")]
pub struct TimedOut(pub Duration);

/// The `tower` layer that puts a deadline on each request but watches.
#[derive(Debug, Clone, Copy)]
pub struct TimeoutLayer(Duration);

impl TimeoutLayer {
    /// Requests fail after `after`; `Duration::ZERO`: never.
    pub fn new(after: Duration) -> Self {
        TimeoutLayer(after)
    }
}

impl<S> tower_layer::Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            after: self.0,
        }
    }
}

/// The service [`TimeoutLayer`] wraps around a client's stack.
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    after: Duration,
}

impl<S, B, R> tower_service::Service<Request<B>> for Timeout<S>
where
    S: tower_service::Service<Request<B>, Response = Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let after =
            (!super::requests::is_watch(&request) && !self.after.is_zero()).then_some(self.after);
        let response = self.inner.call(request);
        Box::pin(async move {
            match after {
                None => response.await.map_err(Into::into),
                Some(after) => match tokio::time::timeout(after, response).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(Box::new(TimedOut(after)) as BoxError),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;
    use crate::cluster::{Cluster, LiveCluster};
    use crate::object::ObjectRef;

    /// A server that accepts connections and never answers, and a client of it with
    /// `timeout`.
    async fn stalled(timeout: Duration) -> (kube::Client, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        let client = kube::client::ClientBuilder::try_from(config)
            .unwrap()
            .with_layer(&TimeoutLayer::new(timeout))
            .build();
        (client, server)
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_to_a_stalled_server_fails_at_its_deadline() {
        let (client, server) = stalled(Duration::from_secs(30)).await;
        let cluster = LiveCluster::new(client);
        let started = tokio::time::Instant::now();
        let cm = ObjectRef::new("v1", "ConfigMap", Some("default"), "x");
        let error = cluster.get(&cm).await.unwrap_err();
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
            "{waited:?}"
        );
        assert!(
            error.to_string().contains("did not answer within 30s"),
            "{error}"
        );
        server.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_is_not_cut_by_the_deadline() {
        let (client, server) = stalled(Duration::from_secs(30)).await;
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let task =
            tokio::spawn(async move { api.watch(&Default::default(), "0").await.map(|_| ()) });
        // Ten deadlines later the watch still waits for the server.
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!task.is_finished(), "the watch was cut");
        task.abort();
        server.abort();
    }
}
