//! The types every other module speaks of, which depend on nothing else of windlass: what
//! a CR type must be ([`PrimaryResource`]), the three types a controller names
//! ([`ControllerTypes`]) and what next after a reconcile ([`Action`](crate::Action)). Kept apart so that
//! the controller, its components, the session and the status can all name them without
//! importing one another: a [`Session`](crate::session::Session) and a
//! [`Component`](crate::component::Component) need a controller's types, not the
//! controller.

use std::fmt;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What a type must be to be a controller's primary resource: what
/// `#[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]` gives,
/// and what every k8s-openapi kind (`Namespace`, `ConfigMap`, …) already is.
///
/// `kube::CustomResourceExt` is not required: a controller may watch a built-in kind or
/// another operator's CRD. Only [`crate::cli::main`] needs the CRD, to print and install it.
pub trait PrimaryResource:
    kube::Resource<DynamicType = (), Scope: k8s_openapi::ResourceScope + 'static>
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
    T: kube::Resource<DynamicType = (), Scope: k8s_openapi::ResourceScope + 'static>
        + Clone
        + Serialize
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The resource, configuration and status types of a controller: what a
/// [`Session`](crate::session::Session) and a [`Component`](crate::component::Component)
/// are generic over. Every [`Controller`](crate::controller::Controller) has them (a
/// blanket implementation forwards its associated types); nothing else needs to implement
/// this.
pub trait ControllerTypes: Send + Sync + 'static {
    /// [`Controller::Resource`](crate::controller::Controller::Resource).
    type Resource: PrimaryResource;
    /// [`Controller::Config`](crate::controller::Controller::Config).
    type Config: Serialize + DeserializeOwned + Default + JsonSchema + Send + Sync + 'static;
    /// [`Controller::Status`](crate::controller::Controller::Status).
    type Status: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;
}

/// Whether objects of kind `K` live in a namespace, from its type.
pub(crate) fn is_namespaced<K: PrimaryResource>() -> bool {
    std::any::TypeId::of::<K::Scope>()
        != std::any::TypeId::of::<k8s_openapi::ClusterResourceScope>()
}

/// The CRD of a primary kind windlass's operator defines, or `None` for a kind it only
/// watches (a built-in kind, another operator's CRD).
pub type Crd = Option<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
>;
