//! The API server's own shard selector (KEP-5866, alpha in Kubernetes 1.37 behind the
//! `ShardedListAndWatch` feature gate): a `shardSelector` query parameter on lists and
//! watches, `shardRange(object.metadata.uid, '0x…', '0x…')`, that keeps only the objects
//! whose uid's FNV-1a hash falls in the range, in the list and in the watch's events.
//!
//! kube-rs's watcher has no place for the parameter, so a shard's watch of the primary
//! kind runs over a client of its own ([`selecting_client`]) that adds it to every request
//! it sends; the watcher and everything above it are unchanged.
//!
//! A server without the gate (or older than 1.37) ignores the parameter and answers every
//! object, which would put every CR into every shard. So the operator asks once, at start
//! ([`honours_shard_selector`]): it lists its own members Lease with a selector its uid does
//! not match. An empty answer means the server selects; the Lease itself means it ignored
//! the parameter, and the shards are selected by their label instead.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response, Uri};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kube::client::Body;

use crate::config::sharding::fnv1a64;

/// The query parameter.
const PARAMETER: &str = "shardSelector";

/// `text` percent-encoded for a query: everything but the unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `uri` with `shardSelector=<selector>` added to its query; `None` if the result is not a
/// URI (it always is: the selector is percent-encoded).
fn with_selector(uri: &Uri, encoded: &str) -> Option<Uri> {
    let path = uri.path();
    let query = match uri.query() {
        Some(query) if !query.is_empty() => format!("{query}&{PARAMETER}={encoded}"),
        _ => format!("{PARAMETER}={encoded}"),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(format!("{path}?{query}").parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// The service under a [`selecting_client`]: every request through `client`, the
/// selector added.
#[derive(Clone)]
struct Selecting {
    client: kube::Client,
    encoded: String,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl tower_service::Service<Request<Body>> for Selecting {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // `send` waits for the inner client's own readiness.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if let Some(uri) = with_selector(request.uri(), &self.encoded) {
            *request.uri_mut() = uri;
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// A client that sends every request through `client` (its authentication, timeouts and
/// request counting) with the shard selector `selector` added.
pub(crate) fn selecting_client(client: &kube::Client, selector: &str) -> kube::Client {
    let service = Selecting {
        client: client.clone(),
        encoded: encode(selector),
    };
    kube::Client::new(service, client.default_namespace())
}

/// Whether the API server applies a shard selector: the Lease `namespace/name` (which must
/// exist) listed with a selector that its uid does not match comes back empty.
///
/// # Errors
/// The kube error if the Lease cannot be read; a refusal of the list (a server that
/// rejects the parameter) is `Ok(false)`.
pub(crate) async fn honours_shard_selector(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<bool, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases.get(name).await?;
    let uid = lease.metadata.uid.unwrap_or_default();
    // The half of the hash space the Lease is not in.
    let other_half = if fnv1a64(&uid) < 1 << 63 {
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
    } else {
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    };
    let selecting: Api<Lease> = Api::namespaced(selecting_client(client, other_half), namespace);
    let listed = selecting
        .list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await;
    match listed {
        Ok(list) => Ok(list.items.is_empty()),
        Err(e) => {
            tracing::warn!(error = %e, "the API server refuses a shard selector");
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_selector_is_added_to_the_query_encoded() {
        let selector =
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let encoded = encode(selector);
        assert_eq!(
            encoded,
            "shardRange%28object.metadata.uid%2C%20%270x0000000000000000%27%2C%20%270x8000000000000000%27%29"
        );
        let watch: Uri = "/apis/x.dev/v1/namespaces/a/things?watch=true&labelSelector=a%3Db"
            .parse()
            .unwrap();
        let selected = with_selector(&watch, &encoded).unwrap();
        assert_eq!(
            selected.query(),
            Some(format!("watch=true&labelSelector=a%3Db&shardSelector={encoded}").as_str())
        );
        assert_eq!(selected.path(), "/apis/x.dev/v1/namespaces/a/things");
        let list: Uri = "https://127.0.0.1:6443/api/v1/configmaps".parse().unwrap();
        let selected = with_selector(&list, "x").unwrap();
        assert_eq!(
            selected.to_string(),
            "https://127.0.0.1:6443/api/v1/configmaps?shardSelector=x"
        );
    }
}
