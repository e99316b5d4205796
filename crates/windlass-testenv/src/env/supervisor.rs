//! An environment's thread: it starts the control plane and the simulator on a runtime of its
//! own, hands the handles their shared state, then supervises until the last handle is gone.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::oneshot;

use super::{BROKEN, Health, Inner, NEXT_ENVIRONMENT_ID, ProcessRequest, TestEnvBuilder};
use crate::assets::Assets;
use crate::control_plane::{ControlPlane, ProcessInfo};
use crate::error::{Error, Result};
use crate::simulator::NodeSimulator;

const NODES_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The body of an environment's thread: starts everything on a runtime of its own, hands the
/// handle's state to `ready` (or why it failed), then supervises until `shutdown`.
pub(super) fn run_environment(
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
