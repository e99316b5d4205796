//! Scheduling keys on a real control plane: node labels are read and written through
//! the API, and the scheduler's stand-in (windlass-testenv's node simulator, which honours
//! required node affinity, node selectors and taints) places pods the way the keys say.

#![cfg(feature = "scheduling")]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{
    Affinity, Container, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, PodSpec, Taint, Toleration,
};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use windlass_testenv::{TestEnv, restricted_container_security, restricted_pod_security, wait_for};
use windlass_x::scheduling::{
    FORCED_DOWNSCALE_LABEL, SchedulingKey, SchedulingKeys, apply_forced_downscale, label_node,
    node_labels,
};

fn pod(name: &str, keys: Option<&SchedulingKeys>) -> Pod {
    // Test namespaces enforce the `restricted` Pod Security Standard.
    let mut spec = PodSpec {
        security_context: Some(restricted_pod_security()),
        containers: vec![Container {
            name: "main".into(),
            image: Some("busybox".into()),
            security_context: Some(restricted_container_security()),
            ..Default::default()
        }],
        ..Default::default()
    };
    if let Some(keys) = keys {
        keys.apply_to_pod_spec(&mut spec);
    }
    let mut pod = Pod {
        spec: Some(spec),
        ..Default::default()
    };
    pod.metadata.name = Some(name.into());
    pod
}

/// Marks the node whose taint the test waits for: set in the same patch as the taint, so a
/// simulator that has seen the label has seen the taint too.
const TAINT_SEEN_LABEL: &str = "test.windlass.dev/taint-seen";

#[tokio::test]
async fn keys_place_pods_on_labelled_and_tainted_nodes() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let client = env.client().unwrap();
    let ns = env.namespace("scheduling").await.unwrap();
    let nodes = env.node_names().to_vec();
    assert!(
        nodes.len() >= 2,
        "the test environment registers at least two nodes"
    );
    let hypervisor = nodes[0].clone();
    let key = SchedulingKey::ComputeHypervisor.as_str();
    let node_api: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = ns.api(client.clone());

    let outcome = AssertUnwindSafe(place_pods(&client, &pods, &nodes, ns.name()))
        .catch_unwind()
        .await;

    // Leave the shared nodes as they were for other tests of this binary, pass or fail.
    node_api
        .patch(
            &hypervisor,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "spec": {"taints": null},
                "metadata": {"labels": {key: null, TAINT_SEEN_LABEL: null}},
            })),
        )
        .await
        .unwrap();
    let _ = pods.delete(CANARY, &DeleteParams::default()).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

const CANARY: &str = "taint-canary";

/// Pods put on each non-hypervisor node: more than the hypervisor will hold (canary, compute).
const BALLAST_PER_NODE: usize = 3;

/// A pod that may only run on `node` (required affinity on the node's name).
fn pinned(name: &str, node: &str) -> Pod {
    let mut pod = pod(name, None);
    pod.spec.as_mut().unwrap().affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![node.to_string()]),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    pod
}

async fn place_pods(client: &Client, pods: &Api<Pod>, nodes: &[String], marker: &str) {
    let (hypervisor, other) = (&nodes[0], &nodes[1]);
    let key = SchedulingKey::ComputeHypervisor.as_str();

    // Label and taint the hypervisor node as yaook's docs describe.
    label_node(
        client,
        hypervisor,
        &BTreeMap::from([(key.to_string(), "true".to_string())]),
    )
    .await
    .unwrap();
    assert_eq!(
        node_labels(client, hypervisor)
            .await
            .unwrap()
            .get(key)
            .map(String::as_str),
        Some("true")
    );
    let node_api: Api<Node> = Api::all(client.clone());
    let taint = Taint {
        key: key.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    // The taint and a marker label in one patch: one node version carries both.
    node_api
        .patch(
            hypervisor,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "spec": {"taints": [taint]},
                "metadata": {"labels": {TAINT_SEEN_LABEL: marker}},
            })),
        )
        .await
        .unwrap();

    // The reserved label is refused before anything is sent.
    let refused = label_node(
        client,
        other,
        &BTreeMap::from([(FORCED_DOWNSCALE_LABEL.to_string(), "true".to_string())]),
    )
    .await;
    assert!(refused.is_err());
    assert!(
        !node_labels(client, other)
            .await
            .unwrap()
            .contains_key(FORCED_DOWNSCALE_LABEL)
    );

    // The simulator schedules from its own node cache. A canary that only fits the marked node
    // (it selects the marker and tolerates the taint) is bound once that cache holds the
    // patched node, taint included; only then can "plain" be judged by the taint.
    let mut canary = pod(CANARY, None);
    {
        let spec = canary.spec.as_mut().unwrap();
        spec.node_selector = Some(BTreeMap::from([(
            TAINT_SEEN_LABEL.to_string(),
            marker.to_string(),
        )]));
        spec.tolerations = Some(vec![Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]);
    }
    pods.create(&PostParams::default(), &canary).await.unwrap();
    let bound = |p: Option<&Pod>| p.and_then(|p| p.spec.as_ref()?.node_name.clone()).is_some();
    wait_for(pods, CANARY, Duration::from_secs(60), bound)
        .await
        .unwrap();
    let node_of = |p: Pod| p.spec.and_then(|s| s.node_name).unwrap_or_default();
    assert_eq!(&node_of(pods.get(CANARY).await.unwrap()), hypervisor);

    // The simulator prefers the node with the fewest pods. The canary (and soon "compute")
    // sit on the hypervisor; ballast on every other node makes the hypervisor the one "plain"
    // would pick if the taint did not keep it away.
    for node in &nodes[1..] {
        for i in 0..BALLAST_PER_NODE {
            let name = format!("ballast-{node}-{i}");
            pods.create(&PostParams::default(), &pinned(&name, node))
                .await
                .unwrap();
            wait_for(pods, &name, Duration::from_secs(60), bound)
                .await
                .unwrap();
        }
    }

    let keys = SchedulingKeys::for_component(SchedulingKey::ComputeHypervisor);
    pods.create(&PostParams::default(), &pod("compute", Some(&keys)))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("plain", None))
        .await
        .unwrap();
    let mut downscaled = pod("downscaled", Some(&keys));
    apply_forced_downscale(downscaled.spec.as_mut().unwrap());
    pods.create(&PostParams::default(), &downscaled)
        .await
        .unwrap();

    wait_for(pods, "compute", Duration::from_secs(60), bound)
        .await
        .unwrap();
    wait_for(pods, "plain", Duration::from_secs(60), bound)
        .await
        .unwrap();
    assert_eq!(
        &node_of(pods.get("compute").await.unwrap()),
        hypervisor,
        "keyed pods run only on keyed nodes"
    );
    assert_ne!(
        &node_of(pods.get("plain").await.unwrap()),
        hypervisor,
        "the taint keeps other pods away"
    );
    // Nothing matches the forced-downscale selector: the scheduler judges the pod and
    // reports it unschedulable (only then does "not bound" prove anything).
    let unschedulable = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
    };
    let downscaled = wait_for(pods, "downscaled", Duration::from_secs(60), unschedulable)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(node_of(downscaled), "");
}
