//! The shard label on new CRs, where the API server cannot select shards: a shard's watch
//! of the primary kind selects `windlass.dev/shard=k`, so a CR is seen by its shard only
//! once it carries the label.
//!
//! Every replica watches the CRs without the label (`!windlass.dev/shard`: new CRs, and
//! those of an operator that was not sharded before), a watch that is empty but for the
//! moments after creates. The replica holding a CR's shard labels it; the label is what its
//! uid says, so replicas that disagree for a moment about who holds a shard still write the
//! same value. The patch is guarded by the resourceVersion the watch saw, so it cannot
//! clobber a change made since (the watch's next event is labelled instead), and it needs
//! no read. A CR whose shard nobody holds yet stays
//! listed and is labelled by the replica that takes the shard, at its next poll.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::super::cache::{Keep, Stores};
use super::super::source::{self, InitialList, SourceEvent, Watch, WatchObserver};
use crate::cluster::{Cluster, LiveCluster};
use crate::config::ShardingConfig;
use crate::config::sharding::SHARD;
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::runtime::leader::Leadership;
use crate::watch::filter::EventKind;

/// Label patches in flight at once.
const LABELS_IN_FLIGHT: usize = 16;

/// Reports nothing: the unlabelled CRs do not count for readiness.
struct Unobserved;

impl WatchObserver for Unobserved {
    fn synced(&self, _: &Watch, _: bool) {}
    fn failed(&self, _: &Watch, _: &kube::runtime::watcher::Error) {}
}

/// Label the CRs of `primary` in `namespaces` (empty: all) whose shard (among `shards`)
/// this replica holds (`held`), as they appear and every `poll`. Runs until aborted.
pub(super) async fn run(
    live: Arc<LiveCluster>,
    primary: TypeRef,
    namespaces: Vec<String>,
    initial_list: InitialList,
    shards: u32,
    held: Arc<Mutex<BTreeMap<u32, Leadership>>>,
    poll: Duration,
) {
    let sharding = ShardingConfig {
        shards,
        ..ShardingConfig::default()
    };
    let stores = Arc::new(Stores::new());
    let (events_tx, mut events) = mpsc::channel::<SourceEvent>(source::EVENTS_IN_FLIGHT);
    let unlabelled = format!("!{SHARD}");
    stores.declare(&primary, Some(&unlabelled), Keep::Whole);
    let mut watches = JoinSet::new();
    for watch in Watch::spread(&primary, &namespaces, false, Some(unlabelled.clone()), None) {
        watches.spawn(source::run(
            live.clone(),
            stores.clone(),
            watch,
            initial_list,
            events_tx.clone(),
            Arc::new(Unobserved),
        ));
    }
    drop(events_tx);
    // The unlabelled CRs seen, as the watch last saw them; those to try (again), in order;
    // those being labelled. Many at once: a thousand CRs created together wait for their
    // labels, and one patch after the other would be what the whole fleet waits for.
    let mut pending: HashMap<ObjectRef, Seen> = HashMap::new();
    let mut to_try: VecDeque<ObjectRef> = VecDeque::new();
    let mut in_flight: HashSet<ObjectRef> = HashSet::new();
    let mut patches: JoinSet<(ObjectRef, u32, Result<(), ClusterError>)> = JoinSet::new();
    let mut tick = tokio::time::interval(poll);
    loop {
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { return };
                match (event.kind, Seen::of(&event.object)) {
                    (EventKind::Deleted, _) | (_, None) => {
                        pending.remove(&event.reference);
                    }
                    (_, Some(seen)) => {
                        pending.insert(event.reference.clone(), seen);
                        to_try.push_back(event.reference);
                    }
                }
            }
            Some(done) = patches.join_next(), if !patches.is_empty() => {
                let Ok((cr, shard, result)) = done else { continue };
                in_flight.remove(&cr);
                match result {
                    Ok(()) => {
                        tracing::debug!(%cr, shard, "labelled the CR with its shard");
                        pending.remove(&cr);
                    }
                    Err(ClusterError::NotFound(_) | ClusterError::Invalid { .. }) => {
                        // Gone, or changed since: the watch's next event brings it back.
                        pending.remove(&cr);
                    }
                    Err(e) => tracing::warn!(%cr, error = %e, "cannot label the CR with its shard"),
                }
            }
            // A shard taken since, or a patch that failed: every pending CR is tried again.
            _ = tick.tick() => to_try.extend(pending.keys().cloned()),
        }
        while in_flight.len() < LABELS_IN_FLIGHT {
            let Some(cr) = to_try.pop_front() else { break };
            if in_flight.contains(&cr) {
                continue;
            }
            let Some(seen) = pending.get(&cr).cloned() else {
                continue;
            };
            let Some(shard) = sharding.shard_of(&seen.uid) else {
                continue;
            };
            if !held.lock().get(&shard).is_some_and(Leadership::is_leader) {
                continue;
            }
            in_flight.insert(cr.clone());
            let live = live.clone();
            patches.spawn(async move {
                let result = label(&live, &cr, &seen, shard).await;
                (cr, shard, result)
            });
        }
    }
}

/// An unlabelled CR as its watch last saw it.
#[derive(Debug, Clone)]
struct Seen {
    uid: String,
    version: String,
    has_labels: bool,
}

impl Seen {
    fn of(object: &serde_json::Value) -> Option<Seen> {
        Some(Seen {
            uid: object.uid()?.to_string(),
            version: object.resource_version()?.to_string(),
            has_labels: object["metadata"]["labels"].is_object(),
        })
    }
}

/// Put the label of `shard` on `cr`, if it is still as `seen`.
async fn label(
    live: &LiveCluster,
    cr: &ObjectRef,
    seen: &Seen,
    shard: u32,
) -> Result<(), ClusterError> {
    let key = SHARD.replace('~', "~0").replace('/', "~1");
    let mut ops =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": seen.version})];
    if seen.has_labels {
        ops.push(json!({"op": "add", "path": format!("/metadata/labels/{key}"), "value": shard.to_string()}));
    } else {
        ops.push(
            json!({"op": "add", "path": "/metadata/labels", "value": {SHARD: shard.to_string()}}),
        );
    }
    let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
        .map_err(|e| ClusterError::api(format!("building the shard label patch of {cr}: {e}")))?;
    live.patch(cr, &patch).await.map(|_| ())
}
