//! Connections to the datastores an operator's applications use: Postgres, Redis and
//! S3-compatible object storage ("COS"), each behind its feature.
//!
//! A datastore either exists already, and the CR says how to reach it, or the operator
//! deploys it. Application components should not care which, so both end in the same
//! [`Connection`] value:
//!
//! - **from the CR**: `spec.datastores.<type>.connection`, or for one of several instances
//!   `spec.datastores.<type>.<name>.connection`, with camelCase keys naming the host, the
//!   port and the Secrets that hold credentials and the CA certificate ([`spec`] has the
//!   rules all types share);
//! - **from a component** the operator deploys: it implements [`Datastore`] to hand out the
//!   connection of what it deploys. Which implementation is deployed is chosen by the backend
//!   config's `<type>[.<name>].type`, among the implementations registered with
//!   [`Datastores::register`].
//!
//! [`Datastores`] is the registry that does both, keyed by datastore type and instance name.
//! It builds one connection per (type, name) per reconcile, however many components ask,
//! and starts afresh with the next reconcile, so a changed CR or Secret takes effect at once.
//!
//! The `postgres` module's docs show a controller and a component using it end to end.

pub mod spec;

#[cfg(feature = "cos")]
pub mod cos;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

mod registry;

use async_trait::async_trait;
use serde_json::Value;
use windlass::prelude::*;

pub use registry::{Datastores, InstanceConfig};
pub use spec::{ConnectionSpec, SecretReader, SecretString};

/// How to reach one datastore instance, whoever runs it.
///
/// A connection holds names (of the host, of the Secrets and their keys) and, when the
/// component that deployed the datastore knows them, the credentials themselves. Secret values
/// are read when a client needs them, through a [`SecretReader`] (a [`Session`]), so each
/// Secret is read at most once per reconcile. Its `Debug` never prints a secret value.
#[async_trait]
pub trait Connection: std::fmt::Debug + Send + Sync + Sized + 'static {
    /// The datastore type: the key under the CR's `spec.datastores` and in the backend
    /// config, e.g. `postgres`.
    const TYPE: &'static str;

    /// Read a connection from the CR's section for it: a config error
    /// naming each missing or malformed key, [`Error::precondition`] for a Secret that is not there
    /// yet (when the section points at a URI Secret).
    async fn from_spec(spec: &ConnectionSpec<'_>, secrets: &dyn SecretReader) -> Result<Self>;

    /// The section that reads back as this connection, e.g. for the CR of a subsystem that
    /// should use the same datastore.
    fn to_spec(&self) -> Value;
}

/// A component that deploys a datastore and hands out how to reach it.
///
/// Implementations are registered with [`Datastores::register`] under a type label; the
/// backend config's `<type>[.<name>].type` picks one when the CR names no datastore.
#[async_trait]
pub trait Datastore<C: Controller>: Component<C> {
    /// The connection it hands out.
    type Connection: Connection;

    /// The connection to what this component deploys. Return [`Error::precondition`] while it
    /// cannot be known yet.
    async fn connection(&self, session: &Session<C>) -> Result<Self::Connection>;
}
