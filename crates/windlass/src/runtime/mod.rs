//! The operator runtime: a long-lived process that turns watch events into reconciles
//! (built on kube-runtime streams and tokio tasks).
//!
//! The files follow the path of an event:
//!
//! ```text
//! watcher/reflector per kind ─▶ event ─▶ filter (global, per controller, pause)
//!                                          │  map child → CR (owner ref / label)
//!                                          ▼
//!                                  queue (one run per CR, newest pending, back-off)
//!                                          │  leader?
//!                                          ▼
//!                              Reconciler over a cache-backed Cluster
//!                                          │
//!                                          ▼
//!                           status, Events, metrics ─▶ Action ─▶ queue
//! ```
//!
//! - `source`: watches, one per kind and namespace, filling the `cache`.
//! - `dispatch`: one controller's watches, started as its reconciles learn which kinds
//!   they deploy and read, and their events routed (`route`) into its queue.
//! - [`filter`](crate::watch::filter): which events start a reconcile.
//! - `queue`: when each CR is reconciled.
//! - `leader`: which replica may start reconciles; `fence`: no write of a reconcile once
//!   its lock passed the renew deadline.
//! - `shard`: replicas that share the CRs by shard (`sharding.shards`), a pipeline of
//!   watches, caches, queue and worker per shard a replica holds.
//! - `cache`: the cluster a reconcile reads through, answered from the watches.
//! - `dependencies`: the Secrets and ConfigMaps CRs read without owning them, so that
//!   their changes reconcile them (the runtime's half of `rollout::dependency_hash`).
//! - `echo`: windlass's own writes, in flight and landed, so the router can tell their
//!   echoes from changes by others; `held`: the events it holds until such a write
//!   lands.
//! - `metrics`: what `/metrics` exports.
//! - `heartbeat`: the heartbeat file and its check, for exec liveness probes.
//! - `health`: the `/metrics`, `/healthz` and `/readyz` server, and what readiness waits for.
//! - `debug`: the runtime's view of one CR (queue place, failures, last reconcile), for
//!   `describe`, when `server.debug-endpoints` is on.

pub(crate) mod cache;
pub(crate) mod debug;
pub(crate) mod dependencies;
mod dispatch;
pub(crate) mod echo;
mod fence;
pub(crate) mod health;
pub(crate) mod heartbeat;
pub(crate) mod held;
mod secure;
mod shared_watches;
mod tolerant;
// The lock itself is internal; windlass's own live tests drive it directly through the
// `testing` feature.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod leader;
#[cfg(not(feature = "testing"))]
pub(crate) mod leader;
pub(crate) mod metrics;
pub(crate) mod queue;
pub(crate) mod route;
// The shards' assignment is internal; windlass's live tests compute what to expect with it
// through the `testing` feature.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod shard;
#[cfg(not(feature = "testing"))]
mod shard;
pub(crate) mod source;
pub(crate) mod worker;

// The watch caches are the runtime's own; tests inspect them (feature `testing`).
#[cfg(not(feature = "testing"))]
pub(crate) use cache::CachedCluster;
#[cfg(feature = "testing")]
pub use cache::{Cached, CachedCluster};
pub use source::InitialList;
pub use worker::ReconcileObserver;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::cluster::{Cluster, LiveCluster, RequestCounter};
use crate::config::{LockKind, OperatorConfig};
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::events::LiveEventSink;
use crate::object::TypeRef;
use crate::reconcile::Reconciler;
use crate::watch::filter::GlobalFilter;
use cache::Stores;
use dispatch::KindsSeen;
use health::Health;
use heartbeat::Heartbeat;
use leader::{Leadership, LockSettings};
use metrics::Metrics;
use source::{Watch, WatchObserver};
use worker::WorkerSettings;

/// How long reconciles in flight may finish after a shutdown signal before they are
/// cancelled.
pub(crate) const DRAIN: Duration = Duration::from_secs(20);

/// Runs controllers against a real cluster: one client, one set of watch caches, one
/// leadership, one shutdown. Each controller has its own
/// watches, filters and queue.
///
/// ```no_run
/// # use windlass::prelude::*;
/// # async fn run<C: Controller>(controller: C) -> windlass::Result<()> {
/// let client = kube::Client::try_default().await.map_err(|e| windlass::Error::with_source("cannot reach the cluster", e))?;
/// windlass::runtime::Manager::new(client, windlass::config::OperatorConfig::default())
///     .controller(controller)
///     .run(async { let _ = tokio::signal::ctrl_c().await; })
///     .await
/// # }
/// ```
pub struct Manager {
    client: kube::Client,
    live: Arc<LiveCluster>,
    cluster: Arc<CachedCluster>,
    operator: Arc<OperatorConfig>,
    controllers: Vec<Box<dyn Start>>,
    observers: Vec<Arc<dyn ReconcileObserver>>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    initial_list: source::InitialList,
    conversions: Vec<crate::crd::ApiVersions<()>>,
    admissions: Vec<Arc<dyn crate::webhook::admission::Admits>>,
    serving: watch::Sender<Serving>,
}

/// Where a running [`Manager`] answers, once its servers have bound their addresses: a
/// configured port 0 is here the port the system picked (see [`Manager::serving`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Serving {
    /// The address of `/metrics`.
    pub metrics: Option<std::net::SocketAddr>,
    /// The address of `/healthz` and `/readyz` (the metrics server's when it answers them).
    pub probes: Option<std::net::SocketAddr>,
}

impl Manager {
    /// A manager over `client`, configured by `operator`. Its `/metrics` carry no API
    /// request counts; [`Manager::from_config`] builds a client that counts them.
    pub fn new(client: kube::Client, operator: OperatorConfig) -> Self {
        Self::with_metrics(client, operator, Metrics::new())
    }

    /// A manager with a client built from `config` whose requests are counted by verb,
    /// resource and code on `/metrics`, each (but watches) failing after
    /// `runtime.request-timeout`.
    ///
    /// # Errors
    /// [`Error::Other`] when the client cannot be built from `config`.
    pub fn from_config(config: kube::Config, operator: OperatorConfig) -> Result<Self> {
        let requests = RequestCounter::new();
        let client = requests
            .client_with_timeout(config, operator.runtime.request_timeout.into())
            .map_err(|e| Error::with_source("cannot build the kube client", e))?;
        Ok(Self::with_metrics(
            client,
            operator,
            Metrics::with_requests(requests),
        ))
    }

    fn with_metrics(client: kube::Client, operator: OperatorConfig, metrics: Metrics) -> Self {
        let live = Arc::new(LiveCluster::new(client.clone()));
        let cluster = Arc::new(CachedCluster::new(live.clone(), Arc::new(Stores::new())));
        metrics.watch_caches(cluster.stores().clone());
        let metrics = Arc::new(metrics);
        Manager {
            client,
            live,
            cluster,
            operator: Arc::new(operator),
            controllers: Vec::new(),
            observers: vec![metrics.clone()],
            metrics,
            health: Arc::new(Health::new()),
            initial_list: source::InitialList::from_env(),
            conversions: Vec::new(),
            admissions: Vec::new(),
            serving: watch::channel(Serving::default()).0,
        }
    }

    /// Where the manager answers once it runs and its servers have bound their addresses,
    /// e.g. to learn the port of `server.metrics-bind-address: 127.0.0.1:0`. An address
    /// that cannot be bound stays `None` (and the error is logged).
    ///
    /// ```no_run
    /// # async fn run(manager: windlass::runtime::Manager) {
    /// let mut serving = manager.serving();
    /// tokio::spawn(manager.run(std::future::pending()));
    /// let metrics = serving.wait_for(|s| s.metrics.is_some()).await.unwrap().metrics;
    /// # }
    /// ```
    pub fn serving(&self) -> watch::Receiver<Serving> {
        self.serving.subscribe()
    }

    /// The registry `/metrics` serves, to register an operator's own metrics next to
    /// windlass's (they are prefixed `windlass_` too). Do not hold the guard across an
    /// `.await`: scrapes wait for it.
    pub fn metrics_registry(
        &self,
    ) -> parking_lot::MutexGuard<'_, prometheus_client::registry::Registry> {
        self.metrics.registry()
    }

    /// Add a controller; it runs with the others when the manager runs.
    pub fn controller<C: Controller>(mut self, controller: C) -> Self {
        self.controllers.push(Box::new(Pending(controller)));
        self
    }

    /// Serve the conversions between the API versions of a CRD (see [`crate::crd`]): the
    /// webhook server runs, and its CA is injected into the CRD, before any controller
    /// starts. A CRD of one version converts nothing and starts no server.
    pub fn crd_versions<K>(mut self, versions: &crate::crd::ApiVersions<K>) -> Self {
        if versions.converts() {
            self.conversions.push(versions.erased());
        }
        self
    }

    /// Serve the admission webhooks of `admission` (see [`crate::admission`]) and register
    /// them with the API server, before any controller starts.
    pub fn admission<K: crate::resource::PrimaryResource>(
        mut self,
        admission: crate::admission::Admission<K>,
    ) -> Self {
        if admission.validates() || admission.mutates() {
            self.admissions.push(Arc::new(admission));
        }
        self
    }

    /// [`admission`](Self::admission), its type erased.
    pub(crate) fn admits(mut self, admits: Arc<dyn crate::webhook::admission::Admits>) -> Self {
        self.admissions.push(admits);
        self
    }

    /// Observe every reconcile too (besides the metrics).
    pub fn with_observer(mut self, observer: Arc<dyn ReconcileObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    /// How the watches list what exists: streaming lists by default (unless
    /// `KUBE_FEATURE_WatchListClient=false`), paged lists on request. A server that
    /// refuses streaming lists gets paged ones either way.
    pub fn initial_list(mut self, initial_list: InitialList) -> Self {
        self.initial_list = initial_list;
        self
    }

    /// The cluster reconciles read and write through: the watch caches over the API.
    #[cfg(feature = "testing")]
    pub fn cluster(&self) -> &Arc<CachedCluster> {
        &self.cluster
    }

    /// Run until `shutdown` resolves; then stop taking work, let reconciles in flight
    /// finish (up to 20 s), release the leadership and return.
    ///
    /// # Errors
    /// [`Error::Config`] for a configuration the runtime cannot work with (the global
    /// filter, the lock); a cluster error if the lock cannot be set up.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        // A configuration built in code has not been through the loader's checks.
        self.operator
            .validate()
            .map_err(|problems| Error::config(problems.join("; ")))?;
        let global = GlobalFilter::from_config(&self.operator).spec();
        let settings = LockSettings::from_config(&self.operator)?;
        let (stop_tx, stop) = watch::channel(false);
        let mut background = JoinSet::new();
        if !self.conversions.is_empty() || !self.admissions.is_empty() {
            // Before the leadership and the watches: CRs stored in another version cannot
            // even be listed until the conversions are served.
            crate::webhook::start(
                self.client.clone(),
                &self.operator.webhook,
                self.conversions.clone(),
                self.admissions.clone(),
                &mut background,
                stop.clone(),
            )
            .await?;
        }
        let leadership = Leadership::start(
            &settings,
            self.client.clone(),
            self.cluster.clone() as Arc<dyn Cluster>,
        )
        .await?;
        let sharding = if settings.kind == LockKind::Sharded {
            Some(
                shard::Sharding::start(&settings, &self.operator.sharding, self.client.clone())
                    .await?,
            )
        } else {
            None
        };
        self.report_leadership(&mut background, &settings, &leadership);
        let debug = self
            .operator
            .server
            .debug_endpoints
            .then(|| Arc::new(debug::Debug::default()));
        self.serve_endpoints(&mut background, &stop, debug.as_ref());
        let heartbeat = self
            .operator
            .heartbeat
            .file
            .clone()
            .map(|file| Heartbeat::spawn(file, self.operator.heartbeat.period.into()));
        let mut context = self.context(leadership.clone(), global, debug.as_ref(), stop);
        context.sharding = sharding.clone();
        let running = start_controllers(self.controllers, &context, debug.as_deref())?;
        // The controllers have subscribed: shards may be handed out.
        if let Some(sharding) = &sharding {
            sharding.run();
        }
        tracing::info!(controllers = running.len(), "running");
        shutdown.await;
        tracing::info!("shutting down: no new reconciles");
        self.health.set_shutting_down();
        let _ = stop_tx.send(true);
        wind_down(running, leadership, sharding, heartbeat, background).await;
        Ok(())
    }

    /// Keep readiness (when it waits for the leadership) and the leader gauge in step
    /// with `leadership`, in the background.
    fn report_leadership(
        &self,
        background: &mut JoinSet<()>,
        settings: &LockSettings,
        leadership: &Leadership,
    ) {
        if matches!(
            settings.kind,
            LockKind::LeaderWithLease | LockKind::LeaderForLife
        ) {
            self.health.require_leadership();
        }
        background.spawn(follow_leadership(
            leadership.clone(),
            settings.timing.poll,
            self.health.clone(),
            self.metrics.clone(),
        ));
    }

    /// Serve `/metrics` and the probes on the configured addresses (one server for both,
    /// or one each), in the background until `stop`. When some server answers the probes,
    /// readiness also asks the API server whether it is ready.
    fn serve_endpoints(
        &self,
        background: &mut JoinSet<()>,
        stop: &watch::Receiver<bool>,
        debug: Option<&Arc<debug::Debug>>,
    ) {
        let endpoints = self.operator.endpoints();
        let servers = match (endpoints.metrics, endpoints.probes) {
            (Some(metrics), Some(probes)) => vec![
                (metrics, health::Serves::Metrics),
                (probes, health::Serves::Probes),
            ],
            (Some(metrics), None) => vec![(metrics, health::Serves::Everything)],
            (None, Some(probes)) => vec![(probes, health::Serves::Probes)],
            (None, None) => Vec::new(),
        };
        if servers
            .iter()
            .any(|(_, serves)| *serves != health::Serves::Metrics)
        {
            self.health.probe_api(self.client.clone());
        }
        for (address, serves) in servers {
            let mut stopped = stop.clone();
            let endpoints = health::Endpoints {
                metrics: self.metrics.clone(),
                health: self.health.clone(),
                debug: debug.cloned(),
                // The configuration's checks keep the probes on a server of their own.
                authorizer: (self.operator.server.secure_metrics
                    && serves == health::Serves::Metrics)
                    .then(|| secure::Authorizer::new(self.client.clone())),
            };
            let serving = self.serving.clone();
            background.spawn(async move {
                let until = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                let bound = |bound| {
                    serving.send_modify(|s: &mut Serving| {
                        if serves != health::Serves::Probes {
                            s.metrics = Some(bound);
                        }
                        if serves != health::Serves::Metrics {
                            s.probes = Some(bound);
                        }
                    });
                };
                if let Err(e) = health::serve(address, serves, endpoints, until, bound).await {
                    tracing::error!(%address, error = %e, "cannot serve {serves:?}");
                }
            });
        }
    }

    /// What every controller shares: the clients, the leadership, the observers of
    /// reconciles (the debug endpoints' among them, when on) and of watches.
    fn context(
        &self,
        leadership: Leadership,
        global: crate::watch::filter::FilterSpec,
        debug: Option<&Arc<debug::Debug>>,
        stop: watch::Receiver<bool>,
    ) -> Context {
        let mut observers = self.observers.clone();
        if let Some(debug) = debug {
            observers.push(debug.clone());
        }
        Context {
            client: self.client.clone(),
            live: self.live.clone(),
            cluster: self.cluster.clone(),
            operator: self.operator.clone(),
            leadership,
            observer: Arc::new(Fanout(observers)),
            watches: Arc::new(Telemetry {
                health: self.health.clone(),
                metrics: self.metrics.clone(),
            }),
            global,
            initial_list: self.initial_list,
            stop,
            metrics: self.metrics.clone(),
            sharding: None,
        }
    }
}

/// Start every controller, registering each with the debug endpoints when they are on.
fn start_controllers(
    controllers: Vec<Box<dyn Start>>,
    context: &Context,
    debug: Option<&debug::Debug>,
) -> Result<Vec<Running>> {
    let mut running = Vec::new();
    for controller in controllers {
        let started = controller.start(context)?;
        if let (Some(debug), Some(queue)) = (debug, &started.queue) {
            debug.register(started.kind.clone(), queue.clone());
        }
        running.push(started);
    }
    Ok(running)
}

/// Stop after the shutdown signal, in order: the queues take no more work, the workers
/// finish what is in flight (up to [`DRAIN`]) and the routers stop, the leadership (the
/// shards' Leases and the membership, when sharded) is released, then the heartbeat and
/// the servers stop.
async fn wind_down(
    running: Vec<Running>,
    leadership: Leadership,
    sharding: Option<Arc<shard::Sharding>>,
    heartbeat: Option<Heartbeat>,
    mut background: JoinSet<()>,
) {
    for controller in &running {
        if let Some(queue) = &controller.queue {
            queue.shutdown();
        }
    }
    for controller in running {
        if let Err(e) = controller.worker.await {
            tracing::warn!(error = %e, "a worker ended abnormally");
        }
        controller.router.abort();
    }
    if let Some(sharding) = sharding {
        sharding.shutdown().await;
    }
    if let Err(e) = leadership.shutdown().await {
        tracing::warn!(error = %e, "cannot release the leadership; it expires on its own");
    }
    if let Some(heartbeat) = heartbeat {
        heartbeat.stop().await;
    }
    background.shutdown().await;
}

/// What every controller of a manager shares.
struct Context {
    client: kube::Client,
    live: Arc<LiveCluster>,
    cluster: Arc<CachedCluster>,
    operator: Arc<OperatorConfig>,
    leadership: Leadership,
    observer: Arc<dyn ReconcileObserver>,
    watches: Arc<dyn WatchObserver>,
    global: crate::watch::filter::FilterSpec,
    initial_list: source::InitialList,
    stop: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
    /// The shards, when the CRs are sharded.
    sharding: Option<Arc<shard::Sharding>>,
}

/// A controller that runs.
struct Running {
    kind: TypeRef,
    /// Its queue; `None` when sharded (a queue per shard, stopped by `worker`).
    queue: Option<queue::ReconcileQueue>,
    /// The task that reconciles; it ends once the queue (or `stop`) shut it down and the
    /// reconciles in flight ended.
    worker: JoinHandle<()>,
    router: JoinHandle<()>,
}

/// A controller waiting for the manager to run (type-erased, so one manager hosts
/// several controllers).
trait Start: Send {
    fn start(self: Box<Self>, context: &Context) -> Result<Running>;
}

struct Pending<C>(C);

impl<C: Controller> Start for Pending<C> {
    fn start(self: Box<Self>, context: &Context) -> Result<Running> {
        let controller = self.0;
        if let Some(sharding) = &context.sharding {
            return shard::start_controller(controller, context, sharding);
        }
        let primary = {
            use kube::Resource as _;
            TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()))
        };
        let name = crate::controller::controller_display::<C>();
        let operator = &context.operator;
        let (queue, period) = queue::from_config(operator)
            .map_err(|e| Error::config(format!("runtime.max-concurrent-reconciles: {e}")))?;
        let (controller_watches, filters) = controller.watches().into_parts();
        let (kinds_tx, kinds_rx) = mpsc::unbounded_channel();
        // The reconciles write only while this replica leads: a reconcile still running at
        // the renew deadline writes nothing after it.
        let fenced = fence::Fenced::new(
            context.cluster.clone() as Arc<dyn Cluster>,
            context.leadership.clone(),
        );
        let reconciler = Reconciler::new(controller, Arc::new(fenced), (**operator).clone())
            .with_observer(KindsSeen::new(primary.clone(), kinds_tx))
            .with_events(Arc::new(LiveEventSink::new(context.client.clone())));
        let router = route::Router::new(
            primary.clone(),
            queue.clone(),
            context.cluster.clone(),
            context.global.clone(),
            filters,
            controller_watches,
        );
        let router = tokio::spawn(dispatch::route_events(
            router,
            dispatch::Sources {
                live: context.live.clone(),
                stores: context.cluster.stores().clone(),
                namespaces: operator.watch_namespaces(),
                observer: context.watches.clone(),
                initial_list: context.initial_list,
                shard: None,
            },
            kinds_rx,
        ));
        let settings = WorkerSettings {
            name,
            period,
            lock_poll: operator.leader_election.retry_period.into(),
            drain: DRAIN,
            permits: None,
        };
        let worker = tokio::spawn(worker::run(
            reconciler,
            queue.clone(),
            context.leadership.clone(),
            settings,
            context.observer.clone(),
            context.stop.clone(),
        ));
        Ok(Running {
            kind: primary,
            queue: Some(queue),
            worker,
            router,
        })
    }
}

/// Every observer of reconciles, in turn.
struct Fanout(Vec<Arc<dyn ReconcileObserver>>);

impl ReconcileObserver for Fanout {
    fn started(&self, controller: &str, waited: Duration) {
        self.0.iter().for_each(|o| o.started(controller, waited));
    }
    fn finished(&self, controller: &str, report: &crate::reconcile::Report, took: Duration) {
        self.0
            .iter()
            .for_each(|o| o.finished(controller, report, took));
    }
    fn queue(&self, controller: &str, stats: windlass_tasks::queue::QueueStats) {
        self.0.iter().for_each(|o| o.queue(controller, stats));
    }
}

impl ReconcileObserver for Metrics {
    fn started(&self, controller: &str, waited: Duration) {
        self.reconcile_started(controller);
        self.queue_wait(controller, waited);
    }
    fn finished(&self, controller: &str, report: &crate::reconcile::Report, took: Duration) {
        let failed = report.error.as_ref().is_some_and(Error::is_fatal);
        self.reconcile_finished(controller, report.outcome, took, failed);
    }
    fn queue(&self, controller: &str, stats: windlass_tasks::queue::QueueStats) {
        self.set_queue(controller, stats);
    }
}

/// Watches report to readiness and metrics.
struct Telemetry {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
}

impl WatchObserver for Telemetry {
    fn declare(&self, watch: &Watch) {
        self.health.declare_watch(watch);
    }
    fn synced(&self, watch: &Watch, synced: bool) {
        self.health.set_synced(watch, synced);
    }
    fn failed(&self, watch: &Watch, _: &kube::runtime::watcher::Error) {
        self.metrics.watch_restarted(&watch.type_ref);
    }
    fn retired(&self, watch: &Watch) {
        self.health.retire_watch(watch);
    }
}

/// Keep readiness and the leader gauge in step with the leadership. A replica that is
/// still not leading after its first attempts (one poll period) is known to stand by.
async fn follow_leadership(
    leadership: Leadership,
    poll: Duration,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) {
    let mut changes = leadership.watch();
    let first = tokio::time::sleep(poll);
    tokio::pin!(first);
    let mut decided = false;
    loop {
        let leader = *changes.borrow_and_update();
        metrics.set_leader(leader);
        if leader || decided {
            health.set_leader(leader);
        }
        tokio::select! {
            () = &mut first, if !decided => {
                decided = true;
                health.set_leader(leadership.is_leader());
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                decided = true;
            }
        }
    }
}
