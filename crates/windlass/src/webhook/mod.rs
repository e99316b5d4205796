//! The operator's HTTPS server for the API server: the conversions of the CRDs declared with
//! several versions ([`crd::ApiVersions`](crate::crd::ApiVersions)), at
//! [`CONVERSION_PATH`](crate::crd::CONVERSION_PATH), and the admission webhooks of
//! [`admission::Admission`](crate::admission::Admission)s, at `/validate/<crd>` and
//! `/mutate/<crd>`.
//!
//! Every replica serves (the Service spreads the API server's calls; conversion needs no
//! leadership), from the moment [`Manager::run`](crate::runtime::Manager::run) starts and
//! before any controller reads its CRs, which may be stored in another version.
//!
//! Its certificate needs no cert-manager: by default the operator is its own CA and keeps
//! the CA and the serving pair in a Secret of its namespace (`webhook.certificate.secret`),
//! which every replica shares; at start-up and every `webhook.certificate.check-period` it
//! renews what is due, and injects the CA bundle into each converted CRD's client config
//! and registers the admission webhooks with it, when they differ — which also repairs a bundle someone changed. A renewed pair comes from
//! the same CA, so callers never distrust it; a renewed CA is added to the bundle (the old
//! one kept) before any replica serves a pair it signed. With `webhook.certificate.dir` the
//! pair is read from files issued elsewhere (cert-manager's, whose CA injector then owns the
//! bundle) and nothing is injected.

pub(crate) mod admission;
pub(crate) mod certificate;
mod conversion;
mod inject;
pub(crate) mod server;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use k8s_openapi::api::core::v1::Secret;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::WebhookConfig;
use crate::crd::{ApiVersions, CONVERSION_PATH};
use crate::error::{Error, Result};
use certificate::{Material, Source};
use server::CurrentCertificate;

pub(crate) use inject::client_config;

/// The largest ConversionReview accepted: the API server converts a whole list in one
/// review, so it is far above one object's 1.5 MiB.
const MAX_REVIEW_BYTES: usize = 256 << 20;

/// `review` as the JSON answer the API server reads; a review that cannot be written is a
/// 500.
fn json_response(review: &impl serde::Serialize) -> axum::response::Response {
    use axum::response::IntoResponse;
    match serde_json::to_vec(review) {
        Ok(body) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The namespace of the webhook's Service and Secret: configured, else the Pod's, else
/// `default`.
pub(crate) fn namespace(config: &WebhookConfig) -> String {
    if !config.namespace.trim().is_empty() {
        return config.namespace.trim().to_string();
    }
    crate::config::pod_namespace().unwrap_or_else(|| "default".to_string())
}

/// The names and addresses the serving certificate is for: the Service's DNS names, the
/// configured hosts and the host of the configured URL.
fn hosts(config: &WebhookConfig, namespace: &str) -> Vec<String> {
    let service = &config.service;
    let mut hosts = vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ];
    hosts.extend(config.certificate.hosts.iter().cloned());
    if let Some(host) = config
        .url
        .as_deref()
        .and_then(|url| url.parse::<http::Uri>().ok())
        .and_then(|uri| uri.host().map(|h| h.trim_matches(['[', ']']).to_string()))
    {
        hosts.push(host);
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Serve the conversions of `conversions` on `webhook.bind-address`, with the certificate
/// made ready (and its CA injected) first; keep renewing it in `background` until `stop`.
///
/// # Errors
/// When the certificate cannot be read or issued, the CA cannot be injected, or the
/// address cannot be listened on: the operator cannot serve its CRDs then.
pub(crate) async fn start(
    client: kube::Client,
    config: &WebhookConfig,
    conversions: Vec<ApiVersions<()>>,
    admissions: Vec<Arc<dyn admission::Admits>>,
    background: &mut JoinSet<()>,
    stop: watch::Receiver<bool>,
) -> Result<()> {
    // The command line names them after the operator; a `main` of its own may not have.
    let mut config = config.clone();
    config.named_after("windlass");
    let config = &config;
    let namespace = namespace(config);
    let source = match &config.certificate.dir {
        Some(dir) => Source::Files(dir.clone()),
        None => Source::Secret {
            api: Box::new(kube::Api::<Secret>::namespaced(client.clone(), &namespace)),
            name: config.certificate.secret.clone(),
            hosts: hosts(config, &namespace),
            validity: config.certificate.validity.into(),
            ca_validity: config.certificate.ca_validity.into(),
        },
    };
    let address = config
        .bind_address
        .parse()
        .map_err(|_| Error::config(format!("webhook.bind-address: `{}`", config.bind_address)))?;
    let listener = server::bind(address).await?;
    let injector = Injector {
        client: client.clone(),
        config: config.clone(),
        namespace,
        crds: conversions.iter().map(ApiVersions::crd_name).collect(),
        admissions: admissions.clone(),
    };
    let material = source.current().await?;
    injector.inject(&material).await?;
    let certificate = Arc::new(CurrentCertificate::new(&material)?);
    let router = router(conversions, admissions, client);
    tracing::info!(%address, "serving conversions");
    background.spawn(server::serve(
        listener,
        certificate.clone(),
        router,
        stop.clone(),
    ));
    let period = config.certificate.check_period.into();
    background.spawn(renew(source, injector, certificate, material, period, stop));
    Ok(())
}

/// The routes of the conversions and of the admission webhooks.
fn router(
    conversions: Vec<ApiVersions<()>>,
    admissions: Vec<Arc<dyn admission::Admits>>,
    client: kube::Client,
) -> axum::Router {
    let by_name = admissions
        .into_iter()
        .map(|a| (a.target().name, a))
        .collect();
    let admissions = admission::Admissions {
        by_name: Arc::new(by_name),
        client,
    };
    let conversion = axum::Router::new()
        .route(CONVERSION_PATH, axum::routing::post(conversion::handle))
        .with_state(Arc::new(conversions));
    axum::Router::new()
        .route("/validate/{name}", axum::routing::post(admission::validate))
        .route("/mutate/{name}", axum::routing::post(admission::mutate))
        .with_state(admissions)
        .merge(conversion)
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
}

/// Who the CA bundle is injected into.
struct Injector {
    client: kube::Client,
    config: WebhookConfig,
    namespace: String,
    crds: Vec<String>,
    admissions: Vec<Arc<dyn admission::Admits>>,
}

impl Injector {
    /// Point every converted CRD at the webhook with `material`'s CA bundle; nothing for a
    /// certificate issued elsewhere.
    async fn inject(&self, material: &Material) -> Result<()> {
        let Some(bundle) = material.ca_bundle.as_deref() else {
            return Ok(());
        };
        let wanted = client_config(&self.config, &self.namespace, Some(bundle));
        for crd in &self.crds {
            inject::inject(&self.client, crd, &wanted).await?;
        }
        let configurations = admission::configurations(
            &self.admissions,
            &self.config.service,
            &self.config,
            &self.namespace,
            Some(bundle),
        );
        admission::register(&self.client, &configurations).await
    }
}

/// Every `period`: renew what is due (or read the files again), inject the bundle, then
/// serve the new pair; and inject again even when nothing changed, to repair a bundle
/// changed by someone else.
async fn renew(
    source: Source,
    injector: Injector,
    certificate: Arc<CurrentCertificate>,
    mut material: Material,
    period: std::time::Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let current = match source.current().await {
            Ok(current) => current,
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew the webhook certificate; serving the old one");
                continue;
            }
        };
        if let Err(e) = injector.inject(&current).await {
            tracing::warn!(error = %e, "cannot inject the webhook CA bundle");
            continue;
        }
        if current != material {
            match certificate.replace(&current) {
                Ok(()) => {
                    tracing::info!("serving a renewed webhook certificate");
                    material = current;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot serve the renewed webhook certificate")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_is_for_the_service_the_configured_hosts_and_the_urls_host() {
        let mut config = WebhookConfig::default();
        config.named_after("shop");
        config.certificate.hosts = vec!["shop.example.com".into(), "10.0.0.7".into()];
        config.url = Some("https://[::1]:9443".into());
        assert_eq!(
            hosts(&config, "ops"),
            [
                "10.0.0.7",
                "::1",
                "shop-webhook.ops.svc",
                "shop-webhook.ops.svc.cluster.local",
                "shop.example.com",
            ]
        );
    }

    #[test]
    fn bad_webhook_settings_are_refused_by_key() {
        let mut config = crate::config::OperatorConfig::default();
        config.webhook.bind_address = "nowhere".into();
        config.webhook.url = Some("http://plain".into());
        config.webhook.certificate.validity = std::time::Duration::from_secs(1).into();
        let problems = config.validate().unwrap_err().join("\n");
        for key in [
            "webhook.bind-address",
            "webhook.url",
            "webhook.certificate.validity",
        ] {
            assert!(problems.contains(key), "{key} in {problems}");
        }
    }
}
