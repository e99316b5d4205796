//! `describe` against the real API server, in process: a CR whose component fails to
//! render after another was deployed. The operator's reconcile writes the failure to the
//! status and an Event; `describe` shows the failed component with its error, the deployed
//! one's object as ready and in sync, the conditions and the Event, and writes nothing.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use windlass::cli::{Output, run};
use windlass::cluster::{Cluster, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::events::LiveEventSink;
use windlass::object::{ManifestExt, ObjectRef};
use windlass::reconcile::Reconciler;
use windlass::testing::{Behaviour, DummyComponent, DummyController};

use crate::{eventually, live};

/// A Widget operator whose `broken` component, after `settings`, cannot render.
fn sealed_operator() -> DummyController {
    let settings = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "{cr}-settings"}, "data": {"greeting": "hello"}});
    DummyController::new()
        .component(
            DummyComponent::new("settings").with_object("settings", settings),
            &[],
        )
        .component(
            DummyComponent::new("broken")
                .with_configmap("broken")
                .behave(Behaviour::RenderError(windlass::Error::rollout(
                    "the vault is sealed",
                ))),
            &["settings"],
        )
}

#[tokio::test]
async fn describe_shows_a_failing_component_of_a_live_cr_and_writes_nothing() {
    let (cluster, env) = live().await;
    let ns = env.namespace("describe-failing").await.unwrap();
    let widget = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": "sealed", "namespace": ns.name()}, "spec": {}});
    cluster.apply(&widget, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&widget).unwrap();

    // The operator's reconcile: settings deployed, broken failed, recorded in the status.
    let events = LiveEventSink::with_reporter(
        env.client().unwrap(),
        "widget-operator",
        Some("live-test".into()),
    );
    let reconciler = Reconciler::new(
        sealed_operator(),
        cluster.clone(),
        OperatorConfig::default(),
    )
    .with_events(Arc::new(events));
    let report = reconciler.reconcile(&cr).await;
    let error = report
        .error
        .expect("the broken component fails the reconcile");
    assert!(error.to_string().contains("the vault is sealed"), "{error}");
    eventually("the failure's Event is listed", || async {
        let list = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(
            env.client().unwrap(),
            ns.name(),
        )
        .list(&Default::default())
        .await
        .unwrap();
        !list.items.is_empty()
    })
    .await;
    let before = cluster.get(&cr).await.unwrap().unwrap();

    let kubeconfig = env.kubeconfig_path().to_str().unwrap().to_string();
    let describe = |extra: &'static [&'static str]| {
        let argv: Vec<String> = ["widget-operator", "describe", "widget/sealed", "-n"]
            .into_iter()
            .map(String::from)
            .chain([
                ns.name().to_string(),
                "--kubeconfig".into(),
                kubeconfig.clone(),
            ])
            .chain(["--context".to_string(), "windlass-testenv".to_string()])
            .chain(extra.iter().map(|s| s.to_string()))
            .collect();
        async move {
            let (out, buffer) = Output::buffer();
            let code = run(sealed_operator(), argv, out).await;
            let text = buffer.text();
            assert_eq!(code, ExitCode::SUCCESS, "{text}");
            text
        }
    };
    let text = describe(&[]).await;
    println!("{text}");
    assert!(text.contains("✗ broken failed: "), "{text}");
    assert!(text.contains("the vault is sealed"), "{text}");
    let settings = format!("v1/ConfigMap/{}/sealed-settings  ready, in sync", ns.name());
    assert!(text.contains(&settings), "{text}");
    assert!(
        text.contains("Ready     False"),
        "the operator's conditions:\n{text}"
    );
    let events_section = text.split("events:").nth(1).unwrap_or_default();
    assert!(
        events_section.contains("the vault is sealed"),
        "the operator's Event:\n{text}"
    );

    let json: serde_json::Value = serde_json::from_str(&describe(&["-o", "json"]).await).unwrap();
    let broken = json["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "broken")
        .unwrap();
    assert_eq!(broken["state"], "failed", "{json}");

    // Nothing written: the CR (status, finalizers) is as the reconcile left it, and the
    // broken component's ConfigMap was never created.
    let after = cluster.get(&cr).await.unwrap().unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
    let broken_map = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "sealed-broken");
    assert!(cluster.get(&broken_map).await.unwrap().is_none());
}
