//! Application versions: a controller declares the versions it rolls out and builds each
//! version's graph; CRs asking for different versions are served side by side.

use serde_json::json;
use windlass::config::OperatorConfig;
use windlass::testing::{Harness, assert_condition};

use crate::support::cm_ref;

#[path = "../shared/versioned_shop.rs"]
mod versioned_shop;
use versioned_shop::Shop;

#[tokio::test]
async fn crs_asking_for_different_versions_get_their_versions_graph_and_an_upgrade_prunes_the_old_one()
 {
    let env = Harness::new(Shop).await;
    let a = env.apply_cr("a", json!({"version": "1.2.0"})).await;
    let b = env.apply_cr("b", json!({"version": "2.0.0"})).await;
    env.reconcile(&a).await;
    env.reconcile(&b).await;
    assert!(env.get(&cm_ref("a-api-v1")).await.is_some());
    assert!(env.get(&cm_ref("a-api-v2")).await.is_none());
    assert!(env.get(&cm_ref("b-api-v2")).await.is_some());
    assert!(env.get(&cm_ref("b-api-v1")).await.is_none());
    let status = env.status(&a).await;
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(status["versions"]["reconciled"], "1.2.0");
    assert_eq!(
        status["versions"]["available"]["versions"],
        json!([{"name": "^1"}, {"name": "^2"}])
    );

    // a moves to 2.x: one rollout applies 2.x's API and deletes what 1.x's applied.
    env.apply_cr("a", json!({"version": "2.1.0"})).await;
    env.reconcile(&a).await;
    assert!(env.get(&cm_ref("a-api-v2")).await.is_some());
    assert!(
        env.get(&cm_ref("a-api-v1")).await.is_none(),
        "1.x's leftovers are pruned"
    );
    assert!(env.get(&cm_ref("a-web")).await.is_some());
    let status = env.status(&a).await;
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(status["versions"]["reconciled"], "2.1.0");
}

#[tokio::test]
async fn strict_versioning_refuses_a_version_no_declared_range_supports_and_names_them() {
    let mut config = OperatorConfig::default();
    config.versions.strict = true;
    let env = Harness::with_config(Shop, config).await;
    let cr = env.apply_cr("c", json!({"version": "3.0.0"})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("unsupported version 3.0.0") && message.contains("^1, ^2"),
        "{message}"
    );
    assert!(
        env.get(&cm_ref("c-web")).await.is_none(),
        "nothing rolled out"
    );

    // Without a version at all.
    let cr = env.apply_cr("d", json!({})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");

    // The configuration narrows what the controller declares.
    let mut config = OperatorConfig::default();
    config.versions.strict = true;
    config.versions.supported = vec!["2.0.0".into()];
    let env = Harness::with_config(Shop, config).await;
    let cr = env.apply_cr("e", json!({"version": "1.0.0"})).await;
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", false, "ConfigError");
    let cr = env.apply_cr("f", json!({"version": "2.0.0"})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(
        status["versions"]["available"]["versions"],
        json!([{"name": "2.0.0"}])
    );
}
