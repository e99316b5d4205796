//! Details of status and error handling that windlass decides deliberately, one test each
//! where the decision is not pinned next to its code. The README lists them.

use std::sync::Arc;

use serde_json::json;
use windlass::cluster::MemoryCluster;
use windlass::config::OperatorConfig;
use windlass::testing::{
    Behaviour, DummyComponent, DummyController, FaultyCluster, Harness, Op, assert_condition,
};

use crate::support::{deployment, deployment_ref};

/// Conditions use Kubernetes' `lastTransitionTime`, moved only when the status
/// flips, and both verified and unverified component lists are written.
#[tokio::test]
async fn q11_transition_times_and_component_lists() {
    let controller = DummyController::new()
        .component(DummyComponent::new("a").with_configmap("a"), &[])
        .component(
            DummyComponent::new("b").behave(Behaviour::NeverVerifies),
            &[],
        );
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("x", json!({})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    for condition in status["conditions"].as_array().unwrap() {
        assert!(condition["lastTransitionTime"].is_string());
        assert!(condition.get("lastTransactionTime").is_none());
    }
    assert_eq!(
        status["componentStatus"]["verifiedComponents"],
        json!(["a"])
    );
    assert_eq!(
        status["componentStatus"]["unverifiedComponents"],
        json!(["b"])
    );
    // A later reconcile writes a new status (a new generation is observed) while Ready
    // stays False: the transition time must not move.
    let first = status["conditions"][0]["lastTransitionTime"].clone();
    // Timestamps have whole seconds: wait (at most 2 s) until "now" is a later one, so a
    // refreshed transition time would differ from the first.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let now = || {
        jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    while first.as_str() == Some(now().as_str()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock stands still"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let cr = env.apply_cr("x", json!({"bump": 1})).await;
    env.log.clear();
    env.reconcile(&cr).await;
    assert!(
        env.log
            .events()
            .iter()
            .any(|e| matches!(e, windlass::progress::Event::Status { written: true, .. })),
        "the status was rewritten"
    );
    let after = env.status(&cr).await;
    assert_eq!(after["conditions"][0]["observedGeneration"], 2);
    assert_eq!(
        after["conditions"][0]["lastTransitionTime"], first,
        "Ready stayed False"
    );
}

/// A failed read of a managed object is a cluster error in the status, not an
/// assertion that kills the reconcile.
#[tokio::test]
async fn q12_a_failed_read_of_a_managed_object_is_a_cluster_error() {
    let memory = Arc::new(MemoryCluster::new());
    let faulty = Arc::new(FaultyCluster::new(memory.clone()));
    let controller = DummyController::new().component(
        DummyComponent::new("web").with_object("d", deployment("web")),
        &[],
    );
    let env = Harness::on_cluster(
        controller,
        OperatorConfig::default(),
        memory,
        faulty.clone(),
    );
    let cr = env.apply_cr("x", json!({})).await;
    env.reconcile(&cr).await;
    assert!(env.get(&deployment_ref("web")).await.is_some());
    faulty.fail(
        Op::Get,
        Some("Deployment"),
        windlass::ClusterError::Forbidden("deployments is forbidden".into()),
    );
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", false, "ClusterError");
    assert!(
        status["conditions"][1]["message"]
            .as_str()
            .unwrap()
            .contains("forbidden"),
        "{status:#}"
    );
}
