//! The operator runtime: a long-lived process that turns watch events into reconciles
//! (oper8's watch manager, F159–F203, rebuilt on kube-runtime streams and tokio tasks).
//!
//! The files follow the path of an event:
//!
//! ```text
//! watcher/reflector per kind ─▶ event ─▶ filter (global, per controller, pause)
//!                                          │  map child → CR (owner ref / label)
//!                                          ▼
//!                                  queue (one run per CR, newest pending, back-off)
//!                                          │  leader?
//!                                          ▼
//!                              Reconciler over a cache-backed Cluster
//!                                          │
//!                                          ▼
//!                           status, Events, metrics ─▶ Outcome ─▶ queue
//! ```
//!
//! - [`source`]: watches, one per kind and namespace, filling the [`cache`].
//! - [`filter`]: which events start a reconcile.
//! - [`queue`]: when each CR is reconciled.
//! - [`leader`]: which replica may start reconciles.
//! - [`cache`]: the cluster a reconcile reads through, answered from the watches.
//! - [`metrics`]: what `/metrics` exports.
//! - [`heartbeat`]: the heartbeat file and its check, for exec liveness probes.
//! - [`health`]: the `/metrics`, `/healthz` and `/readyz` server, and what readiness waits for.

pub mod cache;
pub mod filter;
pub mod health;
pub mod heartbeat;
pub mod leader;
pub mod metrics;
pub mod queue;
pub mod source;
