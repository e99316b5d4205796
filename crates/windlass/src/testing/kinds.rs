//! The CR kinds tests use, [`Widget`] and the cluster-scoped [`Gadget`], and the
//! manifests of test objects: CRs in the test namespace and temporary patches.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::controller::PrimaryResource;
use crate::object::TypeRef;

/// The namespace test CRs live in.
pub const TEST_NAMESPACE: &str = "test";
/// The default name of a test CR.
pub const TEST_INSTANCE_NAME: &str = "test-instance";

/// A CR for tests: any spec, with an optional `version`.
#[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "test.windlass.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "crate::status::Status"
)]
pub struct WidgetSpec {
    /// The version the CR asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Any other spec fields.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A cluster-scoped CR for tests (no namespace): the same spec as [`Widget`]. Its
/// components name the namespace of each namespaced object they render.
#[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "test.windlass.dev",
    version = "v1",
    kind = "Gadget",
    status = "crate::status::Status"
)]
pub struct GadgetSpec {
    /// The version the CR asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Any other spec fields.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A manifest of a CR of kind `K` in the test namespace with this spec.
pub fn cr_manifest<K: PrimaryResource>(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": TEST_NAMESPACE},
        "spec": spec,
    })
}

/// A temporary patch object, to be stored in the cluster and listed in the CR's
/// `windlass.dev/temporary-patches` annotation.
pub fn make_patch(name: &str, patch_type: &str, tree: Value) -> Value {
    json!({
        "apiVersion": "test.windlass.dev/v1",
        "kind": crate::rollout::patch::DEFAULT_PATCH_KIND,
        "metadata": {"name": name, "namespace": TEST_NAMESPACE},
        "spec": {"patchType": patch_type, "patch": tree},
    })
}

/// The kind of [`make_patch`] objects, to register on a test cluster.
pub fn patch_kind() -> TypeRef {
    TypeRef::new(
        "test.windlass.dev/v1",
        crate::rollout::patch::DEFAULT_PATCH_KIND,
    )
}
