//! An operator whose CRD has two versions, through its command line: `crds` prints one CRD
//! converted by the operator's webhook Service, `manifests` adds that Service, the webhook
//! port and the access to the certificate's Secret and to the CRD, and a dry run reads a CR
//! written in the old version as the controller's version.

use std::process::ExitCode;

use serde_json::{Value, json};
use windlass::cli::{Operator, Output};
use windlass::testing::{DummyComponent, DummyController};

#[path = "../shared/converted_shop.rs"]
mod converted_shop;
use converted_shop::{v1, versions};

fn operator() -> Operator {
    let controller = DummyController::<v1::Shop>::of_kind().component(
        DummyComponent::new("box").with_object(
            "cm",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{cr}-box"}, "data": {}}),
        ),
        &[],
    );
    Operator::new("shop-operator").controller_with_versions(controller, versions("v1"))
}

async fn cli(operator: Operator, args: &[&str]) -> (ExitCode, String) {
    let (out, buffer) = Output::buffer();
    let mut argv = vec!["shop-operator"];
    argv.extend_from_slice(args);
    let code = operator.run(argv, out).await;
    (code, buffer.text())
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// A Shop written as v1alpha1, in a file.
fn old_shop() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.yaml");
    std::fs::write(
        &file,
        "apiVersion: conversion.windlass.dev/v1alpha1\nkind: Shop\nmetadata: {name: old}\nspec: {size: 3}\n",
    )
    .unwrap();
    let path = file.to_str().unwrap().to_string();
    (dir, path)
}

#[tokio::test]
async fn crds_prints_one_crd_of_both_versions_converted_by_the_operators_service() {
    let (code, out) = cli(operator(), &["crds"]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    assert_eq!(docs.len(), 1);
    let spec = &docs[0]["spec"];
    let versions: Vec<(&str, bool)> = spec["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["storage"].as_bool().unwrap()))
        .collect();
    assert_eq!(versions, [("v1", true), ("v1alpha1", false)]);
    assert_eq!(spec["conversion"]["strategy"], "Webhook");
    assert_eq!(
        spec["conversion"]["webhook"]["clientConfig"],
        json!({"service": {"name": "shop-operator-webhook", "namespace": "default",
                           "path": "/convert", "port": 443}})
    );
}

#[tokio::test]
async fn manifests_add_the_webhook_service_port_and_its_narrow_access() {
    let (_dir, cr) = old_shop();
    let (code, out) = cli(
        operator(),
        &[
            "manifests",
            &cr,
            "--image",
            "example.com/shop:1",
            "--namespace",
            "ops",
        ],
    )
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in\n{out}"))
    };
    let crd = find("CustomResourceDefinition", "shops.conversion.windlass.dev");
    assert_eq!(
        crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"],
        "ops"
    );
    let service = find("Service", "shop-operator-webhook");
    assert_eq!(service["metadata"]["namespace"], "ops");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
    let deployment = find("Deployment", "shop-operator");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert!(
        ports
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "webhook" && p["containerPort"] == 9443),
        "{ports}"
    );
    let role = find("Role", "shop-operator-webhook");
    assert_eq!(
        role["rules"][1],
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"],
               "resourceNames": ["shop-operator-webhook-tls"]})
    );
    let cluster_role = find("ClusterRole", "shop-operator-webhook");
    assert_eq!(
        cluster_role["rules"],
        json!([{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                "verbs": ["get", "patch"], "resourceNames": ["shops.conversion.windlass.dev"]}])
    );
}

#[tokio::test]
async fn a_dry_run_reads_a_cr_written_in_the_old_version_as_the_controllers_version() {
    let (_dir, cr) = old_shop();
    let (code, out) = cli(operator(), &["run", "--dry-run", &cr]).await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("reconcile Shop default/old"), "{out}");
    assert!(out.contains("applied ConfigMap/old-box"), "{out}");
    assert!(out.contains("outcome: done"), "{out}");
}

#[tokio::test]
async fn versions_that_make_no_crd_are_refused_before_any_command() {
    let controller = DummyController::<v1::Shop>::of_kind();
    let broken =
        Operator::new("shop-operator").controller_with_versions(controller, versions("v9"));
    let (code, _) = cli(broken, &["crds"]).await;
    assert_eq!(code, ExitCode::from(2));
}

#[tokio::test]
async fn manifests_register_the_admission_webhooks_and_grant_them_by_name() {
    let admission = windlass::admission::Admission::<v1::Shop>::new()
        .defaults(|shop| {
            if shop.spec.tier.is_empty() {
                shop.spec.tier = "basic".into();
            }
        })
        .validate(|_| async { Ok(()) });
    let (_dir, cr) = old_shop();
    let (code, out) = cli(
        operator().admission(admission),
        &[
            "manifests",
            &cr,
            "--image",
            "example.com/shop:1",
            "--namespace",
            "ops",
        ],
    )
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == "shop-operator-webhook")
            .unwrap_or_else(|| panic!("no {kind} in\n{out}"))
    };
    for (kind, path) in [
        (
            "ValidatingWebhookConfiguration",
            "/validate/shops.conversion.windlass.dev",
        ),
        (
            "MutatingWebhookConfiguration",
            "/mutate/shops.conversion.windlass.dev",
        ),
    ] {
        let webhook = &find(kind)["webhooks"][0];
        assert_eq!(webhook["name"], "shops.conversion.windlass.dev");
        assert_eq!(
            webhook["clientConfig"]["service"],
            json!({"name": "shop-operator-webhook", "namespace": "ops", "path": path, "port": 443})
        );
        assert_eq!(
            webhook["rules"][0]["apiVersions"],
            json!(["v1"]),
            "the hub's version"
        );
        assert_eq!(webhook["failurePolicy"], "Fail");
    }
    let rules = &find("ClusterRole")["rules"];
    assert!(
        rules.as_array().unwrap().contains(&json!({
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            "verbs": ["get", "patch"], "resourceNames": ["shop-operator-webhook"]})),
        "{rules}"
    );
    // kubectl applies them before the Deployment, and deletes them before it too.
    let position = |kind: &str| docs.iter().position(|d| d["kind"] == kind).unwrap();
    assert!(position("ValidatingWebhookConfiguration") < position("Deployment"));
    assert!(position("CustomResourceDefinition") < position("Deployment"));
}

#[tokio::test]
async fn with_cert_manager_the_crd_and_configurations_ask_for_its_ca_and_no_secret_is_granted() {
    let admission =
        windlass::admission::Admission::<v1::Shop>::new().validate(|_| async { Ok(()) });
    let (_dir, cr) = old_shop();
    let (code, out) = cli(
        operator().admission(admission),
        &[
            "manifests",
            &cr,
            "--image",
            "example.com/shop:1",
            "--namespace",
            "ops",
            "--set",
            "webhook.certificate.dir=/certs",
            "--set",
            "webhook.certificate.inject-ca-from=ops/shop-webhook",
        ],
    )
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let docs = documents(&out);
    for kind in ["CustomResourceDefinition", "ValidatingWebhookConfiguration"] {
        let doc = docs.iter().find(|d| d["kind"] == kind).unwrap();
        assert_eq!(
            doc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "ops/shop-webhook",
            "{kind}"
        );
    }
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "Role" && d["metadata"]["name"] == "shop-operator-webhook"),
        "the certificate is cert-manager's: no access to a Secret of the operator's"
    );

    let (code, _) = cli(
        operator(),
        &[
            "crds",
            "--set",
            "webhook.certificate.inject-ca-from=ops/shop-webhook",
        ],
    )
    .await;
    assert_eq!(
        code,
        ExitCode::from(2),
        "inject-ca-from without a certificate dir"
    );
}
