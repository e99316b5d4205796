//! Leader election on the real API server: two replicas on one Lease, takeover after the
//! lease expires and at once after a graceful release, a replica cut off from the API
//! server stepping down before its lease can expire elsewhere, leader-for-life with a real
//! Pod as owner (and garbage collection as the hand-over), the annotation lock on a CR.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use windlass::Error;
use windlass::annotations::{LEASE_NAME, LEASE_TIME};
use windlass::cluster::{Cluster, WriteMethod};
use windlass::config::{ConfigDuration, LockKind, LockStrategy, OperatorConfig};
use windlass::object::ObjectRef;
use windlass::runtime::leader::{Leadership, LockSettings};
use windlass_testenv::{TestEnv, TestNamespace};

use crate::{eventually, live};

const LOCK: &str = "leader-test";

/// The settings of one replica, as the configuration would give them.
fn settings(
    kind: LockKind,
    ns: &TestNamespace,
    identity: &str,
    duration: Duration,
    poll: Duration,
) -> LockSettings {
    let mut config = OperatorConfig::default();
    let election = &mut config.leader_election;
    election.enabled = true;
    election.id = LOCK.into();
    election.identity = identity.into();
    election.lock = match kind {
        LockKind::LeaderForLife => LockStrategy::ForLife,
        LockKind::Annotation => LockStrategy::PerCrAnnotation,
        LockKind::LeaderWithLease | LockKind::Dryrun | LockKind::Sharded => LockStrategy::Lease,
    };
    election.lease_duration = ConfigDuration(duration);
    election.retry_period = ConfigDuration(poll);
    let mut settings = LockSettings::from_config(&config).unwrap();
    // Also where the tests run inside a Pod with a mounted service-account namespace.
    settings.namespace = ns.name().to_string();
    settings
}

/// One replica electing with `client`.
async fn replica(
    env: &TestEnv,
    settings: &LockSettings,
    client: kube::Client,
) -> Result<Leadership, Error> {
    let cluster = Arc::new(windlass::cluster::LiveCluster::new(env.client().unwrap()));
    Leadership::start(settings, client, cluster).await
}

/// The replica `identity` with the lock `kind`, electing with the environment's client.
async fn own_replica(
    env: &TestEnv,
    kind: LockKind,
    ns: &TestNamespace,
    identity: &str,
    duration: Duration,
    poll: Duration,
) -> Leadership {
    let settings = settings(kind, ns, identity, duration, poll);
    replica(env, &settings, env.client().unwrap())
        .await
        .unwrap()
}

async fn lease(env: &TestEnv, ns: &TestNamespace) -> LeaseSpec {
    let leases: Api<Lease> = ns.api(env.client().unwrap());
    leases.get(LOCK).await.unwrap().spec.unwrap()
}

/// Poll `check` every 20 ms until it holds; panics after `within`. Returns when it held.
async fn within<F: FnMut() -> bool>(what: &str, within: Duration, mut check: F) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Neither of `a` and `b` leads at the same time as the other, sampled for `period`.
async fn never_both(a: &Leadership, b: &Leadership, period: Duration) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        assert!(!(a.is_leader() && b.is_leader()), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_replicas_one_leads_and_the_other_takes_over_when_the_leader_stops_renewing() {
    let (_, env) = live().await;
    let ns = env.namespace("lease-takeover").await.unwrap();
    let (duration, poll) = (Duration::from_secs(2), Duration::from_millis(300));
    let kind = LockKind::LeaderWithLease;
    let a = own_replica(env, kind, &ns, "pod-a", duration, poll).await;
    let b = own_replica(env, kind, &ns, "pod-b", duration, poll).await;
    within("one replica leads", Duration::from_secs(10), || {
        a.is_leader() || b.is_leader()
    })
    .await;
    // Several renewals later, still exactly one.
    never_both(&a, &b, Duration::from_secs(3)).await;
    assert!(a.is_leader() ^ b.is_leader());
    let (leader, follower, leader_id, follower_id) = if a.is_leader() {
        (a, b, "pod-a", "pod-b")
    } else {
        (b, a, "pod-b", "pod-a")
    };
    let spec = lease(env, &ns).await;
    assert_eq!(spec.holder_identity.as_deref(), Some(leader_id));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.lease_duration_seconds, Some(2));

    // The leader dies without releasing: its renewals stop.
    drop(leader);
    let dropped = Instant::now();
    let leases: Api<Lease> = ns.api(env.client().unwrap());
    let mut last_renewal = None;
    let taken = loop {
        let spec = leases.get(LOCK).await.unwrap().spec.unwrap();
        if spec.holder_identity.as_deref() == Some(leader_id) {
            last_renewal = spec.renew_time.as_ref().map(|t| t.0);
        } else {
            break spec;
        }
        assert!(
            dropped.elapsed() < Duration::from_secs(15),
            "no takeover: {spec:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(taken.holder_identity.as_deref(), Some(follower_id));
    assert_eq!(taken.lease_transitions, Some(2));
    // Taken over only once the old lease had expired: renewTime + leaseDurationSeconds.
    let last_renewal = last_renewal.unwrap();
    let acquired = taken.acquire_time.unwrap().0;
    assert!(
        acquired >= last_renewal + SignedDuration::from_secs(2),
        "taken at {acquired}, the lease renewed at {last_renewal} was valid for 2 s"
    );
    // It wrote itself into the lease; its own flag follows at once.
    within("the follower leads", Duration::from_secs(10), || {
        follower.is_leader()
    })
    .await;
    follower.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_graceful_release_hands_over_at_once() {
    let (_, env) = live().await;
    let ns = env.namespace("lease-release").await.unwrap();
    // A long lease: the hand-over must not wait for it.
    let (duration, poll) = (Duration::from_secs(10), Duration::from_millis(300));
    let kind = LockKind::LeaderWithLease;
    let a = own_replica(env, kind, &ns, "pod-a", duration, poll).await;
    tokio::time::timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .expect("pod-a leads");
    let b = own_replica(env, kind, &ns, "pod-b", duration, poll).await;
    never_both(&a, &b, Duration::from_secs(1)).await;
    assert!(a.is_leader() && !b.is_leader());

    let mut a_changes = a.watch();
    let released = Instant::now();
    a.shutdown().await.unwrap();
    assert!(!a.is_leader());
    assert!(!*a_changes.borrow_and_update());
    // Waiting for the lease would take 10 s from pod-a's last renewal, which was at most a
    // poll (0.3 s) before the release: a hand-over within 8 s did not wait for it.
    let took_over = within("pod-b takes over", Duration::from_secs(8), || b.is_leader()).await;
    assert!(
        took_over - released < Duration::from_secs(8),
        "the hand-over took {:?}, not the 10 s lease",
        took_over - released
    );
    let spec = lease(env, &ns).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-b"));
    assert_eq!(spec.lease_transitions, Some(2));
    b.shutdown().await.unwrap();
    let spec = lease(env, &ns).await;
    assert_eq!(spec.holder_identity, None, "released: {spec:?}");
}

/// A TCP proxy to the API server that can be cut: its port closes and every connection
/// through it breaks.
struct Cuttable {
    addr: SocketAddr,
    cut: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Cuttable {
    async fn to(upstream: String) -> Cuttable {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, mut cut_off) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut cut_off => break,
                    accepted = listener.accept() => {
                        let Ok((mut inbound, _)) = accepted else { break };
                        let upstream = upstream.clone();
                        connections.spawn(async move {
                            if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                }
            }
            drop(listener);
            // Every connection aborted and ended: from here on nothing passes.
            connections.shutdown().await;
        });
        Cuttable { addr, cut, task }
    }

    fn client(&self, env: &TestEnv) -> kube::Client {
        let mut config = env.kube_config();
        config.cluster_url = format!("https://{}", self.addr).parse().unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// Cut every connection; returns once none can carry anything any more.
    async fn cut(self) {
        let _ = self.cut.send(());
        self.task.await.unwrap();
    }
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_steps_down_before_its_lease_expires() {
    // Long enough that the fifth between the renew deadline and the expiry (1.2 s) is room
    // for a loaded machine's late timers.
    const LEASE: Duration = Duration::from_secs(6);
    let (_, env) = live().await;
    let ns = env.namespace("lease-cut-off").await.unwrap();
    let (duration, poll) = (LEASE, Duration::from_millis(300));
    let kind = LockKind::LeaderWithLease;
    let upstream = env
        .apiserver_url()
        .trim_start_matches("https://")
        .to_string();
    let proxy = Cuttable::to(upstream).await;
    let a = replica(
        env,
        &settings(kind, &ns, "pod-a", duration, poll),
        proxy.client(env),
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .expect("pod-a leads through the proxy");
    let b = own_replica(env, kind, &ns, "pod-b", duration, poll).await;
    never_both(&a, &b, Duration::from_secs(1)).await;
    assert!(a.is_leader());

    let mut a_changes = a.watch();
    proxy.cut().await;
    // Every renewal pod-a learnt had succeeded has landed, so the lease read now is at
    // least as new as the one pod-a counts from. (A request in flight at the cut may
    // still land after this read: that only makes the real expiry later than `expires`.)
    let spec = lease(env, &ns).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-a"));
    let last_renewal = spec.renew_time.unwrap().0;
    let expires = last_renewal + SignedDuration::try_from(LEASE).unwrap();

    tokio::time::timeout(LEASE * 3, a_changes.wait_for(|leader| !*leader))
        .await
        .expect("pod-a steps down")
        .unwrap();
    let stepped_down = Timestamp::now();
    assert!(!a.is_leader());
    assert!(
        stepped_down < expires,
        "pod-a stepped down at {stepped_down}, after its lease expired at {expires}"
    );
    // At the renew deadline (the lease less a fifth) after its last renewal, not at the
    // last moment: with half the gap to the expiry as room for a late timer.
    let deadline = LEASE - LEASE / 5;
    let room = (LEASE - deadline) / 2;
    assert!(
        stepped_down <= last_renewal + SignedDuration::try_from(deadline + room).unwrap(),
        "pod-a stepped down at {stepped_down}, last renewal at {last_renewal}"
    );

    // pod-b takes over once the lease expired, never overlapping pod-a.
    let mut b_changes = b.watch();
    tokio::time::timeout(LEASE * 3, b_changes.wait_for(|leader| *leader))
        .await
        .expect("pod-b takes over")
        .unwrap();
    assert!(!a.is_leader());
    assert!(Timestamp::now() >= expires);
    let spec = lease(env, &ns).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-b"));
    assert_eq!(spec.lease_transitions, Some(2));
    b.shutdown().await.unwrap();
    // pod-a cannot reach the server to release; it still stops, and says so.
    assert!(a.shutdown().await.is_err());
}

async fn pod(env: &TestEnv, ns: &TestNamespace, name: &str) -> Pod {
    let pods: Api<Pod> = ns.api(env.client().unwrap());
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            security_context: Some(windlass_testenv::restricted_pod_security()),
            containers: vec![Container {
                name: "operator".into(),
                image: Some("operator".into()),
                security_context: Some(windlass_testenv::restricted_container_security()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    pods.create(&PostParams::default(), &pod).await.unwrap()
}

#[tokio::test]
async fn leader_for_life_is_owned_by_the_pod_and_passes_on_when_the_pod_is_gone() {
    let (_, env) = live().await;
    let ns = env.namespace("leader-for-life").await.unwrap();
    let poll = Duration::from_millis(300);
    let kind = LockKind::LeaderForLife;
    let config_maps: Api<ConfigMap> = ns.api(env.client().unwrap());

    // Without its own Pod, leader-for-life cannot work: a config error, said at start.
    let missing = replica(
        env,
        &settings(kind, &ns, "no-such-pod", Duration::from_secs(15), poll),
        env.client().unwrap(),
    )
    .await
    .unwrap_err();
    assert!(matches!(missing, Error::Config(_)), "{missing}");
    assert!(missing.to_string().contains("no-such-pod"), "{missing}");

    let pod_a = pod(env, &ns, "pod-a").await;
    let pod_b = pod(env, &ns, "pod-b").await;
    let a = own_replica(env, kind, &ns, "pod-a", Duration::from_secs(15), poll).await;
    tokio::time::timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .expect("pod-a leads");
    let b = own_replica(env, kind, &ns, "pod-b", Duration::from_secs(15), poll).await;
    never_both(&a, &b, Duration::from_secs(1)).await;
    assert!(!b.is_leader());
    let lock = config_maps.get(LOCK).await.unwrap();
    let owners = lock.metadata.owner_references.unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].name.as_str()),
        ("Pod", "pod-a")
    );
    assert_eq!(Some(&owners[0].uid), pod_a.metadata.uid.as_ref());

    // pod-a goes away without releasing; garbage collection removes its lock.
    drop(a);
    let pods: Api<Pod> = ns.api(env.client().unwrap());
    pods.delete("pod-a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let mut b_changes = b.watch();
    tokio::time::timeout(
        Duration::from_secs(60),
        b_changes.wait_for(|leader| *leader),
    )
    .await
    .expect("pod-b leads once pod-a's lock is collected")
    .unwrap();
    let lock = config_maps.get(LOCK).await.unwrap();
    let owners = lock.metadata.owner_references.unwrap();
    assert_eq!(Some(&owners[0].uid), pod_b.metadata.uid.as_ref());

    // A graceful release deletes the lock at once.
    b.shutdown().await.unwrap();
    assert!(!b.is_leader());
    assert!(config_maps.get_opt(LOCK).await.unwrap().is_none());
}

#[tokio::test]
async fn annotation_lock_on_a_cr_acquire_expire_release() {
    let (cluster, env) = live().await;
    let ns = env.namespace("annotation-lock").await.unwrap();
    let widget = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": "shared", "namespace": ns.name()}, "spec": {}});
    cluster.apply(&widget, WriteMethod::Apply).await.unwrap();
    let object = ObjectRef::from_manifest(&widget).unwrap();
    let (duration, poll) = (Duration::from_secs(2), Duration::from_millis(300));
    let kind = LockKind::Annotation;
    let a = own_replica(env, kind, &ns, "pod-a", duration, poll).await;
    let b = own_replica(env, kind, &ns, "pod-b", duration, poll).await;
    // No global leader: both replicas may start reconciles.
    assert!(a.is_leader() && b.is_leader());

    assert!(a.acquire(&object).await.unwrap());
    let stored = cluster.get(&object).await.unwrap().unwrap();
    let annotations = &stored["metadata"]["annotations"];
    assert_eq!(annotations[LEASE_NAME], "pod-a");
    let a_time: Timestamp = annotations[LEASE_TIME].as_str().unwrap().parse().unwrap();
    assert!(a.holds(&stored) && !b.holds(&stored));
    assert!(!b.acquire(&object).await.unwrap());

    // pod-a stops renewing: pod-b takes the CR over once the lock expired.
    eventually("pod-b takes over the expired lock", || async {
        b.acquire(&object).await.unwrap()
    })
    .await;
    let stored = cluster.get(&object).await.unwrap().unwrap();
    let annotations = &stored["metadata"]["annotations"];
    assert_eq!(annotations[LEASE_NAME], "pod-b");
    let b_time: Timestamp = annotations[LEASE_TIME].as_str().unwrap().parse().unwrap();
    assert!(
        b_time >= a_time + SignedDuration::from_secs(2),
        "taken at {b_time}, pod-a's lock from {a_time} held for 2 s"
    );
    assert!(!a.holds(&stored) && b.holds(&stored));
    assert!(!a.acquire(&object).await.unwrap());
    // Only the holder's release removes the lock.
    a.release(&object).await.unwrap();
    let stored = cluster.get(&object).await.unwrap().unwrap();
    assert_eq!(stored["metadata"]["annotations"][LEASE_NAME], "pod-b");
    b.release(&object).await.unwrap();
    let stored = cluster.get(&object).await.unwrap().unwrap();
    let annotations = &stored["metadata"]["annotations"];
    assert!(annotations.get(LEASE_NAME).is_none(), "{annotations}");
    assert!(annotations.get(LEASE_TIME).is_none(), "{annotations}");
    assert!(a.acquire(&object).await.unwrap());
}

#[tokio::test]
async fn a_replica_shutting_down_gives_up_its_annotation_locks_at_once() {
    let (cluster, env) = live().await;
    let ns = env.namespace("annotation-shutdown").await.unwrap();
    // Locks that would outlast the test: only the release can free them.
    let (duration, poll) = (Duration::from_secs(600), Duration::from_millis(300));
    let kind = LockKind::Annotation;
    let a = own_replica(env, kind, &ns, "pod-a", duration, poll).await;
    let b = own_replica(env, kind, &ns, "pod-b", duration, poll).await;
    let mut objects = Vec::new();
    for name in ["one", "two"] {
        let widget = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns.name()}, "spec": {}});
        cluster.apply(&widget, WriteMethod::Apply).await.unwrap();
        let object = ObjectRef::from_manifest(&widget).unwrap();
        assert!(a.acquire(&object).await.unwrap());
        assert!(!b.acquire(&object).await.unwrap(), "pod-a holds {object}");
        objects.push(object);
    }

    a.shutdown().await.unwrap();
    for object in &objects {
        let stored = cluster.get(object).await.unwrap().unwrap();
        let annotations = &stored["metadata"]["annotations"];
        assert!(
            annotations.get(LEASE_NAME).is_none(),
            "{object}: {annotations}"
        );
        assert!(
            b.acquire(object).await.unwrap(),
            "pod-b takes {object} at once"
        );
    }
}

/// A controller of Widgets whose one component takes `Slow::0` to render a ConfigMap:
/// long enough to see the CR's lock while its reconcile runs.
struct Slow(Duration);

struct SlowPart(Duration);

#[windlass::async_trait]
impl<C: windlass::controller::Controller<Resource = windlass::testing::Widget>>
    windlass::component::Component<C> for SlowPart
{
    fn name(&self) -> &str {
        "slow"
    }
    async fn render(
        &self,
        session: &windlass::session::Session<C>,
        out: &mut windlass::component::Resources,
    ) -> windlass::Result<()> {
        tokio::time::sleep(self.0).await;
        out.add_value(
            "config",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-slow", session.name())}, "data": {}}),
        )?;
        Ok(())
    }
}

#[windlass::async_trait]
impl windlass::controller::Controller for Slow {
    type Resource = windlass::testing::Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(
        &self,
        _: &windlass::session::Session<Self>,
    ) -> windlass::Result<windlass::controller::Components<Self>> {
        let mut graph = windlass::controller::Components::new();
        graph.add(SlowPart(self.0))?;
        Ok(graph)
    }
}

/// A replica of the runtime with the annotation lock, `identity`, locks valid for `lease`.
fn annotation_replica(
    env: &TestEnv,
    ns: &TestNamespace,
    identity: &str,
    lease: Duration,
) -> (oneshot::Sender<()>, JoinHandle<windlass::Result<()>>) {
    let mut config = OperatorConfig::default();
    config.runtime.watch_namespaces = vec![ns.name().to_string()];
    config.server.metrics_bind_address = "127.0.0.1:0".into();
    config.leader_election.enabled = true;
    config.leader_election.lock = LockStrategy::PerCrAnnotation;
    config.leader_election.identity = identity.into();
    config.leader_election.lease_duration = ConfigDuration(lease);
    config.leader_election.retry_period = ConfigDuration(Duration::from_millis(300));
    let manager = windlass::runtime::Manager::new(env.client().unwrap(), config)
        .controller(Slow(Duration::from_millis(1500)));
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    (stop, task)
}

#[tokio::test]
async fn the_runtime_takes_a_crs_annotation_lock_for_each_reconcile_and_gives_it_up_after() {
    let (cluster, env) = live().await;
    let ns = env.namespace("annotation-release").await.unwrap();
    // Locks that would outlast the test: only their release lets the other replica in.
    let lease = Duration::from_secs(600);
    let (stop_a, task_a) = annotation_replica(env, &ns, "pod-a", lease);
    let widget = |n: i64| {
        json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": ns.name()}, "spec": {"n": n}})
    };
    cluster.apply(&widget(1), WriteMethod::Apply).await.unwrap();
    let object = ObjectRef::from_manifest(&widget(1)).unwrap();
    let holder = || async {
        cluster.get(&object).await.unwrap().unwrap()["metadata"]["annotations"][LEASE_NAME]
            .as_str()
            .map(str::to_string)
    };
    let (cluster, object) = (&cluster, &object);
    let ready = |generation: i64| async move {
        let cr = cluster.get(object).await.unwrap().unwrap();
        cr["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| {
                conditions.iter().any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "True"
                        && c["observedGeneration"] == generation
                })
            })
    };
    // While the reconcile runs (its component takes 1.5 s), pod-a holds the CR's lock...
    eventually("pod-a holds the lock while it reconciles", || async {
        holder().await.as_deref() == Some("pod-a")
    })
    .await;
    // ...and gives it up when the reconcile ends.
    eventually("the CR is Ready", || ready(1)).await;
    eventually("pod-a gave the lock up", || async {
        holder().await.is_none()
    })
    .await;
    // Taking and giving up the lock changes the CR, which must not start the next
    // reconcile: the CR stays as it is. (A reconcile would take the lock again at once,
    // and takes 1.5 s; 3 s shows it even on a loaded machine.)
    let version =
        cluster.get(object).await.unwrap().unwrap()["metadata"]["resourceVersion"].clone();
    windlass_testenv::quiet_window(
        "no reconcile after the lock's release",
        Duration::from_secs(3),
        || async {
            cluster.get(object).await.unwrap().unwrap()["metadata"]["resourceVersion"] == version
        },
    )
    .await;

    // Another replica takes the next change at once, though pod-a still runs and its lock
    // would have lasted ten minutes.
    let (stop_b, task_b) = annotation_replica(env, &ns, "pod-b", lease);
    stop_a.send(()).unwrap();
    task_a.await.unwrap().unwrap();
    cluster.apply(&widget(2), WriteMethod::Apply).await.unwrap();
    eventually("pod-b holds the lock while it reconciles", || async {
        holder().await.as_deref() == Some("pod-b")
    })
    .await;
    eventually("the change is rolled out", || ready(2)).await;
    eventually("pod-b gave the lock up", || async {
        holder().await.is_none()
    })
    .await;
    stop_b.send(()).unwrap();
    task_b.await.unwrap().unwrap();
}
