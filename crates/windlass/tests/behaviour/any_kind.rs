//! Any kind as primary: a controller of Namespaces (a built-in kind without a CRD of
//! ours), whose status is not windlass's to write. It gives every namespace a ConfigMap,
//! writes no status, and tells its outcome in Events.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use serde_json::json;
use windlass::Action;
use windlass::cluster::{Cluster, MemoryCluster};
use windlass::config::OperatorConfig;
use windlass::events::{MemoryEventSink, Reason};
use windlass::object::{ManifestExt, ObjectRef};
use windlass::prelude::*;
use windlass::reconcile::Reconciler;

/// Gives each Namespace a `tenant-defaults` ConfigMap.
struct NamespaceDefaults;

struct Defaults;

#[async_trait]
impl Component<NamespaceDefaults> for Defaults {
    fn name(&self) -> &str {
        "defaults"
    }
    async fn render(
        &self,
        session: &Session<NamespaceDefaults>,
        out: &mut Resources,
    ) -> Result<()> {
        // The primary is cluster-scoped: the component names the namespace.
        out.add(
            "config",
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("tenant-defaults".into()),
                    namespace: Some(session.name().to_string()),
                    ..Default::default()
                },
                data: Some([("tenant".to_string(), session.name().to_string())].into()),
                ..Default::default()
            },
        )?;
        Ok(())
    }
}

#[async_trait]
impl Controller for NamespaceDefaults {
    type Resource = Namespace;
    type Config = NoConfig;
    type Status = Unmanaged;
    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        if session.name().starts_with("kube-") {
            return Err(Error::precondition("system namespaces are left alone"));
        }
        let mut graph = Components::new();
        graph.add(Defaults)?;
        Ok(graph)
    }
}

fn namespace(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "Namespace", None, name)
}

#[tokio::test]
async fn a_namespace_controller_provisions_writes_no_status_and_reports_in_events() {
    let memory = Arc::new(MemoryCluster::new());
    memory.create_namespace("tenant-a").unwrap();
    let events = Arc::new(MemoryEventSink::new());
    let reconciler = Reconciler::new(NamespaceDefaults, memory.clone(), OperatorConfig::default())
        .with_events(events.clone());

    let report = reconciler.reconcile(&namespace("tenant-a")).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(
        report.outcome,
        Action::Done,
        "without a status to read back, the rollout's own outcome ends it"
    );
    let config = memory
        .get(&ObjectRef::new(
            "v1",
            "ConfigMap",
            Some("tenant-a"),
            "tenant-defaults",
        ))
        .await
        .unwrap()
        .expect("the ConfigMap is in the namespace");
    let owner = &config["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Namespace");
    assert_eq!(owner["name"], "tenant-a");
    assert_eq!(config.label("app.kubernetes.io/name"), Some("namespace"));
    assert_eq!(config.label("app.kubernetes.io/instance"), Some("tenant-a"));

    let ns = memory.get(&namespace("tenant-a")).await.unwrap().unwrap();
    assert!(
        ns["status"].get("conditions").is_none() && ns["status"].get("componentStatus").is_none(),
        "windlass writes no status of a kind it does not own: {}",
        ns["status"]
    );
    let reasons: Vec<Reason> = events.events().iter().map(|e| e.event.reason()).collect();
    assert_eq!(
        reasons,
        [Reason::RolloutCompleted],
        "the outcome is an Event"
    );
}

#[tokio::test]
async fn a_namespace_that_must_wait_says_why_in_an_event() {
    let memory = Arc::new(MemoryCluster::new());
    memory.create_namespace("kube-extra").unwrap();
    let events = Arc::new(MemoryEventSink::new());
    let reconciler = Reconciler::new(NamespaceDefaults, memory.clone(), OperatorConfig::default())
        .with_events(events.clone());

    let report = reconciler.reconcile(&namespace("kube-extra")).await;
    assert!(matches!(report.outcome, Action::RequeueAfter(_)));
    let recorded = events.events();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].event.reason(), Reason::RolloutWaiting);
    assert!(
        recorded[0]
            .event
            .note()
            .contains("system namespaces are left alone"),
        "{:?}",
        recorded[0].event
    );
    let ns = memory.get(&namespace("kube-extra")).await.unwrap().unwrap();
    assert!(ns["status"].get("conditions").is_none());
}

#[tokio::test]
async fn the_cli_runs_a_controller_without_a_crd() {
    let (out, buffer) = windlass::cli::Output::buffer();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.yaml");
    std::fs::write(
        &path,
        serde_json::to_string(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-b"}}),
        )
        .unwrap(),
    )
    .unwrap();
    let code = windlass::cli::run_without_crd(
        NamespaceDefaults,
        [
            "namespace-operator",
            "run",
            "--dry-run",
            path.to_str().unwrap(),
        ],
        out.clone(),
    )
    .await;
    let printed = buffer.text();
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{printed}");
    assert!(printed.contains("tenant-defaults"), "{printed}");
    let code =
        windlass::cli::run_without_crd(NamespaceDefaults, ["namespace-operator", "crds"], out)
            .await;
    assert_eq!(code, std::process::ExitCode::SUCCESS);
}
