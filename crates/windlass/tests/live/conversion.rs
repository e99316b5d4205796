//! CRD versions on the real API server, converted by the operator's own webhook server
//! (`windlass::crd`): a CR stored as `v1alpha1` reads back as `v1` through the API and
//! kubectl and writes back without loss; the operator reconciles it as `v1`; the webhook's
//! CA bundle survives a restart and is repaired when someone breaks it; the serving
//! certificate rotates under a stream of writes without refusing one; a storage migration
//! leaves only the new version in `status.storedVersions` with every object unchanged.
//!
//! The API server calls the webhook on `https://127.0.0.1:<port>` (`webhook.url`): the test
//! operator runs in this process, not in a Pod behind a Service.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig,
};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use windlass::cluster::Cluster;
use windlass::config::{ConfigDuration, OperatorConfig};
use windlass::crd::CONVERSION_DATA;
use windlass::object::{ObjectRef, TypeRef};
use windlass::runtime::Manager;
use windlass::testing::{DummyComponent, DummyController};
use windlass_testenv::TestEnv;

use crate::runtime::Finished;
use crate::{eventually, live};

#[path = "../shared/converted_shop.rs"]
mod converted_shop;
use converted_shop::{v1, versions};

const CRD: &str = "shops.conversion.windlass.dev";
const GROUP: &str = "conversion.windlass.dev";

/// The tests share one CRD (a cluster-wide name): one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A running test operator: the switch that stops it, its task, and its webhook's URL.
struct Operator {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<windlass::Result<()>>,
    url: String,
}

impl Operator {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

/// Start an operator of `Shop`s (`v1`, each owning a ConfigMap `<cr>-box`) in `ns`,
/// serving the conversions with `storage` stored, on a free port: a port someone takes
/// between our probe and the server's bind is tried again with another.
async fn operator(
    env: &TestEnv,
    ns: &str,
    finished: &Finished,
    tune: impl Fn(&mut OperatorConfig),
) -> Operator {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("https://127.0.0.1:{port}");
        let mut config = OperatorConfig::default();
        config.runtime.watch_namespaces = vec![ns.to_string()];
        config.server.metrics_bind_address = String::new();
        config.webhook.bind_address = format!("127.0.0.1:{port}");
        config.webhook.url = Some(url.clone());
        config.webhook.namespace = ns.to_string();
        config.webhook.named_after("conversion-test");
        tune(&mut config);
        let injects = config.webhook.certificate.dir.is_none();
        let controller = DummyController::<v1::Shop>::of_kind().component(
            DummyComponent::new("box").with_object(
                "cm",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "{cr}-box", "namespace": ns}, "data": {}}),
            ),
            &[],
        );
        let manager = Manager::new(env.client().unwrap(), config)
            .crd_versions(&versions("v1alpha1"))
            .controller(controller)
            .with_observer(Arc::new(finished.clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(manager.run(async {
            let _ = stopped.await;
        }));
        // Serving once the CA is injected with our URL (or, with a certificate from files,
        // once it listens); a failed bind ends the task.
        let started = async {
            loop {
                let ready = if injects {
                    client_config(env).await.url.as_deref() == Some(&format!("{url}/convert"))
                } else {
                    tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .is_ok()
                };
                if task.is_finished() || ready {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), started)
            .await
            .expect("the operator starts or fails within a minute");
        if !task.is_finished() {
            return Operator { stop, task, url };
        }
        match task.await.unwrap() {
            Err(e) if e.to_string().contains("cannot listen") => continue,
            other => panic!("the operator ended at start-up: {other:?}"),
        }
    }
    panic!("no free port for the webhook in five tries");
}

/// The CRD's conversion client config (default when there is none).
async fn client_config(env: &TestEnv) -> WebhookClientConfig {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().unwrap());
    crds.get_opt(CRD)
        .await
        .unwrap()
        .and_then(|crd| crd.spec.conversion)
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .unwrap_or_default()
}

/// Install the CRD afresh (its stored versions forgotten), `storage` stored, pointing at
/// `url` without a CA bundle (the operator injects it).
async fn install(env: &TestEnv, storage: &str, url: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().unwrap());
    if crds.get_opt(CRD).await.unwrap().is_some() {
        crds.delete(CRD, &DeleteParams::default()).await.unwrap();
        eventually("the old CRD is gone", || async {
            crds.get_opt(CRD).await.unwrap().is_none()
        })
        .await;
    }
    apply_crd(env, storage, url).await;
}

/// Apply the CRD with `storage` stored (keeping what else is there, the bundle included).
async fn apply_crd(env: &TestEnv, storage: &str, url: &str) {
    let crd = versions(storage)
        .crd(&WebhookClientConfig {
            url: Some(format!("{url}/convert")),
            ..WebhookClientConfig::default()
        })
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().unwrap());
    crds.patch(
        CRD,
        &PatchParams::apply("conversion-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    let cluster = windlass::cluster::LiveCluster::new(env.client().unwrap());
    for version in ["v1", "v1alpha1"] {
        let kind = TypeRef::new(format!("{GROUP}/{version}"), "Shop");
        eventually(&format!("Shop {version} is served"), || async {
            cluster.scope(&kind).await.is_ok()
        })
        .await;
    }
}

/// Shops in `ns` as `version`.
fn shops(env: &TestEnv, ns: &str, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: GROUP.to_string(),
        version: version.to_string(),
        api_version: format!("{GROUP}/{version}"),
        kind: "Shop".to_string(),
        plural: "shops".to_string(),
    };
    Api::namespaced_with(env.client().unwrap(), ns, &resource)
}

fn shop(name: &str, replicas: i32, tier: &str) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Shop",
           "metadata": {"name": name}, "spec": {"replicas": replicas, "tier": tier}})
}

/// Create `object` as `v1`, once the API server has taken the webhook's bundle (the first
/// writes may reach it before it has).
async fn create_v1(env: &TestEnv, ns: &str, object: &Value) {
    let api = shops(env, ns, "v1");
    let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    eventually("a v1 Shop is stored through the webhook", || async {
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 409 => true,
            Err(_) => false,
        }
    })
    .await;
}

fn value(object: DynamicObject) -> Value {
    serde_json::to_value(object).unwrap()
}

#[tokio::test]
async fn a_cr_stored_as_v1alpha1_reads_back_as_v1_and_writes_back_without_loss() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (admin, env) = live().await;
    let ns = env.namespace("conversion").await.unwrap();
    let finished = Finished::default();
    install(env, "v1alpha1", "https://127.0.0.1:1").await;
    let operator = operator(env, ns.name(), &finished, |_| {}).await;

    create_v1(env, ns.name(), &shop("s", 3, "gold")).await;
    // The operator reads and reconciles it as v1, writing its status through the webhook
    // (waited for first: the writes below would conflict with its own).
    eventually("the Shop is reconciled to Done", || async {
        finished.done("s") > 0
    })
    .await;
    let old = value(shops(env, ns.name(), "v1alpha1").get("s").await.unwrap());
    assert_eq!(old["spec"], json!({"size": 3}));
    let kept = old["metadata"]["annotations"][CONVERSION_DATA]
        .as_str()
        .expect("v1alpha1 has no tier: the hub's spec is kept");
    assert!(kept.contains("gold"), "{kept}");
    let new = value(shops(env, ns.name(), "v1").get("s").await.unwrap());
    assert_eq!(new["spec"], json!({"replicas": 3, "tier": "gold"}));
    assert!(
        new["metadata"]["annotations"]
            .get(CONVERSION_DATA)
            .is_none()
    );

    // kubectl reads it as v1 through the same webhook (served by this test's runtime:
    // waited on without blocking it).
    let output = tokio::process::Command::from(env.kubectl().unwrap())
        .args([
            "get",
            &format!("shops.v1.{GROUP}"),
            "s",
            "-n",
            ns.name(),
            "-o",
            "json",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(read["spec"], json!({"replicas": 3, "tier": "gold"}));

    // A client of v1alpha1 writes back what it read, with a new size: nothing is lost.
    let mut edited: DynamicObject = serde_json::from_value(old).unwrap();
    edited.data["spec"]["size"] = json!(4);
    shops(env, ns.name(), "v1alpha1")
        .replace("s", &PostParams::default(), &edited)
        .await
        .unwrap();
    let new = value(shops(env, ns.name(), "v1").get("s").await.unwrap());
    assert_eq!(new["spec"], json!({"replicas": 4, "tier": "gold"}));

    let boxed = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "s-box");
    assert!(admin.get(&boxed).await.unwrap().is_some());
    let status = value(shops(env, ns.name(), "v1alpha1").get("s").await.unwrap())["status"].clone();
    windlass::testing::assert_condition(&status, "Ready", true, "Stable");
    operator.stop().await;
}

#[tokio::test]
async fn the_bundle_survives_a_restart_and_a_broken_one_is_repaired_at_start_up() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_, env) = live().await;
    let ns = env.namespace("conversion-restart").await.unwrap();
    let finished = Finished::default();
    install(env, "v1alpha1", "https://127.0.0.1:1").await;
    let first = operator(env, ns.name(), &finished, |_| {}).await;
    let bundle = client_config(env)
        .await
        .ca_bundle
        .expect("a bundle is injected");
    create_v1(env, ns.name(), &shop("a", 1, "gold")).await;
    first.stop().await;

    // Someone breaks the bundle: the API server cannot convert any more.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().unwrap());
    let foreign = foreign_ca();
    crds.patch(
        CRD,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"conversion": {"webhook": {"clientConfig": {
            "caBundle": k8s_openapi::ByteString(foreign.into_bytes())}}}}})),
    )
    .await
    .unwrap();

    let second = operator(env, ns.name(), &finished, |_| {}).await;
    assert_eq!(
        client_config(env).await.ca_bundle,
        Some(bundle),
        "the same CA as before, from the Secret, and the broken bundle replaced"
    );
    create_v1(env, ns.name(), &shop("b", 2, "silver")).await;
    let read = value(shops(env, ns.name(), "v1").get("a").await.unwrap());
    assert_eq!(read["spec"], json!({"replicas": 1, "tier": "gold"}));
    second.stop().await;
}

#[tokio::test]
async fn a_certificate_from_files_is_served_and_no_bundle_is_injected() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_, env) = live().await;
    let ns = env.namespace("conversion-files").await.unwrap();
    let finished = Finished::default();
    install(env, "v1alpha1", "https://127.0.0.1:1").await;
    // What cert-manager would have issued and mounted: a CA and a pair for 127.0.0.1.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let pair = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), pair.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    let files = dir.path().to_path_buf();
    let operator = operator(env, ns.name(), &finished, move |config| {
        config.webhook.certificate.dir = Some(files.clone());
    })
    .await;
    // cert-manager's CA injector's part: the bundle, and where to call.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().unwrap());
    crds.patch(
        CRD,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"conversion": {"webhook": {"clientConfig": {
            "url": format!("{}/convert", operator.url),
            "caBundle": k8s_openapi::ByteString(ca.pem().into_bytes())}}}}})),
    )
    .await
    .unwrap();

    create_v1(env, ns.name(), &shop("f", 5, "gold")).await;
    let read = value(shops(env, ns.name(), "v1").get("f").await.unwrap());
    assert_eq!(read["spec"], json!({"replicas": 5, "tier": "gold"}));
    assert_eq!(
        client_config(env).await.ca_bundle.map(|b| b.0),
        Some(ca.pem().into_bytes()),
        "the injected bundle is left alone"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client().unwrap(), ns.name());
    assert!(
        secrets
            .get_opt("conversion-test-webhook-tls")
            .await
            .unwrap()
            .is_none(),
        "no certificate of the operator's own"
    );
    operator.stop().await;
}

/// Another CA's certificate (PEM): a bundle that trusts anything but the operator.
fn foreign_ca() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

#[tokio::test]
async fn a_rotation_under_a_stream_of_writes_refuses_none_of_them() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_, env) = live().await;
    let ns = env.namespace("conversion-rotate").await.unwrap();
    let finished = Finished::default();
    install(env, "v1alpha1", "https://127.0.0.1:1").await;
    // Pairs valid 6 s, renewed with 2 s left, checked every 500 ms.
    let operator = operator(env, ns.name(), &finished, |config| {
        config.webhook.certificate.validity = ConfigDuration(Duration::from_secs(6));
        config.webhook.certificate.check_period = ConfigDuration(Duration::from_millis(500));
    })
    .await;
    create_v1(env, ns.name(), &shop("w", 0, "gold")).await;

    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client().unwrap(), ns.name());
    let serving = || async {
        secrets
            .get("conversion-test-webhook-tls")
            .await
            .unwrap()
            .data
            .unwrap()["tls.crt"]
            .clone()
    };
    let mut seen = vec![serving().await];
    let api = shops(env, ns.name(), "v1");
    let mut writes = 0;
    // Every write goes through the webhook (v1 is stored as v1alpha1); none may fail.
    while seen.len() < 3 {
        writes += 1;
        assert!(
            writes < 400,
            "two renewals within 400 writes (seen {})",
            seen.len()
        );
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": writes}})),
        )
        .await
        .unwrap_or_else(|e| panic!("write {writes} was refused: {e}"));
        let current = serving().await;
        if seen.last() != Some(&current) {
            seen.push(current);
        }
    }
    let read = value(api.get("w").await.unwrap());
    assert_eq!(read["spec"], json!({"replicas": writes, "tier": "gold"}));
    operator.stop().await;
}

#[tokio::test]
async fn a_storage_migration_leaves_only_the_new_version_and_every_object_unchanged() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (_, env) = live().await;
    let ns = env.namespace("conversion-migrate").await.unwrap();
    let finished = Finished::default();
    install(env, "v1alpha1", "https://127.0.0.1:1").await;
    let operator = operator(env, ns.name(), &finished, |_| {}).await;
    for (name, tier) in [("m1", "gold"), ("m2", "basic"), ("m3", "silver")] {
        create_v1(env, ns.name(), &shop(name, 2, tier)).await;
    }
    // The operator's status writes are done (a rewrite by the migration changes no
    // generation, so it reconciles nothing).
    eventually("the Shops are reconciled", || async {
        ["m1", "m2", "m3"]
            .iter()
            .all(|name| finished.done(name) > 0)
    })
    .await;
    // v1 becomes the storage version: both may now be in etcd.
    apply_crd(env, "v1", &operator.url).await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().unwrap());
    let stored = || async {
        crds.get(CRD)
            .await
            .unwrap()
            .status
            .unwrap()
            .stored_versions
            .unwrap()
    };
    assert_eq!(stored().await, ["v1alpha1", "v1"]);
    let before = read_all(env, ns.name()).await;

    let report = windlass::crd::migrate_storage(env.client().unwrap(), CRD)
        .await
        .unwrap();
    assert_eq!(report.storage_version, "v1");
    assert_eq!(report.rewritten, 3);
    assert_eq!(stored().await, ["v1"]);
    assert_eq!(read_all(env, ns.name()).await, before);

    // Again: nothing to do, nothing written.
    let again = windlass::crd::migrate_storage(env.client().unwrap(), CRD)
        .await
        .unwrap();
    assert_eq!(again.rewritten, 0);
    operator.stop().await;
}

/// Every Shop in `ns` as v1: name, labels, annotations, spec and status.
async fn read_all(env: &TestEnv, ns: &str) -> Vec<Value> {
    let list = shops(env, ns, "v1")
        .list(&Default::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|o| {
            let o = value(o);
            json!([
                o["metadata"]["name"],
                o["metadata"]["labels"],
                o["metadata"]["annotations"],
                o["spec"],
                o["status"]
            ])
        })
        .collect()
}
