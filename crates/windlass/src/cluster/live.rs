//! The live cluster: [`Cluster`] over a kube-rs `Client`.
//!
//! - Kinds are resolved with kube's single-kind discovery and cached per apiVersion/kind
//!   (unknown kinds are not cached, so a CRD installed later is found).
//! - [`WriteMethod::Apply`] is server-side apply with windlass's field manager and
//!   conflicts forced; `Update` a JSON merge patch (creating the object if absent);
//!   `Replace` a PUT carrying the live resourceVersion (creating if absent).
//! - Status is replaced through the status subresource when the kind has one, else
//!   through the main resource, as such kinds store status.
//! - Objects read and written back are decoded once, into JSON ([`Parsed`]); and
//! - `managedFields` are stripped from everything returned except windlass's own apply of
//!   the object itself (its field manager's `Apply` entry, not a subresource's): the rollout
//!   reads that to tell whether a field it owns was changed by someone else. The rest is
//!   never read (other managers' entries are a quarter of an object's bytes).
//! - Status writes are conditional on the resourceVersion the status was computed from;
//!   deletes of objects windlass created carry a uid precondition.
//! - API errors map to [`ClusterError`] by HTTP status: 404 not found, 409 conflict, 422
//!   invalid (with the server's field causes), 403 forbidden (the server's message names
//!   the verb and resource); everything else is [`ClusterError::Api`] with the kube error
//!   as its source. kube's default client stack already retries 429 (honouring
//!   `Retry-After`), 503 and 504 beneath this.

use parking_lot::Mutex;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, pinned_kind};
use serde_json::Value;

use super::parsed::Parsed;
use super::{Cluster, Deletion, ListQuery, Scope, WriteMethod};
use crate::error::{ClusterError, FieldCause};
use crate::object::{ManifestExt, ObjectRef, TypeRef, is_applied_entry};

#[derive(Clone)]
struct Kind {
    resource: ApiResource,
    scope: Scope,
    status_subresource: bool,
}

/// A Kubernetes API server reached through kube-rs.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use windlass::cluster::{Cluster, LiveCluster};
///
/// let cluster: Arc<dyn Cluster> = Arc::new(LiveCluster::new(kube::Client::try_default().await?));
/// # Ok(()) }
/// ```
pub struct LiveCluster {
    client: kube::Client,
    /// Shared, so that a request takes a reference to its kind instead of copying the
    /// resource's names (every write asks for its kind).
    kinds: Mutex<HashMap<TypeRef, Arc<Kind>>>,
    field_manager: String,
}

impl LiveCluster {
    /// A cluster over `client`, writing as windlass's field manager.
    pub fn new(client: kube::Client) -> Self {
        LiveCluster {
            client,
            kinds: Mutex::new(HashMap::new()),
            field_manager: crate::FIELD_MANAGER.to_string(),
        }
    }

    /// The client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// An API handle for objects of `type_ref` in `namespace` (`None`: all namespaces, or a
    /// cluster-scoped kind), e.g. to watch them; the kind is resolved by discovery once.
    pub async fn dynamic_api(
        &self,
        type_ref: &TypeRef,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>, ClusterError> {
        Ok(self.api(type_ref, namespace).await?.0)
    }

    /// An object from the API as windlass keeps it (JSON, of its `managedFields` only
    /// windlass's own apply entry), as every other method of this cluster returns objects.
    pub fn object_value(&self, object: DynamicObject) -> Result<Value, ClusterError> {
        self.to_value(object)
    }

    /// Drop the `managedFields` entries of `object` (JSON as the API server sent it) but
    /// windlass's own apply of the object itself, as [`LiveCluster::object_value`] does.
    pub(crate) fn keep_own_managed_fields(&self, object: &mut Value) {
        let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        let Some(Value::Array(entries)) = metadata.get_mut("managedFields") else {
            return;
        };
        entries.retain(|e| is_applied_entry(e, &self.field_manager));
        if entries.is_empty() {
            metadata.remove("managedFields");
        }
    }

    /// What the API server says of `type_ref`'s kind, asked once and then kept.
    async fn kind(&self, type_ref: &TypeRef) -> Result<Arc<Kind>, ClusterError> {
        if let Some(kind) = self.kinds.lock().get(type_ref) {
            return Ok(Arc::clone(kind));
        }
        // Boxed: a discovery's state is a few KiB that every caller's future would carry
        // (and allocate, every request) if it were kept inline for the rare first call.
        Box::pin(self.discover(type_ref)).await
    }

    /// Ask the API server about `type_ref`'s kind and keep the answer (see [`Self::kind`]).
    async fn discover(&self, type_ref: &TypeRef) -> Result<Arc<Kind>, ClusterError> {
        let (group, version) = match type_ref.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", type_ref.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &type_ref.kind);
        let unknown = || ClusterError::UnknownKind {
            api_version: type_ref.api_version.clone(),
            kind: type_ref.kind.clone(),
        };
        let (resource, capabilities) = match pinned_kind(&self.client, &gvk).await {
            Ok(found) => found,
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(unknown()),
            Err(kube::Error::Discovery(_)) => return Err(unknown()),
            Err(e) => return Err(api_error(e, &format!("discovery of {type_ref}"))),
        };
        let kind = Arc::new(Kind {
            status_subresource: capabilities
                .subresources
                .iter()
                .any(|(r, _)| r.plural == "status"),
            scope: match capabilities.scope {
                kube::discovery::Scope::Cluster => Scope::Cluster,
                kube::discovery::Scope::Namespaced => Scope::Namespaced,
            },
            resource,
        });
        self.kinds
            .lock()
            .insert(type_ref.clone(), Arc::clone(&kind));
        Ok(kind)
    }

    /// An API of `type_ref` (in `namespace`, or all) whose objects are read as `K`: the
    /// watches read them as [`Tolerant`](crate::runtime) objects.
    pub(crate) async fn api_as<K>(
        &self,
        type_ref: &TypeRef,
        namespace: Option<&str>,
    ) -> Result<Api<K>, ClusterError>
    where
        K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
    {
        let kind = self.kind(type_ref).await?;
        Ok(match (kind.scope, namespace) {
            (Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(self.client.clone(), ns, &kind.resource)
            }
            (Scope::Namespaced, None) | (Scope::Cluster, _) => {
                Api::all_with(self.client.clone(), &kind.resource)
            }
        })
    }

    async fn api(
        &self,
        type_ref: &TypeRef,
        namespace: Option<&str>,
    ) -> Result<(Api<DynamicObject>, Arc<Kind>), ClusterError> {
        let kind = self.kind(type_ref).await?;
        let api = match (kind.scope, namespace) {
            (Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(self.client.clone(), ns, &kind.resource)
            }
            (Scope::Namespaced, None) | (Scope::Cluster, _) => {
                Api::all_with(self.client.clone(), &kind.resource)
            }
        };
        Ok((api, kind))
    }

    async fn object_api(
        &self,
        object: &ObjectRef,
    ) -> Result<(Api<DynamicObject>, Arc<Kind>), ClusterError> {
        let kind = self.kind(&object.type_ref()).await?;
        if kind.scope == Scope::Namespaced && object.namespace.is_none() {
            return Err(ClusterError::invalid(
                object.to_string(),
                "metadata.namespace: required for a namespaced kind",
            ));
        }
        self.api(&object.type_ref(), object.namespace.as_deref())
            .await
    }

    /// [`LiveCluster::object_api`], its objects decoded once into JSON ([`Parsed`]).
    async fn parsed_api(
        &self,
        object: &ObjectRef,
    ) -> Result<(Api<Parsed>, Arc<Kind>), ClusterError> {
        let kind = self.kind(&object.type_ref()).await?;
        if kind.scope == Scope::Namespaced && object.namespace.is_none() {
            return Err(ClusterError::invalid(
                object.to_string(),
                "metadata.namespace: required for a namespaced kind",
            ));
        }
        let api = self
            .api_as::<Parsed>(&object.type_ref(), object.namespace.as_deref())
            .await?;
        Ok((api, kind))
    }

    /// An object from the API decoded once, as windlass keeps it: of its `managedFields`,
    /// only windlass's own apply entry.
    fn parsed_value(&self, object: Parsed) -> Value {
        let mut value = object.into_value();
        self.keep_own_managed_fields(&mut value);
        value
    }
}

#[async_trait]
impl Cluster for LiveCluster {
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        Ok(self.kind(type_ref).await?.scope)
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        let (api, _) = self.parsed_api(object).await?;
        match api.get_opt(&object.name).await {
            Ok(found) => Ok(found.map(|o| self.parsed_value(o))),
            Err(e) => Err(api_error(e, object)),
        }
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        let (api, _) = self
            .api(&query.type_ref, query.namespace.as_deref())
            .await?;
        let mut params = ListParams::default();
        if let Some(labels) = &query.label_selector {
            params = params.labels_from(labels);
        }
        if let Some(fields) = &query.field_selector {
            params = params.fields(fields);
        }
        let list = api
            .list(&params)
            .await
            .map_err(|e| api_error(e, &query.type_ref))?;
        let mut items = list
            .items
            .into_iter()
            .map(|o| self.to_value(o))
            .collect::<Result<Vec<_>, _>>()?;
        items.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
        Ok(items)
    }

    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError> {
        let reference = ObjectRef::from_manifest(manifest).map_err(|e| {
            ClusterError::invalid(
                format!(
                    "{}/{}",
                    manifest.api_version().unwrap_or("?"),
                    manifest.kind().unwrap_or("?")
                ),
                e.to_string(),
            )
        })?;
        let name = reference.name.as_str();
        let written = match method {
            WriteMethod::Apply => {
                let (api, kind) = self.parsed_api(&reference).await?;
                let desired = without_ignored_fields(manifest, &kind);
                let params = PatchParams::apply(&self.field_manager).force();
                let written = api
                    .patch(name, &params, &Patch::Apply(&desired))
                    .await
                    .map_err(|e| api_error(e, &reference))?;
                return Ok(self.parsed_value(written));
            }
            WriteMethod::Update => {
                let (api, kind) = self.object_api(&reference).await?;
                let desired = without_ignored_fields(manifest, &kind);
                merge_or_create(&api, &reference, &desired).await?
            }
            WriteMethod::Replace => {
                let (api, kind) = self.object_api(&reference).await?;
                let desired = without_ignored_fields(manifest, &kind);
                replace_or_create(&api, &reference, desired.into_owned()).await?
            }
        };
        self.to_value(written)
    }

    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> Result<Deletion, ClusterError> {
        let (api, _) = self.object_api(object).await?;
        let mut params = DeleteParams::background();
        if let Some(uid) = uid {
            params = params.preconditions(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            });
        }
        match api.delete(&object.name, &params).await {
            // kube answers with the object while deletion is pending (finalizers), and with
            // a Status once it is gone.
            Ok(pending) if pending.is_left() => Ok(Deletion::Terminating),
            Ok(_) => Ok(Deletion::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deletion::NotFound),
            // The uid precondition failed: the name now belongs to another object.
            Err(kube::Error::Api(s)) if s.code == 409 && uid.is_some() => Ok(Deletion::NotFound),
            Err(e) => Err(api_error(e, object)),
        }
    }

    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        let (api, kind) = self.parsed_api(object).await?;
        // Without a status subresource, status is part of the object and only a write of
        // the whole object keeps the rest of it; with one, the server takes nothing but the
        // status from the body, so name and version are all it needs.
        let mut body = if kind.status_subresource && resource_version.is_some() {
            let mut metadata = serde_json::Map::new();
            metadata.insert("name".into(), Value::String(object.name.clone()));
            if let Some(ns) = &object.namespace {
                metadata.insert("namespace".into(), Value::String(ns.clone()));
            }
            serde_json::json!({
                "apiVersion": object.api_version, "kind": object.kind, "metadata": metadata,
            })
        } else {
            let Some(live) = api
                .get_opt(&object.name)
                .await
                .map_err(|e| api_error(e, object))?
            else {
                return Ok(None);
            };
            let live = self.parsed_value(live);
            if let Some(rv) = resource_version
                && live.resource_version() != Some(rv)
            {
                return Err(ClusterError::Conflict {
                    object: object.to_string(),
                    message: format!(
                        "the object has been modified (resourceVersion {rv} is not the latest)"
                    ),
                });
            }
            live
        };
        if let Some(rv) = resource_version {
            body.metadata_mut()
                .insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        body.metadata_mut().remove("managedFields");
        body["status"] = status.clone();
        let body = Parsed::from_value(body);
        let written = if kind.status_subresource {
            api.replace_status(&object.name, &PostParams::default(), &body)
                .await
        } else {
            api.replace(&object.name, &PostParams::default(), &body)
                .await
        };
        match written {
            Ok(stored) => Ok(Some(self.parsed_value(stored))),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(api_error(e, object)),
        }
    }

    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError> {
        let (api, _) = self.object_api(object).await?;
        api.patch(
            &object.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch.clone()),
        )
        .await
        .map_err(|e| api_error(e, object))
        .and_then(|o| self.to_value(o))
    }
}

impl LiveCluster {
    /// An object from the API as JSON, keeping only windlass's own apply entry of its
    /// `managedFields`.
    fn to_value(&self, object: DynamicObject) -> Result<Value, ClusterError> {
        let mut value = serde_json::to_value(object).map_err(|e| {
            ClusterError::api(format!(
                "object from the API server does not serialize: {e}"
            ))
        })?;
        self.keep_own_managed_fields(&mut value);
        Ok(value)
    }
}

/// The manifest as it is sent for a kind: without a namespace if the kind is
/// cluster-scoped, without status if the kind writes status through its subresource.
/// Borrowed when there is nothing to drop, as for almost every object: a copy of the
/// manifest per write would be an allocation per field, freed again once it is sent.
fn without_ignored_fields<'m>(manifest: &'m Value, kind: &Kind) -> Cow<'m, Value> {
    let drop_namespace = kind.scope == Scope::Cluster
        && manifest
            .get("metadata")
            .is_some_and(|m| m.get("namespace").is_some());
    // Status is written through its subresource; on the object itself the server ignores
    // it, and an apply would claim its fields for nothing.
    let drop_status = kind.status_subresource && manifest.get("status").is_some();
    if !drop_namespace && !drop_status {
        return Cow::Borrowed(manifest);
    }
    let mut desired = manifest.clone();
    if drop_namespace {
        desired.metadata_mut().remove("namespace");
    }
    if drop_status && let Some(map) = desired.as_object_mut() {
        map.remove("status");
    }
    Cow::Owned(desired)
}

/// [`WriteMethod::Update`]: a JSON merge patch, or a create (without the `null`s that
/// only mean "delete this field" in a patch) if the object is absent.
async fn merge_or_create(
    api: &Api<DynamicObject>,
    reference: &ObjectRef,
    desired: &Value,
) -> Result<DynamicObject, ClusterError> {
    let name = reference.name.as_str();
    let written = match api
        .patch(name, &PatchParams::default(), &Patch::Merge(desired))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let mut created = desired.clone();
            crate::values::prune_nulls(&mut created);
            api.create(&PostParams::default(), &to_dynamic(&created)?)
                .await
        }
        other => other,
    };
    written.map_err(|e| api_error(e, reference))
}

/// [`WriteMethod::Replace`]: a PUT carrying the live object's resourceVersion unless the
/// manifest names one, or a create if the object is absent.
async fn replace_or_create(
    api: &Api<DynamicObject>,
    reference: &ObjectRef,
    mut desired: Value,
) -> Result<DynamicObject, ClusterError> {
    let name = reference.name.as_str();
    let live = api
        .get_opt(name)
        .await
        .map_err(|e| api_error(e, reference))?;
    let written = match live {
        None => {
            api.create(&PostParams::default(), &to_dynamic(&desired)?)
                .await
        }
        Some(live) => {
            if desired.resource_version().is_none()
                && let Some(rv) = live.metadata.resource_version
            {
                desired
                    .metadata_mut()
                    .insert("resourceVersion".into(), Value::String(rv));
            }
            api.replace(name, &PostParams::default(), &to_dynamic(&desired)?)
                .await
        }
    };
    written.map_err(|e| api_error(e, reference))
}

fn to_dynamic(manifest: &Value) -> Result<DynamicObject, ClusterError> {
    serde_json::from_value(manifest.clone()).map_err(|e| {
        ClusterError::invalid(
            format!(
                "{}/{}",
                manifest.kind().unwrap_or("?"),
                manifest.name().unwrap_or("?")
            ),
            format!("not a Kubernetes object: {e}"),
        )
    })
}

/// Whether a 500 answering a server-side apply is the server's refusal of the patch's
/// shape (a field of the wrong type, or one the kind does not declare), which
/// kube-apiserver reports as an internal error rather than a 400.
fn malformed_apply(message: &str) -> bool {
    message.starts_with("failed to create typed patch object")
        || message.contains("unable to convert unstructured object")
}

/// `message` without the values server-side apply quotes when it refuses a field's type
/// (`…: expected string, got &value.valueUnstructured{Value:5}`), for a Secret: its values
/// must not reach a status or a log.
fn without_values(object: &str, message: String) -> String {
    match message.find("&value.valueUnstructured{") {
        Some(at) if object.starts_with("v1/Secret/") => {
            format!("{}(value not shown)", &message[..at])
        }
        _ => message,
    }
}

/// A kube-rs error as a [`ClusterError`], by HTTP status. A 422 lists the server's field
/// causes (`spec.template: Invalid value: …: field is immutable`) when its message does not
/// already carry them.
fn api_error(error: kube::Error, what: &dyn std::fmt::Display) -> ClusterError {
    let object = what.to_string();
    let kube::Error::Api(status) = &error else {
        return ClusterError::Api {
            message: format!("{object}: {error}"),
            source: Some(crate::error::SharedSource(std::sync::Arc::new(error))),
        };
    };
    let mut message = status.message.clone();
    let causes: Vec<FieldCause> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|cause| FieldCause {
            field: cause.field.clone(),
            reason: cause.reason.clone(),
            message: cause.message.clone(),
        })
        .collect();
    for cause in &causes {
        let text = format!("{}: {}", cause.field, cause.message);
        if !cause.field.is_empty() && !message.contains(&text) {
            message.push_str("; ");
            message.push_str(&text);
        }
    }
    match status.code {
        404 => ClusterError::NotFound(format!("{object}: {message}")),
        409 => ClusterError::Conflict { object, message },
        // 400: the body does not decode as the kind (a number where a string belongs);
        // server-side apply answers the same with a 500 whose message says so. Either way
        // the object must change: sending it again cannot help.
        code if code == 422 || code == 400 || (code == 500 && malformed_apply(&message)) => {
            ClusterError::Invalid {
                message: without_values(&object, message),
                object,
                causes,
            }
        }
        403 => ClusterError::Forbidden(format!("{object}: {message}")),
        code => ClusterError::Api {
            message: format!("{object}: HTTP {code}: {message}"),
            source: Some(crate::error::SharedSource(std::sync::Arc::new(error))),
        },
    }
}
