//! A CRD in two API versions for the conversion tests: `v1` (the hub, the controller's type)
//! says more than `v1alpha1` (its `tier` has no place there). Both keep windlass's status
//! type: a status write goes through the status subresource, which keeps no annotation,
//! so a status field a version cannot hold could not be carried through it.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use windlass::crd::ApiVersions;

pub mod v1 {
    use super::*;

    /// The hub.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
    #[kube(
        group = "conversion.windlass.dev",
        version = "v1",
        kind = "Shop",
        namespaced,
        status = "windlass::status::Status"
    )]
    pub struct ShopSpec {
        pub replicas: i32,
        pub tier: String,
    }
}

pub mod v1alpha1 {
    use super::*;

    /// The old version: a size, no tier.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
    #[kube(
        group = "conversion.windlass.dev",
        version = "v1alpha1",
        kind = "Shop",
        namespaced,
        status = "windlass::status::Status"
    )]
    pub struct ShopSpec {
        pub size: i32,
    }
}

impl From<v1alpha1::Shop> for v1::Shop {
    fn from(old: v1alpha1::Shop) -> Self {
        v1::Shop {
            metadata: old.metadata,
            spec: v1::ShopSpec {
                replicas: old.spec.size,
                tier: "basic".to_string(),
            },
            status: old.status,
        }
    }
}

impl From<v1::Shop> for v1alpha1::Shop {
    fn from(new: v1::Shop) -> Self {
        v1alpha1::Shop {
            metadata: new.metadata,
            spec: v1alpha1::ShopSpec {
                size: new.spec.replicas,
            },
            status: new.status,
        }
    }
}

/// Both versions, stored as `storage`.
pub fn versions(storage: &str) -> ApiVersions<v1::Shop> {
    ApiVersions::hub().spoke::<v1alpha1::Shop>().stored(storage)
}
