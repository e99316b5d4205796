//! The `manifests` command's output applied to the real API server: every document is
//! accepted as printed, and the ServiceAccount really gets the access the runtime needs
//! (checked with `kubectl auth can-i` as that ServiceAccount), cluster-wide and, with
//! `watch_namespace`, only in the watched namespace; the operator's Pods are admitted in a
//! namespace that enforces the `restricted` Pod Security Standard.

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use windlass::cli::{Output, run};
use windlass::object::ManifestExt;
use windlass::testing::{DummyComponent, DummyController};
use windlass_testenv::{POD_SECURITY_ENFORCE_LABEL, TestEnv, wait_for};

use crate::live;

/// A Widget operator whose CRs own a ConfigMap.
fn widget_operator() -> DummyController {
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{cr}-settings"},
        "data": {"greeting": "hello"}});
    DummyController::new().component(
        DummyComponent::new("settings").with_object("settings", config_map),
        &[],
    )
}

/// The output of `widget-operator manifests <a Widget CR> ARGS…`.
async fn manifests(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cr = dir.path().join("widget.yaml");
    std::fs::write(
        &cr,
        "apiVersion: test.windlass.dev/v1\nkind: Widget\nmetadata: {name: sample}\nspec: {}\n",
    )
    .unwrap();
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["widget-operator", "manifests", cr.to_str().unwrap()];
    argv.extend_from_slice(args);
    let code = run(widget_operator(), argv, out).await;
    let text = buffer.text();
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    text
}

/// kubectl with the control plane's kubeconfig: (success, stdout + stderr).
async fn kubectl(env: &TestEnv, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut command = tokio::process::Command::from(env.kubectl().unwrap());
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).await.unwrap();
    }
    drop(child.stdin.take());
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finishes")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// Whether the ServiceAccount `namespace/name` may `verb resource` (in `in_namespace`).
async fn can_i(
    env: &TestEnv,
    (namespace, name): (&str, &str),
    verb: &str,
    resource: &str,
    in_namespace: &str,
) -> bool {
    let user = format!("--as=system:serviceaccount:{namespace}:{name}");
    let (_, text) = kubectl(
        env,
        &["auth", "can-i", &user, verb, resource, "-n", in_namespace],
        None,
    )
    .await;
    match text.lines().next().map(str::trim) {
        Some("yes") => true,
        Some("no") => false,
        _ => panic!("kubectl auth can-i {verb} {resource}: {text}"),
    }
}

/// Applies `yaml` server-side as kubectl would, failing with kubectl's message.
async fn apply(env: &TestEnv, yaml: &str) -> String {
    // The CRD is applied by the other live tests too: take its fields over.
    let (ok, text) = kubectl(
        env,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(yaml),
    )
    .await;
    assert!(ok, "the server refused the manifests: {text}\n{yaml}");
    text
}

async fn delete_cluster_objects(env: &TestEnv, name: &str) {
    for kind in ["clusterrolebinding", "clusterrole"] {
        for object in [
            name.to_string(),
            format!("{name}-metrics-auth"),
            format!("{name}-metrics-reader"),
        ] {
            kubectl(env, &["delete", kind, &object, "--ignore-not-found"], None).await;
        }
    }
}

#[tokio::test]
async fn the_manifests_apply_and_grant_the_operator_what_it_needs_cluster_wide() {
    let (_, env) = live().await;
    let ns = env.namespace("manifests").await.unwrap();
    let name = format!("widget-op-{}", ns.name());
    let yaml = manifests(&[
        "--image",
        "example.invalid/widget-operator:0",
        "--namespace",
        ns.name(),
        "--name",
        &name,
        "--replicas",
        "2",
    ])
    .await;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let applied = apply(env, &yaml).await;
    // kubectl reports one line per object it applied.
    assert_eq!(applied.lines().count(), docs.len(), "{applied}");

    let sa = (ns.name(), name.as_str());
    let here = ns.name();
    for (verb, resource) in [
        ("watch", "widgets.test.windlass.dev"),
        ("patch", "widgets.test.windlass.dev/status"),
        ("create", "configmaps"),
        ("watch", "configmaps"),
        ("create", "events"),
    ] {
        assert!(
            can_i(env, sa, verb, resource, here).await,
            "may {verb} {resource}"
        );
        assert!(
            can_i(env, sa, verb, resource, "default").await,
            "cluster-wide: {verb} {resource}"
        );
    }
    // Leader election: the one Lease, in the operator's namespace only; not kube-system's,
    // not the nodes' heartbeats, not another of its own namespace.
    let lease = format!("leases.coordination.k8s.io/{name}");
    assert!(can_i(env, sa, "create", "leases.coordination.k8s.io", here).await);
    assert!(can_i(env, sa, "update", &lease, here).await);
    assert!(can_i(env, sa, "get", &lease, here).await);
    for (verb, resource, namespace) in [
        ("update", "leases.coordination.k8s.io/someone-else", here),
        ("update", lease.as_str(), "kube-system"),
        (
            "update",
            "leases.coordination.k8s.io/kube-scheduler",
            "kube-system",
        ),
        ("create", "leases.coordination.k8s.io", "kube-node-lease"),
        ("list", "leases.coordination.k8s.io", here),
    ] {
        assert!(
            !can_i(env, sa, verb, resource, namespace).await,
            "may not {verb} {resource} in {namespace}"
        );
    }
    for (verb, resource) in [("get", "secrets"), ("delete", "widgets.test.windlass.dev")] {
        assert!(
            !can_i(env, sa, verb, resource, here).await,
            "least privilege: not {verb} {resource}"
        );
    }

    // The Deployment is stored as printed: two replicas electing with a Lease.
    let client = env.client().unwrap();
    let deployment: Deployment = ns.api::<Deployment>(client).get(&name).await.unwrap();
    let deployment = serde_json::to_value(deployment).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(
        container["env"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "WINDLASS_LEADER_ELECTION_ENABLED", "value": "true"})),
        "{container}"
    );
    assert!(
        docs.iter()
            .any(|d| d.kind() == Some("CustomResourceDefinition"))
    );

    // The namespace enforces the `restricted` Pod Security Standard, and the operator's Pods
    // are admitted there: the ReplicaSet creates both (a refused Pod would leave it at zero
    // with a FailedCreate), and the node simulator makes them available.
    let namespace: Namespace = Api::<Namespace>::all(env.client().unwrap())
        .get(ns.name())
        .await
        .unwrap();
    assert_eq!(
        namespace
            .labels()
            .get(POD_SECURITY_ENFORCE_LABEL)
            .map(String::as_str),
        Some("restricted")
    );
    let deployments = ns.api::<Deployment>(env.client().unwrap());
    wait_for(
        &deployments,
        &name,
        Duration::from_secs(90),
        |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref())
                .is_some_and(|s| s.available_replicas == Some(2))
        },
    )
    .await
    .unwrap();

    delete_cluster_objects(env, &name).await;
}

#[tokio::test]
async fn with_watch_namespace_the_operator_gets_roles_in_the_watched_namespace_only() {
    let (_, env) = live().await;
    let home = env.namespace("manifests-home").await.unwrap();
    let watched = env.namespace("manifests-watched").await.unwrap();
    let name = format!("widget-op-{}", home.name());
    let watch = format!("--watch-namespace={}", watched.name());
    let yaml = manifests(&[
        "--image",
        "example.invalid/widget-operator:0",
        "--namespace",
        home.name(),
        "--name",
        &name,
        &watch,
    ])
    .await;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    // No cluster-wide grant of any object: the only ClusterRoles are secure metrics' (ask
    // the API server who a scraper is; be bound to a scraper).
    let cluster_roles: Vec<&str> = docs
        .iter()
        .filter(|d| d.kind() == Some("ClusterRole"))
        .filter_map(|d| d.name())
        .collect();
    assert_eq!(
        cluster_roles,
        [
            format!("{name}-metrics-auth"),
            format!("{name}-metrics-reader")
        ],
        "{yaml}"
    );
    apply(env, &yaml).await;

    let sa = (home.name(), name.as_str());
    assert!(
        can_i(
            env,
            sa,
            "watch",
            "widgets.test.windlass.dev",
            watched.name()
        )
        .await
    );
    assert!(can_i(env, sa, "create", "configmaps", watched.name()).await);
    assert!(!can_i(env, sa, "watch", "widgets.test.windlass.dev", home.name()).await);
    assert!(!can_i(env, sa, "create", "configmaps", "default").await);
    assert!(
        can_i(
            env,
            sa,
            "create",
            "tokenreviews.authentication.k8s.io",
            "default"
        )
        .await
    );
    assert!(
        !can_i(
            env,
            sa,
            "list",
            "tokenreviews.authentication.k8s.io",
            "default"
        )
        .await
    );
    // One replica elects no leader: no Lease at all.
    assert!(!can_i(env, sa, "create", "leases.coordination.k8s.io", home.name()).await);
    delete_cluster_objects(env, &name).await;
}
