//! Whole reconciles on the real control plane: the node simulator makes Pods run, so the
//! verify phase really waits for workloads, and garbage collection is the real one.

use std::time::Duration;

use serde_json::{Value, json};
use windlass::Action;
use windlass::cluster::{Cluster, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::object::{ManifestExt, ObjectRef};
use windlass::reconcile::{Reconciler, Report};
use windlass::testing::{DummyComponent, DummyController, Gadget, assert_condition};

use crate::{eventually, live};
use windlass_testenv::{restricted_container_security, restricted_pod_security};

fn deployment(name: &str, pod_annotations: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}, "annotations": pod_annotations},
                              "spec": {"securityContext": restricted_pod_security(), "containers": [{"name": "main", "image": "busybox", "securityContext": restricted_container_security()}]}}}})
}

fn job(name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "securityContext": restricted_pod_security(), "containers": [{"name": "main", "image": "busybox", "securityContext": restricted_container_security()}]}}}})
}

/// Reconcile until the outcome is `Done` or `attempts` reconciles, a second apart, ran.
async fn reconcile_until_done<C: windlass::controller::Controller>(
    reconciler: &Reconciler<C>,
    cr: &ObjectRef,
    attempts: usize,
) -> Vec<Report> {
    let mut reports = Vec::new();
    for _ in 0..attempts {
        let report = reconciler.reconcile(cr).await;
        let done = report.outcome == Action::Done;
        reports.push(report);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    reports
}

async fn create_widget(cluster: &dyn Cluster, ns: &str, name: &str) -> ObjectRef {
    let cr = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns}, "spec": {"version": "1.0"}});
    cluster.apply(&cr, WriteMethod::Update).await.unwrap();
    ObjectRef::from_manifest(&cr).unwrap()
}

#[tokio::test]
async fn components_are_verified_once_their_workloads_really_are_ready() {
    let (cluster, env) = live().await;
    let ns = env.namespace("rollout").await.unwrap();
    let controller = DummyController::new()
        .component(
            DummyComponent::new("migrate").with_object("job", job("{cr}-migrate")),
            &[],
        )
        .component(
            DummyComponent::new("web").with_object("deployment", deployment("{cr}-web", json!({}))),
            &["migrate"],
        );
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let cr = create_widget(cluster.as_ref(), ns.name(), "shop").await;

    let reports = reconcile_until_done(&reconciler, &cr, 60).await;
    let first = &reports[0];
    assert!(
        first.state.as_ref().is_some_and(|s| !s.verify_completed()),
        "right after the first apply nothing can be ready yet: {:?}",
        first.state
    );
    let last = reports.last().unwrap();
    assert_eq!(last.outcome, Action::Done, "never became ready: {last:?}");
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(status["versions"]["reconciled"], "1.0");

    // Owned by the CR, so deleting it lets the real garbage collector remove them.
    cluster.delete(&cr, None).await.unwrap();
    let web = ObjectRef::new("apps/v1", "Deployment", Some(ns.name()), "shop-web");
    eventually("the garbage collector removes the Deployment", || async {
        cluster.get(&web).await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn a_failing_workload_keeps_the_cr_waiting() {
    let (cluster, env) = live().await;
    let ns = env.namespace("failing").await.unwrap();
    let controller = DummyController::new().component(
        DummyComponent::new("web").with_object(
            "deployment",
            deployment("{cr}-web", json!({"testenv.windlass.dev/fail": "true"})),
        ),
        &[],
    );
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let cr = create_widget(cluster.as_ref(), ns.name(), "broken").await;
    let reports = reconcile_until_done(&reconciler, &cr, 6).await;
    assert!(
        reports
            .iter()
            .all(|r| matches!(r.outcome, Action::RequeueAfter(_))),
        "{reports:?}"
    );
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", false, "Initializing");
    assert_condition(&status, "Updating", true, "VerifyWait");
    assert_eq!(
        status["componentStatus"]["unverifiedComponents"],
        json!(["web"])
    );
}

#[tokio::test]
async fn a_finalizer_holds_the_cr_until_its_finalize_rollout_is_done() {
    let (cluster, env) = live().await;
    let ns = env.namespace("finalize").await.unwrap();
    let cleanup = DummyComponent::new("cleanup").with_object("job", job("{cr}-cleanup"));
    let controller = DummyController::new()
        .component(DummyComponent::new("web").with_configmap("web"), &[])
        .finalizer("test.windlass.dev/cleanup", vec![cleanup]);
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let cr = create_widget(cluster.as_ref(), ns.name(), "shop").await;
    assert_eq!(
        reconcile_until_done(&reconciler, &cr, 10)
            .await
            .last()
            .unwrap()
            .outcome,
        Action::Done
    );
    assert_eq!(
        cluster.get(&cr).await.unwrap().unwrap().finalizers(),
        ["test.windlass.dev/cleanup"]
    );

    cluster.delete(&cr, None).await.unwrap();
    let reports = reconcile_until_done(&reconciler, &cr, 60).await;
    assert_eq!(reports.last().unwrap().outcome, Action::Done, "{reports:?}");
    assert!(
        matches!(reports[0].outcome, Action::RequeueAfter(_)),
        "the cleanup Job cannot have completed within the reconcile that created it: {reports:?}"
    );
    eventually("the CR is gone once its finalizer is removed", || async {
        cluster.get(&cr).await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn a_cluster_scoped_cr_owns_its_namespaced_children_and_their_collection() {
    let (cluster, env) = live().await;
    let ns = env.namespace("gadget").await.unwrap();
    // Cluster-scoped, so named after the (unique) namespace to stay apart from other runs.
    let name = ns.name().to_string();
    let in_ns = |mut manifest: Value| {
        manifest["metadata"]["namespace"] = json!(ns.name());
        manifest
    };
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{cr}-config"},
        "data": {"owner": "{cr}"}});
    let controller = DummyController::<Gadget>::of_kind().component(
        DummyComponent::new("web")
            .with_object("config", in_ns(config))
            .with_object("deployment", in_ns(deployment("{cr}-web", json!({})))),
        &[],
    );
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let gadget = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Gadget",
        "metadata": {"name": name}, "spec": {"version": "1.0"}});
    let stored = cluster.apply(&gadget, WriteMethod::Update).await.unwrap();
    assert_eq!(stored.namespace(), None, "the kind is cluster-scoped");
    let cr = ObjectRef::from_manifest(&stored).unwrap();

    let reports = reconcile_until_done(&reconciler, &cr, 60).await;
    let last = reports.last().unwrap();
    assert_eq!(last.outcome, Action::Done, "never became ready: {last:?}");
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", true, "Stable");

    // Each namespaced child names the cluster-scoped CR as its owner.
    let children = [
        ObjectRef::new("v1", "ConfigMap", Some(ns.name()), format!("{name}-config")),
        ObjectRef::new(
            "apps/v1",
            "Deployment",
            Some(ns.name()),
            format!("{name}-web"),
        ),
    ];
    for child in &children {
        let live = cluster.get(child).await.unwrap().expect("the child exists");
        assert_eq!(
            live["metadata"]["ownerReferences"],
            json!([{"apiVersion": "test.windlass.dev/v1", "kind": "Gadget", "name": name,
                    "uid": stored.uid(), "blockOwnerDeletion": true, "controller": true}]),
            "{child}"
        );
    }

    // kube-controller-manager's garbage collector follows those references across scopes.
    // (It learns of a new CRD's kind at its next discovery sync, every 30 s: `live()`
    // installs the Gadget CRD early so that, in a whole run, it knows the kind by now.)
    cluster.delete(&cr, None).await.unwrap();
    for child in &children {
        eventually(
            &format!("the garbage collector deletes {child}"),
            || async { cluster.get(child).await.unwrap().is_none() },
        )
        .await;
    }
    assert!(cluster.get(&cr).await.unwrap().is_none());
}
