//! Secure metrics (`server.secure-metrics`): `/metrics` and the debug endpoints over HTTPS,
//! for callers the API server vouches for and allows.
//!
//! A caller sends its ServiceAccount token as `Authorization: Bearer …`; the operator asks
//! the API server who it is (a TokenReview) and whether it may `get` the path (a
//! SubjectAccessReview on the non-resource URL, which a ClusterRole grants with
//! `nonResourceURLs: ["/metrics"]`), as kube-rbac-proxy and controller-runtime's secure
//! metrics do. A missing or unknown token gets 401, a known caller without the grant 403.
//! Answers are remembered for a minute per token and path (by the token's SHA-256, never
//! the token), so a scrape every few seconds costs the API server two requests a minute.
//! The server's certificate is self-signed, made at start-up: scrapers verify the caller's
//! side of the exchange (the token), and skip or pin the server's, as with
//! controller-runtime.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// How long an answer about one token and path is remembered.
const REMEMBER: Duration = Duration::from_secs(60);

/// What the API server said about a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allowed,
    /// No token, or one the API server does not know.
    Unauthenticated,
    /// A known caller without the grant.
    Forbidden,
}

/// Asks the API server about callers, remembering its answers for a while.
pub(crate) struct Authorizer {
    client: kube::Client,
    remembered: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
}

impl Authorizer {
    pub(crate) fn new(client: kube::Client) -> Arc<Self> {
        Arc::new(Authorizer {
            client,
            remembered: Mutex::new(HashMap::new()),
        })
    }

    async fn verdict(&self, token: &str, path: &str) -> Verdict {
        let key: [u8; 32] = Sha256::new()
            .chain_update(token.as_bytes())
            .chain_update([0])
            .chain_update(path.as_bytes())
            .finalize()
            .into();
        if let Some((verdict, at)) = self.remembered.lock().get(&key).copied()
            && at.elapsed() < REMEMBER
        {
            return verdict;
        }
        let verdict = match self.ask(token, path).await {
            Ok(verdict) => verdict,
            Err(e) => {
                // Not remembered: the next scrape asks again.
                tracing::warn!(error = %e, "cannot ask the API server about a metrics caller");
                return Verdict::Unauthenticated;
            }
        };
        let mut remembered = self.remembered.lock();
        remembered.retain(|_, (_, at)| at.elapsed() < REMEMBER);
        remembered.insert(key, (verdict, Instant::now()));
        verdict
    }

    async fn ask(&self, token: &str, path: &str) -> Result<Verdict, kube::Error> {
        let review = Api::<TokenReview>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &TokenReview {
                    spec: TokenReviewSpec {
                        token: token.to_string(),
                        ..TokenReviewSpec::default()
                    },
                    ..TokenReview::default()
                },
            )
            .await?;
        let Some(user) = review
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
        else {
            return Ok(Verdict::Unauthenticated);
        };
        let access = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: user.username,
                        uid: user.uid,
                        groups: user.groups,
                        extra: user.extra,
                        non_resource_attributes: Some(NonResourceAttributes {
                            path: Some(path.to_string()),
                            verb: Some("get".to_string()),
                        }),
                        ..SubjectAccessReviewSpec::default()
                    },
                    ..SubjectAccessReview::default()
                },
            )
            .await?;
        Ok(if access.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }
}

/// The middleware in front of `/metrics` and the debug endpoints.
pub(crate) async fn authorize(
    State(authorizer): State<Arc<Authorizer>>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return (StatusCode::UNAUTHORIZED, "a bearer token is required").into_response();
    };
    match authorizer.verdict(token, request.uri().path()).await {
        Verdict::Allowed => next.run(request).await,
        Verdict::Unauthenticated => {
            (StatusCode::UNAUTHORIZED, "the token is not valid").into_response()
        }
        Verdict::Forbidden => {
            (StatusCode::FORBIDDEN, "not allowed to get this path").into_response()
        }
    }
}
