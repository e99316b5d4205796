//! Pointing the API server at the webhook: each converted CRD's `clientConfig` (the
//! Service or URL, and the CA bundle) made what this operator serves, written only when it
//! differs, so a restart with the same certificate writes nothing.

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ServiceReference, WebhookClientConfig,
};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::config::WebhookConfig;
use crate::crd::CONVERSION_PATH;
use crate::error::{Error, Result};

/// The client config of the CRDs this operator converts: its URL when configured, else its
/// Service; with `ca_bundle` when given.
pub(crate) fn client_config(
    config: &WebhookConfig,
    namespace: &str,
    ca_bundle: Option<&str>,
) -> WebhookClientConfig {
    client_config_at(config, namespace, ca_bundle, CONVERSION_PATH)
}

/// The client config of the webhook at `path` of this operator's server.
pub(crate) fn client_config_at(
    config: &WebhookConfig,
    namespace: &str,
    ca_bundle: Option<&str>,
    path: &str,
) -> WebhookClientConfig {
    let ca_bundle = ca_bundle.map(|pem| ByteString(pem.as_bytes().to_vec()));
    match &config.url {
        Some(url) => WebhookClientConfig {
            url: Some(format!("{}{path}", url.trim_end_matches('/'))),
            ca_bundle,
            service: None,
        },
        None => WebhookClientConfig {
            service: Some(ServiceReference {
                name: config.service.clone(),
                namespace: namespace.to_string(),
                path: Some(path.to_string()),
                port: Some(443),
            }),
            ca_bundle,
            url: None,
        },
    }
}

/// Make the conversion client config of the CRD `name` be `wanted`. A CRD that is not
/// installed is left for its installation (a warning): the operator's watch of it will say
/// more.
pub(crate) async fn inject(
    client: &kube::Client,
    name: &str,
    wanted: &WebhookClientConfig,
) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = crds
        .get_opt(name)
        .await
        .map_err(|e| Error::with_source(format!("cannot read the CRD {name}"), e))?
    else {
        tracing::warn!(
            crd = name,
            "the CRD is not installed: no CA bundle injected"
        );
        return Ok(());
    };
    let current = crd
        .spec
        .conversion
        .as_ref()
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref());
    if current == Some(wanted) {
        return Ok(());
    }
    // A merge patch: `null` drops the Service when a URL is wanted and the other way round.
    let patch = json!({"spec": {"conversion": {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "caBundle": wanted.ca_bundle,
                "service": wanted.service,
                "url": wanted.url,
            },
        },
    }}});
    crds.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            Error::with_source(format!("cannot point the CRD {name} at the webhook"), e)
        })?;
    tracing::info!(crd = name, "conversion webhook configured");
    Ok(())
}
