//! Sharded replicas of the fleet operator (`fleet operator run`, separate processes) on a
//! real control plane (issue 21):
//!
//! - three replicas share 16 shards by their Leases, as the assignment says; every CR and
//!   every object it owns carries its shard's label;
//! - SIGKILL one: its CRs move to the other two and converge within the lease duration plus
//!   the warm-up;
//! - a fourth replica joins: it takes about a quarter of the shards, exactly those the
//!   assignment gives it, and the others hand them over;
//! - a recorder, every reconcile's start and end from the replicas' own logs, shows that
//!   no CR was ever reconciled by two replicas at once, over the whole run;
//! - where the API server selects shards itself (Kubernetes 1.37 with the
//!   `ShardedListAndWatch` gate), the replicas use it and the CRs need no label; where it
//!   does not, they fall back to the label.
//!
//! Every wait is on a condition with a deadline, with room for a busy 2-core machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet_bench::{Fleet, FleetSpec};
use futures::{StreamExt, TryStreamExt, stream};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use windlass::config::ShardingConfig;
use windlass::runtime::shard::assign::assign;
use windlass_testenv::{TestEnv, eventually_within};

/// The lock timing: a lease of 4 s, renewed every second.
const LEASE: Duration = Duration::from_secs(4);
const POLL: Duration = Duration::from_secs(1);
const SHARDS: u32 = 16;
/// The lock's name: the Leases are `fleet-members` and `fleet-shard-<k>`.
const ID: &str = "fleet";
/// How long a busy machine may take for what takes seconds on an idle one.
const LONG: Duration = Duration::from_secs(120);

/// One replica: the fleet operator in a process of its own, logging JSON to a file.
struct Replica {
    identity: String,
    /// This process of the replica: its identity and when it started.
    incarnation: String,
    child: Child,
    log: PathBuf,
    killed_at: Option<Timestamp>,
}

impl Replica {
    fn start(
        env: &TestEnv,
        namespace: &str,
        identity: &str,
        dir: &std::path::Path,
        server_side: bool,
    ) -> Replica {
        let incarnation = format!("{identity}@{}", Timestamp::now().as_millisecond());
        let log = dir.join(format!("{incarnation}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fleet"))
            .args([
                "operator",
                "run",
                "--watch-namespace",
                namespace,
                "--metrics-bind-address",
                "0",
                "--log-format",
                "json",
                "--log-level",
                "info,windlass::runtime::worker=debug",
                "--leader-election-namespace",
                namespace,
                "--leader-election-id",
                ID,
                "--sync-period",
                "60s",
                "--set",
                &format!("sharding.shards={SHARDS}"),
                "--set",
                &format!("sharding.server-side-selector={server_side}"),
                "--set",
                &format!("leader-election.identity={identity}"),
                "--set",
                &format!("leader-election.lease-duration={}s", LEASE.as_secs()),
                "--set",
                &format!("leader-election.retry-period={}s", POLL.as_secs()),
            ])
            .env_clear()
            .envs(std::env::vars().filter(|(k, _)| !k.starts_with("WINDLASS_")))
            .env("KUBECONFIG", env.kubeconfig_path())
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("the fleet operator starts");
        Replica {
            identity: identity.to_string(),
            incarnation,
            child,
            log,
            killed_at: None,
        }
    }

    /// SIGKILL: no release, no last write.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.killed_at = Some(Timestamp::now());
    }

    /// SIGTERM, and wait for the process to end (it hands its shards over first).
    fn stop(&mut self) {
        if self.killed_at.is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.killed_at = Some(Timestamp::now());
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.killed_at.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Who holds each shard's Lease now (a holder whose lease expired counts as none).
async fn holders(leases: &Api<Lease>) -> BTreeMap<u32, String> {
    let mut held = BTreeMap::new();
    for shard in 0..SHARDS {
        let Some(lease) = leases
            .get_opt(&format!("{ID}-shard-{shard}"))
            .await
            .unwrap()
        else {
            continue;
        };
        let Some(spec) = lease.spec else { continue };
        let (Some(holder), Some(renewed), Some(seconds)) = (
            spec.holder_identity,
            spec.renew_time,
            spec.lease_duration_seconds,
        ) else {
            continue;
        };
        if renewed.0 + jiff::SignedDuration::from_secs(i64::from(seconds)) > Timestamp::now() {
            held.insert(shard, holder);
        }
    }
    held
}

/// Wait until the shards are held as the assignment over `members` says.
async fn settled(leases: &Api<Lease>, members: &[&str]) -> BTreeMap<u32, String> {
    let members: BTreeSet<String> = members.iter().map(|m| m.to_string()).collect();
    let expected = assign(&members, SHARDS);
    eventually_within(
        &format!("the shards are held as the assignment over {members:?} says"),
        LONG,
        || async { holders(leases).await == expected },
    )
    .await;
    expected
}

fn fleet(i: usize, message: &str) -> Fleet {
    let mut cr = Fleet::new(
        &format!("f{i:03}"),
        FleetSpec {
            message: message.to_string(),
        },
    );
    cr.metadata.namespace = None;
    cr
}

/// Create the CRs `f000`… `f{n-1}`, each with the message "one".
async fn create_all(fleets: &Api<Fleet>, n: usize) {
    stream::iter(0..n)
        .map(|i| {
            let fleets = fleets.clone();
            async move {
                fleets
                    .create(&PostParams::default(), &fleet(i, "one"))
                    .await
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
}

/// Set every CR's message to `message`.
async fn change_all(fleets: &Api<Fleet>, n: usize, message: &str) {
    stream::iter(0..n)
        .map(|i| {
            let fleets = fleets.clone();
            let patch = json!({"spec": {"message": message}});
            async move {
                fleets
                    .patch(
                        &format!("f{i:03}"),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
}

async fn all_ready(fleets: &Api<Fleet>, n: usize) -> bool {
    let list = fleets.list(&ListParams::default()).await.unwrap();
    list.items.len() == n && list.items.iter().all(Fleet::is_ready)
}

/// One reconcile as a replica's log tells it.
#[derive(Debug, Clone)]
struct Interval {
    /// The process that ran it (a replica restarted under its identity is another).
    replica: String,
    start: Timestamp,
    /// `None`: still running, or cut off by the replica's death.
    end: Option<Timestamp>,
}

/// Every reconcile of every CR, from the replicas' logs (the worker logs each start and
/// end at debug level): CR → intervals, in log order per replica.
fn recorded(replicas: &[&Replica]) -> BTreeMap<String, Vec<Interval>> {
    let mut by_cr: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    for replica in replicas {
        let mut open: BTreeMap<String, Timestamp> = BTreeMap::new();
        for line in replica.log_text().lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let message = entry["fields"]["message"].as_str().unwrap_or_default();
            let (Some(cr), Some(at)) = (
                entry["fields"]["cr"].as_str(),
                entry["timestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<Timestamp>().ok()),
            ) else {
                continue;
            };
            match message {
                "reconcile started" => {
                    assert!(
                        open.insert(cr.to_string(), at).is_none(),
                        "{}: {cr} started twice without finishing",
                        replica.identity
                    );
                }
                "reconcile finished" => {
                    let start = open.remove(cr).expect("a reconcile finished that started");
                    by_cr.entry(cr.to_string()).or_default().push(Interval {
                        replica: replica.incarnation.clone(),
                        start,
                        end: Some(at),
                    });
                }
                _ => {}
            }
        }
        // Still running at the end of the log: until the replica died, or open-ended.
        for (cr, start) in open {
            by_cr.entry(cr).or_default().push(Interval {
                replica: replica.incarnation.clone(),
                start,
                end: replica.killed_at,
            });
        }
    }
    by_cr
}

/// No CR reconciled by two replicas at once: how many reconciles were counted, or the
/// first two that overlap.
fn never_two_at_once(by_cr: &BTreeMap<String, Vec<Interval>>) -> Result<usize, String> {
    let mut count = 0;
    for (cr, intervals) in by_cr {
        count += intervals.len();
        for (i, a) in intervals.iter().enumerate() {
            for b in &intervals[i + 1..] {
                if a.replica == b.replica {
                    continue;
                }
                let apart = |x: &Interval, y: &Interval| x.end.is_some_and(|end| end <= y.start);
                if !(apart(a, b) || apart(b, a)) {
                    return Err(format!(
                        "{cr} reconciled by two replicas at once: {a:?} and {b:?}"
                    ));
                }
            }
        }
    }
    Ok(count)
}

#[test]
fn the_recorder_sees_two_replicas_at_once() {
    let at = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
    let interval = |replica: &str, start: i64, end: Option<i64>| Interval {
        replica: replica.to_string(),
        start: at(start),
        end: end.map(at),
    };
    let apart = BTreeMap::from([(
        "cr".to_string(),
        vec![
            interval("a", 0, Some(2)),
            interval("a", 1, Some(3)),
            interval("b", 3, Some(4)),
            interval("c", 5, None),
        ],
    )]);
    assert_eq!(never_two_at_once(&apart), Ok(4));
    for overlapping in [
        vec![interval("a", 0, Some(2)), interval("b", 1, Some(3))],
        vec![interval("a", 0, None), interval("b", 5, Some(6))],
        vec![interval("a", 2, Some(3)), interval("b", 0, Some(5))],
    ] {
        let record = BTreeMap::from([("cr".to_string(), overlapping)]);
        assert!(never_two_at_once(&record).is_err(), "{record:?}");
    }
}

async fn child_labels(
    client: &kube::Client,
    namespace: &str,
) -> Vec<(String, Option<String>, Option<String>)> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    cms.list(&ListParams::default().labels(windlass::annotations::OWNER_UID))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|cm| {
            let labels = cm.metadata.labels.unwrap_or_default();
            (
                cm.metadata.name.unwrap_or_default(),
                labels.get(windlass::annotations::OWNER_UID).cloned(),
                labels.get(windlass::annotations::SHARD).cloned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn three_replicas_share_the_crs_and_a_killed_ones_move_without_overlap() {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let client = env.client().unwrap();
    fleet_bench::install_crd(&client).await;
    let ns = env.namespace("sharding").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let fleets: Api<Fleet> = Api::namespaced(client.clone(), ns.name());
    let sharding = ShardingConfig {
        shards: SHARDS,
        ..ShardingConfig::default()
    };
    // Label mode: the shared control plane runs without the ShardedListAndWatch gate.
    let mut replicas: Vec<Replica> = ["r0", "r1", "r2"]
        .iter()
        .map(|id| Replica::start(env, ns.name(), id, dir.path(), true))
        .collect();
    let three = settled(&leases, &["r0", "r1", "r2"]).await;

    // 1. The CRs spread over the three, each labelled with its shard, as its objects are.
    let n = 48;
    create_all(&fleets, n).await;
    eventually_within("every CR is Ready", LONG, || all_ready(&fleets, n)).await;
    let crs = fleets.list(&ListParams::default()).await.unwrap().items;
    let mut shard_of_cr: BTreeMap<String, u32> = BTreeMap::new();
    for cr in &crs {
        let uid = cr.metadata.uid.clone().unwrap();
        let shard = sharding.shard_of(&uid).unwrap();
        let label = cr
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(windlass::annotations::SHARD));
        assert_eq!(label, Some(&shard.to_string()), "{:?}", cr.metadata.name);
        shard_of_cr.insert(uid, shard);
    }
    let children = child_labels(&client, ns.name()).await;
    assert_eq!(children.len(), n * 3, "three ConfigMaps per CR");
    for (name, owner, shard) in &children {
        let expected = owner
            .as_ref()
            .and_then(|o| shard_of_cr.get(o))
            .map(u32::to_string);
        assert_eq!(shard, &expected, "{name}");
    }
    let used: BTreeSet<&String> = shard_of_cr.values().map(|s| &three[s]).collect();
    assert_eq!(used.len(), 3, "every replica serves some of the 48 CRs");

    // 2. SIGKILL r1: its shards move to r0 and r2 once its Leases expired, and its CRs
    // converge after the lease duration plus the warm-up.
    let victim_shards: BTreeSet<u32> = three
        .iter()
        .filter(|(_, holder)| *holder == "r1")
        .map(|(shard, _)| *shard)
        .collect();
    replicas[1].kill();
    let killed = Instant::now();
    change_all(&fleets, n, "two").await;
    eventually_within("every CR converges without r1", LONG, || {
        all_ready(&fleets, n)
    })
    .await;
    let converged = killed.elapsed();
    let two = settled(&leases, &["r0", "r2"]).await;
    assert!(victim_shards.iter().all(|s| two[s] != "r1"));
    // The lease duration, a poll to notice, and the warm-up and rollout of a few CRs; the
    // room is for a busy machine.
    assert!(
        converged < LEASE + POLL + Duration::from_secs(15),
        "r1's CRs converged {converged:?} after its SIGKILL"
    );
    eprintln!(
        "r1's {} shards converged {converged:?} after its SIGKILL",
        victim_shards.len()
    );
    for replica in [&replicas[0], &replicas[2]] {
        for line in replica
            .log_text()
            .lines()
            .filter(|l| l.contains("serving the shard: "))
        {
            let entry: Value = serde_json::from_str(line).unwrap_or_default();
            let shard = entry["fields"]["shard"].as_u64().unwrap_or(u64::MAX);
            if victim_shards.contains(&u32::try_from(shard).unwrap_or(u32::MAX)) {
                eprintln!(
                    "  {} took shard {shard}: warm after {} ms, leading after {} ms",
                    replica.identity,
                    entry["fields"]["warm_after_ms"],
                    entry["fields"]["leading_after_ms"]
                );
            }
        }
    }

    // 3. r1 back (a new process), then a fourth replica: it takes about a quarter.
    replicas.push(Replica::start(env, ns.name(), "r1", dir.path(), true));
    let before = settled(&leases, &["r0", "r1", "r2"]).await;
    replicas.push(Replica::start(env, ns.name(), "r3", dir.path(), true));
    let after = settled(&leases, &["r0", "r1", "r2", "r3"]).await;
    let moved: BTreeSet<u32> = (0..SHARDS).filter(|s| before[s] != after[s]).collect();
    let crs_moved = shard_of_cr.values().filter(|s| moved.contains(s)).count();
    let fraction = crs_moved as f64 / n as f64;
    assert!(
        (0.1..=0.45).contains(&(moved.len() as f64 / f64::from(SHARDS))),
        "{} of {SHARDS} shards moved",
        moved.len()
    );
    eprintln!(
        "the fourth replica moved {} of {SHARDS} shards, {crs_moved} of {n} CRs ({fraction:.2})",
        moved.len()
    );
    change_all(&fleets, n, "three").await;
    eventually_within("every CR converges on four replicas", LONG, || {
        all_ready(&fleets, n)
    })
    .await;

    // 4. The record: every CR reconciled in each round, never by two replicas at once.
    for replica in &mut replicas {
        replica.stop();
    }
    let record = recorded(&replicas.iter().collect::<Vec<_>>());
    assert_eq!(record.len(), n, "every CR was reconciled");
    let counted = never_two_at_once(&record).unwrap();
    assert!(counted >= 3 * n, "{counted} reconciles counted");
    let by_replica: BTreeSet<&String> = record.values().flatten().map(|i| &i.replica).collect();
    assert_eq!(
        by_replica.len(),
        5,
        "all five processes reconciled: {by_replica:?}"
    );
    eprintln!("{counted} reconciles of {n} CRs recorded, none of one CR by two replicas at once");
}

#[tokio::test]
async fn the_api_server_selects_each_shards_crs_where_it_can() {
    // A control plane of its own, with the alpha gate on.
    let env = TestEnv::builder()
        .without_simulator()
        .apiserver_flag("--feature-gates=ShardedListAndWatch=true")
        .start()
        .await
        .expect("a control plane with ShardedListAndWatch (Kubernetes 1.37 or later) starts");
    let client = env.client().unwrap();
    fleet_bench::install_crd(&client).await;
    let ns = env.namespace("server-shards").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let fleets: Api<Fleet> = Api::namespaced(client.clone(), ns.name());
    let mut replicas: Vec<Replica> = ["s0", "s1"]
        .iter()
        .map(|id| Replica::start(&env, ns.name(), id, dir.path(), true))
        .collect();
    settled(&leases, &["s0", "s1"]).await;
    let n = 24;
    create_all(&fleets, n).await;
    eventually_within("every CR is Ready", LONG, || all_ready(&fleets, n)).await;
    // Selected by the server: no replica put a label on a CR, and each reconciled only its
    // own shards' CRs.
    for cr in fleets.list(&ListParams::default()).await.unwrap().items {
        let labels = cr.metadata.labels.unwrap_or_default();
        assert!(
            !labels.contains_key(windlass::annotations::SHARD),
            "{:?}",
            cr.metadata.name
        );
    }
    for replica in &replicas {
        assert!(
            replica
                .log_text()
                .contains("the API server's shard selector"),
            "{} does not use the server's selector: {}",
            replica.identity,
            replica.log_text()
        );
    }
    for replica in &mut replicas {
        replica.stop();
    }
    let record = recorded(&replicas.iter().collect::<Vec<_>>());
    assert_eq!(record.len(), n, "every CR was reconciled");
    never_two_at_once(&record).unwrap();

    // Where the server ignores the selector (the shared control plane has no gate), a
    // replica finds out at start and selects by label.
    let shared = TestEnv::shared()
        .await
        .expect("the shared control plane starts");
    let ns = shared.namespace("label-shards").await.unwrap();
    let mut replica = Replica::start(shared, ns.name(), "l0", dir.path(), true);
    let leases: Api<Lease> = Api::namespaced(shared.client().unwrap(), ns.name());
    settled(&leases, &["l0"]).await;
    replica.stop();
    assert!(
        replica.log_text().contains("the windlass.dev/shard label"),
        "{}",
        replica.log_text()
    );
}
