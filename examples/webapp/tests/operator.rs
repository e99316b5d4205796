//! The example operator as a separate process (`webapp-operator run`) on a real control
//! plane, driven only through the API as a user would: CRs converge, a child deleted by
//! hand comes back, a spec change rolls out, a status-only change starts no reconcile, a
//! paused CR is left alone, and SIGTERM ends the process cleanly.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::object::{ManifestExt, ObjectRef};
use windlass_testenv::TestEnv;

mod support;
use support::{LONG, Operator, eventually, install_crd, ready};

#[tokio::test]
async fn the_operator_process_converges_crs_and_follows_their_changes() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("operator").await.unwrap();
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    install_crd(&cluster).await;

    let operator = Operator::start(env, "operator", ns.name(), &[]);
    let shop = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name()},
        "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop"}});
    cluster.apply(&shop, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&shop).unwrap();
    let get = |r: ObjectRef| {
        let cluster = cluster.clone();
        async move { cluster.get(&r).await.unwrap() }
    };
    eventually("the WebApp is Ready", LONG, &[&operator], || async {
        get(cr.clone()).await.is_some_and(|cr| ready(&cr))
    })
    .await;
    // Ready to serve once its watches have listed; its metrics count what it did.
    eventually("/readyz answers 200", LONG, &[&operator], || async {
        operator
            .http("/readyz")
            .is_some_and(|(code, _)| code == 200)
    })
    .await;
    assert_eq!(operator.http("/healthz").map(|(code, _)| code), Some(200));
    let (_, metrics) = operator.http("/metrics").unwrap();
    assert!(
        metrics.contains("windlass_reconciles_total{")
            && metrics.contains("windlass_api_requests_total{"),
        "{metrics}"
    );

    // A child deleted by hand comes back.
    let web = ObjectRef::new("apps/v1", "Deployment", Some(ns.name()), "shop-web");
    let uid = get(web.clone()).await.unwrap().uid().unwrap().to_string();
    cluster.delete(&web, None).await.unwrap();
    eventually(
        "the deleted Deployment is re-created",
        LONG,
        &[&operator],
        || async {
            get(web.clone())
                .await
                .is_some_and(|d| d.uid() != Some(uid.as_str()))
        },
    )
    .await;
    eventually("the WebApp is Ready again", LONG, &[&operator], || async {
        get(cr.clone()).await.is_some_and(|cr| ready(&cr))
    })
    .await;

    // A status-only change starts no reconcile. The sync point: a new CR in the same
    // namespace comes through the same watch after the status write, and the queue is
    // FIFO, so once the probe's reconcile has started, a reconcile of the status write
    // would have started before it.
    let probe = |name: &str| {
        json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": name, "namespace": ns.name()},
            "spec": {"version": "1.4.0", "image": "ghcr.io/example/probe"}})
    };
    // First the same sync point for what may still be queued: a reconcile of the re-created
    // Deployment's changes that came in while the last one ran.
    cluster
        .apply(&probe("probe-0"), WriteMethod::Update)
        .await
        .unwrap();
    eventually(
        "the queue's probe is reconciled",
        LONG,
        &[&operator],
        || async { operator.reconciles("probe-0") > 0 },
    )
    .await;
    let before = operator.reconciles("shop");
    let current = get(cr.clone()).await.unwrap();
    let mut status = current["status"].clone();
    status["note"] = json!("written by someone else");
    cluster.write_status(&cr, &status, None).await.unwrap();
    cluster
        .apply(&probe("probe-a"), WriteMethod::Update)
        .await
        .unwrap();
    eventually(
        "the first probe is reconciled",
        LONG,
        &[&operator],
        || async { operator.reconciles("probe-a") > 0 },
    )
    .await;
    assert_eq!(
        operator.reconciles("shop"),
        before,
        "the status-only write started a reconcile:\n{}",
        operator.dump()
    );

    // A paused CR is left alone: neither pausing nor a spec change while paused starts a
    // reconcile (same sync point), and the spec change is not rolled out.
    let paused = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name(),
                     "annotations": {"windlass.dev/pause-execution": "true"}},
        "spec": {"replicas": 3}});
    cluster.apply(&paused, WriteMethod::Update).await.unwrap();
    cluster
        .apply(&probe("probe-b"), WriteMethod::Update)
        .await
        .unwrap();
    eventually(
        "the second probe is reconciled",
        LONG,
        &[&operator],
        || async { operator.reconciles("probe-b") > 0 },
    )
    .await;
    let deployment_replicas = || async {
        get(web.clone()).await.unwrap()["spec"]["replicas"]
            .as_i64()
            .unwrap_or(0)
    };
    assert_eq!(operator.reconciles("shop"), before, "{}", operator.dump());
    assert_eq!(deployment_replicas().await, 2, "paused: not rolled out");

    // Unpausing is a change the operator sees; then the spec change rolls out.
    let unpause = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name(),
                     "annotations": {"windlass.dev/pause-execution": null}}});
    cluster.apply(&unpause, WriteMethod::Update).await.unwrap();
    eventually(
        "the spec change rolls out after unpausing",
        LONG,
        &[&operator],
        || async { deployment_replicas().await == 3 },
    )
    .await;
    eventually(
        "the WebApp is Ready at the new generation",
        LONG,
        &[&operator],
        || async { get(cr.clone()).await.is_some_and(|cr| ready(&cr)) },
    )
    .await;

    // SIGTERM: a clean exit.
    let pid = operator.child.id();
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut operator = operator;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = operator.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the operator did not exit after SIGTERM:\n{}",
            operator.dump()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "exit {exit:?}:\n{}", operator.dump());
}
