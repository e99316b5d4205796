//! windlass: a Kubernetes operator framework.
#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod object;
pub mod values;

pub use error::{ClusterError, Error, Result};
pub mod cluster;

/// The field manager windlass writes with (server-side apply) and stamps on managed objects.
pub const FIELD_MANAGER: &str = "windlass";
pub mod dag;
