//! Which [`TlsContext`](super::TlsContext) a CR gets: a registry of context factories keyed
//! by `tls.type` in the backend config.
//!
//! The registry is a value the controller owns (usually built in its constructor), and
//! [`TlsRegistry::context`] makes a fresh context for each reconcile in
//! [`Controller::components`]: nothing outlives the reconcile except what is in the cluster,
//! so a restarted operator behaves exactly like a running one.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use windlass::controller::{Components, Controller};
use windlass::session::Session;
use windlass::{Error, Result};

use super::context::Tls;
use super::internal::InternalTls;
use super::pki::KeyAlgorithm;

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
            type_: super::internal::INTERNAL.to_string(),
            ..Default::default()
        }
    }

    /// The `tls` section of a backend config (e.g. [`Session::config_value`]); a missing
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

/// Makes a reconcile's context from its config, adding what it needs to the graph.
pub type TlsFactory<C> =
    Arc<dyn Fn(&Session<C>, &TlsConfig, &mut Components<C>) -> Result<Tls<C>> + Send + Sync>;

/// The TLS contexts a controller can use, by `tls.type`; `internal` is registered by
/// [`TlsRegistry::new`].
///
/// ```
/// use windlass::prelude::*;
/// use windlass_x::tls::{InternalTls, TlsRegistry};
/// # use windlass::testing::Widget;
/// # struct App;
/// # #[async_trait] impl Controller for App { type Resource = Widget; type Config = NoConfig;
/// #   type Status = Status; fn components(&self, _: &Session<Self>) -> Result<Components<Self>> { Ok(Components::new()) } }
///
/// let mut registry = TlsRegistry::<App>::new();
/// assert_eq!(registry.types(), ["internal"]);
/// // Another name for the internal CA, e.g. to keep an old config working.
/// registry.register("self-signed", |session, config, graph| {
///     InternalTls::install(session, config, graph)
/// });
/// assert_eq!(registry.types(), ["internal", "self-signed"]);
/// ```
pub struct TlsRegistry<C: Controller> {
    factories: BTreeMap<String, TlsFactory<C>>,
}

impl<C: Controller> Default for TlsRegistry<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Controller> fmt::Debug for TlsRegistry<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsRegistry")
            .field("types", &self.factories.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<C: Controller> TlsRegistry<C> {
    /// A registry with the `internal` context.
    pub fn new() -> Self {
        let mut registry = Self::empty();
        registry.register(InternalTls::<C>::TYPE, InternalTls::install);
        registry
    }

    /// A registry with no context at all.
    pub fn empty() -> Self {
        TlsRegistry {
            factories: BTreeMap::new(),
        }
    }

    /// Make `tls.type: <type_label>` use `factory`. Registering a type again replaces it,
    /// with a warning.
    pub fn register<F>(&mut self, type_label: &str, factory: F) -> &mut Self
    where
        F: Fn(&Session<C>, &TlsConfig, &mut Components<C>) -> Result<Tls<C>>
            + Send
            + Sync
            + 'static,
    {
        if self
            .factories
            .insert(type_label.to_string(), Arc::new(factory))
            .is_some()
        {
            tracing::warn!(
                tls_type = type_label,
                "a TLS context type was registered twice; the last one is used"
            );
        }
        self
    }

    /// The registered types, sorted.
    pub fn types(&self) -> Vec<&str> {
        self.factories.keys().map(String::as_str).collect()
    }

    /// The context `tls.type` of the session's backend config names, made for this
    /// reconcile; it adds what it needs to `graph` (the internal context adds its CA
    /// component). A missing section or an unknown type is a config error naming it.
    pub fn context(&self, session: &Session<C>, graph: &mut Components<C>) -> Result<Tls<C>> {
        let config = TlsConfig::from_backend_config(session.config_value())?;
        let factory = self.factories.get(&config.type_).ok_or_else(|| {
            Error::config(format!(
                "tls.type: unknown TLS context type {:?}; registered: {}",
                config.type_,
                self.types().join(", ")
            ))
        })?;
        factory(session, &config, graph)
    }
}
