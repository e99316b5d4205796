//! Shared fixtures: a CR with a typed spec, and helpers to make workloads ready.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use windlass::object::ObjectRef;
use windlass::testing::TEST_NAMESPACE;

/// A CR with typed fields, to exercise parse errors.
#[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(group = "shop.example.com", version = "v1", kind = "Shop", namespaced)]
#[serde(rename_all = "camelCase")]
pub struct ShopSpec {
    pub version: Option<String>,
    pub replicas: u32,
    pub title: String,
    #[serde(default)]
    pub config_overrides: Option<Value>,
}

pub fn cm_ref(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "ConfigMap", Some(TEST_NAMESPACE), name)
}

pub fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "main", "image": "busybox"}]}}}})
}

pub fn deployment_ref(name: &str) -> ObjectRef {
    ObjectRef::new("apps/v1", "Deployment", Some(TEST_NAMESPACE), name)
}

/// The status a Deployment controller writes once the (one-replica) Deployment is available.
pub fn available() -> Value {
    json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1, "conditions": [
        {"type": "Available", "status": "True"},
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]})
}

/// The highest resourceVersion in the cluster: unchanged means nothing was written.
pub fn high_water_mark(objects: &[Value]) -> u64 {
    objects
        .iter()
        .filter_map(|o| o["metadata"]["resourceVersion"].as_str()?.parse().ok())
        .max()
        .unwrap_or(0)
}
