//! An object of any kind read from the API server in one pass, straight into the JSON
//! windlass works with ([`Parsed`]).
//!
//! kube-rs's `DynamicObject` flattens its fields, so serde parses an object into its
//! buffered content first and the fields from that; windlass then converted the result to
//! a `serde_json::Value` again. A reconcile's every write answer and every watched object
//! went through those three passes; [`Parsed`] takes one. kube-rs's `Api` and watcher need
//! of an object only its resourceVersion (and its name and namespace for their logs), which
//! are copied out of the value.

use std::borrow::Cow;

use kube::api::{ApiResource, DynamicObject};
use kube::core::{DynamicResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// An object of any kind as JSON, decoded in one pass (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    /// The name, namespace and resourceVersion, for kube-rs.
    metadata: ObjectMeta,
    value: Value,
}

impl Parsed {
    /// `value` as an object to send.
    pub(crate) fn from_value(value: Value) -> Self {
        Parsed {
            metadata: identity(&value),
            value,
        }
    }

    /// The object.
    pub(crate) fn into_value(self) -> Value {
        self.value
    }

    /// Its name, namespace and resourceVersion.
    pub(crate) fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// What kube-rs needs of an object's metadata: its resourceVersion (and its name and
/// namespace, for logs).
fn identity(value: &Value) -> ObjectMeta {
    let field = |name: &str| value["metadata"][name].as_str().map(str::to_string);
    ObjectMeta {
        name: field("name"),
        namespace: field("namespace"),
        resource_version: field("resourceVersion"),
        ..ObjectMeta::default()
    }
}

impl<'de> Deserialize<'de> for Parsed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Parsed::from_value)
    }
}

impl Serialize for Parsed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl kube::Resource for Parsed {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_keeps_the_whole_object_and_gives_kube_its_version() {
        let text = r#"{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "42",
                "labels": {"x": "y"}},
            "data": {"k": "v"}}"#;
        let parsed: Parsed = serde_json::from_str(text).unwrap();
        assert_eq!(
            kube::ResourceExt::resource_version(&parsed).as_deref(),
            Some("42")
        );
        assert_eq!(kube::Resource::meta(&parsed).name.as_deref(), Some("a"));
        assert_eq!(
            serde_json::to_string(&parsed).unwrap(),
            parsed.value.to_string()
        );
        let value = parsed.into_value();
        assert_eq!(value, serde_json::from_str::<Value>(text).unwrap());
    }
}
