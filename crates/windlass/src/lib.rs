//! # windlass
//!
//! A Kubernetes operator framework: describe a custom resource and the tree of
//! **components** it owns; windlass turns every change of a CR into a **rollout**: render
//! each component's objects, apply them in dependency order, verify that they became
//! healthy, and write the outcome into the CR's status.
//!
//! The flow of one reconcile, one module per stage:
//!
//! ```text
//! CR ─▶ reconcile ─▶ session ─▶ controller::components() ─▶ rollout (dag runner)
//!        │                                                   ├─ deploy: render → apply (cluster)
//!        │                                                   └─ verify: per-kind readiness (verify)
//!        └─▶ status (Ready / Updating, componentStatus, versions) ─▶ Outcome
//! ```
//!
//! Start with [`controller`] and [`component`]; `examples/webapp` is a complete operator.
#![forbid(unsafe_code)]

pub mod annotations;
pub mod cli;
pub mod cluster;
pub mod component;
pub mod config;
pub mod controller;
pub(crate) mod dag;
pub(crate) mod dependency_hash;
pub mod drift;
pub(crate) mod dryrun;
mod dump;
pub mod error;
pub mod events;
pub(crate) mod finalizer;
#[cfg(doctest)]
mod guide;
pub(crate) mod install;
pub(crate) mod inventory;
pub mod logging;
pub(crate) mod managed;
pub mod object;
pub(crate) mod patch;
pub mod progress;
pub mod rbac;
pub mod reconcile;
pub mod reference;
pub mod resource;
pub(crate) mod rollout;
pub mod runtime;
pub mod session;
pub mod status;
// Test helpers, behind the `testing` feature (on for windlass's own tests through its
// self dev-dependency); `test` keeps the unit tests independent of that.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod values;
pub mod verify;

pub use error::{ClusterError, Error, Result};

/// The field manager windlass writes with (server-side apply).
pub const FIELD_MANAGER: &str = "windlass";

/// `async_trait`, re-exported: implementations of [`component::Component`] and
/// [`controller::Controller`] are written with `#[async_trait]`.
pub use async_trait::async_trait;

/// Everything an operator author needs, in one import.
pub mod prelude {
    pub use crate::async_trait;
    pub use crate::cluster::{Cluster, MemoryCluster, WriteMethod};
    pub use crate::component::{Component, ManagedObject, ResourceOptions, Resources};
    pub use crate::controller::{
        ComponentId, Components, Controller, NoConfig, PrimaryResource, Requeue, default_finalizer,
    };
    pub use crate::error::{Error, Result};
    pub use crate::reference::Ref;
    pub use crate::session::Session;
    pub use crate::status::{Status, Unmanaged};
    pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
}
