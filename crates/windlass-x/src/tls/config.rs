//! The backend config's `tls` section: which registered context a CR uses, and with what.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use windlass::{Error, Result};

use super::pki::KeyAlgorithm;

/// The `tls.type` of windlass-x's internal CA context, [`InternalTls`](super::InternalTls).
pub const INTERNAL: &str = "internal";

/// The backend config's `tls` section.
///
/// ```yaml
/// tls:
///   type: internal          # which registered context
///   keyAlgorithm: ecdsa-p256  # or rsa2048 (feature `tls-rsa`)
///   labels: {team: storage}   # extra labels on the Secrets the context writes
/// ```
///
/// Other keys are kept in [`TlsConfig::settings`] for the context that wants them. Its
/// `Debug` shows their keys only: a context's settings may hold a token or a password.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    /// The registered context to use (`internal` unless the author registered others).
    #[serde(rename = "type")]
    pub type_: String,
    /// The algorithm of keys the context generates.
    #[serde(default)]
    pub key_algorithm: KeyAlgorithm,
    /// Labels added to the Secrets the context writes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Every other key of the section, for contexts with settings of their own.
    #[serde(flatten)]
    pub settings: Map<String, Value>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("type_", &self.type_)
            .field("key_algorithm", &self.key_algorithm)
            .field("labels", &self.labels)
            .field(
                "settings",
                &self
                    .settings
                    .keys()
                    .map(|key| (key, "<redacted>"))
                    .collect::<BTreeMap<_, _>>(),
            )
            .finish()
    }
}

impl TlsConfig {
    /// `type: internal` with the defaults: what an operator's config defaults usually hold.
    pub fn internal() -> Self {
        TlsConfig {
            type_: INTERNAL.to_string(),
            ..Default::default()
        }
    }

    /// The `tls` section of a backend config (e.g. [`Session::config_value`](windlass::session::Session::config_value)); a missing
    /// section or a wrong field is a config error naming it.
    pub fn from_backend_config(config: &Value) -> Result<Self> {
        let section = match config.get("tls") {
            None | Some(Value::Null) => {
                return Err(Error::config(
                    "the backend config has no tls section: set tls.type (e.g. internal) in the \
                     config defaults or spec.configOverrides",
                ));
            }
            Some(section) => section,
        };
        serde_path_to_error::deserialize(section).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                "tls".to_string()
            } else {
                format!("tls.{path}")
            };
            Error::config(format!("{at}: {}", e.inner()))
        })
    }
}
