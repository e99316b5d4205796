//! The example operator as a separate process (`webapp-operator run`) on a real control
//! plane, driven only through the API as a user would: CRs converge, a child deleted by
//! hand comes back, a spec change rolls out, a status-only change starts no reconcile, a
//! paused CR is left alone, and SIGTERM ends the process cleanly.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use webapp_operator::WebApp;
use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::object::{ManifestExt, ObjectRef, TypeRef};
use windlass_testenv::TestEnv;

/// The operator process, its log lines collected as they come.
struct Operator {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// Where it serves `/metrics`, `/healthz` and `/readyz`.
    address: String,
}

impl Operator {
    fn start(env: &TestEnv, namespace: &str) -> Operator {
        let address = {
            let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            free.local_addr().unwrap().to_string()
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_webapp-operator"))
            .args([
                "run",
                "--watch_namespace",
                namespace,
                "--metrics_bind_address",
                &address,
                "--log_level",
                "debug",
                "--log_json",
            ])
            .env("KUBECONFIG", env.kubeconfig_path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the operator binary starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    log.lock().unwrap().push(line);
                }
            });
        }
        Operator {
            child,
            log,
            address,
        }
    }

    /// GET `path` from the operator's HTTP server: the status code and the body.
    fn http(&self, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.address).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.address
        )
        .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let code = response.split(' ').nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n")?.1.to_string();
        Some((code, body))
    }

    /// How many reconciles of the CR named `name` have started.
    fn reconciles(&self, name: &str) -> usize {
        let needle = format!("\"resource_name\":\"{name}\"");
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("reconcile started") && l.contains(&needle))
            .count()
    }

    fn dump(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn eventually<F, Fut>(what: &str, operator: &Operator, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}; operator log:\n{}",
            operator.dump()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Ready=True for the CR's current generation.
fn ready(cr: &Value) -> bool {
    cr["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "Ready"
                && c["status"] == "True"
                && c["observedGeneration"] == cr["metadata"]["generation"]
        })
}

#[tokio::test]
async fn the_operator_process_converges_crs_and_follows_their_changes() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("operator").await.unwrap();
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    let crd = serde_json::to_value(<WebApp as kube::CustomResourceExt>::crd()).unwrap();
    cluster.apply(&crd, WriteMethod::Apply).await.unwrap();
    let kind = TypeRef::new("example.windlass.dev/v1alpha1", "WebApp");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while cluster.scope(&kind).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "CRD never served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let operator = Operator::start(env, ns.name());
    let shop = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name()},
        "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop"}});
    cluster.apply(&shop, WriteMethod::Update).await.unwrap();
    let cr = ObjectRef::from_manifest(&shop).unwrap();
    let get = |r: ObjectRef| {
        let cluster = cluster.clone();
        async move { cluster.get(&r).await.unwrap() }
    };
    eventually("the WebApp is Ready", &operator, || async {
        get(cr.clone()).await.is_some_and(|cr| ready(&cr))
    })
    .await;
    // Ready to serve once its watches have listed; its metrics count what it did.
    eventually("/readyz answers 200", &operator, || async {
        operator
            .http("/readyz")
            .is_some_and(|(code, _)| code == 200)
    })
    .await;
    assert_eq!(operator.http("/healthz").map(|(code, _)| code), Some(200));
    let (_, metrics) = operator.http("/metrics").unwrap();
    assert!(
        metrics.contains("windlass_reconciles_total{")
            && metrics.contains("windlass_api_requests_total{"),
        "{metrics}"
    );

    // A child deleted by hand comes back.
    let web = ObjectRef::new("apps/v1", "Deployment", Some(ns.name()), "shop-web");
    let uid = get(web.clone()).await.unwrap().uid().unwrap().to_string();
    cluster.delete(&web, None).await.unwrap();
    eventually(
        "the deleted Deployment is re-created",
        &operator,
        || async {
            get(web.clone())
                .await
                .is_some_and(|d| d.uid() != Some(uid.as_str()))
        },
    )
    .await;
    eventually("the WebApp is Ready again", &operator, || async {
        get(cr.clone()).await.is_some_and(|cr| ready(&cr))
    })
    .await;

    // A status-only change starts no reconcile. The sync point: a new CR in the same
    // namespace comes through the same watch after the status write, and the queue is
    // FIFO, so once the probe's reconcile has started, a reconcile of the status write
    // would have started before it.
    let probe = |name: &str| {
        json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
            "metadata": {"name": name, "namespace": ns.name()},
            "spec": {"version": "1.4.0", "image": "ghcr.io/example/probe"}})
    };
    let before = operator.reconciles("shop");
    let current = get(cr.clone()).await.unwrap();
    let mut status = current["status"].clone();
    status["note"] = json!("written by someone else");
    cluster.write_status(&cr, &status, None).await.unwrap();
    cluster
        .apply(&probe("probe-a"), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the first probe is reconciled", &operator, || async {
        operator.reconciles("probe-a") > 0
    })
    .await;
    assert_eq!(
        operator.reconciles("shop"),
        before,
        "the status-only write started a reconcile:\n{}",
        operator.dump()
    );

    // A paused CR is left alone: neither pausing nor a spec change while paused starts a
    // reconcile (same sync point), and the spec change is not rolled out.
    let paused = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name(),
                     "annotations": {"windlass.dev/pause-execution": "true"}},
        "spec": {"replicas": 3}});
    cluster.apply(&paused, WriteMethod::Update).await.unwrap();
    cluster
        .apply(&probe("probe-b"), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the second probe is reconciled", &operator, || async {
        operator.reconciles("probe-b") > 0
    })
    .await;
    let deployment_replicas = || async {
        get(web.clone()).await.unwrap()["spec"]["replicas"]
            .as_i64()
            .unwrap_or(0)
    };
    assert_eq!(operator.reconciles("shop"), before, "{}", operator.dump());
    assert_eq!(deployment_replicas().await, 2, "paused: not rolled out");

    // Unpausing is a change the operator sees; then the spec change rolls out.
    let unpause = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": ns.name(),
                     "annotations": {"windlass.dev/pause-execution": null}}});
    cluster.apply(&unpause, WriteMethod::Update).await.unwrap();
    eventually(
        "the spec change rolls out after unpausing",
        &operator,
        || async { deployment_replicas().await == 3 },
    )
    .await;
    eventually(
        "the WebApp is Ready at the new generation",
        &operator,
        || async { get(cr.clone()).await.is_some_and(|cr| ready(&cr)) },
    )
    .await;

    // SIGTERM: a clean exit.
    let pid = operator.child.id();
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut operator = operator;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = operator.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the operator did not exit after SIGTERM:\n{}",
            operator.dump()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "exit {exit:?}:\n{}", operator.dump());
}
