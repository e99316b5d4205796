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
//! - [`filter`]: which events start a reconcile.
//! - [`leader`]: which replica may start reconciles.

pub mod filter;
pub mod leader;
