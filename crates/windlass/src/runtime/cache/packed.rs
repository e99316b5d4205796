//! What a store keeps of an object: its compact JSON text ([`Packed`]), of all of it or of
//! the part its readers read ([`Keep`]), under a [`Key`] of one string.

use std::sync::Arc;

use serde_json::Value;

use crate::cluster::DATA_DIGEST;
use crate::object::ObjectRef;
use crate::object::TypeRef;
use crate::rollout::dependency_hash::data_digest;

/// What a store keeps of each object (see the docs of [`super`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Keep {
    /// The whole object.
    #[default]
    Whole,
    /// What a rollout reads of an object windlass applied (see the docs of [`super`]).
    Slim,
    /// What [`Keep::Slim`] keeps and the digest of the object's data, in place of the
    /// data: the Secrets and ConfigMaps of a kind CRs read for a dependency hash (see the
    /// docs of [`super`]).
    Digest,
}

impl Keep {
    /// Whether a copy kept so holds something a copy kept as `other` lacks.
    pub(super) fn keeps_more_than(self, other: Keep) -> bool {
        let rank = |keep| match keep {
            Keep::Slim => 0,
            Keep::Digest => 1,
            Keep::Whole => 2,
        };
        rank(self) > rank(other)
    }

    /// Whether a copy kept so serves a reader of `what`.
    pub(super) fn serves(self, what: Read) -> bool {
        match what {
            Read::Whole => self == Keep::Whole,
            Read::Own | Read::Metadata => true,
            Read::Dependency => self != Keep::Slim,
        }
    }
}

/// What a reader of a store reads of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// All of it ([`Cluster::get`]).
    Whole,
    /// What a rollout reads of an object it is about to write ([`Cluster::get_own`]): a
    /// watch of every object with windlass's ownership label knows it absent as well.
    Own,
    /// Its metadata.
    Metadata,
    /// What a dependency hash reads ([`Cluster::get_dependency`]).
    Dependency,
}

/// The prefix of windlass's own labels and annotations.
const OWN_PREFIX: &str = "windlass.dev/";

/// The field every reader of a store asks of a copy before it reads anything else: the
/// echo of a write, read-your-writes and the steady reconcile compare versions.
const VERSION: &str = "resourceVersion";

/// How a packed copy with a resourceVersion begins: [`Packed::new`] writes the metadata
/// first and the version first in it.
const VERSION_FIRST: &str = r#"{"metadata":{"resourceVersion":""#;

/// The fields of `metadata` a slim copy keeps as they are.
const SLIM_METADATA: [&str; 6] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
];

/// The fields of a `managedFields` entry a slim copy keeps (what
/// [`crate::object::applied_fields`] reads).
const SLIM_MANAGED: [&str; 4] = ["manager", "operation", "subresource", "fieldsV1"];

/// An object as [`Keep::Slim`] keeps it, written without copying the parts kept; with
/// the digest of its data under [`DATA_DIGEST`] as [`Keep::Digest`] keeps it.
struct Slim<'a>(&'a Value, Option<String>);

/// An object's metadata as [`Keep::Slim`] keeps it.
struct SlimMetadata<'a>(&'a serde_json::Map<String, Value>);

/// A map of which only the keys that its function accepts are written.
struct Only<'a, F: Fn(&str) -> bool>(&'a serde_json::Map<String, Value>, F);

impl<F: Fn(&str) -> bool> serde::Serialize for Only<'_, F> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.0.iter().filter(|(k, _)| (self.1)(k)) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A `managedFields` list of which each entry keeps [`SLIM_MANAGED`].
struct SlimManaged<'a>(&'a [Value]);

impl serde::Serialize for SlimManaged<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for entry in self.0 {
            match entry {
                Value::Object(entry) => {
                    seq.serialize_element(&Only(entry, |k: &str| SLIM_MANAGED.contains(&k)))?;
                }
                other => seq.serialize_element(other)?,
            }
        }
        seq.end()
    }
}

/// A spec of which only `replicas` is kept.
#[derive(serde::Serialize)]
struct Replicas<'a> {
    replicas: &'a Value,
}

impl serde::Serialize for Slim<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(object) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        if let Some(Value::Object(metadata)) = object.get("metadata") {
            map.serialize_entry("metadata", &SlimMetadata(metadata))?;
        }
        for (key, value) in object {
            match (key.as_str(), value) {
                ("apiVersion" | "kind" | "status", _) => map.serialize_entry(key, value)?,
                ("spec", spec) => {
                    if let Some(replicas) = spec.get("replicas") {
                        map.serialize_entry(key, &Replicas { replicas })?;
                    }
                }
                _ => {}
            }
        }
        if let Some(digest) = &self.1 {
            map.serialize_entry(DATA_DIGEST, digest)?;
        }
        map.end()
    }
}

impl serde::Serialize for SlimMetadata<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        if let Some(version) = self.0.get(VERSION) {
            map.serialize_entry(VERSION, version)?;
        }
        let own = |k: &str| k.starts_with(OWN_PREFIX);
        for (key, value) in self.0 {
            match (key.as_str(), value) {
                (VERSION, _) => {}
                (name, value) if SLIM_METADATA.contains(&name) => {
                    map.serialize_entry(key, value)?;
                }
                ("labels" | "annotations", Value::Object(entries))
                    if entries.keys().any(|k| own(k)) =>
                {
                    map.serialize_entry(key, &Only(entries, own))?;
                }
                ("managedFields", Value::Array(entries)) => {
                    map.serialize_entry(key, &SlimManaged(entries))?;
                }
                _ => {}
            }
        }
        map.end()
    }
}

/// A value written with the key `path[0]` of its map first (that key's value written so in
/// turn, by the rest of the path), then the others in order: [`Keep::Whole`] writes an
/// object along `["metadata", "resourceVersion"]` (see [`Packed::resource_version`]).
struct KeysFirst<'a>(&'a Value, &'a [&'a str]);

impl serde::Serialize for KeysFirst<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (Some(object), Some((first, rest))) = (self.0.as_object(), self.1.split_first()) else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(Some(object.len()))?;
        if let Some(value) = object.get(*first) {
            map.serialize_entry(first, &KeysFirst(value, rest))?;
        }
        for (key, value) in object {
            if key != first {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// An object's key in its kind's store: `namespace/name`, or `name` when cluster-scoped
/// (a name never holds a `/`). One string where an [`ObjectRef`] is four: the kind is
/// the store's, and at 60 000 objects the difference is 13 MiB.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key(Box<str>);

impl Key {
    pub(super) fn of(reference: &ObjectRef) -> Self {
        Key(match &reference.namespace {
            Some(namespace) => format!("{namespace}/{}", reference.name).into(),
            None => reference.name.as_str().into(),
        })
    }

    pub(super) fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(namespace, _)| namespace)
    }

    /// The reference of the object of `type_ref` so keyed.
    pub(super) fn reference(&self, type_ref: &TypeRef) -> ObjectRef {
        let (namespace, name) = match self.0.split_once('/') {
            Some((namespace, name)) => (Some(namespace.to_string()), name),
            None => (None, &*self.0),
        };
        ObjectRef {
            api_version: type_ref.api_version.clone(),
            kind: type_ref.kind.clone(),
            namespace,
            name: name.to_string(),
        }
    }
}

/// An object as its compact JSON text (see the docs of [`super`]).
#[derive(Debug, Clone)]
pub(super) struct Packed(pub(super) Arc<str>);

impl Packed {
    pub(super) fn new(object: &Value, keep: Keep) -> Self {
        // Written with `serde_json::to_string`, not `Value`'s `Display` (`to_string()`),
        // which passes every token through a `fmt::Formatter`; every watched object and
        // every written copy is packed here. Serializing a `Value` cannot fail: its keys
        // are strings.
        let text = match keep {
            Keep::Whole => serde_json::to_string(&KeysFirst(object, &["metadata", VERSION])),
            Keep::Slim => serde_json::to_string(&Slim(object, None)),
            Keep::Digest => serde_json::to_string(&Slim(object, Some(data_digest(object)))),
        };
        Packed(Arc::from(text.unwrap_or_default()))
    }

    /// The object; `None` only if the text does not parse, which text written by
    /// [`Packed::new`] always does.
    pub(super) fn unpack(&self) -> Option<Value> {
        serde_json::from_str(&self.0).ok()
    }

    /// The object's resourceVersion, read from the text without building the object.
    /// [`Packed::new`] writes it first, so it is read off the start of the text; a copy
    /// without one is parsed, every other field skipped without allocating.
    pub(super) fn resource_version(&self) -> Option<String> {
        if let Some(rest) = self.0.strip_prefix(VERSION_FIRST)
            && let Some((version, _)) = rest.split_once('"')
            && !version.contains('\\')
        {
            return Some(version.to_string());
        }
        #[derive(serde::Deserialize)]
        struct Object<'a> {
            #[serde(borrow, default)]
            metadata: Option<Metadata<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Metadata<'a> {
            #[serde(borrow, default, rename = "resourceVersion")]
            resource_version: Option<std::borrow::Cow<'a, str>>,
        }
        serde_json::from_str::<Object<'_>>(&self.0)
            .ok()?
            .metadata?
            .resource_version
            .map(std::borrow::Cow::into_owned)
    }
}
