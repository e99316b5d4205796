//! One controller, sharded: a pipeline per shard the replica serves (its own watches,
//! caches, router, queue and worker, as the runtime runs one for an unsharded controller),
//! started and stopped as the replica-wide loop says ([`Command`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use windlass_tasks::backoff::BackOffPolicy;

use super::super::cache::{CachedCluster, Stores};
use super::super::dispatch::{self, KindsSeen, ShardScope, Sources};
use super::super::fence::Fenced;
use super::super::metrics::Metrics;
use super::super::queue::{self, ReconcileQueue};
use super::super::route::Router;
use super::super::shared_watches::SharedWatches;
use super::super::source::{Watch, WatchObserver};
use super::super::worker::{self, WorkerSettings};
use super::super::{Context, DRAIN, Running};
use super::{Command, Sharding, labeller, server};
use crate::cluster::{Cluster, LiveCluster};
use crate::config::sharding::{label_selector, server_selector};
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::object::TypeRef;
use crate::reconcile::Reconciler;
use crate::runtime::leader::Leadership;

/// What every shard of one controller is started from.
struct Shared<C: Controller> {
    /// The controller's reconciler; each shard's is a copy over the shard's cache.
    template: Reconciler<C>,
    primary: TypeRef,
    name: String,
    live: Arc<LiveCluster>,
    client: kube::Client,
    namespaces: Vec<String>,
    initial_list: super::super::source::InitialList,
    global: crate::watch::filter::FilterSpec,
    observer: Arc<dyn worker::ReconcileObserver>,
    metrics: Arc<Metrics>,
    concurrency: usize,
    period: Option<std::time::Duration>,
    lock_poll: std::time::Duration,
    /// The reconciles running at once across the shards.
    permits: Arc<Semaphore>,
    /// The kinds the reconciles deployed, in any shard.
    deployed: Arc<Mutex<BTreeSet<TypeRef>>>,
    shards: u32,
    selecting: bool,
    /// The kinds watched whole, once for every shard the replica holds.
    watches: Arc<SharedWatches>,
}

/// Start `controller` sharded: its shards come and go as `sharding` says.
pub(crate) fn start_controller<C: Controller>(
    controller: C,
    context: &Context,
    sharding: &Arc<Sharding>,
) -> Result<Running> {
    let primary = {
        use kube::Resource as _;
        TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()))
    };
    let operator = &context.operator;
    let (_, period) = queue::from_config(operator)
        .map_err(|e| Error::config(format!("runtime.max-concurrent-reconciles: {e}")))?;
    let concurrency = operator.runtime.max_concurrent_reconciles.max(1) as usize;
    let template = Reconciler::new(
        controller,
        context.cluster.clone() as Arc<dyn Cluster>,
        (**operator).clone(),
    )
    .with_events(Arc::new(crate::events::LiveEventSink::new(
        context.client.clone(),
    )));
    let shared = Arc::new(Shared {
        template,
        primary: primary.clone(),
        name: crate::controller::controller_display::<C>(),
        live: context.live.clone(),
        client: context.client.clone(),
        namespaces: operator.watch_namespaces(),
        initial_list: context.initial_list,
        global: context.global.clone(),
        observer: context.observer.clone(),
        metrics: context.metrics.clone(),
        concurrency,
        period,
        lock_poll: operator.leader_election.retry_period.into(),
        permits: Arc::new(Semaphore::new(concurrency)),
        deployed: Arc::default(),
        shards: sharding.shards(),
        selecting: sharding.selecting(),
        watches: SharedWatches::new(
            context.live.clone(),
            &operator.watch_namespaces(),
            context.initial_list,
            context.metrics.clone(),
        ),
    });
    let commands = sharding.subscribe();
    let held: Arc<Mutex<BTreeMap<u32, Leadership>>> = Arc::default();
    let labeller = (!shared.selecting).then(|| {
        tokio::spawn(labeller::run(
            shared.live.clone(),
            primary.clone(),
            shared.namespaces.clone(),
            shared.initial_list,
            shared.shards,
            held.clone(),
            shared.lock_poll,
        ))
    });
    let worker = tokio::spawn(supervise(shared, commands, held, context.stop.clone()));
    let router = labeller.unwrap_or_else(|| tokio::spawn(async {}));
    Ok(Running {
        kind: primary,
        queue: None,
        worker,
        router,
    })
}

/// Run the shards `commands` ask for until `stop`; then stop them all.
async fn supervise<C: Controller>(
    shared: Arc<Shared<C>>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    held: Arc<Mutex<BTreeMap<u32, Leadership>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut cells: BTreeMap<u32, Cell> = BTreeMap::new();
    // Shards being stopped: their drains run while the others go on.
    let mut stopping = JoinSet::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Serve { shard, leadership }) => {
                    held.lock().insert(shard, leadership.clone());
                    if let Some(old) = cells.insert(shard, Cell::start(&shared, shard, leadership)) {
                        stopping.spawn(old.stop());
                    }
                }
                Some(Command::Stop { shard, done }) => {
                    held.lock().remove(&shard);
                    let cell = cells.remove(&shard);
                    stopping.spawn(async move {
                        if let Some(cell) = cell {
                            cell.stop().await;
                        }
                        let _ = done.send(());
                    });
                }
                None => break,
            },
            Some(_) = stopping.join_next(), if !stopping.is_empty() => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    held.lock().clear();
    for (_, cell) in std::mem::take(&mut cells) {
        stopping.spawn(cell.stop());
    }
    while stopping.join_next().await.is_some() {}
}

/// One shard of one controller, running.
struct Cell {
    shard: u32,
    queue: ReconcileQueue,
    stop: watch::Sender<bool>,
    worker: JoinHandle<()>,
    router: JoinHandle<()>,
}

impl Cell {
    /// Start serving `shard`: its watches at once, its reconciles once they have listed
    /// and while `leadership` leads.
    fn start<C: Controller>(shared: &Arc<Shared<C>>, shard: u32, leadership: Leadership) -> Cell {
        let began = Instant::now();
        let stores = Arc::new(Stores::over(shared.watches.stores().clone()));
        let cluster = Arc::new(CachedCluster::new(shared.live.clone(), stores.clone()));
        // The queue's own bound is the controller's; the permits bound all shards together.
        let queue = queue::new_queue(shared.concurrency, BackOffPolicy::default())
            .unwrap_or_else(|_| ReconcileQueue::new());
        let (kinds_tx, kinds_rx) = mpsc::unbounded_channel();
        let fenced = Arc::new(Fenced::new(
            cluster.clone() as Arc<dyn Cluster>,
            leadership.clone(),
        ));
        let reconciler = shared
            .template
            .clone()
            .with_cluster(fenced)
            .with_observer(KindsSeen::new(shared.primary.clone(), kinds_tx));
        let (extra, filters) = shared.template.controller().watches().into_parts();
        let mut expected: HashSet<TypeRef> = shared.deployed.lock().iter().cloned().collect();
        expected.insert(shared.primary.clone());
        expected.extend(extra.iter().map(|w| w.type_ref.clone()));
        let warmth = Arc::new(Warmth::new(expected, shared.metrics.clone()));
        let router = Router::new(
            shared.primary.clone(),
            queue.clone(),
            cluster,
            shared.global.clone(),
            filters,
            extra,
        );
        let primary_live = shared.selecting.then(|| {
            let selector = server_selector(shard, shared.shards);
            Arc::new(LiveCluster::new(server::selecting_client(
                &shared.client,
                &selector,
            )))
        });
        let router = tokio::spawn(dispatch::route_events(
            router,
            Sources {
                live: shared.live.clone(),
                stores,
                namespaces: shared.namespaces.clone(),
                observer: warmth.clone(),
                initial_list: shared.initial_list,
                shard: Some(ShardScope {
                    labels: label_selector(shard),
                    primary_live,
                    deployed: shared.deployed.clone(),
                    shared: shared.watches.clone(),
                }),
            },
            kinds_rx,
        ));
        let (stop, stopped) = watch::channel(false);
        let settings = WorkerSettings {
            name: shared.name.clone(),
            period: shared.period,
            lock_poll: shared.lock_poll,
            drain: DRAIN,
            permits: Some(shared.permits.clone()),
        };
        let worker = tokio::spawn(serve(
            shard,
            began,
            warmth,
            reconciler,
            queue.clone(),
            leadership,
            settings,
            shared.observer.clone(),
            stopped,
        ));
        Cell {
            shard,
            queue,
            stop,
            worker,
            router,
        }
    }

    /// Stop serving the shard: no new reconcile starts, those in flight finish (up to the
    /// drain bound), then the watches stop and the cache is dropped.
    async fn stop(self) {
        let _ = self.stop.send(true);
        self.queue.shutdown();
        if let Err(e) = self.worker.await {
            tracing::warn!(shard = self.shard, error = %e, "a shard's worker ended abnormally");
        }
        self.router.abort();
        let _ = self.router.await;
        tracing::debug!(shard = self.shard, "stopped serving the shard");
    }
}

/// The longest a shard's reconciles wait for its first watches to list: a watch that
/// cannot list (its kind is gone, its access revoked) must not stop the shard for good.
/// Its reconciles then read what the cache lacks from the API server, as those of an
/// unsharded controller do before its watches have listed.
const WARM_UP_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The worker of one shard: wait until its caches are warm, then reconcile while its
/// Lease leads. Logs when each happened, counted from `began` (the takeover's parts).
#[allow(clippy::too_many_arguments)] // one shard's whole worker; a struct would only rename it
async fn serve<C: Controller>(
    shard: u32,
    began: Instant,
    warmth: Arc<Warmth>,
    reconciler: Reconciler<C>,
    queue: ReconcileQueue,
    leadership: Leadership,
    settings: WorkerSettings,
    observer: Arc<dyn worker::ReconcileObserver>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut warm = warmth.warm.subscribe();
    tokio::select! {
        waited = tokio::time::timeout(WARM_UP_LIMIT, warm.wait_for(|warm| *warm)) => {
            if waited.is_err() {
                tracing::warn!(
                    shard,
                    limit = ?WARM_UP_LIMIT,
                    "a watch of the shard has not listed yet; reconciling it anyway, reading \
                     what its cache lacks from the API server"
                );
            }
        }
        _ = stopped.wait_for(|stop| *stop) => return,
    }
    let warm_after = began.elapsed();
    tokio::select! {
        () = leadership.wait_until_leader() => {}
        _ = stopped.wait_for(|stop| *stop) => return,
    }
    tracing::info!(
        shard,
        controller = %settings.name,
        warm_after_ms = warm_after.as_millis() as u64,
        leading_after_ms = began.elapsed().as_millis() as u64,
        "serving the shard: its caches are warm and its Lease is held"
    );
    worker::run(reconciler, queue, leadership, settings, observer, stopped).await;
}

/// Whether a shard's first watches have listed: the primary kind's, the extra ones and
/// those of the kinds deployed so far. Its watches report failures to the metrics, not to
/// readiness: a shard warming up after a takeover does not make the replica unready.
struct Warmth {
    expected: HashSet<TypeRef>,
    state: Mutex<WarmState>,
    warm: watch::Sender<bool>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct WarmState {
    /// The watches of expected kinds not listed yet.
    pending: HashSet<Watch>,
    /// The expected kinds that have a watch.
    declared: HashSet<TypeRef>,
}

impl Warmth {
    fn new(expected: HashSet<TypeRef>, metrics: Arc<Metrics>) -> Self {
        Warmth {
            expected,
            state: Mutex::default(),
            warm: watch::Sender::new(false),
            metrics,
        }
    }
}

impl WatchObserver for Warmth {
    fn declare(&self, watch: &Watch) {
        if self.expected.contains(&watch.type_ref) && !*self.warm.borrow() {
            let mut state = self.state.lock();
            state.pending.insert(watch.clone());
            state.declared.insert(watch.type_ref.clone());
        }
    }

    fn synced(&self, watch: &Watch, synced: bool) {
        if !synced {
            return;
        }
        let mut state = self.state.lock();
        state.pending.remove(watch);
        if state.pending.is_empty() && state.declared.len() == self.expected.len() {
            self.warm
                .send_if_modified(|warm| !std::mem::replace(warm, true));
        }
    }

    fn failed(&self, watch: &Watch, _: &kube::runtime::watcher::Error) {
        self.metrics.watch_restarted(&watch.type_ref);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(kind: &str, namespace: &str) -> Watch {
        Watch {
            type_ref: TypeRef::new("v1", kind),
            namespace: Some(namespace.to_string()),
            labels: None,
            shard: Some(label_selector(1)),
        }
    }

    #[test]
    fn a_shard_is_warm_once_every_expected_watch_has_listed() {
        let expected: HashSet<TypeRef> = [
            TypeRef::new("v1", "Widget"),
            TypeRef::new("v1", "ConfigMap"),
        ]
        .into();
        let warmth = Warmth::new(expected, Arc::new(Metrics::new()));
        let warm = || *warmth.warm.borrow();
        warmth.declare(&watch("Widget", "a"));
        warmth.declare(&watch("Widget", "b"));
        warmth.synced(&watch("Widget", "a"), true);
        warmth.synced(&watch("Widget", "b"), true);
        assert!(!warm(), "the ConfigMaps' watch is not even started");
        warmth.declare(&watch("ConfigMap", "a"));
        warmth.declare(&watch("Secret", "a"));
        warmth.synced(&watch("ConfigMap", "a"), false);
        assert!(!warm());
        warmth.synced(&watch("ConfigMap", "a"), true);
        assert!(warm(), "a kind learned later is not waited for");
        // Once warm, a relist does not make the shard cold again.
        warmth.synced(&watch("Widget", "a"), false);
        assert!(warm());
    }
}
