//! Tests of the operational subcommands of [`super`]: `check-heartbeat` and `manifests`.

#![allow(clippy::unwrap_used)]

use std::process::ExitCode;

use serde_json::{Value, json};

use super::{Output, run};
use crate::object::ManifestExt;
use crate::testing::{DummyComponent, DummyController};

/// A Widget operator whose CRs own a ConfigMap.
pub(crate) fn widget_operator() -> DummyController {
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{cr}-settings"},
        "data": {"greeting": "hello"}});
    DummyController::new().component(
        DummyComponent::new("settings").with_object("settings", config_map),
        &[],
    )
}

/// Run the command line `args` (without the program name) of [`widget_operator`].
async fn cli(args: &[&str]) -> (ExitCode, String) {
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["widget-operator"];
    argv.extend_from_slice(args);
    let code = run(widget_operator(), argv, out).await;
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    (code, text)
}

fn write_beat_aged(file: &std::path::Path, seconds: i64) {
    let beat = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds);
    let text = crate::runtime::heartbeat::format_beat(beat, &jiff::tz::TimeZone::system());
    std::fs::write(file, text).unwrap();
}

#[tokio::test]
async fn check_heartbeat_passes_on_a_fresh_beat_and_fails_on_an_old_or_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("heartbeat.txt");
    let path = file.to_str().unwrap();

    let (code, _) = cli(&["check-heartbeat", "--delta", "30", "--file", path]).await;
    assert_eq!(code, ExitCode::FAILURE, "no file yet");

    write_beat_aged(&file, 5);
    let (code, out) = cli(&["check-heartbeat", "-d", "30", "-f", path]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.starts_with("heartbeat ok: "), "{out}");

    write_beat_aged(&file, 120);
    let (code, _) = cli(&["check-heartbeat", "-d", "30", "-f", path]).await;
    assert_eq!(code, ExitCode::FAILURE, "two minutes old, 30 s allowed");
    let (code, _) = cli(&["check-heartbeat", "-d", "300", "-f", path]).await;
    assert_eq!(code, ExitCode::SUCCESS, "five minutes allowed");
}

#[tokio::test]
async fn check_heartbeat_reads_the_file_from_the_config_and_needs_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("beat");
    write_beat_aged(&file, 0);
    let flag = format!("--python_watch_manager.heartbeat_file={}", file.display());
    let (code, out) = cli(&["check-heartbeat", "-d", "10", &flag]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");

    // No file anywhere: a usage error, not a failed check.
    let (code, _) = cli(&["check-heartbeat", "-d", "10"]).await;
    assert_eq!(code, ExitCode::from(2));
    // --delta is required and an integer.
    let (code, _) = cli(&["check-heartbeat", &flag]).await;
    assert_eq!(code, ExitCode::from(2));
    let (code, _) = cli(&["check-heartbeat", "-d", "soon", &flag]).await;
    assert_eq!(code, ExitCode::from(2));
}

/// A file with one Widget CR, in a directory that lives as long as the returned guard.
fn widget_cr() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("widget.yaml");
    std::fs::write(
        &file,
        "apiVersion: test.windlass.dev/v1\nkind: Widget\nmetadata: {name: sample}\nspec: {}\n",
    )
    .unwrap();
    let path = file.to_str().unwrap().to_string();
    (dir, path)
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d.kind().unwrap()).collect()
}

#[tokio::test]
async fn manifests_print_the_crd_rbac_and_a_deployment_probed_on_the_metrics_port() {
    let (_dir, cr) = widget_cr();
    let (code, out) = cli(&[
        "manifests",
        &cr,
        "--image",
        "example.com/widget:1",
        "--namespace",
        "ops",
        "--metrics_bind_address=0.0.0.0:9443",
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    assert_eq!(
        kinds(&docs),
        [
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment"
        ]
    );
    assert_eq!(docs[0]["metadata"]["name"], "widgets.test.windlass.dev");
    assert_eq!(docs[1]["metadata"]["name"], "ops");
    // The rules come from the dry run: the ConfigMaps the CRs own.
    let rules = serde_json::to_string(&docs[3]["rules"]).unwrap();
    assert!(
        rules.contains("configmaps") && rules.contains("widgets"),
        "{rules}"
    );
    let deployment = &docs[5];
    assert_eq!(deployment["metadata"]["namespace"], "ops");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "example.com/widget:1");
    assert_eq!(
        container["ports"],
        json!([{"name": "metrics", "containerPort": 9443, "protocol": "TCP"}])
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "metrics"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "metrics"})
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "widget-operator"
    );
}

#[tokio::test]
async fn manifests_with_replicas_elect_and_with_watched_namespaces_use_roles() {
    let (_dir, cr) = widget_cr();
    let (code, out) = cli(&[
        "manifests",
        &cr,
        "--image",
        "x",
        "--replicas",
        "2",
        "--watch_namespace=shop",
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    assert_eq!(
        kinds(&docs),
        [
            "CustomResourceDefinition",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
    // The operator's namespace is `default`, which exists: no Namespace document.
    assert_eq!(docs[2]["metadata"]["namespace"], "shop");
    assert_eq!(docs[4]["metadata"]["namespace"], "default");
    let env = serde_json::to_string(&docs[6]["spec"]["template"]["spec"]["containers"][0]["env"])
        .unwrap();
    assert!(
        env.contains(r#"{"name":"PYTHON_WATCH_MANAGER_LOCK_TYPE","value":"leader-with-lease"}"#),
        "{env}"
    );
    assert!(
        env.contains(r#"{"name":"WATCH_NAMESPACE","value":"shop"}"#),
        "{env}"
    );
}

#[tokio::test]
async fn manifests_need_an_image_and_a_cr() {
    let (_dir, cr) = widget_cr();
    assert_eq!(cli(&["manifests", &cr]).await.0, ExitCode::from(2));
    assert_eq!(
        cli(&["manifests", "--image", "x"]).await.0,
        ExitCode::from(2)
    );
    assert_eq!(
        cli(&["manifests", &cr, "--image", "x", "--replicas", "-1"])
            .await
            .0,
        ExitCode::from(2)
    );
    // A server the probes cannot reach.
    assert_eq!(
        cli(&["manifests", &cr, "--image", "x", "--metrics_bind_address="])
            .await
            .0,
        ExitCode::FAILURE
    );
}
