//! Kubernetes objects as windlass handles them: JSON trees (`serde_json::Value`) with typed
//! accessors, references that name one object, and helpers that make valid object names.
//!
//! Manifests stay plain JSON inside the framework because they must pass through patches,
//! merges and comparisons that typed structs cannot express (a strategic-merge `null` means
//! "delete"); operator code meets typed k8s-openapi objects at the edges
//! ([`to_manifest`], [`crate::session::Session::get`]).

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::values::prune_nulls;

/// Names one object in a cluster: apiVersion, kind, namespace (absent for cluster-scoped
/// objects) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectRef {
    /// A reference to a namespaced object.
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        namespace: Option<&str>,
        name: impl Into<String>,
    ) -> Self {
        ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    /// The reference of a typed Kubernetes object kind, e.g. `ObjectRef::of::<ConfigMap>(..)`.
    pub fn of<K: k8s_openapi::Resource>(namespace: Option<&str>, name: impl Into<String>) -> Self {
        ObjectRef::new(K::API_VERSION, K::KIND, namespace, name)
    }

    /// The reference of a manifest; an error names what is missing.
    pub fn from_manifest(manifest: &Value) -> Result<Self, Error> {
        let api_version = manifest
            .api_version()
            .ok_or_else(|| Error::config("manifest has no apiVersion"))?;
        let kind = manifest
            .kind()
            .ok_or_else(|| Error::config(format!("manifest of {api_version} has no kind")))?;
        let name = manifest.name().ok_or_else(|| {
            Error::config(format!(
                "{api_version}/{kind} manifest has no metadata.name"
            ))
        })?;
        Ok(ObjectRef::new(
            api_version,
            kind,
            manifest.namespace(),
            name,
        ))
    }

    /// The type part of this reference.
    pub fn type_ref(&self) -> TypeRef {
        TypeRef::new(&self.api_version, &self.kind)
    }
}

impl fmt::Display for ObjectRef {
    /// `apiVersion/kind/name`, or `apiVersion/kind/namespace/name` for namespaced objects.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}/{}", self.api_version, self.kind, ns, self.name),
            None => write!(f, "{}/{}/{}", self.api_version, self.kind, self.name),
        }
    }
}

/// An apiVersion and a kind: a type of object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeRef {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
}

impl TypeRef {
    /// A type from its apiVersion and kind.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        TypeRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }
    /// The type of a typed Kubernetes object kind.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        TypeRef::new(K::API_VERSION, K::KIND)
    }
    /// The API group: empty for the core group, not `v1`.
    pub fn group(&self) -> &str {
        api_group(&self.api_version)
    }
}

impl fmt::Display for TypeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// The group of an apiVersion: `apps` for `apps/v1`, the empty string for the core `v1`.
///
/// For the core API this is the group Kubernetes itself uses, the empty string; `v1` is
/// its version, not its group.
pub(crate) fn api_group(api_version: &str) -> &str {
    api_version
        .split_once('/')
        .map_or("", |(group, _version)| group)
}

/// Read access to the parts of a manifest every module needs.
pub trait ManifestExt {
    /// `apiVersion`.
    fn api_version(&self) -> Option<&str>;
    /// `kind`.
    fn kind(&self) -> Option<&str>;
    /// `metadata.name`.
    fn name(&self) -> Option<&str>;
    /// `metadata.namespace`.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.uid`.
    fn uid(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// `metadata.generation`.
    fn generation(&self) -> Option<i64>;
    /// `metadata.labels.<key>`.
    fn label(&self, key: &str) -> Option<&str>;
    /// `metadata.annotations.<key>`.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// `metadata.finalizers` (empty when absent).
    fn finalizers(&self) -> Vec<&str>;
    /// Whether `metadata.deletionTimestamp` is set.
    fn is_terminating(&self) -> bool;
    /// `metadata`, created empty when absent (the manifest must be a map).
    fn metadata_mut(&mut self) -> &mut Map<String, Value>;
}

impl ManifestExt for Value {
    fn api_version(&self) -> Option<&str> {
        self.get("apiVersion")?.as_str()
    }
    fn kind(&self) -> Option<&str> {
        self.get("kind")?.as_str()
    }
    fn name(&self) -> Option<&str> {
        self.get("metadata")?.get("name")?.as_str()
    }
    fn namespace(&self) -> Option<&str> {
        self.get("metadata")?
            .get("namespace")?
            .as_str()
            .filter(|ns| !ns.is_empty())
    }
    fn uid(&self) -> Option<&str> {
        self.get("metadata")?.get("uid")?.as_str()
    }
    fn resource_version(&self) -> Option<&str> {
        self.get("metadata")?.get("resourceVersion")?.as_str()
    }
    fn generation(&self) -> Option<i64> {
        self.get("metadata")?.get("generation")?.as_i64()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.get("metadata")?.get("labels")?.get(key)?.as_str()
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.get("metadata")?.get("annotations")?.get(key)?.as_str()
    }
    fn finalizers(&self) -> Vec<&str> {
        self.get("metadata")
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
    fn is_terminating(&self) -> bool {
        self.get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|t| !t.is_null())
    }
    fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        if !self.is_object() {
            *self = Value::Object(Map::new());
        }
        let map = self.as_object_mut().expect("made an object above");
        // Not `entry`, which allocates the key on every call: the metadata is usually
        // there, and a rollout changes it several times per object.
        if !map.get("metadata").is_some_and(Value::is_object) {
            map.insert("metadata".into(), Value::Object(Map::new()));
        }
        map.get_mut("metadata")
            .and_then(Value::as_object_mut)
            .expect("made an object above")
    }
}

/// Convert a typed object (a k8s-openapi struct, a CR, a `json!` tree) into a manifest,
/// dropping `null` map entries.
pub fn to_manifest<T: Serialize + ?Sized>(object: &T) -> Result<Value, Error> {
    let value = serde_json::to_value(object)
        .map_err(|e| Error::config(format!("object cannot be serialized: {e}")))?;
    value_to_manifest(value)
}

/// [`to_manifest`] of a manifest that is JSON already: checked to be a map, with its
/// `null` map entries dropped in place, neither serialized again nor copied (a rollout
/// adds every object it renders).
pub(crate) fn value_to_manifest(mut value: Value) -> Result<Value, Error> {
    if !value.is_object() {
        return Err(Error::config(format!(
            "a Kubernetes object must serialize to a map, got {value}"
        )));
    }
    prune_nulls(&mut value);
    Ok(value)
}

/// The current time as Kubernetes writes timestamps: RFC 3339, UTC, whole seconds.
pub(crate) fn timestamp_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The longest name Kubernetes allows for most objects (a DNS-1123 label).
pub const MAX_NAME_LENGTH: usize = 63;

/// `name` if it fits in 63 characters; otherwise its first 59 characters followed by the
/// first 4 hex digits of its SHA-256, so distinct long names stay distinct.
///
/// Tested by `long_names_are_truncated_with_a_hash_suffix`.
pub(crate) fn truncated_name(name: &str) -> String {
    if name.len() <= MAX_NAME_LENGTH {
        return name.to_string();
    }
    let hex = crate::values::hex(&Sha256::digest(name.as_bytes())[..2]);
    // Cut on a character boundary at or below 59 bytes (names are ASCII in practice).
    let mut cut = MAX_NAME_LENGTH - 4;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{}", &name[..cut], hex)
}

/// Whether `answer`, what the server answered to a write of an object, says the write
/// deleted it: an update that leaves a terminating object with no finalizer and no grace
/// period left is carried out as the object's deletion. The server then answers with the
/// object as the write would have left it, but at the version it had before (nothing new
/// was stored), so a cache comparing versions would take the answer for an old copy.
/// A Namespace is held by the finalizers in its spec as well.
pub(crate) fn deleted_by_write(answer: &Value) -> bool {
    // Asked of every write's answer: the one lookup that settles almost all of them first.
    if !answer.is_terminating() || !answer.finalizers().is_empty() {
        return false;
    }
    let no_grace = answer["metadata"]
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_none_or(|seconds| seconds == 0);
    let namespace_held = answer.kind() == Some("Namespace")
        && answer.api_version() == Some("v1")
        && answer["spec"]["finalizers"]
            .as_array()
            .is_some_and(|finalizers| !finalizers.is_empty());
    no_grace && !namespace_held
}

/// Whether resourceVersion `mine` is newer than `seen`, compared as the integers etcd
/// makes them; versions that are not integers (or missing) are newer when different.
pub(crate) fn newer_version(mine: Option<&str>, seen: Option<&str>) -> bool {
    let parse = |rv: Option<&str>| rv.and_then(|rv| rv.parse::<u64>().ok());
    match (parse(mine), parse(seen)) {
        (Some(mine), Some(seen)) => mine > seen,
        _ => mine != seen,
    }
}

/// `text` as a valid label value: at most 63 characters of letters, digits, `-`, `_` and
/// `.`, beginning and ending with a letter or digit (others become `-`, the ends trimmed).
///
/// ```
/// assert_eq!(windlass::object::label_value("web tier/α"), "web-tier");
/// assert_eq!(windlass::object::label_value("database"), "database");
/// ```
pub fn label_value(text: &str) -> String {
    let allowed = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    let bytes = text.as_bytes();
    // Already a label value (the usual case, labels are stamped on every object applied).
    if bytes.len() <= 63
        && bytes.iter().all(allowed)
        && bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric)
    {
        return text.to_string();
    }
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// `<cr name>-<name>`, truncated to a valid length.
pub(crate) fn scoped_name(cr_name: &str, name: &str) -> String {
    // Joined by hand, in a string of the right size, and handed back as it is when it
    // fits: components name every object they render with it, on every reconcile.
    let mut scoped = String::with_capacity(cr_name.len() + 1 + name.len());
    scoped.push_str(cr_name);
    scoped.push('-');
    scoped.push_str(name);
    match scoped.len() <= MAX_NAME_LENGTH {
        true => scoped,
        false => truncated_name(&scoped),
    }
}

/// The field set (`fieldsV1`) of `manager`'s server-side apply entry in the object's
/// `managedFields`: what that manager applied and still owns. `None` when it has none.
///
/// ```
/// use serde_json::json;
/// let live = json!({"metadata": {"managedFields": [
///     {"manager": "windlass", "operation": "Apply", "fieldsV1": {"f:data": {"f:a": {}}}},
/// ]}});
/// let fields = windlass::object::applied_fields(&live, "windlass").unwrap();
/// assert!(fields["f:data"].get("f:a").is_some());
/// assert!(windlass::object::applied_fields(&live, "kubectl").is_none());
/// ```
pub fn applied_fields<'a>(live: &'a Value, manager: &str) -> Option<&'a Map<String, Value>> {
    live["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| is_applied_entry(e, manager))?["fieldsV1"]
        .as_object()
}

/// Whether a `managedFields` entry is `manager`'s server-side apply of the object itself:
/// the entry [`applied_fields`] reads, and the only one windlass keeps of what it reads
/// from the API server.
pub(crate) fn is_applied_entry(entry: &Value, manager: &str) -> bool {
    entry["manager"].as_str() == Some(manager)
        && entry["operation"].as_str() == Some("Apply")
        // Not a subresource's entry (servers from 1.22 record status writes apart).
        && entry["subresource"].as_str().is_none_or(str::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_write_deleted_its_object_when_nothing_holds_it_any_more() {
        let answer = |kind: &str, metadata: Value, spec: Value| json!({"apiVersion": "v1", "kind": kind, "metadata": metadata, "spec": spec});
        let at = "2026-11-29T12:00:00Z";
        let released = json!({"name": "a", "deletionTimestamp": at, "finalizers": []});
        assert!(deleted_by_write(&answer(
            "ConfigMap",
            released.clone(),
            json!(null)
        )));
        let held = json!({"name": "a", "deletionTimestamp": at, "finalizers": ["x.io/y"]});
        assert!(!deleted_by_write(&answer("ConfigMap", held, json!(null))));
        assert!(!deleted_by_write(&answer(
            "ConfigMap",
            json!({"name": "a"}),
            json!(null)
        )));
        // A Pod given time to stop stays until the kubelet is done with it.
        let graceful =
            json!({"name": "a", "deletionTimestamp": at, "deletionGracePeriodSeconds": 30});
        assert!(!deleted_by_write(&answer("Pod", graceful, json!({}))));
        // A Namespace stays while its spec's finalizers (its contents) hold it.
        let spec = json!({"finalizers": ["kubernetes"]});
        assert!(!deleted_by_write(&answer(
            "Namespace",
            released.clone(),
            spec
        )));
        let emptied = json!({"finalizers": []});
        assert!(deleted_by_write(&answer("Namespace", released, emptied)));
    }

    #[test]
    fn core_group_is_empty() {
        assert_eq!(api_group("v1"), "");
        assert_eq!(api_group("apps/v1"), "apps");
        assert_eq!(TypeRef::new("example.com/v1", "Foo").group(), "example.com");
    }

    #[test]
    fn refs_from_manifests_name_what_is_missing() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}});
        let r = ObjectRef::from_manifest(&cm).expect("complete");
        assert_eq!(r.to_string(), "v1/ConfigMap/ns/a");
        let err = ObjectRef::from_manifest(&json!({"apiVersion": "v1", "kind": "ConfigMap"}))
            .expect_err("no name");
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }

    #[test]
    fn truncation_keeps_long_names_distinct() {
        let a = truncated_name(&format!("{}a", "x".repeat(70)));
        let b = truncated_name(&format!("{}b", "x".repeat(70)));
        assert_eq!(a.len(), 63);
        assert_ne!(a, b);
        assert_eq!(scoped_name("shop", "db"), "shop-db");
    }

    #[test]
    fn to_manifest_drops_nulls() {
        let m = to_manifest(&json!({"kind": "X", "metadata": {"labels": null}})).expect("map");
        assert_eq!(m, json!({"kind": "X", "metadata": {}}));
        assert!(to_manifest(&json!([1])).is_err());
    }

    #[test]
    fn long_names_are_truncated_with_a_hash_suffix() {
        let long = "a".repeat(70);
        let short = truncated_name(&long);
        assert_eq!(short.len(), 63);
        assert!(short.starts_with(&"a".repeat(59)));
        assert_eq!(truncated_name("web"), "web");
    }

    #[test]
    fn scoped_names_are_the_joined_names_truncated() {
        for (cr, name) in [
            ("shop", "db"),
            ("", ""),
            ("a", &"b".repeat(61)),
            ("a", &"b".repeat(62)),
        ] {
            assert_eq!(
                scoped_name(cr, name),
                truncated_name(&format!("{cr}-{name}"))
            );
        }
        assert_eq!(scoped_name("a", &"b".repeat(61)).len(), 63);
        assert_eq!(scoped_name("é", &"b".repeat(70)).len(), 63);
    }
}
