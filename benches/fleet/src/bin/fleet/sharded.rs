//! The fleet with sharded replicas (issue 21): the same N CRs, now shared by several
//! operator processes (`sharding.shards`), against the single replica of the same run.
//!
//! In a fresh namespace the replicas start (identities `replica-0…`), and the clock waits
//! until the shards are held as the assignment over them says, so that no hand-over runs
//! during the rollout. Then, as for one replica: the CRs are created with 16 creates in
//! flight and a watch notes when the last is Ready. Measured per replica: its peak RSS
//! (`VmHWM`) when all are Ready, its requests (its `/metrics`) and its CPU. Then the
//! takeover: the replica holding the most shards is SIGKILLed, the CRs of its shards are
//! changed at once, and the clock runs until every one of them is Ready for its new
//! generation (and, apart, until a survivor holds each of its shards' Leases). That takes the lease
//! duration at least (the survivors may take a Lease only once it expired), then the
//! survivors' warm-up of the shards and the rollout of those CRs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use fleet_bench::Fleet;
use fleet_bench::cpu::Cpu;
use futures::{StreamExt, TryStreamExt, stream};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use windlass::config::ShardingConfig;
use windlass::runtime::shard::assign::assign;
use windlass_testenv::TestEnv;

use super::plane::Plane;
use super::{Operator, Run, Scrape, Settings, create_fleet, wait_all_ready};

/// The name of the replicas' Leases: `fleet-members`, `fleet-shard-<k>`.
const ID: &str = "fleet";

/// What the sharded replicas measured at one N.
pub(crate) struct Sharded {
    pub(crate) replicas: usize,
    pub(crate) shards: u32,
    pub(crate) lease: Duration,
    pub(crate) poll: Duration,
    /// How the replicas select a shard's CRs: `label` or `server`.
    pub(crate) selector: &'static str,
    /// From the first create until all were Ready.
    pub(crate) ready: Duration,
    /// Per replica: peak RSS (KiB) when all were Ready.
    pub(crate) rss_kib: Vec<u64>,
    /// Per replica: the file-backed part of its resident set (KiB) then.
    pub(crate) rss_file_kib: Vec<u64>,
    /// Per replica: its resident set (KiB) before the first create, as the single
    /// replica's baseline is measured.
    pub(crate) rss_start_kib: Vec<u64>,
    /// Per replica: the shards it held.
    pub(crate) held: Vec<usize>,
    /// Every replica's requests from its start until all were Ready, added up.
    pub(crate) requests: Scrape,
    /// Every replica's CPU time from the first create until all were Ready.
    pub(crate) cpu: Duration,
    pub(crate) takeover: Takeover,
}

/// How long after a SIGKILL the takeover waits for no shard Lease to name the victim.
const LEASES_WAIT: Duration = Duration::from_secs(120);

/// What the takeover's Lease figure says when they did not move within [`LEASES_WAIT`].
fn not_moved() -> String {
    format!("(not within {} s)", LEASES_WAIT.as_secs())
}

/// A SIGKILLed replica's shards taken over.
pub(crate) struct Takeover {
    /// Its shards and their CRs.
    pub(crate) shards: usize,
    pub(crate) crs: usize,
    /// Until no shard Lease named it; `None` if some still did after [`LEASES_WAIT`].
    pub(crate) leases: Option<Duration>,
    /// Until its CRs, changed right after the kill, were all Ready.
    pub(crate) converged: Duration,
    /// The survivors' peak RSS (KiB) after it.
    pub(crate) rss_kib: Vec<u64>,
}

/// The sharded run's settings, from the environment.
pub(crate) struct ShardSettings {
    pub(crate) replicas: usize,
    pub(crate) shards: u32,
    pub(crate) lease: Duration,
    pub(crate) poll: Duration,
    pub(crate) selector: &'static str,
}

impl ShardSettings {
    /// `WINDLASS_FLEET_REPLICAS` (replicas of the sharded run; `1` or unset: none),
    /// `WINDLASS_FLEET_SHARDS` (16), `WINDLASS_FLEET_LEASE_SECS` (10, renewed every fifth of
    /// it), `WINDLASS_FLEET_SHARD_SELECTOR` (`label`, or `server`: the control plane starts
    /// with the `ShardedListAndWatch` gate and the replicas let it select).
    pub(crate) fn from_env() -> Option<ShardSettings> {
        let var =
            |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
        let replicas: usize = var("WINDLASS_FLEET_REPLICAS", "1")
            .parse()
            .expect("WINDLASS_FLEET_REPLICAS is a number");
        let lease = Duration::from_secs(
            var("WINDLASS_FLEET_LEASE_SECS", "10")
                .parse()
                .expect("WINDLASS_FLEET_LEASE_SECS is a number of seconds"),
        );
        let selector = match var("WINDLASS_FLEET_SHARD_SELECTOR", "label").as_str() {
            "server" => "server",
            "label" => "label",
            other => panic!("WINDLASS_FLEET_SHARD_SELECTOR: `{other}` is neither label nor server"),
        };
        (replicas > 1).then(|| ShardSettings {
            replicas,
            shards: var("WINDLASS_FLEET_SHARDS", "16")
                .parse()
                .expect("WINDLASS_FLEET_SHARDS is a number"),
            lease,
            poll: lease / 5,
            selector,
        })
    }
}

/// Who holds each shard's Lease in `leases` now (an expired Lease counts as none).
async fn holders(leases: &Api<Lease>, shards: u32) -> BTreeMap<u32, String> {
    let mut held = BTreeMap::new();
    let listed = leases
        .list(&ListParams::default())
        .await
        .expect("the Leases");
    for lease in listed {
        let name = lease.metadata.name.unwrap_or_default();
        let Some(shard) = name
            .strip_prefix(&format!("{ID}-shard-"))
            .and_then(|k| k.parse::<u32>().ok())
            .filter(|k| *k < shards)
        else {
            continue;
        };
        let Some(spec) = lease.spec else { continue };
        if let (Some(holder), Some(renewed), Some(seconds)) = (
            spec.holder_identity,
            spec.renew_time,
            spec.lease_duration_seconds,
        ) && renewed.0 + SignedDuration::from_secs(i64::from(seconds)) > Timestamp::now()
        {
            held.insert(shard, holder);
        }
    }
    held
}

/// Run the fleet of `n` CRs on `shards.replicas` sharded replicas, in a namespace of its
/// own.
pub(crate) async fn run(
    plane: &mut Plane,
    settings: &Settings,
    shards: &ShardSettings,
    n: usize,
) -> Sharded {
    eprintln!(
        "── N = {n}, {} sharded replicas ({} shards, by {}) ──",
        shards.replicas, shards.shards, shards.selector
    );
    let (env, client, ns) = plane.namespace(&format!("fleet-sharded-{n}")).await;
    let identities: Vec<String> = (0..shards.replicas)
        .map(|i| format!("replica-{i}"))
        .collect();
    let mut replicas: Vec<Operator> = identities
        .iter()
        .map(|identity| {
            let args = [
                "--leader-election-namespace".to_string(),
                ns.name().to_string(),
                "--leader-election-id".to_string(),
                ID.to_string(),
                "--set".to_string(),
                format!("sharding.shards={}", shards.shards),
                "--set".to_string(),
                format!(
                    "sharding.server-side-selector={}",
                    shards.selector == "server"
                ),
                "--set".to_string(),
                format!("leader-election.identity={identity}"),
                "--set".to_string(),
                format!("leader-election.lease-duration={}s", shards.lease.as_secs()),
                "--set".to_string(),
                format!(
                    "leader-election.retry-period={}s",
                    shards.poll.as_secs_f64()
                ),
            ];
            Operator::start_with(
                env,
                ns.name(),
                &settings.period,
                &format!("{n}-sharded-{identity}"),
                &[],
                &args,
            )
        })
        .collect();
    for replica in &replicas {
        replica.wait_ready(Duration::from_secs(60)).await;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let members: BTreeSet<String> = identities.iter().cloned().collect();
    let expected = assign(&members, shards.shards);
    windlass_testenv::eventually_within(
        "the shards are held as the assignment says",
        Duration::from_secs(120),
        || async { holders(&leases, shards.shards).await == expected },
    )
    .await;
    let at_start: Vec<Scrape> =
        futures::future::join_all(replicas.iter().map(Operator::scrape)).await;
    let rss_start_kib: Vec<u64> = replicas.iter().map(Operator::rss_kib).collect();

    let fleets: Api<Fleet> = Api::namespaced(client.clone(), ns.name());
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(wait_all_ready(fleets.clone(), n, ready_tx));
    let cpu_before: Vec<Cpu> = replicas
        .iter()
        .map(|r| Cpu::now(env, Some(r.pid())))
        .collect();
    let clock = Instant::now();
    create_fleet(&fleets, n).await;
    let ready = match tokio::time::timeout(settings.deadline, ready_rx).await {
        Ok(Ok(at)) => at.duration_since(clock),
        _ => panic!(
            "not all {n} CRs were Ready on the sharded replicas within {:?}",
            settings.deadline
        ),
    };
    watch.abort();
    let cpu: Duration = replicas
        .iter()
        .zip(&cpu_before)
        .map(|(r, before)| Cpu::now(env, Some(r.pid())).since(before).of("operator"))
        .sum();
    eprintln!(
        "all {n} Ready on {} sharded replicas after {:.2} s",
        shards.replicas,
        ready.as_secs_f64()
    );
    let rss_kib: Vec<u64> = replicas.iter().map(Operator::peak_rss_kib).collect();
    let rss_file_kib: Vec<u64> = replicas.iter().map(Operator::rss_file_kib).collect();
    let mut requests = Scrape::default();
    for (replica, start) in replicas.iter().zip(&at_start) {
        requests = requests.plus(&replica.scrape().await.since(start));
    }
    let held: Vec<usize> = identities
        .iter()
        .map(|id| expected.values().filter(|h| *h == id).count())
        .collect();

    let takeover = take_over(
        env,
        &fleets,
        &leases,
        shards,
        &identities,
        &expected,
        &mut replicas,
    )
    .await;
    drop(replicas);
    Sharded {
        replicas: shards.replicas,
        shards: shards.shards,
        lease: shards.lease,
        poll: shards.poll,
        selector: shards.selector,
        ready,
        rss_kib,
        rss_file_kib,
        rss_start_kib,
        held,
        requests,
        cpu,
        takeover,
    }
}

/// SIGKILL the replica holding the most shards, change its CRs at once, and time their
/// convergence on the others.
async fn take_over(
    _env: &TestEnv,
    fleets: &Api<Fleet>,
    leases: &Api<Lease>,
    shards: &ShardSettings,
    identities: &[String],
    held: &BTreeMap<u32, String>,
    replicas: &mut [Operator],
) -> Takeover {
    let victim = (0..identities.len())
        .max_by_key(|i| held.values().filter(|h| **h == identities[*i]).count())
        .unwrap_or(0);
    let victim_shards: BTreeSet<u32> = held
        .iter()
        .filter(|(_, h)| **h == identities[victim])
        .map(|(s, _)| *s)
        .collect();
    let sharding = ShardingConfig {
        shards: shards.shards,
        ..ShardingConfig::default()
    };
    let crs: Vec<String> = fleets
        .list(&ListParams::default())
        .await
        .expect("the CRs")
        .items
        .into_iter()
        .filter(|cr| {
            cr.metadata
                .uid
                .as_deref()
                .and_then(|uid| sharding.shard_of(uid))
                .is_some_and(|s| victim_shards.contains(&s))
        })
        .filter_map(|cr| cr.metadata.name)
        .collect();
    replicas[victim].sigkill();
    let killed = Instant::now();
    eprintln!(
        "SIGKILLed {} ({} shards, {} CRs); changing its CRs",
        identities[victim],
        victim_shards.len(),
        crs.len()
    );
    // The Leases are watched from the kill on, while the CRs are changed (3863 patches
    // take tens of seconds at N = 10 000).
    // Taken over: each of the victim's shards held by a survivor. (Not "every shard
    // held": the survivors also pass shards between them as the assignment for two
    // members says, and a shard between two survivors is held by neither for a moment.)
    let victim_name = identities[victim].clone();
    let mut leases_task = {
        let leases = leases.clone();
        let shard_count = shards.shards;
        let victim_shards = victim_shards.clone();
        tokio::spawn(async move {
            loop {
                let now = holders(&leases, shard_count).await;
                if victim_shards
                    .iter()
                    .all(|s| now.get(s).is_some_and(|h| *h != victim_name))
                {
                    return killed.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let changed: HashMap<String, i64> = stream::iter(crs.iter().cloned())
        .map(|name| {
            let fleets = fleets.clone();
            async move {
                let patch = json!({"spec": {"message": "taken over"}});
                let cr = fleets
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok::<_, kube::Error>((name, cr.metadata.generation.unwrap_or_default()))
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .expect("the victim's CRs are changed");
    eprintln!(
        "its CRs changed {:.2} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    // Every changed CR Ready for its new generation.
    let mut pending: BTreeSet<String> = changed.keys().cloned().collect();
    let mut events =
        std::pin::pin!(watcher(fleets.clone(), watcher::Config::default()).applied_objects());
    while !pending.is_empty() {
        let Some(event) = events.next().await else {
            break;
        };
        let Ok(cr) = event else { continue };
        let name = cr.metadata.name.clone().unwrap_or_default();
        if changed
            .get(&name)
            .is_some_and(|g| cr.metadata.generation >= Some(*g))
            && cr.is_ready()
        {
            pending.remove(&name);
        }
    }
    let converged = killed.elapsed();
    let leases_taken = tokio::time::timeout(LEASES_WAIT, &mut leases_task)
        .await
        .ok()
        .and_then(Result::ok);
    // Not moved in time: stop polling (the control plane goes with the phase).
    leases_task.abort();
    eprintln!(
        "takeover: the Leases after {}, the CRs converged after {:.2} s",
        leases_taken.map_or_else(not_moved, super::seconds),
        converged.as_secs_f64()
    );
    let rss_kib = replicas
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, r)| r.peak_rss_kib())
        .collect();
    Takeover {
        shards: victim_shards.len(),
        crs: crs.len(),
        leases: leases_taken,
        converged,
        rss_kib,
    }
}

/// The sharded run's rows, against the single replica of the same run: its Ready time,
/// its peak RSS when all were Ready, its requests and its operator CPU until then.
pub(crate) fn report(out: &mut String, single: &Run, sharded: &Sharded) {
    use std::fmt::Write as _;
    let (n, single_ready, single_rss_kib) = (single.n, single.ready, single.rss_at_ready_kib);
    let (single_requests, single_cpu) = (&single.rollout, single.cpu_rollout.of("operator"));
    let per_cr = |v: f64| v / n as f64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let max_rss = sharded.rss_kib.iter().copied().max().unwrap_or_default();
    // Peak RSS less the code's pages: what a replica's own memory is, the part that can
    // fall as replicas are added (the code is the same in each).
    let single_anon = single_rss_kib.saturating_sub(single.rss_file_at_ready_kib);
    // Each replica's peak less another figure of it.
    let peak_less = |other: &[u64]| -> Vec<u64> {
        sharded
            .rss_kib
            .iter()
            .zip(other)
            .map(|(peak, other)| peak.saturating_sub(*other))
            .collect()
    };
    let max_anon = peak_less(&sharded.rss_file_kib)
        .into_iter()
        .max()
        .unwrap_or_default();
    // The most the CRs added to any replica (its peak less its start).
    let max_added = peak_less(&sharded.rss_start_kib)
        .into_iter()
        .max()
        .unwrap_or_default();
    // Each replica's figure, in MiB.
    let each = |kibs: &[u64]| {
        kibs.iter()
            .map(|kib| format!("{:.1}", mib(*kib)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let leases = sharded.requests.sum("windlass_api_requests_total", |l| {
        l.get("resource").is_some_and(|r| r.starts_with("leases"))
    });
    let all = |s: &Scrape| s.sum("windlass_api_requests_total", |_| true);
    let _ = writeln!(
        out,
        "\nN = {n} on {} sharded replicas ({} shards, CRs selected by {}, Leases of {} s renewed every {:.1} s), against the single replica of this run:\n\
         | | 1 replica | {} sharded replicas | ratio |\n|---|---|---|---|",
        sharded.replicas,
        sharded.shards,
        sharded.selector,
        sharded.lease.as_secs(),
        sharded.poll.as_secs_f64(),
        sharded.replicas,
    );
    let rows = [
        (
            "all Ready".to_string(),
            super::seconds(single_ready),
            super::seconds(sharded.ready),
            sharded.ready.as_secs_f64() / single_ready.as_secs_f64(),
        ),
        (
            "peak RSS per replica when all were Ready (target: ≤ 0.40 with 3)".to_string(),
            format!("{:.1} MiB", mib(single_rss_kib)),
            format!(
                "{:.1} MiB at most ({})",
                mib(max_rss),
                sharded
                    .rss_kib
                    .iter()
                    .zip(&sharded.held)
                    .map(|(kib, held)| format!("{:.1} MiB with {held} shards", mib(*kib)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            max_rss as f64 / single_rss_kib as f64,
        ),
        (
            "the same less the file-backed pages (the binary's code, RssFile then)".to_string(),
            format!(
                "{:.1} MiB ({:.1} MiB of code)",
                mib(single_anon),
                mib(single.rss_file_at_ready_kib)
            ),
            format!(
                "{:.1} MiB at most ({} MiB of code)",
                mib(max_anon),
                each(&sharded.rss_file_kib)
            ),
            max_anon as f64 / single_anon as f64,
        ),
        (
            "what the CRs added to it (peak when all were Ready less before the first create)"
                .to_string(),
            format!(
                "{:.1} MiB ({:.1} MiB before)",
                mib(single_rss_kib.saturating_sub(single.rss_baseline_kib)),
                mib(single.rss_baseline_kib)
            ),
            format!(
                "{:.1} MiB at most ({} MiB before)",
                mib(max_added),
                each(&sharded.rss_start_kib)
            ),
            max_added as f64 / single_rss_kib.saturating_sub(single.rss_baseline_kib) as f64,
        ),
        (
            "requests per CR, all replicas".to_string(),
            format!("{:.2}", per_cr(all(single_requests))),
            format!(
                "{:.2} ({:.2} of them Lease upkeep)",
                per_cr(all(&sharded.requests)),
                per_cr(leases)
            ),
            all(&sharded.requests) / all(single_requests),
        ),
        (
            "writes per CR, Leases aside".to_string(),
            format!("{:.2}", per_cr(single_requests.writes())),
            format!(
                "{:.2}",
                per_cr(
                    sharded.requests.writes()
                        - sharded.requests.sum("windlass_api_requests_total", |l| {
                            l.get("resource").is_some_and(|r| r.starts_with("leases"))
                                && l.get("verb")
                                    .is_some_and(|v| super::write_verbs().contains(&v.as_str()))
                        })
                )
            ),
            1.0,
        ),
        (
            "operator CPU per CR, all replicas".to_string(),
            format!("{:.2} ms", single_cpu.as_secs_f64() * 1e3 / n as f64),
            format!("{:.2} ms", sharded.cpu.as_secs_f64() * 1e3 / n as f64),
            sharded.cpu.as_secs_f64() / single_cpu.as_secs_f64(),
        ),
    ];
    for (what, one, many, ratio) in rows {
        let ratio = if what.starts_with("writes") {
            "–".to_string()
        } else {
            format!("{ratio:.2}×")
        };
        let _ = writeln!(out, "| {what} | {one} | {many} | {ratio} |");
    }
    let t = &sharded.takeover;
    let _ = writeln!(
        out,
        "\nTakeover: the replica holding the most shards SIGKILLed ({} shards, {} CRs), its CRs changed at once: \
         a survivor held each of its shards' Leases after {}; every one of its CRs Ready for its change after {} \
         (a Lease may be taken {} s after its last renewal). The survivors' peak RSS then: {}.",
        t.shards,
        t.crs,
        t.leases.map_or_else(not_moved, super::seconds),
        super::seconds(t.converged),
        sharded.lease.as_secs(),
        t.rss_kib
            .iter()
            .map(|kib| format!("{:.1} MiB", mib(*kib)))
            .collect::<Vec<_>>()
            .join(", ")
    );
}
