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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Binding, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Node, NodeAddress, NodeCondition,
    NodeSelectorRequirement, NodeSelectorTerm, NodeStatus, NodeSystemInfo, ObjectReference, Pod,
    PodCondition, PodIP, PodStatus, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};

/// Label every simulated Node carries (value `"true"`).
pub const SIMULATED_NODE_LABEL: &str = "testenv.windlass.dev/simulated";
/// Pod annotation: `"true"` makes the Pod's containers fail (rule 5).
pub const FAIL_ANNOTATION: &str = "testenv.windlass.dev/fail";
/// Pod annotation: `"true"` keeps a `Never`/`OnFailure` Pod running instead of succeeding (rule 4).
pub const KEEP_RUNNING_ANNOTATION: &str = "testenv.windlass.dev/keep-running";
/// Pod annotation: a duration (`"3s"`, `"500ms"`, `"2m"`, or seconds) the Pod runs before it is
/// ready, measured from `status.startTime` (whole seconds); an invalid value is ignored (rule 3).
pub const READY_AFTER_ANNOTATION: &str = "testenv.windlass.dev/ready-after";

const FIELD_MANAGER: &str = "windlass-node-simulator";
const MAX_PODS: usize = 110;
const LEASE_RENEW: Duration = Duration::from_secs(10);
const LEASE_DURATION_SECONDS: i32 = 40;

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

async fn register_node(api: &Api<Node>, name: &str) -> Result<()> {
    let node = simulated_node(name);
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => Ok(()),
        // Left over from an earlier simulator on this cluster: take it over.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let patch = serde_json::json!({ "status": node.status });
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| {
                    Error::kube(format!("updating the status of simulated node {name}"), e)
                })
        }
        Err(e) => Err(Error::kube(format!("registering simulated node {name}"), e)),
    }
}

fn simulated_node(name: &str) -> Node {
    let now = Time(jiff::Timestamp::now());
    let quantity = |s: &str| Quantity(s.to_string());
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", "32"),
        ("memory", "256Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "1Ti"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), quantity(v)))
    .collect();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [
                    ("kubernetes.io/hostname", name),
                    ("kubernetes.io/os", "linux"),
                    ("kubernetes.io/arch", kubernetes_arch()),
                    (SIMULATED_NODE_LABEL, "true"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![
                condition(
                    "Ready",
                    "True",
                    "KubeletReady",
                    "windlass node simulator is posting ready status",
                ),
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "simulated",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "simulated",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "simulated",
                ),
            ]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".to_string(),
                    address: "127.0.0.1".to_string(),
                },
                NodeAddress {
                    type_: "Hostname".to_string(),
                    address: name.to_string(),
                },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: kubernetes_arch().to_string(),
                operating_system: "linux".to_string(),
                os_image: "windlass node simulator".to_string(),
                kernel_version: "simulated".to_string(),
                container_runtime_version: "windlass-sim://0.1".to_string(),
                kubelet_version: "v0.0.0-windlass-sim".to_string(),
                kube_proxy_version: "v0.0.0-windlass-sim".to_string(),
                machine_id: name.to_string(),
                system_uuid: name.to_string(),
                boot_id: name.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// This machine's architecture as Kubernetes names it: Go's `GOARCH` (`amd64`, `arm64`, …), which
/// is what the `kubernetes.io/arch` label and `nodeInfo.architecture` carry on real nodes and what
/// Pods select on. Rust's names (`x86_64`, `aarch64`, …) differ for most architectures.
pub(crate) fn kubernetes_arch() -> &'static str {
    go_arch(std::env::consts::ARCH, cfg!(target_endian = "little"))
}

/// Go's `GOARCH` for Rust's `target_arch` name (unknown names are passed through).
fn go_arch(rust_arch: &'static str, little_endian: bool) -> &'static str {
    match (rust_arch, little_endian) {
        ("x86_64", _) => "amd64",
        ("x86", _) => "386",
        ("aarch64", true) => "arm64",
        ("aarch64", false) => "arm64be",
        ("arm", _) => "arm",
        ("powerpc64", true) => "ppc64le",
        ("powerpc64", false) => "ppc64",
        ("powerpc", _) => "ppc",
        ("s390x", _) => "s390x",
        ("riscv64", _) => "riscv64",
        ("loongarch64", _) => "loong64",
        ("mips64", true) => "mips64le",
        ("mips64", false) => "mips64",
        ("mips", true) => "mipsle",
        ("mips", false) => "mips",
        ("sparc64", _) => "sparc64",
        ("wasm32", _) => "wasm",
        (other, _) => other,
    }
}

async fn renew_leases(client: Client, node_names: Vec<String>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    let mut uids: BTreeMap<String, String> = BTreeMap::new();
    loop {
        for name in &node_names {
            if !uids.contains_key(name)
                && let Ok(node) = nodes.get(name).await
                && let Some(uid) = node.metadata.uid
            {
                uids.insert(name.clone(), uid);
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("kube-node-lease".to_string()),
                    // As a kubelet does: the Lease goes away with its Node.
                    owner_references: uids.get(name).map(|uid| {
                        vec![OwnerReference {
                            api_version: "v1".to_string(),
                            kind: "Node".to_string(),
                            name: name.clone(),
                            uid: uid.clone(),
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.clone()),
                    lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                    renew_time: Some(MicroTime(jiff::Timestamp::now())),
                    ..Default::default()
                }),
            };
            let params = PatchParams::apply(FIELD_MANAGER).force();
            if let Err(e) = leases.patch(name, &params, &Patch::Apply(&lease)).await {
                tracing::debug!("renewing the lease of simulated node {name}: {e}");
            }
        }
        tokio::time::sleep(LEASE_RENEW).await;
    }
}

fn error_policy(_pod: Arc<Pod>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    tracing::debug!("node simulator: {error}; retrying");
    Action::requeue(Duration::from_millis(500))
}

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
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: pod.metadata.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        return match api.delete(&name, &params).await {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                Ok(Action::await_change())
            }
            Err(e) => Err(ReconcileError(format!(
                "deleting terminating pod {namespace}/{name}: {e}"
            ))),
        };
    }

    let (status, requeue) = match next_status(&pod, &ctx) {
        Next::Write(status, requeue) => (status, requeue),
        Next::Wait(after) => return Ok(Action::requeue(after)),
        Next::Nothing => return Ok(Action::await_change()),
    };
    let patch = serde_json::json!({ "status": status });
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(requeue.map_or_else(Action::await_change, Action::requeue)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError(format!(
            "updating the status of pod {namespace}/{name}: {e}"
        ))),
    }
}

async fn schedule(pod: &Pod, api: &Api<Pod>, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = pod.name_any();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let chosen = {
        // Like the real scheduler's assume cache: a binding we just made is not in the Pod
        // store until its watch event arrives, so count it ourselves, or a burst of replicas
        // would all see empty Nodes and land on the same one.
        let pods = ctx.pods.state();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut live = std::collections::HashSet::new();
        let mut bound = std::collections::HashSet::new();
        for p in &pods {
            let p_uid = p.metadata.uid.clone().unwrap_or_default();
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                bound.insert(p_uid.clone());
                if !is_terminal(p) {
                    *counts.entry(node).or_default() += 1;
                }
            }
            live.insert(p_uid);
        }
        let mut assumed = ctx
            .assumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assumed.retain(|uid, _| live.contains(uid) && !bound.contains(uid));
        for node in assumed.values() {
            *counts.entry(node.clone()).or_default() += 1;
        }
        let mut candidates: Vec<(usize, String)> = ctx
            .nodes
            .state()
            .iter()
            .filter(|node| node_fits(pod, node))
            .map(|node| {
                let node_name = node.name_any();
                (counts.get(&node_name).copied().unwrap_or(0), node_name)
            })
            .filter(|(count, _)| *count < MAX_PODS)
            .collect();
        candidates.sort();
        let chosen = candidates.into_iter().next();
        if let Some((_, node)) = &chosen {
            assumed.insert(uid.clone(), node.clone());
        }
        chosen
    };
    let Some((_, node_name)) = chosen else {
        let already = pod_condition(pod, "PodScheduled").is_some_and(|c| c.status == "False");
        if !already {
            let condition = PodCondition {
                type_: "PodScheduled".to_string(),
                status: "False".to_string(),
                reason: Some("Unschedulable".to_string()),
                message: Some(format!(
                    "0/{} simulated nodes are available (node selector, affinity, taints or pod count)",
                    ctx.nodes.state().len()
                )),
                last_transition_time: Some(Time(jiff::Timestamp::now())),
                ..Default::default()
            };
            let patch = serde_json::json!({ "status": { "conditions": [condition] } });
            let _ = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await;
        }
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: pod.namespace(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node_name.clone()),
            ..Default::default()
        },
    };
    let result = api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await;
    if result.is_err() {
        ctx.assumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&uid);
    }
    match result {
        Ok(_) => Ok(Action::await_change()),
        // Bound meanwhile, or gone.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError(format!(
            "binding pod {}/{name} to {node_name}: {e}",
            pod.namespace().unwrap_or_default()
        ))),
    }
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(|v| v.trim().to_string())
}

fn is_true(pod: &Pod, key: &str) -> bool {
    annotation(pod, key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// `"3s"`, `"500ms"`, `"2m"`, or a number of seconds; `None` for anything else, including
/// negative values and values too large for a [`Duration`].
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return None,
    };
    // `try_`: a value too large for a `Duration` ("99999999999999999999") is invalid, not a
    // panic in the Pod controller.
    if seconds.is_finite() && seconds >= 0.0 {
        Duration::try_from_secs_f64(seconds).ok()
    } else {
        None
    }
}

/// Longest requeue the simulator asks for: a very long `ready-after` is re-checked now and then
/// rather than handed to the controller's timer as one huge deadline.
const MAX_REQUEUE: Duration = Duration::from_secs(3600);

/// What the simulated kubelet does next with a Pod on its Node.
enum Next {
    /// Write this status, then look again after the duration, if any.
    Write(Box<PodStatus>, Option<Duration>),
    /// Nothing to write yet; look again after the duration.
    Wait(Duration),
    /// The Pod stays as it is until it changes.
    Nothing,
}

/// The status the Pod moves to next (rules 3-5).
fn next_status(pod: &Pod, ctx: &Context) -> Next {
    let Some(spec) = pod.spec.as_ref() else {
        return Next::Nothing;
    };
    let current = pod.status.clone().unwrap_or_default();
    let phase = current.phase.as_deref().unwrap_or("Pending");
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let fail = is_true(pod, FAIL_ANNOTATION);
    let now = jiff::Timestamp::now();

    let ready_delay = annotation(pod, READY_AFTER_ANNOTATION)
        .and_then(|v| parse_duration(&v))
        .unwrap_or_default();
    match phase {
        "Pending" => {
            let n = ctx.next_ip.fetch_add(1, Ordering::Relaxed);
            let ip = format!("10.244.{}.{}", (n / 250) % 250, n % 250 + 2);
            let start = Time(now);
            let outcome = if fail && restart_policy == "Never" {
                Outcome::Failed
            } else if fail {
                Outcome::CrashLooping
            } else if ready_delay.is_zero() {
                Outcome::Ready
            } else {
                Outcome::RunningNotReady
            };
            let requeue =
                (outcome == Outcome::RunningNotReady).then_some(ready_delay.min(MAX_REQUEUE));
            Next::Write(build_status(pod, outcome, &start, Some(ip)), requeue)
        }
        "Running" => {
            let start = current.start_time.clone().unwrap_or(Time(now));
            if fail {
                return Next::Nothing;
            }
            let ready = pod_condition(pod, "Ready").is_some_and(|c| c.status == "True");
            if !ready {
                let elapsed = now.duration_since(start.0);
                let elapsed = Duration::try_from(elapsed).unwrap_or_default();
                if elapsed < ready_delay {
                    return Next::Wait((ready_delay - elapsed).min(MAX_REQUEUE));
                }
                return Next::Write(
                    build_status(pod, Outcome::Ready, &start, current.pod_ip.clone()),
                    None,
                );
            }
            if restart_policy != "Always" && !is_true(pod, KEEP_RUNNING_ANNOTATION) {
                return Next::Write(
                    build_status(pod, Outcome::Succeeded, &start, current.pod_ip.clone()),
                    None,
                );
            }
            Next::Nothing
        }
        _ => Next::Nothing,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    RunningNotReady,
    Ready,
    CrashLooping,
    Succeeded,
    Failed,
}

fn build_status(
    pod: &Pod,
    outcome: Outcome,
    start: &Time,
    pod_ip: Option<String>,
) -> Box<PodStatus> {
    let now = Time(jiff::Timestamp::now());
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let container_state = |exit_code: i32| -> (ContainerState, Option<ContainerState>, i32, bool) {
        match outcome {
            Outcome::RunningNotReady | Outcome::Ready => (
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(start.clone()),
                    }),
                    ..Default::default()
                },
                None,
                0,
                outcome == Outcome::Ready,
            ),
            Outcome::CrashLooping => (
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("CrashLoopBackOff".to_string()),
                        message: Some(format!("simulated failure ({FAIL_ANNOTATION})")),
                    }),
                    ..Default::default()
                },
                Some(terminated(1, "Error", start, &now)),
                1,
                false,
            ),
            Outcome::Succeeded => (
                terminated(exit_code, "Completed", start, &now),
                None,
                0,
                false,
            ),
            Outcome::Failed => (terminated(1, "Error", start, &now), None, 0, false),
        }
    };
    let statuses = spec
        .containers
        .iter()
        .map(|c| {
            let (state, last_state, restart_count, ready) = container_state(0);
            ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                image_id: format!("windlass-sim://{}", c.image.clone().unwrap_or_default()),
                container_id: Some(format!("windlass-sim://{uid}/{}", c.name)),
                ready,
                restart_count,
                started: Some(matches!(outcome, Outcome::Ready | Outcome::RunningNotReady)),
                state: Some(state),
                last_state,
                ..Default::default()
            }
        })
        .collect();
    let init_statuses: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: format!("windlass-sim://{}", c.image.clone().unwrap_or_default()),
            container_id: Some(format!("windlass-sim://{uid}/{}", c.name)),
            ready: true,
            restart_count: 0,
            started: Some(false),
            state: Some(terminated(0, "Completed", start, start)),
            ..Default::default()
        })
        .collect();
    let ready = outcome == Outcome::Ready;
    let not_ready_reason = match outcome {
        Outcome::Succeeded => "PodCompleted",
        Outcome::Failed => "PodFailed",
        _ => "ContainersNotReady",
    };
    let condition = |type_: &str, ok: bool| PodCondition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: (!ok).then(|| not_ready_reason.to_string()),
        last_transition_time: Some(now.clone()),
        last_probe_time: None,
        ..Default::default()
    };
    let phase = match outcome {
        Outcome::Succeeded => "Succeeded",
        Outcome::Failed => "Failed",
        _ => "Running",
    };
    Box::new(PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(vec![
            condition("Initialized", true),
            condition("Ready", ready),
            condition("ContainersReady", ready),
            condition("PodScheduled", true),
        ]),
        host_ip: Some("127.0.0.1".to_string()),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: Some(start.clone()),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ..Default::default()
    })
}

fn terminated(exit_code: i32, reason: &str, start: &Time, end: &Time) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.to_string()),
            started_at: Some(start.clone()),
            finished_at: Some(end.clone()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

/// Scheduling predicate of rule 2.
fn node_fits(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let node_name = node.name_any();
    if node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
        && !tolerates(
            spec.tolerations.as_deref(),
            &Taint {
                key: "node.kubernetes.io/unschedulable".to_string(),
                effect: "NoSchedule".to_string(),
                ..Default::default()
            },
        )
    {
        return false;
    }
    if let Some(selector) = &spec.node_selector
        && !selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice());
    if let Some(terms) = terms
        && !terms
            .iter()
            .any(|term| term_matches(term, &labels, &node_name))
    {
        return false;
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| tolerates(spec.tolerations.as_deref(), t))
}

fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        // An empty term matches nothing, as in the scheduler.
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(node_name)))
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x)
        }
        "Lt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x)
        }
        _ => false,
    }
}

fn tolerates(tolerations: Option<&[Toleration]>, taint: &Taint) -> bool {
    tolerations.unwrap_or_default().iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or_default();
        let operator = t.operator.as_deref().unwrap_or("Equal");
        match operator {
            "Exists" => effect_ok && (key.is_empty() || key == taint.key),
            _ => {
                effect_ok
                    && key == taint.key
                    && t.value.as_deref().unwrap_or_default()
                        == taint.value.as_deref().unwrap_or_default()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_have_their_go_names() {
        assert_eq!(go_arch("x86_64", true), "amd64");
        assert_eq!(go_arch("aarch64", true), "arm64");
        assert_eq!(go_arch("x86", true), "386");
        assert_eq!(go_arch("arm", true), "arm");
        assert_eq!(go_arch("powerpc64", true), "ppc64le");
        assert_eq!(go_arch("powerpc64", false), "ppc64");
        assert_eq!(go_arch("s390x", false), "s390x");
        assert_eq!(go_arch("riscv64", true), "riscv64");
        assert_eq!(go_arch("loongarch64", true), "loong64");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(kubernetes_arch(), "amd64");
        }
        let node = simulated_node("n-1");
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("kubernetes.io/arch").map(String::as_str),
            Some(kubernetes_arch())
        );
        assert_eq!(
            node.status
                .and_then(|s| s.node_info)
                .map(|i| i.architecture)
                .as_deref(),
            Some(kubernetes_arch())
        );
    }

    #[tokio::test]
    async fn a_stopped_task_is_reported_with_its_panic_message() {
        let mut simulator = NodeSimulator {
            node_names: Vec::new(),
            tasks: vec![
                SimulatorTask::spawn("Lease renewal", std::future::pending()),
                SimulatorTask::spawn("Pod controller", async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    panic!("reconciler blew up on pod x");
                }),
            ],
        };
        assert!(simulator.check_running().is_ok(), "both tasks still run");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let error = loop {
            match simulator.check_running() {
                Err(e) => break e,
                Ok(()) if tokio::time::Instant::now() > deadline => {
                    panic!("the panicked task was not noticed")
                }
                Ok(()) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        match &error {
            Error::SimulatorStopped { task, reason } => {
                assert_eq!(*task, "Pod controller");
                assert!(reason.contains("reconciler blew up on pod x"), "{reason}");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let text = error.to_string();
        assert!(
            text.contains("Pod controller") && text.contains("panicked"),
            "{text}"
        );
        // Reported again, not only once (the handle is not polled twice).
        assert!(matches!(
            simulator.check_running(),
            Err(Error::SimulatorStopped {
                task: "Pod controller",
                ..
            })
        ));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("3s"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(parse_duration("-1s"), None);
        // Too large for a Duration: invalid, not a panic.
        assert_eq!(parse_duration("99999999999999999999"), None);
        assert_eq!(parse_duration("99999999999999999999m"), None);
        assert_eq!(parse_duration("1e400"), None);
        assert_eq!(parse_duration("."), None);
        assert_eq!(parse_duration(""), None);
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn toleration(
        key: Option<&str>,
        operator: &str,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: Some(operator.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn tolerations_follow_the_scheduler_rules() {
        let t = taint("dedicated", Some("db"), "NoSchedule");
        assert!(!tolerates(None, &t));
        assert!(tolerates(
            Some(&[toleration(Some("dedicated"), "Equal", Some("db"), None)]),
            &t
        ));
        assert!(!tolerates(
            Some(&[toleration(Some("dedicated"), "Equal", Some("web"), None)]),
            &t
        ));
        assert!(tolerates(
            Some(&[toleration(
                Some("dedicated"),
                "Exists",
                None,
                Some("NoSchedule")
            )]),
            &t
        ));
        assert!(!tolerates(
            Some(&[toleration(
                Some("dedicated"),
                "Exists",
                None,
                Some("NoExecute")
            )]),
            &t
        ));
        assert!(tolerates(
            Some(&[toleration(None, "Exists", None, None)]),
            &t
        ));
    }

    #[test]
    fn node_affinity_by_field_pins_daemonset_pods() {
        let node = simulated_node("n-1");
        let term = |name: &str| NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![name.into()]),
            }]),
            ..Default::default()
        };
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert!(term_matches(&term("n-1"), &labels, "n-1"));
        assert!(!term_matches(&term("n-2"), &labels, "n-1"));
        assert!(!term_matches(&NodeSelectorTerm::default(), &labels, "n-1"));
    }
}
