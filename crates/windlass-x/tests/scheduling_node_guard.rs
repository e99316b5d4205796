//! The node-label guard refuses before any request is sent. The client is real but points at a
//! closed loopback port: had a request gone out, the error would be a connection error.
#![cfg(feature = "scheduling")]

use std::collections::BTreeMap;

use kube::config::{KubeConfigOptions, Kubeconfig};
use windlass_x::scheduling::{
    FORCED_DOWNSCALE_LABEL, NodeError, SchedulingError, label_node, node_labels,
};

async fn client_to_nowhere() -> kube::Client {
    let yaml = r#"
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "http://127.0.0.1:9"}
users:
- name: nobody
  user: {token: "none"}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: nobody}
current-context: nowhere
"#;
    let kubeconfig = match Kubeconfig::from_yaml(yaml) {
        Ok(k) => k,
        Err(e) => panic!("test kubeconfig: {e}"),
    };
    let config =
        match kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await
        {
            Ok(c) => c,
            Err(e) => panic!("test config: {e}"),
        };
    match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => panic!("test client: {e}"),
    }
}

#[tokio::test]
async fn the_downscale_label_is_refused_before_anything_is_sent() {
    let client = client_to_nowhere().await;
    let labels = BTreeMap::from([(FORCED_DOWNSCALE_LABEL.to_string(), "true".to_string())]);
    match label_node(&client, "worker-1", &labels).await {
        Err(NodeError::Refused { node, source }) => {
            assert_eq!(node, "worker-1");
            assert_eq!(source, SchedulingError::ReservedLabel);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let bad = BTreeMap::from([("Bad_Prefix/x".to_string(), "v".to_string())]);
    assert!(matches!(
        label_node(&client, "worker-1", &bad).await,
        Err(NodeError::Refused { .. })
    ));
}

#[tokio::test]
async fn empty_node_names_are_refused_and_a_dead_server_is_an_api_error() {
    let client = client_to_nowhere().await;
    assert!(matches!(
        node_labels(&client, "").await,
        Err(NodeError::EmptyName)
    ));
    let ok = BTreeMap::from([("compute.yaook.cloud/hypervisor".to_string(), "".to_string())]);
    assert!(matches!(
        label_node(&client, "", &ok).await,
        Err(NodeError::EmptyName)
    ));
    // A valid request does go out, and the closed port answers with a connection error.
    match node_labels(&client, "worker-1").await {
        Err(NodeError::Api { node, .. }) => assert_eq!(node, "worker-1"),
        other => panic!("expected an API error, got {other:?}"),
    }
}
