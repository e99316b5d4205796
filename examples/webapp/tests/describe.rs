//! `webapp-operator describe` against a real control plane: a WebApp whose database is not
//! there yet (waiting, and what a reconcile would create, with nothing written), and one
//! whose settings another writer changed (drifted).

#![allow(clippy::unwrap_used)]

use std::process::Command;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use windlass::cluster::{Cluster, WriteMethod};
use windlass::object::ObjectRef;
use windlass_testenv::TestEnv;

mod support;
use support::{LONG, Operator, eventually, ready};

fn webapp(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop"}})
}

/// `webapp-operator describe webapp/NAME -n NAMESPACE` and `extra` against `env`.
fn describe(env: &TestEnv, namespace: &str, name: &str, extra: &[&str]) -> String {
    let target = format!("webapp/{name}");
    let output = Command::new(env!("CARGO_BIN_EXE_webapp-operator"))
        .args(["describe", &target, "-n", namespace])
        .args(extra)
        .env("KUBECONFIG", env.kubeconfig_path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    assert!(output.status.success(), "{output:?}\n{stdout}");
    stdout
}

#[tokio::test]
async fn a_webapp_without_its_database_waits_and_describe_writes_nothing() {
    let (env, ns, cluster) = support::setup::<webapp_operator::WebApp>("describe-waiting").await;
    let ns = ns.name();
    // No operator runs: nothing has been created for the WebApp.
    cluster
        .apply(&webapp(ns, "waiting"), WriteMethod::Update)
        .await
        .unwrap();
    let text = describe(env, ns, "waiting", &[]);
    let line = |component: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(component))
            .unwrap_or_else(|| panic!("no line of {component} in:\n{text}"))
            .to_string()
    };
    assert!(line("database").contains("waiting"), "{text}");
    assert!(line("credentials").contains("to deploy"), "{text}");
    assert!(line("web").contains("not reached"), "{text}");
    let statefulset = format!("apps/v1/StatefulSet/{ns}/waiting-db  missing, would be created");
    assert!(text.contains(&statefulset), "{text}");

    // Nothing was written: no StatefulSet, no status, no finalizer.
    let db = ObjectRef::new("apps/v1", "StatefulSet", Some(ns), "waiting-db");
    assert!(cluster.get(&db).await.unwrap().is_none());
    let cr = cluster
        .get(&ObjectRef::from_manifest(&webapp(ns, "waiting")).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(cr.get("status").is_none(), "{cr}");
    assert!(cr["metadata"].get("finalizers").is_none(), "{cr}");

    let json: Value = serde_json::from_str(&describe(env, ns, "waiting", &["-o", "json"])).unwrap();
    let database = json["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "database")
        .unwrap();
    assert_eq!(database["state"], "waiting", "{json}");
}

#[tokio::test]
async fn a_field_another_writer_took_shows_as_drifted_with_the_crs_events() {
    let (env, ns, cluster) = support::setup::<webapp_operator::WebApp>("describe-drift").await;
    let ns = ns.name();
    let mut operator = Operator::start(env, "describe", ns, &[]);
    let manifest = webapp(ns, "drift");
    cluster.apply(&manifest, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&manifest).unwrap();
    eventually("the WebApp is Ready", LONG, &[&operator], || async {
        cluster.get(&cr).await.unwrap().is_some_and(|cr| ready(&cr))
    })
    .await;
    // The operator stops, so nothing puts the field back; another writer takes it.
    operator.kill();
    let settings: Api<ConfigMap> = Api::namespaced(env.client().unwrap(), ns);
    let taken = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "drift-web"}, "data": {"APP_VERSION": "9.9.9"}});
    settings
        .patch(
            "drift-web",
            &PatchParams::apply("intruder").force(),
            &Patch::Apply(&taken),
        )
        .await
        .unwrap();

    let text = describe(env, ns, "drift", &[]);
    println!("{text}");
    let configmap = text
        .lines()
        .find(|l| l.contains(&format!("v1/ConfigMap/{ns}/drift-web ")))
        .unwrap_or_else(|| panic!("no web ConfigMap in:\n{text}"));
    assert!(
        configmap.contains("drifted: ") && configmap.contains("APP_VERSION"),
        "{text}"
    );
    // Everything else is as the operator left it.
    let database = format!("apps/v1/StatefulSet/{ns}/drift-db  ready, in sync");
    assert!(text.contains(&database), "{text}");
    assert!(text.contains("Ready     True"), "{text}");
    assert!(text.contains("events:"), "the CR's Events:\n{text}");
    let live = settings.get("drift-web").await.unwrap();
    assert_eq!(
        live.data.unwrap()["APP_VERSION"],
        "9.9.9",
        "describe put nothing back"
    );
}

#[tokio::test]
async fn describe_reads_the_operators_view_of_a_failing_cr() {
    let (env, ns, cluster) = support::setup::<webapp_operator::WebApp>("describe-operator").await;
    let ns = ns.name();
    let operator = Operator::start(env, "debug", ns, &["--set", "server.debug-endpoints=true"]);
    let mut manifest = webapp(ns, "typo");
    manifest["spec"]["configOverrides"] = json!({"migrationImag": "x"});
    cluster.apply(&manifest, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&manifest).unwrap();
    eventually("the typo is a config error", LONG, &[&operator], || async {
        cluster.get(&cr).await.unwrap().is_some_and(|cr| {
            cr["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["reason"] == "ConfigError")
        })
    })
    .await;
    eventually(
        "the operator has reported the reconcile",
        LONG,
        &[&operator],
        || async {
            operator
                .http(&format!("/debug/windlass/webapp/{ns}/typo"))
                .is_some_and(|(code, body)| code == 200 && body.contains("no such key"))
        },
    )
    .await;

    let url = operator.url();
    let text = describe(env, ns, "typo", &["--operator", &url]);
    println!("{text}");
    assert!(text.contains("operator:"), "{text}");
    assert!(
        text.contains("queue: queued, due in "),
        "waiting for the next sync period:\n{text}"
    );
    assert!(
        text.contains("last reconcile: ") && text.contains("no such key: migrationImag"),
        "{text}"
    );
    let json: Value = serde_json::from_str(&describe(
        env,
        ns,
        "typo",
        &["--operator", &url, "-o", "json"],
    ))
    .unwrap();
    assert_eq!(json["operator"]["queue"]["state"], "delayed", "{json}");

    // Off by default: an operator without the switch has no such path.
    let plain = Operator::start(env, "plain", ns, &[]);
    eventually("the second operator serves", LONG, &[&plain], || async {
        plain.http("/healthz").is_some_and(|(code, _)| code == 200)
    })
    .await;
    let (code, _) = plain
        .http(&format!("/debug/windlass/webapp/{ns}/typo"))
        .unwrap();
    assert_eq!(code, 404);
}
