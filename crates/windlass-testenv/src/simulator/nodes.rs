//! Rule 1: the simulated Nodes, registered Ready with this machine's architecture, and their
//! Leases, renewed so that the node lifecycle controller keeps them Ready.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::Api;
use kube::Client;
use kube::api::{Patch, PatchParams, PostParams};

use super::SIMULATED_NODE_LABEL;
use crate::error::{Error, Result};

const FIELD_MANAGER: &str = "windlass-node-simulator";
const LEASE_RENEW: Duration = Duration::from_secs(10);
const LEASE_DURATION_SECONDS: i32 = 40;

/// Registers the simulated Node `name`, or takes over one left by an earlier simulator.
pub(super) async fn register_node(api: &Api<Node>, name: &str) -> Result<()> {
    let node = simulated_node(name);
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => Ok(()),
        // Left over from an earlier simulator on this cluster: take it over.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let patch = serde_json::json!({ "status": node.status });
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| {
                    Error::kube(format!("updating the status of simulated node {name}"), e)
                })
        }
        Err(e) => Err(Error::kube(format!("registering simulated node {name}"), e)),
    }
}

/// A Ready Node called `name`, with generous capacity and the well-known labels.
pub(super) fn simulated_node(name: &str) -> Node {
    let quantity = |s: &str| Quantity(s.to_string());
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", "32"),
        ("memory", "256Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "1Ti"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), quantity(v)))
    .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [
                    ("kubernetes.io/hostname", name),
                    ("kubernetes.io/os", "linux"),
                    ("kubernetes.io/arch", kubernetes_arch()),
                    (SIMULATED_NODE_LABEL, "true"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(node_conditions()),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".to_string(),
                    address: "127.0.0.1".to_string(),
                },
                NodeAddress {
                    type_: "Hostname".to_string(),
                    address: name.to_string(),
                },
            ]),
            node_info: Some(node_info(name)),
            ..Default::default()
        }),
    }
}

/// A healthy kubelet's Node conditions: Ready, and no memory, disk or PID pressure.
fn node_conditions() -> Vec<NodeCondition> {
    let now = Time(jiff::Timestamp::now());
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    vec![
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "windlass node simulator is posting ready status",
        ),
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "simulated",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "simulated",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "simulated",
        ),
    ]
}

/// What the Node says of its system: this machine's architecture, Linux, simulated versions.
fn node_info(name: &str) -> NodeSystemInfo {
    NodeSystemInfo {
        architecture: kubernetes_arch().to_string(),
        operating_system: "linux".to_string(),
        os_image: "windlass node simulator".to_string(),
        kernel_version: "simulated".to_string(),
        container_runtime_version: "windlass-sim://0.1".to_string(),
        kubelet_version: "v0.0.0-windlass-sim".to_string(),
        kube_proxy_version: "v0.0.0-windlass-sim".to_string(),
        machine_id: name.to_string(),
        system_uuid: name.to_string(),
        boot_id: name.to_string(),
        ..Default::default()
    }
}

/// This machine's architecture as Kubernetes names it: Go's `GOARCH` (`amd64`, `arm64`, …), which
/// is what the `kubernetes.io/arch` label and `nodeInfo.architecture` carry on real nodes and what
/// Pods select on. Rust's names (`x86_64`, `aarch64`, …) differ for most architectures.
pub(super) fn kubernetes_arch() -> &'static str {
    go_arch(std::env::consts::ARCH, cfg!(target_endian = "little"))
}

/// Go's `GOARCH` for Rust's `target_arch` name (unknown names are passed through).
pub(super) fn go_arch(rust_arch: &'static str, little_endian: bool) -> &'static str {
    match (rust_arch, little_endian) {
        ("x86_64", _) => "amd64",
        ("x86", _) => "386",
        ("aarch64", true) => "arm64",
        ("aarch64", false) => "arm64be",
        ("arm", _) => "arm",
        ("powerpc64", true) => "ppc64le",
        ("powerpc64", false) => "ppc64",
        ("powerpc", _) => "ppc",
        ("s390x", _) => "s390x",
        ("riscv64", _) => "riscv64",
        ("loongarch64", _) => "loong64",
        ("mips64", true) => "mips64le",
        ("mips64", false) => "mips64",
        ("mips", true) => "mipsle",
        ("mips", false) => "mips",
        ("sparc64", _) => "sparc64",
        ("wasm32", _) => "wasm",
        (other, _) => other,
    }
}

/// Renews the Lease of each Node in `kube-node-lease` every [`LEASE_RENEW`], as a kubelet
/// does, owned by its Node once its uid is known; runs until the simulator is dropped.
pub(super) async fn renew_leases(client: Client, node_names: Vec<String>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    let mut uids: BTreeMap<String, String> = BTreeMap::new();
    loop {
        for name in &node_names {
            if !uids.contains_key(name)
                && let Ok(node) = nodes.get(name).await
                && let Some(uid) = node.metadata.uid
            {
                uids.insert(name.clone(), uid);
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("kube-node-lease".to_string()),
                    // As a kubelet does: the Lease goes away with its Node.
                    owner_references: uids.get(name).map(|uid| {
                        vec![OwnerReference {
                            api_version: "v1".to_string(),
                            kind: "Node".to_string(),
                            name: name.clone(),
                            uid: uid.clone(),
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.clone()),
                    lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                    renew_time: Some(MicroTime(jiff::Timestamp::now())),
                    ..Default::default()
                }),
            };
            let params = PatchParams::apply(FIELD_MANAGER).force();
            if let Err(e) = leases.patch(name, &params, &Patch::Apply(&lease)).await {
                tracing::debug!("renewing the lease of simulated node {name}: {e}");
            }
        }
        tokio::time::sleep(LEASE_RENEW).await;
    }
}

/// Whether the Node's `Ready` condition is true.
pub(super) fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether the Node has a taint with `key`.
pub(super) fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}
