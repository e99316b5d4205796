//! The shop operator as a separate process (`shop-operator run`) on a real control plane:
//! one process reconciles a WebApp and a Backup to Ready, and its install commands cover
//! both kinds.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde_json::{Value, json};
use windlass::cluster::{Cluster, WriteMethod};
use windlass::object::ObjectRef;

mod support;
use support::{LONG, Operator, eventually, install_crd_of, ready};

fn webapp(namespace: &str) -> Value {
    json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": namespace},
        "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop"}})
}

fn backup(namespace: &str) -> Value {
    json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "Backup",
        "metadata": {"name": "shop-db", "namespace": namespace},
        "spec": {"source": {"host": "shop-db", "database": "shop",
                            "credentialsSecret": "shop-db-credentials"},
                 "schedule": "0 3 * * *", "retention": 7}})
}

#[tokio::test]
async fn one_process_reconciles_both_kinds() {
    let (env, ns, cluster) = support::setup::<webapp_operator::WebApp>("shop").await;
    let ns = ns.name();
    install_crd_of::<backup_operator::Backup>(&cluster).await;

    let operator = Operator::start(env, "shop", ns, &[]);
    let credentials = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "shop-db-credentials", "namespace": ns},
        "data": {"username": "c2hvcA==", "password": "c2VjcmV0"}});
    for manifest in [credentials, webapp(ns), backup(ns)] {
        cluster.apply(&manifest, WriteMethod::Update).await.unwrap();
    }
    for manifest in [webapp(ns), backup(ns)] {
        let cr = ObjectRef::from_manifest(&manifest).unwrap();
        let what = format!("the {} is Ready", cr.kind);
        eventually(&what, LONG, &[&operator], || async {
            cluster.get(&cr).await.unwrap().is_some_and(|cr| ready(&cr))
        })
        .await;
    }
    // One process: both kinds' reconciles are counted on its one /metrics.
    let metrics = operator.metrics();
    for kind in ["WebApp", "Backup"] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("windlass_reconciles_total{")
                    && l.to_lowercase().contains(&kind.to_lowercase())),
            "no reconcile of {kind} in:\n{metrics}"
        );
    }
}

#[test]
fn the_install_commands_cover_both_kinds() {
    let dir = std::env::temp_dir().join(format!("shop-operator-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let crs = dir.join("crs.yaml");
    std::fs::write(
        &crs,
        format!(
            "{}\n---\n{}\n",
            serde_json::to_string(&webapp("default")).unwrap(),
            serde_json::to_string(&backup("default")).unwrap()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_shop-operator"))
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let crds = run(&["crds"]);
    assert!(
        crds.contains("name: webapps.example.windlass.dev"),
        "{crds}"
    );
    assert!(
        crds.contains("name: backups.example.windlass.dev"),
        "{crds}"
    );
    let rbac = run(&["rbac", crs.to_str().unwrap()]);
    for resource in [
        "webapps/status",
        "backups/status",
        "cronjobs",
        "deployments",
    ] {
        assert!(rbac.contains(resource), "{resource} missing from:\n{rbac}");
    }
    let help = run(&["--help"]);
    assert!(help.contains("WebApp") && help.contains("Backup"), "{help}");
    std::fs::remove_dir_all(&dir).ok();
}
