//! Changes the API server refuses because a field cannot change after creation (a Job's
//! pod template): recreated when the resource allows it, a config error naming the field
//! when it does not, and what `deploy_unprocessable_put_fallback` does about them.

use std::sync::Arc;

use serde_json::{Value, json};
use windlass::Action;
use windlass::cluster::{Cluster, LiveCluster, RequestCounter, Verb};
use windlass::component::ResourceOptions;
use windlass::config::OperatorConfig;
use windlass::error::{ClusterError, Error};
use windlass::object::{ManifestExt, ObjectRef};
use windlass::reconcile::Reconciler;
use windlass::testing::{DummyComponent, DummyController, assert_condition};

use crate::live;
use crate::live_path::{create_widget, reconcile_until};
use windlass_testenv::{restricted_container_security, restricted_pod_security};

/// A controller whose one component renders the Job `<cr>-migrate` running `main <arg>`.
fn migrating(arg: &str, options: ResourceOptions) -> DummyController {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "{cr}-migrate"},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "securityContext": restricted_pod_security(), "containers": [{"name": "main", "image": "busybox", "securityContext": restricted_container_security(), "args": [arg]}]}}}});
    DummyController::new().component(
        DummyComponent::new("migrate").with_object_options("job", job, options),
        &[],
    )
}

/// The arguments of the Job's container.
fn job_args(job: &Value) -> &Value {
    &job["spec"]["template"]["spec"]["containers"][0]["args"]
}

/// A counted client, a Widget `w` in a fresh namespace, and the Job a first reconcile with
/// `arg` created for it.
async fn first_rollout(
    prefix: &str,
    options: ResourceOptions,
) -> (
    Arc<LiveCluster>,
    RequestCounter,
    windlass_testenv::TestNamespace,
    ObjectRef,
    ObjectRef,
    Value,
) {
    let (_, env) = live().await;
    let ns = env.namespace(prefix).await.unwrap();
    let counter = RequestCounter::new();
    let cluster = Arc::new(LiveCluster::new(counter.client(env.kube_config()).unwrap()));
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    let v1 = Reconciler::new(
        migrating("v1", options),
        cluster.clone(),
        OperatorConfig::default(),
    );
    let report = v1.reconcile(&cr).await;
    assert!(report.error.is_none(), "{report:?}");
    let job = ObjectRef::new("batch/v1", "Job", Some(ns.name()), "w-migrate");
    let created = cluster.get(&job).await.unwrap().expect("the Job exists");
    assert_eq!(job_args(&created), &json!(["v1"]));
    (cluster, counter, ns, cr, job, created)
}

#[tokio::test]
async fn a_job_whose_template_changed_is_deleted_and_recreated_when_allowed() {
    let recreate = ResourceOptions::new().recreate_when_immutable();
    let (cluster, counter, _ns, cr, job, first) = first_rollout("recreate", recreate.clone()).await;

    counter.take();
    let v2 = Reconciler::new(
        migrating("v2", recreate),
        cluster.clone(),
        OperatorConfig::default(),
    );
    let report = v2.reconcile(&cr).await;
    let requests = counter.take();
    assert!(report.error.is_none(), "{report:?}");
    let second = cluster.get(&job).await.unwrap().expect("the Job exists");
    assert_ne!(second.uid(), first.uid(), "a new Job, not the old one");
    assert_eq!(job_args(&second), &json!(["v2"]));
    assert_eq!(
        requests.of(Verb::Apply, "jobs"),
        2,
        "the apply the server refused, and the one that created the Job anew:\n{requests}"
    );
    assert_eq!(requests.of(Verb::Delete, "jobs"), 1, "{requests}");
    // The inventory follows the new Job, so pruning and disabling find it.
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    let inventory = status["inventory"].as_array().unwrap();
    assert!(
        inventory
            .iter()
            .any(|e| e["name"] == "w-migrate" && e["uid"].as_str() == second.uid()),
        "{inventory:#?}"
    );
    // The new Job really runs: the rollout completes once the Job controller says so.
    reconcile_until(&v2, &cr, |r| r.outcome == Action::Done).await;
    assert_condition(
        &cluster.get(&cr).await.unwrap().unwrap()["status"],
        "Ready",
        true,
        "Stable",
    );
}

/// The report, status message and Job after a reconcile that changed the Job's template
/// without the recreate option: a config error naming the object and the field.
async fn assert_refused_as_config_error(
    report: &windlass::reconcile::Report,
    cluster: &LiveCluster,
    cr: &ObjectRef,
    job: &ObjectRef,
    first: &Value,
) {
    assert_eq!(
        report.outcome,
        Action::Done,
        "retrying cannot change an immutable field; a change of the CR reconciles again: {report:?}"
    );
    assert!(
        matches!(&report.error, Some(Error::Cluster(e @ ClusterError::Invalid { .. })) if e.is_immutable_field()),
        "{report:?}"
    );
    let status = cluster.get(cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("Job")
            && message.contains("w-migrate")
            && message.contains("spec.template")
            && message.contains("field is immutable"),
        "the message names the object and the field: {message}"
    );
    let kept = cluster.get(job).await.unwrap().expect("the Job is kept");
    assert_eq!(kept.uid(), first.uid());
    assert_eq!(job_args(&kept), &json!(["v1"]));
}

#[tokio::test]
async fn a_job_whose_template_changed_is_a_config_error_without_the_option() {
    let (cluster, counter, _ns, cr, job, first) =
        first_rollout("immutable", ResourceOptions::new()).await;
    counter.take();
    let v2 = Reconciler::new(
        migrating("v2", ResourceOptions::new()),
        cluster.clone(),
        OperatorConfig::default(),
    );
    let report = v2.reconcile(&cr).await;
    let requests = counter.take();
    assert_refused_as_config_error(&report, &cluster, &cr, &job, &first).await;
    assert_eq!(requests.of(Verb::Apply, "jobs"), 1, "{requests}");
    assert_eq!(requests.of(Verb::Delete, "jobs"), 0, "{requests}");
}

#[tokio::test]
async fn a_refused_apply_is_never_retried_as_a_put() {
    // On a real server a 422 from apply is the server's validation (or an immutable
    // field), which a PUT meets again (measured when windlass still tried: the same config
    // error, one GET and one 422 PUT later), so windlass never tries.
    let (cluster, counter, _ns, cr, job, first) =
        first_rollout("put-fallback", ResourceOptions::new()).await;
    let fallback = OperatorConfig::default();
    counter.take();
    let v2 = Reconciler::new(
        migrating("v2", ResourceOptions::new()),
        cluster.clone(),
        fallback.clone(),
    );
    let report = v2.reconcile(&cr).await;
    let requests = counter.take();
    assert_refused_as_config_error(&report, &cluster, &cr, &job, &first).await;
    assert_eq!(requests.of(Verb::Apply, "jobs"), 1, "{requests}");
    assert_eq!(requests.of(Verb::Update, "jobs"), 0, "no PUT:\n{requests}");

    // What apply alone refuses and a PUT would store (a field the schema does not know;
    // a PUT drops it) is not a 422 but a 500 ("failed to create typed patch object"): a
    // fallback on 422 would never see it. Sending it again cannot help either, so it is a
    // config error, as a 422 is: no PUT, no retry, the CR waits for a change.
    let bogus = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{cr}-bogus"},
        "data": {"k": "v"}, "bogus": true});
    let controller = DummyController::new().component(
        DummyComponent::new("bogus").with_object("config", bogus),
        &[],
    );
    let reconciler = Reconciler::new(controller, cluster.clone(), fallback);
    counter.take();
    let report = reconciler.reconcile(&cr).await;
    let requests = counter.take();
    assert_eq!(report.outcome, Action::Done, "{report:?}");
    assert!(
        matches!(&report.error, Some(Error::Cluster(ClusterError::Invalid { message, .. }))
            if message.contains("field not declared in schema")),
        "{report:?}"
    );
    assert_eq!(requests.of(Verb::Update, "configmaps"), 0, "{requests}");
    let configmap = ObjectRef::new("v1", "ConfigMap", cr.namespace.as_deref(), "w-bogus");
    assert!(cluster.get(&configmap).await.unwrap().is_none());
}
