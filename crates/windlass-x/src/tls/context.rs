//! The TLS context: where a controller's TLS material comes from, as a trait, and [`Tls`], the
//! handle components hold.
//!
//! A context lives for one reconcile: [`crate::tls::TlsRegistry::context`] makes it in
//! [`Controller::components`], where servers request their pairs, and the components
//! given a clone of the handle read the material while they render. Requests are made
//! before anything renders, so a context knows every pair it must provide before the
//! rollout starts (and the internal context renders all of them into Secrets).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use windlass::Result;
use windlass::controller::{ComponentId, Components, Controller};
use windlass::session::Session;

use super::pki::{CertRequest, KeyCertPair};

/// Which pair: the server component's name and, for a server with several, a key name.
/// Displays as `<component>[-<key name>]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PairKey {
    /// The server component's name.
    pub component: String,
    /// Which of the component's pairs, when it has more than one.
    pub key_name: Option<String>,
}

impl PairKey {
    /// The pair of `component` named `key_name` (or its only pair).
    pub fn new(component: &str, key_name: Option<&str>) -> Self {
        PairKey {
            component: component.to_string(),
            key_name: key_name.map(str::to_string),
        }
    }
}

impl fmt::Display for PairKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key_name {
            Some(key) => write!(f, "{}-{key}", self.component),
            None => f.write_str(&self.component),
        }
    }
}

/// Where a pair is kept in the cluster, for pods to mount: a Secret and the keys of its
/// data that hold the certificate, the private key and the CA certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairSecret {
    /// The Secret's name, in the CR's namespace.
    pub name: String,
    /// The key holding the certificate (PEM).
    pub cert: String,
    /// The key holding the private key (PKCS#8 PEM).
    pub key: String,
    /// The key holding the CA certificate (PEM), if the Secret has it.
    pub ca: Option<String>,
}

/// A source of TLS material for one reconcile.
///
/// windlass-x has the `internal` context ([`crate::tls::InternalTls`]); register others
/// with [`crate::tls::TlsRegistry::register`], for example one that reads pairs a
/// certificate manager writes into Secrets.
#[async_trait]
pub trait TlsContext<C: Controller>: Send + Sync + 'static {
    /// Ask for a key/cert pair for the server `server` (called from
    /// [`Controller::components`]). A context may add components and edges: the internal
    /// one makes `server` depend on its CA component. A repeated request for the same
    /// [`PairKey`] is ignored with a warning.
    fn request_server_pair(
        &self,
        graph: &mut Components<C>,
        server: ComponentId,
        key_name: Option<&str>,
        request: CertRequest,
    ) -> Result<()>;

    /// The pair requested for `key`, from a component's render. A pair that was not
    /// requested is a config error; one that is not available yet is [`windlass::Error::precondition`].
    async fn server_pair(&self, session: &Session<C>, key: &PairKey) -> Result<KeyCertPair>;

    /// The CA certificate (PEM) clients trust to reach the servers.
    async fn ca_cert(&self, session: &Session<C>) -> Result<String>;

    /// The certificate a client presents, PEM; by default the CA certificate.
    async fn client_cert(&self, session: &Session<C>) -> Result<String> {
        self.ca_cert(session).await
    }

    /// Where the pair for `key` is kept for pods to mount, if the context keeps it in a
    /// Secret.
    fn pair_secret(&self, _session: &Session<C>, _key: &PairKey) -> Option<PairSecret> {
        None
    }
}

/// The handle to a reconcile's [`TlsContext`]: cheap to clone into each component that
/// needs TLS material.
pub struct Tls<C: Controller> {
    context: Arc<dyn TlsContext<C>>,
}

impl<C: Controller> Clone for Tls<C> {
    fn clone(&self) -> Self {
        Tls {
            context: self.context.clone(),
        }
    }
}

impl<C: Controller> fmt::Debug for Tls<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tls")
    }
}

impl<C: Controller> Tls<C> {
    /// A handle to `context`.
    pub fn new(context: impl TlsContext<C>) -> Self {
        Tls {
            context: Arc::new(context),
        }
    }

    /// The context behind the handle.
    pub fn context(&self) -> &dyn TlsContext<C> {
        self.context.as_ref()
    }

    /// Ask for a server pair for `server` (see [`TlsContext::request_server_pair`]);
    /// `key_name` tells apart several pairs of one component.
    pub fn request(
        &self,
        graph: &mut Components<C>,
        server: ComponentId,
        key_name: Option<&str>,
        request: CertRequest,
    ) -> Result<()> {
        self.context
            .request_server_pair(graph, server, key_name, request)
    }

    /// The pair requested for `component` (and `key_name`).
    pub async fn server_pair(
        &self,
        session: &Session<C>,
        component: &str,
        key_name: Option<&str>,
    ) -> Result<KeyCertPair> {
        self.context
            .server_pair(session, &PairKey::new(component, key_name))
            .await
    }

    /// `existing` unchanged when given (a pair the user supplied), else
    /// [`Tls::server_pair`].
    pub async fn server_pair_or(
        &self,
        session: &Session<C>,
        component: &str,
        key_name: Option<&str>,
        existing: Option<KeyCertPair>,
    ) -> Result<KeyCertPair> {
        match existing {
            Some(pair) => Ok(pair),
            None => self.server_pair(session, component, key_name).await,
        }
    }

    /// The CA certificate, PEM.
    pub async fn ca_pem(&self, session: &Session<C>) -> Result<String> {
        self.context.ca_cert(session).await
    }

    /// The client certificate, PEM (see [`TlsContext::client_cert`]).
    pub async fn client_cert(&self, session: &Session<C>) -> Result<String> {
        self.context.client_cert(session).await
    }

    /// Where the pair of `component` (and `key_name`) is kept for pods to mount.
    pub fn pair_secret(
        &self,
        session: &Session<C>,
        component: &str,
        key_name: Option<&str>,
    ) -> Option<PairSecret> {
        self.context
            .pair_secret(session, &PairKey::new(component, key_name))
    }
}
