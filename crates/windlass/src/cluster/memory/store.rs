//! What the in-memory cluster holds: the objects by key, what each field manager applied to
//! them, the kinds it serves, the resourceVersion counter and the events of the operation
//! in progress.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

use super::apply::{disown_changed, fields_v1};
use super::watch::WatchEvent;
use crate::cluster::Scope;
use crate::error::ClusterError;
use crate::object::{ManifestExt, TypeRef, api_group};

/// Where an object is stored: objects are keyed by group and kind, not by API version,
/// then namespace (empty for cluster-scoped kinds) and name.
///
/// The four parts are kept in one string, separated by NUL, which none of them contains
/// (names are validated, kinds must be served, and a lookup whose part contains one finds
/// nothing). Comparing two keys is then one comparison of two strings, in the order that
/// comparing group, kind, namespace and name one after another gives. A read compares its
/// key with about ten stored ones: four strings apart in memory each cost it more than the
/// rest of the read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key(String);

/// Between the parts of a [`Key`].
const SEPARATOR: char = '\0';

impl Key {
    pub(super) fn new(group: &str, kind: &str, namespace: &str, name: &str) -> Key {
        let parts = [group, kind, namespace, name];
        let mut key = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
        for (i, part) in parts.into_iter().enumerate() {
            if i > 0 {
                key.push(SEPARATOR);
            }
            key.push_str(part);
        }
        Key(key)
    }

    /// The key of the namespace `name`.
    pub(super) fn of_namespace(name: &str) -> Key {
        Key::new("", "Namespace", "", name)
    }

    fn part(&self, index: usize) -> &str {
        self.0.split(SEPARATOR).nth(index).unwrap_or_default()
    }

    pub(super) fn group(&self) -> &str {
        self.part(0)
    }

    pub(super) fn kind(&self) -> &str {
        self.part(1)
    }

    /// Empty for a cluster-scoped object.
    pub(super) fn namespace(&self) -> &str {
        self.part(2)
    }

    pub(super) fn name(&self) -> &str {
        self.part(3)
    }

    /// Whether this is the key of a namespace.
    pub(super) fn is_namespace(&self) -> bool {
        self.group().is_empty() && self.kind() == "Namespace"
    }
}

/// One stored object: the object, what each field manager applied to it, and the object
/// as reads return it.
///
/// A rollout reads every object it renders on every reconcile, and the object changes far
/// less often than that: the view reads return (the object with its `managedFields`) is
/// made on the first read after a change and shared (`Arc`) by every read until the next
/// one. Every change goes through a method here, which drops it.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    object: Value,
    /// What each field manager last applied (server-side apply's managed fields).
    applied: BTreeMap<String, Value>,
    /// The view of the last read, and the field manager it was made for.
    view: OnceLock<(String, Arc<Value>)>,
}

impl Entry {
    /// A stored object, with what `applied`'s manager applied if it was applied.
    pub(super) fn new(object: Value, applied: Option<(String, Value)>) -> Entry {
        Entry {
            object,
            applied: applied.into_iter().collect(),
            view: OnceLock::new(),
        }
    }

    /// The object as stored.
    pub(super) fn object(&self) -> &Value {
        &self.object
    }

    /// Store `object` in place of the stored one.
    pub(super) fn set_object(&mut self, object: Value) {
        self.object = object;
        self.view.take();
    }

    /// The stored object, to change in place.
    pub(super) fn object_mut(&mut self) -> &mut Value {
        self.view.take();
        &mut self.object
    }

    /// What `manager` last applied, if it applied the object.
    pub(super) fn applied(&self, manager: &str) -> Option<&Value> {
        self.applied.get(manager)
    }

    /// Record what `manager` applied now.
    pub(super) fn set_applied(&mut self, manager: String, configuration: Value) {
        self.applied.insert(manager, configuration);
        self.view.take();
    }

    /// Server-side apply's ownership rule for a write of `next` by `writer` (see
    /// [`disown_changed`]).
    pub(super) fn disown_changed(&mut self, writer: Option<&str>, next: &Value) {
        disown_changed(&mut self.applied, writer, &self.object, next);
        self.view.take();
    }

    /// The object as the API returns it to `manager`: with the `managedFields` entry of
    /// `manager`'s applies, when it has applied the object. A copy of the shared view when
    /// there is one, else made anew (and not kept: most objects are read only by
    /// [`Entry::shared_view`]'s callers, the rollout's reads).
    pub(super) fn view(&self, manager: &str) -> Value {
        match self.view.get() {
            Some((viewer, view)) if viewer == manager => Value::clone(view),
            _ => self.make_view(manager),
        }
    }

    /// [`Entry::view`], shared: made on the first call after a change and kept.
    pub(super) fn shared_view(&self, manager: &str) -> Arc<Value> {
        let (viewer, view) = self
            .view
            .get_or_init(|| (manager.to_string(), Arc::new(self.make_view(manager))));
        match viewer == manager {
            true => view.clone(),
            false => Arc::new(self.make_view(manager)),
        }
    }

    fn make_view(&self, manager: &str) -> Value {
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

/// What the store knows of a kind.
#[derive(Debug, Clone, Copy)]
pub(super) struct KindInfo {
    pub(super) scope: Scope,
    /// Whether `status` is a subresource, written apart from the rest (true for built-in
    /// kinds and for CRDs that declare it). Without one, status is an ordinary field.
    pub(super) status_subresource: bool,
    /// Whether objects carry `metadata.generation`.
    pub(super) generation: bool,
}

/// The kinds the cluster serves. Every read and write looks its object's kind up; a map
/// keyed by [`TypeRef`] could only be asked with one made for the purpose (two strings
/// copied), so it is asked with the object's apiVersion and kind as they are
/// ([`KindKey`]).
#[derive(Debug, Default)]
pub(super) struct Kinds(HashMap<TypeRef, KindInfo>);

impl Kinds {
    pub(super) fn insert(&mut self, type_ref: TypeRef, info: KindInfo) {
        self.0.insert(type_ref, info);
    }

    pub(super) fn get(&self, api_version: &str, kind: &str) -> Option<KindInfo> {
        self.0.get(&(api_version, kind) as &dyn KindKey).copied()
    }
}

/// An apiVersion and a kind, as a [`TypeRef`] or borrowed: hashed and compared as
/// `TypeRef`'s derived `Hash` and `Eq` do (its fields in order), so that either finds
/// the other in a map.
trait KindKey {
    fn parts(&self) -> (&str, &str);
}

impl KindKey for TypeRef {
    fn parts(&self) -> (&str, &str) {
        (&self.api_version, &self.kind)
    }
}

impl KindKey for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn KindKey + 'a> for TypeRef {
    fn borrow(&self) -> &(dyn KindKey + 'a) {
        self
    }
}

impl std::hash::Hash for dyn KindKey + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (api_version, kind) = self.parts();
        api_version.hash(state);
        kind.hash(state);
    }
}

impl PartialEq for dyn KindKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KindKey + '_ {}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) objects: BTreeMap<Key, Entry>,
    pub(super) kinds: Kinds,
    /// The CEL validation rules of the custom kinds that declare some.
    pub(super) rules: super::rules::Rules,
    resource_version: u64,
    /// Events of the current operation, published (in order, under the lock) when it ends.
    pub(super) pending: Vec<WatchEvent>,
}

impl State {
    pub(super) fn kind(&self, type_ref: &TypeRef) -> Result<KindInfo, ClusterError> {
        self.kind_of(&type_ref.api_version, &type_ref.kind)
    }

    /// [`State::kind`] of the kind `api_version`/`kind`, without making a [`TypeRef`].
    pub(super) fn kind_of(&self, api_version: &str, kind: &str) -> Result<KindInfo, ClusterError> {
        self.kinds
            .get(api_version, kind)
            .ok_or_else(|| ClusterError::UnknownKind {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })
    }

    pub(super) fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.kind(type_ref).map(|k| k.scope)
    }

    pub(super) fn next_resource_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    pub(super) fn namespace(&self, name: &str) -> Option<&Value> {
        self.objects
            .get(&Key::of_namespace(name))
            .map(Entry::object)
    }
}

/// The store key of a stored object (its namespace already resolved by its kind's scope).
pub(super) fn key_of_manifest(object: &Value) -> Key {
    Key::new(
        api_group(object.api_version().unwrap_or_default()),
        object.kind().unwrap_or_default(),
        object.namespace().unwrap_or_default(),
        object.name().unwrap_or_default(),
    )
}

/// Serve the kinds a stored `CustomResourceDefinition` defines.
pub(super) fn register_crd_kinds(state: &mut State, object: &Value) {
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
            let type_ref = TypeRef::new(format!("{group}/{name}"), kind);
            state
                .rules
                .register(type_ref.clone(), &version["schema"]["openAPIV3Schema"]);
            state.kinds.insert(type_ref, info);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_found_by_borrowed_api_version_and_kind() {
        let mut kinds = Kinds::default();
        let info = |scope| KindInfo {
            scope,
            status_subresource: true,
            generation: false,
        };
        kinds.insert(TypeRef::new("v1", "ConfigMap"), info(Scope::Namespaced));
        kinds.insert(TypeRef::new("v1", "Namespace"), info(Scope::Cluster));
        kinds.insert(
            TypeRef::new("apps/v1", "Deployment"),
            info(Scope::Namespaced),
        );
        let scope = |api_version, kind| kinds.get(api_version, kind).map(|k| k.scope);
        assert_eq!(scope("v1", "ConfigMap"), Some(Scope::Namespaced));
        assert_eq!(scope("v1", "Namespace"), Some(Scope::Cluster));
        assert_eq!(scope("apps/v1", "Deployment"), Some(Scope::Namespaced));
        // The parts are told apart, not joined.
        assert_eq!(scope("v1C", "onfigMap"), None);
        assert_eq!(scope("apps/v1", "ConfigMap"), None);
    }
}
