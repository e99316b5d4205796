//! A CRD served in several API versions (`v1alpha1`, `v1beta1`, `v1`), one of them stored,
//! converted between each other by plain Rust.
//!
//! Each version is its own `#[derive(kube::CustomResource)]` type. One of them is the
//! **hub**, the controller's own resource type; every other version is a **spoke** that
//! converts to and from the hub with `TryFrom` (or `From`), so N versions need 2(N−1)
//! conversions, not N². windlass turns the types into one CRD ([`ApiVersions::crd`]) and
//! serves the conversions from the operator's webhook server
//! (the `webhook.*` configuration), the way the API server asks for them.
//!
//! ```
//! use kube::CustomResource;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use windlass::crd::ApiVersions;
//!
//! mod v1 {
//!     # use kube::CustomResource;
//!     # use schemars::JsonSchema;
//!     # use serde::{Deserialize, Serialize};
//!     #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
//!     #[kube(group = "shop.example.com", version = "v1", kind = "Shop", namespaced)]
//!     pub struct ShopSpec { pub replicas: i32, pub tier: String }
//! }
//! mod v1alpha1 {
//!     # use kube::CustomResource;
//!     # use schemars::JsonSchema;
//!     # use serde::{Deserialize, Serialize};
//!     #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
//!     #[kube(group = "shop.example.com", version = "v1alpha1", kind = "Shop", namespaced)]
//!     pub struct ShopSpec { pub size: i32 }
//! }
//!
//! // The spoke up to the hub: what v1alpha1 did not have gets a default.
//! impl From<v1alpha1::Shop> for v1::Shop {
//!     fn from(old: v1alpha1::Shop) -> Self {
//!         v1::Shop { metadata: old.metadata,
//!                    spec: v1::ShopSpec { replicas: old.spec.size, tier: "basic".into() } }
//!     }
//! }
//! // And down: `tier` is lost here, and windlass keeps it (see below).
//! impl From<v1::Shop> for v1alpha1::Shop {
//!     fn from(new: v1::Shop) -> Self {
//!         v1alpha1::Shop { metadata: new.metadata,
//!                          spec: v1alpha1::ShopSpec { size: new.spec.replicas } }
//!     }
//! }
//!
//! let versions = ApiVersions::<v1::Shop>::hub().spoke::<v1alpha1::Shop>();
//! let crd = versions.crd(&Default::default()).unwrap();
//! assert_eq!(crd.spec.versions.len(), 2);
//! ```
//!
//! ## What a conversion keeps
//!
//! Metadata is the object's own, whatever the conversion functions do with it: the API
//! server refuses a conversion that changes anything in it but labels and annotations.
//!
//! A field that a spoke cannot hold is not lost on a round trip through it (a client that
//! reads `v1alpha1` and writes it back): converting down, windlass stores the hub's spec and
//! status in the [`CONVERSION_DATA`] annotation when the round trip would lose something,
//! and converting up, it restores from there every field the client left as it was, as
//! Kubernetes' own API types do.

mod convert;
mod migrate;

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, WebhookClientConfig, WebhookConversion,
};
use kube::CustomResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use convert::ConversionError;
pub use migrate::{MigrationReport, migrate_storage};

/// The annotation a down-converted object carries when the version it is converted to
/// cannot hold all of the hub's fields: the hub's `spec` and `status`, as JSON.
pub const CONVERSION_DATA: &str = "windlass.dev/conversion-data";

/// The path the webhook server serves conversions on.
pub const CONVERSION_PATH: &str = "/convert";

/// One served version: its CRD of one version and its conversions to and from the hub's
/// JSON (identity for the hub itself).
#[derive(Clone)]
pub(crate) struct Served {
    /// `group/version`.
    pub(crate) api_version: String,
    crd: CustomResourceDefinition,
    pub(crate) to_hub: Convert,
    pub(crate) from_hub: Convert,
}

/// A conversion of one whole object between the JSON of two versions.
pub(crate) type Convert = fn(Value) -> Result<Value, ConversionError>;

/// The API versions of one CRD: the hub (the controller's resource type), the spokes, and
/// which version the API server stores. Built once at start-up and given to
/// [`cli::Operator::controller_with_versions`](crate::cli::Operator::controller_with_versions).
pub struct ApiVersions<Hub> {
    served: Vec<Served>,
    storage: String,
    _hub: PhantomData<fn() -> Hub>,
}

impl<Hub> Clone for ApiVersions<Hub> {
    fn clone(&self) -> Self {
        ApiVersions {
            served: self.served.clone(),
            storage: self.storage.clone(),
            _hub: PhantomData,
        }
    }
}

impl<Hub> fmt::Debug for ApiVersions<Hub> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiVersions")
            .field(
                "served",
                &self
                    .served
                    .iter()
                    .map(|s| &s.api_version)
                    .collect::<Vec<_>>(),
            )
            .field("storage", &self.storage)
            .finish()
    }
}

impl<Hub> ApiVersions<Hub>
where
    Hub: CustomResourceExt + kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
{
    /// The hub alone, stored. Add the older (or newer) versions with [`spoke`](Self::spoke).
    pub fn hub() -> Self {
        let crd = Hub::crd();
        ApiVersions {
            storage: version_name(&crd).to_string(),
            served: vec![Served {
                api_version: Hub::api_version(&()).into_owned(),
                crd,
                to_hub: convert::identity,
                from_hub: convert::identity,
            }],
            _hub: PhantomData,
        }
    }

    /// Also serve `Spoke`, another version of the same kind, converted to and from the hub
    /// with its `TryFrom` implementations (a `From` implementation gives one).
    pub fn spoke<Spoke>(mut self) -> Self
    where
        Spoke: CustomResourceExt
            + kube::Resource<DynamicType = ()>
            + Serialize
            + DeserializeOwned
            + TryFrom<Hub, Error: fmt::Display>,
        Hub: TryFrom<Spoke, Error: fmt::Display>,
    {
        self.served.push(Served {
            api_version: Spoke::api_version(&()).into_owned(),
            crd: Spoke::crd(),
            to_hub: convert::typed::<Spoke, Hub>,
            from_hub: convert::typed::<Hub, Spoke>,
        });
        self
    }

    /// Store objects as `version` (a version name such as `v1alpha1`) rather than as the
    /// hub. Changing it later needs a [storage migration](migrate_storage) before the old
    /// version can be removed.
    pub fn stored(mut self, version: &str) -> Self {
        self.storage = version.to_string();
        self
    }
}

impl<Hub> ApiVersions<Hub> {
    /// The same versions without the hub's type, for the webhook server, which serves the
    /// CRDs of every controller.
    pub(crate) fn erased(&self) -> ApiVersions<()> {
        ApiVersions {
            served: self.served.clone(),
            storage: self.storage.clone(),
            _hub: PhantomData,
        }
    }

    /// Whether `api_version` and `kind` name an object of this CRD.
    pub(crate) fn serves(&self, api_version: &str, kind: &str) -> bool {
        self.served
            .iter()
            .any(|s| s.api_version == api_version && s.crd.spec.names.kind == kind)
    }

    /// The version objects are stored as.
    pub fn storage_version(&self) -> &str {
        &self.storage
    }

    /// The served versions, as `group/version`, the hub first.
    pub fn api_versions(&self) -> impl Iterator<Item = &str> {
        self.served.iter().map(|s| s.api_version.as_str())
    }

    /// The one CRD of every version, `storage` marked, converted by the webhook `client`
    /// reaches when there is more than one version. The operator's command line fills
    /// `client` in from its configuration (`webhook.*`), without a CA bundle: the operator
    /// injects the bundle when it starts (the `webhook.*` configuration).
    ///
    /// # Errors
    /// When the types do not make one CRD: a storage version that is not served, versions
    /// of different groups, kinds or scopes.
    pub fn crd(
        &self,
        client: &WebhookClientConfig,
    ) -> Result<CustomResourceDefinition, ConversionError> {
        let crds = self.served.iter().map(|s| s.crd.clone()).collect();
        let mut crd = kube::core::crd::merge_crds(crds, &self.storage)
            .map_err(|e| ConversionError::Definition(e.to_string()))?;
        if self.served.len() > 1 {
            crd.spec.conversion = Some(CustomResourceConversion {
                strategy: "Webhook".to_string(),
                webhook: Some(WebhookConversion {
                    client_config: Some(client.clone()),
                    conversion_review_versions: vec!["v1".to_string()],
                }),
            });
        }
        Ok(crd)
    }

    /// The CRD's name (`plural.group`).
    pub fn crd_name(&self) -> String {
        self.served
            .first()
            .and_then(|s| s.crd.metadata.name.clone())
            .unwrap_or_default()
    }

    /// `object` (of any served version) as `api_version`: the conversion the webhook serves.
    ///
    /// # Errors
    /// [`ConversionError`] for a version this CRD does not serve, an object that is not of
    /// its type, or a conversion function that refused it.
    pub fn convert(&self, object: Value, api_version: &str) -> Result<Value, ConversionError> {
        convert::convert(&self.served, object, api_version)
    }

    /// Whether there is anything to convert (more than one version).
    pub fn converts(&self) -> bool {
        self.served.len() > 1
    }
}

/// The name of the one version of a single-version CRD.
fn version_name(crd: &CustomResourceDefinition) -> &str {
    crd.spec
        .versions
        .first()
        .map(|v| v.name.as_str())
        .unwrap_or_default()
}
