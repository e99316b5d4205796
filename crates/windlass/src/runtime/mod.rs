//! The operator runtime: a long-lived process that turns watch events into reconciles
//! (oper8's watch manager, F159–F203, rebuilt on kube-runtime streams and tokio tasks).
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
//!                           status, Events, metrics ─▶ Outcome ─▶ queue
//! ```
//!
//! - [`source`]: watches, one per kind and namespace, filling the [`cache`].
//! - [`filter`]: which events start a reconcile.
//! - [`queue`]: when each CR is reconciled.
//! - [`leader`]: which replica may start reconciles.
//! - [`cache`]: the cluster a reconcile reads through, answered from the watches.
//! - [`metrics`]: what `/metrics` exports.
//! - [`heartbeat`]: the heartbeat file and its check, for exec liveness probes.
//! - [`health`]: the `/metrics`, `/healthz` and `/readyz` server, and what readiness waits for.

pub mod cache;
pub mod filter;
pub mod health;
pub mod heartbeat;
pub mod leader;
pub mod metrics;
pub mod queue;
pub mod route;
pub mod source;
pub mod worker;

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::cluster::{Cluster, LiveCluster, Scope};
use crate::config::LibraryConfig;
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::events::LiveEventSink;
use crate::object::TypeRef;
use crate::progress::{Event, Observer};
use crate::reconcile::Reconciler;
use cache::{CachedCluster, Stores};
use filter::GlobalFilter;
use leader::{Leadership, LockSettings};
use source::{SourceEvent, Watch};
use worker::{ReconcileObserver, WorkerSettings};

/// How long reconciles in flight may finish after a shutdown signal before they are
/// cancelled.
pub const DRAIN: Duration = Duration::from_secs(20);

/// Runs controllers against a real cluster: one client, one set of watch caches, one
/// leadership, one shutdown (oper8's `start_all`, F160). Each controller has its own
/// watches, filters and queue.
///
/// ```no_run
/// # use windlass::prelude::*;
/// # async fn run<C: Controller>(controller: C) -> windlass::Result<()> {
/// let client = kube::Client::try_default().await.map_err(|e| windlass::Error::other(e.to_string()))?;
/// windlass::runtime::Manager::new(client, windlass::config::LibraryConfig::default())
///     .controller(controller)
///     .run(async { let _ = tokio::signal::ctrl_c().await; })
///     .await
/// # }
/// ```
pub struct Manager {
    client: kube::Client,
    live: Arc<LiveCluster>,
    cluster: Arc<CachedCluster>,
    library: Arc<LibraryConfig>,
    controllers: Vec<Box<dyn Start>>,
    observer: Arc<dyn ReconcileObserver>,
}

impl Manager {
    /// A manager over `client`, configured by `library`.
    pub fn new(client: kube::Client, library: LibraryConfig) -> Self {
        let live = Arc::new(LiveCluster::new(client.clone()));
        let cluster = Arc::new(CachedCluster::new(live.clone(), Arc::new(Stores::new())));
        Manager {
            client,
            live,
            cluster,
            library: Arc::new(library),
            controllers: Vec::new(),
            observer: Arc::new(LogOnly),
        }
    }

    /// Add a controller; it runs with the others when the manager runs.
    pub fn controller<C: Controller>(mut self, controller: C) -> Self {
        self.controllers.push(Box::new(Pending(controller)));
        self
    }

    /// Observe every reconcile (metrics).
    pub fn with_observer(mut self, observer: Arc<dyn ReconcileObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The cluster reconciles read and write through: the watch caches over the API.
    pub fn cluster(&self) -> &Arc<CachedCluster> {
        &self.cluster
    }

    /// Run until `shutdown` resolves; then stop taking work, let reconciles in flight
    /// finish (up to [`DRAIN`]), release the leadership and return.
    ///
    /// # Errors
    /// [`Error::Config`] for a configuration the runtime cannot work with (the global
    /// filter, the lock); a cluster error if the lock cannot be set up.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let global = GlobalFilter::from_config(&self.library)?.spec();
        let settings = LockSettings::from_config(&self.library)?;
        let leadership = Leadership::start(
            &settings,
            self.client.clone(),
            self.cluster.clone() as Arc<dyn Cluster>,
        )
        .await?;
        let (stop_tx, stop) = watch::channel(false);
        let context = Context {
            client: self.client.clone(),
            live: self.live.clone(),
            cluster: self.cluster.clone(),
            library: self.library.clone(),
            leadership: leadership.clone(),
            observer: self.observer.clone(),
            global,
            stop,
        };
        let mut running = Vec::new();
        for controller in self.controllers {
            running.push(controller.start(&context)?);
        }
        tracing::info!(controllers = running.len(), "running");
        shutdown.await;
        tracing::info!("shutting down: no new reconciles");
        let _ = stop_tx.send(true);
        for controller in &running {
            controller.queue.shutdown();
        }
        for controller in running {
            if let Err(e) = controller.worker.await {
                tracing::warn!(error = %e, "a worker ended abnormally");
            }
            controller.router.abort();
        }
        if let Err(e) = leadership.shutdown().await {
            tracing::warn!(error = %e, "cannot release the leadership; it expires on its own");
        }
        Ok(())
    }
}

/// What every controller of a manager shares.
struct Context {
    client: kube::Client,
    live: Arc<LiveCluster>,
    cluster: Arc<CachedCluster>,
    library: Arc<LibraryConfig>,
    leadership: Leadership,
    observer: Arc<dyn ReconcileObserver>,
    global: filter::FilterSpec,
    stop: watch::Receiver<bool>,
}

/// A controller that runs.
struct Running {
    queue: queue::ReconcileQueue,
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
        let primary = {
            use kube::Resource as _;
            TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&()))
        };
        let name = crate::controller::controller_display::<C>();
        let library = &context.library;
        let concurrency = library
            .python_watch_manager
            .max_concurrent_reconciles
            .map_or(queue::DEFAULT_CONCURRENCY, |n| n as usize);
        let queue = queue::new_queue(concurrency, Default::default())
            .map_err(|e| Error::config(format!("max_concurrent_reconciles: {e}")))?;
        let period = Some(Duration::from(
            library.python_watch_manager.reconcile_period,
        ))
        .filter(|p| !p.is_zero());
        let filters = controller.watch_filters();
        let (kinds_tx, kinds_rx) = mpsc::unbounded_channel();
        let reconciler = Reconciler::new(
            controller,
            context.cluster.clone() as Arc<dyn Cluster>,
            (**library).clone(),
        )
        .with_observer(KindsSeen {
            primary: primary.clone(),
            seen: Mutex::default(),
            tx: kinds_tx,
        })
        .with_events(Arc::new(LiveEventSink::new(context.client.clone())));
        let router = route::Router::new(
            primary.clone(),
            queue.clone(),
            context.cluster.clone(),
            context.global.clone(),
            filters,
        );
        let router = tokio::spawn(route_events(
            router,
            primary,
            context.live.clone(),
            context.cluster.stores().clone(),
            library.watch_namespaces(),
            kinds_rx,
        ));
        let settings = WorkerSettings {
            name,
            period,
            lock_poll: library.python_watch_manager.lock.poll_time.into(),
            drain: DRAIN,
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
            queue,
            worker,
            router,
        })
    }
}

/// Start the primary watches, then route every event; start a label-scoped watch for
/// each kind the controller's reconciles deploy, as they appear.
async fn route_events(
    mut router: route::Router,
    primary: TypeRef,
    live: Arc<LiveCluster>,
    stores: Arc<Stores>,
    namespaces: Vec<String>,
    mut kinds: mpsc::UnboundedReceiver<TypeRef>,
) {
    let (events_tx, mut events) = mpsc::channel::<SourceEvent>(1024);
    let mut watches = JoinSet::new();
    let namespaces: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.into_iter().map(Some).collect()
    };
    let start = |watches: &mut JoinSet<()>,
                 type_ref: &TypeRef,
                 cluster_scoped: bool,
                 labels: Option<String>| {
        let spread: Vec<Option<String>> = if cluster_scoped {
            vec![None]
        } else {
            namespaces.clone()
        };
        for namespace in spread {
            let watch = Watch {
                type_ref: type_ref.clone(),
                namespace,
                labels: labels.clone(),
            };
            watches.spawn(source::run(
                live.clone(),
                stores.clone(),
                watch,
                events_tx.clone(),
                |kind, error| tracing::debug!(%kind, %error, "watch error"),
            ));
        }
    };
    let primary_scope = live.scope(&primary).await;
    start(
        &mut watches,
        &primary,
        matches!(primary_scope, Ok(Scope::Cluster)),
        None,
    );
    let owned = crate::annotations::OWNER_UID.to_string();
    loop {
        tokio::select! {
            Some(event) = events.recv() => {
                router.route(&event);
            }
            Some(kind) = kinds.recv() => {
                let cluster_scoped = matches!(live.scope(&kind).await, Ok(Scope::Cluster));
                tracing::info!(%kind, "watching the kind the controller deploys");
                start(&mut watches, &kind, cluster_scoped, Some(owned.clone()));
            }
            else => break,
        }
    }
}

/// Tells the router about each kind a reconcile deployed, once.
struct KindsSeen {
    primary: TypeRef,
    seen: Mutex<HashSet<TypeRef>>,
    tx: mpsc::UnboundedSender<TypeRef>,
}

impl Observer for KindsSeen {
    fn event(&self, event: &Event) {
        let Event::Deployed {
            applied, unchanged, ..
        } = event
        else {
            return;
        };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for object in applied.iter().chain(unchanged) {
            let kind = object.type_ref();
            if kind != self.primary && seen.insert(kind.clone()) {
                let _ = self.tx.send(kind);
            }
        }
    }
}

/// The observer when none is given: reconciles are logged by the reconciler itself.
struct LogOnly;

impl ReconcileObserver for LogOnly {
    fn started(&self, _: &str, _: Duration) {}
    fn finished(&self, _: &str, _: &crate::reconcile::Report, _: Duration) {}
}
