//! The watches the shards of one sharded controller share within a replica.
//!
//! A shard's pipeline watches its CRs and the objects they deploy within the shard (by the
//! shard's label, or the API server's selector), so those caches divide among the
//! replicas. The kinds watched whole do not divide by shard: the controller's extra
//! watches, and the kinds CRs read without owning them (a dependency hash). A pipeline per
//! shard watching them itself would keep a copy of every such object per shard the replica
//! holds, and open as many watches of each. Here each such kind is watched once per
//! replica and controller, into one store that every shard's stores answer from
//! ([`Stores::lend`]), and each event is sent on to every shard whose dispatcher
//! subscribed to the kind; each shard's router decides which of its CRs an event
//! concerns, as it does for the events of its own watches.
//!
//! A shard that subscribes to a kind whose watch has listed already is told so at once,
//! so its warm-up does not wait for a list that happened before it. The watches run as
//! long as the controller does: a shard handed over and taken back, or a replica's next
//! shard, finds them listed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::cache::{Keep, Stores};
use super::metrics::Metrics;
use super::source::{self, InitialList, SourceEvent, Watch, WatchObserver};
use crate::cluster::LiveCluster;
use crate::object::TypeRef;

/// One controller's kinds watched whole, shared by its shards.
pub(super) struct SharedWatches {
    live: Arc<LiveCluster>,
    stores: Arc<Stores>,
    /// The namespaces a namespaced kind is watched in (empty: all of them).
    namespaces: Vec<String>,
    initial_list: InitialList,
    state: Arc<Mutex<State>>,
    /// Where the watches send what they see, for [`forward`].
    events: mpsc::Sender<SourceEvent>,
    /// The watches and the forwarder: they end when the controller's last user of this
    /// goes.
    tasks: Mutex<JoinSet<()>>,
    metrics: Arc<Metrics>,
}

/// What the watches have done and who listens.
#[derive(Default)]
struct State {
    /// Each kind watched, with its watches and those of them that have listed.
    kinds: HashMap<TypeRef, Watched>,
    subscribers: HashMap<u64, Subscriber>,
    next_id: u64,
}

#[derive(Default)]
struct Watched {
    watches: Vec<Watch>,
    synced: HashSet<Watch>,
}

/// One shard's dispatcher: where its events go, and who waits for its watches to list.
struct Subscriber {
    kinds: HashSet<TypeRef>,
    /// To the subscriber's [`relay`]: unbounded, so that one busy dispatcher never holds
    /// up the events of the others (nor, through them, the shared watches).
    events: mpsc::UnboundedSender<SourceEvent>,
    observer: Arc<dyn WatchObserver>,
}

impl SharedWatches {
    /// No kind watched yet; the watches, once started, read through `live` and list with
    /// `initial_list` in each of `namespaces` (empty: all).
    pub(super) fn new(
        live: Arc<LiveCluster>,
        namespaces: &[String],
        initial_list: InitialList,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let (events, received) = mpsc::channel(super::source::EVENTS_IN_FLIGHT);
        let state = Arc::new(Mutex::new(State::default()));
        let mut tasks = JoinSet::new();
        tasks.spawn(forward(received, state.clone()));
        Arc::new(SharedWatches {
            live,
            stores: Arc::new(Stores::new()),
            namespaces: namespaces.to_vec(),
            initial_list,
            state,
            events,
            tasks: Mutex::new(tasks),
            metrics,
        })
    }

    /// The stores the shared watches fill, for a shard's stores to answer from
    /// ([`Stores::over`]).
    pub(super) fn stores(&self) -> &Arc<Stores> {
        &self.stores
    }

    /// Whether every object of `kind` is watched here (not only those with a label).
    pub(super) fn watches_whole(&self, kind: &TypeRef) -> bool {
        self.state
            .lock()
            .kinds
            .get(kind)
            .is_some_and(|watched| watched.watches.iter().all(|watch| watch.labels.is_none()))
    }

    /// A shard's dispatcher listens: the events of the kinds it [`watch`](Subscription::watch)es
    /// go to `events`, and `observer` hears when their watches have listed. Until the
    /// subscription is dropped.
    pub(super) fn subscribe(
        self: &Arc<Self>,
        events: mpsc::Sender<SourceEvent>,
        observer: Arc<dyn WatchObserver>,
    ) -> Subscription {
        let (relayed, queued) = mpsc::unbounded_channel();
        // Ends when the subscription goes (its sender with it) or the dispatcher does.
        tokio::spawn(relay(queued, events));
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.subscribers.insert(
            id,
            Subscriber {
                kinds: HashSet::new(),
                events: relayed,
                observer,
            },
        );
        Subscription {
            id,
            shared: self.clone(),
        }
    }
}

/// Shared watches over a cluster no server answers, in the namespace `ns`: their watches
/// retry in the background and never list, so a test plays their part (their store, their
/// events) itself. Also the dispatcher's tests'.
#[cfg(test)]
pub(super) fn unanswered() -> (Arc<LiveCluster>, Arc<SharedWatches>) {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let live = Arc::new(LiveCluster::new(kube::Client::try_from(config).unwrap()));
    let shared = SharedWatches::new(
        live.clone(),
        &["ns".to_string()],
        InitialList::Streaming,
        Arc::new(Metrics::new()),
    );
    (live, shared)
}

/// One shard dispatcher's subscription to [`SharedWatches`]; dropping it unsubscribes.
pub(super) struct Subscription {
    id: u64,
    shared: Arc<SharedWatches>,
}

impl Subscription {
    /// Have `kind` watched whole (the objects matching `labels`; `None`: all), once for the
    /// replica, its store keeping `keep` of each object, and send its events to this
    /// subscriber from now on. `cluster_scoped`: one watch for every namespace.
    pub(super) fn watch(
        &self,
        kind: &TypeRef,
        labels: Option<String>,
        keep: Keep,
        cluster_scoped: bool,
    ) {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        if !state.kinds.contains_key(kind) {
            // Declared before the tasks start, as a shard's own watches are.
            shared.stores.declare(kind, labels.as_deref(), keep);
            let observer: Arc<dyn WatchObserver> = Arc::new(Listed {
                state: shared.state.clone(),
                metrics: shared.metrics.clone(),
            });
            let mut tasks = shared.tasks.lock();
            let mut watched = Watched::default();
            for watch in Watch::spread(
                kind,
                &shared.namespaces,
                cluster_scoped,
                labels.clone(),
                None,
            ) {
                tracing::info!(%kind, namespace = ?watch.namespace, "watching a kind for every shard of the replica");
                tasks.spawn(source::run(
                    shared.live.clone(),
                    shared.stores.clone(),
                    watch.clone(),
                    shared.initial_list,
                    shared.events.clone(),
                    observer.clone(),
                ));
                watched.watches.push(watch);
            }
            state.kinds.insert(kind.clone(), watched);
        }
        let State {
            kinds, subscribers, ..
        } = &mut *state;
        // One watch per kind: every shard of a controller asks for a kind alike (its extra
        // watches, or every object of a kind read).
        debug_assert!(
            kinds[kind].watches.iter().all(|w| w.labels == labels),
            "{kind} asked for with another selector than it is watched with"
        );
        let Some(subscriber) = subscribers.get_mut(&self.id) else {
            return;
        };
        if !subscriber.kinds.insert(kind.clone()) {
            return;
        }
        let watched = &kinds[kind];
        for watch in &watched.watches {
            subscriber.observer.declare(watch);
            if watched.synced.contains(watch) {
                subscriber.observer.synced(watch, true);
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.shared.state.lock().subscribers.remove(&self.id);
    }
}

/// What the shared watches tell about themselves: kept, and passed on to the subscribers
/// of the kind; a failure is counted once, in the metrics.
struct Listed {
    state: Arc<Mutex<State>>,
    metrics: Arc<Metrics>,
}

impl WatchObserver for Listed {
    fn synced(&self, watch: &Watch, synced: bool) {
        let mut state = self.state.lock();
        if let Some(watched) = state.kinds.get_mut(&watch.type_ref) {
            if synced {
                watched.synced.insert(watch.clone());
            } else {
                watched.synced.remove(watch);
            }
        }
        for subscriber in state.subscribers.values() {
            if subscriber.kinds.contains(&watch.type_ref) {
                subscriber.observer.synced(watch, synced);
            }
        }
    }

    fn failed(&self, watch: &Watch, _: &kube::runtime::watcher::Error) {
        self.metrics.watch_restarted(&watch.type_ref);
    }
}

/// Send every event the shared watches see to each subscriber of its kind, in order,
/// without waiting for any of them (see [`relay`]).
async fn forward(mut events: mpsc::Receiver<SourceEvent>, state: Arc<Mutex<State>>) {
    while let Some(event) = events.recv().await {
        let kind = event.reference.type_ref();
        for subscriber in state.lock().subscribers.values() {
            if subscriber.kinds.contains(&kind) {
                let _ = subscriber.events.send(event.clone());
            }
        }
    }
}

/// Pass one subscriber's events on to its dispatcher, as fast as it takes them.
async fn relay(
    mut queued: mpsc::UnboundedReceiver<SourceEvent>,
    dispatcher: mpsc::Sender<SourceEvent>,
) {
    while let Some(event) = queued.recv().await {
        if dispatcher.send(event).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectRef;
    use crate::watch::filter::EventKind;
    use std::time::Duration;

    /// What a shard's dispatcher heard about the watches.
    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl WatchObserver for Heard {
        fn declare(&self, watch: &Watch) {
            self.0.lock().push(format!("declared {}", watch.type_ref));
        }
        fn synced(&self, watch: &Watch, synced: bool) {
            self.0
                .lock()
                .push(format!("synced {} {synced}", watch.type_ref));
        }
        fn failed(&self, _: &Watch, _: &kube::runtime::watcher::Error) {}
    }

    fn event(name: &str) -> SourceEvent {
        event_of("Secret", name)
    }

    fn event_of(kind: &str, name: &str) -> SourceEvent {
        let object = serde_json::json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns"}});
        SourceEvent {
            kind: EventKind::Added,
            reference: ObjectRef::new("v1", kind, Some("ns"), name),
            object: Arc::new(object),
            listed: false,
        }
    }

    async fn received(events: &mut mpsc::Receiver<SourceEvent>) -> Option<String> {
        tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .ok()
            .flatten()
            .map(|e| e.reference.name)
    }

    #[tokio::test]
    async fn each_kind_is_watched_once_and_a_late_subscriber_hears_it_has_listed() {
        // The test plays the watches' part through the observer they were given.
        let (_, shared) = unanswered();
        let secrets = TypeRef::new("v1", "Secret");
        let (a_tx, mut a_events) = mpsc::channel(8);
        let a_heard = Arc::new(Heard::default());
        let a = shared.subscribe(a_tx, a_heard.clone());
        a.watch(&secrets, None, Keep::Digest, false);
        a.watch(&secrets, None, Keep::Digest, false);
        assert_eq!(shared.state.lock().kinds[&secrets].watches.len(), 1);
        assert_eq!(*a_heard.0.lock(), ["declared v1/Secret"], "told once");

        let listed = Listed {
            state: shared.state.clone(),
            metrics: Arc::new(Metrics::new()),
        };
        let watch = shared.state.lock().kinds[&secrets].watches[0].clone();
        listed.synced(&watch, true);
        assert_eq!(a_heard.0.lock().last().unwrap(), "synced v1/Secret true");

        // A shard taken later: the watch is not started again, and it has listed.
        let (b_tx, mut b_events) = mpsc::channel(8);
        let b_heard = Arc::new(Heard::default());
        let b = shared.subscribe(b_tx, b_heard.clone());
        b.watch(&secrets, None, Keep::Digest, false);
        assert_eq!(shared.state.lock().kinds.len(), 1);
        assert_eq!(
            *b_heard.0.lock(),
            ["declared v1/Secret", "synced v1/Secret true"]
        );

        // Every event goes to both, in order; after a's shard is dropped, to b only.
        shared.events.send(event("one")).await.unwrap();
        shared.events.send(event("two")).await.unwrap();
        for events in [&mut a_events, &mut b_events] {
            assert_eq!(received(events).await.as_deref(), Some("one"));
            assert_eq!(received(events).await.as_deref(), Some("two"));
        }
        drop(a);
        shared.events.send(event("three")).await.unwrap();
        assert_eq!(received(&mut b_events).await.as_deref(), Some("three"));
        assert!(
            a_events.try_recv().is_err(),
            "an unsubscribed shard hears nothing"
        );
        drop(b);
    }

    #[tokio::test]
    async fn a_dispatcher_that_takes_no_events_holds_up_no_other() {
        let (_, shared) = unanswered();
        let secrets = TypeRef::new("v1", "Secret");
        // A dispatcher busy elsewhere: room for one event, and it takes none.
        let (busy_tx, _busy) = mpsc::channel(1);
        let busy = shared.subscribe(busy_tx, Arc::new(Heard::default()));
        busy.watch(&secrets, None, Keep::Digest, false);
        let (tx, mut events) = mpsc::channel(64);
        let other = shared.subscribe(tx, Arc::new(Heard::default()));
        other.watch(&secrets, None, Keep::Digest, false);
        for i in 0..20 {
            shared.events.send(event(&format!("s{i}"))).await.unwrap();
        }
        for i in 0..20 {
            assert_eq!(received(&mut events).await, Some(format!("s{i}")));
        }
    }

    #[tokio::test]
    async fn a_subscriber_hears_only_the_kinds_it_watches() {
        let (_, shared) = unanswered();
        let (tx, mut events) = mpsc::channel(8);
        let subscription = shared.subscribe(tx, Arc::new(Heard::default()));
        subscription.watch(
            &TypeRef::new("v1", "ConfigMap"),
            Some("app=x".into()),
            Keep::Whole,
            false,
        );
        // Forwarded in order: the ConfigMap's event comes after the Secret's.
        shared.events.send(event("a-secret")).await.unwrap();
        shared
            .events
            .send(event_of("ConfigMap", "a-map"))
            .await
            .unwrap();
        assert_eq!(
            received(&mut events).await.as_deref(),
            Some("a-map"),
            "a Secret's event is not for a subscriber of ConfigMaps"
        );
    }
}
