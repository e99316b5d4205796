//! [`TestEnv`]: a control plane plus node simulator on a thread of its own, the process-wide
//! shared instance, and per-test namespaces.
//!
//! Each environment runs on a dedicated thread with its own tokio runtime. Tests under plain
//! `cargo test` each get a fresh runtime (`#[tokio::test]`) that dies with the test; the
//! simulator and the namespace clean-up must outlive any one test, so they live on the
//! environment's runtime, and every test gets its *own* [`kube::Client`] built on its runtime
//! by [`TestEnv::client`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Capabilities, Container, Namespace, Pod, PodSecurityContext, PodSpec, SeccompProfile,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use tokio::sync::{oneshot, watch};

use crate::assets::Assets;
use crate::control_plane::{ControlPlane, ControlPlaneProcess, ProcessInfo, random_bytes};
use crate::error::{Error, Result};
use crate::simulator::{NodeSimulator, SimulatorConfig};

/// Label put on every namespace made by [`TestEnv::namespace`] (value `"true"`).
pub const TEST_NAMESPACE_LABEL: &str = "testenv.windlass.dev/test-namespace";

/// The Pod Security Admission label every namespace made by [`TestEnv::namespace`] carries,
/// with the value [`ENFORCED_POD_SECURITY`]: Pods that do not meet the `restricted` profile
/// are refused there, as in a production cluster that enforces it.
pub const POD_SECURITY_ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// The Pod Security Standard test namespaces enforce (the strictest one).
pub const ENFORCED_POD_SECURITY: &str = "restricted";

/// A Pod security context that meets the `restricted` Pod Security Standard together with
/// [`restricted_container_security`]: not root, the runtime's default seccomp profile.
pub fn restricted_pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container security context that meets the `restricted` Pod Security Standard: no
/// privilege escalation, every capability dropped.
pub fn restricted_container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

const NODES_READY_TIMEOUT: Duration = Duration::from_secs(60);
const NAMESPACE_READY_TIMEOUT: Duration = Duration::from_secs(60);

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

/// The body of an environment's thread: starts everything on a runtime of its own, hands the
/// handle's state to `ready` (or why it failed), then supervises until `shutdown`.
fn run_environment(
    builder: TestEnvBuilder,
    ready: oneshot::Sender<Result<Inner>>,
    shutdown: oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(Error::io("building the windlass-testenv runtime", e)));
            return;
        }
    };
    runtime.block_on(async move {
        let started = Instant::now();
        let (assets, control_plane, admin, simulator) = match start_environment(builder).await {
            Ok(parts) => parts,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let (requests, process_requests) = tokio::sync::mpsc::unbounded_channel();
        let inner = Inner::new(
            &control_plane,
            simulator.as_ref(),
            &assets,
            admin,
            requests,
            started.elapsed(),
        );
        let health = inner.health.clone();
        let apiserver_url = inner.apiserver_url.clone();
        let processes = inner.processes.clone();
        tracing::info!(
            "windlass-testenv: control plane ready in {:?} at {}",
            inner.startup_time,
            inner.apiserver_url
        );
        if ready.send(Ok(inner)).is_err() {
            return;
        }
        // Supervise until dropped. A process dying or a simulator task panicking mid-run would
        // make tests fail with connection errors or time out waiting for Pods; instead say
        // loudly which one and why, and make later operations fail fast (`Health`).
        let supervisor = Supervisor {
            id: NEXT_ENVIRONMENT_ID.fetch_add(1, Ordering::Relaxed),
            control_plane,
            simulator,
            processes,
            health,
            apiserver_url,
        };
        supervisor.run(process_requests, shutdown).await;
    });
}

/// Finds the binaries, starts the control plane and, if the builder asks for one, the node
/// simulator, waiting until its Nodes are ready. Returns them with an admin client.
async fn start_environment(
    builder: TestEnvBuilder,
) -> Result<(Assets, ControlPlane, Client, Option<NodeSimulator>)> {
    let assets = match builder.assets {
        Some(assets) => assets,
        None => Assets::locate()?,
    };
    let control_plane = ControlPlane::start(&assets, &builder.apiserver_flags).await?;
    let admin = Client::try_from(control_plane.config.clone())
        .map_err(|e| Error::kube("building the admin client", e))?;
    let simulator = match builder.simulator {
        Some(config) => {
            let simulator = NodeSimulator::start(admin.clone(), config).await?;
            simulator
                .wait_ready(admin.clone(), NODES_READY_TIMEOUT)
                .await?;
            Some(simulator)
        }
        None => None,
    };
    Ok((assets, control_plane, admin, simulator))
}

impl Inner {
    /// The state the handles share, of a started environment; `requests` reach its thread.
    fn new(
        control_plane: &ControlPlane,
        simulator: Option<&NodeSimulator>,
        assets: &Assets,
        admin: Client,
        requests: tokio::sync::mpsc::UnboundedSender<ProcessRequest>,
        startup_time: Duration,
    ) -> Self {
        Inner {
            config: control_plane.config.clone(),
            kubeconfig_path: control_plane.kubeconfig_path.clone(),
            dir: control_plane.dir().to_path_buf(),
            apiserver_url: control_plane.apiserver_url.clone(),
            processes: Arc::new(Mutex::new(control_plane.processes())),
            requests,
            watchdog_pid: control_plane.watchdog_pid(),
            node_names: simulator
                .map(|s| s.node_names().to_vec())
                .unwrap_or_default(),
            startup_time,
            kubectl: assets.kubectl.clone(),
            runtime: tokio::runtime::Handle::current(),
            admin,
            health: Arc::default(),
        }
    }
}

/// What an environment's thread keeps while it supervises: the control plane and simulator
/// it owns, and what it shares with the handles.
struct Supervisor {
    /// The environment's key in [`BROKEN`].
    id: u64,
    control_plane: ControlPlane,
    simulator: Option<NodeSimulator>,
    processes: Arc<Mutex<Vec<ProcessInfo>>>,
    health: Arc<Health>,
    apiserver_url: String,
}

impl Supervisor {
    /// Serves the process requests and checks the environment every second until `shutdown`;
    /// then stops everything.
    async fn run(
        mut self,
        mut process_requests: tokio::sync::mpsc::UnboundedReceiver<ProcessRequest>,
        mut shutdown: oneshot::Receiver<()>,
    ) {
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                Some(request) = process_requests.recv() => self.serve(request).await,
                _ = tokio::time::sleep(Duration::from_secs(1)) => self.check(),
            }
        }
        BROKEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
        drop(self.simulator);
        drop(self.control_plane);
    }

    /// Stops or starts again the process `request` names, and answers it.
    async fn serve(&mut self, request: ProcessRequest) {
        let name = request.process.name();
        let done = if request.start {
            tracing::info!("windlass-testenv: starting {name} again");
            self.control_plane.start_again(name).await
        } else {
            tracing::info!("windlass-testenv: stopping {name}");
            self.control_plane.stop(name)
        };
        *self
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.control_plane.processes();
        let _ = request.reply.send(done);
    }

    /// Checks that every process and simulator task still runs; the first failure is said
    /// loudly and recorded, once.
    fn check(&mut self) {
        if self.health.failure.get().is_some() {
            return;
        }
        let checked = self.control_plane.check_running().and_then(|()| {
            self.simulator
                .as_mut()
                .map_or(Ok(()), NodeSimulator::check_running)
        });
        if let Err(e) = checked {
            let reason = e.to_string();
            let apiserver_url = &self.apiserver_url;
            eprintln!(
                "windlass-testenv: the control plane at {apiserver_url} broke; \
                 its operations fail from now on: {reason}"
            );
            BROKEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(
                    self.id,
                    format!("the control plane at {apiserver_url} broke: {reason}"),
                );
            let _ = self.health.failure.set(reason);
        }
    }
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

    /// Creates a fresh namespace `{prefix}-{random}` and waits until Pods can be created in it
    /// (its `default` service account exists, with a token where the server version needs one).
    /// The namespace enforces the `restricted` Pod Security Standard
    /// ([`POD_SECURITY_ENFORCE_LABEL`]): a Pod must run as non-root with the runtime's default
    /// seccomp profile, no privilege escalation and every capability dropped (see
    /// [`restricted_pod_security`] and [`restricted_container_security`]).
    /// The namespace is deleted when the returned value is dropped, unless
    /// [`TestNamespace::keep`] was called.
    ///
    /// # Errors
    /// If the namespace cannot be created or does not become usable within a minute;
    /// [`Error::Broken`] at once if the environment broke.
    pub async fn namespace(&self, prefix: &str) -> Result<TestNamespace> {
        let client = self.client()?;
        let name = namespace_name(prefix)?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [
                        (TEST_NAMESPACE_LABEL.to_string(), "true".to_string()),
                        (
                            POD_SECURITY_ENFORCE_LABEL.to_string(),
                            ENFORCED_POD_SECURITY.to_string(),
                        ),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|e| Error::kube(format!("creating namespace {name}"), e))?;
        let test_namespace = TestNamespace {
            name: name.clone(),
            env: self.inner.clone(),
            keep: false,
        };

        // Admission is the ground truth for "Pods can be created": a dry-run Pod goes through
        // the ServiceAccount admission plugin, which rejects Pods until the controller manager
        // has made the service account (and, before 1.24, its token secret).
        let pods: Api<Pod> = Api::namespaced(client, &name);
        let probe = Pod {
            metadata: ObjectMeta {
                name: Some("windlass-testenv-probe".to_string()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                security_context: Some(restricted_pod_security()),
                containers: vec![Container {
                    name: "probe".to_string(),
                    image: Some("probe".to_string()),
                    security_context: Some(restricted_container_security()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let started = Instant::now();
        loop {
            match pods.create(&dry_run, &probe).await {
                Ok(_) => return Ok(test_namespace),
                Err(e) if started.elapsed() > NAMESPACE_READY_TIMEOUT => {
                    return Err(Error::Timeout {
                        what: format!("namespace {name} (its default service account)"),
                        after: NAMESPACE_READY_TIMEOUT,
                        details: format!(": last error: {e}"),
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

fn namespace_name(prefix: &str) -> Result<String> {
    let mut clean: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    clean.truncate(50);
    let clean = clean.trim_matches('-');
    let clean = if clean.is_empty() { "test" } else { clean };
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let suffix: String = random_bytes::<6>("a namespace name")?
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    Ok(format!("{clean}-{suffix}"))
}

/// A namespace of its own for one test, deleted (in the background) when dropped.
pub struct TestNamespace {
    name: String,
    env: Arc<Inner>,
    keep: bool,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .field("keep", &self.keep)
            .finish()
    }
}

impl TestNamespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An `Api` for namespaced objects of kind `K` in this namespace.
    pub fn api<K>(&self, client: Client) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(client, &self.name)
    }

    /// Do not delete the namespace on drop (e.g. to inspect it with `testenv up`-style tools).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let namespaces: Api<Namespace> = Api::all(self.env.admin.clone());
        let name = self.name.clone();
        // On the environment's runtime: the test's runtime may be shutting down right now.
        drop(self.env.runtime.spawn(async move {
            if let Err(e) = namespaces.delete(&name, &DeleteParams::background()).await {
                tracing::debug!("deleting test namespace {name}: {e}");
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_valid_and_distinct() {
        let a = namespace_name("My_Test::case").ok();
        let b = namespace_name("My_Test::case").ok();
        assert_ne!(a, b);
        let a = a.unwrap_or_default();
        assert!(a.starts_with("my-test--case-"), "{a}");
        assert!(a.len() <= 63);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(
            namespace_name("--")
                .unwrap_or_default()
                .starts_with("test-")
        );
    }
}
