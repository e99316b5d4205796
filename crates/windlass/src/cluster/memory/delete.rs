//! Deletion: finalizers holding an object back, and what a real cluster's garbage collector
//! and namespace controller do after every deletion.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::store::{Key, State};
use super::watch::{WatchEvent, WatchEventType};
use crate::cluster::Deletion;
use crate::object::ManifestExt;

/// Delete the object at `key`, and whatever that deletion makes garbage.
pub(super) fn delete_locked(state: &mut State, key: &Key) -> Deletion {
    if !state.objects.contains_key(key) {
        return Deletion::NotFound;
    }
    mark_deleted(state, key);
    collect_garbage(state);
    if state.objects.contains_key(key) {
        Deletion::Terminating
    } else {
        Deletion::Deleted
    }
}

/// Remove the object, or, if finalizers (or, for a namespace, its contents) hold it, give
/// it a deletionTimestamp. The caller runs [`collect_garbage`] afterwards.
fn mark_deleted(state: &mut State, key: &Key) {
    let Some(entry) = state.objects.get(key) else {
        return;
    };
    let object = entry.object().clone();
    let is_namespace = key.is_namespace();
    if object.finalizers().is_empty() && !is_namespace {
        remove(state, key, object);
        return;
    }
    if object.is_terminating() {
        return;
    }
    let mut next = object;
    let rv = state.next_resource_version();
    let metadata = next.metadata_mut();
    metadata.insert(
        "deletionTimestamp".into(),
        json!(crate::object::timestamp_now()),
    );
    metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
    metadata.insert("resourceVersion".into(), json!(rv));
    if is_namespace {
        next["status"] = json!({"phase": "Terminating"});
    }
    if let Some(e) = state.objects.get_mut(key) {
        e.set_object(next.clone());
    }
    state.pending.push(WatchEvent {
        event_type: WatchEventType::Modified,
        object: next,
    });
}

/// Remove the object from the store. Its `Deleted` event carries the object with a new
/// resourceVersion, the deletion's own, as a real API server's watch does: a watcher that
/// resumes from the last version it saw must never see a version go backwards.
pub(super) fn remove(state: &mut State, key: &Key, mut last: Value) {
    state.objects.remove(key);
    let rv = state.next_resource_version();
    last.metadata_mut()
        .insert("resourceVersion".into(), json!(rv));
    state.pending.push(WatchEvent {
        event_type: WatchEventType::Deleted,
        object: last,
    });
}

/// What the garbage collector and the namespace controller of a real cluster do, run to a
/// fixed point after every deletion: delete objects whose owners are all gone and the
/// contents of terminating namespaces, and remove terminating namespaces once empty.
pub(super) fn collect_garbage(state: &mut State) {
    loop {
        let uids: BTreeSet<String> = state
            .objects
            .values()
            .filter_map(|e| e.object().uid().map(str::to_string))
            .collect();
        let terminating_namespaces = terminating_namespaces(state);
        let garbage = garbage(state, &uids, &terminating_namespaces);
        let empty_namespaces = emptied_namespaces(state, &terminating_namespaces);
        if garbage.is_empty() && empty_namespaces.is_empty() {
            remove_dangling_owner_references(state, &uids);
            return;
        }
        for key in garbage {
            mark_deleted(state, &key);
        }
        for key in empty_namespaces {
            if let Some(e) = state.objects.get(&key) {
                let last = e.object().clone();
                remove(state, &key, last);
            }
        }
    }
}

/// The names of the namespaces being deleted.
fn terminating_namespaces(state: &State) -> BTreeSet<String> {
    state
        .objects
        .iter()
        .filter(|(k, e)| k.is_namespace() && e.object().is_terminating())
        .map(|(k, _)| k.name().to_string())
        .collect()
}

/// The objects to delete now (not already being deleted): those whose owners are all gone
/// (`uids` are the objects that exist), and those in a terminating namespace.
fn garbage(
    state: &State,
    uids: &BTreeSet<String>,
    terminating_namespaces: &BTreeSet<String>,
) -> Vec<Key> {
    state
        .objects
        .iter()
        .filter(|(_, e)| !e.object().is_terminating())
        .filter(|(k, e)| {
            let orphaned = e.object()["metadata"]["ownerReferences"]
                .as_array()
                .filter(|refs| !refs.is_empty())
                .is_some_and(|refs| {
                    refs.iter()
                        .all(|r| r["uid"].as_str().is_none_or(|uid| !uids.contains(uid)))
                });
            orphaned || terminating_namespaces.contains(k.namespace())
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// The terminating namespaces that are empty and held by no finalizer: they go now.
fn emptied_namespaces(state: &State, terminating_namespaces: &BTreeSet<String>) -> Vec<Key> {
    terminating_namespaces
        .iter()
        .filter(|ns| !state.objects.keys().any(|k| k.namespace() == ns.as_str()))
        .map(|ns| Key::of_namespace(ns))
        .filter(|k| {
            state
                .objects
                .get(k)
                .is_some_and(|e| e.object().finalizers().is_empty())
        })
        .collect()
}

/// What the garbage collector does to an object that another owner still holds: it
/// removes the references to the owners that are gone (`uids` are the objects that exist).
fn remove_dangling_owner_references(state: &mut State, uids: &BTreeSet<String>) {
    let alive = |r: &Value| r["uid"].as_str().is_some_and(|uid| uids.contains(uid));
    let holding: Vec<Key> = state
        .objects
        .iter()
        .filter(|(_, e)| !e.object().is_terminating())
        .filter(|(_, e)| {
            e.object()["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| refs.iter().any(alive) && !refs.iter().all(alive))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for key in holding {
        let rv = state.next_resource_version();
        let Some(entry) = state.objects.get_mut(&key) else {
            continue;
        };
        let mut next = entry.object().clone();
        if let Some(refs) = next["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(alive);
        }
        next.metadata_mut()
            .insert("resourceVersion".into(), json!(rv));
        entry.set_object(next.clone());
        state.pending.push(WatchEvent {
            event_type: WatchEventType::Modified,
            object: next,
        });
    }
}
