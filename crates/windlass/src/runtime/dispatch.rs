//! One controller's dispatcher: the task that starts the controller's watches and routes
//! every event they see through its [`Router`] into its queue.
//!
//! The primary kind's watch and the controller's extra watches start at once. The kinds
//! the controller deploys get a label-scoped watch (only objects carrying windlass's
//! ownership label) as reconciles first deploy them ([`Learned::Deploys`]), and its store
//! keeps what a rollout reads of them ([`Keep::Slim`]); a kind whose objects CRs read
//! without owning them ([`Learned::Reads`], for a dependency hash) is watched whole from
//! then on, in place of its label-scoped watch, its store keeping what a rollout reads and
//! a digest of each object's data ([`Keep::Digest`]).
//!
//! A dispatcher of one shard of a sharded controller ([`ShardScope`], see
//! `runtime::shard`) watches the primary kind and the deployed kinds within the shard, and
//! starts with the deployed kinds the other shards have learned, so that a shard taken
//! over starts with its whole cache. The kinds watched whole it leaves to the replica's
//! [`SharedWatches`], one watch for all the shards the replica holds.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use super::cache::{Keep, Stores};
use super::route::Router;
use super::shared_watches::{SharedWatches, Subscription};
use super::source::{self, InitialList, SourceEvent, Watch, WatchObserver};
use crate::cluster::{Cluster, LiveCluster, Scope};
use crate::object::{ObjectRef, TypeRef};
use crate::progress::{Event, Observer};

/// What one controller's watches are made of.
pub(super) struct Sources {
    pub(super) live: Arc<LiveCluster>,
    pub(super) stores: Arc<Stores>,
    /// Empty: every namespace.
    pub(super) namespaces: Vec<String>,
    pub(super) observer: Arc<dyn WatchObserver>,
    pub(super) initial_list: InitialList,
    /// The shard these watches are for, when the controller is sharded.
    pub(super) shard: Option<ShardScope>,
}

/// The watches of one shard of a sharded controller.
pub(super) struct ShardScope {
    /// The shard's label selector (`windlass.dev/shard=3`), ANDed into the watches of the
    /// deployed kinds, and of the primary kind unless `primary_live` selects it.
    pub(super) labels: String,
    /// A cluster whose client has the API server select the shard's CRs (KEP-5866's
    /// `shardSelector`), for the primary kind's watch; `None`: by the label.
    pub(super) primary_live: Option<Arc<LiveCluster>>,
    /// The kinds the controller's reconciles deployed so far, in any shard: watched from
    /// the start, and added to as reconciles deploy more.
    pub(super) deployed: Arc<Mutex<BTreeSet<TypeRef>>>,
    /// The kinds watched whole (the extra watches, the kinds CRs read), watched once for
    /// all the shards of the replica; the shard's stores answer for them from there.
    pub(super) shared: Arc<SharedWatches>,
}

/// Start the primary kind's and the controller's extra watches, then route every event;
/// start a label-scoped watch for each kind the controller's reconciles deploy, as they
/// appear.
pub(super) async fn route_events(
    mut router: Router,
    sources: Sources,
    mut kinds: mpsc::UnboundedReceiver<Learned>,
) {
    let (events_tx, mut events) = mpsc::channel::<SourceEvent>(source::EVENTS_IN_FLIGHT);
    let mut watches = Watches::new(sources, events_tx);
    watches
        .start_declared(router.primary(), declared_watches(&router))
        .await;
    let seeded: Vec<TypeRef> = watches
        .shard
        .as_ref()
        .map(|s| s.deployed.lock().iter().cloned().collect())
        .unwrap_or_default();
    for kind in seeded {
        if !router.watches_extra(&kind) {
            watches.watch_deployed(kind).await;
        }
    }
    loop {
        tokio::select! {
            Some(event) = events.recv() => {
                router.route(&event);
            }
            Some(released) = router.released() => {
                router.release(released);
            }
            Some(learned) = kinds.recv() => watches.learned(&mut router, learned).await,
            else => break,
        }
    }
}

/// The watches of one controller, and what it takes to start more.
struct Watches {
    live: Arc<LiveCluster>,
    stores: Arc<Stores>,
    /// The namespaces a namespaced kind is watched in (empty: all of them).
    namespaces: Vec<String>,
    observer: Arc<dyn WatchObserver>,
    initial_list: InitialList,
    /// Where the watches send what they see. Held here for as long as the dispatcher
    /// runs, so the channel stays open even while no watch runs.
    events: mpsc::Sender<SourceEvent>,
    /// The tasks that run the watches.
    tasks: JoinSet<()>,
    /// The label-scoped watches of the kinds the controller deploys, until a kind is
    /// watched whole because CRs read objects of it they do not own.
    scoped: HashMap<TypeRef, Vec<(AbortHandle, Watch)>>,
    /// The kinds watched whole for that reason.
    whole: HashSet<TypeRef>,
    /// The shard, when the controller is sharded.
    shard: Option<ShardScope>,
    /// The shard's subscription to the replica's shared watches, when sharded.
    subscription: Option<Subscription>,
}

impl Watches {
    fn new(sources: Sources, events: mpsc::Sender<SourceEvent>) -> Self {
        let Sources {
            live,
            stores,
            namespaces,
            observer,
            initial_list,
            shard,
        } = sources;
        let subscription = shard
            .as_ref()
            .map(|shard| shard.shared.subscribe(events.clone(), observer.clone()));
        Watches {
            live,
            stores,
            namespaces,
            observer,
            initial_list,
            events,
            tasks: JoinSet::new(),
            scoped: HashMap::new(),
            whole: HashSet::new(),
            shard,
            subscription,
        }
    }

    /// Have the replica's shared watches watch `kind` whole (see `SharedWatches`), keeping
    /// `keep` of each object, when sharded, with the shard's stores answering for it from
    /// theirs; `false` when not sharded (the kind is for this dispatcher to watch).
    fn share(
        &self,
        kind: &TypeRef,
        labels: Option<String>,
        keep: Keep,
        cluster_scoped: bool,
    ) -> bool {
        let Some(subscription) = &self.subscription else {
            return false;
        };
        // Lent before the first event can come: the router reads the kind from there.
        self.stores.lend(kind);
        subscription.watch(kind, labels, keep, cluster_scoped);
        true
    }

    /// Start watching `type_ref` (the objects matching `labels`, or all; within the shard
    /// `shard` when given), in every watched namespace or, for a cluster-scoped kind, once,
    /// through `live`, its store keeping `keep` of each object. Returns the watches started.
    fn start(
        &mut self,
        type_ref: &TypeRef,
        cluster_scoped: bool,
        labels: Option<String>,
        keep: Keep,
        shard: Option<String>,
        live: Arc<LiveCluster>,
    ) -> Vec<(AbortHandle, Watch)> {
        // Before the tasks start: from now on the store answers as the new watch's.
        self.stores.declare(type_ref, labels.as_deref(), keep);
        let mut started = Vec::new();
        for watch in Watch::spread(type_ref, &self.namespaces, cluster_scoped, labels, shard) {
            self.observer.declare(&watch);
            let handle = self.tasks.spawn(source::run(
                live.clone(),
                self.stores.clone(),
                watch.clone(),
                self.initial_list,
                self.events.clone(),
                self.observer.clone(),
            ));
            started.push((handle, watch));
        }
        started
    }

    /// Start the watches `declared`, each kind with its label selector (`None`: all); the
    /// `primary` kind's within the shard, when sharded.
    async fn start_declared(
        &mut self,
        primary: &TypeRef,
        declared: Vec<(TypeRef, Option<String>)>,
    ) {
        for (kind, labels) in declared {
            let scoped = cluster_scoped(&self.live, &kind).await;
            if kind != *primary && self.share(&kind, labels.clone(), Keep::Whole, scoped) {
                continue;
            }
            let (shard, live) = match &self.shard {
                Some(shard) if kind == *primary => match &shard.primary_live {
                    Some(selecting) => (None, selecting.clone()),
                    None => (Some(shard.labels.clone()), self.live.clone()),
                },
                _ => (None, self.live.clone()),
            };
            self.start(&kind, scoped, labels, Keep::Whole, shard, live);
        }
    }

    /// Start the watches what a reconcile learned calls for. A kind the controller
    /// watches already with an extra watch needs no other.
    async fn learned(&mut self, router: &mut Router, learned: Learned) {
        match learned {
            Learned::Deploys(kind) => {
                if !router.watches_extra(&kind) {
                    self.watch_deployed(kind).await;
                }
            }
            Learned::Reads {
                cr,
                component,
                objects,
            } => {
                let read = self.subscription.is_some().then(|| objects.clone());
                let mut shared = false;
                for kind in router.depend(&cr, &component, objects) {
                    if !router.watches_extra(&kind) {
                        shared |= self.watch_read(kind).await;
                    }
                }
                // A shared watch that listed before this shard subscribed sends it nothing
                // of what it listed: a change of a dependency since the rollout read it is
                // in the shared store, which the check of `depend` could not see before the
                // kind was lent.
                if let Some(read) = read.filter(|_| shared) {
                    router.queue_if_changed(&cr, &read);
                }
            }
        }
    }

    /// A kind the controller deploys: watch its objects that carry windlass's ownership
    /// label, unless the kind is watched already (by this dispatcher, or whole by the
    /// replica's shared watches).
    async fn watch_deployed(&mut self, kind: TypeRef) {
        if self.whole.contains(&kind) || self.scoped.contains_key(&kind) {
            return;
        }
        let cluster = cluster_scoped(&self.live, &kind).await;
        if let Some(shard) = &self.shard {
            shard.deployed.lock().insert(kind.clone());
            // Another shard's CRs read objects of the kind: the replica watches every one
            // of them already, this shard's own included.
            if shard.shared.watches_whole(&kind) {
                self.whole.insert(kind.clone());
                self.share(&kind, None, Keep::Digest, cluster);
                return;
            }
        }
        let shard = self.shard.as_ref().map(|shard| shard.labels.clone());
        tracing::info!(%kind, "watching the kind the controller deploys");
        let owned = crate::annotations::OWNER_UID.to_string();
        let started = self.start(
            &kind,
            cluster,
            Some(owned),
            Keep::Slim,
            shard,
            self.live.clone(),
        );
        self.scoped.insert(kind, started);
    }

    /// A kind CRs read without owning it (the dependency hash): watch every object of it,
    /// in place of its label-scoped watch, unless it is watched whole already. Returns
    /// whether the replica's shared watches watch it for this shard from now on.
    async fn watch_read(&mut self, kind: TypeRef) -> bool {
        if !self.whole.insert(kind.clone()) {
            return false;
        }
        let cluster = cluster_scoped(&self.live, &kind).await;
        // One watch per kind feeds its store: the label-scoped one ends
        // before the whole one starts, so it cannot write behind it; and
        // `start` declares the whole watch at once, with no wait between,
        // so the store never answers from the stopped watch's copies.
        if let Some(old) = self.scoped.remove(&kind) {
            retire(&mut self.tasks, &old, self.observer.as_ref()).await;
        }
        tracing::info!(%kind, "watching every object of a kind CRs read (dependency hash)");
        if self.share(&kind, None, Keep::Digest, cluster) {
            return true;
        }
        self.start(&kind, cluster, None, Keep::Digest, None, self.live.clone());
        false
    }
}

/// The watches known before any reconcile: the primary kind's, of every object, then the
/// controller's extra ones, each with its label selector.
fn declared_watches(router: &Router) -> Vec<(TypeRef, Option<String>)> {
    let primary = (router.primary().clone(), None);
    let extra = router.extra_watches().map(|w| {
        (
            w.type_ref.clone(),
            w.labels.as_ref().map(ToString::to_string),
        )
    });
    std::iter::once(primary).chain(extra).collect()
}

/// Stop the watches `old` and wait until they have stopped.
async fn retire(
    watches: &mut JoinSet<()>,
    old: &[(AbortHandle, Watch)],
    observer: &dyn WatchObserver,
) {
    let mut pending: HashSet<tokio::task::Id> = old.iter().map(|(h, _)| h.id()).collect();
    for (handle, watch) in old {
        handle.abort();
        observer.retired(watch);
    }
    while !pending.is_empty() {
        match watches.join_next_with_id().await {
            Some(Ok((id, ()))) => pending.remove(&id),
            Some(Err(e)) => pending.remove(&e.id()),
            None => break,
        };
    }
}

/// What the reconciles of a controller tell its router.
pub(super) enum Learned {
    /// A kind the controller deploys.
    Deploys(TypeRef),
    /// What a component of a CR reads without owning it ([`Event::Dependencies`]).
    Reads {
        cr: ObjectRef,
        component: String,
        objects: Vec<(ObjectRef, Option<String>)>,
    },
}

/// Whether `kind` is cluster-scoped (one watch for it, whatever the namespaces); a kind
/// discovery cannot find yet is watched per namespace and retried by its watch.
async fn cluster_scoped(live: &LiveCluster, kind: &TypeRef) -> bool {
    matches!(live.scope(kind).await, Ok(Scope::Cluster))
}

/// Tells the router about each kind a reconcile deployed, once, and about what the
/// components read without owning it: every report, once any component of the pipeline
/// has read something (until then the reports are all empty, and none is sent).
pub(super) struct KindsSeen {
    primary: TypeRef,
    seen: Mutex<HashSet<TypeRef>>,
    /// Whether a component has reported reading anything yet. Until one has, the router
    /// holds no dependency to clear, so the empty reports (every component's, for a
    /// controller without dependency hashes) are not sent.
    reads: std::sync::atomic::AtomicBool,
    tx: mpsc::UnboundedSender<Learned>,
}

impl KindsSeen {
    /// Tells `tx` about the kinds the controller of `primary` deploys and reads.
    pub(super) fn new(primary: TypeRef, tx: mpsc::UnboundedSender<Learned>) -> Self {
        KindsSeen {
            primary,
            seen: Mutex::default(),
            reads: std::sync::atomic::AtomicBool::new(false),
            tx,
        }
    }
}

impl Observer for KindsSeen {
    fn event(&self, event: &Event) {
        if let Event::Dependencies {
            cr,
            component,
            objects,
        } = event
        {
            use std::sync::atomic::Ordering::SeqCst;
            // Set before the report is sent: a later report of the same component (a
            // later reconcile of the CR) sees it, and is sent even when empty.
            if !objects.is_empty() {
                self.reads.store(true, SeqCst);
            } else if !self.reads.load(SeqCst) {
                return;
            }
            let _ = self.tx.send(Learned::Reads {
                cr: cr.clone(),
                component: component.clone(),
                objects: objects.clone(),
            });
            return;
        }
        // Rendered comes before the objects are applied, so the watch starts as early as
        // it can; what it misses meanwhile its first list reports.
        let Event::Rendered {
            objects,
            disabled: false,
            ..
        } = event
        else {
            return;
        };
        let mut seen = self.seen.lock();
        for object in objects {
            let kind = object.type_ref();
            // Asked before inserting: after the first reconciles every kind is known, and
            // a reconcile renders each of its objects.
            if kind != self.primary && !seen.contains(&kind) {
                seen.insert(kind.clone());
                let _ = self.tx.send(Learned::Deploys(kind));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cr: &str, objects: &[&str]) -> Event {
        Event::Dependencies {
            cr: ObjectRef::new("test.windlass.dev/v1", "Widget", Some("ns"), cr),
            component: "web".into(),
            objects: objects
                .iter()
                .map(|name| (ObjectRef::new("v1", "Secret", Some("ns"), *name), None))
                .collect(),
        }
    }

    fn reads(rx: &mut mpsc::UnboundedReceiver<Learned>) -> Vec<(String, usize)> {
        let mut out = Vec::new();
        while let Ok(learned) = rx.try_recv() {
            if let Learned::Reads { cr, objects, .. } = learned {
                out.push((cr.name, objects.len()));
            }
        }
        out
    }

    /// Hears nothing.
    struct Deaf;
    impl WatchObserver for Deaf {
        fn synced(&self, _: &Watch, _: bool) {}
        fn failed(&self, _: &Watch, _: &kube::runtime::watcher::Error) {}
    }

    /// The watches of shard 1 in `ns`, over `stores`, with the replica's `shared` watches.
    fn shard_watches(
        live: Arc<LiveCluster>,
        stores: Arc<Stores>,
        shared: &Arc<crate::runtime::shared_watches::SharedWatches>,
    ) -> Watches {
        let (events, _) = mpsc::channel(8);
        Watches::new(
            Sources {
                live,
                stores,
                namespaces: vec!["ns".into()],
                observer: Arc::new(Deaf),
                initial_list: InitialList::Streaming,
                shard: Some(ShardScope {
                    labels: "windlass.dev/shard=1".into(),
                    primary_live: None,
                    deployed: Arc::default(),
                    shared: shared.clone(),
                }),
            },
            events,
        )
    }

    #[tokio::test]
    async fn a_shard_deploying_a_kind_the_replica_watches_whole_starts_no_watch_of_its_own() {
        use crate::runtime::cache::Cached;
        use serde_json::json;

        let (live, shared) = crate::runtime::shared_watches::unanswered();
        let (secrets, maps) = (
            TypeRef::new("v1", "Secret"),
            TypeRef::new("v1", "ConfigMap"),
        );
        // Another shard's CRs read Secrets: the replica watches every one.
        let (tx, _events) = mpsc::channel(8);
        let other = shared.subscribe(tx, Arc::new(Deaf));
        other.watch(&secrets, None, Keep::Digest, false);
        let own = ObjectRef::new("v1", "Secret", Some("ns"), "w-settings");
        let copy = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "w-settings", "namespace": "ns", "resourceVersion": "3"}});
        shared.stores().replace(
            &secrets,
            Some("ns"),
            vec![(own.clone(), Arc::new(copy.clone()))],
        );

        let stores = Arc::new(Stores::over(shared.stores().clone()));
        let mut watches = shard_watches(live, stores.clone(), &shared);
        watches.watch_deployed(secrets.clone()).await;
        assert!(
            watches.scoped.is_empty(),
            "no label-scoped watch of Secrets"
        );
        assert!(watches.whole.contains(&secrets));
        // Answered from the replica's store, which keeps the Secret's digest too.
        let Cached::Present(kept) = stores.lookup_own(&own) else {
            panic!("the shard's store answers from the replica's");
        };
        assert_eq!(kept["metadata"], copy["metadata"]);
        // A kind nobody reads: its own watch, within the shard.
        watches.watch_deployed(maps.clone()).await;
        assert!(watches.scoped.contains_key(&maps));
    }

    #[tokio::test]
    async fn a_shard_subscribing_late_queues_a_reader_whose_dependency_moved_since_it_read() {
        use crate::runtime::cache::CachedCluster;
        use crate::runtime::queue;
        use crate::watch::filter::{GlobalFilter, WatchFilters};
        use serde_json::json;

        // A server nobody answers: the shared watch never lists; the test fills its store
        // as a listing would have, before this shard subscribed.
        let (live, shared) = crate::runtime::shared_watches::unanswered();
        let secrets = TypeRef::new("v1", "Secret");
        let (tx, _events) = mpsc::channel(8);
        let first = shared.subscribe(tx, Arc::new(Deaf));
        first.watch(&secrets, None, Keep::Digest, false);
        let secret = ObjectRef::new("v1", "Secret", Some("ns"), "credentials");
        shared.stores().replace(
            &secrets,
            Some("ns"),
            vec![(
                secret.clone(),
                Arc::new(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "credentials", "namespace": "ns", "resourceVersion": "8"}})),
            )],
        );

        // Another shard: its CR read the Secret at 5, from the API server.
        let stores = Arc::new(Stores::over(shared.stores().clone()));
        let cluster = Arc::new(CachedCluster::new(live.clone(), stores.clone()));
        let queue = queue::new_queue(1, Default::default()).unwrap();
        let widgets = TypeRef::new("test.windlass.dev/v1", "Widget");
        let mut router = Router::new(
            widgets.clone(),
            queue.clone(),
            cluster,
            GlobalFilter::Default.spec(),
            WatchFilters::default(),
            Vec::new(),
        );
        let cr = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "uid": "w-uid",
                "resourceVersion": "1", "generation": 1}});
        let reference = ObjectRef::from_manifest(&cr).unwrap();
        router.route(&SourceEvent {
            kind: crate::watch::filter::EventKind::Added,
            reference: reference.clone(),
            object: Arc::new(cr),
            listed: false,
        });
        assert!(queue.remove(&reference), "queued when first seen");

        let mut watches = shard_watches(live, stores, &shared);
        watches
            .learned(
                &mut router,
                Learned::Reads {
                    cr: reference.clone(),
                    component: "web".into(),
                    objects: vec![(secret, Some("5".into()))],
                },
            )
            .await;
        assert!(
            queue.contains(&reference),
            "the shared store has 8: the reader is reconciled again"
        );
    }

    #[test]
    fn empty_reports_go_to_the_router_only_once_a_component_has_read_something() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let seen = KindsSeen::new(TypeRef::new("test.windlass.dev/v1", "Widget"), tx);
        seen.event(&report("a", &[]));
        seen.event(&report("b", &[]));
        assert!(
            reads(&mut rx).is_empty(),
            "nothing read yet: nothing to clear"
        );

        seen.event(&report("a", &["credentials"]));
        // a stops reading it: the router must hear, and so must every later report.
        seen.event(&report("a", &[]));
        seen.event(&report("b", &[]));
        assert_eq!(
            reads(&mut rx),
            [
                ("a".to_string(), 1),
                ("a".to_string(), 0),
                ("b".to_string(), 0)
            ]
        );
    }
}
