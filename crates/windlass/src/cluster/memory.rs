//! The in-memory cluster: a faithful, in-process stand-in for a kube-apiserver.
//!
//! Faithful means: what this store accepts, stores and returns is what a real API server
//! would, for the parts a rollout can observe:
//!
//! - objects get a `uid` and `creationTimestamp` once, at creation, and keep them through
//!   every later write;
//! - `resourceVersion` is one counter for the whole store, bumped only by writes that
//!   change something (a no-op apply leaves it alone, as a real server does), and a write
//!   carrying a stale `resourceVersion` is a conflict;
//! - `generation` starts at 1 and is bumped by changes outside `metadata` and `status`;
//! - `status` is kept apart where the kind has a status subresource (built-in kinds, CRDs
//!   that declare one): applies ignore it, [`Cluster::write_status`] writes only it;
//! - server-side apply remembers what each field manager applied, so a field the operator
//!   stops setting is removed while fields set by others stay; `ownerReferences` merge by
//!   uid and `finalizers` as a set, as their list types say. Other lists are treated as
//!   atomic: an apply replaces the whole list, where a real server merges lists keyed by
//!   name (containers, env) item by item, keeping items other managers added;
//! - a manager loses the fields another writer changes (an update such as `kubectl edit`,
//!   a patch, or another manager's apply), and objects are returned with the
//!   `managedFields` entry of this cluster's own field manager, so windlass can tell that
//!   a field it owns was changed behind its back. Lists appear in it as atomic (`f:list: {}`);
//!   [`MemoryCluster::update_as`] writes as another manager;
//! - deleting an object with finalizers only sets `deletionTimestamp`; it goes away when
//!   the last finalizer is removed, and no finalizer may be added meanwhile;
//! - deleting an owner garbage-collects every object whose owners are all gone (and
//!   removes the reference to it from objects another owner still holds), and deleting a
//!   namespace deletes its contents;
//! - namespaced objects need an existing namespace; names, label keys and values and
//!   finalizer names are validated; kinds must be known (built in, registered, or defined by a stored CRD);
//! - every change is published as a watch event, in resourceVersion order whatever the
//!   number of concurrent writers; a deletion's event carries the deletion's own (new)
//!   resourceVersion, as a real watch does.
//!
//! Not modelled: admission webhooks, field-level validation against OpenAPI schemas,
//! conflicts between field managers (windlass always forces its apply), and API versions
//! of one group converting between each other (objects are keyed by group and kind).

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::validation::{KINDS_WITH_GENERATION, builtin_kinds, check_metadata, normalize};
use super::{Cluster, Deletion, ListQuery, Scope, WriteMethod};
use crate::error::{ClusterError, FieldCause};
use crate::object::{ManifestExt, ObjectRef, TypeRef, api_group};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventType {
    /// Created.
    Added,
    /// Changed (including gaining a deletionTimestamp).
    Modified,
    /// Removed from the store.
    Deleted,
}

/// One change in the in-memory cluster, as a watch would report it.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// What happened.
    pub event_type: WatchEventType,
    /// The object after the change (before it, for deletions).
    pub object: Value,
}

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

/// Namespaces every cluster starts with.
const INITIAL_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    group: String,
    kind: String,
    namespace: String,
    name: String,
}

#[derive(Debug, Clone)]
struct Entry {
    object: Value,
    /// What each field manager last applied (server-side apply's managed fields).
    applied: BTreeMap<String, Value>,
}

impl Entry {
    /// The object as the API returns it: with the `managedFields` entry of `manager`'s
    /// applies, when it has applied the object.
    fn view(&self, manager: &str) -> Value {
        let mut object = self.object.clone();
        if let Some(applied) = self.applied.get(manager) {
            let api_version = object.api_version().unwrap_or_default().to_string();
            object.metadata_mut().insert(
                "managedFields".into(),
                json!([{
                    "manager": manager,
                    "operation": "Apply",
                    "apiVersion": api_version,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields_v1(applied, true),
                }]),
            );
        }
        object
    }
}

/// The field set of an applied configuration in the API's `FieldsV1` shape: `f:<key>` per
/// map key, `{}` for leaves and (atomic, here) lists.
fn fields_v1(applied: &Value, top: bool) -> Value {
    let Some(map) = applied.as_object() else {
        return json!({});
    };
    let mut fields = Map::new();
    for (key, value) in map {
        if top && (key == "apiVersion" || key == "kind") {
            continue;
        }
        let child = match value {
            Value::Object(_) => fields_v1(value, false),
            _ => json!({}),
        };
        fields.insert(format!("f:{key}"), child);
    }
    Value::Object(fields)
}

/// Server-side apply's ownership rule: a field whose value a write changes now belongs to
/// that writer, so every other manager's applied configuration loses it. `writer` is the
/// manager of an apply; `None` for updates and patches, which take fields from every
/// applier.
fn disown_changed(
    applied: &mut BTreeMap<String, Value>,
    writer: Option<&str>,
    stored: &Value,
    next: &Value,
) {
    fn prune(config: &mut Value, stored: &Value, next: &Value) {
        let Some(map) = config.as_object_mut() else {
            return;
        };
        map.retain(|key, value| {
            let (before, after) = (stored.get(key), next.get(key));
            match value {
                Value::Object(inner) if !inner.is_empty() => {
                    prune(
                        value,
                        before.unwrap_or(&Value::Null),
                        after.unwrap_or(&Value::Null),
                    );
                    after.is_some()
                }
                _ => before == after,
            }
        });
    }
    for (manager, config) in applied.iter_mut() {
        if Some(manager.as_str()) != writer {
            prune(config, stored, next);
        }
    }
}

/// What the store knows of a kind.
#[derive(Debug, Clone, Copy)]
struct KindInfo {
    scope: Scope,
    /// Whether `status` is a subresource, written apart from the rest (true for built-in
    /// kinds and for CRDs that declare it). Without one, status is an ordinary field.
    status_subresource: bool,
    /// Whether objects carry `metadata.generation`.
    generation: bool,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<Key, Entry>,
    kinds: HashMap<TypeRef, KindInfo>,
    resource_version: u64,
    /// Events of the current operation, published (in order, under the lock) when it ends.
    pending: Vec<WatchEvent>,
}

/// A faithful in-memory Kubernetes API server; see the module docs for what it models.
///
/// ```
/// # tokio_test_block_on(async {
/// use serde_json::json;
/// use windlass::cluster::{Cluster, MemoryCluster, WriteMethod};
/// use windlass::object::{ManifestExt, ObjectRef};
///
/// let cluster = MemoryCluster::new();
/// let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
///                 "metadata": {"name": "web", "namespace": "default"}, "data": {"a": "1"}});
/// let stored = cluster.apply(&cm, WriteMethod::Apply).await.unwrap();
/// assert!(stored.uid().is_some());
/// // Applying the same manifest again changes nothing, not even the resourceVersion.
/// let again = cluster.apply(&cm, WriteMethod::Apply).await.unwrap();
/// assert_eq!(stored.resource_version(), again.resource_version());
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryCluster {
    state: Mutex<State>,
    events: broadcast::Sender<WatchEvent>,
    field_manager: String,
}

impl Default for MemoryCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryCluster {
    /// An empty cluster with the built-in kinds and the namespaces `default`,
    /// `kube-system`, `kube-public` and `kube-node-lease`. Its field manager is `windlass`.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(4096);
        let mut state = State::default();
        for (api_version, kind, scope) in builtin_kinds() {
            let info = KindInfo {
                scope,
                status_subresource: true,
                generation: KINDS_WITH_GENERATION.contains(&kind)
                    || kind == "CustomResourceDefinition",
            };
            state.kinds.insert(TypeRef::new(api_version, kind), info);
        }
        let cluster = MemoryCluster {
            state: Mutex::new(state),
            events,
            field_manager: crate::FIELD_MANAGER.to_string(),
        };
        for ns in INITIAL_NAMESPACES {
            cluster
                .create_namespace(ns)
                .expect("built-in namespaces are valid");
        }
        cluster.state.lock().pending.clear();
        cluster
    }

    /// Serve an additional kind with a status subresource (what installing a CRD does;
    /// applying a `CustomResourceDefinition` manifest registers its kinds too).
    pub fn register_kind(&self, type_ref: TypeRef, scope: Scope) {
        let info = KindInfo {
            scope,
            status_subresource: true,
            generation: true,
        };
        self.state.lock().kinds.insert(type_ref, info);
    }

    /// Serve the kinds a CRD defines, e.g. `cluster.register_crd(&MyApp::crd())`.
    pub fn register_crd(
        &self,
        crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    ) {
        if let Ok(manifest) = serde_json::to_value(crd) {
            register_crd_kinds(&mut self.state.lock(), &manifest);
        }
    }

    /// Store `manifest` as a user would with `kubectl apply`: a namespaced object without a
    /// namespace goes to `default`, and a namespace that does not exist is created first.
    /// What dry runs and RBAC discovery load from files goes in this way.
    ///
    /// # Errors
    /// What [`Cluster::apply`] refuses (no apiVersion or kind, an unknown kind, invalid
    /// metadata).
    pub(crate) async fn store(&self, mut manifest: Value) -> Result<Value, ClusterError> {
        if let (Some(api_version), Some(kind)) = (manifest.api_version(), manifest.kind()) {
            let type_ref = TypeRef::new(api_version, kind);
            if self.scope(&type_ref).await? == Scope::Namespaced {
                let namespace = manifest.namespace().unwrap_or("default").to_string();
                manifest
                    .metadata_mut()
                    .insert("namespace".into(), Value::String(namespace.clone()));
                self.create_namespace(&namespace)?;
            }
        }
        self.apply(&manifest, WriteMethod::Update).await
    }

    /// Create a namespace if it does not exist.
    pub fn create_namespace(&self, name: &str) -> Result<(), ClusterError> {
        let manifest = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let mut state = self.state.lock();
        let key = Key {
            group: String::new(),
            kind: "Namespace".into(),
            namespace: String::new(),
            name: name.into(),
        };
        if !state.objects.contains_key(&key) {
            check_metadata("Namespace", &manifest).map_err(|message| {
                ClusterError::invalid(format!("v1/Namespace/{name}"), message)
            })?;
            let mut object = manifest;
            object["status"] = json!({"phase": "Active"});
            create(&mut state, key, object, None, &self.field_manager, false);
        }
        drop(state);
        self.flush();
        Ok(())
    }

    /// Store objects as they are (their uid, creationTimestamp, generation and status
    /// kept when given), creating their namespaces, without publishing events: the cluster
    /// state a dry run starts from. Objects are validated as any write is; objects
    /// whose owners were not loaded are garbage, and collected, as a real cluster would.
    pub fn load(&self, manifests: impl IntoIterator<Item = Value>) -> Result<(), ClusterError> {
        for manifest in manifests {
            let type_ref = TypeRef::new(
                manifest.api_version().unwrap_or_default(),
                manifest.kind().unwrap_or_default(),
            );
            if self.state.lock().scope(&type_ref)? == Scope::Namespaced
                && let Some(ns) = manifest.namespace()
            {
                self.create_namespace(ns)?;
            }
            let mut state = self.state.lock();
            let stored = apply_locked(
                &mut state,
                &manifest,
                WriteMethod::Replace,
                &self.field_manager,
            )?;
            // Put back what a write would have assigned anew.
            let key = key_of_manifest(&stored);
            if let Some(entry) = state.objects.get_mut(&key) {
                let metadata = entry.object.metadata_mut();
                for field in ["uid", "creationTimestamp", "generation"] {
                    if let Some(given) = manifest.get("metadata").and_then(|m| m.get(field)) {
                        metadata.insert(field.to_string(), given.clone());
                    }
                }
                if let Some(status) = manifest.get("status") {
                    entry.object["status"] = status.clone();
                }
            }
            state.pending.clear();
        }
        let mut state = self.state.lock();
        collect_garbage(&mut state);
        state.pending.clear();
        Ok(())
    }

    /// Write `manifest` as field manager `manager` (what `kubectl edit` or another
    /// controller does, with [`WriteMethod::Update`] or [`WriteMethod::Replace`]) and return
    /// the object as stored. [`Cluster::apply`] is this with the cluster's own manager.
    pub fn update_as(
        &self,
        manager: &str,
        manifest: &Value,
        method: WriteMethod,
    ) -> Result<Value, ClusterError> {
        let result = {
            let mut state = self.state.lock();
            apply_locked(&mut state, manifest, method, manager).map(|stored| {
                state
                    .objects
                    .get(&key_of_manifest(&stored))
                    .map_or(stored, |e| e.view(&self.field_manager))
            })
        };
        self.flush();
        result
    }

    /// Watch events of every change from now on. A receiver that falls more than 4096
    /// events behind loses the oldest ones (and is told so by `recv`).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.events.subscribe()
    }

    /// Every stored object, ordered by group, kind, namespace and name.
    pub fn objects(&self) -> Vec<Value> {
        self.state
            .lock()
            .objects
            .values()
            .map(|e| e.object.clone())
            .collect()
    }

    /// Publish the events of the last operation. They are sent while the store is
    /// locked: events sent after unlocking could overtake each other between two writers,
    /// and a watcher would see a resourceVersion go backwards (and a watch cache keep an
    /// older copy of an object). Sending on a broadcast channel never blocks.
    fn flush(&self) {
        let mut state = self.state.lock();
        for event in state.pending.drain(..) {
            // No subscribers is fine: nobody is watching.
            let _ = self.events.send(event);
        }
    }

    fn key_of(state: &State, object: &ObjectRef) -> Result<(Key, Scope), ClusterError> {
        let scope = state.scope(&object.type_ref())?;
        let namespace = match scope {
            Scope::Cluster => String::new(),
            Scope::Namespaced => object.namespace.clone().ok_or_else(|| {
                ClusterError::invalid(
                    object.to_string(),
                    "metadata.namespace: required for a namespaced kind",
                )
            })?,
        };
        Ok((
            Key {
                group: api_group(&object.api_version).to_string(),
                kind: object.kind.clone(),
                namespace,
                name: object.name.clone(),
            },
            scope,
        ))
    }
}

impl State {
    fn kind(&self, type_ref: &TypeRef) -> Result<KindInfo, ClusterError> {
        self.kinds
            .get(type_ref)
            .copied()
            .ok_or_else(|| ClusterError::UnknownKind {
                api_version: type_ref.api_version.clone(),
                kind: type_ref.kind.clone(),
            })
    }

    fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.kind(type_ref).map(|k| k.scope)
    }

    fn next_resource_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn namespace(&self, name: &str) -> Option<&Value> {
        self.objects
            .get(&Key {
                group: String::new(),
                kind: "Namespace".into(),
                namespace: String::new(),
                name: name.into(),
            })
            .map(|e| &e.object)
    }
}

#[async_trait]
impl Cluster for MemoryCluster {
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.state.lock().scope(type_ref)
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        let state = self.state.lock();
        let (key, _) = Self::key_of(&state, object)?;
        Ok(state.objects.get(&key).map(|e| e.view(&self.field_manager)))
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        let (labels, fields) = query.selectors()?;
        let state = self.state.lock();
        let scope = state.scope(&query.type_ref)?;
        let group = query.type_ref.group();
        let namespace = match scope {
            Scope::Cluster => None,
            Scope::Namespaced => query.namespace.as_deref(),
        };
        Ok(state
            .objects
            .iter()
            .filter(|(k, _)| k.group == group && k.kind == query.type_ref.kind)
            .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, e)| e)
            .filter(|e| {
                crate::cluster::selector::labels_match(&labels, &e.object)
                    && fields.matches(&e.object)
            })
            .map(|e| e.view(&self.field_manager))
            .collect())
    }

    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError> {
        self.update_as(&self.field_manager, manifest, method)
    }

    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> Result<Deletion, ClusterError> {
        let result = {
            let mut state = self.state.lock();
            let (key, _) = Self::key_of(&state, object)?;
            let stored_uid = state.objects.get(&key).and_then(|e| e.object.uid());
            if uid.is_some_and(|uid| stored_uid.is_some_and(|s| s != uid)) {
                // The delete precondition failed: this is another object of that name.
                Deletion::NotFound
            } else {
                delete_locked(&mut state, &key)
            }
        };
        self.flush();
        Ok(result)
    }

    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        let result = {
            let mut state = self.state.lock();
            let (key, _) = Self::key_of(&state, object)?;
            match state.objects.get(&key) {
                None => Ok(None),
                Some(entry)
                    if resource_version
                        .is_some_and(|rv| Some(rv) != entry.object.resource_version()) =>
                {
                    Err(ClusterError::Conflict {
                        object: object.to_string(),
                        message: format!(
                            "the object has been modified (resourceVersion {} is not the latest, {})",
                            resource_version.unwrap_or_default(),
                            entry.object.resource_version().unwrap_or("?")
                        ),
                    })
                }
                Some(entry) => {
                    let mut next = entry.object.clone();
                    next.as_object_mut()
                        .map(|m| m.insert("status".into(), status.clone()));
                    commit(&mut state, key, next, None).map(Some)
                }
            }
        };
        self.flush();
        result
    }

    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError> {
        let result = {
            let mut state = self.state.lock();
            let (key, _) = Self::key_of(&state, object)?;
            let stored = state
                .objects
                .get(&key)
                .ok_or_else(|| ClusterError::NotFound(object.to_string()))?
                .object
                .clone();
            let mut next = stored.clone();
            // The API server's JSON patch lets `test` with `null` pass on a missing path
            // ("the list is still absent"); the json-patch crate does not.
            let patch = json_patch::Patch(
                patch
                    .0
                    .iter()
                    .filter(|op| {
                        !matches!(op, json_patch::PatchOperation::Test(t)
                            if t.value.is_null() && next.pointer(t.path.as_str()).is_none())
                    })
                    .cloned()
                    .collect(),
            );
            match json_patch::patch(&mut next, &patch) {
                Err(e) => Err(ClusterError::invalid(
                    object.to_string(),
                    format!("patch does not apply: {e}"),
                )),
                Ok(()) => {
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
                    check_metadata(&object.kind, &next)
                        .map_err(|message| ClusterError::invalid(object.to_string(), message))?;
                    // Server-owned fields (generation, resourceVersion, deletionTimestamp…)
                    // are not the patch's to change.
                    restore_system_metadata(&mut next, &stored);
                    // The main resource endpoint does not write a status subresource.
                    if state.kind(&object.type_ref())?.status_subresource {
                        keep_status(&mut next, &stored);
                    }
                    commit(&mut state, key, next, None)
                }
            }
        };
        self.flush();
        result
    }
}

/// One write of `manifest` by `manager` with `method`, the state already locked.
fn apply_locked(
    state: &mut State,
    manifest: &Value,
    method: WriteMethod,
    manager: &str,
) -> Result<Value, ClusterError> {
    let display = || {
        format!(
            "{}/{}/{}",
            manifest.api_version().unwrap_or("?"),
            manifest.kind().unwrap_or("?"),
            manifest.name().unwrap_or("?")
        )
    };
    let invalid = |message: String| ClusterError::invalid(display(), message);
    if !manifest.is_object() {
        return Err(invalid("an object must be a map".into()));
    }
    let api_version = manifest
        .api_version()
        .ok_or_else(|| invalid("apiVersion: required".into()))?;
    let kind = manifest
        .kind()
        .ok_or_else(|| invalid("kind: required".into()))?;
    let KindInfo {
        scope,
        status_subresource,
        generation,
    } = state.kind(&TypeRef::new(api_version, kind))?;
    check_metadata(kind, manifest).map_err(invalid)?;
    check_owner_references(manifest).map_err(invalid)?;

    let mut desired = manifest.clone();
    if status_subresource && let Some(map) = desired.as_object_mut() {
        map.remove("status");
    }
    let namespace = match scope {
        Scope::Cluster => {
            desired.metadata_mut().remove("namespace");
            String::new()
        }
        Scope::Namespaced => {
            let ns = manifest
                .namespace()
                .ok_or_else(|| {
                    invalid("metadata.namespace: required for a namespaced kind".into())
                })?
                .to_string();
            match state.namespace(&ns) {
                None => return Err(ClusterError::NotFound(format!("namespace {ns}"))),
                Some(n) if n.is_terminating() => {
                    let key = Key {
                        group: api_group(api_version).into(),
                        kind: kind.into(),
                        namespace: ns.clone(),
                        name: manifest.name().unwrap_or_default().into(),
                    };
                    if !state.objects.contains_key(&key) {
                        return Err(ClusterError::Forbidden(format!(
                            "unable to create {}: namespace {ns} is being terminated",
                            display()
                        )));
                    }
                }
                Some(_) => {}
            }
            ns
        }
    };
    let key = Key {
        group: api_group(api_version).into(),
        kind: kind.into(),
        namespace,
        name: manifest.name().unwrap_or_default().into(),
    };
    let requested_version = manifest.resource_version().map(str::to_string);
    let metadata = desired.metadata_mut();
    for field in SYSTEM_METADATA {
        metadata.remove(field);
    }
    // Server-side apply records the fields the writer sent (a Secret's `stringData`),
    // not what the server stores them as.
    let sent = desired.clone();
    normalize(kind, &mut desired);

    let Some(entry) = state.objects.get(&key).cloned() else {
        if requested_version.is_some() {
            return Err(ClusterError::Conflict {
                object: display(),
                message: "the object does not exist, so no resourceVersion may be given".into(),
            });
        }
        let applied = (method == WriteMethod::Apply).then(|| sent.clone());
        if method == WriteMethod::Update {
            crate::values::prune_nulls(&mut desired);
        }
        return Ok(create(state, key, desired, applied, manager, generation));
    };

    let stored = &entry.object;
    if let Some(requested) = requested_version
        && Some(requested.as_str()) != stored.resource_version()
    {
        return Err(ClusterError::Conflict {
            object: display(),
            message: format!(
                "the object has been modified (resourceVersion {requested} is not the latest, {})",
                stored.resource_version().unwrap_or("?")
            ),
        });
    }
    let mut next = match method {
        WriteMethod::Apply => {
            let mut base = stored.clone();
            if let Some(previous) = entry.applied.get(manager) {
                remove_unapplied(&mut base, previous, &desired, true);
            }
            merge_applied(&mut base, &desired, true);
            base
        }
        WriteMethod::Update => {
            let mut base = stored.clone();
            json_patch::merge(&mut base, &desired);
            base
        }
        WriteMethod::Replace => desired.clone(),
    };
    restore_system_metadata(&mut next, stored);
    if status_subresource {
        keep_status(&mut next, stored);
    }
    let applied = (method == WriteMethod::Apply).then_some(sent);
    commit(state, key, next, applied.map(|a| (manager.to_string(), a)))
}

/// Server-owned metadata comes from the stored object, whatever a writer sent.
fn restore_system_metadata(next: &mut Value, stored: &Value) {
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
fn commit(
    state: &mut State,
    key: Key,
    mut next: Value,
    applied: Option<(String, Value)>,
) -> Result<Value, ClusterError> {
    // Judge the write against the stored object in place; the callers already hold their
    // own copy, so cloning the entry (object and every manager's applied fields) here again
    // is not needed.
    let Some(entry) = state.objects.get_mut(&key) else {
        return Err(ClusterError::NotFound(format!("{}/{}", key.kind, key.name)));
    };
    let writer = applied.as_ref().map(|(manager, _)| manager.as_str());
    disown_changed(&mut entry.applied, writer, &entry.object, &next);
    let stored = &entry.object;
    if stored.is_terminating() {
        let before: BTreeSet<&str> = stored.finalizers().into_iter().collect();
        if let Some(added) = next.finalizers().into_iter().find(|f| !before.contains(f)) {
            return Err(ClusterError::invalid(
                format!("{}/{}", key.kind, key.name),
                format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizer {added}"
                ),
            ));
        }
    }
    if next == *stored {
        let unchanged = stored.clone();
        if let Some((manager, applied)) = applied {
            entry.applied.insert(manager, applied);
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
        entry.applied.insert(manager, applied);
    }
    let rv = state.next_resource_version();
    next.metadata_mut()
        .insert("resourceVersion".into(), json!(rv));
    if next.is_terminating() && next.finalizers().is_empty() {
        remove(state, &key, next.clone());
        collect_garbage(state);
        return Ok(next);
    }
    register_crd_kinds(state, &next);
    if let Some(entry) = state.objects.get_mut(&key) {
        entry.object = next.clone();
    }
    state.pending.push(WatchEvent {
        event_type: WatchEventType::Modified,
        object: next.clone(),
    });
    Ok(next)
}

fn create(
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
    if !key.namespace.is_empty() {
        metadata.insert("namespace".into(), json!(key.namespace));
    }
    register_crd_kinds(state, &object);
    state.objects.insert(
        key,
        Entry {
            object: object.clone(),
            applied: applied
                .map(|a| BTreeMap::from([(manager.to_string(), a)]))
                .unwrap_or_default(),
        },
    );
    state.pending.push(WatchEvent {
        event_type: WatchEventType::Added,
        object: object.clone(),
    });
    object
}

fn delete_locked(state: &mut State, key: &Key) -> Deletion {
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
    let object = entry.object.clone();
    let is_namespace = key.group.is_empty() && key.kind == "Namespace";
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
        e.object = next.clone();
    }
    state.pending.push(WatchEvent {
        event_type: WatchEventType::Modified,
        object: next,
    });
}

/// The store key of a stored object (its namespace already resolved by its kind's scope).
fn key_of_manifest(object: &Value) -> Key {
    Key {
        group: api_group(object.api_version().unwrap_or_default()).to_string(),
        kind: object.kind().unwrap_or_default().to_string(),
        namespace: object.namespace().unwrap_or_default().to_string(),
        name: object.name().unwrap_or_default().to_string(),
    }
}

/// Remove the object from the store. Its `Deleted` event carries the object with a new
/// resourceVersion, the deletion's own, as a real API server's watch does: a watcher that
/// resumes from the last version it saw must never see a version go backwards.
fn remove(state: &mut State, key: &Key, mut last: Value) {
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
fn collect_garbage(state: &mut State) {
    loop {
        let uids: BTreeSet<String> = state
            .objects
            .values()
            .filter_map(|e| e.object.uid().map(str::to_string))
            .collect();
        let terminating_namespaces: BTreeSet<String> = state
            .objects
            .iter()
            .filter(|(k, e)| {
                k.group.is_empty() && k.kind == "Namespace" && e.object.is_terminating()
            })
            .map(|(k, _)| k.name.clone())
            .collect();
        let garbage: Vec<Key> = state
            .objects
            .iter()
            .filter(|(_, e)| !e.object.is_terminating())
            .filter(|(k, e)| {
                let orphaned = e.object["metadata"]["ownerReferences"]
                    .as_array()
                    .filter(|refs| !refs.is_empty())
                    .is_some_and(|refs| {
                        refs.iter()
                            .all(|r| r["uid"].as_str().is_none_or(|uid| !uids.contains(uid)))
                    });
                orphaned || terminating_namespaces.contains(&k.namespace)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let empty_namespaces: Vec<Key> = terminating_namespaces
            .iter()
            .filter(|ns| !state.objects.keys().any(|k| &k.namespace == *ns))
            .map(|ns| Key {
                group: String::new(),
                kind: "Namespace".into(),
                namespace: String::new(),
                name: ns.clone(),
            })
            .filter(|k| {
                state
                    .objects
                    .get(k)
                    .is_some_and(|e| e.object.finalizers().is_empty())
            })
            .collect();
        if garbage.is_empty() && empty_namespaces.is_empty() {
            remove_dangling_owner_references(state, &uids);
            return;
        }
        for key in garbage {
            mark_deleted(state, &key);
        }
        for key in empty_namespaces {
            if let Some(e) = state.objects.get(&key) {
                let last = e.object.clone();
                remove(state, &key, last);
            }
        }
    }
}

/// What the garbage collector does to an object that another owner still holds: it
/// removes the references to the owners that are gone (`uids` are the objects that exist).
fn remove_dangling_owner_references(state: &mut State, uids: &BTreeSet<String>) {
    let alive = |r: &Value| r["uid"].as_str().is_some_and(|uid| uids.contains(uid));
    let holding: Vec<Key> = state
        .objects
        .iter()
        .filter(|(_, e)| !e.object.is_terminating())
        .filter(|(_, e)| {
            e.object["metadata"]["ownerReferences"]
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
        let mut next = entry.object.clone();
        if let Some(refs) = next["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(alive);
        }
        next.metadata_mut()
            .insert("resourceVersion".into(), json!(rv));
        entry.object = next.clone();
        state.pending.push(WatchEvent {
            event_type: WatchEventType::Modified,
            object: next,
        });
    }
}

/// Remove from `base` what the manager applied before (`previous`) and no longer applies
/// (`desired`): server-side apply's "fields you stop owning are removed".
fn remove_unapplied(base: &mut Value, previous: &Value, desired: &Value, top: bool) {
    let (Some(base_map), Some(previous)) = (base.as_object_mut(), previous.as_object()) else {
        return;
    };
    for (key, prev_value) in previous {
        match desired.get(key) {
            None => {
                if !(top && key == "metadata") {
                    base_map.remove(key);
                }
            }
            Some(desired_value) => {
                if let Some(child) = base_map.get_mut(key) {
                    if top && key == "metadata" {
                        remove_unapplied_metadata(child, prev_value, desired_value);
                    } else if prev_value.is_object() && desired_value.is_object() {
                        remove_unapplied(child, prev_value, desired_value, false);
                    }
                }
            }
        }
    }
}

fn remove_unapplied_metadata(base: &mut Value, previous: &Value, desired: &Value) {
    for list in ["finalizers", "ownerReferences"] {
        let previous_items = previous.get(list).and_then(Value::as_array);
        let desired_items = desired.get(list).and_then(Value::as_array);
        if let (Some(prev), Some(items)) = (
            previous_items,
            base.get_mut(list).and_then(Value::as_array_mut),
        ) {
            items.retain(|item| {
                let was_ours = prev.iter().any(|p| same_item(list, p, item));
                let still_ours =
                    desired_items.is_some_and(|d| d.iter().any(|p| same_item(list, p, item)));
                !was_ours || still_ours
            });
        }
    }
    let mut previous = previous.clone();
    let mut desired = desired.clone();
    for list in ["finalizers", "ownerReferences"] {
        previous.as_object_mut().map(|m| m.remove(list));
        desired.as_object_mut().map(|m| m.remove(list));
    }
    remove_unapplied(base, &previous, &desired, false);
}

/// Merge what is applied into `base`: maps recursively, lists replaced, except the
/// metadata lists whose list type is a set (`finalizers`) or a map keyed by uid
/// (`ownerReferences`), which are unioned.
fn merge_applied(base: &mut Value, desired: &Value, top: bool) {
    let (Some(base_map), Some(desired_map)) = (base.as_object_mut(), desired.as_object()) else {
        *base = desired.clone();
        return;
    };
    for (key, value) in desired_map {
        match base_map.get_mut(key) {
            Some(existing) if top && key == "metadata" => {
                let Some(existing_map) = existing.as_object_mut() else {
                    *existing = value.clone();
                    continue;
                };
                for (mkey, mvalue) in value.as_object().into_iter().flatten() {
                    if let ("finalizers" | "ownerReferences", Some(items)) =
                        (mkey.as_str(), mvalue.as_array())
                    {
                        let list = existing_map
                            .entry(mkey.clone())
                            .or_insert_with(|| Value::Array(Vec::new()));
                        if let Some(list) = list.as_array_mut() {
                            for item in items {
                                match list.iter_mut().find(|i| same_item(mkey, i, item)) {
                                    Some(slot) => *slot = item.clone(),
                                    None => list.push(item.clone()),
                                }
                            }
                        }
                    } else {
                        match existing_map.get_mut(mkey) {
                            Some(slot) if slot.is_object() && mvalue.is_object() => {
                                merge_applied(slot, mvalue, false)
                            }
                            _ => {
                                existing_map.insert(mkey.clone(), mvalue.clone());
                            }
                        }
                    }
                }
            }
            Some(existing) if existing.is_object() && value.is_object() => {
                merge_applied(existing, value, false)
            }
            _ => {
                base_map.insert(key.clone(), value.clone());
            }
        }
    }
}

fn same_item(list: &str, a: &Value, b: &Value) -> bool {
    match list {
        "ownerReferences" => a.get("uid").is_some() && a.get("uid") == b.get("uid"),
        _ => a == b,
    }
}

fn keep_status(next: &mut Value, stored: &Value) {
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

/// Serve the kinds a stored `CustomResourceDefinition` defines.
fn register_crd_kinds(state: &mut State, object: &Value) {
    if object.kind() != Some("CustomResourceDefinition")
        || !object
            .api_version()
            .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))
    {
        return;
    }
    let spec = &object["spec"];
    let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str()) else {
        return;
    };
    let scope = if spec["scope"].as_str() == Some("Cluster") {
        Scope::Cluster
    } else {
        Scope::Namespaced
    };
    for version in spec["versions"].as_array().into_iter().flatten() {
        if let Some(name) = version["name"].as_str() {
            let info = KindInfo {
                scope,
                status_subresource: version["subresources"].get("status").is_some(),
                generation: true,
            };
            state
                .kinds
                .insert(TypeRef::new(format!("{group}/{name}"), kind), info);
        }
    }
}

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

#[cfg(test)]
mod tests;
