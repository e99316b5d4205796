//! [`TestEnv`]: a control plane plus node simulator on a thread of its own, the process-wide
//! shared instance, and per-test namespaces.
//!
//! Each environment runs on a dedicated thread with its own tokio runtime. Tests under plain
//! `cargo test` each get a fresh runtime (`#[tokio::test]`) that dies with the test; the
//! simulator and the namespace clean-up must outlive any one test, so they live on the
//! environment's runtime, and every test gets its *own* [`kube::Client`] built on its runtime
//! by [`TestEnv::client`].
//!
//! The environment's thread (starting everything, then supervising it) is in `supervisor.rs`;
//! per-test namespaces and the Pod Security settings they enforce are in `namespace.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::Client;
use tokio::sync::{oneshot, watch};

use crate::assets::Assets;
use crate::control_plane::{ControlPlaneProcess, ProcessInfo};
use crate::error::{Error, Result};
use crate::simulator::SimulatorConfig;

mod namespace;
mod supervisor;

pub use namespace::{
    ENFORCED_POD_SECURITY, POD_SECURITY_ENFORCE_LABEL, TEST_NAMESPACE_LABEL, TestNamespace,
    restricted_container_security, restricted_pod_security,
};
use supervisor::run_environment;

/// Options for a [`TestEnv`]; start it with [`TestEnvBuilder::start`].
#[derive(Debug, Clone)]
pub struct TestEnvBuilder {
    assets: Option<Assets>,
    simulator: Option<SimulatorConfig>,
    apiserver_flags: Vec<String>,
}

impl Default for TestEnvBuilder {
    fn default() -> Self {
        TestEnvBuilder {
            assets: None,
            simulator: Some(SimulatorConfig::default()),
            apiserver_flags: Vec::new(),
        }
    }
}

impl TestEnvBuilder {
    /// Use these binaries instead of [`Assets::locate`].
    pub fn assets(mut self, assets: Assets) -> Self {
        self.assets = Some(assets);
        self
    }

    /// Number of simulated Nodes (default 2; at least 1).
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.simulator
            .get_or_insert_with(SimulatorConfig::default)
            .nodes = nodes.max(1);
        self
    }

    /// Pass `flag` (e.g. `--feature-gates=WatchList=false`) to kube-apiserver, after the
    /// harness's own flags, to test against a server configured otherwise.
    pub fn apiserver_flag(mut self, flag: impl Into<String>) -> Self {
        self.apiserver_flags.push(flag.into());
        self
    }

    /// Run without the node simulator: Pods then stay Pending, as on a bare envtest.
    pub fn without_simulator(mut self) -> Self {
        self.simulator = None;
        self
    }

    /// Starts etcd, kube-apiserver, kube-controller-manager and (unless disabled) the node
    /// simulator, and returns once all are ready: `/readyz` is ok, the controller manager has
    /// created the `default` service account, and the simulated Nodes are Ready and untainted.
    ///
    /// Does not need a tokio runtime (it can be driven by any executor).
    ///
    /// # Errors
    /// When binaries are missing ([`Error::BinaryNotFound`] names the provisioning script), a
    /// process exits early, or something is not ready within a minute (the error carries the
    /// tails of the logs).
    pub async fn start(self) -> Result<TestEnv> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("windlass-testenv".into())
            .spawn(move || run_environment(self, ready_tx, shutdown_rx))
            .map_err(|e| Error::io("starting the windlass-testenv thread", e))?;
        match ready_rx.await {
            Ok(Ok(inner)) => Ok(TestEnv {
                inner: Arc::new(inner),
                shutdown: Some(shutdown_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(Error::ShutDown)
            }
        }
    }
}

/// What the supervisor found wrong with an environment, shared by all its handles.
#[derive(Debug, Default)]
struct Health {
    /// The first failure seen; set once.
    failure: OnceLock<String>,
}

/// Failures of the environments of this process that still exist, by environment id, so that
/// [`wait_for`](crate::wait_for) can mention them when it times out (it only has an `Api`).
static BROKEN: Mutex<BTreeMap<u64, String>> = Mutex::new(BTreeMap::new());
static NEXT_ENVIRONMENT_ID: AtomicU64 = AtomicU64::new(0);

/// One line per broken environment of this process: which one and why.
pub(crate) fn broken_environments() -> Vec<String> {
    BROKEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .values()
        .cloned()
        .collect()
}

/// A test asks the environment's thread to stop or start a process of the control plane.
struct ProcessRequest {
    process: ControlPlaneProcess,
    /// Start it again (`true`) or stop it.
    start: bool,
    reply: oneshot::Sender<Result<()>>,
}

struct Inner {
    config: kube::Config,
    kubeconfig_path: PathBuf,
    dir: PathBuf,
    apiserver_url: String,
    /// Updated when a process is started again (its pid changes).
    processes: Arc<Mutex<Vec<ProcessInfo>>>,
    requests: tokio::sync::mpsc::UnboundedSender<ProcessRequest>,
    watchdog_pid: Option<u32>,
    node_names: Vec<String>,
    startup_time: Duration,
    kubectl: Option<PathBuf>,
    /// Runtime of the environment's thread, and a client bound to it, for work that must
    /// outlive a test's runtime (namespace deletion on drop).
    runtime: tokio::runtime::Handle,
    admin: Client,
    health: Arc<Health>,
}

/// A running control plane: etcd, kube-apiserver and kube-controller-manager on loopback, plus
/// the node simulator. Dropping it stops everything and removes its directory.
///
/// Most tests want the one instance shared by all tests of a test binary: [`TestEnv::shared`].
pub struct TestEnv {
    inner: Arc<Inner>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("apiserver_url", &self.inner.apiserver_url)
            .field("kubeconfig", &self.inner.kubeconfig_path)
            .finish_non_exhaustive()
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type SharedResult = Option<std::result::Result<&'static TestEnv, String>>;
static SHARED: OnceLock<watch::Receiver<SharedResult>> = OnceLock::new();

impl TestEnv {
    /// Options for a new, independent environment.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// Starts a new, independent environment with default options (see
    /// [`TestEnvBuilder::start`]).
    ///
    /// # Errors
    /// As [`TestEnvBuilder::start`].
    pub async fn start() -> Result<TestEnv> {
        Self::builder().start().await
    }

    /// The environment shared by every test of this process (test binary), started by the
    /// first caller and kept until the process exits; its processes die and its directory is
    /// removed then, however the process ends.
    ///
    /// Safe to call from any number of tests at once, each on its own runtime.
    ///
    /// # Errors
    /// [`Error::SharedStartFailed`] with the reason, for every caller, if it could not start;
    /// [`Error::Broken`] if it broke since (see [`TestEnv::check_health`]).
    pub async fn shared() -> Result<&'static TestEnv> {
        let receiver = SHARED.get_or_init(|| {
            let (tx, rx) = watch::channel(None);
            // A thread of its own, so a test that gives up (times out, panics) while the shared
            // environment starts cannot cancel the start for everyone else.
            let spawned = std::thread::Builder::new()
                .name("windlass-testenv-shared".into())
                .spawn(move || {
                    let result = futures::executor::block_on(TestEnv::start());
                    let value = result
                        .map(|env| &*Box::leak(Box::new(env)))
                        .map_err(|e| e.to_string());
                    let _ = tx.send(Some(value));
                });
            if let Err(e) = spawned {
                let (tx, rx) = watch::channel(Some(Err(format!("could not start a thread: {e}"))));
                drop(tx);
                return rx;
            }
            rx
        });
        let mut receiver = receiver.clone();
        let value = receiver
            .wait_for(Option::is_some)
            .await
            .map_err(|_| Error::SharedStartFailed("the starting thread panicked".to_string()))?;
        match value.as_ref() {
            Some(Ok(env)) => env.check_health().map(|()| *env),
            Some(Err(message)) => Err(Error::SharedStartFailed(message.clone())),
            None => Err(Error::ShutDown),
        }
    }

    /// A new admin client for the current tokio runtime. Make one per test (per runtime): a
    /// client keeps background tasks on the runtime it was made on.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio runtime; [`Error::Broken`] if the environment broke
    /// (see [`Self::check_health`]).
    pub fn client(&self) -> Result<Client> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        self.check_health()?;
        Client::try_from(self.inner.config.clone()).map_err(|e| Error::kube("building a client", e))
    }

    /// `Ok` while the environment works: every control plane process runs and every task of the
    /// node simulator too. The environment checks this every second in the background and
    /// prints the first failure to stderr; from then on [`Self::client`], [`Self::namespace`] and
    /// [`Self::shared`] fail fast with the same error, and timeouts of
    /// [`wait_for`](crate::wait_for) mention it.
    ///
    /// # Errors
    /// [`Error::Broken`] with what broke: [`Error::ProcessExited`]'s or
    /// [`Error::SimulatorStopped`]'s message.
    pub fn check_health(&self) -> Result<()> {
        match self.inner.health.failure.get() {
            Some(reason) => Err(Error::Broken {
                apiserver_url: self.inner.apiserver_url.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The client configuration (admin, trusting the apiserver's certificate).
    pub fn kube_config(&self) -> kube::Config {
        self.inner.config.clone()
    }

    /// Path of a kubeconfig file for this control plane (admin user, context
    /// `windlass-testenv`), for kubectl and other tools.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.inner.kubeconfig_path
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn apiserver_url(&self) -> &str {
        &self.inner.apiserver_url
    }

    /// The environment's private directory (certificates, etcd data, logs, kubeconfig).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The control plane's processes (name, pid, log file); a process started again has a
    /// new pid.
    pub fn processes(&self) -> Vec<ProcessInfo> {
        self.inner
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stops `process` (SIGKILL, as a crash would), to test what clients do during an outage.
    /// The rest keeps running, and the environment's supervisor does not count the stopped
    /// process as broken; [`Self::start_process`] starts it again. Use an environment of the
    /// test's own ([`TestEnv::start`]), not [`TestEnv::shared`]: every test sharing it would
    /// see the outage.
    ///
    /// # Errors
    /// [`Error::ShutDown`] if the environment is gone.
    pub async fn stop_process(&self, process: ControlPlaneProcess) -> Result<()> {
        self.process_request(process, false).await
    }

    /// Starts `process` again after [`Self::stop_process`] — on the same ports, with the same
    /// data directory and certificates, its output appended to its log — and waits until
    /// kube-apiserver's `/readyz` answers `ok` again. Clients keep working with the same
    /// kubeconfig.
    ///
    /// # Errors
    /// The process cannot be started or the control plane does not serve again within a
    /// minute (with the logs' tails); [`Error::ShutDown`] if the environment is gone.
    pub async fn start_process(&self, process: ControlPlaneProcess) -> Result<()> {
        self.process_request(process, true).await
    }

    /// [`Self::stop_process`] then [`Self::start_process`]: a crash and a restart.
    ///
    /// # Errors
    /// As [`Self::start_process`].
    pub async fn restart_process(&self, process: ControlPlaneProcess) -> Result<()> {
        self.stop_process(process).await?;
        self.start_process(process).await
    }

    async fn process_request(&self, process: ControlPlaneProcess, start: bool) -> Result<()> {
        self.check_health()?;
        let (reply, answer) = oneshot::channel();
        self.inner
            .requests
            .send(ProcessRequest {
                process,
                start,
                reply,
            })
            .map_err(|_| Error::ShutDown)?;
        answer.await.map_err(|_| Error::ShutDown)?
    }

    /// Pid of the watchdog that removes [`Self::dir`] if this process is killed.
    pub fn watchdog_pid(&self) -> Option<u32> {
        self.inner.watchdog_pid
    }

    /// Names of the simulated Nodes (empty without the simulator).
    pub fn node_names(&self) -> &[String] {
        &self.inner.node_names
    }

    /// How long it took from the start call until everything was ready.
    pub fn startup_time(&self) -> Duration {
        self.inner.startup_time
    }

    /// A `kubectl` command with `--kubeconfig` set to this control plane; add arguments and run
    /// it. The kubectl of the assets directory is preferred (it matches the server's version),
    /// else the one on `PATH`.
    ///
    /// # Errors
    /// [`Error::BinaryNotFound`] if there is no kubectl.
    pub fn kubectl(&self) -> Result<std::process::Command> {
        let kubectl = self.inner.kubectl.clone().ok_or(Error::BinaryNotFound {
            binary: "kubectl",
            searched: "the assets directory, then PATH".to_string(),
        })?;
        let mut command = std::process::Command::new(kubectl);
        command.arg(format!(
            "--kubeconfig={}",
            self.inner.kubeconfig_path.display()
        ));
        Ok(command)
    }
}
