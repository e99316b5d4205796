//! etcd + kube-apiserver + kube-controller-manager on loopback.
//!
//! Why hand-written: controller-runtime's envtest does this for Go; in Rust there is nothing
//! comparable, and envtest also stops short of kube-controller-manager, without which there is
//! no garbage collection, no Deployment → ReplicaSet → Pod and no namespace deletion.
//!
//! Security is on as in a real cluster: TLS only (the apiserver generates its serving cert in
//! `--cert-dir`; clients trust exactly that file), token authentication, RBAC. Optional flags
//! are passed only when the binary takes them (its `--help`, or for deprecated flags, which
//! `--help` hides, a trial run with `--version`), so a newer control plane (via
//! `WINDLASS_K8S_ASSETS`) works too.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use ring::rand::SecureRandom as _;

use crate::assets::Assets;
use crate::error::{Error, Result};
use crate::process::{ManagedProcess, Watchdog};

/// How long each stage of the start may take before the harness gives up. Generous: a cold
/// page cache on a busy 2-core machine is slow, a warm start takes a few seconds.
const STAGE_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
const PORT_ATTEMPTS: u32 = 3;

/// A running process of the control plane, for diagnostics and measurements.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// `etcd`, `kube-apiserver` or `kube-controller-manager`.
    pub name: &'static str,
    /// Its process id.
    pub pid: u32,
    /// Its log file (inside the control plane's directory, removed with it).
    pub log: PathBuf,
}

/// A process of the control plane that a test can stop and start again
/// ([`TestEnv::stop_process`](crate::TestEnv::stop_process),
/// [`TestEnv::start_process`](crate::TestEnv::start_process),
/// [`TestEnv::restart_process`](crate::TestEnv::restart_process)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlPlaneProcess {
    /// etcd: kube-apiserver answers 5xx (and its watches end) while it is down.
    Etcd,
    /// kube-apiserver: connections are refused while it is down.
    KubeApiserver,
    /// kube-controller-manager: garbage collection and the workload controllers pause.
    KubeControllerManager,
}

impl ControlPlaneProcess {
    /// Its name, as in [`ProcessInfo::name`].
    pub fn name(self) -> &'static str {
        match self {
            ControlPlaneProcess::Etcd => "etcd",
            ControlPlaneProcess::KubeApiserver => "kube-apiserver",
            ControlPlaneProcess::KubeControllerManager => "kube-controller-manager",
        }
    }
}

impl std::fmt::Display for ControlPlaneProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

use crate::KEEP_ENV;

fn keep_requested() -> bool {
    std::env::var(KEEP_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// The directory, its watchdog and the processes of one control plane: the guard that makes
/// every exit path clean up, from the moment the directory exists. Dropping it kills the
/// processes (newest first, so controllers do not log a storm of errors about the vanished
/// apiserver), removes the directory unless it is to be kept, and then stops the watchdog.
struct Parts {
    processes: Vec<ManagedProcess>,
    dir: PathBuf,
    watchdog: Option<Watchdog>,
    keep_dir: bool,
}

impl Drop for Parts {
    fn drop(&mut self) {
        while let Some(mut process) = self.processes.pop() {
            process.kill();
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        // Killed (not asked to clean up): our own clean-up ran, or the directory is to stay.
        drop(self.watchdog.take());
    }
}

impl Parts {
    /// A fresh `windlass-testenv-*` directory in `base`, watched by a watchdog.
    fn create(base: &Path) -> Result<Parts> {
        let dir = tempfile::Builder::new()
            .prefix("windlass-testenv-")
            .tempdir_in(base)
            .map_err(|e| Error::io(format!("creating a directory in {}", base.display()), e))?
            .keep();
        // From here on, dropping `parts` removes the directory, whatever fails next.
        let mut parts = Parts {
            processes: Vec::new(),
            dir,
            watchdog: None,
            keep_dir: false,
        };
        parts.watchdog = Some(Watchdog::start(&parts.dir)?);
        Ok(parts)
    }

    /// Cleans up after a failed start — or keeps the directory if `keep` — and returns `error`
    /// with its log references corrected: a log that is gone is said to be gone.
    fn fail(mut self, error: Error, keep: bool) -> Error {
        while let Some(mut process) = self.processes.pop() {
            process.kill();
        }
        self.keep_dir = keep;
        let dir = self.dir.clone();
        drop(self);
        if keep {
            eprintln!(
                "windlass-testenv: the control plane failed to start; its directory {} is kept \
                 ({KEEP_ENV} is set): remove it when done",
                dir.display()
            );
        }
        match error {
            Error::ProcessExited {
                name,
                status,
                log,
                log_tail,
                ..
            } => Error::ProcessExited {
                name,
                status,
                log,
                log_tail,
                log_removed: !keep,
            },
            Error::Timeout {
                what,
                after,
                mut details,
            } => {
                if keep {
                    let _ = write!(details, "\n(logs kept in {})", dir.display());
                } else {
                    let _ = write!(
                        details,
                        "\n(the logs were removed with {}; set {KEEP_ENV}=1 to keep them)",
                        dir.display()
                    );
                }
                Error::Timeout {
                    what,
                    after,
                    details,
                }
            }
            other => other,
        }
    }

    /// `Err` naming the first process that has exited.
    fn check_running(&mut self) -> Result<()> {
        self.processes
            .iter_mut()
            .try_for_each(ManagedProcess::check_running)
    }

    /// Polls `probe` until it is true, failing early if a process exits and with the logs'
    /// tails after [`STAGE_TIMEOUT`].
    async fn wait_for<F, Fut>(&mut self, what: &str, mut probe: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        loop {
            self.check_running()?;
            if probe().await {
                tracing::debug!("{what}: ready after {:?}", start.elapsed());
                return Ok(());
            }
            if start.elapsed() > STAGE_TIMEOUT {
                let mut details = String::new();
                for p in &self.processes {
                    let _ = write!(
                        details,
                        "\n--- last lines of {} ---\n{}",
                        p.log_path().display(),
                        p.log_tail(15)
                    );
                }
                return Err(Error::Timeout {
                    what: what.to_string(),
                    after: STAGE_TIMEOUT,
                    details,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// A running control plane. Dropping it kills the processes and removes the directory.
pub(crate) struct ControlPlane {
    parts: Parts,
    pub(crate) kubeconfig_path: PathBuf,
    pub(crate) config: kube::Config,
    pub(crate) apiserver_url: String,
}

/// What a successful launch hands back besides the [`Parts`].
struct Launched {
    kubeconfig_path: PathBuf,
    config: kube::Config,
    apiserver_url: String,
}

impl ControlPlane {
    pub(crate) fn dir(&self) -> &Path {
        &self.parts.dir
    }

    pub(crate) fn processes(&self) -> Vec<ProcessInfo> {
        self.parts
            .processes
            .iter()
            .map(|p| ProcessInfo {
                name: p.name(),
                pid: p.pid(),
                log: p.log_path().to_path_buf(),
            })
            .collect()
    }

    pub(crate) fn watchdog_pid(&self) -> Option<u32> {
        self.parts.watchdog.as_ref().map(Watchdog::pid)
    }

    /// `Err` naming the first process that has exited.
    pub(crate) fn check_running(&mut self) -> Result<()> {
        self.parts.check_running()
    }

    /// The process called `name`, for [`Self::stop`] and [`Self::start_again`].
    fn process_mut(&mut self, name: &str) -> Result<&mut ManagedProcess> {
        self.parts
            .processes
            .iter_mut()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                Error::io(
                    format!("no control plane process called {name}"),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                )
            })
    }

    /// Stops the process called `name` (SIGKILL, as a crash would). The supervisor does not
    /// count it as broken until it is started again with [`Self::start_again`].
    pub(crate) fn stop(&mut self, name: &str) -> Result<()> {
        self.process_mut(name)?.stop();
        Ok(())
    }

    /// Starts the process called `name` again, on the same ports with the same data directory
    /// and certificates, and waits until the control plane serves again: kube-apiserver's
    /// `/readyz` answers `ok` (which it does only with etcd reachable).
    pub(crate) async fn start_again(&mut self, name: &str) -> Result<()> {
        self.process_mut(name)?.start_again()?;
        let client = Client::try_from(self.config.clone())
            .map_err(|e| Error::kube("building a client", e))?;
        self.parts
            .wait_for(
                &format!("the control plane to serve again after restarting {name}"),
                || {
                    let client = client.clone();
                    async move { apiserver_ready(&client).await }
                },
            )
            .await
    }

    /// Starts a control plane in a new directory under `$TMPDIR` and waits until the apiserver
    /// is ready and the controller manager works. Retries with fresh ports when another process
    /// took one in the meantime. A failed start cleans up (see [`KEEP_ENV`]).
    /// `apiserver_flags` are passed to kube-apiserver after windlass-testenv's own.
    pub(crate) async fn start(assets: &Assets, apiserver_flags: &[String]) -> Result<ControlPlane> {
        Self::start_with(
            assets,
            apiserver_flags,
            &std::env::temp_dir(),
            keep_requested(),
            free_ports::<3>,
        )
        .await
    }

    /// [`Self::start`] with the directory's parent, the keep-on-failure choice and the source
    /// of ports (`[etcd client, etcd peer, apiserver]`, asked once per attempt) given.
    async fn start_with(
        assets: &Assets,
        apiserver_flags: &[String],
        base: &Path,
        keep_on_failure: bool,
        mut ports: impl FnMut() -> Result<[u16; 3]>,
    ) -> Result<ControlPlane> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(assets, apiserver_flags, base, keep_on_failure, &mut ports).await
            {
                Ok(cp) => return Ok(cp),
                Err(e) if is_port_conflict(&e) && attempt < PORT_ATTEMPTS => {
                    tracing::warn!("control plane port conflict, retrying with fresh ports: {e}");
                }
                Err(e) if is_port_conflict(&e) => {
                    return Err(Error::PortsExhausted {
                        attempts: attempt,
                        last: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_once(
        assets: &Assets,
        apiserver_flags: &[String],
        base: &Path,
        keep_on_failure: bool,
        ports: &mut impl FnMut() -> Result<[u16; 3]>,
    ) -> Result<ControlPlane> {
        let mut parts = Parts::create(base)?;
        let launched = async {
            let ports = ports()?;
            launch(&mut parts, assets, apiserver_flags, ports).await
        }
        .await;
        match launched {
            Ok(Launched {
                kubeconfig_path,
                config,
                apiserver_url,
            }) => Ok(ControlPlane {
                parts,
                kubeconfig_path,
                config,
                apiserver_url,
            }),
            Err(e) => Err(parts.fail(e, keep_on_failure)),
        }
    }
}

/// Writes the configuration into `parts`' directory, starts the three processes and waits for
/// each to be ready. Whatever fails, `parts` still owns everything started so far.
async fn launch(
    parts: &mut Parts,
    assets: &Assets,
    apiserver_flags: &[String],
    ports: [u16; 3],
) -> Result<Launched> {
    let layout = Layout::new(&parts.dir, ports);
    write_configuration(&layout)?;

    // Asking the binaries which flags they take costs a few hundred ms: do it while etcd starts.
    let flags = {
        let (apiserver, kcm) = (
            assets.kube_apiserver.clone(),
            assets.kube_controller_manager.clone(),
        );
        tokio::task::spawn_blocking(move || {
            (
                accepts_flag(&apiserver, "--insecure-port=0"),
                help_text(&kcm),
            )
        })
    };

    start_etcd(parts, assets, &layout).await?;
    let (apiserver_has_insecure_port, kcm_help) = flags.await.map_err(|e| {
        Error::io(
            "asking the control plane binaries for their flags",
            std::io::Error::other(e),
        )
    })?;
    let apiserver_args = apiserver_args(&layout, apiserver_has_insecure_port, apiserver_flags);
    start_apiserver(parts, assets, &layout, &apiserver_args).await?;
    let (config, client) = connect_when_ready(parts, &layout).await?;
    start_controller_manager(parts, assets, &layout, &kcm_help, client).await?;
    Ok(Launched {
        kubeconfig_path: layout.kubeconfig,
        config,
        apiserver_url: layout.apiserver_url,
    })
}

/// Where the files of one control plane are, and the ports it serves on.
struct Layout {
    /// The control plane's directory.
    dir: PathBuf,
    /// Keys and certificates: the service account key pair, the apiserver's serving cert.
    pki: PathBuf,
    etcd_client: u16,
    etcd_peer: u16,
    secure_port: u16,
    apiserver_url: String,
    /// The admin's kubeconfig, handed to the tests.
    kubeconfig: PathBuf,
    /// The controller manager's kubeconfig.
    kcm_kubeconfig: PathBuf,
    /// The bearer tokens kube-apiserver accepts.
    tokens: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
    /// kube-apiserver's serving certificate, which it generates; clients trust exactly it.
    ca_file: PathBuf,
    /// Where the processes' ids are recorded, for the watchdog.
    pid_file: PathBuf,
}

impl Layout {
    /// The layout in `dir`, with `ports` as `[etcd client, etcd peer, apiserver]`.
    fn new(dir: &Path, ports: [u16; 3]) -> Self {
        let pki = dir.join("pki");
        let secure_port = ports[2];
        Layout {
            dir: dir.to_path_buf(),
            etcd_client: ports[0],
            etcd_peer: ports[1],
            secure_port,
            apiserver_url: format!("https://127.0.0.1:{secure_port}"),
            kubeconfig: dir.join("kubeconfig"),
            kcm_kubeconfig: dir.join("kube-controller-manager.kubeconfig"),
            tokens: dir.join("tokens.csv"),
            sa_key: pki.join("sa.key"),
            sa_pub: pki.join("sa.pub"),
            ca_file: pki.join("apiserver.crt"),
            pid_file: dir.join("pids"),
            pki,
        }
    }
}

/// Writes what the processes are configured with: the bearer tokens of the admin and of
/// the controller manager, the service account key pair, and a kubeconfig for each user.
fn write_configuration(layout: &Layout) -> Result<()> {
    create_dir(&layout.pki)?;
    let admin_token = random_token()?;
    let kcm_token = random_token()?;
    // Both are cluster admins; separate users keep audit trails and logs readable.
    write_file(
        &layout.tokens,
        &format!(
            "{admin_token},admin,windlass-testenv-admin,system:masters\n\
             {kcm_token},system:kube-controller-manager,windlass-testenv-kcm,system:masters\n"
        ),
    )?;
    let (private_pem, public_pem) = service_account_key_pems()?;
    write_file(&layout.sa_key, &private_pem)?;
    write_file(&layout.sa_pub, &public_pem)?;
    write_file(
        &layout.kubeconfig,
        &kubeconfig_yaml(
            &layout.apiserver_url,
            &layout.ca_file,
            "admin",
            &admin_token,
        ),
    )?;
    write_file(
        &layout.kcm_kubeconfig,
        &kubeconfig_yaml(
            &layout.apiserver_url,
            &layout.ca_file,
            "system:kube-controller-manager",
            &kcm_token,
        ),
    )
}

/// Starts etcd and waits until it accepts connections.
async fn start_etcd(parts: &mut Parts, assets: &Assets, layout: &Layout) -> Result<()> {
    let (dir, etcd_client, etcd_peer) = (&layout.dir, layout.etcd_client, layout.etcd_peer);
    let etcd_help = help_text(&assets.etcd);
    let mut etcd_args = vec![
        "--name=default".to_string(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
        format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
        format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
        format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer}"),
        "--initial-cluster-state=new".to_string(),
        "--logger=zap".to_string(),
        "--log-level=warn".to_string(),
    ];
    // Data is thrown away at the end; fsync only costs time (etcd ≥ 3.5 can skip it).
    if etcd_help.contains("--unsafe-no-fsync") {
        etcd_args.push("--unsafe-no-fsync".to_string());
    }
    parts.processes.push(ManagedProcess::start(
        "etcd",
        &assets.etcd,
        &etcd_args,
        dir.join("etcd.log"),
        &layout.pid_file,
    )?);
    let etcd_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, etcd_client));
    parts
        .wait_for("etcd to accept connections", || async move {
            tokio::net::TcpStream::connect(etcd_addr).await.is_ok()
        })
        .await
}

/// kube-apiserver's flags: etcd, loopback, TLS with token authentication and RBAC, service
/// accounts; then `extra`, the caller's.
fn apiserver_args(layout: &Layout, has_insecure_port: bool, extra: &[String]) -> Vec<String> {
    let mut apiserver_args = vec![
        format!("--etcd-servers=http://127.0.0.1:{}", layout.etcd_client),
        "--bind-address=127.0.0.1".to_string(),
        "--advertise-address=127.0.0.1".to_string(),
        format!("--secure-port={}", layout.secure_port),
        format!("--cert-dir={}", layout.pki.display()),
        format!("--token-auth-file={}", layout.tokens.display()),
        "--authorization-mode=RBAC".to_string(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
        format!("--service-account-key-file={}", layout.sa_pub.display()),
        format!(
            "--service-account-signing-key-file={}",
            layout.sa_key.display()
        ),
        "--service-cluster-ip-range=10.96.0.0/16".to_string(),
        "--allow-privileged=true".to_string(),
        // The `kubernetes` Service's endpoints would name the advertise address, and current
        // servers refuse a loopback one for them; nothing here reaches the API server through
        // that Service, so it keeps no endpoints (as envtest does).
        "--endpoint-reconciler-type=none".to_string(),
        "--profiling=false".to_string(),
        "--v=1".to_string(),
    ];
    // Up to 1.19 kube-apiserver also serves unauthenticated HTTP on 127.0.0.1:8080 unless
    // --insecure-port=0 (1.20-1.23 accept the flag, deprecated, and ignore it; 1.24 removed it
    // and rejects it). The flag is hidden from --help, hence the trial run.
    if has_insecure_port {
        apiserver_args.push("--insecure-port=0".to_string());
    }
    apiserver_args.extend(extra.iter().cloned());
    apiserver_args
}

/// Starts kube-apiserver with `args` and waits until it has written its serving certificate
/// and listens.
async fn start_apiserver(
    parts: &mut Parts,
    assets: &Assets,
    layout: &Layout,
    args: &[String],
) -> Result<()> {
    parts.processes.push(ManagedProcess::start(
        "kube-apiserver",
        &assets.kube_apiserver,
        args,
        layout.dir.join("kube-apiserver.log"),
        &layout.pid_file,
    )?);
    let apiserver_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, layout.secure_port));
    let key_file = layout.pki.join("apiserver.key");
    parts
        .wait_for("kube-apiserver to listen", || {
            let (ca_file, key_file) = (layout.ca_file.clone(), key_file.clone());
            async move {
                ca_file.exists()
                    && key_file.exists()
                    && tokio::net::TcpStream::connect(apiserver_addr).await.is_ok()
            }
        })
        .await
}

/// The client configuration of the admin kubeconfig, and a client of it, once
/// kube-apiserver's `/readyz` answers `ok`.
async fn connect_when_ready(parts: &mut Parts, layout: &Layout) -> Result<(kube::Config, Client)> {
    let kubeconfig_path = &layout.kubeconfig;
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path).map_err(|e| Error::Kubeconfig {
        path: kubeconfig_path.clone(),
        reason: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig {
            path: kubeconfig_path.clone(),
            reason: e.to_string(),
        })?;
    let client =
        Client::try_from(config.clone()).map_err(|e| Error::kube("building a client", e))?;
    parts
        .wait_for("kube-apiserver /readyz", || {
            let client = client.clone();
            async move { apiserver_ready(&client).await }
        })
        .await?;
    Ok((config, client))
}

/// Starts kube-controller-manager and waits until it works: it has created the `default`
/// service account, which `client` reads.
async fn start_controller_manager(
    parts: &mut Parts,
    assets: &Assets,
    layout: &Layout,
    kcm_help: &str,
    client: Client,
) -> Result<()> {
    let mut kcm_args = vec![
        format!("--kubeconfig={}", layout.kcm_kubeconfig.display()),
        "--leader-elect=false".to_string(),
        "--controllers=*".to_string(),
        format!(
            "--service-account-private-key-file={}",
            layout.sa_key.display()
        ),
        format!("--root-ca-file={}", layout.ca_file.display()),
        "--use-service-account-credentials=false".to_string(),
        "--secure-port=0".to_string(),
        // Tests create objects in bursts; the default 20 QPS makes controllers lag behind.
        "--kube-api-qps=200".to_string(),
        "--kube-api-burst=400".to_string(),
        "--v=1".to_string(),
    ];
    // Before 1.24 an unauthenticated HTTP port was open on 10252 by default, which would
    // collide between two control planes. (Unlike the apiserver's, this deprecated flag is
    // listed by --help.)
    if kcm_help.contains("--port int") {
        kcm_args.push("--port=0".to_string());
    }
    parts.processes.push(ManagedProcess::start(
        "kube-controller-manager",
        &assets.kube_controller_manager,
        &kcm_args,
        layout.dir.join("kube-controller-manager.log"),
        &layout.pid_file,
    )?);
    // The service account controller creating `default/default` shows the controller
    // manager is connected, has synced its informers and runs its controllers.
    let service_accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
    parts
        .wait_for(
            "kube-controller-manager to create the default service account",
            || {
                let service_accounts = service_accounts.clone();
                async move { matches!(service_accounts.get_opt("default").await, Ok(Some(_))) }
            },
        )
        .await
}

/// Whether kube-apiserver's `/readyz` answers `ok` within 5 s.
async fn apiserver_ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await,
        Ok(Ok(body)) if body.trim() == "ok"
    )
}

fn is_port_conflict(e: &Error) -> bool {
    match e {
        Error::ProcessExited { log_tail, .. } => log_tail.contains("address already in use"),
        _ => false,
    }
}

/// `N` distinct free loopback ports. Holding all listeners until the end keeps them distinct;
/// another process may still take one before our child binds it, which `start` retries.
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for port in &mut ports {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| Error::io("binding a free port on 127.0.0.1", e))?;
        *port = listener
            .local_addr()
            .map_err(|e| Error::io("reading a bound port", e))?
            .port();
        listeners.push(listener);
    }
    Ok(ports)
}

/// Whether `binary` takes `flag` (e.g. `--insecure-port=0`): `binary <flag> --version` exits 0
/// where the flag exists and fails as an unknown flag where it does not. Unlike reading
/// `--help`, this sees deprecated flags too, which the Kubernetes binaries hide from `--help`.
/// Cached per binary and flag; `false` if the binary cannot be run.
fn accepts_flag(binary: &Path, flag: &str) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<(PathBuf, String), bool>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (binary.to_path_buf(), flag.to_string());
    if let Some(known) = cache.lock().ok().and_then(|c| c.get(&key).copied()) {
        return known;
    }
    let accepted = std::process::Command::new(binary)
        .args([flag, "--version"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if let Ok(mut c) = cache.lock() {
        c.insert(key, accepted);
    }
    accepted
}

/// Output of `binary --help`, cached per binary; empty if it cannot be run (then no optional
/// flag is passed and a real problem shows when the binary is started).
fn help_text(binary: &Path) -> String {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(text) = cache.lock().ok().and_then(|c| c.get(binary).cloned()) {
        return text;
    }
    let text = std::process::Command::new(binary)
        .arg("--help")
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default();
    if let Ok(mut c) = cache.lock() {
        c.insert(binary.to_path_buf(), text.clone());
    }
    text
}

pub(crate) fn random_bytes<const N: usize>(what: &'static str) -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Crypto { what })?;
    Ok(bytes)
}

fn random_token() -> Result<String> {
    let bytes = random_bytes::<24>("a bearer token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A fresh ECDSA P-256 key pair as (PKCS#8 private key PEM, SubjectPublicKeyInfo PEM): the
/// apiserver and the controller manager sign service account tokens with the private key, the
/// apiserver verifies them with the public one (its public-key reader does not take PKCS#8).
fn service_account_key_pems() -> Result<(String, String)> {
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};
    let failed = || Error::Crypto {
        what: "the service account signing key",
    };
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| failed())?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| failed())?;
    // DER header of a SubjectPublicKeyInfo for id-ecPublicKey on prime256v1 with a 65-byte
    // uncompressed point: SEQUENCE { SEQUENCE { OID, OID }, BIT STRING }.
    const P256_SPKI_PREFIX: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    let point = pair.public_key().as_ref();
    if point.len() != 65 {
        return Err(failed());
    }
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(point);
    Ok((pem("PRIVATE KEY", pkcs8.as_ref()), pem("PUBLIC KEY", &spki)))
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

/// A kubeconfig for one user. Written as text: the shape is fixed and tiny, and kubectl as
/// well as kube-rs read it back.
fn kubeconfig_yaml(server: &str, ca_file: &Path, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: windlass-testenv\n\
         \x20 cluster:\n\
         \x20   server: {server}\n\
         \x20   certificate-authority: {ca}\n\
         users:\n\
         - name: {user}\n\
         \x20 user:\n\
         \x20   token: {token}\n\
         contexts:\n\
         - name: windlass-testenv\n\
         \x20 context:\n\
         \x20   cluster: windlass-testenv\n\
         \x20   user: {user}\n\
         \x20   namespace: default\n\
         current-context: windlass-testenv\n",
        ca = ca_file.display(),
    )
}

fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))
}

fn write_file(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Tokens and keys: readable by us only.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    file.write_all(contents.as_bytes())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last line of etcd 3.7's log (zap JSON) when its client port is taken.
    const ETCD_PORT_TAKEN: &str = r#"{"level":"fatal","ts":"2026-11-26T22:30:10.261553Z","caller":"etcdmain/etcd.go:157","msg":"discovery failed","error":"listen tcp 127.0.0.1:52281: bind: address already in use","stacktrace":"go.etcd.io/etcd/server/v3/etcdmain.startEtcdOrProxyV2\n\tgo.etcd.io/etcd/server/v3@v3.7.0/etcdmain/etcd.go:157\ngo.etcd.io/etcd/server/v3/etcdmain.Main\n\tgo.etcd.io/etcd/server/v3@v3.7.0/etcdmain/main.go:40\nmain.main\n\tgo.etcd.io/etcd/server/v3@v3.7.0/main.go:31\nruntime.main\n\truntime/proc.go:290"}"#;

    /// The last lines of kube-apiserver 1.37's log when its secure port is taken.
    const APISERVER_PORT_TAKEN: &str = r#"I1126 22:30:14.303586   31520 server.go:151] Version: v1.37.2
I1126 22:30:14.303609   31520 server.go:153] "Golang settings" GOGC="" GOMAXPROCS="" GOTRACEBACK=""
E1126 22:30:14.303891   31520 run.go:72] "command failed" err="failed to create listener: failed to listen on 127.0.0.1:59529: listen tcp 127.0.0.1:59529: bind: address already in use""#;

    fn exited(name: &'static str, log_tail: &str) -> Error {
        Error::ProcessExited {
            name,
            status: "exit status: 1".to_string(),
            log: PathBuf::from("/tmp/x.log"),
            log_tail: log_tail.to_string(),
            log_removed: false,
        }
    }

    #[test]
    fn port_conflicts_are_recognised_in_real_logs() {
        assert!(is_port_conflict(&exited("etcd", ETCD_PORT_TAKEN)));
        assert!(is_port_conflict(&exited(
            "kube-apiserver",
            APISERVER_PORT_TAKEN
        )));
        assert!(!is_port_conflict(&exited(
            "kube-apiserver",
            "Error: unknown flag: --insecure-port"
        )));
        assert!(!is_port_conflict(&Error::Timeout {
            what: "etcd".to_string(),
            after: STAGE_TIMEOUT,
            details: String::new(),
        }));
    }

    /// Waits until no process mentions `path`. Not at once: a process killed just as it
    /// forked (the watchdog's `sleep 2 &`) leaves a child that carries its command line
    /// until that child execs, a moment later.
    async fn no_process_mentions(path: &Path) {
        let what = format!("no process mentions {}", path.display());
        crate::eventually_within(&what, Duration::from_secs(10), || async {
            processes_mentioning(path).is_empty()
        })
        .await;
    }

    /// Processes whose command line mentions `path` (the watchdog has the directory in its).
    fn processes_mentioning(path: &Path) -> Vec<String> {
        let needle = path.to_string_lossy().into_owned();
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                cmdline.contains(&needle).then_some(cmdline)
            })
            .collect()
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("windlass-testenv-unit-")
            .tempdir()
            .expect("a scratch directory")
    }

    /// Stand-ins for the three binaries that print a line and exit 3.
    fn failing_assets(dir: &Path) -> Assets {
        use std::os::unix::fs::PermissionsExt as _;
        let script = dir.join("fails");
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"fake control plane binary: the disk is on fire\" >&2\nexit 3\n",
        )
        .expect("write script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Assets {
            etcd: script.clone(),
            kube_apiserver: script.clone(),
            kube_controller_manager: script,
            kubectl: None,
        }
    }

    #[tokio::test]
    async fn an_error_before_any_process_starts_removes_the_directory_and_watchdog() {
        let base = scratch();
        let assets = failing_assets(base.path());
        let tmp = base.path().join("tmp");
        create_dir(&tmp).expect("tmp");
        let result = ControlPlane::start_with(&assets, &[], &tmp, false, || {
            Err(Error::io(
                "binding a free port on 127.0.0.1",
                std::io::Error::other("no ports in this test"),
            ))
        })
        .await;
        assert!(
            matches!(&result, Err(Error::Io { what, .. }) if what.contains("free port")),
            "{:?}",
            result.err()
        );
        assert_eq!(
            entries(&tmp),
            Vec::<PathBuf>::new(),
            "directory left behind"
        );
        no_process_mentions(&tmp).await;
    }

    #[tokio::test]
    async fn a_process_exiting_at_start_is_reported_with_its_log_and_cleaned_up() {
        let base = scratch();
        let assets = failing_assets(base.path());
        let tmp = base.path().join("tmp");
        create_dir(&tmp).expect("tmp");
        let ports = || free_ports::<3>();

        let error = ControlPlane::start_with(&assets, &[], &tmp, false, ports)
            .await
            .err()
            .expect("the start fails");
        let Error::ProcessExited {
            name,
            log,
            log_tail,
            log_removed,
            ..
        } = &error
        else {
            panic!("expected ProcessExited, got {error:?}");
        };
        assert_eq!(*name, "etcd");
        assert!(log_tail.contains("the disk is on fire"), "{log_tail}");
        assert!(*log_removed && !log.exists());
        let text = error.to_string();
        assert!(
            text.contains("removed since") && text.contains("WINDLASS_TESTENV_KEEP=1"),
            "{text}"
        );
        assert!(text.contains("the disk is on fire"), "{text}");
        assert_eq!(
            entries(&tmp),
            Vec::<PathBuf>::new(),
            "directory left behind"
        );
        no_process_mentions(&tmp).await;

        // Asked to keep it: the directory and the log stay, and the error points at them.
        let error = ControlPlane::start_with(&assets, &[], &tmp, true, ports)
            .await
            .err()
            .expect("the start fails");
        let Error::ProcessExited {
            log, log_removed, ..
        } = &error
        else {
            panic!("expected ProcessExited, got {error:?}");
        };
        assert!(!*log_removed);
        let kept = std::fs::read_to_string(log).expect("the log is kept");
        assert!(kept.contains("the disk is on fire"), "{kept}");
        assert!(!error.to_string().contains("removed since"), "{error}");
        assert_eq!(entries(&tmp).len(), 1);
        assert!(log.starts_with(&tmp));
        // Nothing is left that would remove it later.
        no_process_mentions(&tmp).await;
    }

    #[test]
    fn the_insecure_port_flag_is_found_although_help_hides_it() {
        let assets = Assets::locate().expect("control plane binaries (see the README)");
        let version = std::process::Command::new(&assets.kube_apiserver)
            .arg("--version")
            .output()
            .expect("kube-apiserver --version");
        let version = String::from_utf8_lossy(&version.stdout).into_owned();
        let minor: u32 = version
            .trim()
            .strip_prefix("Kubernetes v1.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("unexpected version {version:?}"));
        assert_eq!(
            accepts_flag(&assets.kube_apiserver, "--insecure-port=0"),
            minor < 24,
            "{version}"
        );
        assert!(!accepts_flag(
            &assets.kube_apiserver,
            "--windlass-no-such-flag=0"
        ));
        assert!(!accepts_flag(
            Path::new("/nonexistent/kube-apiserver"),
            "--x"
        ));
    }

    #[tokio::test]
    async fn a_start_that_loses_a_port_race_is_retried_with_fresh_ports() {
        let assets = Assets::locate().expect("control plane binaries (see the README)");
        let base = scratch();
        // Another process "took" the port chosen for etcd between choosing and binding.
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let taken_port = taken.local_addr().expect("addr").port();
        let mut calls = 0;
        let cp = ControlPlane::start_with(&assets, &[], base.path(), false, || {
            calls += 1;
            if calls == 1 {
                let [peer, secure] = free_ports::<2>()?;
                Ok([taken_port, peer, secure])
            } else {
                free_ports::<3>()
            }
        })
        .await;
        let mut cp = cp.expect("the second attempt starts");
        assert_eq!(calls, 2, "one retry");
        cp.check_running().expect("all processes run");
        assert_eq!(entries(base.path()), vec![cp.dir().to_path_buf()]);
        let apiserver = cp
            .processes()
            .into_iter()
            .find(|p| p.name == "kube-apiserver")
            .expect("an apiserver");
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", apiserver.pid)).expect("cmdline");
        assert_eq!(
            String::from_utf8_lossy(&cmdline).contains("--insecure-port=0"),
            accepts_flag(&assets.kube_apiserver, "--insecure-port=0")
        );
        drop(cp);
        assert_eq!(entries(base.path()), Vec::<PathBuf>::new());
        drop(taken);
    }

    #[tokio::test]
    async fn ports_that_stay_taken_exhaust_the_attempts() {
        let assets = Assets::locate().expect("control plane binaries (see the README)");
        let base = scratch();
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let taken_port = taken.local_addr().expect("addr").port();
        let mut calls = 0;
        let result = ControlPlane::start_with(&assets, &[], base.path(), false, || {
            calls += 1;
            let [peer, secure] = free_ports::<2>()?;
            Ok([taken_port, peer, secure])
        })
        .await;
        match result {
            Err(Error::PortsExhausted { attempts, last }) => {
                assert_eq!(attempts, PORT_ATTEMPTS);
                assert!(
                    matches!(*last, Error::ProcessExited { name: "etcd", .. }),
                    "{last:?}"
                );
            }
            Err(other) => panic!("expected PortsExhausted, got {other:?}"),
            Ok(_) => panic!("started on a taken port"),
        }
        assert_eq!(calls, PORT_ATTEMPTS);
        assert_eq!(entries(base.path()), Vec::<PathBuf>::new());
        no_process_mentions(base.path()).await;
        drop(taken);
    }
}
