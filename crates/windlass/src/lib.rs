//! # windlass
//!
//! A Kubernetes operator framework: describe a custom resource and the tree of
//! **components** it owns; windlass turns every change of a CR into a **rollout**: render
//! each component's objects, apply them in dependency order, verify that they became
//! healthy, and write the outcome into the CR's status.
//!
//! ```text
//! watch event ─▶ runtime (route ─▶ queue ─▶ worker) ─▶ reconcile ─▶ rollout ─▶ status ─▶ Action
//!                                                       (session)    (dag: deploy, then verify)
//! ```
//!
//! ## Where things are
//!
//! What an operator is written with (start with [`controller`] and [`component`];
//! `examples/webapp` is a complete operator):
//!
//! - [`controller`]: a CR kind, the graph of components it builds for a CR, its hooks.
//! - [`component`]: renders objects into [`component::Resources`] and verifies them.
//! - [`session`]: one reconcile as components see it: the CR, its config, its status, reads.
//! - [`status`]: windlass's part of a CR's status: conditions, reasons, inventory.
//! - [`mod@reference`], [`verify`], [`resource`], [`error`]: typed names, readiness rules, the
//!   types every module names (including [`Action`], what next), errors.
//! - [`watch`]: what a controller watches besides its own kind, and which events count.
//! - [`version`]: the application versions a controller rolls out, per CR.
//! - [`crd`]: a CRD in several API versions, converted by plain Rust; [`admission`]:
//!   admission webhooks from Rust functions. Both are served by `webhook/` (internal): the
//!   operator's HTTPS server and the certificate it keeps itself.
//!
//! One reconcile, in the order it runs:
//!
//! - [`runtime`]: watches → route → queue → worker, leader election, health, metrics.
//! - [`reconcile`]: one CR: read it, build the session and the graph, the finalizers, the
//!   status write.
//! - `rollout/` (internal): the component DAG, deployed then verified: render, temporary
//!   patches, apply with drift detection, dependency hashes, dumps, pruning.
//! - [`cluster`]: the Kubernetes API, live (kube-rs) or in memory.
//!
//! Around it: [`config`] (the operator's configuration), [`events`], [`progress`] and
//! [`logging`] (what a reconcile reports), [`cli`] (the operator binary: run, dry run,
//! describe, install manifests, RBAC), `testing` (feature `testing`: an in-memory harness for tests).
//! Shared helpers: [`object`], [`values`], [`annotations`]. Internal: `dag` (a generic DAG
//! and its runner), `dryrun` (the in-memory driver of `run --dry-run`), `managed`.
//!
//! Public besides the authoring API is what extends windlass: [`cluster::Cluster`] (a
//! cluster of your own), [`watch::filter::Filter`] (event filters), [`events::EventSink`]
//! and [`progress::Observer`] (where reports go), [`runtime::Manager`] (your own `main`),
//! [`cli::Operator`] (several controllers in one binary).
#![forbid(unsafe_code)]
// Without the command line, what only it uses (configuration layering, the oper8
// translation, graph printing, the heartbeat check) is unused. The default build, which
// CI lints, keeps dead-code warnings meaningful.
#![cfg_attr(not(feature = "cli"), allow(dead_code, unused_imports))]

pub mod admission;
pub mod annotations;
#[cfg(feature = "cli")]
pub mod cli;
pub mod cluster;
pub mod component;
pub mod config;
pub mod controller;
pub mod crd;
pub(crate) mod dag;
#[cfg(feature = "cli")]
pub(crate) mod dryrun;
pub mod error;
pub mod events;
#[cfg(doctest)]
mod guide;
pub mod logging;
pub(crate) mod managed;
pub mod object;
pub mod progress;
pub mod reconcile;
pub mod reference;
pub mod resource;
pub(crate) mod rollout;
pub mod runtime;
pub mod session;
pub mod status;
#[cfg(test)]
mod strategies;
pub(crate) mod webhook;
// Test helpers, behind the `testing` feature (on for windlass's own tests through its
// self dev-dependency); `test` keeps the unit tests independent of that.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod values;
pub mod verify;
pub mod version;
pub mod watch;

pub use error::{ClusterError, Error, Result};
/// What next for a CR after a reconcile: `Done` (nothing until the CR or something it owns
/// changes), `RequeueAfter(delay)` (not a failure), or `Retry` with back-off after an error.
/// The queue's own type, so nothing is translated between reconcile and queue.
pub use windlass_tasks::queue::Action;

/// The field manager windlass writes with (server-side apply).
pub const FIELD_MANAGER: &str = "windlass";

/// `async_trait`, re-exported: implementations of [`component::Component`] and
/// [`controller::Controller`] are written with `#[async_trait]`.
pub use async_trait::async_trait;

/// Everything an operator author needs, in one import.
pub mod prelude {
    pub use crate::Action;
    pub use crate::async_trait;
    pub use crate::cluster::{Cluster, MemoryCluster, WriteMethod};
    pub use crate::component::{Component, ManagedObject, ResourceOptions, Resources};
    pub use crate::controller::{
        ComponentId, Components, Controller, Finalize, NoConfig, PrimaryResource, default_finalizer,
    };
    pub use crate::error::{Error, Result};
    pub use crate::reference::Ref;
    pub use crate::session::Session;
    pub use crate::status::{Status, Unmanaged};
    pub use crate::verify::Readiness;
    pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
}
