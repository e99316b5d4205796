//! Status bookkeeping and the requeue loop.

use serde_json::json;
use windlass::Action;
use windlass::testing::{Behaviour, DummyComponent, DummyController, Harness, assert_condition};

use crate::support::{available, deployment, deployment_ref, high_water_mark};

fn web() -> DummyController {
    DummyController::new().component(
        DummyComponent::new("web").with_object("deployment", deployment("web")),
        &[],
    )
}

#[tokio::test]
async fn initializing_until_the_first_version_is_verified() {
    let env = Harness::new(web()).await;
    let cr = env.apply_cr("a", json!({"version": "1.0"})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "Initializing");
    assert_condition(&status, "Updating", true, "VerifyWait");
    assert_eq!(status["widgetStatus"], "InProgress");
    assert_eq!(status["versions"].get("reconciled"), None);

    // Still not ready: still Initializing (not InProgress), and still no version.
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", false, "Initializing");

    env.set_status(&deployment_ref("web"), available()).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", true, "Stable");
    assert_condition(&status, "Updating", false, "Stable");
    assert_eq!(status["versions"]["reconciled"], "1.0");
    assert_eq!(status["widgetStatus"], "Completed");
    assert_eq!(status["componentStatus"]["verified"], "1/1");
}

#[tokio::test]
async fn a_version_change_is_announced_and_recorded_only_once_verified() {
    let env = Harness::new(web()).await;
    let cr = env.apply_cr("a", json!({"version": "1.0"})).await;
    env.reconcile(&cr).await;
    env.set_status(&deployment_ref("web"), available()).await;
    env.reconcile(&cr).await;
    assert_eq!(env.status(&cr).await["versions"]["reconciled"], "1.0");

    // The web deployment becomes unavailable while version 2.0 rolls out.
    env.set_status(
        &deployment_ref("web"),
        json!({"conditions": [{"type": "Available", "status": "False"}]}),
    )
    .await;
    let cr = env.apply_cr("a", json!({"version": "2.0"})).await;
    env.log.clear();
    env.reconcile(&cr).await;
    let statuses: Vec<(String, String)> = env
        .log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            windlass::progress::Event::Status {
                ready, updating, ..
            } => Some((ready, updating)),
            _ => None,
        })
        .collect();
    // One status write per reconcile: the start of the version change (Ready=InProgress)
    // and the outcome of its first pass (Updating=VerifyWait) land together.
    assert_eq!(
        statuses,
        [("InProgress".to_string(), "VerifyWait".to_string())]
    );
    let status = env.status(&cr).await;
    assert_eq!(
        status["versions"]["reconciled"], "1.0",
        "still the last verified version"
    );
    assert_eq!(status["widgetStatus"], "InProgress");

    env.set_status(&deployment_ref("web"), available()).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(status["versions"]["reconciled"], "2.0");
}

#[tokio::test]
async fn a_steady_state_reconcile_writes_nothing() {
    let env = Harness::new(web()).await;
    let cr = env.apply_cr("a", json!({"version": "1.0"})).await;
    env.reconcile(&cr).await;
    env.set_status(&deployment_ref("web"), available()).await;
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");

    let before = high_water_mark(&env.memory.objects());
    env.log.clear();
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done);
    assert_eq!(
        high_water_mark(&env.memory.objects()),
        before,
        "no object changed"
    );
    assert!(env.log.applied().is_empty(), "no apply was sent");
    assert!(
        env.log
            .events()
            .iter()
            .all(|e| !matches!(e, windlass::progress::Event::Status { written: true, .. }))
    );
}

#[tokio::test]
async fn foreign_conditions_and_user_status_fields_survive_reconciles() {
    let env = Harness::new(web()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.set_status(&cr, json!({"conditions": [{"type": "Backup", "status": "True", "reason": "Done"}], "widgetStatus": "Frozen", "note": "hi"})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Backup")
    );
    assert_eq!(status["widgetStatus"], "Frozen");
    assert_eq!(status["note"], "hi");
}

#[tokio::test]
async fn requeue_follows_the_status_read_back() {
    // A component that never verifies: the default should_requeue reads the status back
    // and keeps requeueing after runtime.requeue-after.
    let controller = DummyController::new().component(
        DummyComponent::new("w").behave(Behaviour::NeverVerifies),
        &[],
    );
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(
        report.outcome,
        Action::RequeueAfter(std::time::Duration::from_secs(60))
    );

    // Once stable: done.
    let env = Harness::new(
        DummyController::new().component(DummyComponent::new("w").with_configmap("w"), &[]),
    )
    .await;
    let cr = env.apply_cr("a", json!({"version": "3"})).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
}

#[tokio::test]
async fn observed_generation_is_recorded_on_conditions() {
    let env = Harness::new(web()).await;
    let cr = env.apply_cr("a", json!({"version": "1"})).await;
    env.reconcile(&cr).await;
    assert_eq!(
        env.status(&cr).await["conditions"][0]["observedGeneration"],
        1
    );
    let cr = env.apply_cr("a", json!({"version": "2"})).await;
    env.reconcile(&cr).await;
    assert_eq!(
        env.status(&cr).await["conditions"][1]["observedGeneration"],
        2
    );
}

#[tokio::test]
async fn a_cr_without_a_version_settles_and_writes_nothing_more() {
    let env = Harness::new(web()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    env.set_status(&deployment_ref("web"), available()).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    let settled = env.status(&cr).await;
    assert_condition(&settled, "Ready", true, "Stable");

    let before = high_water_mark(&env.memory.objects());
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(
        high_water_mark(&env.memory.objects()),
        before,
        "no status flapping between reconciles"
    );
    assert_eq!(env.status(&cr).await, settled);
}

#[tokio::test]
async fn dropping_the_version_is_not_a_version_change() {
    let env = Harness::new(web()).await;
    let cr = env.apply_cr("a", json!({"version": "1"})).await;
    env.reconcile(&cr).await;
    env.set_status(&deployment_ref("web"), available()).await;
    env.reconcile(&cr).await;
    let cr = env.apply_cr("a", json!({"version": null})).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "no endless requeue");
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", false, "Stable");
    assert_condition(&status, "Ready", true, "Stable");
}

#[tokio::test]
async fn without_managed_status_the_rollout_decides_the_requeue() {
    use windlass::config::OperatorConfig;
    let mut config = OperatorConfig::default();
    config.status.manage = false;
    let env =
        Harness::with_config(web().finalizer("test.windlass.dev/cleanup", vec![]), config).await;
    let cr = env.apply_cr("a", json!({"version": "1"})).await;
    assert!(
        matches!(env.reconcile(&cr).await.outcome, Action::RequeueAfter(_)),
        "not ready yet"
    );
    env.set_status(&deployment_ref("web"), available()).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(
        env.status(&cr).await,
        serde_json::Value::Null,
        "no status written"
    );
    // Deleting it is not held forever by a status that is never written.
    env.delete(&cr).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
    assert!(env.get(&cr).await.is_none());
}
