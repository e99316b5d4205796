//! Behaviour of whole reconciles on the in-memory cluster: the rollout's phase algebra,
//! status bookkeeping, the reconcile pipeline, bad input and the quirks windlass fixes.

#![allow(clippy::unwrap_used)]

mod any_kind;
mod bad_input;
mod crd_versions;
mod dependency_hash;
mod events;
mod hostile;
mod operator_config;
mod quirks;
mod reconcile;
mod render;
mod rollout;
mod status;
mod support;
mod typed_status;
mod versions;
