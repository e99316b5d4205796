//! Replica counts through whole reconciles: on the in-memory cluster, where another field
//! manager's update takes `spec.replicas` away from windlass as it does on a real server, and
//! on the real control plane, with a scale through the `/scale` subresource (what
//! `kubectl scale` and the HorizontalPodAutoscaler do).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{Value, json};
use windlass::cluster::{Cluster, LiveCluster, RequestCounter, Verb, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::object::{ObjectRef, TypeRef};
use windlass::prelude::*;
use windlass::reconcile::Reconciler;
use windlass::testing::{Harness, TEST_NAMESPACE, Widget};
use windlass_x::replicas::{INSTANCE_SIZE, ReplicaPolicy};

const WEB: Ref<Deployment> = Ref::new("web");

struct App;

#[async_trait]
impl Controller for App {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        graph.add(Web)?;
        Ok(graph)
    }
}

struct Web;

#[async_trait]
impl Component<App> for Web {
    fn name(&self) -> &str {
        "web"
    }

    async fn render(&self, session: &Session<App>, out: &mut Resources) -> Result<()> {
        let replicas = ReplicaPolicy::new()
            .replicas(session, self.name(), WEB)
            .await?;
        let name = session.name_of(WEB);
        let mut deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": replicas.labels()},
            "spec": {"selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"securityContext": restricted_pod_security(), "containers": [{"name": "main", "image": "busybox", "securityContext": restricted_container_security()}]}}}});
        if let Some(count) = replicas.count {
            deployment["spec"]["replicas"] = json!(count);
        }
        out.add_value("deployment", deployment)?;
        Ok(())
    }
}

fn spec(size: &str, quiesce: bool) -> Value {
    json!({"size": size, "backup": {"offlineQuiesce": quiesce},
        "configOverrides": {"replicas": {"small": {"web": 2}, "large": {"web": 3}}}})
}

fn replicas_and_size(deployment: &Value) -> (i64, String) {
    (
        deployment["spec"]["replicas"].as_i64().unwrap(),
        deployment["metadata"]["labels"][INSTANCE_SIZE]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

#[tokio::test]
async fn dry_run_every_rule_through_a_reconcile() {
    let env = Harness::dry_run(App).await;
    let web = ObjectRef::new("apps/v1", "Deployment", Some(TEST_NAMESPACE), "shop-web");
    let reconcile = |spec: Value| {
        let env = &env;
        async move {
            let cr = env.apply_cr("shop", spec).await;
            env.log.clear();
            let report = env.reconcile(&cr).await;
            assert!(report.error.is_none(), "{:?}", report.error);
            env.get(&ObjectRef::new(
                "apps/v1",
                "Deployment",
                Some(TEST_NAMESPACE),
                "shop-web",
            ))
            .await
            .unwrap()
        }
    };
    // New: the configured count.
    let d = reconcile(spec("small", false)).await;
    assert_eq!(replicas_and_size(&d), (2, "small".into()));
    reconcile(spec("small", false)).await;
    assert!(
        env.log.applied().is_empty(),
        "kept, still windlass's: no write"
    );

    // An autoscaler scales it: kept, and left to the autoscaler (one write drops the
    // field from windlass's apply, then nothing).
    env.memory
        .update_as(
            "autoscaler",
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "shop-web", "namespace": TEST_NAMESPACE}, "spec": {"replicas": 4}}),
            WriteMethod::Update,
        )
        .unwrap();
    let d = reconcile(spec("small", false)).await;
    assert_eq!(replicas_and_size(&d), (4, "small".into()));
    reconcile(spec("small", false)).await;
    assert!(env.log.applied().is_empty(), "{:?}", env.log.applied());
    assert_eq!(replicas_and_size(&env.get(&web).await.unwrap()).0, 4);

    // A size change: recomputed, and windlass's again.
    let d = reconcile(spec("large", false)).await;
    assert_eq!(replicas_and_size(&d), (3, "large".into()));

    // Scaled to 0 by someone: brought back, unless quiesced for an offline backup.
    let scale_to_zero = || {
        env.memory
            .update_as(
                "backup",
                &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "shop-web", "namespace": TEST_NAMESPACE}, "spec": {"replicas": 0}}),
                WriteMethod::Update,
            )
            .unwrap()
    };
    scale_to_zero();
    let d = reconcile(spec("large", true)).await;
    assert_eq!(replicas_and_size(&d).0, 0, "quiesced: stays down");
    let d = reconcile(spec("large", false)).await;
    assert_eq!(replicas_and_size(&d).0, 3, "quiesce over: back up");

    // A size with no count: a config error naming the key, nothing written.
    let cr = env.apply_cr("shop", spec("huge", false)).await;
    env.log.clear();
    env.reconcile(&cr).await;
    assert!(env.log.applied().is_empty());
    let status = env.status(&cr).await;
    windlass::testing::assert_condition(&status, "Ready", false, "ConfigError");
    assert!(status.to_string().contains("replicas.huge.web"), "{status}");
}

use windlass_testenv::{eventually, restricted_container_security, restricted_pod_security};

#[tokio::test]
async fn live_a_scale_by_another_field_manager_is_kept_until_the_size_changes() {
    let env = windlass_testenv::TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let admin = LiveCluster::new(env.client().unwrap());
    let crd = serde_json::to_value(<Widget as kube::CustomResourceExt>::crd()).unwrap();
    admin.apply(&crd, WriteMethod::Apply).await.unwrap();
    let widgets = TypeRef::new("test.windlass.dev/v1", "Widget");
    eventually("the Widget CRD is served", || async {
        admin.scope(&widgets).await.is_ok()
    })
    .await;
    let ns = env.namespace("replicas").await.unwrap();
    let ns = ns.name();

    let counter = RequestCounter::new();
    let cluster = Arc::new(LiveCluster::new(counter.client(env.kube_config()).unwrap()));
    let reconciler = Reconciler::new(App, cluster, OperatorConfig::default());
    let cr_manifest = |size: &str| {
        json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": "shop", "namespace": ns}, "spec": spec(size, false)})
    };
    let reconcile = |size: &'static str| {
        let (admin, reconciler) = (&admin, &reconciler);
        let manifest = cr_manifest(size);
        async move {
            admin.apply(&manifest, WriteMethod::Update).await.unwrap();
            let cr = ObjectRef::from_manifest(&manifest).unwrap();
            let report = reconciler.reconcile(&cr).await;
            assert!(
                !report.error.as_ref().is_some_and(Error::is_fatal),
                "{:?}",
                report.error
            );
        }
    };
    let web = ObjectRef::new("apps/v1", "Deployment", Some(ns), "shop-web");
    let live = || async { replicas_and_size(&admin.get(&web).await.unwrap().unwrap()) };

    reconcile("small").await;
    assert_eq!(live().await, (2, "small".into()));

    // `kubectl scale --replicas=4`: an update of the /scale subresource by its own manager.
    let deployments = kube::Api::<Deployment>::namespaced(env.client().unwrap(), ns);
    deployments
        .patch_scale(
            "shop-web",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-scale".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    eventually("the scale is stored", || async { live().await.0 == 4 }).await;

    // Who owns spec.replicas, as the server says.
    let owners = || async {
        deployments
            .get("shop-web")
            .await
            .unwrap()
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                e.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0["f:spec"].get("f:replicas").is_some())
            })
            .filter_map(|e| e.manager)
            .collect::<Vec<String>>()
    };

    // The server records the /scale update under its own field manager: windlass no longer
    // owns spec.replicas, and its next apply leaves the field out, once.
    assert_eq!(owners().await, ["kubectl-scale"]);
    counter.take();
    reconcile("small").await;
    assert_eq!(
        live().await,
        (4, "small".into()),
        "the scaler's count stays"
    );
    let counts = counter.take();
    println!("the reconcile after the scale:\n{counts}");
    assert_eq!(
        counts.of(Verb::Apply, "deployments"),
        1,
        "once, to drop spec.replicas from windlass's apply:\n{counts}"
    );
    assert_eq!(
        owners().await,
        ["kubectl-scale"],
        "windlass left the field alone"
    );
    reconcile("small").await;
    assert_eq!(live().await, (4, "small".into()));
    let steady = counter.take();
    println!("a steady reconcile:\n{steady}");
    // (The status may change: the pods of the new count become ready meanwhile.)
    assert_eq!(
        steady.of(Verb::Apply, "deployments"),
        0,
        "a steady reconcile writes the Deployment:\n{steady}"
    );

    // An autoscaler that updates the Deployment itself takes the field from the scaler:
    // windlass, which left it already, writes nothing, and its value stays (not the
    // default 1).
    deployments
        .patch(
            "shop-web",
            &kube::api::PatchParams {
                field_manager: Some("autoscaler".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(owners().await, ["autoscaler"]);
    counter.take();
    reconcile("small").await;
    assert_eq!(
        live().await,
        (5, "small".into()),
        "the autoscaler's count stays"
    );
    assert_eq!(
        owners().await,
        ["autoscaler"],
        "windlass left the field alone"
    );
    let counts = counter.take();
    println!("the reconcile after the autoscaler's update:\n{counts}");
    assert_eq!(counts.of(Verb::Apply, "deployments"), 0, "{counts}");
    reconcile("small").await;
    assert_eq!(live().await, (5, "small".into()));
    let steady = counter.take();
    assert_eq!(steady.of(Verb::Apply, "deployments"), 0, "{steady}");

    // The size changes: recomputed, and windlass takes the field back.
    reconcile("large").await;
    assert_eq!(live().await, (3, "large".into()));
    assert!(owners().await.contains(&"windlass".to_string()));
    // Another scale is kept at the new size too.
    deployments
        .patch_scale(
            "shop-web",
            &kube::api::PatchParams {
                field_manager: Some("kubectl-scale".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 6}})),
        )
        .await
        .unwrap();
    eventually("the second scale is stored", || async {
        live().await.0 == 6
    })
    .await;
    reconcile("large").await;
    reconcile("large").await;
    assert_eq!(live().await, (6, "large".into()));
}
