//! The two types every other module speaks of and that depend on nothing of windlass:
//! what a CR type must be ([`PrimaryResource`]) and whether to reconcile it again
//! ([`Requeue`]). Kept apart so that the controller, its components, the session and the
//! status can all name them without importing one another.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// What a CR type must be to be reconciled by windlass: what
/// `#[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]` gives.
pub trait PrimaryResource:
    kube::Resource<DynamicType = ()>
    + kube::CustomResourceExt
    + Clone
    + Serialize
    + DeserializeOwned
    + fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> PrimaryResource for T where
    T: kube::Resource<DynamicType = ()>
        + kube::CustomResourceExt
        + Clone
        + Serialize
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// Whether and when to reconcile the CR again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Not until something changes.
    No,
    /// After this delay.
    After(Duration),
}
