//! The notes operator as a separate process (`notes-operator run`) on a real control plane
//! (`windlass-testenv`: kube-apiserver, etcd, kube-controller-manager and a node simulator
//! that makes pods "run"), in the mode where it deploys Postgres. No PostgreSQL runs in the
//! simulated pods, so this checks what the API server can show: the objects converge with
//! the TLS material and references the app needs, the CR becomes Ready, and under the
//! runtime a rotated password in the generated Secret rolls the app (its pod template's
//! dependency hash changes) without anything else touching the CR.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use k8s_openapi::ByteString;
use serde_json::{Value, json};
use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::object::ObjectRef;
use windlass_testenv::TestEnv;

mod live_support;
use live_support::{LONG, Operator, eventually, install_crd, ready};

fn hash(deployment: &Value) -> Option<String> {
    deployment["spec"]["template"]["metadata"]["annotations"]
        [windlass::annotations::DEPENDENCY_HASH]
        .as_str()
        .map(str::to_string)
}

fn text(secret: &Value, key: &str) -> String {
    let bytes: ByteString = serde_json::from_value(secret["data"][key].clone()).unwrap();
    String::from_utf8(bytes.0).unwrap()
}

#[tokio::test]
async fn the_deployed_postgres_converges_and_a_rotated_password_rolls_the_app() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let namespace = env.namespace("notes-live").await.unwrap();
    let ns = namespace.name();
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    install_crd(&cluster).await;
    let operator = Operator::start(env, "notes", ns, &[]);

    let manifest = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "Notes",
        "metadata": {"name": "team", "namespace": ns}, "spec": {"replicas": 1}});
    cluster.apply(&manifest, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&manifest).unwrap();
    eventually("the Notes is Ready", LONG, &[&operator], || async {
        cluster.get(&cr).await.unwrap().is_some_and(|cr| ready(&cr))
    })
    .await;

    let at = |api_version: &str, kind: &str, name: &str| {
        ObjectRef::new(api_version, kind, Some(ns), name)
    };
    let get = |object: ObjectRef| {
        let cluster = cluster.clone();
        async move {
            cluster
                .get(&object)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{object} does not exist"))
        }
    };
    // The TLS material, from the CR's internal CA, for the server to mount.
    let ca = get(at("v1", "Secret", "team-infra-tls-ca")).await;
    let pair = get(at("v1", "Secret", "team-postgres-tls")).await;
    assert_eq!(pair["type"], "kubernetes.io/tls");
    assert_eq!(text(&pair, "ca.crt"), text(&ca, "crt.ca.pem"));
    let server = get(at("apps/v1", "StatefulSet", "team-postgres")).await;
    assert_eq!(
        server["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "team-postgres-tls"
    );
    assert_eq!(
        server["status"]["readyReplicas"], 1,
        "{:#}",
        server["status"]
    );
    get(at("v1", "Service", "team-postgres")).await;

    // The app, pointed at the Service with verify-full, credentials by reference.
    let app = get(at("apps/v1", "Deployment", "team-app")).await;
    let env_vars = app["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
    assert!(
        env_vars.contains(&format!(r#""value":"team-postgres.{ns}.svc""#)),
        "{env_vars}"
    );
    assert!(env_vars.contains(r#""value":"verify-full""#), "{env_vars}");
    let auth = get(at("v1", "Secret", "team-postgres-auth")).await;
    assert!(
        !app.to_string().contains(&text(&auth, "password")),
        "no password in the Deployment"
    );
    let before = hash(&app).expect("the app's pod template carries the dependency hash");

    // Rotate the password as an administrator would: the operator keeps it (create-only),
    // sees the change through its dependency watch, and rolls the app.
    let rotated = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "team-postgres-auth", "namespace": ns},
        "data": {"password": ByteString(b"rotated-by-hand".to_vec())}});
    cluster.apply(&rotated, WriteMethod::Update).await.unwrap();
    eventually(
        "the app's pod template has a new hash",
        LONG,
        &[&operator],
        || async {
            let app = cluster
                .get(&at("apps/v1", "Deployment", "team-app"))
                .await
                .unwrap();
            app.and_then(|app| hash(&app))
                .is_some_and(|now| now != before)
        },
    )
    .await;
    let auth = get(at("v1", "Secret", "team-postgres-auth")).await;
    assert_eq!(
        text(&auth, "password"),
        "rotated-by-hand",
        "create-only keeps it"
    );
}
