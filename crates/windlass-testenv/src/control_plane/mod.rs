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
//!
//! # Layout
//!
//! This module holds the control plane's handle ([`ControlPlane`]), the guard that cleans up
//! after it, and the retry of a start that lost a port race; `launch.rs` starts the three
//! processes and waits for each, and `files.rs` writes what they are configured with (tokens,
//! keys, kubeconfigs).

use std::fmt::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Client;

use crate::assets::Assets;
use crate::error::{Error, Result};
use crate::process::{ManagedProcess, Watchdog};

mod files;
mod launch;

pub(crate) use files::random_bytes;
use launch::launch;

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

/// Whether a start failed because another process took one of its ports.
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

#[cfg(test)]
mod tests;
