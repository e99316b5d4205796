//! Sharded replicas: the CRs split into `sharding.shards` shards, each held by one replica
//! at a time, each replica watching, caching and reconciling only the shards it holds.
//!
//! # What decides what
//!
//! - **A CR's shard** is fixed by its uid (see [`crate::config::sharding`]): the same
//!   everywhere, forever, with nothing to agree on.
//! - **Who should hold a shard** follows from the live replicas: every replica renews its
//!   entry in one members Lease (`members`) and computes the same assignment from the
//!   same set (`assign`: rendezvous hashing with bounded load, so a replica that joins or
//!   leaves moves about its share of the shards and no replica holds more than 9/8 of its
//!   share).
//! - **Who may reconcile a shard** is whoever holds the shard's Lease,
//!   `<leader-election.id>-shard-<k>`: the [`LeaseLock`] and renew loop of leader election,
//!   one per shard, with its fencing: the holder stops starting reconciles of the shard at
//!   the renew deadline (a fifth of the lease before another replica may take it), and its
//!   reconciles in flight write nothing from then on (`runtime::fence`).
//!
//! Why both, rather than a Lease per shard alone or a membership with deterministic
//! assignment alone: without membership a replica cannot know which shards are its fair
//! share (a new replica holds none, so nobody sees it), and replicas would grab free shards
//! in a race; without a Lease per shard two replicas whose views of the members differ for
//! a poll would both reconcile a shard. Membership says what to want; the shard's Lease
//! says what is allowed, and the two never have to agree for safety. The upkeep per replica
//! and poll (`leader-election.retry-period`) is a GET and a PUT of the members Lease and a
//! GET and a PUT per shard held: measured by the fleet benchmark (3 replicas, 16 shards, a
//! 2 s poll), 0.3–0.6 requests per CR of the 1000 during their rollout, about 6 requests a
//! second per replica (1.3 at the default 10 s poll). A Lease per replica listing its
//! shards would cost fewer requests, but two replicas could then claim one shard with writes
//! to two objects, and nothing would make one of them lose: the one-object
//! compare-and-swap of a Lease per shard is what makes the fencing exact.
//!
//! # Moving a shard
//!
//! A replica that should no longer hold a shard (a new replica joined) stops starting its
//! reconciles, lets those in flight finish (up to the runtime's drain bound), stops its
//! watches and releases the Lease (no holder), so the new holder takes it at its next poll.
//! A replica that dies keeps its Leases until they expire (`lease-duration`), then the
//! replicas its shards are assigned to take them over.
//!
//! A replica takes shards one poll after it started (its second renewal of the membership),
//! so that replicas started together see each other and do not all start with every shard.
//! It starts a shard's watches the moment it should hold the shard, before it holds
//! the Lease: while the Lease expires or is handed over, the cache warms. It starts the
//! shard's reconciles once it holds the Lease **and** the shard's watches have listed (the
//! primary kind and every kind the controller's reconciles deployed so far, in any shard),
//! so a reconcile of a shard just taken over reads from a full cache instead of asking the
//! API server for each object. Each shard has its own queue, watches, caches and worker
//! (the runtime's pipeline, once per shard), so a shard warming up or draining never holds
//! up the shards the replica serves; the reconciles of all shards share
//! `runtime.max-concurrent-reconciles`.
//!
//! # Which objects a shard watches
//!
//! The CRs of shard `k`: by the API server's shard selector where it honours it (`server`),
//! otherwise by the label `windlass.dev/shard=k`, which the replica holding a new CR's
//! shard puts on it first (`labeller`). The objects a CR's rollout applies carry the same
//! label (`rollout` stamps it), so the kinds a controller deploys are watched
//! `windlass.dev/owner-uid,windlass.dev/shard=k`: every object of a CR is in its shard's
//! cache. Kinds a CR reads without owning them (the Secrets of a dependency hash) and a
//! controller's extra watches are not sharded: the replica watches each of them whole
//! once, for all the shards it holds (`runtime::shared_watches`), so their memory is
//! paid once per replica, neither divided by the replicas nor multiplied by the shards.

pub mod assign;
mod controller;
mod labeller;
pub(crate) mod members;
pub(crate) mod server;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

pub(super) use controller::start_controller;

use super::leader::{Leadership, LeaseLock, LockSettings};
use crate::config::ShardingConfig;
use crate::config::sharding::{members_lease_name, shard_lease_name};
use crate::error::Error;
use members::Membership;

/// What the replica-wide shard loop tells each controller.
pub(crate) enum Command {
    /// Serve this shard: watch it now, reconcile it while `leadership` (its Lease, being
    /// taken or held) leads.
    Serve {
        /// The shard.
        shard: u32,
        /// Its Lease.
        leadership: Leadership,
    },
    /// Stop serving this shard, then send on `done`: no reconcile of it runs any more.
    Stop {
        /// The shard.
        shard: u32,
        /// Sent once the shard's reconciles have ended.
        done: oneshot::Sender<()>,
    },
}

/// The replica's part in the shards: its membership, the shards it should hold and their
/// Leases, and the controllers it tells.
pub(crate) struct Sharding {
    settings: LockSettings,
    shards: u32,
    client: kube::Client,
    /// Whether the API server selects a shard's CRs itself.
    selecting: bool,
    membership: Arc<Membership>,
    /// The members at the last renewal.
    first_members: BTreeSet<String>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Command>>>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Sharding {
    /// Join the members and find out how the API server can select a shard. Controllers
    /// [`subscribe`](Self::subscribe) next, then [`run`](Self::run) starts handing shards
    /// out.
    ///
    /// # Errors
    /// None yet: a failed first renewal is logged and retried by the loop.
    pub(crate) async fn start(
        settings: &LockSettings,
        config: &ShardingConfig,
        client: kube::Client,
    ) -> Result<Arc<Sharding>, Error> {
        let name = members_lease_name(&settings.name);
        let membership = Arc::new(Membership::new(
            client.clone(),
            &settings.namespace,
            &name,
            &settings.identity,
            settings.timing.lease_duration,
        ));
        let first_members = match membership.renew().await {
            Ok(members) => members,
            Err(e) => {
                tracing::warn!(error = %e, "cannot join the members yet; retrying");
                BTreeSet::from([settings.identity.clone()])
            }
        };
        let selecting = config.server_side_selector
            && match server::honours_shard_selector(&client, &settings.namespace, &name).await {
                Ok(honours) => honours,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot ask whether the API server selects shards");
                    false
                }
            };
        tracing::info!(
            shards = config.shards,
            identity = %settings.identity,
            members = ?first_members,
            by = if selecting { "the API server's shard selector" } else { "the windlass.dev/shard label" },
            "sharded: CRs selected by shard"
        );
        Ok(Arc::new(Sharding {
            settings: settings.clone(),
            shards: config.shards,
            client,
            selecting,
            membership,
            first_members,
            subscribers: Mutex::default(),
            stop: Mutex::default(),
            task: Mutex::default(),
        }))
    }

    /// The number of shards.
    pub(crate) fn shards(&self) -> u32 {
        self.shards
    }

    /// Whether the API server selects a shard's CRs (else: the label).
    pub(crate) fn selecting(&self) -> bool {
        self.selecting
    }

    /// The commands for one more controller; call before [`run`](Self::run).
    pub(crate) fn subscribe(&self) -> mpsc::UnboundedReceiver<Command> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.lock().push(tx);
        rx
    }

    /// Start handing shards out to the subscribed controllers, in the background.
    pub(crate) fn run(self: &Arc<Self>) {
        let (stop_tx, stop_rx) = oneshot::channel();
        *self.stop.lock() = Some(stop_tx);
        *self.task.lock() = Some(tokio::spawn(hand_out(self.clone(), stop_rx)));
    }

    /// Stop: every shard is handed over (its reconciles end, its Lease is released) and
    /// this replica leaves the members, so the others take its shards at their next poll.
    /// Call after the controllers stopped.
    pub(crate) async fn shutdown(&self) {
        let stop = self.stop.lock().take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        let task = self.task.lock().take();
        if let Some(task) = task
            && let Err(e) = task.await
        {
            tracing::warn!(error = %e, "the shard loop ended abnormally");
        }
        if let Err(e) = self.membership.leave().await {
            tracing::warn!(error = %e, "cannot leave the members; the entry expires on its own");
        }
    }

    /// The Lease of `shard`, its renew loop started.
    fn elect(&self, shard: u32) -> Leadership {
        Leadership::elect(
            LeaseLock::new(
                self.client.clone(),
                &self.settings.namespace,
                &shard_lease_name(&self.settings.name, shard),
                &self.settings.identity,
                self.settings.timing.lease_duration,
            ),
            self.settings.timing,
        )
    }

    fn tell(&self, mut command: impl FnMut() -> Command) {
        for subscriber in self.subscribers.lock().iter() {
            let _ = subscriber.send(command());
        }
    }
}

/// The loop: renew the membership every poll, and serve the shards assigned to this
/// replica, handing over those no longer assigned; on `stop`, hand every shard over.
async fn hand_out(sharding: Arc<Sharding>, mut stop: oneshot::Receiver<()>) {
    let me = sharding.settings.identity.clone();
    let poll = sharding.settings.timing.poll;
    let mut members = sharding.first_members.clone();
    let mut serving: BTreeMap<u32, Leadership> = BTreeMap::new();
    let mut retiring: JoinSet<u32> = JoinSet::new();
    let mut retiring_shards: BTreeSet<u32> = BTreeSet::new();
    // Replicas started together (a Deployment's rollout) see each other at their second
    // renewal: taking shards before it, the first to start would take them all, start a
    // pipeline for each and hand most over a poll later.
    tokio::select! {
        () = tokio::time::sleep(poll) => {}
        _ = &mut stop => return,
    }
    match sharding.membership.renew().await {
        Ok(now) => members = now,
        Err(e) => tracing::warn!(error = %e, "cannot renew the membership"),
    }
    let mut next = tokio::time::Instant::now() + poll;
    loop {
        let wanted = assign::shards_of(&members, sharding.shards, &me);
        let leaving: Vec<u32> = serving
            .keys()
            .filter(|s| !wanted.contains(s))
            .copied()
            .collect();
        for shard in leaving {
            if let Some(leadership) = serving.remove(&shard) {
                tracing::info!(shard, "handing the shard over");
                retiring_shards.insert(shard);
                retiring.spawn(hand_over(sharding.clone(), shard, leadership));
            }
        }
        for &shard in &wanted {
            // A shard being handed over is taken up again once its Lease is released: two
            // renew loops of one identity on one Lease would both think they hold it.
            if serving.contains_key(&shard) || retiring_shards.contains(&shard) {
                continue;
            }
            let leadership = sharding.elect(shard);
            tracing::info!(shard, "serving the shard");
            sharding.tell(|| Command::Serve {
                shard,
                leadership: leadership.clone(),
            });
            serving.insert(shard, leadership);
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {
                next = tokio::time::Instant::now() + poll;
                match sharding.membership.renew().await {
                    Ok(now) => {
                        if now != members {
                            tracing::info!(members = ?now, "the members changed");
                        }
                        members = now;
                    }
                    // The members last seen stay: an error must not move shards.
                    Err(e) => tracing::warn!(error = %e, "cannot renew the membership"),
                }
            }
            Some(done) = retiring.join_next(), if !retiring.is_empty() => {
                if let Ok(shard) = done {
                    retiring_shards.remove(&shard);
                }
            }
            _ = &mut stop => break,
        }
    }
    for (shard, leadership) in std::mem::take(&mut serving) {
        retiring.spawn(hand_over(sharding.clone(), shard, leadership));
    }
    while retiring.join_next().await.is_some() {}
}

/// Hand `shard` over: every controller stops serving it (its reconciles end), then its
/// Lease is released. Returns the shard.
async fn hand_over(sharding: Arc<Sharding>, shard: u32, leadership: Leadership) -> u32 {
    let mut stopped = Vec::new();
    sharding.tell(|| {
        let (done, stopped_rx) = oneshot::channel();
        stopped.push(stopped_rx);
        Command::Stop { shard, done }
    });
    for stopped in stopped {
        // A controller that is gone has no reconcile running either.
        let _ = stopped.await;
    }
    match leadership.shutdown().await {
        Ok(()) => tracing::info!(shard, "the shard is handed over"),
        Err(e) => tracing::warn!(shard, error = %e, "cannot release the shard's Lease; it expires"),
    }
    shard
}
