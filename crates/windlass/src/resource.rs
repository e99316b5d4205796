//! What a CR type must be ([`PrimaryResource`]), which every other module speaks of and
//! which depends on nothing of windlass. Kept apart so that the controller, its
//! components, the session and the status can all name it without importing one another.

use std::fmt;

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

/// Whether objects of kind `K` live in a namespace, from its type.
pub fn is_namespaced<K: PrimaryResource>() -> bool {
    std::any::TypeId::of::<K::Scope>()
        != std::any::TypeId::of::<k8s_openapi::ClusterResourceScope>()
}

/// The CRD of a primary kind windlass's operator defines, or `None` for a kind it only
/// watches (a built-in kind, another operator's CRD).
pub type Crd = Option<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
>;
