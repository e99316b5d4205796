//! Extensions for windlass operators, each behind a feature:
//!
//! - `postgres`, `redis`, `cos`: connections to the datastores a CR points at or the
//!   operator deploys, read from the CR's `spec.datastores` and the Secrets it names;
//! - `tls`: keys and certificates issued by an internal CA the operator keeps in a Secret,
//!   behind a registry so another source of TLS material can be plugged in;
//! - replica counts that keep an autoscaler's choice;
//! - `scheduling`: yaook-style scheduling keys (where a component's pods may run, as node
//!   affinity and tolerations merged into a pod template), per-node labelled configs, and
//!   guarded node labelling on a `kube::Client`.
//!
//! The dependency-hash restart lives in `windlass` itself, so every component can
//! use it with one option.

#[cfg(any(feature = "postgres", feature = "redis", feature = "cos"))]
pub mod datastore;
pub mod replicas;
#[cfg(feature = "scheduling")]
pub mod scheduling;
#[cfg(feature = "tls")]
pub mod tls;

/// The guide's chapter on datastores and TLS (`docs/08`), compiled: its Rust code blocks
/// are doctests of this crate, which they use. Not part of the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/08-datastores-and-tls.md")]
mod guide_datastores_and_tls {}
