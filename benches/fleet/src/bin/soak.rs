//! The soak (issue 16, "Survive"): the fleet operator in a process of its own, against the
//! real control plane on loopback, while `Fleet` CRs are created, changed and deleted
//! without pause for a fixed time. It samples the operator's resident memory and queue
//! depth, and at the end reads its log for panics.
//!
//! ```sh
//! cargo run --release -p fleet-bench --bin soak                # 10 minutes
//! WINDLASS_SOAK_SECS=120 cargo run -p fleet-bench --bin soak   # a short one
//! ```
//!
//! Settings (environment): `WINDLASS_SOAK_SECS` (default 600), `WINDLASS_SOAK_CRS` (how
//! many CRs live at once, default 50), `WINDLASS_SOAK_WARMUP_SECS` (RSS is compared from
//! then on, default 300: a 30-minute run showed RSS climbing for the first five minutes, as
//! the allocator's arenas and the caches fill, and flat after), `WINDLASS_SOAK_RSS_GROWTH`
//! (the bound on RSS growth after the
//! warm-up, as a fraction, default 0.25).
//!
//! Every fourth CR created takes the name of the last one deleted, at once, as `kubectl
//! delete` followed by `kubectl apply` does: the new CR's objects have the names of the old
//! one's, which the garbage collector may not have deleted yet. When the churn stops, every
//! CR alive must become Ready for its generation within `WINDLASS_SOAK_SETTLE_SECS`
//! (default 120).
//!
//! It exits 1 when the bound is broken: RSS grew more than the bound after the warm-up, the
//! queue depth ever exceeded the CRs alive (each CR is queued once at most), a CR alive
//! did not become Ready once the churn stopped, or the log holds a panic.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use fleet_bench::{Fleet, FleetController, FleetSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use windlass_testenv::TestEnv;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("operator") {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let argv = std::iter::once("soak-operator".into()).chain(std::env::args_os().skip(2));
        return runtime.block_on(windlass::cli::run(
            FleetController,
            argv.collect::<Vec<_>>(),
            windlass::cli::Output::stdout(),
        ));
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if runtime.block_on(soak()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One sample of the operator.
struct Sample {
    at: Duration,
    rss_kib: u64,
    queue_depth: f64,
    alive: usize,
}

async fn soak() -> bool {
    let seconds: u64 = env_or("WINDLASS_SOAK_SECS", 600);
    let alive_target: usize = env_or("WINDLASS_SOAK_CRS", 50);
    let warmup = Duration::from_secs(env_or("WINDLASS_SOAK_WARMUP_SECS", 300));
    let growth_bound: f64 = env_or("WINDLASS_SOAK_RSS_GROWTH", 0.25);
    let env =
        TestEnv::builder().without_simulator().start().await.expect(
            "the control plane starts (provision it with scripts/provision-control-plane.sh)",
        );
    let client = env.client().expect("a client");
    fleet_bench::install_crd(&client).await;
    let namespace = env.namespace("soak").await.expect("a namespace");
    let ns = namespace.name().to_string();
    let mut operator = Operator::start(&env, &ns);
    let fleets: Api<Fleet> = Api::namespaced(client.clone(), &ns);

    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut next_sample = Instant::now();
    let mut alive: Vec<String> = Vec::new();
    // The names of CRs deleted, the latest last: a name taken again leaves.
    let mut gone: Vec<String> = Vec::new();
    let (mut created, mut changed, mut deleted, mut step) = (0usize, 0usize, 0usize, 0usize);
    let mut reused = 0usize;
    while started.elapsed() < Duration::from_secs(seconds) {
        step += 1;
        // Grow to the target, then each step changes one CR and replaces another.
        if alive.len() < alive_target || step % 3 == 0 {
            let again = (created % 4 == 3).then(|| gone.pop()).flatten();
            reused += usize::from(again.is_some());
            let name = again.unwrap_or_else(|| format!("s{step}"));
            let fleet = Fleet::new(
                &name,
                FleetSpec {
                    message: format!("born at step {step}"),
                },
            );
            if fleets.create(&PostParams::default(), &fleet).await.is_ok() {
                alive.push(name);
                created += 1;
            }
        }
        if let Some(name) = alive.get(step * 7 % alive.len().max(1)).cloned() {
            let patch = json!({"spec": {"message": format!("changed at step {step}")}});
            if fleets
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                changed += 1;
            }
        }
        if alive.len() > alive_target {
            let name = alive.remove(step * 13 % alive.len());
            if fleets.delete(&name, &DeleteParams::default()).await.is_ok() {
                deleted += 1;
                gone.push(name);
            }
        }
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(10);
            if let Some(status) = operator.exited() {
                println!(
                    "FAIL: the operator exited ({status}); log: {}",
                    operator.log.display()
                );
                return false;
            }
            samples.push(Sample {
                at: started.elapsed(),
                rss_kib: operator.rss_kib(),
                queue_depth: operator.queue_depth().await,
                alive: alive.len(),
            });
        }
        // Paced: about ten operations a second, bounded, on loopback only.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = settle(
        &fleets,
        Duration::from_secs(env_or("WINDLASS_SOAK_SETTLE_SECS", 120)),
    )
    .await;
    let panics = operator.panics();
    let figures = Figures {
        created,
        reused,
        changed,
        deleted,
        panics,
    };
    report(&samples, warmup, growth_bound, &figures, &settled)
}

/// What the churn did and what the operator's log holds.
struct Figures {
    created: usize,
    reused: usize,
    changed: usize,
    deleted: usize,
    panics: usize,
}

/// The churn has stopped: how long until every CR alive was Ready for its generation, or
/// the CRs not Ready after `limit`. (A CR may still be deleting: its deletion was asked
/// for, and its name is not alive.)
async fn settle(fleets: &Api<Fleet>, limit: Duration) -> Result<Duration, Vec<String>> {
    let began = Instant::now();
    loop {
        let pending: Vec<String> = match fleets.list(&Default::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|cr| cr.metadata.deletion_timestamp.is_none() && !cr.is_ready())
                .filter_map(|cr| cr.metadata.name.clone())
                .collect(),
            Err(e) => vec![format!("(the list failed: {e})")],
        };
        if pending.is_empty() {
            return Ok(began.elapsed());
        }
        if began.elapsed() > limit {
            return Err(pending);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn report(
    samples: &[Sample],
    warmup: Duration,
    growth_bound: f64,
    figures: &Figures,
    settled: &Result<Duration, Vec<String>>,
) -> bool {
    let Figures {
        created,
        reused,
        changed,
        deleted,
        panics,
    } = *figures;
    println!("| at | operator RSS | queue depth | CRs alive |\n|---|---|---|---|");
    for s in samples {
        println!(
            "| {:.0} s | {:.1} MiB | {} | {} |",
            s.at.as_secs_f64(),
            s.rss_kib as f64 / 1024.0,
            s.queue_depth,
            s.alive
        );
    }
    let after: Vec<&Sample> = samples.iter().filter(|s| s.at >= warmup).collect();
    let (Some(first), Some(last)) = (after.first(), after.last()) else {
        println!("too short to compare: no sample after the {warmup:?} warm-up");
        return false;
    };
    let peak = after.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let growth = (last.rss_kib as f64 - first.rss_kib as f64) / first.rss_kib as f64;
    let deepest = samples.iter().map(|s| s.queue_depth).fold(0.0, f64::max);
    let most_alive = samples.iter().map(|s| s.alive).max().unwrap_or(0);
    println!(
        "\n{created} created ({reused} under a name just deleted), {changed} changed, {deleted} deleted; RSS after the warm-up {:.1} MiB, \
         at the end {:.1} MiB ({:+.1} %), peak {:.1} MiB; deepest queue {deepest}; {panics} panics in the log",
        first.rss_kib as f64 / 1024.0,
        last.rss_kib as f64 / 1024.0,
        growth * 100.0,
        peak as f64 / 1024.0
    );
    let mut ok = true;
    if growth > growth_bound {
        println!(
            "FAIL: RSS grew more than {:.0} % after the warm-up",
            growth_bound * 100.0
        );
        ok = false;
    }
    if deepest > most_alive as f64 {
        println!("FAIL: the queue held more CRs than were alive");
        ok = false;
    }
    if panics > 0 {
        println!("FAIL: the operator's log holds panics");
        ok = false;
    }
    match settled {
        Ok(after) => println!(
            "every CR alive was Ready for its generation {:.1} s after the churn stopped",
            after.as_secs_f64()
        ),
        Err(pending) => {
            println!(
                "FAIL: not Ready for their generation once the churn stopped: {}",
                pending.join(", ")
            );
            ok = false;
        }
    }
    ok
}

/// The operator process, its metrics server and its log.
struct Operator {
    child: Child,
    address: String,
    log: std::path::PathBuf,
}

impl Operator {
    fn start(env: &TestEnv, namespace: &str) -> Operator {
        let address = {
            // The operator binds it a moment later; a soak is not a test a lost race
            // could make flaky unnoticed: it would fail loudly at its first scrape.
            let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            free.local_addr().expect("its address").to_string()
        };
        let log = std::env::temp_dir().join("soak-operator.log");
        let file = std::fs::File::create(&log).expect("the operator's log file");
        let child = Command::new(std::env::current_exe().expect("this binary's path"))
            .args([
                "operator",
                "run",
                "--watch-namespace",
                namespace,
                "--metrics-bind-address",
                &address,
                "--log-format",
                "json",
            ])
            // The soak's own settings are not the operator's configuration, which refuses
            // WINDLASS_ variables it does not know.
            .env_clear()
            .envs(std::env::vars().filter(|(k, _)| !k.starts_with("WINDLASS_SOAK_")))
            .env("KUBECONFIG", env.kubeconfig_path())
            .stdout(Stdio::from(file.try_clone().expect("the log file")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("the operator process starts");
        eprintln!(
            "operator pid {} on {address}, log {}",
            child.id(),
            log.display()
        );
        Operator {
            child,
            address,
            log,
        }
    }

    /// How the operator ended, if it has.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// `VmRSS` of the operator, in KiB.
    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// `windlass_queue_depth` summed over controllers; 0 while `/metrics` does not answer.
    async fn queue_depth(&self) -> f64 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut stream) = tokio::net::TcpStream::connect(&self.address).await else {
            return 0.0;
        };
        let request = format!(
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.address
        );
        let mut response = String::new();
        if stream.write_all(request.as_bytes()).await.is_err()
            || stream.read_to_string(&mut response).await.is_err()
        {
            return 0.0;
        }
        response
            .lines()
            .filter(|l| l.starts_with("windlass_queue_depth"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Lines of the log that report a panic.
    fn panics(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked"))
            .count()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
