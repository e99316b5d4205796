//! The fleet benchmark (issue 8, "Speed and size"): N `Fleet` CRs created at once, each
//! owning five plain objects, reconciled by windlass's runtime in an operator process of
//! its own, against the real control plane of `windlass-testenv`.
//!
//! ```sh
//! cargo run -p fleet-bench --bin fleet                         # N = 100, 500, 1000; 5 min steady
//! WINDLASS_FLEET_NS=100 WINDLASS_FLEET_STEADY_SECS=60 cargo run -p fleet-bench --bin fleet
//! ```
//!
//! Settings (environment):
//!
//! - `WINDLASS_FLEET_NS`: the fleet sizes, comma-separated (default `100,500,1000`).
//! - `WINDLASS_FLEET_STEADY_SECS`: the steady-state window after all are Ready (default 300).
//! - `WINDLASS_FLEET_PERIOD`: the operator's `--sync-period` (default `30s`).
//! - `WINDLASS_FLEET_CEILING_IN_FLIGHT`: requests in flight when measuring the ceilings,
//!   comma-separated (default `16,64`); each ceiling is the fastest of them.
//! - `WINDLASS_FLEET_DEADLINE_SECS`: how long to wait for all CRs to be Ready (default 900).
//! - `WINDLASS_FLEET_LOG_LEVEL`: the operator's `--log-level` (default `info`); its log goes
//!   to `$TMPDIR/fleet-operator-<N>.log`.
//! - `WINDLASS_FLEET_REPLICAS`: after the single replica, the same fleet on this many sharded
//!   replicas (default 1: none); `WINDLASS_FLEET_SHARDS` (16), `WINDLASS_FLEET_LEASE_SECS`
//!   (10) and `WINDLASS_FLEET_SHARD_SELECTOR` (`label`, or `server` for the API server's
//!   shard selector: the control plane then starts with the `ShardedListAndWatch` gate). See
//!   `sharded.rs`.
//! - `WINDLASS_FLEET_SKIP`: phases to leave out, comma-separated: `ceiling` (the N × 6
//!   ConfigMap applies), `restarts`, `replay` (the same-writes ceiling); their figures then
//!   print as not measured (`inf×`). For sizes whose full run takes too long.
//! - `WINDLASS_FLEET_OPERATOR_WRAPPER`: a command the operator process runs under, split at
//!   spaces (e.g. `heaptrack -o /tmp/fleet-operator` for a heap profile; with several
//!   operators, a script running `heaptrack -o /tmp/fleet-operator.$$ "$@"`, one file
//!   each). The wrapper and the operator run in a process group of their own: the RSS and
//!   CPU figures are those of the group's process started as `<binary> operator run`
//!   (with the profiler's own overhead in it), the operator is stopped before its
//!   wrapper, and a SIGKILL reaches the whole group.
//!
//! Per N, each phase on a fresh control plane (`plane.rs` says why): first N × 6
//! server-side applies of ConfigMaps from one client, then the operator starts (this binary again, as
//! `fleet operator run …`, so its RSS is its own), the CRs are created with 16 creates in
//! flight, a watch on them notes when the last one is Ready (Ready=True for its current
//! generation), the operator's `/metrics` are scraped, and the steady window runs. The
//! clock starts at the first create. Last, the ceiling the targets use: everything the
//! operator wrote, and the CRs' creates, written again from one client into a fresh
//! control plane (`replay.rs` says why ConfigMap applies are not that ceiling). Before the
//! replay, the operator is started four more times over the fleet that is there, twice with
//! streaming lists and twice with paged ones (`KUBE_FEATURE_WatchListClient=false`), each until
//! its watches have listed and every CR is reconciled once; its start-up time, peak RSS,
//! LIST requests and the CPU of every process are printed side by side.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod plane;
mod replay;
mod sharded;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use fleet_bench::cpu::Cpu;
use fleet_bench::{Fleet, FleetController, FleetSpec, OBJECTS};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use plane::Plane;
use serde_json::json;
use windlass_testenv::TestEnv;

/// Writes per CR a rollout should need: each object once, and the status.
const WRITES_PER_CR: usize = OBJECTS + 1;

/// The verbs of `windlass_api_requests_total` that write.
fn write_verbs() -> Vec<&'static str> {
    windlass::cluster::Verb::ALL
        .into_iter()
        .filter(|v| v.is_mutating())
        .map(|v| v.as_str())
        .collect()
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "operator") {
        // The operator process: the windlass CLI over the bench controller.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let argv = std::iter::once("fleet-operator".into()).chain(std::env::args_os().skip(2));
        return runtime.block_on(windlass::cli::run(
            FleetController,
            argv.collect::<Vec<_>>(),
            windlass::cli::Output::stdout(),
        ));
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(bench());
    ExitCode::SUCCESS
}

/// The benchmark's settings, from the environment.
struct Settings {
    sizes: Vec<usize>,
    steady: Duration,
    period: String,
    ceiling_in_flight: Vec<usize>,
    deadline: Duration,
    /// The sharded run after the single replica's, if any.
    sharded: Option<sharded::ShardSettings>,
    /// The phases left out.
    skip: Vec<String>,
}

/// Create the N Fleet CRs `f00000`… in `fleets`' namespace, 16 creates in flight.
async fn create_fleet(fleets: &Api<Fleet>, n: usize) {
    stream::iter(0..n)
        .map(|i| {
            let fleets = fleets.clone();
            async move {
                let mut cr = Fleet::new(
                    &format!("f{i:05}"),
                    FleetSpec {
                        message: format!("member {i} of {n}"),
                    },
                );
                cr.metadata.namespace = None;
                fleets.create(&PostParams::default(), &cr).await
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("the CRs are created");
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn list(name: &str, default: &str) -> Vec<usize> {
    env_or(name, default)
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: `{n}` is not a number"))
        })
        .collect()
}

impl Settings {
    fn from_env() -> Self {
        let secs = |name: &str, default: &str| {
            Duration::from_secs(
                env_or(name, default)
                    .parse()
                    .unwrap_or_else(|_| panic!("{name} is not a number of seconds")),
            )
        };
        Settings {
            sizes: list("WINDLASS_FLEET_NS", "100,500,1000"),
            steady: secs("WINDLASS_FLEET_STEADY_SECS", "300"),
            period: env_or("WINDLASS_FLEET_PERIOD", "30s"),
            ceiling_in_flight: list("WINDLASS_FLEET_CEILING_IN_FLIGHT", "16,64"),
            deadline: secs("WINDLASS_FLEET_DEADLINE_SECS", "900"),
            sharded: sharded::ShardSettings::from_env(),
            skip: env_or("WINDLASS_FLEET_SKIP", "")
                .split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect(),
        }
    }

    /// Whether the phase `phase` is left out.
    fn skips(&self, phase: &str) -> bool {
        self.skip.iter().any(|p| p == phase)
    }
}

/// What one fleet size measured.
struct Run {
    n: usize,
    /// (requests in flight, time for N × 6 applies).
    ceilings: Vec<(usize, Duration)>,
    ready: Duration,
    rss_peak_kib: u64,
    rss_at_ready_kib: u64,
    /// The file-backed part of the operator's resident set (its code) when all were Ready.
    rss_file_at_ready_kib: u64,
    /// The operator's resident set before the first create (its baseline).
    rss_baseline_kib: u64,
    /// The operator's resident set at the end of the steady window.
    rss_steady_kib: u64,
    /// The objects and bytes of JSON text the watch caches held then.
    cache_steady: (f64, f64),
    /// From the operator start to all Ready.
    rollout: Scrape,
    /// The steady window.
    steady: Scrape,
    steady_window: Duration,
    queue_wait_p50: Option<f64>,
    queue_wait_p99: Option<f64>,
    /// CPU time of each process while the fastest ConfigMap ceiling ran.
    cpu_ceiling: Cpu,
    /// CPU time of each process from the first create to all Ready.
    cpu_rollout: Cpu,
    /// CPU time of each process during the steady window.
    cpu_steady: Cpu,
    /// The same-writes ceiling: the operator's writes replayed from one client
    /// ([`replay`]), how many requests were in flight and how long it took.
    replayed: (usize, Duration),
    /// What the replay wrote.
    replayed_writes: String,
    /// CPU time of each process during the replay.
    cpu_replay: Cpu,
    /// The operator started again over the fleet, once per way of listing.
    restarts: Vec<Restart>,
    /// The same fleet on sharded replicas, when asked for.
    sharded: Option<sharded::Sharded>,
}

/// The operator started over a fleet that is already there and Ready.
struct Restart {
    /// How its watches listed: `streaming` or `paged`.
    how: &'static str,
    /// From the process start until every watch has listed and every CR was reconciled once.
    started: Duration,
    /// Its peak RSS by then.
    rss_peak_kib: u64,
    /// Its requests by then.
    requests: Scrape,
    /// CPU time of each process by then.
    cpu: Cpu,
    /// One CR's spec changed while the operator works through the relist: how long until
    /// it was Ready for its new generation, and how many reconciles had ended when the
    /// change was made.
    spec_change: (Duration, f64),
}

impl Run {
    /// The time the API server needs for the operator's writes from one client: the
    /// ceiling the Ready time is judged against.
    fn ceiling(&self) -> Duration {
        self.replayed.1
    }

    /// The fastest of the N × 6 ConfigMap applies.
    fn configmap_ceiling(&self) -> Duration {
        self.ceilings
            .iter()
            .map(|(_, d)| *d)
            .min()
            .unwrap_or_default()
    }
}

async fn bench() {
    let settings = Settings::from_env();
    let started = Instant::now();
    let mut flags = Vec::new();
    if settings
        .sharded
        .as_ref()
        .is_some_and(|s| s.selector == "server")
    {
        flags.push("--feature-gates=ShardedListAndWatch=true".to_string());
    }
    let mut plane = Plane::start(flags).await;
    let mut runs = Vec::new();
    for &n in &settings.sizes {
        runs.push(run(&mut plane, &settings, n).await);
    }
    let (_, client) = plane.current();
    let server_version = client
        .apiserver_version()
        .await
        .map_or_else(|e| format!("of unknown version ({e})"), |v| v.git_version);
    print_report(&settings, &server_version, &runs);
    eprintln!("benchmark took {:.0} s", started.elapsed().as_secs_f64());
}

async fn run(plane: &mut Plane, settings: &Settings, n: usize) -> Run {
    eprintln!("── N = {n} ──");
    let mut ceilings = Vec::new();
    let mut cpu_ceiling = Cpu::default();
    if !settings.skips("ceiling") {
        for (round, &in_flight) in settings.ceiling_in_flight.iter().enumerate() {
            let (env, client, ns) = plane.namespace(&format!("ceiling-{n}-{in_flight}")).await;
            let before = Cpu::now(env, None);
            let took = ceiling(client, ns.name(), n * WRITES_PER_CR, in_flight, round).await;
            let cpu = Cpu::now(env, None).since(&before);
            if ceilings.iter().all(|(_, d): &(usize, Duration)| took < *d) {
                cpu_ceiling = cpu;
            }
            eprintln!(
                "ceiling: {} applies, {in_flight} in flight: {:.2} s ({:.0}/s)",
                n * WRITES_PER_CR,
                took.as_secs_f64(),
                (n * WRITES_PER_CR) as f64 / took.as_secs_f64()
            );
            ceilings.push((in_flight, took));
        }
    }
    let (env, client, ns) = plane.namespace(&format!("fleet-{n}")).await;
    let operator = Operator::start(env, ns.name(), &settings.period, &n.to_string(), &[]);
    operator.wait_ready(Duration::from_secs(60)).await;
    let at_start = operator.scrape().await;
    let rss_baseline_kib = operator.rss_kib();

    let fleets: Api<Fleet> = Api::namespaced(client.clone(), ns.name());
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(wait_all_ready(fleets.clone(), n, ready_tx));
    let cpu_before = Cpu::now(env, Some(operator.pid()));
    let clock = Instant::now();
    create_fleet(&fleets, n).await;
    eprintln!("created {n} CRs in {:.2} s", clock.elapsed().as_secs_f64());
    let ready = match tokio::time::timeout(settings.deadline, ready_rx).await {
        Ok(Ok(at)) => at.duration_since(clock),
        _ => panic!(
            "not all {n} CRs were Ready within {:?}; operator log: {}",
            settings.deadline,
            operator.log.display()
        ),
    };
    let cpu_rollout = Cpu::now(env, Some(operator.pid())).since(&cpu_before);
    watch.abort();
    eprintln!("all {n} Ready after {:.2} s", ready.as_secs_f64());
    let at_ready = operator.scrape().await;
    let rss_at_ready_kib = operator.peak_rss_kib();
    let rss_file_at_ready_kib = operator.rss_file_kib();

    // Let the owned-kind watches catch up with the last writes before the window opens.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_steady = operator.scrape().await;
    let cpu_before_steady = Cpu::now(env, Some(operator.pid()));
    eprintln!("steady window: {} s", settings.steady.as_secs());
    tokio::time::sleep(settings.steady).await;
    let cpu_steady = Cpu::now(env, Some(operator.pid())).since(&cpu_before_steady);
    let after_steady = operator.scrape().await;
    let rss_peak_kib = operator.peak_rss_kib();
    let rss_steady_kib = operator.rss_kib();
    let cache_steady = after_steady.cache();
    drop(operator);
    let mut restarts = Vec::new();
    // Each way twice, in turns, so that neither gains from coming second.
    for (how, switch) in [
        ("streaming", "true"),
        ("paged", "false"),
        ("paged", "false"),
        ("streaming", "true"),
    ] {
        if !settings.skips("restarts") {
            restarts.push(restart(env, ns.name(), settings, n, how, switch).await);
        }
    }

    let capture = replay::capture(client, ns.name()).await;
    let mut replayed = (0, Duration::MAX);
    let mut cpu_replay = Cpu::default();
    if settings.skips("replay") {
        replayed = (0, Duration::ZERO);
    }
    for &in_flight in settings
        .ceiling_in_flight
        .iter()
        .filter(|_| !settings.skips("replay"))
    {
        let (env, client, target) = plane.namespace(&format!("replay-{n}-{in_flight}")).await;
        let before = Cpu::now(env, None);
        let took = replay::replay(client, target.name(), &capture, in_flight).await;
        let cpu = Cpu::now(env, None).since(&before);
        eprintln!(
            "replay: {} writes ({}), {in_flight} in flight: {:.2} s",
            capture.writes(),
            capture.describe(),
            took.as_secs_f64()
        );
        if took < replayed.1 {
            replayed = (in_flight, took);
            cpu_replay = cpu;
        }
    }

    let sharded = match &settings.sharded {
        Some(shards) => Some(sharded::run(plane, settings, shards, n).await),
        None => None,
    };
    let rollout = at_ready.since(&at_start);
    let steady = after_steady.since(&before_steady);
    let (p50, p99) = (rollout.queue_wait(0.5), rollout.queue_wait(0.99));
    Run {
        n,
        ceilings,
        ready,
        rss_peak_kib,
        rss_at_ready_kib,
        rss_file_at_ready_kib,
        rss_baseline_kib,
        rss_steady_kib,
        cache_steady,
        rollout,
        steady,
        steady_window: settings.steady,
        queue_wait_p50: p50,
        queue_wait_p99: p99,
        cpu_ceiling,
        cpu_rollout,
        cpu_steady,
        replayed,
        replayed_writes: capture.describe(),
        cpu_replay,
        restarts,
        sharded,
    }
}

/// Start the operator over the `n` CRs of `ns`, listing `how` (client-go's switch set to
/// `switch`), and measure it until every watch has listed and every CR was reconciled once.
async fn restart(
    env: &TestEnv,
    ns: &str,
    settings: &Settings,
    n: usize,
    how: &'static str,
    switch: &str,
) -> Restart {
    let before = Cpu::now(env, None);
    let clock = Instant::now();
    let operator = Operator::start(
        env,
        ns,
        &settings.period,
        &format!("{n}-restart-{how}"),
        &[("KUBE_FEATURE_WatchListClient", switch)],
    );
    // The spec change during the relist: once the operator's cache holds every CR (its
    // list is in) and its reconciles of them are under way.
    let fleets: Api<Fleet> = Api::namespaced(env.client().expect("a client"), ns);
    let listed = format!("the operator restarted with {how} lists has listed the {n} CRs");
    let reconciled_at_change = {
        let deadline = Instant::now() + settings.deadline;
        loop {
            if let Some(s) = operator.scrape_opt().await
                && s.cached("Fleet") >= n as f64
            {
                break s.reconciles();
            }
            assert!(
                Instant::now() < deadline,
                "{listed}: not within {:?}",
                settings.deadline
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let spec_change = change_spec(&fleets, &format!("f{:05}", n - 1), how).await;
    eprintln!(
        "restart with {how} lists: a spec change made after {reconciled_at_change:.0} of {n} \
         reconciles was Ready after {:.2} s",
        spec_change.as_secs_f64()
    );
    let what =
        format!("the operator restarted with {how} lists has listed and reconciled all {n} CRs");
    windlass_testenv::eventually_within(&what, settings.deadline, || async {
        // The owned kinds' watches start with the first reconciles and make /readyz wait.
        operator
            .scrape_opt()
            .await
            .is_some_and(|s| s.reconciles() >= n as f64)
            && operator
                .http("/readyz")
                .await
                .is_some_and(|(code, _)| code == 200)
    })
    .await;
    let started = clock.elapsed();
    let cpu = Cpu::now(env, Some(operator.pid())).since(&before);
    let requests = operator.scrape().await;
    let rss_peak_kib = operator.peak_rss_kib();
    eprintln!(
        "restart with {how} lists: ready after {:.2} s, peak RSS {:.1} MiB, {:.0} LISTs",
        started.as_secs_f64(),
        rss_peak_kib as f64 / 1024.0,
        requests.requests(&["list"])
    );
    Restart {
        how,
        started,
        rss_peak_kib,
        requests,
        cpu,
        spec_change: (spec_change, reconciled_at_change),
    }
}

/// Change the spec of the CR `name` (a message naming `tag`) and wait until it is Ready
/// for the new generation; returns how long that took from the change's response.
async fn change_spec(fleets: &Api<Fleet>, name: &str, tag: &str) -> Duration {
    let patch = json!({"spec": {"message": format!("changed during a {tag} relist at {:?}", Instant::now())}});
    let changed = fleets
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the spec change is written");
    let clock = Instant::now();
    let generation = changed.metadata.generation;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(fleets.clone(), config).applied_objects());
    let deadline = Duration::from_secs(1800);
    let ready = tokio::time::timeout(deadline, async {
        while let Some(event) = events.next().await {
            if let Ok(cr) = event
                && cr.metadata.generation >= generation
                && cr.is_ready()
            {
                return;
            }
        }
    })
    .await;
    assert!(
        ready.is_ok(),
        "{name} was not Ready for its changed spec within {deadline:?}"
    );
    clock.elapsed()
}

/// `count` server-side applies of distinct ConfigMaps with `in_flight` at a time: the time
/// the API server needs to take that many writes from one client.
async fn ceiling(
    client: &kube::Client,
    ns: &str,
    count: usize,
    in_flight: usize,
    round: usize,
) -> Duration {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let params = PatchParams::apply("fleet-ceiling");
    let start = Instant::now();
    stream::iter(0..count)
        .map(|i| {
            let (cms, params) = (cms.clone(), params.clone());
            async move {
                let name = format!("c{round}-{i:05}");
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name}, "data": {"message": format!("ceiling {i}")}});
                cms.patch(&name, &params, &Patch::Apply(&cm)).await
            }
        })
        .buffer_unordered(in_flight.max(1))
        .try_collect::<Vec<_>>()
        .await
        .expect("the ceiling's applies succeed");
    start.elapsed()
}

/// Watch the namespace's CRs; send the moment all `n` are Ready.
async fn wait_all_ready(fleets: Api<Fleet>, n: usize, done: tokio::sync::oneshot::Sender<Instant>) {
    let mut ready = HashSet::new();
    let mut events = std::pin::pin!(watcher(fleets, watcher::Config::default()).applied_objects());
    while let Some(event) = events.next().await {
        let Ok(cr) = event else { continue };
        let name = cr.metadata.name.clone().unwrap_or_default();
        if cr.is_ready() {
            ready.insert(name);
        } else {
            ready.remove(&name);
        }
        if ready.len() == n {
            let _ = done.send(Instant::now());
            return;
        }
    }
}

/// The operator process, in a process group of its own with whatever wraps it
/// (`WINDLASS_FLEET_OPERATOR_WRAPPER`): a wrapper that does not `exec` it (heaptrack,
/// `perf record`) makes the operator a grandchild, so its figures are read from the
/// group's member running `operator run`, and signals go to the whole group.
struct Operator {
    child: Child,
    /// Where it serves `/metrics` and the probes, once it has logged it.
    address: std::sync::OnceLock<String>,
    log: PathBuf,
    /// SIGKILLed and reaped: its group id may be another's by now, so nothing more is
    /// signalled.
    reaped: bool,
}

impl Operator {
    /// Start the operator; `label` names its log file, `vars` are set in its environment.
    fn start(
        env: &TestEnv,
        namespace: &str,
        period: &str,
        label: &str,
        vars: &[(&str, &str)],
    ) -> Operator {
        Operator::start_with(env, namespace, period, label, vars, &[])
    }

    /// [`Operator::start`] with `extra` arguments after the others.
    fn start_with(
        env: &TestEnv,
        namespace: &str,
        period: &str,
        label: &str,
        vars: &[(&str, &str)],
        extra: &[String],
    ) -> Operator {
        let log = std::env::temp_dir().join(format!("fleet-operator-{label}.log"));
        let file = std::fs::File::create(&log).expect("the operator's log file");
        let exe = std::env::current_exe().expect("this binary's path");
        let wrapper = env_or("WINDLASS_FLEET_OPERATOR_WRAPPER", "");
        let mut wrapper = wrapper.split_whitespace();
        let mut command = match wrapper.next() {
            Some(program) => {
                let mut command = Command::new(program);
                command.args(wrapper).arg(exe);
                command
            }
            None => Command::new(exe),
        };
        let child = std::os::unix::process::CommandExt::process_group(&mut command, 0)
            .args([
                "operator",
                "run",
                "--watch-namespace",
                namespace,
                // Port 0: the operator logs the port it got (see `Operator::address`).
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--sync-period",
                period,
                "--log-level",
                // Whatever the level, the line saying where it serves (`Operator::address`).
                &format!(
                    "{},windlass::runtime::health=info",
                    env_or("WINDLASS_FLEET_LOG_LEVEL", "info")
                ),
            ])
            .args(extra)
            // The benchmark's own settings are not the operator's configuration, which
            // refuses WINDLASS_ variables it does not know.
            .env_clear()
            .envs(std::env::vars().filter(|(k, _)| !k.starts_with("WINDLASS_FLEET_")))
            .env("KUBECONFIG", env.kubeconfig_path())
            .envs(vars.iter().copied())
            .stdout(Stdio::from(file.try_clone().expect("the log file")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("the operator process starts");
        eprintln!("operator pid {}, log {}", child.id(), log.display());
        Operator {
            child,
            address: std::sync::OnceLock::new(),
            log,
            reaped: false,
        }
    }

    async fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self
                .http("/readyz")
                .await
                .is_some_and(|(code, _)| code == 200)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the operator is not ready (or has not logged where it serves); log: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn http(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = self.address()?;
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let code = response.split(' ').nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n")?.1.to_string();
        Some((code, body))
    }

    /// The address the operator serves `/metrics` and the probes on, from its log: it
    /// binds port 0 and logs the port it got (a port picked free here and passed on could
    /// be taken by any socket opened meanwhile). `None` until it has logged it.
    fn address(&self) -> Option<&str> {
        if let Some(address) = self.address.get() {
            return Some(address);
        }
        let log = std::fs::read_to_string(&self.log).ok()?;
        let found = log
            .lines()
            .filter(|line| line.contains("serving /metrics"))
            .find_map(|line| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix("addr="))
            })?
            .to_string();
        Some(self.address.get_or_init(|| found))
    }

    async fn scrape(&self) -> Scrape {
        let (code, body) = self.http("/metrics").await.expect("/metrics answers");
        assert_eq!(code, 200, "/metrics: {body}");
        Scrape::parse(&body)
    }

    /// [`Operator::scrape`], or `None` while `/metrics` does not answer yet.
    async fn scrape_opt(&self) -> Option<Scrape> {
        match self.http("/metrics").await {
            Some((200, body)) => Some(Scrape::parse(&body)),
            _ => None,
        }
    }

    /// `VmHWM` of the operator process: its peak resident set, in KiB.
    fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// `VmRSS` of the operator process: its resident set now, in KiB.
    fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// `RssFile` of the operator process: the file-backed part of its resident set now
    /// (the binary's code and read-only data, shared by every process that maps the same
    /// file), in KiB.
    fn rss_file_kib(&self) -> u64 {
        self.status_kib("RssFile:")
    }

    /// The pid of the operator itself: the member of its process group started as
    /// `<binary> operator run …`, or the process started if there is none (yet).
    fn pid(&self) -> u32 {
        let group = self.child.id();
        // `pgrp` is field 5 of proc(5).
        let in_group = |pid: u32| {
            fleet_bench::cpu::stat_fields(pid).and_then(|fields| fields.get(2)?.parse::<u32>().ok())
                == Some(group)
        };
        let runs_operator = |pid: u32| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                // The operator's own arguments, not a wrapper's that names them later.
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                args.get(1..3) == Some(&[&b"operator"[..], &b"run"[..]][..])
            })
        };
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| in_group(*pid) && runs_operator(*pid))
            .unwrap_or(group)
    }

    /// Send `signal` to the operator's process group.
    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, "--", &format!("-{}", self.child.id())])
            .status();
    }

    /// SIGKILL the operator (and its wrapper) and reap what was started.
    fn sigkill(&mut self) {
        if !self.reaped {
            self.signal("-KILL");
            let _ = self.child.wait();
            self.reaped = true;
        }
    }

    /// The field `field` of `/proc/<pid>/status` of the operator, in KiB.
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("/proc/<pid>/status of the operator");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/<pid>/status"))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // The operator first, so that a wrapper outlives it and finishes its work (a
        // profiler writing its data); the group only if that takes too long.
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(25);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.sigkill();
    }
}

/// The samples of one `/metrics` scrape: (name, labels) → value.
#[derive(Default, Clone)]
struct Scrape(BTreeMap<(String, BTreeMap<String, String>), f64>);

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut samples = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                .collect();
            samples.insert((name.to_string(), labels), value);
        }
        Scrape(samples)
    }

    /// The counters' growth from `earlier` (histogram buckets included).
    fn since(&self, earlier: &Scrape) -> Scrape {
        Scrape(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - earlier.0.get(k).copied().unwrap_or(0.0)))
                .collect(),
        )
    }

    /// These samples and `other`'s added up (the requests of several replicas).
    fn plus(&self, other: &Scrape) -> Scrape {
        let mut sum = self.0.clone();
        for (key, value) in &other.0 {
            *sum.entry(key.clone()).or_insert(0.0) += value;
        }
        Scrape(sum)
    }

    /// The sum of `name` over the samples whose labels pass `pick`.
    fn sum(&self, name: &str, pick: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
        self.0
            .iter()
            .filter(|((n, labels), _)| n == name && pick(labels))
            // A fold from +0.0: `sum` of no samples is -0.0, which prints as "-0".
            .fold(0.0, |total, (_, v)| total + v)
    }

    fn requests(&self, verbs: &[&str]) -> f64 {
        self.sum("windlass_api_requests_total", |l| {
            l.get("verb").is_some_and(|v| verbs.contains(&v.as_str()))
        })
    }

    /// Requests of `verbs` not answered 404 (Not Found).
    fn found(&self, verbs: &[&str]) -> f64 {
        self.sum("windlass_api_requests_total", |l| {
            l.get("verb").is_some_and(|v| verbs.contains(&v.as_str()))
                && l.get("code").is_none_or(|c| c != "404")
        })
    }

    /// Event creates: writes that are not the CR's objects or status.
    fn events(&self) -> f64 {
        self.sum("windlass_api_requests_total", |l| {
            l.get("resource").is_some_and(|r| r == "events")
        })
    }

    fn writes(&self) -> f64 {
        self.requests(&write_verbs())
    }

    /// Requests by verb and resource, for the verbs given.
    fn breakdown(&self, verbs: &[&str]) -> String {
        let mut rows: BTreeMap<String, f64> = BTreeMap::new();
        for ((name, labels), v) in &self.0 {
            if name != "windlass_api_requests_total" || *v == 0.0 {
                continue;
            }
            let verb = labels.get("verb").map_or("", String::as_str);
            if verbs.contains(&verb) {
                let key = format!(
                    "{verb} {} {}",
                    labels.get("resource").map_or("", String::as_str),
                    labels.get("code").map_or("", String::as_str)
                );
                *rows.entry(key).or_default() += v;
            }
        }
        rows.iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn reconciles(&self) -> f64 {
        self.sum("windlass_reconciles_total", |_| true)
    }

    /// The objects of `kind` the operator's watch caches hold.
    fn cached(&self, kind: &str) -> f64 {
        self.sum("windlass_cache_objects", |l| {
            l.get("kind").is_some_and(|k| k == kind)
        })
    }

    /// The objects and bytes of every kind the operator's watch caches hold.
    fn cache(&self) -> (f64, f64) {
        (
            self.sum("windlass_cache_objects", |_| true),
            self.sum("windlass_cache_bytes", |_| true),
        )
    }

    fn reconciles_by_outcome(&self) -> String {
        let mut rows: BTreeMap<String, f64> = BTreeMap::new();
        for ((name, labels), v) in &self.0 {
            if name == "windlass_reconciles_total" && *v > 0.0 {
                *rows
                    .entry(labels.get("outcome").cloned().unwrap_or_default())
                    .or_default() += v;
            }
        }
        rows.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The upper bound of the bucket of `windlass_queue_wait_seconds` that holds quantile
    /// `q` (what the histogram can tell; `None` if nothing waited).
    fn queue_wait(&self, q: f64) -> Option<f64> {
        let mut buckets: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter(|((n, _), _)| n == "windlass_queue_wait_seconds_bucket")
            .filter_map(|((_, labels), v)| {
                let le = labels.get("le")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, *v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        buckets
            .iter()
            .find(|(_, cumulative)| *cumulative >= q * total)
            .map(|(le, _)| *le)
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn bound(le: Option<f64>) -> String {
    match le {
        None => "–".into(),
        Some(le) if le.is_infinite() => "> 60 s".into(),
        Some(le) if le < 1.0 => format!("≤ {} ms", le * 1e3),
        Some(le) => format!("≤ {le} s"),
    }
}

/// The issue-21 figures of each run: one row per N.
fn print_scale(out: &mut String, runs: &[Run]) {
    let _ = writeln!(
        out,
        "\nScale (issue 21), 1 replica:\n\
         | N | ceiling | all Ready | Ready / ceiling | peak RSS | cached objects | bytes / cached object: text, RSS at steady, peak RSS | operator CPU / CR | requests / CR | steady: writes, reads | spec change during a relist (reconciles done of N at the change) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in runs {
        let n = r.n as f64;
        let (objects, bytes) = r.cache_steady;
        let per_object =
            |kib: u64| (kib.saturating_sub(r.rss_baseline_kib) * 1024) as f64 / objects.max(1.0);
        let changes = r
            .restarts
            .iter()
            .map(|x| {
                format!(
                    "{} {} ({:.0})",
                    x.how,
                    seconds(x.spec_change.0),
                    x.spec_change.1
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        // What kube-rs's client alone spent per CR replaying the same writes: the part of the
        // operator's CPU that is not windlass's.
        let operator = r.cpu_rollout.of("operator").as_secs_f64() * 1e3 / n;
        let client = r.cpu_replay.of("bench client").as_secs_f64() * 1e3 / n;
        let against_client = match client > 0.0 {
            true => format!(
                " ({:.2}× the replay client's {client:.2} ms)",
                operator / client
            ),
            false => String::new(),
        };
        // A steady window's reconciles are periodic ones that find nothing to do: their cost
        // prices the reconciles of the rollout beyond one per CR (the sync period coming round
        // for CRs Ready early), which are no part of rolling a CR out.
        let steady_reconciles = r.steady.reconciles();
        let periodic = match steady_reconciles > 0.0 {
            true => {
                let each = r.cpu_steady.of("operator").as_secs_f64() / steady_reconciles;
                let beyond = (r.rollout.reconciles() - n).max(0.0);
                format!(
                    "; {:.0} µs a periodic reconcile, {:.2} ms / CR less {beyond:.0} reconciles beyond one per CR at that",
                    each * 1e6,
                    operator - beyond * each * 1e3 / n
                )
            }
            false => String::new(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2}× | {:.1} MiB (baseline {:.1}) | {objects:.0} | {:.0} B, {:.0} B, {:.0} B | {:.2} ms{against_client}{periodic} | {:.2} | {:.0}, {:.0} | {changes} |",
            r.n,
            seconds(r.ceiling()),
            seconds(r.ready),
            r.ready.as_secs_f64() / r.ceiling().as_secs_f64(),
            r.rss_peak_kib as f64 / 1024.0,
            r.rss_baseline_kib as f64 / 1024.0,
            bytes / objects.max(1.0),
            per_object(r.rss_steady_kib),
            per_object(r.rss_peak_kib),
            operator,
            r.rollout.sum("windlass_api_requests_total", |_| true) / n,
            r.steady.writes(),
            r.steady.requests(&["get", "list"]),
        );
    }
}

fn print_report(settings: &Settings, server_version: &str, runs: &[Run]) {
    let mut out = String::new();
    if !settings.skip.is_empty() {
        let _ = writeln!(
            out,
            "\nLeft out (WINDLASS_FLEET_SKIP): {}; their figures print as inf×.",
            settings.skip.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nwindlass fleet benchmark: {OBJECTS} objects per CR (3 ConfigMaps, a Secret, a Service; 3-level DAG), \
         operator in its own process (debug build unless built with --release), sync-period {}, \
         control plane: windlass-testenv (kube-apiserver {}, loopback, {} cores)\n",
        settings.period,
        server_version,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(
        out,
        "| N | all Ready | ceiling: the same writes replayed | Ready / ceiling | N×{WRITES_PER_CR} ConfigMap applies ({}) | Ready / that | peak RSS | writes / CR | reads / CR (get+list) | reconciles / CR | queue wait p50 / p99 | steady window: writes, reads, reconciles |",
        settings
            .ceiling_in_flight
            .iter()
            .map(|n| format!("{n} in flight"))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        let n = r.n as f64;
        let _ = writeln!(
            out,
            "| {} | {} | {} ({} in flight) | {:.2}× | {} | {:.2}× | {:.1} MiB | {:.2} ({:.2} + {:.2} Events) | {:.2} | {:.2} | {} / {} | {:.0}, {:.0}, {:.0} in {} s |",
            r.n,
            seconds(r.ready),
            seconds(r.ceiling()),
            r.replayed.0,
            r.ready.as_secs_f64() / r.ceiling().as_secs_f64(),
            r.ceilings
                .iter()
                .map(|(_, d)| seconds(*d))
                .collect::<Vec<_>>()
                .join(" / "),
            r.ready.as_secs_f64() / r.configmap_ceiling().as_secs_f64(),
            r.rss_peak_kib as f64 / 1024.0,
            r.rollout.writes() / n,
            (r.rollout.writes() - r.rollout.events()) / n,
            r.rollout.events() / n,
            r.rollout.requests(&["get", "list"]) / n,
            r.rollout.reconciles() / n,
            bound(r.queue_wait_p50),
            bound(r.queue_wait_p99),
            r.steady.writes(),
            r.steady.requests(&["get", "list"]),
            r.steady.reconciles(),
            r.steady_window.as_secs(),
        );
    }
    let _ = writeln!(
        out,
        "\nRequests are the operator's own (its `/metrics`), from its start until all CRs were Ready. \
         Queue waits are histogram bucket bounds. The ceiling is the operator's own writes (the CRs' creates, \
         the objects' applies, the status writes and the Events), read back after the run and written again on a fresh control plane \
         from one client; the ConfigMap applies are measured before the operator starts."
    );
    for r in runs {
        let n = r.n as f64;
        let _ = writeln!(
            out,
            "\nN = {}: targets (issue 8 sets them for N = 1000)",
            r.n
        );
        let _ = writeln!(out, "| target | measured | met |");
        let _ = writeln!(out, "|---|---|---|");
        let ratio = r.ready.as_secs_f64() / r.ceiling().as_secs_f64();
        let configmap_ratio = r.ready.as_secs_f64() / r.configmap_ceiling().as_secs_f64();
        let mib = r.rss_peak_kib as f64 / 1024.0;
        let writes = r.rollout.writes() / n;
        let gets = r.rollout.requests(&["get"]);
        let gets_found = r.rollout.found(&["get"]);
        let steady_reads = r.steady.requests(&["get", "list"]);
        let rows = [
            (
                "all Ready within 2× the ceiling (the same writes from one client)".to_string(),
                format!(
                    "{ratio:.2}× ({} vs {}: {})",
                    seconds(r.ready),
                    seconds(r.ceiling()),
                    r.replayed_writes
                ),
                ratio <= 2.0,
            ),
            (
                format!("(against N × {WRITES_PER_CR} ConfigMap applies instead)"),
                format!(
                    "{configmap_ratio:.2}× ({} vs {})",
                    seconds(r.ready),
                    seconds(r.configmap_ceiling())
                ),
                configmap_ratio <= 2.0,
            ),
            (
                "peak RSS < 64 MiB".into(),
                format!(
                    "{mib:.1} MiB ({:.1} MiB when all were Ready)",
                    r.rss_at_ready_kib as f64 / 1024.0
                ),
                mib < 64.0,
            ),
            (
                format!("exactly {WRITES_PER_CR} writes per CR"),
                format!(
                    "{writes:.2}: {:.2} to objects and status, {:.2} Event creates",
                    (r.rollout.writes() - r.rollout.events()) / n,
                    r.rollout.events() / n
                ),
                (writes - WRITES_PER_CR as f64).abs() < 1e-9,
            ),
            (
                "no reads outside the watches: no get of an object that is there (a get answered \
                 404 is a first reconcile's, before its kind's watch has listed); in the steady \
                 window no get or list"
                    .into(),
                format!(
                    "{gets:.0} gets during the rollout, {gets_found:.0} of them not answered 404; \
                     {steady_reads:.0} reads in the steady window"
                ),
                gets_found == 0.0 && steady_reads == 0.0,
            ),
            (
                "no writes in the steady window".into(),
                format!("{:.0}", r.steady.writes()),
                r.steady.writes() == 0.0,
            ),
        ];
        for (target, measured, met) in rows {
            let _ = writeln!(
                out,
                "| {target} | {measured} | {} |",
                if met { "yes" } else { "**no**" }
            );
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let _ = writeln!(
            out,
            "\nCPU time during the fastest ConfigMap ceiling ({:.1} s × {cores} cores = {:.1} s): {}\n\
             CPU time during the replay ({:.1} s × {cores} cores = {:.1} s): {}\n\
             CPU time from the first create to all Ready ({:.1} s × {cores} cores = {:.1} s): {}",
            r.configmap_ceiling().as_secs_f64(),
            r.configmap_ceiling().as_secs_f64() * cores,
            r.cpu_ceiling.describe(),
            r.ceiling().as_secs_f64(),
            r.ceiling().as_secs_f64() * cores,
            r.cpu_replay.describe(),
            r.ready.as_secs_f64(),
            r.ready.as_secs_f64() * cores,
            r.cpu_rollout.describe(),
        );
        let _ = writeln!(
            out,
            "\nThe operator restarted over the {} Ready CRs, until every watch had listed and every CR was reconciled once:\n\
             | lists | ready after | peak RSS | LIST requests | watch requests | writes (the one spec change's: 6) | CPU: operator | kube-apiserver | etcd |\n\
             |---|---|---|---|---|---|---|---|---|",
            r.n
        );
        for restart in &r.restarts {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} MiB | {:.0} | {:.0} | {:.0} | {:.2} s | {:.2} s | {:.2} s |",
                restart.how,
                seconds(restart.started),
                restart.rss_peak_kib as f64 / 1024.0,
                restart.requests.requests(&["list"]),
                restart.requests.requests(&["watch"]),
                restart.requests.writes(),
                restart.cpu.of("operator").as_secs_f64(),
                restart.cpu.of("kube-apiserver").as_secs_f64(),
                restart.cpu.of("etcd").as_secs_f64(),
            );
        }
        let _ = writeln!(
            out,
            "\nrollout requests: {}\nrollout reads: {}\nreconciles: {}\nsteady window requests: {}",
            r.rollout.breakdown(&write_verbs()),
            r.rollout.breakdown(&["get", "list"]),
            r.rollout.reconciles_by_outcome(),
            r.steady
                .breakdown(&[&["get", "list"][..], &write_verbs()].concat()),
        );
        if let Some(sharded) = &r.sharded {
            sharded::report(&mut out, r, sharded);
        }
    }
    print_scale(&mut out, runs);
    println!("{out}");
}
