//! A node simulator: simulated Nodes, a scheduler that binds Pods to them, and a "kubelet" that
//! drives Pod status, so Deployments, StatefulSets, DaemonSets and Jobs reach their
//! ready/complete states on a control plane that has no real nodes.
//!
//! Why hand-written: kwok does this in Go and would be a second toolchain and binary to
//! provision; what the tests need is small and is built here on kube-runtime (a [`Controller`]
//! over Pods and a reflector over Nodes), so it runs in-process and starts in milliseconds.
//!
//! # Rules
//!
//! 1. **Nodes.** `nodes` Nodes named `{prefix}-{i}` are registered Ready with generous
//!    capacity (32 CPUs, 256Gi, 110 pods), the label [`SIMULATED_NODE_LABEL`]`=true` and the
//!    well-known labels `kubernetes.io/hostname`, `kubernetes.io/os=linux` and
//!    `kubernetes.io/arch` with this machine's architecture in Go's naming (`amd64`, `arm64`,
//!    …, as on real nodes; also in `nodeInfo.architecture`). Their Leases in `kube-node-lease` are renewed every 10 s, so the node lifecycle controller
//!    keeps them Ready.
//! 2. **Scheduling.** A Pod without `spec.nodeName` whose `schedulerName` is unset or
//!    `default-scheduler` is bound to the feasible simulated Node with the fewest Pods. Feasible
//!    means: not cordoned, `nodeSelector` matches, required node affinity matches (label
//!    expressions and `metadata.name` fields, which is how DaemonSet Pods are pinned), every
//!    NoSchedule/NoExecute taint tolerated, fewer than 110 Pods. No resource fit, no pod
//!    (anti-)affinity, no topology spread. Otherwise the Pod gets `PodScheduled=False`
//!    (`Unschedulable`) and is retried.
//! 3. **Running.** A Pod bound to a simulated Node goes from Pending to Running with every
//!    container running and ready, and `Ready=True` — in one status write, immediately;
//!    annotation [`READY_AFTER_ANNOTATION`] (`"3s"`, `"500ms"`, `"2m"`, `"2"`) delays readiness:
//!    the Pod is Running but not ready until the delay has passed since its `status.startTime`.
//!    The API server keeps that time with one-second resolution (fractions are cut off), so the
//!    Pod turns Ready up to a second *before* the delay is over; a delay under a second may have
//!    no visible effect. A value that is not such a duration — negative, malformed, or too large
//!    to represent — is ignored: the Pod is ready at once. Init containers are reported as
//!    completed.
//! 4. **Completion.** A running Pod whose `restartPolicy` is `Never` or `OnFailure` — the ones
//!    a Job makes — then succeeds (every container terminated with exit code 0, phase
//!    `Succeeded`). Annotation [`KEEP_RUNNING_ANNOTATION`]`: "true"` keeps it running instead.
//!    `restartPolicy: Always` Pods run until deleted, as with a kubelet.
//! 5. **Failure.** Annotation [`FAIL_ANNOTATION`]`: "true"` makes the containers fail with exit
//!    code 1: with `restartPolicy: Never` the Pod goes to phase `Failed`; otherwise it stays
//!    Running but not ready, containers waiting in `CrashLoopBackOff` with a restart count, as
//!    a crash-looping Pod looks on a real node.
//! 6. **Deletion.** A Pod on a simulated Node that gets a deletion timestamp is deleted at
//!    once (grace period 0), as a kubelet does after its containers stopped; without this,
//!    scale-downs and namespace deletions would hang.
//!
//! # Layout
//!
//! This module holds the simulator itself (its tasks, started and checked) and the Pod
//! controller's reconcile, which hands each Pod to one of:
//!
//! | file | what it does |
//! |---|---|
//! | `nodes.rs` | rule 1: registers the Nodes and renews their Leases |
//! | `scheduling.rs` | rule 2: binds a Pod to the feasible Node with the fewest Pods |
//! | `kubelet.rs` | rules 3-5: the status a Pod on a simulated Node moves to next |
//!
//! Rule 6 (deletion) is the reconcile's own.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};

mod kubelet;
mod nodes;
mod scheduling;

use kubelet::{Next, next_status};
use nodes::{has_taint, is_node_ready, register_node, renew_leases};
use scheduling::schedule;

/// Label every simulated Node carries (value `"true"`).
pub const SIMULATED_NODE_LABEL: &str = "testenv.windlass.dev/simulated";
/// Pod annotation: `"true"` makes the Pod's containers fail (rule 5).
pub const FAIL_ANNOTATION: &str = "testenv.windlass.dev/fail";
/// Pod annotation: `"true"` keeps a `Never`/`OnFailure` Pod running instead of succeeding (rule 4).
pub const KEEP_RUNNING_ANNOTATION: &str = "testenv.windlass.dev/keep-running";
/// Pod annotation: a duration (`"3s"`, `"500ms"`, `"2m"`, or seconds) the Pod runs before it is
/// ready, measured from `status.startTime` (whole seconds); an invalid value is ignored (rule 3).
pub const READY_AFTER_ANNOTATION: &str = "testenv.windlass.dev/ready-after";

/// How the simulator is set up.
#[derive(Debug, Clone)]
pub struct SimulatorConfig {
    /// How many Nodes to register (at least 1).
    pub nodes: usize,
    /// Node names are `{node_prefix}-{index}`.
    pub node_prefix: String,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        SimulatorConfig {
            nodes: 2,
            node_prefix: "windlass-node".to_string(),
        }
    }
}

/// A running node simulator (see the module docs for what it does). Dropping it stops it; the
/// Nodes it registered stay (they turn NotReady after the lease expires).
pub struct NodeSimulator {
    node_names: Vec<String>,
    tasks: Vec<SimulatorTask>,
}

/// One of the simulator's background tasks; each runs until the simulator is dropped.
struct SimulatorTask {
    /// What it does, for error messages: `Node watch`, `Lease renewal`, `Pod controller`.
    name: &'static str,
    handle: JoinHandle<()>,
    /// Why it ended, once seen (a finished `JoinHandle` must not be polled again).
    ended: Option<String>,
}

impl SimulatorTask {
    fn spawn(
        name: &'static str,
        future: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self {
        SimulatorTask {
            name,
            handle: tokio::spawn(future),
            ended: None,
        }
    }
}

impl Drop for NodeSimulator {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.handle.abort();
        }
    }
}

impl std::fmt::Debug for NodeSimulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSimulator")
            .field("node_names", &self.node_names)
            .finish()
    }
}

/// What the Pod controller's reconciles share.
struct Context {
    client: Client,
    /// Names of our Nodes, known before the Node store has synced.
    own_nodes: std::collections::HashSet<String>,
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// Pod uid → Node for bindings not yet seen in `pods`.
    assumed: std::sync::Mutex<std::collections::HashMap<String, String>>,
    next_ip: AtomicU32,
}

/// Why one reconcile of a Pod failed; it is retried.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ReconcileError(String);

impl NodeSimulator {
    /// Registers the Nodes and starts scheduling and running Pods on them, using `client` (it
    /// needs cluster-admin-like rights: Nodes, Leases, Pods, pods/binding, pods/status). The
    /// simulator's tasks run on the current tokio runtime.
    ///
    /// # Errors
    /// If the Nodes cannot be registered.
    pub async fn start(client: Client, config: SimulatorConfig) -> Result<NodeSimulator> {
        let node_names: Vec<String> = (0..config.nodes.max(1))
            .map(|i| format!("{}-{i}", config.node_prefix))
            .collect();
        let nodes_api: Api<Node> = Api::all(client.clone());
        for name in &node_names {
            register_node(&nodes_api, name).await?;
        }

        let (node_store, node_writer) = reflector::store();
        let node_watch = watcher(
            nodes_api,
            watcher::Config::default().labels(&format!("{SIMULATED_NODE_LABEL}=true")),
        )
        .default_backoff()
        .reflect(node_writer)
        .for_each(|_| futures::future::ready(()));
        let mut tasks = vec![SimulatorTask::spawn("Node watch", node_watch)];
        tasks.push(SimulatorTask::spawn(
            "Lease renewal",
            renew_leases(client.clone(), node_names.clone()),
        ));

        let controller =
            Controller::new(Api::<Pod>::all(client.clone()), watcher::Config::default())
                .with_config(kube::runtime::controller::Config::default().concurrency(16));
        let context = Arc::new(Context {
            own_nodes: node_names.iter().cloned().collect(),
            client,
            nodes: node_store,
            pods: controller.store(),
            assumed: Default::default(),
            next_ip: AtomicU32::new(0),
        });
        tasks.push(SimulatorTask::spawn(
            "Pod controller",
            controller
                .run(reconcile, error_policy, context)
                .for_each(|_| futures::future::ready(())),
        ));
        Ok(NodeSimulator { node_names, tasks })
    }

    /// Names of the simulated Nodes.
    pub fn node_names(&self) -> &[String] {
        &self.node_names
    }

    /// `Ok` while all of the simulator's tasks (Node watch, Lease renewal, Pod controller) run.
    /// Each is meant to run until the simulator is dropped, so one that ended has panicked —
    /// a bug in the simulator — and from then on Pods are no longer scheduled or driven (or the
    /// Nodes turn NotReady). [`TestEnv`](crate::TestEnv) checks this every second.
    ///
    /// # Errors
    /// [`Error::SimulatorStopped`] naming the first stopped task, with its panic message; the
    /// same error on every later call.
    pub fn check_running(&mut self) -> Result<()> {
        for task in &mut self.tasks {
            if task.ended.is_none() && task.handle.is_finished() {
                let reason = match futures::FutureExt::now_or_never(&mut task.handle) {
                    Some(Err(e)) if e.is_panic() => {
                        format!("it panicked: {}", panic_message(e.into_panic().as_ref()))
                    }
                    Some(Err(e)) => format!("it was stopped: {e}"),
                    Some(Ok(())) | None => "it ended".to_string(),
                };
                tracing::error!("node simulator: the {} task stopped: {reason}", task.name);
                task.ended = Some(reason);
            }
            if let Some(reason) = &task.ended {
                return Err(Error::SimulatorStopped {
                    task: task.name,
                    reason: reason.clone(),
                });
            }
        }
        Ok(())
    }

    /// Waits until every simulated Node is Ready and free of the `not-ready` taint the API server
    /// puts on new Nodes (the node lifecycle controller of kube-controller-manager removes it).
    ///
    /// # Errors
    /// [`Error::Timeout`] if that does not happen within `timeout`.
    pub async fn wait_ready(&self, client: Client, timeout: Duration) -> Result<()> {
        let api: Api<Node> = Api::all(client);
        let wait = async {
            for name in &self.node_names {
                kube::runtime::wait::await_condition(api.clone(), name, |node: Option<&Node>| {
                    node.is_some_and(|n| {
                        is_node_ready(n) && !has_taint(n, "node.kubernetes.io/not-ready")
                    })
                })
                .await
                .map_err(|e| Error::Timeout {
                    what: format!("simulated node {name}"),
                    after: timeout,
                    details: format!(": {e}"),
                })?;
            }
            Ok::<_, Error>(())
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| Error::Timeout {
                what: "the simulated nodes (Ready, without the node.kubernetes.io/not-ready taint)"
                    .to_string(),
                after: timeout,
                details: "\nIs kube-controller-manager's node lifecycle controller running?"
                    .to_string(),
            })?
    }
}

/// The message of a panic payload (`panic!` makes a `&str` or a `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".to_string())
}

/// Retries a failed reconcile of a Pod after half a second.
fn error_policy(_pod: Arc<Pod>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    tracing::debug!("node simulator: {error}; retrying");
    Action::requeue(Duration::from_millis(500))
}

/// One Pod's turn: schedule it if it is not bound (rule 2), delete it if it is terminating on
/// one of our Nodes (rule 6), else drive its status (rules 3-5).
async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let spec = match &pod.spec {
        Some(spec) => spec,
        None => return Ok(Action::await_change()),
    };
    let node_name = spec.node_name.clone().unwrap_or_default();

    if node_name.is_empty() {
        if pod.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let scheduler = spec
            .scheduler_name
            .as_deref()
            .unwrap_or("default-scheduler");
        if scheduler != "default-scheduler" {
            return Ok(Action::await_change());
        }
        return schedule(&pod, &api, &ctx).await;
    }

    // Only Pods on our Nodes are ours to run.
    if !ctx.own_nodes.contains(&node_name) {
        return Ok(Action::await_change());
    }

    if pod.metadata.deletion_timestamp.is_some() {
        return delete_terminating(&pod, &api, &namespace, &name).await;
    }
    drive_status(&pod, &api, &ctx, &namespace, &name).await
}

/// Deletes a terminating Pod at once (grace period 0), as a kubelet does once its containers
/// stopped: without it, scale-downs and namespace deletions would hang (rule 6).
async fn delete_terminating(
    pod: &Pod,
    api: &Api<Pod>,
    namespace: &str,
    name: &str,
) -> Result<Action, ReconcileError> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: pod.metadata.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError(format!(
            "deleting terminating pod {namespace}/{name}: {e}"
        ))),
    }
}

/// Writes the status the Pod moves to next, if any, and says when to look at it again.
async fn drive_status(
    pod: &Pod,
    api: &Api<Pod>,
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Action, ReconcileError> {
    let (status, requeue) = match next_status(pod, ctx) {
        Next::Write(status, requeue) => (status, requeue),
        Next::Wait(after) => return Ok(Action::requeue(after)),
        Next::Nothing => return Ok(Action::await_change()),
    };
    let patch = serde_json::json!({ "status": status });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(requeue.map_or_else(Action::await_change, Action::requeue)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError(format!(
            "updating the status of pod {namespace}/{name}: {e}"
        ))),
    }
}

/// The Pod's condition of type `type_`, if it has one.
fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests;
