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
//! A CRD's schema defaults and CEL validation rules are applied (`rules`), as the server
//! applies them. Not modelled: admission webhooks, type validation against OpenAPI
//! schemas, conflicts between field managers (windlass always forces its apply), and API versions
//! of one group converting between each other (objects are keyed by group and kind).
//!
//! The files: `store` holds the objects and the kinds served; `write` is one write (the
//! server's checks, then create, merge or replace, and the commit every change goes
//! through); `apply` is server-side apply's field ownership; `delete` is finalizers and
//! garbage collection; `rules` is schema defaults and CEL validation; `watch` is the
//! events and their publishing. This file is the public face: [`MemoryCluster`] and its [`Cluster`] implementation.

mod apply;
mod builtin;
mod delete;
mod rules;
mod store;
mod watch;
mod write;

use parking_lot::Mutex;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::validation::{KINDS_WITH_GENERATION, builtin_kinds, check_metadata};
use super::{Cluster, Deletion, ListQuery, Scope, WriteMethod};
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef, api_group};
use delete::{collect_garbage, delete_locked};
use store::{Key, KindInfo, State, key_of_manifest, register_crd_kinds};
use write::{apply_locked, commit, create, patch_locked};

pub use watch::{WatchEvent, WatchEventType};

/// Namespaces every cluster starts with.
const INITIAL_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

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
        let key = Key::of_namespace(name);
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
                let object = entry.object_mut();
                let metadata = object.metadata_mut();
                for field in ["uid", "creationTimestamp", "generation"] {
                    if let Some(given) = manifest.get("metadata").and_then(|m| m.get(field)) {
                        metadata.insert(field.to_string(), given.clone());
                    }
                }
                if let Some(status) = manifest.get("status") {
                    object["status"] = status.clone();
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

    /// Every stored object, ordered by group, kind, namespace and name.
    pub fn objects(&self) -> Vec<Value> {
        self.state
            .lock()
            .objects
            .values()
            .map(|e| e.object().clone())
            .collect()
    }

    /// The object as [`Cluster::get`] reads it, the view the store keeps (see `Entry`).
    fn shared_view(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        let state = self.state.lock();
        let (key, _) = Self::key_of(&state, object)?;
        Ok(state
            .objects
            .get(&key)
            .map(|e| e.shared_view(&self.field_manager)))
    }

    /// The store key of `object`, and its kind's scope.
    fn key_of(state: &State, object: &ObjectRef) -> Result<(Key, Scope), ClusterError> {
        let scope = state.kind_of(&object.api_version, &object.kind)?.scope;
        let namespace = match scope {
            Scope::Cluster => "",
            Scope::Namespaced => object.namespace.as_deref().ok_or_else(|| {
                ClusterError::invalid(
                    object.to_string(),
                    "metadata.namespace: required for a namespaced kind",
                )
            })?,
        };
        let group = api_group(&object.api_version);
        Ok((
            Key::new(group, &object.kind, namespace, &object.name),
            scope,
        ))
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

    async fn own_version(&self, object: &ObjectRef) -> Result<Option<String>, ClusterError> {
        let state = self.state.lock();
        let (key, _) = Self::key_of(&state, object)?;
        Ok(state
            .objects
            .get(&key)
            .and_then(|e| e.object().resource_version().map(str::to_string)))
    }

    async fn get_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        self.shared_view(object)
    }

    async fn get_own_shared(&self, object: &ObjectRef) -> Result<Option<Arc<Value>>, ClusterError> {
        self.shared_view(object)
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
            .filter(|(k, _)| k.group() == group && k.kind() == query.type_ref.kind)
            .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace() == ns))
            .map(|(_, e)| e)
            .filter(|e| {
                crate::cluster::selector::labels_match(&labels, e.object())
                    && fields.matches(e.object())
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
            let stored_uid = state.objects.get(&key).and_then(|e| e.object().uid());
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
                        .is_some_and(|rv| Some(rv) != entry.object().resource_version()) =>
                {
                    Err(ClusterError::Conflict {
                        object: object.to_string(),
                        message: format!(
                            "the object has been modified (resourceVersion {} is not the latest, {})",
                            resource_version.unwrap_or_default(),
                            entry.object().resource_version().unwrap_or("?")
                        ),
                    })
                }
                Some(entry) => {
                    let mut next = entry.object().clone();
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
            patch_locked(&mut state, key, object, patch)
        };
        self.flush();
        result
    }
}

#[cfg(test)]
mod tests;
