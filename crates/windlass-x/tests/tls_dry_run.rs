//! The TLS contexts in whole reconciles on windlass's in-memory cluster: the CA is made once
//! and reused, a steady reconcile writes nothing, partial or changed material is handled as
//! documented, and bad config is a config error naming the field.

#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used)]

mod tls_support;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tls_support::{SERVER, TlsController, request_for, secret_text, tls_spec};
use windlass::config::OperatorConfig;
use windlass::object::ObjectRef;
use windlass::prelude::*;
use windlass::progress::Event;
use windlass::reconcile::Reconciler;
use windlass::testing::{EventLog, Harness, assert_condition};
use windlass_x::tls::{
    CertificateAuthority, KeyAlgorithm, KeyCertPair, PairKey, Tls, TlsConfig, TlsContext,
};

fn secret(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "Secret", Some("test"), name)
}

fn configmap(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "ConfigMap", Some("test"), name)
}

async fn get(env: &Harness<TlsController>, object: &ObjectRef) -> Value {
    env.get(object)
        .await
        .unwrap_or_else(|| panic!("{object} exists"))
}

fn ca_of(secret: &Value) -> CertificateAuthority {
    CertificateAuthority::from_pem(
        &secret_text(secret, "key.ca.pem"),
        &secret_text(secret, "crt.ca.pem"),
    )
    .unwrap()
}

fn pair_of(secret: &Value) -> KeyCertPair {
    KeyCertPair::new(
        secret_text(secret, "tls.key"),
        secret_text(secret, "tls.crt"),
    )
}

fn applied_names(log: &EventLog) -> Vec<String> {
    log.applied().into_iter().map(|o| o.name).collect()
}

fn message(status: &Value) -> String {
    status["conditions"].to_string()
}

#[tokio::test]
async fn the_ca_is_made_once_and_a_steady_reconcile_writes_nothing() {
    let env = Harness::dry_run(TlsController::new()).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
    let mut applied = applied_names(&env.log);
    applied.sort();
    assert_eq!(applied, ["w-infra-tls-ca", "w-web-cert", "w-web-tls"]);

    let ca_secret = get(&env, &secret("w-infra-tls-ca")).await;
    assert_eq!(ca_secret["type"], "Opaque");
    let ca = ca_of(&ca_secret);
    let pair_secret = get(&env, &secret("w-web-tls")).await;
    assert_eq!(pair_secret["type"], "kubernetes.io/tls");
    let pair = pair_of(&pair_secret);
    ca.verify(&pair, &request_for(&["web.test.svc"], &["127.0.0.1"]))
        .unwrap();
    assert_eq!(secret_text(&pair_secret, "ca.crt"), ca.cert_pem());
    // What the server component rendered with is what the Secret holds.
    let seen = get(&env, &configmap("w-web-cert")).await;
    assert_eq!(seen["data"]["tls.crt"], pair.cert_pem());
    assert_eq!(seen["data"]["ca.crt"], ca.cert_pem());

    env.log.clear();
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(env.log.applied().is_empty(), "{:?}", env.log.applied());
    let again = get(&env, &secret("w-infra-tls-ca")).await;
    assert_eq!(again["data"], ca_secret["data"]);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        ca_secret["metadata"]["resourceVersion"]
    );
    assert_eq!(
        get(&env, &secret("w-web-tls")).await["data"],
        pair_secret["data"]
    );

    // A new controller instance (an operator restart) reads the same CA back.
    let log = EventLog::default();
    let restarted = Reconciler::new(
        TlsController::new(),
        env.memory.clone(),
        OperatorConfig {
            dry_run: true,
            ..OperatorConfig::default()
        },
    )
    .with_observer(log.clone());
    let report = restarted.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(log.applied().is_empty(), "{:?}", log.applied());
    assert_eq!(
        get(&env, &secret("w-infra-tls-ca")).await["data"],
        ca_secret["data"]
    );
}

#[tokio::test]
async fn a_ca_secret_that_lost_its_key_is_replaced_and_every_pair_reissued() {
    let env = Harness::dry_run(TlsController::new()).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    env.reconcile(&cr).await;
    let old_ca = ca_of(&get(&env, &secret("w-infra-tls-ca")).await);
    let old_pair = pair_of(&get(&env, &secret("w-web-tls")).await);

    // Another writer removes the key (a merge patch: null deletes).
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "w-infra-tls-ca", "namespace": "test"},
        "data": {"key.ca.pem": null}}))
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let new_ca = ca_of(&get(&env, &secret("w-infra-tls-ca")).await);
    assert_ne!(new_ca.cert_pem(), old_ca.cert_pem());
    let new_pair = pair_of(&get(&env, &secret("w-web-tls")).await);
    assert_ne!(new_pair, old_pair);
    let request = request_for(&["web.test.svc"], &["127.0.0.1"]);
    new_ca.verify(&new_pair, &request).unwrap();
    assert!(old_ca.verify(&new_pair, &request).is_err());
}

#[tokio::test]
async fn a_partial_ca_secret_found_before_the_first_reconcile_is_replaced() {
    let env = Harness::dry_run(TlsController::new()).await;
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "w-infra-tls-ca", "namespace": "test"},
        "stringData": {"crt.ca.pem": "left over"}}))
        .await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let stored = get(&env, &secret("w-infra-tls-ca")).await;
    assert_ne!(secret_text(&stored, "crt.ca.pem"), "left over");
    ca_of(&stored);
}

#[tokio::test]
async fn a_ca_close_to_its_end_is_replaced_and_every_pair_reissued() {
    let env = Harness::dry_run(TlsController::new()).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    env.reconcile(&cr).await;
    // The stored CA now ends in 200 days: sooner than a server certificate lasts.
    let ending = CertificateAuthority::generate_valid_for(
        KeyAlgorithm::EcdsaP256,
        Duration::from_secs(200 * 24 * 3600),
    )
    .unwrap();
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "w-infra-tls-ca", "namespace": "test"},
        "stringData": {"key.ca.pem": ending.key_pem(), "crt.ca.pem": ending.cert_pem()}}))
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let ca_secret = get(&env, &secret("w-infra-tls-ca")).await;
    assert_ne!(secret_text(&ca_secret, "crt.ca.pem"), ending.cert_pem());
    let replacement = ca_of(&ca_secret);
    assert!(!replacement.due_for_replacement());
    let pair_secret = get(&env, &secret("w-web-tls")).await;
    assert_eq!(secret_text(&pair_secret, "ca.crt"), replacement.cert_pem());
    let request = request_for(&["web.test.svc"], &["127.0.0.1"]);
    replacement
        .verify(&pair_of(&pair_secret), &request)
        .unwrap();

    // The new CA is then kept.
    env.log.clear();
    env.reconcile(&cr).await;
    assert!(env.log.applied().is_empty(), "{:?}", env.log.applied());
}

#[tokio::test]
async fn a_pair_is_reused_while_valid_and_reissued_once_the_ca_changed() {
    let env = Harness::dry_run(TlsController::new()).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    env.reconcile(&cr).await;
    let first = pair_of(&get(&env, &secret("w-web-tls")).await);
    env.reconcile(&cr).await;
    assert_eq!(pair_of(&get(&env, &secret("w-web-tls")).await), first);

    // Someone puts another (complete, valid) CA in the Secret: it is used as it is, and
    // the pair no longer verifies against it, so it is reissued.
    let replacement = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "w-infra-tls-ca", "namespace": "test"},
        "stringData": {"key.ca.pem": replacement.key_pem(), "crt.ca.pem": replacement.cert_pem()}}))
        .await;
    env.log.clear();
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let ca_secret = get(&env, &secret("w-infra-tls-ca")).await;
    assert_eq!(
        secret_text(&ca_secret, "crt.ca.pem"),
        replacement.cert_pem()
    );
    let reissued = pair_of(&get(&env, &secret("w-web-tls")).await);
    assert_ne!(reissued, first);
    let request = request_for(&["web.test.svc"], &["127.0.0.1"]);
    replacement.verify(&reissued, &request).unwrap();
    assert_eq!(
        get(&env, &configmap("w-web-cert")).await["data"]["tls.crt"],
        reissued.cert_pem()
    );
    assert!(applied_names(&env.log).contains(&"w-web-tls".to_string()));
}

#[tokio::test]
async fn other_names_reissue_the_pair_and_keep_the_ca() {
    let env = Harness::dry_run(TlsController::new()).await;
    let mut spec = tls_spec("internal");
    spec["dnsNames"] = json!(["web.test.svc"]);
    let cr = env.apply_cr("w", spec.clone()).await;
    env.reconcile(&cr).await;
    let ca_before = get(&env, &secret("w-infra-tls-ca")).await;
    let first = pair_of(&get(&env, &secret("w-web-tls")).await);

    spec["dnsNames"] = json!(["web.test.svc", "web.test.svc.cluster.local"]);
    spec["ips"] = json!(["10.96.0.10", "::1"]);
    env.apply_cr("w", spec).await;
    env.reconcile(&cr).await;
    assert_eq!(
        get(&env, &secret("w-infra-tls-ca")).await["data"],
        ca_before["data"]
    );
    let second = pair_of(&get(&env, &secret("w-web-tls")).await);
    assert_ne!(second, first);
    let ca = ca_of(&ca_before);
    let request = request_for(
        &["web.test.svc", "web.test.svc.cluster.local"],
        &["10.96.0.10", "::1"],
    );
    ca.verify(&second, &request).unwrap();
    assert!(ca.verify(&first, &request).is_err());
}

#[tokio::test]
async fn an_absolute_dns_name_keeps_its_pair_across_reconciles() {
    let env = Harness::dry_run(TlsController::new()).await;
    let mut spec = tls_spec("internal");
    spec["dnsNames"] = json!(["web.test.svc."]);
    let cr = env.apply_cr("w", spec).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let first = get(&env, &secret("w-web-tls")).await;

    env.log.clear();
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(env.log.applied().is_empty(), "{:?}", env.log.applied());
    assert_eq!(get(&env, &secret("w-web-tls")).await["data"], first["data"]);
    let ca = ca_of(&get(&env, &secret("w-infra-tls-ca")).await);
    ca.verify(
        &pair_of(&first),
        &request_for(&["web.test.svc"], &["127.0.0.1"]),
    )
    .unwrap();
}

#[tokio::test]
async fn a_pair_request_without_names_is_a_config_error_naming_the_pair() {
    let env = Harness::dry_run(TlsController::new()).await;
    let mut spec = tls_spec("internal");
    spec["dnsNames"] = json!([]);
    spec["ips"] = json!([]);
    let cr = env.apply_cr("w", spec).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    let text = message(&status);
    assert!(
        text.contains("TLS server pair for web") && text.contains("at least one DNS name"),
        "{text}"
    );
}

#[tokio::test]
async fn pairs_that_would_share_a_secret_are_a_config_error_naming_both() {
    let mut controller = TlsController::new();
    controller.colliding_pairs = true;
    let env = Harness::dry_run(controller).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    let text = message(&status);
    assert!(
        text.contains("(component web, key name x)")
            && text.contains("(component web-x, no key name)")
            && text.contains("<cr>-web-x-tls"),
        "{text}"
    );
}

#[test]
fn the_debug_form_of_tls_config_shows_setting_names_not_values() {
    let config = TlsConfig::from_backend_config(&json!({"tls": {
        "type": "vault", "token": "s3cret-token", "endpoint": {"password": "hunter2"}}}))
    .unwrap();
    assert_eq!(config.settings["token"], "s3cret-token");
    for shown in [format!("{config:?}"), format!("{config:#?}")] {
        assert!(
            shown.contains("vault") && shown.contains("token"),
            "{shown}"
        );
        assert!(shown.contains("endpoint"), "{shown}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn the_server_component_waits_for_the_ca_component() {
    let env = Harness::dry_run(TlsController::new()).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    let graph = env.reconciler.components(&cr).await.unwrap();
    let web = graph.get(SERVER).unwrap();
    let ca = graph.get("internal-tls").unwrap();
    assert_eq!(graph.dependencies(web), [ca]);

    env.reconcile(&cr).await;
    let deployed: Vec<String> = env
        .log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Deployed { component, .. } => Some(component),
            _ => None,
        })
        .collect();
    assert_eq!(deployed, ["internal-tls", "web"]);
}

#[tokio::test]
async fn a_disabled_server_still_renders_and_its_pair_secret_is_pruned() {
    let env = Harness::dry_run(TlsController::new()).await;
    let mut spec = tls_spec("internal");
    let cr = env.apply_cr("w", spec.clone()).await;
    env.reconcile(&cr).await;
    assert!(env.get(&secret("w-web-tls")).await.is_some());
    let ca_before = get(&env, &secret("w-infra-tls-ca")).await;

    spec["webDisabled"] = json!(true);
    env.apply_cr("w", spec).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        env.get(&secret("w-web-tls")).await.is_none(),
        "the pair is pruned"
    );
    assert!(env.get(&configmap("w-web-cert")).await.is_none());
    assert_eq!(
        get(&env, &secret("w-infra-tls-ca")).await["data"],
        ca_before["data"],
        "the CA stays"
    );
}

#[tokio::test]
async fn a_repeated_request_is_ignored() {
    let mut controller = TlsController::new();
    controller.repeat_request = true;
    let env = Harness::dry_run(controller).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let ca = ca_of(&get(&env, &secret("w-infra-tls-ca")).await);
    let pair = pair_of(&get(&env, &secret("w-web-tls")).await);
    ca.verify(&pair, &request_for(&["web.test.svc"], &["127.0.0.1"]))
        .unwrap();
    assert!(
        ca.verify(&pair, &request_for(&["other.test.svc"], &[]))
            .is_err(),
        "the second request's names were not used"
    );
}

#[tokio::test]
async fn bad_tls_config_is_a_config_error_naming_it() {
    let env = Harness::dry_run(TlsController::new()).await;
    let cases = [
        (
            tls_spec("vault"),
            "unknown TLS context type \\\"vault\\\"; registered: internal",
        ),
        (json!({}), "no tls section"),
        (
            json!({"configOverrides": {"tls": {"keyAlgorithm": "ecdsa-p256"}}}),
            "tls: missing field `type`",
        ),
        (
            json!({"configOverrides": {"tls": {"type": "internal", "keyAlgorithm": "dsa"}}}),
            "tls.keyAlgorithm: unknown variant `dsa`",
        ),
    ];
    for (i, (spec, expected)) in cases.into_iter().enumerate() {
        let cr = env.apply_cr(&format!("bad-{i}"), spec).await;
        env.reconcile(&cr).await;
        let status = env.status(&cr).await;
        assert_condition(&status, "Ready", false, "ConfigError");
        assert!(
            message(&status).contains(expected),
            "{expected:?} in {}",
            message(&status)
        );
    }
    assert!(
        env.get(&secret("bad-0-infra-tls-ca")).await.is_none(),
        "nothing is rolled out"
    );
}

#[cfg(not(feature = "tls-rsa"))]
#[tokio::test]
async fn rsa_keys_without_the_feature_are_a_config_error_naming_the_feature() {
    let env = Harness::dry_run(TlsController::new()).await;
    let cr = env
        .apply_cr(
            "w",
            json!({"configOverrides": {"tls": {"type": "internal", "keyAlgorithm": "rsa2048"}}}),
        )
        .await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert!(
        message(&status)
            .contains("tls.keyAlgorithm: rsa2048 keys need windlass-x's `tls-rsa` feature"),
        "{}",
        message(&status)
    );
}

#[tokio::test]
async fn a_ca_secret_that_does_not_parse_is_a_config_error_and_left_alone() {
    let env = Harness::dry_run(TlsController::new()).await;
    let valid = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "w-infra-tls-ca", "namespace": "test"},
        "stringData": {"key.ca.pem": "not a key", "crt.ca.pem": valid.cert_pem()}}))
        .await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    let text = message(&status);
    assert!(
        text.contains("Secret w-infra-tls-ca data.key.ca.pem")
            && text.contains("delete the Secret"),
        "{text}"
    );
    assert!(
        !text.contains("not a key"),
        "the Secret's content stays out of the status"
    );
    assert_eq!(
        secret_text(&get(&env, &secret("w-infra-tls-ca")).await, "key.ca.pem"),
        "not a key"
    );
}

#[tokio::test]
async fn a_pair_nobody_requested_is_a_config_error() {
    let mut controller = TlsController::new();
    controller.request_pair = false;
    let env = Harness::dry_run(controller).await;
    let cr = env.apply_cr("w", tls_spec("internal")).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert!(
        message(&status).contains("no TLS server pair was requested for web"),
        "{}",
        message(&status)
    );
}

/// A context an author registers: pairs and the CA come from Secrets something else
/// writes (a certificate manager), and it waits until they exist.
struct ExternalTls;

impl ExternalTls {
    async fn read(session: &Session<TlsController>, name: &str, field: &str) -> Result<String> {
        let secret: Option<k8s_openapi::api::core::v1::Secret> = session.get(name).await?;
        secret
            .and_then(|s| s.data)
            .and_then(|d| d.get(field).cloned())
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .ok_or_else(|| Error::precondition(format!("Secret {name} has no {field} yet")))
    }
}

#[async_trait]
impl TlsContext<TlsController> for ExternalTls {
    fn request_server_pair(
        &self,
        _graph: &mut Components<TlsController>,
        _server: ComponentId,
        _key_name: Option<&str>,
        _request: windlass_x::tls::CertRequest,
    ) -> Result<()> {
        Ok(())
    }

    async fn server_pair(
        &self,
        session: &Session<TlsController>,
        key: &PairKey,
    ) -> Result<KeyCertPair> {
        let name = format!("{key}-issued");
        Ok(KeyCertPair::new(
            Self::read(session, &name, "tls.key").await?,
            Self::read(session, &name, "tls.crt").await?,
        ))
    }

    async fn ca_cert(&self, session: &Session<TlsController>) -> Result<String> {
        Self::read(session, "issuer-ca", "ca.crt").await
    }
}

#[tokio::test]
async fn an_author_registered_context_is_chosen_by_tls_type() {
    let mut controller = TlsController::new();
    controller
        .registry
        .register("external", |_, _, _| Ok(Tls::new(ExternalTls)));
    let env = Harness::dry_run(controller).await;
    let cr = env.apply_cr("w", tls_spec("external")).await;
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Updating", true, "PreconditionWait");

    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = ca
        .issue(
            &request_for(&["web.test.svc"], &[]),
            KeyAlgorithm::EcdsaP256,
        )
        .unwrap();
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "web-issued", "namespace": "test"},
        "stringData": {"tls.key": pair.key_pem(), "tls.crt": pair.cert_pem()}}))
        .await;
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "issuer-ca", "namespace": "test"},
        "stringData": {"ca.crt": ca.cert_pem()}}))
        .await;
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
    assert_eq!(
        get(&env, &configmap("w-web-cert")).await["data"]["tls.crt"],
        pair.cert_pem()
    );
    assert!(
        env.get(&secret("w-infra-tls-ca")).await.is_none(),
        "no internal CA with another context"
    );
}
