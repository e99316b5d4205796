//! The runtime ([`windlass::runtime::Manager`]) on a real API server: reads come from the
//! watches, a new CR is reconciled once even when the watch outruns windlass's writes, a
//! failing CR backs off without holding up the others, and a fix to its spec is picked up
//! at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windlass::Action;
use windlass::cluster::{Cluster, ListQuery, RequestCounter, Verb, WriteMethod, parse_labels};
use windlass::config::OperatorConfig;
use windlass::error::Error;
use windlass::object::{ManifestExt, ObjectRef, TypeRef};
use windlass::reconcile::Report;
use windlass::runtime::InitialList;
use windlass::runtime::Manager;
use windlass::runtime::ReconcileObserver;
use windlass::testing::{Behaviour, DummyComponent, DummyController};

use crate::{eventually, live};
use windlass_testenv::quiet_window;

/// How long a test watches for a needless reconcile, once the event that would set one off
/// has been routed: such a reconcile starts at once, so a loaded machine shows it well
/// within this.
const QUIET: Duration = Duration::from_secs(3);

/// Every finished reconcile, by CR name: when it ended and how.
#[derive(Default, Clone)]
pub(crate) struct Finished(Arc<Mutex<HashMap<String, Ended>>>);

/// When each reconcile of one CR ended, and how.
type Ended = Vec<(Instant, Action)>;

impl Finished {
    /// How many reconciles of the CR `name` ended `Done`.
    pub(crate) fn done(&self, name: &str) -> usize {
        self.of(name)
            .iter()
            .filter(|(_, o)| *o == Action::Done)
            .count()
    }

    /// How many reconciles of any CR ended `Done`.
    pub(crate) fn done_total(&self) -> usize {
        self.0
            .lock()
            .unwrap()
            .values()
            .flatten()
            .filter(|(_, o)| *o == Action::Done)
            .count()
    }

    fn of(&self, name: &str) -> Ended {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}

impl ReconcileObserver for Finished {
    fn started(&self, _: &str, _: Duration) {}
    fn finished(&self, _: &str, report: &Report, _: Duration) {
        self.0
            .lock()
            .unwrap()
            .entry(report.cr.name.clone())
            .or_default()
            .push((Instant::now(), report.outcome));
    }
}

fn widget(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn three_configmaps() -> DummyController {
    DummyController::new()
        .component(DummyComponent::new("a").with_configmap("a"), &[])
        .component(DummyComponent::new("b").with_configmap("b"), &["a"])
        .component(DummyComponent::new("c").with_configmap("c"), &["b"])
        .optional_component(
            DummyComponent::new("broken")
                // Disabled components render too (to find what to delete): fail in verify.
                .behave(Behaviour::VerifyError(Error::rollout("broken on purpose"))),
            "fail",
        )
}

/// Start a manager of [`three_configmaps`] over `client` watching `ns`; returns its
/// shutdown switch and task.
fn start(client: kube::Client, ns: &str, observer: Finished) -> Started {
    start_with(client, ns, observer, three_configmaps())
}

/// A running manager: its shutdown switch, its task and the cluster its reconciles read.
pub(crate) type Started = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<windlass::Result<()>>,
    Arc<windlass::runtime::CachedCluster>,
);

/// Start a manager of `controller` over `client` watching `ns`.
pub(crate) fn start_with<C: windlass::controller::Controller>(
    client: kube::Client,
    ns: &str,
    observer: Finished,
    controller: C,
) -> Started {
    run(manager(client, ns, controller).with_observer(Arc::new(observer)))
}

/// A manager of `controller` over `client` watching `ns`, not running yet.
fn manager<C: windlass::controller::Controller>(
    client: kube::Client,
    ns: &str,
    controller: C,
) -> Manager {
    let mut library = OperatorConfig::default();
    library.runtime.watch_namespaces = vec![ns.to_string()];
    // Not the default 0.0.0.0:8080, which every manager of this binary would contend for.
    library.server.metrics_bind_address = "127.0.0.1:0".into();
    Manager::new(client, library).controller(controller)
}

/// Run `manager` until the returned switch is sent.
fn run(manager: Manager) -> Started {
    let cluster = manager.cluster().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let result = manager
            .run(async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = &result {
            eprintln!("the manager ended: {e}");
        }
        result
    });
    (stop, task, cluster)
}

#[tokio::test]
async fn once_the_watches_have_synced_a_reconcile_reads_nothing_and_a_steady_one_writes_nothing() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-reads").await.unwrap();
    let counter = RequestCounter::new();
    // kube's client retries a 429, 503 or 504 by itself, beneath the counter, and a 504 may
    // come after the write landed: the retry then conflicts with it and the runtime reads
    // the CR, which the counter would show as a read with no cause. Without those retries
    // every answer reaches the runtime and the counter, and the claims below are checked
    // only on a CR whose requests the server answered in full.
    let mut config = env.kube_config();
    config.default_retry = false;
    let client = counter.client(config).unwrap();
    let finished = Finished::default();
    let (stop, task, cache) = start(client, ns.name(), finished.clone());

    admin
        .apply(&widget(ns.name(), "w", json!({})), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the CR is reconciled to Done", || async {
        finished.of("w").iter().any(|(_, o)| *o == Action::Done)
    })
    .await;
    let configmaps = TypeRef::new("v1", "ConfigMap");
    eventually("the ConfigMap watch has listed", || async {
        cache.is_synced(&configmaps, Some(ns.name()))
    })
    .await;

    // A label change starts a reconcile; everything it reads is in the stores.
    let before = finished.of("w").len();
    counter.take();
    admin
        .apply(
            &json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
                "metadata": {"name": "w", "namespace": ns.name(), "labels": {"touched": "yes"}}}),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the label change is reconciled", || async {
        finished.of("w").len() > before
    })
    .await;
    let counts = counter.take();
    println!("a reconcile under the runtime:\n{counts}");
    assert_eq!(
        counts.verb(Verb::Get),
        0,
        "reads outside the watches:\n{counts}"
    );
    assert_eq!(counts.verb(Verb::List), 0, "{counts}");
    assert_eq!(counts.mutating(), 0, "a steady reconcile writes:\n{counts}");

    // A new CR, once the watches are warm: its objects + 1 writes and no read at all. A
    // server too loaded to answer (429, 5xx, no answer) voids the claim for that CR: the next is
    // tried, three at most.
    let mut tried = Vec::new();
    let counts = loop {
        let name = format!("w{}", tried.len() + 2);
        admin
            .apply(&widget(ns.name(), &name, json!({})), WriteMethod::Update)
            .await
            .unwrap();
        eventually("the new CR is reconciled to Done", || async {
            finished.of(&name).iter().any(|(_, o)| *o == Action::Done)
        })
        .await;
        let counts = counter.take();
        println!("a new CR under warm watches ({name}):\n{counts}");
        if counts.count(|k| k.code == 0 || k.code == 429 || k.code >= 500) == 0 {
            break counts;
        }
        tried.push(counts);
        assert!(
            tried.len() < 3,
            "the server refused or timed out a request for each of three new CRs:\n{tried:#?}"
        );
    };
    // A get of the CR after its status write answered 409 means the CR the reconcile
    // started from was stale.
    assert_eq!(
        counts.verb(Verb::Get),
        0,
        "reads outside the watches:\n{counts}"
    );
    assert_eq!(counts.of(Verb::Apply, "configmaps"), 3, "{counts}");
    assert_eq!(counts.of(Verb::Update, "widgets/status"), 1, "{counts}");

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// The watches fill their stores from a streaming list (one watch with
/// `sendInitialEvents`) where the server offers it, as every supported Kubernetes does: no
/// LIST request at all. Paged lists, on request, LIST.
#[tokio::test]
async fn the_watches_fill_their_stores_from_streaming_lists_not_lists() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-streaming").await.unwrap();
    for name in ["s1", "s2", "s3"] {
        admin
            .apply(&widget(ns.name(), name, json!({})), WriteMethod::Update)
            .await
            .unwrap();
    }
    let widgets = TypeRef::new("test.windlass.dev/v1", "Widget");
    for (initial_list, lists) in [
        (InitialList::Streaming, 0..=0),
        (InitialList::Paged, 1..=u64::MAX),
    ] {
        let counter = RequestCounter::new();
        let client = counter.client(env.kube_config()).unwrap();
        let (stop, task, cache) =
            run(manager(client, ns.name(), three_configmaps()).initial_list(initial_list));
        eventually("the Widget watch has listed the three CRs", || async {
            cache.is_synced(&widgets, Some(ns.name())) && cache.objects(&widgets).len() == 3
        })
        .await;
        let counts = counter.take();
        println!("{initial_list:?}:\n{counts}");
        assert!(
            lists.contains(&counts.verb(Verb::List)),
            "{initial_list:?}: LIST requests outside {lists:?}:\n{counts}"
        );
        assert!(counts.verb(Verb::Watch) >= 1, "{counts}");
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }
}

/// A server without streaming lists (its `WatchList` feature switched off) refuses them:
/// the watches fall back to paged lists and fill their stores all the same.
#[tokio::test]
async fn where_the_server_refuses_streaming_lists_the_watches_list_in_pages() {
    let env = windlass_testenv::TestEnv::builder()
        .without_simulator()
        .apiserver_flag("--feature-gates=WatchList=false")
        .start()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let admin = windlass::cluster::LiveCluster::new(env.client().unwrap());
    crate::install_crd::<windlass::testing::Widget>(&admin).await;
    let ns = env.namespace("runtime-paged").await.unwrap();
    for name in ["p1", "p2"] {
        admin
            .apply(&widget(ns.name(), name, json!({})), WriteMethod::Update)
            .await
            .unwrap();
    }
    let counter = RequestCounter::new();
    let client = counter.client(env.kube_config()).unwrap();
    let (stop, task, cache) =
        run(manager(client, ns.name(), three_configmaps()).initial_list(InitialList::Streaming));
    let widgets = TypeRef::new("test.windlass.dev/v1", "Widget");
    eventually("the Widget watch has listed both CRs in pages", || async {
        cache.is_synced(&widgets, Some(ns.name())) && cache.objects(&widgets).len() == 2
    })
    .await;
    let counts = counter.take();
    println!("streaming refused:\n{counts}");
    assert!(counts.of(Verb::List, "widgets") >= 1, "{counts}");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_list_of_a_kind_watched_whole_is_answered_from_the_watch_with_its_own_writes() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-lists").await.unwrap();
    let counter = RequestCounter::new();
    let client = counter.client(env.kube_config()).unwrap();
    let finished = Finished::default();
    let (stop, task, cache) = start(client, ns.name(), finished.clone());
    for name in ["b", "a"] {
        admin
            .apply(&widget(ns.name(), name, json!({})), WriteMethod::Update)
            .await
            .unwrap();
    }
    let widgets = TypeRef::new("test.windlass.dev/v1", "Widget");
    eventually("both CRs are in the primary watch", || async {
        cache.objects(&widgets).len() == 2
    })
    .await;

    counter.take();
    let names = |objects: Vec<Value>| -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let all = ListQuery::new(widgets.clone(), Some(ns.name()));
    assert_eq!(
        names(cache.list(&all).await.unwrap()),
        ["a", "b"],
        "sorted by name"
    );
    let one = ListQuery::new(widgets.clone(), Some(ns.name())).fields("metadata.name=b");
    assert_eq!(names(cache.list(&one).await.unwrap()), ["b"]);
    let none =
        ListQuery::new(widgets.clone(), Some(ns.name())).labels(parse_labels("tier=web").unwrap());
    assert!(cache.list(&none).await.unwrap().is_empty());
    // What this process just wrote is listed, whether or not the watch has it yet.
    cache
        .apply(&widget(ns.name(), "c", json!({})), WriteMethod::Update)
        .await
        .unwrap();
    assert_eq!(names(cache.list(&all).await.unwrap()), ["a", "b", "c"]);
    let counts = counter.take();
    assert_eq!(
        counts.verb(Verb::List),
        0,
        "lists of the primary kind:\n{counts}"
    );

    // ConfigMaps are watched by windlass's label only: one without it exists too.
    admin
        .apply(
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "users", "namespace": ns.name()}}),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    counter.take();
    let configmaps = ListQuery::new(TypeRef::new("v1", "ConfigMap"), Some(ns.name()));
    assert!(
        names(cache.list(&configmaps).await.unwrap()).contains(&"users".to_string()),
        "an object outside the label-scoped watch is listed"
    );
    assert_eq!(counter.take().verb(Verb::List), 1);

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// Deleting the object of a component switched off is windlass's own write too: the
/// watch's deletion event of it does not cost the CR a second reconcile, while a child
/// deleted by someone else is put back.
#[tokio::test]
async fn a_child_windlass_deletes_costs_no_second_reconcile() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-deletes").await.unwrap();
    let controller = DummyController::new()
        .component(DummyComponent::new("a").with_configmap("a"), &[])
        .optional_component(
            DummyComponent::new("extra").with_configmap("extra"),
            "extra",
        );
    let finished = Finished::default();
    let (stop, task, cache) = start_with(
        env.client().unwrap(),
        ns.name(),
        finished.clone(),
        controller,
    );
    let extra = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "w-extra");

    admin
        .apply(
            &widget(ns.name(), "w", json!({"extra": true})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    // The reconcile that wrote the extra ConfigMap has finished too (it goes on to verify
    // and write the status after the write the watch shows), so `before` counts it.
    eventually(
        "the CR is reconciled and its extra ConfigMap is in the watch",
        || async {
            finished.of("w").iter().any(|(_, o)| *o == Action::Done)
                && matches!(cache.lookup(&extra), windlass::runtime::Cached::Present(_))
        },
    )
    .await;
    let before = finished.of("w").len();

    admin
        .apply(
            &widget(ns.name(), "w", json!({"extra": false})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the watch has delivered the deletion", || async {
        finished.of("w").len() > before
            && !matches!(cache.lookup(&extra), windlass::runtime::Cached::Present(_))
            && !cache.is_own_delete(&extra)
    })
    .await;
    // A needless reconcile would be queued by the deletion event just routed, and start at
    // once: it would show within the window.
    quiet_window(
        "one reconcile for the spec change, none for the echo of its delete",
        QUIET,
        || async { finished.of("w").len() == before + 1 },
    )
    .await;

    // Someone else deletes a child: that is a change, and it is put back.
    let a = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "w-a");
    admin.delete(&a, None).await.unwrap();
    eventually("the deleted child is put back", || async {
        admin.get(&a).await.unwrap().is_some()
    })
    .await;

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// A CR with a finalizer, deleted and created again under its name as soon as it is gone,
/// is reconciled afresh each time: the removal of its finalizer (which the API server
/// carries out as the deletion) leaves nothing in the cache that hides the new one. The
/// deletion's echo and the patch's answer come back in either order, so each round may
/// take either path.
#[tokio::test]
async fn a_cr_deleted_and_created_again_at_once_is_reconciled_afresh() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-recreate").await.unwrap();
    let controller = DummyController::new()
        .component(DummyComponent::new("a").with_configmap("a"), &[])
        .finalizer("test.windlass.dev/cleanup", vec![]);
    let finished = Finished::default();
    let (stop, task, _cache) = start_with(
        env.client().unwrap(),
        ns.name(),
        finished.clone(),
        controller,
    );
    let cr = ObjectRef::new("test.windlass.dev/v1", "Widget", Some(ns.name()), "w");
    let held = |uid: String| {
        let admin = admin.clone();
        let cr = cr.clone();
        async move {
            admin.get(&cr).await.unwrap().is_some_and(|stored| {
                stored.uid() == Some(uid.as_str())
                    && stored.finalizers() == ["test.windlass.dev/cleanup"]
                    && !stored["status"].is_null()
            })
        }
    };
    for round in 0..8 {
        let created = admin
            .apply(
                &widget(ns.name(), "w", json!({"round": round})),
                WriteMethod::Update,
            )
            .await
            .unwrap();
        let uid = created.uid().unwrap().to_string();
        eventually(
            &format!("round {round}: the new CR has the finalizer and a status"),
            || held(uid.clone()),
        )
        .await;
        admin.delete(&cr, None).await.unwrap();
        eventually(&format!("round {round}: the CR is gone"), || async {
            admin.get(&cr).await.unwrap().is_none()
        })
        .await;
    }
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// The watch often delivers windlass's own write of a child before the write's response is
/// back; the router must still tell it from a change by someone else, or every such echo
/// costs the CR a second, needless reconcile. So: one reconcile per new CR, no more.
#[tokio::test]
async fn each_new_cr_is_reconciled_once_though_the_watch_outruns_the_writes() {
    const CRS: usize = 20;
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-echo").await.unwrap();
    let counter = RequestCounter::new();
    // The applies' responses come back late, as from a busy API server: the watch has
    // delivered each write long before its response.
    let client = kube::client::ClientBuilder::try_from(env.kube_config())
        .unwrap()
        .with_layer(&counter.layer())
        .with_layer(&SlowApplies(Duration::from_millis(300)))
        .build();
    let finished = Finished::default();
    let (stop, task, cache) = start(client, ns.name(), finished.clone());

    let names: Vec<String> = (0..CRS).map(|i| format!("w{i}")).collect();
    futures::future::try_join_all(names.iter().map(|name| {
        let admin = admin.clone();
        let cr = widget(ns.name(), name, json!({}));
        async move { admin.apply(&cr, WriteMethod::Update).await }
    }))
    .await
    .unwrap();
    eventually("every CR is reconciled to Done", || async {
        names
            .iter()
            .all(|name| finished.of(name).iter().any(|(_, o)| *o == Action::Done))
    })
    .await;
    // The echoes have arrived: the watches have delivered every child windlass wrote and
    // every status.
    eventually(
        "the watches have delivered every child and status",
        || async {
            names.iter().all(|name| {
                let cr = ObjectRef::new("test.windlass.dev/v1", "Widget", Some(ns.name()), name);
                let status_seen = matches!(cache.lookup(&cr),
                windlass::runtime::Cached::Present(cr) if !cr["status"].is_null());
                status_seen
                    && ["a", "b", "c"].iter().all(|child| {
                        let child = ObjectRef::new(
                            "v1",
                            "ConfigMap",
                            Some(ns.name()),
                            format!("{name}-{child}"),
                        );
                        matches!(cache.lookup(&child), windlass::runtime::Cached::Present(_))
                    })
            })
        },
    )
    .await;
    // A needless reconcile is queued by an echo as it is routed, and runs at once (or right
    // after the first one): it would show within the window.
    quiet_window("no CR is reconciled a second time", QUIET, || async {
        names.iter().all(|name| finished.of(name).len() == 1)
    })
    .await;

    let counts = counter.take();
    println!("{CRS} new CRs under the runtime:\n{counts}");
    let reconciles: HashMap<&str, usize> = names
        .iter()
        .map(|name| (name.as_str(), finished.of(name).len()))
        .collect();
    let extra: Vec<_> = reconciles.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        extra.is_empty(),
        "reconciles per CR other than one: {extra:?} ({} in all for {CRS} CRs)",
        reconciles.values().sum::<usize>()
    );
    assert_eq!(
        counts.of(Verb::Apply, "configmaps"),
        3 * CRS as u64,
        "{counts}"
    );
    assert_eq!(
        counts.of(Verb::Update, "widgets/status"),
        CRS as u64,
        "{counts}"
    );

    // Someone else's change of a child is no echo: it reconciles its CR.
    let child = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "w0-a");
    let touch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels/touched", "value": "yes"}
    ]))
    .unwrap();
    admin.patch(&child, &touch).await.unwrap();
    eventually("the touched child's CR is reconciled", || async {
        finished.of("w0").len() == 2
    })
    .await;

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// Holds back the response of every `PATCH` (the runtime's applies) by its delay.
#[derive(Clone)]
struct SlowApplies(Duration);

impl<S> tower_layer::Layer<S> for SlowApplies {
    type Service = Slow<S>;
    fn layer(&self, inner: S) -> Slow<S> {
        Slow {
            inner,
            delay: self.0,
        }
    }
}

#[derive(Clone)]
struct Slow<S> {
    inner: S,
    delay: Duration,
}

impl<S, B> tower_service::Service<http::Request<B>> for Slow<S>
where
    S: tower_service::Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Response: Send,
    S::Error: Send,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let delay = (request.method() == http::Method::PATCH).then_some(self.delay);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            response
        })
    }
}

#[tokio::test]
async fn a_failing_cr_backs_off_alone_and_its_fix_is_picked_up_at_once() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-backoff").await.unwrap();
    let finished = Finished::default();
    let client = env.client().unwrap();
    let (stop, task, _) = start(client, ns.name(), finished.clone());

    admin
        .apply(
            &widget(ns.name(), "bad", json!({"fail": true})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    // Five failures: 0.5, 1, 2 and 4 s apart (with 10 % jitter), the next one 8 s away.
    eventually("the failing CR has failed five times", || async {
        finished.of("bad").len() >= 5
    })
    .await;
    let failures = finished.of("bad");
    assert!(failures.iter().all(|(_, o)| *o == Action::Retry));
    let gaps: Vec<Duration> = failures.windows(2).map(|w| w[1].0 - w[0].0).collect();
    // Each gap is at least its back-off (less the jitter): the back-off doubles. (A gap
    // also holds a reconcile, however long a loaded machine makes it, so gaps are not
    // compared with each other.)
    for (k, gap) in gaps.iter().enumerate() {
        let floor = Duration::from_millis(500) * 2u32.pow(k as u32) * 9 / 10;
        assert!(
            *gap >= floor,
            "retry {} came after {gap:?}, not {floor:?}: {gaps:?}",
            k + 2
        );
    }
    let last_failure = failures.last().unwrap().0;
    let next_backoff = *gaps.last().unwrap() * 2;

    // Another CR is not held up by the failing one: it is done before the failing CR's
    // next retry is even due (a worker stuck in that back-off would finish it after).
    admin
        .apply(&widget(ns.name(), "good", json!({})), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the other CR is reconciled", || async {
        finished.of("good").iter().any(|(_, o)| *o == Action::Done)
    })
    .await;
    let good_done = finished
        .of("good")
        .iter()
        .find(|(_, o)| *o == Action::Done)
        .unwrap()
        .0;
    let retried = finished.of("bad").get(failures.len()).map(|(at, _)| *at);
    assert!(
        retried.is_none_or(|retried| retried > good_done),
        "the failing CR was retried ({:?} after its last failure) before the other CR was \
         done ({:?} after it)",
        retried.map(|r| r - last_failure),
        good_done - last_failure
    );

    // The fix: picked up at once, not after the back-off (which is now 8 s or more).
    let fixed_at = Instant::now();
    admin
        .apply(
            &widget(ns.name(), "bad", json!({"fail": false})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("the fixed CR is reconciled to Done", || async {
        finished.of("bad").iter().any(|(_, o)| *o == Action::Done)
    })
    .await;
    let done_at = finished
        .of("bad")
        .iter()
        .find(|(_, o)| *o == Action::Done)
        .unwrap()
        .0;
    assert!(
        done_at < last_failure.max(fixed_at) + next_backoff / 2,
        "the fix waited for the back-off: done {:?} after the fix, back-off {next_backoff:?}",
        done_at - fixed_at
    );
    let cr = ObjectRef::new("test.windlass.dev/v1", "Widget", Some(ns.name()), "bad");
    assert!(admin.get(&cr).await.unwrap().is_some());

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// A controller that copies the ConfigMap `<cr>-input` into `<cr>-output`, and asks to
/// watch ConfigMaps so that a change of the input reaches the CR.
struct Copier;

struct Copy;

#[windlass::async_trait]
impl<C: windlass::controller::Controller<Resource = windlass::testing::Widget>>
    windlass::component::Component<C> for Copy
{
    fn name(&self) -> &str {
        "copy"
    }
    async fn render(
        &self,
        session: &windlass::session::Session<C>,
        out: &mut windlass::component::Resources,
    ) -> windlass::Result<()> {
        use k8s_openapi::api::core::v1::ConfigMap;
        let input: ConfigMap = session
            .get(&format!("{}-input", session.name()))
            .await?
            .ok_or_else(|| Error::config("no input ConfigMap"))?;
        out.add_value(
            "output",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-output", session.name())},
                "data": input.data.unwrap_or_default()}),
        )?;
        Ok(())
    }
}

#[windlass::async_trait]
impl windlass::controller::Controller for Copier {
    type Resource = windlass::testing::Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(
        &self,
        _: &windlass::session::Session<Self>,
    ) -> windlass::Result<windlass::controller::Components<Self>> {
        let mut graph = windlass::controller::Components::new();
        graph.add(Copy)?;
        Ok(graph)
    }
    fn watches(&self) -> windlass::watch::Watches {
        windlass::watch::Watches::new().watch::<k8s_openapi::api::core::v1::ConfigMap>(|cm| {
            let name = cm["metadata"]["name"].as_str()?.strip_suffix("-input")?;
            let ns = cm["metadata"]["namespace"].as_str();
            Some(vec![ObjectRef::new(
                "test.windlass.dev/v1",
                "Widget",
                ns,
                name,
            )])
        })
    }
}

/// A controller whose one component renders the ConfigMap `<cr>-seed` and reads it back
/// whole on every pass, as a component reads its CA's Secret.
struct Rereader;

struct Reread;

#[windlass::async_trait]
impl<C: windlass::controller::Controller<Resource = windlass::testing::Widget>>
    windlass::component::Component<C> for Reread
{
    fn name(&self) -> &str {
        "reread"
    }
    async fn render(
        &self,
        session: &windlass::session::Session<C>,
        out: &mut windlass::component::Resources,
    ) -> windlass::Result<()> {
        use k8s_openapi::api::core::v1::ConfigMap;
        let name = format!("{}-seed", session.name());
        let seed = session.get::<ConfigMap>(&name).await?;
        let value = seed
            .and_then(|cm| cm.data?.get("seed").cloned())
            .unwrap_or_else(|| "first".into());
        out.add_value(
            "seed",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                "data": {"seed": value}}),
        )?;
        Ok(())
    }
}

#[windlass::async_trait]
impl windlass::controller::Controller for Rereader {
    type Resource = windlass::testing::Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(
        &self,
        _: &windlass::session::Session<Self>,
    ) -> windlass::Result<windlass::controller::Components<Self>> {
        let mut graph = windlass::controller::Components::new();
        graph.add(Reread)?;
        Ok(graph)
    }
}

/// The cache of the kinds windlass applies keeps what a rollout reads of each object; a
/// component's whole read of one of them asks the API server once, and the cache keeps
/// that object whole from then on: the next reconcile reads nothing.
#[tokio::test]
async fn an_object_a_component_reads_whole_is_read_from_the_server_once_then_from_memory() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-reread").await.unwrap();
    let counter = RequestCounter::new();
    // No retries beneath the counter (see the first test of this file).
    let mut config = env.kube_config();
    config.default_retry = false;
    let finished = Finished::default();
    let (stop, task, cache) = start_with(
        counter.client(config).unwrap(),
        ns.name(),
        finished.clone(),
        Rereader,
    );
    admin
        .apply(&widget(ns.name(), "w", json!({})), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the CR is reconciled to Done", || async {
        finished.of("w").iter().any(|(_, o)| *o == Action::Done)
    })
    .await;
    let configmaps = TypeRef::new("v1", "ConfigMap");
    let seed = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "w-seed");
    eventually("the ConfigMap watch has the seed", || async {
        cache.is_synced(&configmaps, Some(ns.name()))
            && matches!(cache.lookup(&seed), windlass::runtime::Cached::Present(_))
    })
    .await;

    let mut touches = Vec::new();
    for touch in ["one", "two"] {
        let before = finished.of("w").len();
        counter.take();
        admin
            .apply(
                &json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
                    "metadata": {"name": "w", "namespace": ns.name(), "labels": {"touched": touch}}}),
                WriteMethod::Update,
            )
            .await
            .unwrap();
        eventually("the label change is reconciled", || async {
            finished.of("w").len() > before
        })
        .await;
        let counts = counter.take();
        println!("a reconcile after touch {touch}:\n{counts}");
        assert_eq!(counts.mutating(), 0, "{counts}");
        touches.push(counts);
    }
    assert_eq!(
        touches[0].of(Verb::Get, "configmaps"),
        1,
        "the cache held the seed partially: asked once\n{}",
        touches[0]
    );
    assert_eq!(
        touches[1].verb(Verb::Get),
        0,
        "kept whole since: no read\n{}",
        touches[1]
    );

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_extra_watch_reconciles_the_cr_its_mapping_names() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-extra").await.unwrap();
    let mut library = OperatorConfig::default();
    library.runtime.watch_namespaces = vec![ns.name().to_string()];
    let manager = Manager::new(env.client().unwrap(), library).controller(Copier);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    let input = |value: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w-input", "namespace": ns.name()}, "data": {"v": value}})
    };
    admin.apply(&input("1"), WriteMethod::Apply).await.unwrap();
    admin
        .apply(&widget(ns.name(), "w", json!({})), WriteMethod::Update)
        .await
        .unwrap();
    let output = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "w-output");
    let copied = |value: &'static str| {
        let (admin, output) = (admin.clone(), output.clone());
        async move {
            admin
                .get(&output)
                .await
                .unwrap()
                .is_some_and(|cm| cm["data"]["v"] == value)
        }
    };
    eventually("the input is copied", || copied("1")).await;
    // Nothing but the extra watch can bring the change in time: the CR is done and its
    // periodic reconcile is 10 minutes away.
    admin.apply(&input("2"), WriteMethod::Apply).await.unwrap();
    eventually("the changed input is copied", || copied("2")).await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// One manager, two controllers (a namespaced and a cluster-scoped kind): each has its own
/// watches and queue, and both converge.
#[tokio::test]
async fn one_manager_runs_two_controllers() {
    use windlass::testing::Gadget;
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-two").await.unwrap();
    let finished = Finished::default();
    let gadgets = DummyController::<Gadget>::of_kind().component(
        DummyComponent::new("box").with_object(
            "cm",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "{cr}-box", "namespace": ns.name()}, "data": {}}),
        ),
        &[],
    );
    let manager = Manager::new(env.client().unwrap(), OperatorConfig::default())
        .controller(three_configmaps())
        .controller(gadgets)
        .with_observer(Arc::new(finished.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    admin
        .apply(&widget(ns.name(), "w", json!({})), WriteMethod::Update)
        .await
        .unwrap();
    let gadget_name = format!("{}-g", ns.name());
    admin
        .apply(
            &json!({"apiVersion": "test.windlass.dev/v1", "kind": "Gadget",
                "metadata": {"name": gadget_name}, "spec": {}}),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    eventually("both CRs are reconciled to Done", || async {
        [("w"), gadget_name.as_str()]
            .iter()
            .all(|name| finished.of(name).iter().any(|(_, o)| *o == Action::Done))
    })
    .await;
    let boxed = ObjectRef::new(
        "v1",
        "ConfigMap",
        Some(ns.name()),
        format!("{gadget_name}-box"),
    );
    assert!(admin.get(&boxed).await.unwrap().is_some());
    let gadget = ObjectRef::new("test.windlass.dev/v1", "Gadget", None, &gadget_name);
    admin.delete(&gadget, None).await.unwrap();
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// A controller of a built-in kind: every Namespace labelled for it gets a ConfigMap; its
/// status, Kubernetes' own, is left alone.
struct TenantDefaults;

#[windlass::async_trait]
impl windlass::controller::Controller for TenantDefaults {
    type Resource = k8s_openapi::api::core::v1::Namespace;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Unmanaged;
    fn components(
        &self,
        _: &windlass::session::Session<Self>,
    ) -> windlass::Result<windlass::controller::Components<Self>> {
        let mut graph = windlass::controller::Components::new();
        graph.add_fn("defaults", |session, out| {
            out.add_value(
                "config",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "tenant-defaults", "namespace": session.name()},
                    "data": {"tenant": session.name()}}),
            )?;
            Ok(())
        })?;
        Ok(graph)
    }
    fn watches(&self) -> windlass::watch::Watches {
        use windlass::watch::filter::LabelSelector;
        windlass::watch::Watches::new().filter_kind::<k8s_openapi::api::core::v1::Namespace>(
            LabelSelector::new([("windlass.dev/test-tenant", "yes")]),
        )
    }
}

#[tokio::test]
async fn a_controller_of_namespaces_provisions_them_and_leaves_their_status_alone() {
    let (admin, env) = live().await;
    let finished = Finished::default();
    let manager = Manager::new(env.client().unwrap(), OperatorConfig::default())
        .controller(TenantDefaults)
        .with_observer(Arc::new(finished.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    let ns = env.namespace("tenant").await.unwrap();
    admin
        .apply(
            &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns.name(), "labels": {"windlass.dev/test-tenant": "yes"}}}),
            WriteMethod::Update,
        )
        .await
        .unwrap();
    let defaults = ObjectRef::new("v1", "ConfigMap", Some(ns.name()), "tenant-defaults");
    eventually("the labelled namespace gets its ConfigMap", || async {
        admin.get(&defaults).await.unwrap().is_some()
    })
    .await;
    let config = admin.get(&defaults).await.unwrap().unwrap();
    assert_eq!(
        config["metadata"]["ownerReferences"][0]["kind"], "Namespace",
        "owned by its namespace"
    );
    assert_eq!(config["data"]["tenant"], ns.name());
    eventually("the reconcile ends Done", || async {
        finished
            .of(ns.name())
            .iter()
            .any(|(_, o)| *o == Action::Done)
    })
    .await;
    let namespace = admin
        .get(&ObjectRef::new("v1", "Namespace", None, ns.name()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        namespace["status"],
        json!({"phase": "Active"}),
        "Kubernetes' own status, untouched"
    );

    // Deleting its ConfigMap re-creates it: the owned watch maps it to the namespace.
    let first = config["metadata"]["uid"].clone();
    admin.delete(&defaults, None).await.unwrap();
    eventually("the ConfigMap is back, a new one", || async {
        admin
            .get(&defaults)
            .await
            .unwrap()
            .is_some_and(|cm| cm["metadata"]["uid"] != first)
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// The status code of `GET path` on `127.0.0.1:port`, or `None` if nothing answers.
async fn status_of(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
async fn the_probes_metrics_and_heartbeat_are_where_the_configuration_puts_them() {
    let (_, env) = live().await;
    let ns = env.namespace("runtime-endpoints").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let beat = dir.path().join("beat");
    let mut config = OperatorConfig::default();
    config.runtime.watch_namespaces = vec![ns.name().to_string()];
    // Port 0: each server gets a free port from the system, and the manager says which.
    config.server.metrics_bind_address = "127.0.0.1:0".into();
    config.server.health_probe_bind_address = "127.0.0.1:0".into();
    config.heartbeat.file = Some(beat.clone());
    config.heartbeat.period = Duration::from_secs(1).into();
    let manager = Manager::new(env.client().unwrap(), config).controller(three_configmaps());
    let mut serving = manager.serving();
    let (stop, task, _) = run(manager);
    let bound = *tokio::time::timeout(
        Duration::from_secs(60),
        serving.wait_for(|s| s.metrics.is_some() && s.probes.is_some()),
    )
    .await
    .expect("both servers bind within a minute")
    .unwrap();
    let (metrics, probes) = (bound.metrics.unwrap().port(), bound.probes.unwrap().port());
    assert_ne!(metrics, probes, "two servers");

    eventually("the probe server is ready", || async {
        status_of(probes, "/readyz").await == Some(200)
    })
    .await;
    assert_eq!(status_of(probes, "/healthz").await, Some(200));
    assert_eq!(status_of(probes, "/metrics").await, Some(404));
    eventually("the metrics server answers", || async {
        status_of(metrics, "/metrics").await == Some(200)
    })
    .await;
    assert_eq!(status_of(metrics, "/readyz").await, Some(404));
    eventually("the heartbeat file is written", || async {
        std::fs::read_to_string(&beat).is_ok_and(|text| !text.trim().is_empty())
    })
    .await;

    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// A value nested `depth` objects deep.
fn nested(depth: usize) -> Value {
    let mut value = json!("bottom");
    for _ in 0..depth {
        value = json!({ "a": value });
    }
    value
}

#[tokio::test]
async fn a_cr_nested_past_the_json_depth_limit_stops_no_other_cr() {
    let (admin, env) = live().await;
    let ns = env.namespace("runtime-deep").await.unwrap();
    // Stored before the operator starts (its initial list reads it) and after (a watch
    // event carries it).
    // Stored; the response, as deep, is more than kube-rs's client parses.
    let _ = admin
        .apply(
            &widget(ns.name(), "deep-before", json!({"deep": nested(200)})),
            WriteMethod::Update,
        )
        .await;
    let finished = Finished::default();
    let (stop, task, _) = start(env.client().unwrap(), ns.name(), finished.clone());
    // Stored; the response, as deep, is more than kube-rs's client parses.
    let _ = admin
        .apply(
            &widget(ns.name(), "deep-after", json!({"deep": nested(200)})),
            WriteMethod::Update,
        )
        .await;
    admin
        .apply(&widget(ns.name(), "plain", json!({})), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the plain Widget is reconciled to Done", || async {
        finished.done("plain") > 0
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
