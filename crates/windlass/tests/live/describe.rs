//! `describe` against the real API server, in process: a CR whose component fails to
//! render after another was deployed. The operator's reconcile writes the failure to the
//! status and an Event; `describe` shows the failed component with its error, the deployed
//! one's object as ready and in sync, the conditions and the Event, and writes nothing.
//! And the hooks of a described CR are told that their writes would not take effect.

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

/// What `Session::writes_take_effect` said to the `observer` component, in order.
static SEEN: std::sync::Mutex<Vec<bool>> = std::sync::Mutex::new(Vec::new());

/// A Widget controller whose one component notes whether its writes take effect.
struct Observing;

#[windlass::async_trait]
impl windlass::controller::Controller for Observing {
    type Resource = windlass::testing::Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;

    fn components(
        &self,
        _: &windlass::session::Session<Self>,
    ) -> windlass::Result<windlass::controller::Components<Self>> {
        let mut graph = windlass::controller::Components::new();
        graph.add_fn(
            "observer",
            |session: &windlass::session::Session<Self>, _| {
                SEEN.lock().unwrap().push(session.writes_take_effect());
                Ok(())
            },
        )?;
        Ok(graph)
    }
}

#[tokio::test]
async fn hooks_are_told_that_describe_writes_nothing() {
    let (cluster, env) = live().await;
    let ns = env.namespace("describe-effects").await.unwrap();
    let widget = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": "quiet", "namespace": ns.name()}, "spec": {}});
    cluster.apply(&widget, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&widget).unwrap();

    // A reconcile of the operator: its writes take effect.
    let reconciler = Reconciler::new(Observing, cluster.clone(), OperatorConfig::default());
    let report = reconciler.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(SEEN.lock().unwrap().last(), Some(&true));

    // `describe` of the same CR: they would not.
    let kubeconfig = env.kubeconfig_path().to_str().unwrap().to_string();
    let argv = [
        "widget-operator",
        "describe",
        "widget/quiet",
        "-n",
        ns.name(),
        "--kubeconfig",
        &kubeconfig,
    ];
    let (out, captured) = Output::buffer();
    let code = run(Observing, argv, out).await;
    assert_eq!(code, ExitCode::SUCCESS, "{}", captured.text());
    assert_eq!(SEEN.lock().unwrap().last(), Some(&false));
}
