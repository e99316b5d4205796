//! The internal TLS context on a real kube-apiserver (from `windlass-testenv`): the CA
//! Secret survives an operator restart, a partial one is regenerated, the material works
//! in a real rustls handshake, and no key material reaches the logs, the Events or the
//! CR's status.

#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used)]

mod tls_support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tls_support::{TlsController, round_trip, secret_text};
use windlass::Action;
use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::events::LiveEventSink;
use windlass::object::{ObjectRef, TypeRef};
use windlass::reconcile::Reconciler;
use windlass::testing::{EventLog, Widget, assert_condition};
use windlass_testenv::TestEnv;
use windlass_x::tls::{CertificateAuthority, KeyAlgorithm};

const REPORTER: &str = "windlass-x-tls-test";

/// A live cluster over the shared control plane, with the Widget CRD served.
async fn live() -> (Arc<LiveCluster>, &'static TestEnv) {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    let crd = serde_json::to_value(<Widget as kube::CustomResourceExt>::crd()).unwrap();
    cluster.apply(&crd, WriteMethod::Apply).await.unwrap();
    let kind = TypeRef::new("test.windlass.dev/v1", "Widget");
    eventually("the Widget CRD is served", || async {
        cluster.scope(&kind).await.is_ok()
    })
    .await;
    (cluster, env)
}

use windlass_testenv::eventually;

/// Everything logged on this thread while the guard lives, at debug level and above.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn reconciler(
    cluster: &Arc<LiveCluster>,
    env: &TestEnv,
    log: &EventLog,
) -> Reconciler<TlsController> {
    Reconciler::new(
        TlsController::new(),
        cluster.clone(),
        OperatorConfig::default(),
    )
    .with_events(Arc::new(LiveEventSink::with_reporter(
        env.client().unwrap(),
        REPORTER,
        Some("tls-live".into()),
    )))
    .with_observer(log.clone())
}

/// Reconcile until the outcome is `Done` (every half second, for at most a minute: the
/// rollout waits for real pods).
async fn reconcile_until_done(reconciler: &Reconciler<TlsController>, cr: &ObjectRef) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let report = reconciler.reconcile(cr).await;
        assert!(report.error.is_none(), "{:?}", report.error);
        if report.outcome == Action::Done {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{cr} never finished its rollout: {:?}",
            report.outcome
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn create_widget(cluster: &LiveCluster, ns: &str, name: &str) -> ObjectRef {
    let cr = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"configOverrides": {"tls": {"type": "internal"}},
                 "dnsNames": ["web.test.svc"], "ips": ["127.0.0.1"]}});
    cluster.apply(&cr, WriteMethod::Update).await.unwrap();
    ObjectRef::from_manifest(&cr).unwrap()
}

async fn secret(api: &Api<Secret>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

/// Every way a private key could show up in text: its PEM header, any line of its PEM
/// body, and the base64 the Secret stores it as.
fn assert_no_key_material(what: &str, text: &str, keys: &[(&str, String)]) {
    assert!(
        !text.contains("PRIVATE KEY"),
        "{what} mentions a PRIVATE KEY"
    );
    for (name, pem) in keys {
        for line in pem.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!text.contains(line), "{what} contains a line of {name}");
        }
        let stored =
            serde_json::to_value(k8s_openapi::ByteString(pem.as_bytes().to_vec())).unwrap();
        let base64 = stored.as_str().unwrap();
        assert!(
            !text.contains(&base64[..40]),
            "{what} contains {name} as base64"
        );
    }
}

#[tokio::test]
async fn the_ca_survives_a_restart_works_in_tls_and_never_reaches_logs_events_or_status() {
    let captured = Captured::default();
    let _logging = captured.install();
    let (cluster, env) = live().await;
    let ns = env.namespace("tls").await.unwrap();
    let cr = create_widget(&cluster, ns.name(), "shop").await;
    let secrets: Api<Secret> = Api::namespaced(env.client().unwrap(), ns.name());

    let log = EventLog::default();
    reconcile_until_done(&reconciler(&cluster, env, &log), &cr).await;
    let ca_secret = secret(&secrets, "shop-infra-tls-ca").await;
    let pair_secret = secret(&secrets, "shop-web-tls").await;
    let ca_pem = secret_text(&ca_secret, "crt.ca.pem");
    let ca_key = secret_text(&ca_secret, "key.ca.pem");
    let cert = secret_text(&pair_secret, "tls.crt");
    let key = secret_text(&pair_secret, "tls.key");
    assert_eq!(secret_text(&pair_secret, "ca.crt"), ca_pem);

    // The operator restarts: a new controller, nothing in memory. It finds the CA and the
    // pair and writes nothing.
    let restarted_log = EventLog::default();
    let restarted = reconciler(&cluster, env, &restarted_log);
    reconcile_until_done(&restarted, &cr).await;
    assert!(
        restarted_log.applied().is_empty(),
        "{:?}",
        restarted_log.applied()
    );
    let after = secret(&secrets, "shop-infra-tls-ca").await;
    assert_eq!(after["data"], ca_secret["data"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        ca_secret["metadata"]["resourceVersion"]
    );
    assert_eq!(
        secret(&secrets, "shop-web-tls").await["data"],
        pair_secret["data"]
    );

    // The material works: a rustls server with the pair, a client trusting the CA from
    // the Secret, by name and by IP; a client trusting another CA is refused.
    for name in ["web.test.svc", "127.0.0.1"] {
        assert_eq!(
            round_trip(&cert, &key, &ca_pem, name).await,
            Ok("hello".to_string()),
            "connecting to {name}"
        );
    }
    let stranger = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let refused = round_trip(&cert, &key, stranger.cert_pem(), "web.test.svc").await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("invalid peer certificate")),
        "{refused:?}"
    );

    // No key material in the logs, the Events or the status.
    let keys = [("the CA key", ca_key), ("the server key", key)];
    let logs = captured.text();
    assert!(
        logs.contains("no CA Secret yet: generating a CA"),
        "the capture works: {logs}"
    );
    assert_no_key_material("the log", &logs, &keys);
    let events: Api<K8sEvent> = Api::namespaced(env.client().unwrap(), ns.name());
    let list = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reporting_controller.as_deref() == Some(REPORTER))
            .collect::<Vec<_>>()
    };
    eventually("the rollout's Events are listed", || async {
        !list().await.is_empty()
    })
    .await;
    let events_text = serde_json::to_string(&list().await).unwrap();
    assert_no_key_material("the Events", &events_text, &keys);
    let status = cluster.get(&cr).await.unwrap().unwrap()["status"].clone();
    assert_condition(&status, "Ready", true, "Stable");
    assert_no_key_material("the status", &status.to_string(), &keys);
}

#[tokio::test]
async fn a_partial_ca_secret_is_regenerated_on_the_real_server() {
    let captured = Captured::default();
    let _logging = captured.install();
    let (cluster, env) = live().await;
    let ns = env.namespace("tls-partial").await.unwrap();
    let cr = create_widget(&cluster, ns.name(), "shop").await;
    let secrets: Api<Secret> = Api::namespaced(env.client().unwrap(), ns.name());
    let log = EventLog::default();
    let reconciler = reconciler(&cluster, env, &log);
    reconcile_until_done(&reconciler, &cr).await;
    let old_ca = secret_text(&secret(&secrets, "shop-infra-tls-ca").await, "crt.ca.pem");

    // Someone else removes the CA's key.
    secrets
        .patch(
            "shop-infra-tls-ca",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"key.ca.pem": null}})),
        )
        .await
        .unwrap();
    let partial = secret(&secrets, "shop-infra-tls-ca").await;
    assert!(partial["data"].get("key.ca.pem").is_none());

    reconcile_until_done(&reconciler, &cr).await;
    assert!(
        captured.text().contains("the CA Secret is incomplete"),
        "a warning says so"
    );
    let ca_secret = secret(&secrets, "shop-infra-tls-ca").await;
    let new_ca = secret_text(&ca_secret, "crt.ca.pem");
    assert_ne!(new_ca, old_ca);
    CertificateAuthority::from_pem(&secret_text(&ca_secret, "key.ca.pem"), &new_ca).unwrap();
    // The pair was reissued by the new CA: a client trusting it connects, one trusting
    // the old CA does not.
    let pair = secret(&secrets, "shop-web-tls").await;
    let (cert, key) = (secret_text(&pair, "tls.crt"), secret_text(&pair, "tls.key"));
    assert_eq!(
        round_trip(&cert, &key, &new_ca, "web.test.svc").await,
        Ok("hello".to_string())
    );
    assert!(
        round_trip(&cert, &key, &old_ca, "web.test.svc")
            .await
            .is_err()
    );
}
