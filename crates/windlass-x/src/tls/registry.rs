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

use windlass::controller::{Components, Controller};
use windlass::session::Session;
use windlass::{Error, Result};

pub use super::config::TlsConfig;
use super::context::Tls;
use super::internal::InternalTls;

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
