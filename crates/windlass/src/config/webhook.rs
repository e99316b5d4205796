//! `webhook.*`: the operator's HTTPS server for the API server's conversion requests, and
//! the certificate it serves with.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigDuration;

/// `webhook.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct WebhookConfig {
    /// Where the webhook server listens, as `host:port`. It runs only when a controller's CRD
    /// has more than one version.
    pub bind_address: String,
    /// The Service in front of the operator's Pods that the API server calls; empty:
    /// `<operator>-webhook`.
    pub service: String,
    /// Namespace of that Service and of the certificate's Secret; empty: the operator's
    /// (the service account's in a Pod, else `default`).
    pub namespace: String,
    /// Have the API server call this `https://` URL instead of the Service: for an
    /// operator running outside the cluster. Its host must be a name or address the
    /// certificate is issued for (`certificate.hosts`).
    pub url: Option<String>,
    /// The serving certificate.
    pub certificate: CertificateConfig,
}

/// The default of [`WebhookConfig::bind_address`]: every IPv4 interface, port 9443.
pub const DEFAULT_WEBHOOK_BIND_ADDRESS: &str = "0.0.0.0:9443";

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            bind_address: DEFAULT_WEBHOOK_BIND_ADDRESS.to_string(),
            service: String::new(),
            namespace: String::new(),
            url: None,
            certificate: CertificateConfig::default(),
        }
    }
}

/// `webhook.certificate.*`: by default the operator is its own CA, keeps the CA and the
/// serving certificate in a Secret, and injects the CA into what calls it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CertificateConfig {
    /// The Secret the operator keeps its CA and serving certificate in; empty:
    /// `<service>-tls`.
    pub secret: String,
    /// Read the serving certificate from `tls.crt` and `tls.key` in this directory instead
    /// (one issued elsewhere, e.g. by cert-manager, which then injects the CA): the
    /// operator re-reads them every `check-period` and injects nothing.
    pub dir: Option<PathBuf>,
    /// With `dir`: the cert-manager Certificate (`namespace/name`) that issues it; `manifests`
    /// then annotates the CRDs and webhook configurations with
    /// `cert-manager.io/inject-ca-from`, so that cert-manager injects its CA.
    pub inject_ca_from: Option<String>,
    /// Names and IP addresses the serving certificate is issued for besides the Service's
    /// (e.g. `127.0.0.1` for a `url` on this machine).
    pub hosts: Vec<String>,
    /// How long a serving certificate the operator issues is valid; a new one is issued
    /// when a third of it is left.
    pub validity: ConfigDuration,
    /// How long the operator's CA is valid; a new CA is made when less than a serving
    /// certificate's validity is left.
    pub ca_validity: ConfigDuration,
    /// How often the certificate is checked for renewal (and the files in `dir` read).
    pub check_period: ConfigDuration,
}

impl Default for CertificateConfig {
    fn default() -> Self {
        CertificateConfig {
            secret: String::new(),
            dir: None,
            inject_ca_from: None,
            hosts: Vec::new(),
            validity: ConfigDuration(Duration::from_secs(90 * 24 * 3600)),
            ca_validity: ConfigDuration(Duration::from_secs(365 * 24 * 3600)),
            check_period: ConfigDuration(Duration::from_secs(3600)),
        }
    }
}

impl WebhookConfig {
    /// `service` and `certificate.secret` named after the operator `name` where empty.
    pub fn named_after(&mut self, name: &str) {
        if self.service.trim().is_empty() {
            self.service = format!("{name}-webhook");
        }
        if self.certificate.secret.trim().is_empty() {
            self.certificate.secret = format!("{}-tls", self.service);
        }
    }

    /// Check what serde cannot; each problem starts with its key.
    pub(super) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.bind_address.parse::<std::net::SocketAddr>().is_err() {
            problems.push(format!(
                "webhook.bind-address: `{}` is not host:port (e.g. 0.0.0.0:9443)",
                self.bind_address
            ));
        }
        if let Some(url) = &self.url
            && !url.starts_with("https://")
        {
            problems.push(format!("webhook.url: `{url}` must start with https://"));
        }
        let certificate = &self.certificate;
        if certificate.validity.0 < Duration::from_secs(3) {
            problems.push("webhook.certificate.validity: must be at least 3s".to_string());
        }
        if certificate.ca_validity.0 < certificate.validity.0 {
            problems.push(
                "webhook.certificate.ca-validity: must be at least webhook.certificate.validity"
                    .to_string(),
            );
        }
        if let Some(from) = &certificate.inject_ca_from
            && (certificate.dir.is_none() || from.split('/').filter(|p| !p.is_empty()).count() != 2)
        {
            problems.push(format!(
                "webhook.certificate.inject-ca-from: `{from}` must be namespace/name, with \
                 webhook.certificate.dir set (the certificate cert-manager issues is read there)"
            ));
        }
        if certificate.check_period.0.is_zero() {
            problems.push("webhook.certificate.check-period: must be more than 0s".to_string());
        }
        problems
    }
}
