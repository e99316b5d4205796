//! Keys of the operator configuration whose effect shows in one reconcile. Together with
//! the tests `windlass::config`'s key table names, every key has one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use windlass::Action;
use windlass::cluster::MemoryCluster;
use windlass::config::OperatorConfig;
use windlass::object::ManifestExt;
use windlass::testing::{
    DummyComponent, DummyController, FaultyCluster, Harness, Op, assert_condition,
};

use crate::support::{cm_ref, deployment, deployment_ref};

fn one_configmap() -> DummyController {
    DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[])
}

#[tokio::test]
async fn the_version_field_and_override_say_which_version_a_cr_asks_for() {
    let mut config = OperatorConfig::default();
    config.versions.strict = true;
    config.versions.supported = vec!["2.0".into()];
    config.versions.field = "spec.release".into();
    let env = Harness::with_config(one_configmap(), config.clone()).await;
    // spec.version is not where this operator looks.
    let cr = env
        .apply_cr("a", json!({"version": "2.0", "release": "1.0"}))
        .await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("unsupported version 1.0"), "{message}");

    config.versions.version_override = Some("2.0".into());
    let env = Harness::with_config(one_configmap(), config).await;
    let cr = env.apply_cr("b", json!({"release": "1.0"})).await;
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
}

#[tokio::test]
async fn the_operator_version_is_written_to_the_status() {
    let mut config = OperatorConfig::default();
    config.status.operator_version = Some("7.1.2".into());
    let env = Harness::with_config(one_configmap(), config).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    assert_eq!(env.status(&cr).await["operatorVersion"], "7.1.2");

    let env = Harness::new(one_configmap()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    assert!(env.status(&cr).await.get("operatorVersion").is_none());
}

#[tokio::test]
async fn without_the_internal_name_annotation_applied_objects_carry_none() {
    let mut config = OperatorConfig::default();
    config.rollout.internal_name_annotation = false;
    let env = Harness::with_config(one_configmap(), config).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    let cm = env.get(&cm_ref("a-web")).await.unwrap();
    assert_eq!(cm.annotation("windlass.dev/internal-name"), None, "{cm}");

    let env = Harness::new(one_configmap()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    let cm = env.get(&cm_ref("a-web")).await.unwrap();
    assert!(
        cm.annotation("windlass.dev/internal-name").is_some(),
        "{cm}"
    );
}

#[tokio::test]
async fn with_shards_every_applied_object_carries_its_crs_shard() {
    let mut config = OperatorConfig::default();
    config.sharding.shards = 8;
    let sharding = config.sharding.clone();
    let env = Harness::with_config(one_configmap(), config).await;
    let mut seen = std::collections::BTreeSet::new();
    for name in ["a", "b", "c", "d", "e", "f"] {
        let cr = env.apply_cr(name, json!({})).await;
        env.reconcile(&cr).await;
        let uid = env.get(&cr).await.unwrap().uid().unwrap().to_string();
        let shard = sharding.shard_of(&uid).unwrap();
        let cm = env.get(&cm_ref(&format!("{name}-web"))).await.unwrap();
        assert_eq!(
            cm.label(windlass::annotations::SHARD),
            Some(shard.to_string().as_str()),
            "{cm}"
        );
        seen.insert(shard);
    }
    assert!(
        seen.len() > 1,
        "six uids, all in one of eight shards: {seen:?}"
    );
    // Off, nothing carries a shard.
    let env = Harness::new(one_configmap()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    let cm = env.get(&cm_ref("a-web")).await.unwrap();
    assert_eq!(cm.label(windlass::annotations::SHARD), None, "{cm}");
}

#[tokio::test]
async fn conflict_retries_wait_the_backoff_times_the_attempt() {
    let memory = Arc::new(MemoryCluster::new());
    let faulty = Arc::new(FaultyCluster::new(memory.clone()));
    let mut config = OperatorConfig::default();
    config.rollout.conflict_backoff = Duration::from_millis(100).into();
    let env = Harness::on_cluster(one_configmap(), config, memory, faulty.clone());
    let cr = env.apply_cr("a", json!({})).await;
    let conflict = windlass::ClusterError::Conflict {
        object: "cm".into(),
        message: "stale".into(),
    };
    faulty.fail_times(Op::Apply, Some("ConfigMap"), conflict, 3);
    let started = Instant::now();
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{report:?}");
    // 100 ms, then 200 ms, then 300 ms.
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(600), "{waited:?}");
}

#[tokio::test]
async fn requeue_after_is_how_long_a_waiting_cr_waits() {
    let mut config = OperatorConfig::default();
    config.runtime.requeue_after = Duration::from_secs(7).into();
    let controller = DummyController::new().component(
        DummyComponent::new("web").with_object("deployment", deployment("web")),
        &[],
    );
    let env = Harness::with_config(controller, config).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::RequeueAfter(Duration::from_secs(7)));
    assert!(env.get(&deployment_ref("web")).await.is_some());
}

#[tokio::test]
async fn disabled_components_are_dumped_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let controller = || {
        DummyController::new()
            .component(DummyComponent::new("web").with_configmap("web"), &[])
            .optional_component(
                DummyComponent::new("cache").with_configmap("cache"),
                "cache",
            )
    };
    let mut config = OperatorConfig {
        dry_run: true,
        ..OperatorConfig::default()
    };
    config.rollout.dump_dir = Some(dir.path().join("plain"));
    let env = Harness::with_config(controller(), config.clone()).await;
    let cr = env.apply_cr("a", json!({"cache": false})).await;
    env.reconcile(&cr).await;
    let crs = "test.windlass.dev.v1.widget/a";
    assert!(dir.path().join("plain").join(crs).join("web").is_dir());
    assert!(!dir.path().join("plain").join(crs).join("DISABLED").exists());

    config.rollout.dump_dir = Some(dir.path().join("all"));
    config.rollout.dump_disabled = true;
    let env = Harness::with_config(controller(), config).await;
    let cr = env.apply_cr("a", json!({"cache": false})).await;
    env.reconcile(&cr).await;
    let disabled = dir
        .path()
        .join("all")
        .join(crs)
        .join("DISABLED")
        .join("cache");
    assert!(disabled.is_dir(), "{}", disabled.display());
}
