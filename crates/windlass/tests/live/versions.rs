//! Application versions on the real API server: two CRs asking for different versions are
//! reconciled with different graphs by one reconciler; moving one to the other version
//! prunes what the old version applied; with strict versioning an unsupported version ends
//! `Ready=False` naming the supported ones.

use serde_json::{Value, json};
use windlass::Action;
use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::object::ObjectRef;
use windlass::reconcile::Reconciler;
use windlass::testing::assert_condition;

use crate::live;

#[path = "../shared/versioned_shop.rs"]
mod versioned_shop;
use versioned_shop::Shop;

async fn widget(cluster: &LiveCluster, namespace: &str, name: &str, version: &str) -> ObjectRef {
    let manifest = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"version": version}});
    cluster
        .apply(&manifest, WriteMethod::Apply)
        .await
        .expect("the Widget is written");
    ObjectRef::from_manifest(&manifest).expect("a valid reference")
}

async fn exists(cluster: &LiveCluster, namespace: &str, name: &str) -> bool {
    let cm = ObjectRef::new("v1", "ConfigMap", Some(namespace), name);
    cluster.get(&cm).await.expect("a read").is_some()
}

async fn status(cluster: &LiveCluster, cr: &ObjectRef) -> Value {
    cluster.get(cr).await.expect("a read").expect("the CR")["status"].clone()
}

#[tokio::test]
async fn crs_on_two_versions_get_two_graphs_and_an_upgrade_prunes_the_old_one() {
    let (cluster, env) = live().await;
    let ns = env.namespace("versions").await.unwrap();
    let mut config = OperatorConfig::default();
    config.versions.strict = true;
    let reconciler = Reconciler::new(Shop, cluster.clone(), config);

    let a = widget(&cluster, ns.name(), "a", "1.2.0").await;
    let b = widget(&cluster, ns.name(), "b", "2.0.0").await;
    for cr in [&a, &b] {
        let report = reconciler.reconcile(cr).await;
        assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    }
    assert!(exists(&cluster, ns.name(), "a-api-v1").await);
    assert!(!exists(&cluster, ns.name(), "a-api-v2").await);
    assert!(exists(&cluster, ns.name(), "b-api-v2").await);
    assert!(!exists(&cluster, ns.name(), "b-api-v1").await);
    let a_status = status(&cluster, &a).await;
    assert_condition(&a_status, "Ready", true, "Stable");
    assert_eq!(
        a_status["versions"]["available"]["versions"],
        json!([{"name": "^1"}, {"name": "^2"}])
    );

    // a moves to 2.x: one reconcile applies 2.x's API and deletes 1.x's.
    widget(&cluster, ns.name(), "a", "2.1.0").await;
    let report = reconciler.reconcile(&a).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    assert!(exists(&cluster, ns.name(), "a-api-v2").await);
    assert!(
        !exists(&cluster, ns.name(), "a-api-v1").await,
        "1.x's leftovers are pruned"
    );
    assert_eq!(
        status(&cluster, &a).await["versions"]["reconciled"],
        "2.1.0"
    );

    // A version no range supports: refused, naming the supported ones; nothing applied.
    let c = widget(&cluster, ns.name(), "c", "3.0.0").await;
    let report = reconciler.reconcile(&c).await;
    assert!(report.error.is_some());
    let c_status = status(&cluster, &c).await;
    assert_condition(&c_status, "Ready", false, "ConfigError");
    let message = c_status["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("3.0.0") && message.contains("^1, ^2"),
        "{message}"
    );
    assert!(!exists(&cluster, ns.name(), "c-web").await);
}
