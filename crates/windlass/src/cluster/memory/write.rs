//! One write to the store, the state already locked: the checks a server makes, then
//! creating the object or merging the write into the stored one (as the write method
//! says), and the commit every change goes through.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::apply::{merge_applied, remove_unapplied};
use super::delete::{collect_garbage, remove};
use super::store::{Entry, Key, KindInfo, State, register_crd_kinds};
use super::watch::{WatchEvent, WatchEventType};
use crate::cluster::validation::{check_metadata, normalize};
use crate::cluster::{Scope, WriteMethod};
use crate::error::{ClusterError, FieldCause};
use crate::object::{ManifestExt, ObjectRef, TypeRef, api_group, deleted_by_write};

/// Metadata the server owns; writers cannot set it.
const SYSTEM_METADATA: [&str; 7] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
];

/// One write of `manifest` by `manager` with `method`, the state already locked.
pub(super) fn apply_locked(
    state: &mut State,
    manifest: &Value,
    method: WriteMethod,
    manager: &str,
) -> Result<Value, ClusterError> {
    let request = Request::checked(state, manifest, method, manager)?;
    match state.objects.get(&request.key).cloned() {
        None => create_requested(state, request),
        Some(entry) => update_stored(state, request, &entry),
    }
}

/// One write as the store takes it, once checked.
struct Request<'a> {
    /// Where the object goes.
    key: Key,
    /// The manifest as the writer sent it, for messages.
    manifest: &'a Value,
    method: WriteMethod,
    manager: &'a str,
    /// How the store serves the kind.
    info: KindInfo,
    /// The resourceVersion the writer expects to overwrite, if it gave one.
    requested_version: Option<String>,
    /// The fields as the writer sent them: what server-side apply records (a Secret's
    /// `stringData`), not what the server stores them as.
    sent: Value,
    /// What the store is to hold: `sent`, normalized.
    desired: Value,
}

impl<'a> Request<'a> {
    /// Check `manifest` as a server would and work out where it goes and what of it the
    /// writer may set.
    fn checked(
        state: &State,
        manifest: &'a Value,
        method: WriteMethod,
        manager: &'a str,
    ) -> Result<Self, ClusterError> {
        let (api_version, kind, info) = checked_kind(state, manifest)?;
        let namespace = namespace_of(state, manifest, api_version, kind, info.scope)?;
        let key = Key::new(
            api_group(api_version),
            kind,
            &namespace,
            manifest.name().unwrap_or_default(),
        );
        let (sent, desired) = writable(manifest, kind, info);
        Ok(Request {
            key,
            manifest,
            method,
            manager,
            info,
            requested_version: manifest.resource_version().map(str::to_string),
            sent,
            desired,
        })
    }
}

/// `apiVersion/kind/name` of a manifest, for messages.
fn describe(manifest: &Value) -> String {
    format!(
        "{}/{}/{}",
        manifest.api_version().unwrap_or("?"),
        manifest.kind().unwrap_or("?"),
        manifest.name().unwrap_or("?")
    )
}

/// The manifest's apiVersion, kind and what the store knows of that kind; refused if it
/// is no map, lacks either, is of an unknown kind, or has invalid metadata or owner
/// references.
fn checked_kind<'m>(
    state: &State,
    manifest: &'m Value,
) -> Result<(&'m str, &'m str, KindInfo), ClusterError> {
    let invalid = |message: String| ClusterError::invalid(describe(manifest), message);
    if !manifest.is_object() {
        return Err(invalid("an object must be a map".into()));
    }
    let api_version = manifest
        .api_version()
        .ok_or_else(|| invalid("apiVersion: required".into()))?;
    let kind = manifest
        .kind()
        .ok_or_else(|| invalid("kind: required".into()))?;
    let info = state.kind(&TypeRef::new(api_version, kind))?;
    check_metadata(kind, manifest).map_err(invalid)?;
    check_owner_references(manifest).map_err(invalid)?;
    super::builtin::check_shape(manifest).map_err(invalid)?;
    Ok((api_version, kind, info))
}

/// The namespace the object goes to: none for a cluster-scoped kind; for a namespaced one,
/// its own, which must exist and, unless the object is already stored there, not be
/// terminating.
fn namespace_of(
    state: &State,
    manifest: &Value,
    api_version: &str,
    kind: &str,
    scope: Scope,
) -> Result<String, ClusterError> {
    if scope == Scope::Cluster {
        return Ok(String::new());
    }
    let ns = manifest
        .namespace()
        .ok_or_else(|| {
            ClusterError::invalid(
                describe(manifest),
                "metadata.namespace: required for a namespaced kind",
            )
        })?
        .to_string();
    match state.namespace(&ns) {
        None => return Err(ClusterError::NotFound(format!("namespace {ns}"))),
        Some(n) if n.is_terminating() => {
            let key = Key::new(
                api_group(api_version),
                kind,
                &ns,
                manifest.name().unwrap_or_default(),
            );
            if !state.objects.contains_key(&key) {
                return Err(ClusterError::Forbidden(format!(
                    "unable to create {}: namespace {ns} is being terminated",
                    describe(manifest)
                )));
            }
        }
        Some(_) => {}
    }
    Ok(ns)
}

/// What of `manifest` the writer may set, as sent and as the server stores it: without
/// the metadata the server owns, without `status` where it is a subresource, and without a
/// namespace for a cluster-scoped kind.
fn writable(manifest: &Value, kind: &str, info: KindInfo) -> (Value, Value) {
    let mut desired = manifest.clone();
    if info.status_subresource
        && let Some(map) = desired.as_object_mut()
    {
        map.remove("status");
    }
    let metadata = desired.metadata_mut();
    if info.scope == Scope::Cluster {
        metadata.remove("namespace");
    }
    for field in SYSTEM_METADATA {
        metadata.remove(field);
    }
    // Server-side apply records the fields the writer sent (a Secret's `stringData`),
    // not what the server stores them as.
    let sent = desired.clone();
    normalize(kind, &mut desired);
    (sent, desired)
}

/// A write to a name nothing is stored under: create the object, unless the writer
/// expected one to exist (it gave a resourceVersion).
fn create_requested(state: &mut State, request: Request<'_>) -> Result<Value, ClusterError> {
    if request.requested_version.is_some() {
        return Err(ClusterError::Conflict {
            object: describe(request.manifest),
            message: "the object does not exist, so no resourceVersion may be given".into(),
        });
    }
    let applied = (request.method == WriteMethod::Apply).then_some(request.sent);
    let mut desired = request.desired;
    if request.method == WriteMethod::Update {
        crate::values::prune_nulls(&mut desired);
    }
    let desired = state.rules.default(desired);
    state.rules.check(&desired, None)?;
    super::builtin::check_workload(&desired)?;
    Ok(create(
        state,
        request.key,
        desired,
        applied,
        request.manager,
        request.info.generation,
    ))
}

/// A write to a stored object: refuse a stale resourceVersion, merge the write in as its
/// method says, keep what the server owns, and commit.
fn update_stored(
    state: &mut State,
    request: Request<'_>,
    entry: &Entry,
) -> Result<Value, ClusterError> {
    let stored = entry.object();
    if let Some(requested) = &request.requested_version
        && Some(requested.as_str()) != stored.resource_version()
    {
        return Err(ClusterError::Conflict {
            object: describe(request.manifest),
            message: format!(
                "the object has been modified (resourceVersion {requested} is not the latest, {})",
                stored.resource_version().unwrap_or("?")
            ),
        });
    }
    let mut next = merged(&request, entry);
    restore_system_metadata(&mut next, stored);
    if request.info.status_subresource {
        keep_status(&mut next, stored);
    }
    let applied = (request.method == WriteMethod::Apply).then_some(request.sent);
    let applied = applied.map(|a| (request.manager.to_string(), a));
    commit(state, request.key, next, applied)
}

/// The stored object with the write merged in: an apply merges what is applied and
/// removes what this manager applied before and no longer does; an update is a JSON merge
/// patch (`null` deletes); a replace takes the written object whole.
fn merged(request: &Request<'_>, entry: &Entry) -> Value {
    let stored = entry.object();
    let desired = &request.desired;
    match request.method {
        WriteMethod::Apply => {
            let mut base = stored.clone();
            if let Some(previous) = entry.applied(request.manager) {
                remove_unapplied(&mut base, previous, desired, true);
            }
            merge_applied(&mut base, desired, true);
            base
        }
        WriteMethod::Update => {
            let mut base = stored.clone();
            json_patch::merge(&mut base, desired);
            base
        }
        WriteMethod::Replace => desired.clone(),
    }
}

/// A JSON patch of the object stored at `key` (the object `object`), the state already
/// locked. The patch may not change the object's identity, and does not write what the
/// server owns.
pub(super) fn patch_locked(
    state: &mut State,
    key: Key,
    object: &ObjectRef,
    patch: &json_patch::Patch,
) -> Result<Value, ClusterError> {
    let stored = state
        .objects
        .get(&key)
        .ok_or_else(|| ClusterError::NotFound(object.to_string()))?
        .object()
        .clone();
    let mut next = stored.clone();
    let patch = without_null_tests_of_missing_paths(patch, &next);
    if let Err(e) = crate::values::apply_json_patch(&mut next, &patch) {
        return Err(ClusterError::invalid(
            object.to_string(),
            format!("patch does not apply: {e}"),
        ));
    }
    check_identity_unchanged(object, &stored, &next)?;
    check_metadata(&object.kind, &next)
        .map_err(|message| ClusterError::invalid(object.to_string(), message))?;
    // Server-owned fields (generation, resourceVersion, deletionTimestamp…)
    // are not the patch's to change.
    restore_system_metadata(&mut next, &stored);
    // The main resource endpoint does not write a status subresource.
    if state
        .kind_of(&object.api_version, &object.kind)?
        .status_subresource
    {
        keep_status(&mut next, &stored);
    }
    commit(state, key, next, None)
}

/// `patch` without its `test`s of `null` on paths `object` does not have.
///
/// The API server's JSON patch lets `test` with `null` pass on a missing path
/// ("the list is still absent"); the json-patch crate does not.
fn without_null_tests_of_missing_paths(
    patch: &json_patch::Patch,
    object: &Value,
) -> json_patch::Patch {
    json_patch::Patch(
        patch
            .0
            .iter()
            .filter(|op| {
                !matches!(op, json_patch::PatchOperation::Test(t)
                    if t.value.is_null() && object.pointer(t.path.as_str()).is_none())
            })
            .cloned()
            .collect(),
    )
}

/// Refuse a patch that changes what identifies the object: its uid, name, namespace or
/// creationTimestamp.
fn check_identity_unchanged(
    object: &ObjectRef,
    stored: &Value,
    next: &Value,
) -> Result<(), ClusterError> {
    for immutable in ["uid", "name", "namespace", "creationTimestamp"] {
        if next["metadata"].get(immutable) != stored["metadata"].get(immutable) {
            // As the API server answers: the field, and the fixed text
            // of its immutable-field check.
            let field = format!("metadata.{immutable}");
            return Err(ClusterError::Invalid {
                object: object.to_string(),
                message: format!("{field}: field is immutable"),
                causes: vec![FieldCause {
                    field,
                    reason: "FieldValueInvalid".into(),
                    message: "field is immutable".into(),
                }],
            });
        }
    }
    Ok(())
}

/// Server-owned metadata comes from the stored object, whatever a writer sent.
pub(super) fn restore_system_metadata(next: &mut Value, stored: &Value) {
    let stored_meta = stored.get("metadata").and_then(Value::as_object);
    let next_meta = next.metadata_mut();
    for field in SYSTEM_METADATA {
        next_meta.remove(field);
        if let Some(v) = stored_meta.and_then(|m| m.get(field)) {
            next_meta.insert(field.to_string(), v.clone());
        }
    }
}

/// Store `next` in place of the object at `key`, doing what a server does on every
/// update: refuse new finalizers on a terminating object, bump generation and
/// resourceVersion only if something changed, remove the object once a terminating one
/// has no finalizers left, and publish the event.
pub(super) fn commit(
    state: &mut State,
    key: Key,
    next: Value,
    applied: Option<(String, Value)>,
) -> Result<Value, ClusterError> {
    // The kind's schema defaults and CEL rules, with the stored object as `oldSelf`.
    let mut next = state.rules.default(next);
    state
        .rules
        .check(&next, state.objects.get(&key).map(Entry::object))?;
    super::builtin::check_workload(&next)?;
    // Judge the write against the stored object in place; the callers already hold their
    // own copy, so cloning the entry (object and every manager's applied fields) here again
    // is not needed.
    let Some(entry) = state.objects.get_mut(&key) else {
        return Err(ClusterError::NotFound(format!(
            "{}/{}",
            key.kind(),
            key.name()
        )));
    };
    let writer = applied.as_ref().map(|(manager, _)| manager.as_str());
    entry.disown_changed(writer, &next);
    let stored = entry.object();
    check_no_new_finalizers(&key, stored, &next)?;
    if next == *stored {
        let unchanged = stored.clone();
        if let Some((manager, applied)) = applied {
            entry.set_applied(manager, applied);
        }
        return Ok(unchanged);
    }
    // Kinds with a generation got one at creation; it counts changes outside metadata
    // and status.
    if let Some(generation) = stored.generation()
        && spec_changed(stored, &next)
    {
        next.metadata_mut()
            .insert("generation".into(), json!(generation + 1));
    }
    if let Some((manager, applied)) = applied {
        entry.set_applied(manager, applied);
    }
    let rv = state.next_resource_version();
    next.metadata_mut()
        .insert("resourceVersion".into(), json!(rv));
    if deleted_by_write(&next) {
        // Deleted instead of stored: the answer is the object as the write left it, at
        // the version it had (nothing new was stored; the entry still holds it); the
        // deletion event has a new one.
        let before = state
            .objects
            .get(&key)
            .and_then(|entry| entry.object().resource_version().map(str::to_string));
        let mut answer = next.clone();
        answer
            .metadata_mut()
            .insert("resourceVersion".into(), json!(before));
        remove(state, &key, next);
        collect_garbage(state);
        return Ok(answer);
    }
    register_crd_kinds(state, &next);
    if let Some(entry) = state.objects.get_mut(&key) {
        entry.set_object(next.clone());
    }
    state.pending.push(WatchEvent {
        event_type: WatchEventType::Modified,
        object: next.clone(),
    });
    Ok(next)
}

/// Refuse a write that adds a finalizer to an object being deleted, as a server does.
fn check_no_new_finalizers(key: &Key, stored: &Value, next: &Value) -> Result<(), ClusterError> {
    if stored.is_terminating() {
        let before: BTreeSet<&str> = stored.finalizers().into_iter().collect();
        if let Some(added) = next.finalizers().into_iter().find(|f| !before.contains(f)) {
            return Err(ClusterError::invalid(
                format!("{}/{}", key.kind(), key.name()),
                format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizer {added}"
                ),
            ));
        }
    }
    Ok(())
}

/// Store a new object at `key`: give it a uid, a creationTimestamp, the next
/// resourceVersion and (for kinds that have one) generation 1, and publish the event.
pub(super) fn create(
    state: &mut State,
    key: Key,
    mut object: Value,
    applied: Option<Value>,
    manager: &str,
    generation: bool,
) -> Value {
    let rv = state.next_resource_version();
    let metadata = object.metadata_mut();
    metadata.insert("uid".into(), json!(new_uid()));
    metadata.insert(
        "creationTimestamp".into(),
        json!(crate::object::timestamp_now()),
    );
    metadata.insert("resourceVersion".into(), json!(rv));
    if generation {
        metadata.insert("generation".into(), json!(1));
    }
    if !key.namespace().is_empty() {
        metadata.insert("namespace".into(), json!(key.namespace()));
    }
    register_crd_kinds(state, &object);
    state.objects.insert(
        key,
        Entry::new(object.clone(), applied.map(|a| (manager.to_string(), a))),
    );
    state.pending.push(WatchEvent {
        event_type: WatchEventType::Added,
        object: object.clone(),
    });
    object
}

/// Put the stored object's `status` back into `next` (or remove `next`'s): a write to the
/// main resource does not change a status subresource.
pub(super) fn keep_status(next: &mut Value, stored: &Value) {
    if let Some(map) = next.as_object_mut() {
        match stored.get("status") {
            Some(status) => {
                map.insert("status".into(), status.clone());
            }
            None => {
                map.remove("status");
            }
        }
    }
}

/// Whether anything outside `metadata` and `status` differs: what bumps `generation`.
fn spec_changed(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        v.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.as_str() != "metadata" && k.as_str() != "status")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(a) != strip(b)
}

/// Refuse owner references that lack any of apiVersion, kind, name and uid.
fn check_owner_references(manifest: &Value) -> Result<(), String> {
    let Some(refs) = manifest
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
    else {
        return Ok(());
    };
    let refs = refs
        .as_array()
        .ok_or("metadata.ownerReferences: must be a list")?;
    for (i, r) in refs.iter().enumerate() {
        for field in ["apiVersion", "kind", "name", "uid"] {
            if r.get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(format!("metadata.ownerReferences[{i}].{field}: required"));
            }
        }
    }
    Ok(())
}

/// A random version 4 UUID, as a server gives each new object.
fn new_uid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let hex = crate::values::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
