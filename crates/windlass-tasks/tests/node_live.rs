//! Scheduling keys on a real control plane: node labels are read and written through
//! the API, and the scheduler's stand-in (windlass-testenv's node simulator, which honours
//! required node affinity, node selectors and taints) places pods the way the keys say.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, Taint};
use kube::api::{Api, Patch, PatchParams, PostParams};
use windlass_tasks::scheduling::{
    FORCED_DOWNSCALE_LABEL, SchedulingKey, SchedulingKeys, apply_forced_downscale, label_node,
    node_labels,
};
use windlass_testenv::{TestEnv, wait_for};

fn pod(name: &str, keys: Option<&SchedulingKeys>) -> Pod {
    let mut spec = PodSpec {
        containers: vec![Container {
            name: "main".into(),
            image: Some("busybox".into()),
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
    let (hypervisor, other) = (&nodes[0], &nodes[1]);
    let key = SchedulingKey::ComputeHypervisor.as_str();

    // Label and taint the hypervisor node as yaook's docs describe.
    label_node(
        &client,
        hypervisor,
        &BTreeMap::from([(key.to_string(), "true".to_string())]),
    )
    .await
    .unwrap();
    assert_eq!(
        node_labels(&client, hypervisor)
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
    node_api
        .patch(
            hypervisor,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"taints": [taint]}})),
        )
        .await
        .unwrap();

    // The reserved label is refused before anything is sent.
    let refused = label_node(
        &client,
        other,
        &BTreeMap::from([(FORCED_DOWNSCALE_LABEL.to_string(), "true".to_string())]),
    )
    .await;
    assert!(refused.is_err());
    assert!(
        !node_labels(&client, other)
            .await
            .unwrap()
            .contains_key(FORCED_DOWNSCALE_LABEL)
    );

    let pods: Api<Pod> = ns.api(client.clone());
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

    let bound = |p: Option<&Pod>| p.and_then(|p| p.spec.as_ref()?.node_name.clone()).is_some();
    wait_for(&pods, "compute", Duration::from_secs(60), bound)
        .await
        .unwrap();
    wait_for(&pods, "plain", Duration::from_secs(60), bound)
        .await
        .unwrap();
    let node_of = |p: Pod| p.spec.and_then(|s| s.node_name).unwrap_or_default();
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
    // Nothing matches the forced-downscale selector: the pod stays unscheduled.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(node_of(pods.get("downscaled").await.unwrap()), "");

    // Leave the shared nodes as they were for other tests of this binary.
    node_api
        .patch(
            hypervisor,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"taints": null}, "metadata": {"labels": {key: null}}}),
            ),
        )
        .await
        .unwrap();
}
