//! The example operator (`webapp-operator run`, a separate process) under faults, on a real
//! control plane (issue 8):
//!
//! - two replicas with Lease election: one leads and only it writes; SIGKILL it and the
//!   other takes over within the lease duration (plus a poll); every CR converges and
//!   nothing is written twice or re-created;
//! - two replicas with the annotation lock, active-active: a CR is locked by the replica
//!   that reconciles it for as long as the reconcile runs, and given up after it; no child
//!   is written twice; the CRs of a replica that is SIGKILLed are taken over by the other
//!   (at once, or once a lock it held when it died expired);
//! - kube-apiserver, and separately etcd, stopped in the middle of a rollout and started
//!   again: the operator rides the outage out, `/readyz` says so, and afterwards it finishes
//!   the rollout and converges CRs created or changed after the restart, with nothing lost,
//!   re-created or owned twice, no CR Ready while one of its objects is missing, and
//!   nothing (the objects in another namespace included) left once the CRs are deleted.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use windlass::cluster::{Cluster, LiveCluster, Verb, WriteMethod};
use windlass::object::ObjectRef;
use windlass_testenv::{ControlPlaneProcess, TestEnv};

mod support;
use support::{
    LONG, Operator, all_ready, announced, children, eventually, expected_objects, install_crd,
    uids, watch_ready_claims, webapp,
};

/// The lock timing of the election test: a lease of 4 s renewed (and watched) every second.
const LEASE: Duration = Duration::from_secs(4);
const POLL: Duration = Duration::from_secs(1);

impl Operator {
    /// A replica with Lease election in `namespace`, its identity `name`.
    fn replica(env: &TestEnv, name: &str, namespace: &str) -> Operator {
        Operator::locked(env, name, namespace, "lease")
    }

    /// A replica with the per-CR annotation lock, its identity `name`.
    fn active(env: &TestEnv, name: &str, namespace: &str) -> Operator {
        Operator::locked(env, name, namespace, "per-cr-annotation")
    }

    /// A replica with the lock `lock` (in `namespace`, timed by [`LEASE`] and [`POLL`]).
    fn locked(env: &TestEnv, name: &str, namespace: &str, lock: &str) -> Operator {
        let (lock, lease, poll) = (
            format!("leader-election.lock={lock}"),
            format!("leader-election.lease-duration={}s", LEASE.as_secs()),
            format!("leader-election.retry-period={}s", POLL.as_secs()),
        );
        Operator::start(
            env,
            name,
            namespace,
            &[
                "--leader-elect",
                "--set",
                &lock,
                "--leader-election-namespace",
                namespace,
                "--set",
                &lease,
                "--set",
                &poll,
                "--leader-election-id",
                "webapp-operator",
                "--set",
                &format!("leader-election.identity={name}"),
            ],
        )
    }

    /// The `windlass_leader` gauge: `Some(true)` while this replica leads.
    fn leads(&self) -> Option<bool> {
        sample(&self.metrics(), "windlass_leader").map(|v| v == 1.0)
    }

    /// Mutating requests this replica sent, by resource, except to Leases (the lock).
    fn writes(&self) -> BTreeMap<String, f64> {
        writes(&self.metrics())
    }
}

/// The value of the first series of `metric` (`name{…} v` or `name v`).
fn sample(metrics: &str, metric: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(metric)?;
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            return None;
        }
        rest.rsplit(' ').next()?.parse().ok()
    })
}

/// Sum of the series of `metric` whose labels contain every `needle` (0 when none).
fn total(metrics: &str, metric: &str, needles: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, n| sum + n)
}

/// Mutating requests by resource from a scrape, Leases left out.
fn writes(metrics: &str) -> BTreeMap<String, f64> {
    let mut by_resource = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("windlass_api_requests_total{"))
    {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(line[start..end].to_string())
        };
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else {
            continue;
        };
        if !Verb::from_name(&verb).is_mutating() || resource.starts_with("leases") {
            continue;
        }
        let n: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *by_resource.entry(resource).or_insert(0.0) += n;
    }
    by_resource
}

/// Each object has exactly one `managedFields` entry of windlass's field manager for the
/// main resource (an apply), and none from another manager's `Update` of the same fields
/// under windlass's name: what a second writer, or a write repeated under another
/// operation, would leave behind.
fn assert_one_owner(objects: &BTreeMap<String, DynamicObject>) {
    for (key, object) in objects {
        let entries: Vec<_> = object
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| e.manager.as_deref() == Some(windlass::FIELD_MANAGER))
            .filter(|e| e.subresource.as_deref().unwrap_or("").is_empty())
            .collect();
        assert_eq!(
            entries.len(),
            1,
            "{key}: windlass's managedFields entries: {:?}",
            object.metadata.managed_fields
        );
        assert_eq!(entries[0].operation.as_deref(), Some("Apply"), "{key}");
    }
}

#[tokio::test]
async fn two_replicas_one_leads_and_the_other_takes_over_after_sigkill() {
    let started = Instant::now();
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("election").await.unwrap();
    let client = env.client().unwrap();
    let cluster = Arc::new(LiveCluster::new(client.clone()));
    install_crd(&cluster).await;

    let replicas = [
        Operator::replica(env, "replica-a", ns.name()),
        Operator::replica(env, "replica-b", ns.name()),
    ];
    let [a, b] = &replicas;
    // Exactly one leads, the other knows it stands by (both ready), and the Lease names
    // the leader.
    eventually(
        "one replica leads and both are ready",
        LONG,
        &[a, b],
        || async {
            let leaders = [a.leads(), b.leads()];
            leaders.iter().filter(|l| **l == Some(true)).count() == 1
                && leaders.iter().filter(|l| **l == Some(false)).count() == 1
                && a.readyz() == Some(200)
                && b.readyz() == Some(200)
        },
    )
    .await;
    let (leader, follower) = if a.leads() == Some(true) {
        (0, 1)
    } else {
        (1, 0)
    };
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns.name());
    let holder = || async {
        leases
            .get_opt("webapp-operator")
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
    };
    assert_eq!(
        holder().await.as_deref(),
        Some(replicas[leader].name.as_str())
    );

    // Several CRs converge, written by the leader only.
    let names = ["shop", "blog", "wiki"];
    for name in names {
        cluster
            .apply(&webapp(ns.name(), name, 2), WriteMethod::Update)
            .await
            .unwrap();
    }
    eventually("every WebApp is Ready", LONG, &[a, b], || async {
        all_ready(&cluster, ns.name(), &names).await
    })
    .await;
    // The sync point: the follower watches the same CRs (its caches are synced, it is
    // ready), so had it acted on them, it would have done so by the time the leader has
    // rolled every one out.
    assert!(
        replicas[follower].writes().is_empty(),
        "the follower wrote: {:?}\n{}",
        replicas[follower].writes(),
        replicas[follower].dump()
    );
    let leader_writes = replicas[leader].writes();
    assert!(!leader_writes.is_empty(), "the leader wrote nothing?");
    let before = children(&client, ns.name()).await;
    assert!(!before.is_empty());
    let cr_uids: Vec<String> = {
        let mut uids = Vec::new();
        for name in names {
            let cr = ObjectRef::new(
                "example.windlass.dev/v1alpha1",
                "WebApp",
                Some(ns.name()),
                name,
            );
            let cr = cluster.get(&cr).await.unwrap().unwrap();
            uids.push(cr["metadata"]["uid"].as_str().unwrap().to_string());
        }
        uids
    };

    // SIGKILL the leader: no release, the lease must expire. The follower takes over once
    // the lease has expired, within a poll or two after (and the time for its acquiring
    // request). Measured by the times the replicas wrote into the Lease, not by when this
    // test noticed.
    let mut replicas = replicas;
    replicas[leader].kill();
    let lease_times = || async {
        let spec = leases
            .get("webapp-operator")
            .await
            .unwrap()
            .spec
            .expect("the Lease has a spec");
        (spec.renew_time.map(|t| t.0), spec.acquire_time.map(|t| t.0))
    };
    // The dead leader's last renewal: nobody else may write the Lease before it expires.
    let last_renewal = lease_times().await.0.expect("the leader renewed");
    let [a, b] = &replicas;
    let survivor = &replicas[follower];
    eventually("the follower takes over", LONG, &[a, b], || async {
        survivor.leads() == Some(true)
    })
    .await;
    assert_eq!(holder().await.as_deref(), Some(survivor.name.as_str()));
    let acquired = lease_times()
        .await
        .1
        .expect("the new holder wrote its acquire time");
    // Seconds from the expiry to the takeover.
    let takeover = acquired.duration_since(last_renewal).as_secs_f64() - LEASE.as_secs_f64();
    assert!(
        takeover >= 0.0,
        "taken at {acquired}, before the lease renewed at {last_renewal} expired"
    );
    // Two polls (the follower may have looked just before the expiry) and room for a
    // loaded machine's late timer and slow request.
    let room = 2 * POLL + Duration::from_secs(5);
    assert!(
        takeover <= room.as_secs_f64(),
        "taken {takeover:.3} s after the lease expired (lease {LEASE:?}, poll {POLL:?})\n{}",
        survivor.dump()
    );

    // Every CR converges, also one created after the kill and one changed after it.
    cluster
        .apply(&webapp(ns.name(), "late", 2), WriteMethod::Update)
        .await
        .unwrap();
    cluster
        .apply(&webapp(ns.name(), "blog", 3), WriteMethod::Update)
        .await
        .unwrap();
    let all = ["shop", "blog", "wiki", "late"];
    eventually(
        "every WebApp is Ready under the new leader",
        LONG,
        &[a, b],
        || async { all_ready(&cluster, ns.name(), &all).await },
    )
    .await;
    let blog_web = ObjectRef::new("apps/v1", "Deployment", Some(ns.name()), "blog-web");
    let replicas_of_blog = cluster.get(&blog_web).await.unwrap().unwrap()["spec"]["replicas"]
        .as_i64()
        .unwrap();
    assert_eq!(replicas_of_blog, 3, "the change after the kill rolled out");

    // Nothing was written twice: no object re-created (uids unchanged), each owned by one
    // windlass apply entry, and the new leader wrote nothing to the CRs that had converged
    // except the one that changed.
    let after = children(&client, ns.name()).await;
    let (before_uids, after_uids) = (uids(&before), uids(&after));
    for (key, uid) in &before_uids {
        assert_eq!(after_uids.get(key), Some(uid), "{key} was re-created");
    }
    assert!(
        after_uids.len() > before_uids.len(),
        "late's children exist"
    );
    assert_one_owner(&after);
    for (name, uid) in names.iter().zip(&cr_uids) {
        let cr = ObjectRef::new(
            "example.windlass.dev/v1alpha1",
            "WebApp",
            Some(ns.name()),
            *name,
        );
        let cr = cluster.get(&cr).await.unwrap().unwrap();
        assert_eq!(cr["metadata"]["uid"].as_str(), Some(uid.as_str()));
    }
    // The new leader's writes to children: late's, and blog's Deployment — nothing else.
    let late = ObjectRef::new(
        "example.windlass.dev/v1alpha1",
        "WebApp",
        Some(ns.name()),
        "late",
    );
    let late = cluster.get(&late).await.unwrap().unwrap();
    let late_uid = late["metadata"]["uid"].as_str().unwrap();
    let late_children = after
        .values()
        .filter(|o| {
            o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(windlass::annotations::OWNER_UID))
                .map(String::as_str)
                == Some(late_uid)
        })
        .count();
    let survivor_writes = survivor.writes();
    let child_writes: f64 = survivor_writes
        .iter()
        .filter(|(resource, _)| *resource != "events" && !resource.starts_with("webapps"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        child_writes,
        (late_children + 1) as f64,
        "the new leader wrote {survivor_writes:?}; late has {late_children} children"
    );
    eprintln!(
        "election: takeover after {takeover:?}; the leader wrote {leader_writes:?}; the new \
         leader wrote {survivor_writes:?}; {:?} in all",
        started.elapsed()
    );
}

/// The holder named in the lock annotation of each WebApp called one of `names`.
async fn lock_holders(cluster: &LiveCluster, namespace: &str, names: &[String]) -> Vec<String> {
    let mut holders = Vec::new();
    for name in names {
        let cr = ObjectRef::new(
            "example.windlass.dev/v1alpha1",
            "WebApp",
            Some(namespace),
            name,
        );
        let cr = cluster.get(&cr).await.unwrap().unwrap();
        holders.push(
            cr["metadata"]["annotations"][windlass::annotations::LEASE_NAME]
                .as_str()
                .unwrap_or("(none)")
                .to_string(),
        );
    }
    holders
}

#[tokio::test]
async fn two_active_replicas_share_the_crs_by_annotation_lock() {
    let started = Instant::now();
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("annotation-lock").await.unwrap();
    let client = env.client().unwrap();
    let cluster = Arc::new(LiveCluster::new(client.clone()));
    install_crd(&cluster).await;
    let replicas = [
        Operator::active(env, "active-a", ns.name()),
        Operator::active(env, "active-b", ns.name()),
    ];
    let [a, b] = &replicas;
    eventually("both replicas are ready", LONG, &[a, b], || async {
        a.readyz() == Some(200) && b.readyz() == Some(200)
    })
    .await;

    let names: Vec<String> = (0..8).map(|i| format!("app{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for name in &names {
        cluster
            .apply(&webapp(ns.name(), name, 2), WriteMethod::Update)
            .await
            .unwrap();
    }
    eventually("every WebApp is Ready", LONG, &[a, b], || async {
        all_ready(&cluster, ns.name(), &refs).await
    })
    .await;
    // Each reconcile gave its lock up when it ended.
    eventually("no WebApp is locked once Ready", LONG, &[a, b], || async {
        lock_holders(&cluster, ns.name(), &names)
            .await
            .iter()
            .all(|h| h == "(none)")
    })
    .await;
    // Each child was applied once, by one replica: the two replicas' child writes add up
    // to the number of children.
    let child_writes = |operator: &Operator| -> f64 {
        operator
            .writes()
            .iter()
            .filter(|(resource, _)| *resource != "events" && !resource.starts_with("webapps"))
            .map(|(_, n)| n)
            .sum()
    };
    let before = children(&client, ns.name()).await;
    let (a_writes, b_writes) = (child_writes(a), child_writes(b));
    assert_eq!(
        a_writes + b_writes,
        before.len() as f64,
        "children written: a {:?}, b {:?}; {} children",
        a.writes(),
        b.writes(),
        before.len()
    );
    assert_one_owner(&before);

    // SIGKILL a replica that reconciled: the other takes its CRs when they change (those
    // it held a lock on when it died, once the lock expired).
    let victim = usize::from(a_writes == 0.0);
    let mut replicas = replicas;
    replicas[victim].kill();
    for name in &names {
        cluster
            .apply(&webapp(ns.name(), name, 3), WriteMethod::Update)
            .await
            .unwrap();
    }
    eventually(
        "every WebApp is rolled out again by the survivor, its locks given up",
        LONG,
        &[&replicas[1 - victim]],
        || async {
            all_ready(&cluster, ns.name(), &refs).await
                && lock_holders(&cluster, ns.name(), &names)
                    .await
                    .iter()
                    .all(|h| h == "(none)")
        },
    )
    .await;
    let after = children(&client, ns.name()).await;
    let (before_uids, after_uids) = (uids(&before), uids(&after));
    assert_eq!(before_uids, after_uids, "nothing re-created or lost");
    for name in &names {
        let web = ObjectRef::new(
            "apps/v1",
            "Deployment",
            Some(ns.name()),
            format!("{name}-web"),
        );
        let web = cluster.get(&web).await.unwrap().unwrap();
        assert_eq!(web["spec"]["replicas"], 3, "{name}'s change rolled out");
    }
    assert_one_owner(&after);
    eprintln!(
        "annotation lock: child writes a {a_writes}, b {b_writes}; \
         {:?} in all",
        started.elapsed()
    );
}

/// Stop `process` under a running operator, see `/readyz` report it (returns whether it
/// did within the limit), start it again, and see the operator carry on: same process,
/// ready again.
async fn outage(env: &TestEnv, operator: &mut Operator, process: ControlPlaneProcess) -> bool {
    let restarts_before = total(&operator.metrics(), "windlass_watch_restarts_total", &[]);
    env.stop_process(process).await.unwrap();
    let down_since = Instant::now();
    let mut saw_unready = false;
    // The API server refuses connections at once. With etcd gone, kube-apiserver keeps
    // the watches open (its watch cache just stops sending): the operator's watches do not
    // fail, and it is its probe of the API server's own /readyz that tells.
    while down_since.elapsed() < LONG {
        if operator.readyz() == Some(503) {
            saw_unready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let restarts_during = total(&operator.metrics(), "windlass_watch_restarts_total", &[]);
    if saw_unready && process == ControlPlaneProcess::KubeApiserver {
        assert!(
            restarts_during > restarts_before,
            "an outage /readyz saw is counted in windlass_watch_restarts_total"
        );
    }
    env.start_process(process).await.unwrap();
    eventually(
        &format!("/readyz is 200 again after {process} is back"),
        LONG,
        &[operator],
        || async { operator.readyz() == Some(200) },
    )
    .await;
    assert!(operator.still_running(), "{}", operator.dump());
    eprintln!(
        "{process} outage: /readyz 503 seen: {saw_unready} (after {:?}); watch restarts \
         {restarts_before} → {restarts_during}",
        down_since.elapsed()
    );
    saw_unready
}

/// Create the WebApp `name` (announced in `monitoring`), wait until its rollout began (its
/// first object is there) and check it has not finished, then run an [`outage`] of
/// `process`. Returns the uids of the namespace's objects as they were when it stopped.
async fn outage_mid_rollout(
    env: &TestEnv,
    operator: &mut Operator,
    cluster: &LiveCluster,
    (namespace, monitoring): (&str, &str),
    name: &str,
    process: ControlPlaneProcess,
) -> BTreeMap<String, String> {
    let cr = announced(namespace, monitoring, name, "1.4.0", 2);
    cluster.apply(&cr, WriteMethod::Update).await.unwrap();
    let secret = ObjectRef::new(
        "v1",
        "Secret",
        Some(namespace),
        format!("{name}-db-credentials"),
    );
    eventually(
        &format!("{name}'s rollout began"),
        LONG,
        &[operator],
        || async { cluster.get(&secret).await.unwrap().is_some() },
    )
    .await;
    assert!(
        !all_ready(cluster, namespace, &[name]).await,
        "{name} finished before the outage"
    );
    let client = env.client().unwrap();
    let before = uids(&children(&client, namespace).await);
    assert!(
        outage(env, operator, process).await,
        "/readyz never answered 503 while {process} was down:\n{}",
        operator.dump()
    );
    before
}

#[tokio::test]
async fn the_operator_rides_out_apiserver_and_etcd_restarts() {
    let started = Instant::now();
    // An environment of its own: the outages would disturb every test sharing one.
    let env = TestEnv::start()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let ns = env.namespace("outage").await.unwrap();
    let client = env.client().unwrap();
    let cluster = Arc::new(LiveCluster::new(client.clone()));
    install_crd(&cluster).await;
    let mut operator = Operator::start(&env, "operator", ns.name(), &[]);
    let pid = operator.child.id();

    let monitoring = env.namespace("outage-monitoring").await.unwrap();
    let (namespace, mon) = (ns.name(), monitoring.name());
    let (claims, watching) = watch_ready_claims(
        client.clone(),
        cluster.clone(),
        namespace.to_string(),
        mon.to_string(),
    );
    eventually("/readyz is 200", LONG, &[&operator], || async {
        operator.readyz() == Some(200)
    })
    .await;
    let deployment = |name: &str| {
        ObjectRef::new(
            "apps/v1",
            "Deployment",
            Some(namespace),
            format!("{name}-web"),
        )
    };

    // kube-apiserver stopped in the middle of shop's rollout: connections are refused,
    // the watches fail, /readyz goes 503.
    let mut before = outage_mid_rollout(
        &env,
        &mut operator,
        &cluster,
        (namespace, mon),
        "shop",
        ControlPlaneProcess::KubeApiserver,
    )
    .await;
    // shop finishes; a change to it and a new CR after the restart converge.
    cluster
        .apply(
            &announced(namespace, mon, "shop", "1.4.0", 3),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    cluster
        .apply(
            &announced(namespace, mon, "blog", "1.4.0", 2),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually(
        "shop's change and blog converge after the API server restart",
        LONG,
        &[&operator],
        || async {
            all_ready(&cluster, namespace, &["shop", "blog"]).await
                && cluster
                    .get(&deployment("shop"))
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|d| d["spec"]["replicas"] == 3)
        },
    )
    .await;

    // etcd stopped in the middle of wiki's rollout: the API server stays up but cannot
    // serve, and says so; afterwards the same.
    before.extend(
        outage_mid_rollout(
            &env,
            &mut operator,
            &cluster,
            (namespace, mon),
            "wiki",
            ControlPlaneProcess::Etcd,
        )
        .await,
    );
    cluster
        .apply(
            &announced(namespace, mon, "blog", "1.4.0", 3),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually(
        "wiki and blog's change converge after the etcd restart",
        LONG,
        &[&operator],
        || async {
            all_ready(&cluster, namespace, &["shop", "blog", "wiki"]).await
                && cluster
                    .get(&deployment("blog"))
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|d| d["spec"]["replicas"] == 3)
        },
    )
    .await;
    for name in ["shop", "blog", "wiki"] {
        for object in expected_objects(namespace, mon, name) {
            assert!(
                cluster.get(&object).await.unwrap().is_some(),
                "{object} is missing"
            );
        }
    }

    // Nothing lost, re-created or owned twice; the same process all along.
    let after = children(&client, namespace).await;
    let after_uids = uids(&after);
    for (key, uid) in &before {
        assert_eq!(after_uids.get(key), Some(uid), "{key} was re-created");
    }
    assert_one_owner(&after);
    assert_eq!(operator.child.id(), pid);
    assert!(operator.still_running());
    let (checked, missing) = claims.lock().unwrap().clone();
    watching.abort();
    assert!(
        checked >= 3,
        "the watcher checked only {checked} Ready statuses"
    );
    assert!(
        missing.is_empty(),
        "Ready while an object was missing: {missing:?}"
    );

    // Deleted: every WebApp goes, with its monitoring target, no finalizer left behind.
    for name in ["shop", "blog", "wiki"] {
        let cr = ObjectRef::new(
            "example.windlass.dev/v1alpha1",
            "WebApp",
            Some(namespace),
            name,
        );
        cluster.delete(&cr, None).await.unwrap();
    }
    eventually(
        "every WebApp and its monitoring target gone",
        LONG,
        &[&operator],
        || async {
            for name in ["shop", "blog", "wiki"] {
                let cr = ObjectRef::new(
                    "example.windlass.dev/v1alpha1",
                    "WebApp",
                    Some(namespace),
                    name,
                );
                let target = ObjectRef::new(
                    "v1",
                    "ConfigMap",
                    Some(mon),
                    format!("{namespace}-{name}-web"),
                );
                if cluster.get(&cr).await.unwrap().is_some()
                    || cluster.get(&target).await.unwrap().is_some()
                {
                    return false;
                }
            }
            true
        },
    )
    .await;
    eprintln!("outages: {:?} in all", started.elapsed());
}
