//! What the examples' live tests share, included by each one's `tests/support/mod.rs`
//! with `#[path]`: the operator run as a separate process (the including module names its
//! binary as `BINARY`), installing a CRD, waiting with a deadline.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::object::TypeRef;
use windlass_testenv::{TestEnv, TestNamespace};

/// The operator process, its log lines collected as they come.
pub struct Operator {
    /// The process.
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// Where it serves `/metrics`, `/healthz` and `/readyz`, once its log has said so.
    address: Arc<OnceLock<String>>,
    /// Its name in logs (its identity, for a replica).
    pub name: String,
}

impl Operator {
    /// Start the example's binary (`super::BINARY`) with `run` for `namespace` (`name` tells it apart in logs), with
    /// the extra arguments `extra`, against `env`'s control plane.
    /// It serves on a port the system picks (port 0), and says which in its log: no port
    /// chosen here could be taken by another process before the operator binds it.
    pub fn start(env: &TestEnv, name: &str, namespace: &str, extra: &[&str]) -> Operator {
        Operator::start_with(env.kubeconfig_path(), name, namespace, extra)
    }

    /// [`Operator::start`] with the client configuration in the file `kubeconfig` (e.g. one
    /// whose server is a fault-injecting proxy).
    pub fn start_with(
        kubeconfig: &std::path::Path,
        name: &str,
        namespace: &str,
        extra: &[&str],
    ) -> Operator {
        let mut child = Command::new(super::BINARY)
            .args([
                "run",
                "--watch-namespace",
                namespace,
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--log-level",
                "debug",
                "--log-format=json",
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the operator binary starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let address = Arc::new(OnceLock::new());
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (log, address) = (log.clone(), address.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Some(served) = serving_address(&line) {
                        let _ = address.set(served);
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        Operator {
            child,
            log,
            address,
            name: name.to_string(),
        }
    }

    /// The URL of its HTTP server. Ask once it has answered over HTTP (a [`Self::readyz`]
    /// that was `Some`): before, its log may not have said where it serves.
    pub fn url(&self) -> String {
        let address = self.address.get().unwrap_or_else(|| {
            panic!(
                "{} has not logged where it serves yet:\n{}",
                self.name,
                self.dump()
            )
        });
        format!("http://{address}")
    }

    /// GET `path` from the operator's HTTP server: the status code and the body (`None`
    /// while it does not answer, or has not said where it serves).
    pub fn http(&self, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let address = self.address.get()?;
        let mut stream = std::net::TcpStream::connect(address).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let code = response.split(' ').nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n")?.1.to_string();
        Some((code, body))
    }

    /// The status code of `/readyz`.
    pub fn readyz(&self) -> Option<u16> {
        self.http("/readyz").map(|(code, _)| code)
    }

    /// A scrape of `/metrics` (empty when it cannot be read).
    pub fn metrics(&self) -> String {
        self.http("/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Whether the process still runs.
    pub fn still_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How many reconciles of the CR named `name` have started, by its log.
    pub fn reconciles(&self, name: &str) -> usize {
        let needle = format!("\"resource_name\":\"{name}\"");
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("reconcile started") && l.contains(&needle))
            .count()
    }

    /// Its log, for failure messages.
    pub fn dump(&self) -> String {
        format!(
            "--- {} ---\n{}",
            self.name,
            self.log.lock().unwrap().join("\n")
        )
    }
}

impl Operator {
    /// SIGKILL the process (no clean shutdown, no lease release) and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The address in the line the operator logs once its HTTP server is bound
/// (`{"fields":{"message":"serving /metrics, …","addr":"127.0.0.1:40123"},…}`).
fn serving_address(line: &str) -> Option<String> {
    let line: Value = serde_json::from_str(line).ok()?;
    let fields = &line["fields"];
    fields["message"]
        .as_str()?
        .starts_with("serving ")
        .then(|| fields["addr"].as_str().map(str::to_string))?
}

/// Wait until `check` holds, failing with the operators' logs after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, logs: &[&Operator], check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}; operator logs:\n{}",
            logs.iter().map(|o| o.dump()).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long a test waits for the operator to converge.
pub const LONG: Duration = Duration::from_secs(120);

/// Ready=True for the CR's current generation.
pub fn ready(cr: &Value) -> bool {
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

/// Install the CRD of `K` and wait (up to 30 s) until the server serves the kind.
pub async fn install_crd_of<K>(cluster: &LiveCluster)
where
    K: kube::CustomResourceExt + kube::Resource<DynamicType = ()>,
{
    let crd = serde_json::to_value(K::crd()).unwrap();
    cluster.apply(&crd, WriteMethod::Apply).await.unwrap();
    let kind = TypeRef::new(K::api_version(&()), K::kind(&()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while cluster.scope(&kind).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "CRD never served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// For one live test: the shared control plane, a namespace of its own named after
/// `prefix`, a cluster client, and the CRD of `K` installed and served.
pub async fn setup<K>(prefix: &str) -> (&'static TestEnv, TestNamespace, Arc<LiveCluster>)
where
    K: kube::CustomResourceExt + kube::Resource<DynamicType = ()>,
{
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace(prefix).await.unwrap();
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    install_crd_of::<K>(&cluster).await;
    (env, ns, cluster)
}
