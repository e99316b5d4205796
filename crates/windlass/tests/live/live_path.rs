//! The live path's guarantees on a real API server: status writes that lose no other
//! writer's conditions, deletions that always finish, failures that say what to do.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use windlass::Action;
use windlass::cluster::{
    Cluster, Deletion, ListQuery, LiveCluster, RequestCounter, Scope, Verb, WriteMethod,
};
use windlass::config::OperatorConfig;
use windlass::error::ClusterError;
use windlass::object::{ManifestExt, ObjectRef, TypeRef};
use windlass::reconcile::{Reconciler, Report};
use windlass::testing::{DummyComponent, DummyController, assert_condition};

use crate::{eventually, live};
use windlass_testenv::{restricted_container_security, restricted_pod_security};

/// A cluster that runs `before` once, just before the first call of the chosen kind:
/// another writer or a user acting in the middle of a reconcile.
struct Interloper {
    inner: Arc<LiveCluster>,
    on: Call,
    fired: AtomicBool,
    before: Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>,
}

#[derive(PartialEq)]
enum Call {
    WriteStatus,
    Apply(&'static str),
}

impl Interloper {
    async fn maybe_fire(&self, call: Call) {
        if call == self.on && !self.fired.swap(true, Ordering::SeqCst) {
            (self.before)().await;
        }
    }
}

#[async_trait]
impl Cluster for Interloper {
    async fn scope(&self, t: &TypeRef) -> Result<Scope, ClusterError> {
        self.inner.scope(t).await
    }
    async fn get(&self, o: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        self.inner.get(o).await
    }
    async fn list(&self, q: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        self.inner.list(q).await
    }
    async fn apply(&self, m: &Value, w: WriteMethod) -> Result<Value, ClusterError> {
        if let Some(kind) = m.kind() {
            let kind: &'static str = match kind {
                "ConfigMap" => "ConfigMap",
                _ => "other",
            };
            self.maybe_fire(Call::Apply(kind)).await;
        }
        self.inner.apply(m, w).await
    }
    async fn delete(&self, o: &ObjectRef, uid: Option<&str>) -> Result<Deletion, ClusterError> {
        self.inner.delete(o, uid).await
    }
    async fn write_status(
        &self,
        o: &ObjectRef,
        s: &Value,
        rv: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        self.maybe_fire(Call::WriteStatus).await;
        self.inner.write_status(o, s, rv).await
    }
    async fn patch(&self, o: &ObjectRef, p: &json_patch::Patch) -> Result<Value, ClusterError> {
        self.inner.patch(o, p).await
    }
}

pub(crate) async fn create_widget(
    cluster: &dyn Cluster,
    ns: &str,
    name: &str,
    spec: Value,
) -> ObjectRef {
    let cr = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns}, "spec": spec});
    cluster.apply(&cr, WriteMethod::Update).await.unwrap();
    ObjectRef::from_manifest(&cr).unwrap()
}

/// Reconcile until `done` holds for a report, at most 60 times a second apart.
pub(crate) async fn reconcile_until<C: windlass::controller::Controller>(
    reconciler: &Reconciler<C>,
    cr: &ObjectRef,
    done: impl Fn(&Report) -> bool,
) -> Report {
    let mut last = None;
    for _ in 0..60 {
        let report = reconciler.reconcile(cr).await;
        if done(&report) {
            return report;
        }
        last = Some(report);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("never reached: last report {last:?}");
}

#[tokio::test]
async fn a_status_write_that_conflicts_keeps_the_other_writers_condition() {
    let (cluster, env) = live().await;
    let ns = env.namespace("status-409").await.unwrap();
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    // Another controller adds its own condition between windlass's read and its write.
    let other = cluster.clone();
    let target = cr.clone();
    let interloper = Arc::new(Interloper {
        inner: cluster.clone(),
        on: Call::WriteStatus,
        fired: AtomicBool::new(false),
        before: Box::new(move || {
            let (other, target) = (other.clone(), target.clone());
            Box::pin(async move {
                let status = json!({"conditions": [{"type": "BackedUp", "status": "True",
                    "reason": "Nightly", "message": "by the backup controller",
                    "lastTransitionTime": "2026-11-23T00:00:00Z"}]});
                other.write_status(&target, &status, None).await.unwrap();
            })
        }),
    });
    let controller =
        DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]);
    let reconciler = Reconciler::new(controller, interloper.clone(), OperatorConfig::default());
    let report = reconciler.reconcile(&cr).await;
    assert!(
        interloper.fired.load(Ordering::SeqCst),
        "the other writer wrote"
    );
    assert!(
        report.error.is_none(),
        "a 409 never fails a reconcile: {report:?}"
    );
    assert_eq!(report.outcome, Action::Done);
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", true, "Stable");
    assert_condition(&status, "BackedUp", true, "Nightly");
}

#[tokio::test]
async fn deleting_the_namespace_of_a_cr_with_a_finalizer_finishes() {
    let (cluster, env) = live().await;
    let mut ns = env.namespace("ns-delete").await.unwrap();
    ns.keep(); // deleted by the test itself
    let controller = DummyController::new()
        .component(DummyComponent::new("web").with_configmap("web"), &[])
        .finalizer("test.windlass.dev/cleanup", vec![]);
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let defaults = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "defaults", "namespace": ns.name()}, "data": {"size": "small"}});
    cluster.apply(&defaults, WriteMethod::Apply).await.unwrap();
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    cluster
        .apply(
            &json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": ns.name(),
                         "annotations": {"windlass.dev/config-defaults": "defaults"}}}),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    reconcile_until(&reconciler, &cr, |r| r.outcome == Action::Done).await;
    assert_eq!(
        cluster.get(&cr).await.unwrap().unwrap().finalizers(),
        ["test.windlass.dev/cleanup"]
    );

    let namespace = ObjectRef::new("v1", "Namespace", None, ns.name());
    cluster.delete(&namespace, None).await.unwrap();
    // The namespace controller deletes the config-defaults ConfigMap and marks the CR for
    // deletion, in an order of its own; the CR's finalizer holds the CR (and so the
    // namespace).
    let defaults = ObjectRef::from_manifest(&defaults).unwrap();
    eventually("the namespace controller deletes the ConfigMap", || async {
        cluster.get(&defaults).await.unwrap().is_none()
    })
    .await;
    eventually(
        "the namespace controller marks the CR for deletion",
        || async {
            cluster
                .get(&cr)
                .await
                .unwrap()
                .is_some_and(|cr| cr.is_terminating())
        },
    )
    .await;
    // Removing the finalizer depends on neither the ConfigMap nor anything else in the
    // namespace.
    reconcile_until(&reconciler, &cr, |r| r.outcome == Action::Done).await;
    eventually("the namespace is gone", || async {
        cluster.get(&namespace).await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn a_failed_job_fails_its_component() {
    let (cluster, env) = live().await;
    let ns = env.namespace("job-fails").await.unwrap();
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "{cr}-migrate"},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"annotations": {"testenv.windlass.dev/fail": "true"}},
            "spec": {"restartPolicy": "Never", "securityContext": restricted_pod_security(), "containers": [{"name": "main", "image": "busybox", "securityContext": restricted_container_security()}]}}}});
    let controller = DummyController::new()
        .component(DummyComponent::new("migrate").with_object("job", job), &[]);
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    // Until the Job controller marks the Job failed the component waits; then it fails.
    let report = reconcile_until(&reconciler, &cr, |r| r.outcome == Action::Retry).await;
    let state = report.state.expect("a rollout ran");
    assert!(state.failed_nodes().contains("migrate"), "{state}");
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", false, "Errored");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("w-migrate") && message.contains("failed"),
        "{message}"
    );
}

#[tokio::test]
async fn an_invalid_object_names_the_field_and_waits_for_a_change() {
    let (cluster, env) = live().await;
    let ns = env.namespace("invalid").await.unwrap();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "{cr}-web"},
        "spec": {"replicas": -1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"securityContext": restricted_pod_security(), "containers": [{"name": "main", "image": "busybox", "securityContext": restricted_container_security()}]}}}});
    let controller = DummyController::new().component(
        DummyComponent::new("web").with_object("deployment", deployment),
        &[],
    );
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    let report = reconciler.reconcile(&cr).await;
    assert_eq!(
        report.outcome,
        Action::Done,
        "retrying cannot help; the next change of the CR reconciles it: {report:?}"
    );
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("Deployment")
            && message.contains("w-web")
            && message.contains("spec.replicas"),
        "the message names the object and the field: {message}"
    );
}

#[tokio::test]
async fn a_cr_deleted_in_the_middle_of_a_rollout_ends_the_reconcile_quietly() {
    let (cluster, env) = live().await;
    let ns = env.namespace("gone-midway").await.unwrap();
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    let (deleter, target) = (cluster.clone(), cr.clone());
    let interloper = Arc::new(Interloper {
        inner: cluster.clone(),
        on: Call::Apply("ConfigMap"),
        fired: AtomicBool::new(false),
        before: Box::new(move || {
            let (deleter, target) = (deleter.clone(), target.clone());
            Box::pin(async move {
                deleter.delete(&target, None).await.unwrap();
            })
        }),
    });
    let controller =
        DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]);
    let reconciler = Reconciler::new(controller, interloper.clone(), OperatorConfig::default());
    let report = reconciler.reconcile(&cr).await;
    assert!(interloper.fired.load(Ordering::SeqCst));
    assert_eq!(report.outcome, Action::Done, "{report:?}");
    assert!(report.error.is_none(), "{report:?}");
    assert!(cluster.get(&cr).await.unwrap().is_none());
    // The next reconcile finds nothing to do.
    assert_eq!(reconciler.reconcile(&cr).await.outcome, Action::Done);
}

/// The smallest useful operator (a CR owning three ConfigMaps in a DAG) on the real
/// server: its first reconcile writes each object once and the status once, reading
/// each object and the CR once at most; the next one writes nothing and reads each object once at most.
#[tokio::test]
async fn a_first_reconcile_writes_each_object_and_the_status_once() {
    use windlass::cluster::{RequestCounter, Verb};
    let (_, env) = live().await;
    let ns = env.namespace("first-pass").await.unwrap();
    let counter = RequestCounter::new();
    let cluster = Arc::new(LiveCluster::new(counter.client(env.kube_config()).unwrap()));
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    let controller = DummyController::new()
        .component(DummyComponent::new("a").with_configmap("a"), &[])
        .component(DummyComponent::new("b").with_configmap("b"), &["a"])
        .component(DummyComponent::new("c").with_configmap("c"), &["b"]);
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    counter.take();
    let report = reconciler.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    let first = counter.take();
    println!("first reconcile:\n{first}");
    assert_eq!(first.of(Verb::Apply, "configmaps"), 3, "{first}");
    assert_eq!(first.of(Verb::Update, "widgets/status"), 1, "{first}");
    assert_eq!(first.mutating(), 4, "objects + 1 status write:\n{first}");
    assert_eq!(
        first.of(Verb::Get, "widgets"),
        1,
        "the CR is read once:\n{first}"
    );
    assert!(
        first.of(Verb::Get, "configmaps") <= 3,
        "each object is read once at most:\n{first}"
    );
    assert_eq!(first.verb(Verb::List), 0, "{first}");

    let report = reconciler.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    let steady = counter.take();
    println!("steady-state reconcile:\n{steady}");
    assert_eq!(steady.mutating(), 0, "{steady}");
    assert!(
        steady.reads() <= 4,
        "one read per object and the CR:\n{steady}"
    );
}

/// A namespaced CR's objects in another namespace, and its cluster-scoped ones, are out
/// of the garbage collector's reach (no owner reference is allowed there): windlass's
/// cleanup finalizer deletes them with the CR; the ones in its own namespace go by
/// garbage collection.
#[tokio::test]
async fn objects_out_of_the_garbage_collectors_reach_are_deleted_with_the_cr() {
    use windlass::annotations::CLEANUP_FINALIZER;
    let (cluster, env) = live().await;
    let home = env.namespace("cleanup-home").await.unwrap();
    let away = env.namespace("cleanup-away").await.unwrap();
    let role_name = format!("{}-reader", home.name());
    let controller = DummyController::new()
        .component(DummyComponent::new("local").with_configmap("local"), &[])
        .component(
            DummyComponent::new("remote")
                .with_object(
                    "away",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "from-home", "namespace": away.name()},
                        "data": {"k": "v"}}),
                )
                .with_object(
                    "role",
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": role_name}, "rules": []}),
                ),
            &["local"],
        );
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let cr = create_widget(cluster.as_ref(), home.name(), "w", json!({})).await;
    reconcile_until(&reconciler, &cr, |r| r.outcome == Action::Done).await;

    let local = ObjectRef::new("v1", "ConfigMap", Some(home.name()), "w-local");
    let remote = ObjectRef::new("v1", "ConfigMap", Some(away.name()), "from-home");
    let role = ObjectRef::new(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        &role_name,
    );
    let stored = cluster.get(&cr).await.unwrap().unwrap();
    assert_eq!(stored.finalizers(), [CLEANUP_FINALIZER]);
    let local_object = cluster.get(&local).await.unwrap().unwrap();
    assert_eq!(
        local_object["metadata"]["ownerReferences"][0]["uid"],
        stored["metadata"]["uid"]
    );
    for object in [&remote, &role] {
        let object = cluster.get(object).await.unwrap().unwrap();
        assert!(
            object["metadata"].get("ownerReferences").is_none(),
            "no owner reference across namespaces: {object}"
        );
    }
    // A second reconcile adds nothing (the finalizer is there).
    let report = reconciler.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);

    cluster.delete(&cr, None).await.unwrap();
    reconcile_until(&reconciler, &cr, |r| r.outcome == Action::Done).await;
    eventually("the CR is gone", || async {
        cluster.get(&cr).await.unwrap().is_none()
    })
    .await;
    assert!(
        cluster.get(&remote).await.unwrap().is_none(),
        "deleted with the CR"
    );
    assert!(
        cluster.get(&role).await.unwrap().is_none(),
        "deleted with the CR"
    );
    eventually(
        "the garbage collector deletes the local ConfigMap",
        || async { cluster.get(&local).await.unwrap().is_none() },
    )
    .await;
}

#[tokio::test]
async fn a_finalizer_the_server_refuses_is_a_config_error_not_a_retry_loop() {
    let (_, env) = live().await;
    let ns = env.namespace("finalizer-422").await.unwrap();
    let counter = RequestCounter::new();
    let cluster = Arc::new(LiveCluster::new(counter.client(env.kube_config()).unwrap()));
    // Not a qualified name: the API server validates metadata.finalizers on every write.
    let finalizer = "test.windlass.dev/not a name!";
    let controller = DummyController::new()
        .component(DummyComponent::new("web").with_configmap("web"), &[])
        .finalizer(finalizer, vec![]);
    let reconciler = Reconciler::new(controller, cluster.clone(), OperatorConfig::default());
    let cr = create_widget(cluster.as_ref(), ns.name(), "w", json!({})).await;
    counter.take();

    let report = reconciler.reconcile(&cr).await;
    let requests = counter.take();
    assert_eq!(
        report.outcome,
        Action::Done,
        "retrying cannot make the server accept the name: {report:?}"
    );
    let error = report.error.expect("the reconcile reports the refusal");
    assert!(
        matches!(
            &error,
            windlass::Error::Cluster(ClusterError::Invalid { message, .. })
                if message.contains("metadata.finalizers") && message.contains(finalizer)
        ),
        "the error names the field and the value: {error:?}"
    );
    assert_eq!(
        requests.of(Verb::Patch, "widgets"),
        1,
        "one finalizer patch, not a loop of them:\n{requests}"
    );
    assert_eq!(
        requests.verb(Verb::Apply),
        0,
        "nothing is rolled out for a CR whose finalizer cannot be added:\n{requests}"
    );
    let stored = cluster.get(&cr).await.unwrap().unwrap();
    assert!(stored.finalizers().is_empty(), "{stored:#}");
    let status = stored["status"].clone();
    assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("metadata.finalizers") && message.contains(finalizer),
        "the status names the field and the value: {message}"
    );
}
