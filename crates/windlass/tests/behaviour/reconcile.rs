//! The reconcile pipeline: pause, finalizers, config layering, error mapping, dry-run
//! divergence.

use std::sync::Arc;

use serde_json::{Value, json};
use windlass::Action;
use windlass::ClusterError;
use windlass::cluster::MemoryCluster;
use windlass::config::OperatorConfig;
use windlass::object::{ManifestExt, ObjectRef};
use windlass::prelude::*;
use windlass::testing::{
    Behaviour, DummyComponent, DummyController, FaultyCluster, Harness, Op, TEST_NAMESPACE, Widget,
    assert_condition, make_patch, patch_kind,
};

use crate::support::{available, cm_ref, deployment, deployment_ref};

fn one_configmap() -> DummyController {
    DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[])
}

#[tokio::test]
async fn a_paused_cr_is_left_alone() {
    let env = Harness::new(one_configmap()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.annotate(&cr, "windlass.dev/pause-execution", "TRUE")
        .await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done);
    assert!(report.state.is_none(), "no rollout");
    assert!(env.get(&cm_ref("a-web")).await.is_none());
    assert_eq!(env.status(&cr).await, Value::Null, "no status write");
}

#[tokio::test]
async fn pause_holds_even_the_finalizer() {
    let env = Harness::new(one_configmap().finalizer("test.windlass.dev/cleanup", vec![])).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    env.annotate(&cr, "windlass.dev/pause-execution", "true")
        .await;
    env.delete(&cr).await;
    env.reconcile(&cr).await;
    let held = env
        .get(&cr)
        .await
        .expect("the finalizer still holds the CR");
    assert_eq!(held.finalizers(), ["test.windlass.dev/cleanup"]);
}

#[tokio::test]
async fn the_finalizer_is_added_first_and_removed_once_finalizing_needs_no_requeue() {
    let drain = DummyComponent::new("drain").with_object("deployment", deployment("drain"));
    let env =
        Harness::new(one_configmap().finalizer("test.windlass.dev/cleanup", vec![drain])).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    assert_eq!(
        env.get(&cr).await.unwrap().finalizers(),
        ["test.windlass.dev/cleanup"]
    );
    assert!(env.get(&cm_ref("a-web")).await.is_some());

    env.delete(&cr).await;
    let report = env.reconcile(&cr).await;
    assert!(
        matches!(report.outcome, Action::RequeueAfter(_)),
        "drain is not verified yet"
    );
    assert!(
        env.get(&cr).await.is_some(),
        "the finalizer stays while a requeue is needed"
    );
    assert!(
        env.get(&deployment_ref("drain")).await.is_some(),
        "finalize_components rolled out"
    );

    env.set_status(&deployment_ref("drain"), available()).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done);
    assert!(
        env.get(&cr).await.is_none(),
        "finalizer removed, so the CR is gone"
    );
    assert!(
        env.get(&cm_ref("a-web")).await.is_none(),
        "owned objects are garbage-collected"
    );
}

#[tokio::test]
async fn a_finalizer_the_cluster_refuses_is_a_config_error_and_nothing_rolls_out() {
    let finalizer = "test.windlass.dev/not a name!";
    let env = Harness::new(one_configmap().finalizer(finalizer, vec![])).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{report:?}");
    assert!(
        report.error.as_ref().is_some_and(|e| matches!(
            e,
            windlass::Error::Cluster(ClusterError::Invalid { message, .. })
                if message.contains("metadata.finalizers[0]") && message.contains(finalizer)
        )),
        "{report:?}"
    );
    assert!(env.get(&cm_ref("a-web")).await.is_none(), "no rollout");
    assert_condition(&env.status(&cr).await, "Ready", false, "ConfigError");
}

#[tokio::test]
async fn a_finalizer_removal_the_cluster_refuses_is_reported_not_retried_as_a_conflict() {
    // E.g. a stored CR that a newer CRD schema no longer accepts: every write of it is a
    // 422, whatever the finalizer patch's test says.
    let memory = Arc::new(MemoryCluster::new());
    let faulty = Arc::new(FaultyCluster::new(memory.clone()));
    let env = Harness::on_cluster(
        one_configmap().finalizer("test.windlass.dev/cleanup", vec![]),
        OperatorConfig::default(),
        memory,
        faulty.clone(),
    );
    let cr = env.apply_cr("a", json!({})).await;
    assert!(env.reconcile(&cr).await.error.is_none());
    env.delete(&cr).await;
    let refused = ClusterError::invalid(
        cr.to_string(),
        "spec.size: Invalid value: \"huge\": must be a number",
    );
    faulty.fail(Op::Patch, Some("Widget"), refused.clone());
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{report:?}");
    assert_eq!(report.error, Some(windlass::Error::Cluster(refused)));
    assert_eq!(
        env.get(&cr).await.unwrap().finalizers(),
        ["test.windlass.dev/cleanup"],
        "the finalizer stays until the CR can be written"
    );
}

/// A cluster on which another controller adds its own finalizer to the CR just before
/// windlass's first finalizer patch, so that patch's test of the list fails.
struct RacingFinalizer {
    memory: Arc<MemoryCluster>,
    raced: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl windlass::cluster::Cluster for RacingFinalizer {
    async fn scope(
        &self,
        t: &windlass::object::TypeRef,
    ) -> std::result::Result<windlass::cluster::Scope, ClusterError> {
        self.memory.scope(t).await
    }
    async fn get(&self, o: &ObjectRef) -> std::result::Result<Option<Value>, ClusterError> {
        self.memory.get(o).await
    }
    async fn list(
        &self,
        q: &windlass::cluster::ListQuery,
    ) -> std::result::Result<Vec<Value>, ClusterError> {
        self.memory.list(q).await
    }
    async fn apply(
        &self,
        m: &Value,
        w: windlass::cluster::WriteMethod,
    ) -> std::result::Result<Value, ClusterError> {
        self.memory.apply(m, w).await
    }
    async fn delete(
        &self,
        o: &ObjectRef,
        uid: Option<&str>,
    ) -> std::result::Result<windlass::cluster::Deletion, ClusterError> {
        self.memory.delete(o, uid).await
    }
    async fn write_status(
        &self,
        o: &ObjectRef,
        s: &Value,
        rv: Option<&str>,
    ) -> std::result::Result<Option<Value>, ClusterError> {
        self.memory.write_status(o, s, rv).await
    }
    async fn patch(
        &self,
        o: &ObjectRef,
        p: &json_patch::Patch,
    ) -> std::result::Result<Value, ClusterError> {
        if !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let other = json!({"apiVersion": o.api_version, "kind": o.kind,
                "metadata": {"name": o.name, "namespace": o.namespace,
                             "finalizers": ["other.example.com/hold"]}});
            self.memory
                .update_as("other", &other, windlass::cluster::WriteMethod::Update)
                .unwrap();
        }
        self.memory.patch(o, p).await
    }
}

#[tokio::test]
async fn a_finalizer_list_changed_meanwhile_is_read_again_and_both_finalizers_stay() {
    let memory = Arc::new(MemoryCluster::new());
    let cluster = Arc::new(RacingFinalizer {
        memory: memory.clone(),
        raced: Default::default(),
    });
    let env = Harness::on_cluster(
        one_configmap().finalizer("test.windlass.dev/cleanup", vec![]),
        OperatorConfig::default(),
        memory,
        cluster.clone(),
    );
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert!(cluster.raced.load(std::sync::atomic::Ordering::SeqCst));
    assert!(report.error.is_none(), "{report:?}");
    assert_eq!(
        env.get(&cr).await.unwrap().finalizers(),
        ["other.example.com/hold", "test.windlass.dev/cleanup"]
    );
    assert!(env.get(&cm_ref("a-web")).await.is_some());
}

#[tokio::test]
async fn children_are_owned_by_the_cr() {
    let env = Harness::dry_run(one_configmap()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    let cr_uid = env.get(&cr).await.unwrap().uid().unwrap().to_string();
    let child = env.get(&cm_ref("a-web")).await.unwrap();
    assert_eq!(
        child["metadata"]["ownerReferences"],
        json!([{"apiVersion": "test.windlass.dev/v1", "kind": "Widget", "name": "a", "uid": cr_uid, "blockOwnerDeletion": true, "controller": true}])
    );
    assert_eq!(
        child.annotation("windlass.dev/internal-name"),
        Some("web.web")
    );
}

/// A controller that renders its merged backend config into a ConfigMap.
struct ConfigEcho;

struct Echo;

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Widget>> windlass::component::Component<C>
    for Echo
{
    fn name(&self) -> &str {
        "echo"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        out.add_value(
            "config",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": session.scoped_name("echo")}, "data": session.config()}),
        )?;
        Ok(())
    }
}

#[async_trait]
impl Controller for ConfigEcho {
    type Resource = Widget;
    type Config = EchoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut g = Components::new();
        g.add(Echo)?;
        Ok(g)
    }
}

/// The backend config of [`ConfigEcho`]: three keys, each `"default"` by default.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct EchoConfig {
    a: String,
    b: String,
    c: String,
}

impl Default for EchoConfig {
    fn default() -> Self {
        let default = || "default".to_string();
        EchoConfig {
            a: default(),
            b: default(),
            c: default(),
        }
    }
}

#[tokio::test]
async fn backend_config_layers_defaults_configmap_and_overrides() {
    let env = Harness::dry_run(ConfigEcho).await;
    env.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "site", "namespace": TEST_NAMESPACE},
        "data": {"b": "configmap", "c": "configmap"}})).await;
    let cr = env
        .apply_cr("a", json!({"configOverrides": {"c": "cr"}}))
        .await;
    env.annotate(&cr, "windlass.dev/config-defaults", "site/ignored")
        .await;
    // A top-level configOverrides is not read (a structural CRD schema would prune it).
    env.apply(&json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": "a", "namespace": TEST_NAMESPACE}, "configOverrides": {"a": "top-level"}})).await;
    env.reconcile(&cr).await;
    let echoed = env.get(&cm_ref("a-echo")).await.expect("rendered");
    assert_eq!(
        echoed["data"],
        json!({"a": "default", "b": "configmap", "c": "cr"})
    );
}

#[tokio::test]
async fn a_missing_config_defaults_configmap_is_a_config_error() {
    let env = Harness::dry_run(ConfigEcho).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.annotate(&cr, "windlass.dev/config-defaults", "nope")
        .await;
    let report = env.reconcile(&cr).await;
    // A config error waits for the CR (or its ConfigMap) to change; it is not retried.
    assert_eq!(report.outcome, Action::Done);
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("ConfigMap nope"),
        "{status:#}"
    );
}

#[tokio::test]
async fn a_failing_component_maps_to_reasons_with_its_component_state() {
    let controller = DummyController::new()
        .component(
            DummyComponent::new("db").behave(Behaviour::RenderError(Error::config(
                "db size must be small or large",
            ))),
            &[],
        )
        .component(DummyComponent::new("web").with_configmap("web"), &[]);
    let env = Harness::new(controller).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(
        report.outcome,
        Action::Done,
        "a config error waits for a change"
    );
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert_condition(&status, "Updating", false, "Errored");
    assert_eq!(
        status["conditions"][0]["message"],
        "config error: db size must be small or large"
    );
    assert_eq!(status["componentStatus"]["failedComponents"], json!(["db"]));
    assert_eq!(status["widgetStatus"], "Failed");
}

#[tokio::test]
async fn a_cluster_error_leaves_ready_alone_and_retries() {
    let memory = Arc::new(MemoryCluster::new());
    let faulty = Arc::new(FaultyCluster::new(memory.clone()));
    let env = Harness::on_cluster(
        one_configmap(),
        OperatorConfig::default(),
        memory,
        faulty.clone(),
    );
    let cr = env.apply_cr("a", json!({})).await;
    faulty.fail(
        Op::Apply,
        Some("ConfigMap"),
        windlass::ClusterError::api("etcd is unhappy"),
    );
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Retry);
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "Initializing");
    assert_condition(&status, "Updating", false, "ClusterError");

    faulty.heal();
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
}

#[tokio::test]
async fn conflicts_are_retried_within_the_reconcile() {
    let memory = Arc::new(MemoryCluster::new());
    let faulty = Arc::new(FaultyCluster::new(memory.clone()));
    let env = Harness::on_cluster(
        one_configmap(),
        OperatorConfig::default(),
        memory,
        faulty.clone(),
    );
    let cr = env.apply_cr("a", json!({})).await;
    let conflict = windlass::ClusterError::Conflict {
        object: "cm".into(),
        message: "stale".into(),
    };
    faulty.fail_times(Op::Apply, Some("ConfigMap"), conflict.clone(), 3);
    assert!(
        env.reconcile(&cr).await.error.is_none(),
        "rollout.conflict-retries = 3 absorbs three conflicts"
    );
    faulty.fail_times(Op::Apply, Some("ConfigMap"), conflict, 4);
    env.apply_cr("b", json!({})).await;
    let report = env
        .reconcile(&ObjectRef::new(
            "test.windlass.dev/v1",
            "Widget",
            Some(TEST_NAMESPACE),
            "b",
        ))
        .await;
    assert!(matches!(
        report.error,
        Some(Error::Cluster(windlass::ClusterError::Conflict { .. }))
    ));
}

/// A controller whose web component waits for a condition on its edge to db.
struct Gated;

#[async_trait]
impl Controller for Gated {
    type Resource = Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut g = Components::new();
        let db = g.add(DummyComponent::new("db").with_configmap("db"))?;
        let web = g.add(DummyComponent::new("web").with_configmap("web"))?;
        g.depends_on_when(web, db, |_| async {
            Ok(Readiness::not_yet("the gate is shut"))
        })?;
        Ok(g)
    }
}

#[tokio::test]
async fn dry_run_skips_edge_conditions_and_verification() {
    let env = Harness::dry_run(Gated).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert!(report.state.unwrap().verify_completed());
    assert!(env.get(&cm_ref("a-web")).await.is_some());

    let env = Harness::new(Gated).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    let state = report.state.unwrap();
    assert!(state.unstarted().contains("web"), "{state}");
    assert!(env.get(&cm_ref("a-web")).await.is_none());

    // Dry-run passes verification without looking: an unavailable Deployment verifies.
    let env = Harness::dry_run(DummyController::new().component(
        DummyComponent::new("w").with_object("d", deployment("w")),
        &[],
    ))
    .await;
    let cr = env.apply_cr("a", json!({})).await;
    assert_eq!(env.reconcile(&cr).await.outcome, Action::Done);
}

#[tokio::test]
async fn strict_versioning_rejects_unsupported_versions() {
    let mut config = OperatorConfig::default();
    config.versions.strict = true;
    config.versions.supported = vec!["1.0".into()];
    let env = Harness::with_config(one_configmap(), config).await;
    let cr = env.apply_cr("a", json!({"version": "9.9"})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("unsupported version 9.9")
    );
    let cr = env.apply_cr("b", json!({"version": "1.0"})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(
        status["versions"]["available"]["versions"],
        json!([{"name": "1.0"}])
    );
}

#[tokio::test]
async fn temporary_patches_apply_to_rendered_objects() {
    let env = Harness::dry_run(one_configmap()).await;
    env.memory
        .register_kind(patch_kind(), windlass::cluster::Scope::Namespaced);
    env.apply(&make_patch(
        "more-data",
        "patchStrategicMerge",
        json!({"web": {"web": {"data": {"patched": "yes"}}}}),
    ))
    .await;
    let cr = env.apply_cr("a", json!({})).await;
    env.annotate(&cr, "windlass.dev/temporary-patches", &json!({"more-data": {"timestamp": "2026-01-01T00:00:00Z", "api_version": "test.windlass.dev/v1"}}).to_string()).await;
    env.reconcile(&cr).await;
    let cm = env.get(&cm_ref("a-web")).await.unwrap();
    assert_eq!(cm["data"], json!({"component": "web", "patched": "yes"}));
}

#[tokio::test]
async fn the_dump_dir_receives_the_rendered_components() {
    let dir = std::env::temp_dir().join(format!("windlass-dump-{}", std::process::id()));
    let mut config = OperatorConfig {
        dry_run: true,
        ..OperatorConfig::default()
    };
    config.rollout.dump_dir = Some(dir.clone());
    let env = Harness::with_config(one_configmap(), config).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    let file = dir.join("test.windlass.dev.v1.widget/a/web/a-web.k8s.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // What may hold rendered Secrets is the operator's user's alone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &std::path::Path| {
            std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or_default()
        };
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        assert_eq!(mode(file.parent().unwrap()), 0o700);
        assert_eq!(mode(&dir.join("test.windlass.dev.v1.widget")), 0o700);
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        text.starts_with("---\n") && text.contains("name: a-web"),
        "{text}"
    );
}

#[tokio::test]
async fn several_crs_do_not_interfere() {
    let env = Harness::dry_run(one_configmap()).await;
    let a = env.apply_cr("a", json!({})).await;
    let b = env.apply_cr("b", json!({})).await;
    env.reconcile(&a).await;
    env.reconcile(&b).await;
    assert!(env.get(&cm_ref("a-web")).await.is_some() && env.get(&cm_ref("b-web")).await.is_some());
    env.delete(&a).await;
    assert!(env.get(&cm_ref("a-web")).await.is_none());
    assert!(env.get(&cm_ref("b-web")).await.is_some());
}

/// A controller whose web component waits on a condition that errs or panics.
struct BrokenCondition(bool);

#[async_trait]
impl Controller for BrokenCondition {
    type Resource = Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut g = Components::new();
        let db = g.add(DummyComponent::new("db").with_configmap("db"))?;
        let web = g.add(DummyComponent::new("web").with_configmap("web"))?;
        let panics = self.0;
        g.depends_on_when(web, db, move |_| async move {
            if panics {
                panic!("condition bug");
            }
            Err(Error::Cluster(windlass::ClusterError::Forbidden(
                "statefulsets is forbidden".into(),
            )))
        })?;
        Ok(g)
    }
}

#[tokio::test]
async fn a_failing_edge_condition_reaches_the_status() {
    let env = Harness::new(BrokenCondition(false)).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert!(
        matches!(report.error, Some(Error::Cluster(_))),
        "{:?}",
        report.error
    );
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", false, "ClusterError");
    assert!(
        status["conditions"][1]["message"]
            .as_str()
            .unwrap()
            .contains("statefulsets is forbidden"),
        "{status:#}"
    );

    let env = Harness::new(BrokenCondition(true)).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "Errored");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("the condition component \"web\" waits for panicked: condition bug"),
        "{message}"
    );
}

fn elsewhere() -> DummyComponent {
    DummyComponent::new("elsewhere").with_object(
        "cm",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shared-settings", "namespace": "other"}, "data": {}}),
    )
}

#[tokio::test]
async fn objects_in_another_namespace_are_held_by_the_cleanup_finalizer_and_deleted_with_the_cr() {
    use windlass::annotations::CLEANUP_FINALIZER;
    for controller_finalizer in [false, true] {
        let mut controller = one_configmap().component(elsewhere(), &[]);
        if controller_finalizer {
            controller = controller.finalizer("test.windlass.dev/cleanup", vec![]);
        }
        let env = Harness::new(controller).await;
        env.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}))
            .await;
        let cr = env.apply_cr("a", json!({})).await;
        let report = env.reconcile(&cr).await;
        assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
        let remote = ObjectRef::new("v1", "ConfigMap", Some("other"), "shared-settings");
        assert!(env.get(&remote).await.is_some());
        let finalizers = env.get(&cr).await.unwrap()["metadata"]["finalizers"].clone();
        assert!(
            finalizers
                .as_array()
                .unwrap()
                .contains(&json!(CLEANUP_FINALIZER)),
            "{finalizers}"
        );

        env.delete(&cr).await;
        assert!(env.get(&cr).await.is_some(), "held by the finalizers");
        let report = env.reconcile(&cr).await;
        assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
        assert!(env.get(&cr).await.is_none(), "both finalizers came off");
        assert!(
            env.get(&remote).await.is_none(),
            "the object in the other namespace was deleted with the CR \
             (controller finalizer: {controller_finalizer})"
        );
    }
}

#[tokio::test]
async fn an_object_out_of_the_garbage_collectors_reach_is_recorded_before_it_is_written() {
    use windlass::annotations::CLEANUP_FINALIZER;
    use windlass::testing::Behaviour;
    // The reconcile stops for good after the object in the other namespace is written,
    // before the status write that ends a reconcile: as if the operator were killed there.
    let stuck = DummyComponent::new("stuck").behave(Behaviour::Hang);
    let env = Harness::new(
        one_configmap()
            .component(elsewhere(), &[])
            .component(stuck, &["elsewhere"]),
    )
    .await;
    env.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}))
        .await;
    let cr = env.apply_cr("a", json!({})).await;
    let remote = ObjectRef::new("v1", "ConfigMap", Some("other"), "shared-settings");
    let deadline = std::time::Duration::from_secs(30);
    let written = async {
        let start = std::time::Instant::now();
        while env.get(&remote).await.is_none() {
            assert!(
                start.elapsed() < deadline,
                "the remote object was never written"
            );
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        report = env.reconcile(&cr) => panic!("the stuck component returned: {:?}", report.error),
        () = written => {}
    }
    // The reconcile is gone. What the CR's status recorded before the write is all there is.
    let stored = env.get(&cr).await.unwrap();
    assert!(
        stored.finalizers().contains(&CLEANUP_FINALIZER),
        "{stored:#}"
    );
    let inventory = &stored["status"]["inventory"];
    let entry = inventory
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["name"] == "shared-settings"))
        .unwrap_or_else(|| panic!("the remote object is not in the stored inventory: {stored:#}"));
    assert_eq!(entry["component"], "elsewhere");
    assert!(
        entry.get("uid").is_none(),
        "pending: written before its uid was known: {entry}"
    );

    // The CR is deleted before any reconcile finished: its cleanup still finds the object.
    env.delete(&cr).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    assert!(
        env.get(&remote).await.is_none(),
        "the remote object was left behind"
    );
    assert!(
        env.get(&cr).await.is_none(),
        "the cleanup finalizer came off"
    );
}

#[tokio::test]
async fn a_pending_entry_is_not_the_crs_unless_the_object_carries_its_label() {
    let env = Harness::new(one_configmap().component(elsewhere(), &[])).await;
    env.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}))
        .await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    let remote = ObjectRef::new("v1", "ConfigMap", Some("other"), "shared-settings");
    // After a whole reconcile the entry has its uid.
    let status = env.status(&cr).await;
    let entry = status["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "shared-settings")
        .unwrap()
        .clone();
    assert!(entry["uid"].is_string(), "{entry}");
    // Someone else's object of another name, recorded by hand as pending: never deleted.
    env.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "theirs", "namespace": "other"}, "data": {}}))
        .await;
    let mut forged = status.clone();
    forged["inventory"].as_array_mut().unwrap().push(json!({
        "component": "elsewhere", "apiVersion": "v1", "kind": "ConfigMap",
        "namespace": "other", "name": "theirs"}));
    env.set_status(&cr, forged).await;
    env.delete(&cr).await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Done, "{:?}", report.error);
    assert!(
        env.get(&remote).await.is_none(),
        "the CR's own object was deleted"
    );
    let theirs = ObjectRef::new("v1", "ConfigMap", Some("other"), "theirs");
    assert!(
        env.get(&theirs).await.is_some(),
        "an object without the CR's label is left alone"
    );
}

#[tokio::test]
async fn a_cr_whose_objects_are_all_in_its_namespace_gets_no_cleanup_finalizer() {
    let env = Harness::new(one_configmap()).await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    assert!(env.get(&cr).await.unwrap().finalizers().is_empty());
}

#[tokio::test]
async fn a_component_held_by_its_edge_waits_for_a_precondition_and_says_why() {
    let env = Harness::new(Gated).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert!(matches!(report.outcome, Action::RequeueAfter(_)));
    let status = env.status(&cr).await;
    assert_condition(&status, "Updating", true, "PreconditionWait");
    let message = status["conditions"][1]["message"].as_str().unwrap();
    assert_eq!(message, "Waiting: web: the gate is shut", "{status:#}");
}
