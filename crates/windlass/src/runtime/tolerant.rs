//! Watched objects that one malformed object cannot take down with the others.
//!
//! kube-rs decodes a whole list response, or a whole watch event, in one go; an object the
//! decoder refuses — nested deeper than serde_json's recursion limit (128), which the API
//! server stores happily in a free-form field — fails the list, so the watch restarts,
//! lists again, fails again, and no CR of the kind is ever reconciled. [`Tolerant`] reads
//! each object as raw text first (serde_json skips a raw value without recursing), then
//! decodes it alone: a refused object becomes an [`Invalid`] with the metadata the watch
//! needs, and the others go on. The watches log the invalid ones and leave them out.

use std::borrow::Cow;

use kube::api::{ApiResource, DynamicObject};
use kube::core::{DynamicResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A watched object, or why it could not be read.
#[derive(Debug, Clone)]
pub(crate) struct Tolerant(pub(crate) Result<DynamicObject, Box<Invalid>>);

/// An object that could not be decoded: its metadata (what a watch needs to follow it) and
/// the decoder's error.
#[derive(Debug, Clone)]
pub(crate) struct Invalid {
    pub(crate) metadata: ObjectMeta,
    pub(crate) error: String,
}

impl<'de> Deserialize<'de> for Tolerant {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(Tolerant(decode(raw.get())))
    }
}

/// `text` as an object, or as much of its metadata as can be read and the error. Reading
/// only `metadata` skips every other field without recursing into it.
fn decode(text: &str) -> Result<DynamicObject, Box<Invalid>> {
    serde_json::from_str::<DynamicObject>(text).map_err(|error| {
        #[derive(Deserialize)]
        struct MetadataOnly {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        Box::new(Invalid {
            metadata: serde_json::from_str::<MetadataOnly>(text)
                .map(|m| m.metadata)
                .unwrap_or_default(),
            error: error.to_string(),
        })
    })
}

impl kube::Resource for Tolerant {
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
        match &self.0 {
            Ok(object) => &object.metadata,
            Err(invalid) => &invalid.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(object) => &mut object.metadata,
            Err(invalid) => &mut invalid.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep(depth: usize) -> String {
        format!(
            r#"{{"metadata": {{"name": "deep", "resourceVersion": "7"}}, "spec": {}"bottom"{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    }

    #[test]
    fn one_object_too_deep_leaves_the_rest_of_a_list_readable() {
        let list = format!(
            r#"{{"apiVersion": "v1", "kind": "List", "metadata": {{}}, "items": [
                {{"metadata": {{"name": "a"}}, "spec": {{}}}},
                {},
                {{"metadata": {{"name": "b"}}, "spec": {{}}}}]}}"#,
            deep(300)
        );
        assert!(
            serde_json::from_str::<kube::core::ObjectList<DynamicObject>>(&list).is_err(),
            "kube-rs's own decoding fails the whole list"
        );
        let read: kube::core::ObjectList<Tolerant> = serde_json::from_str(&list).unwrap();
        let names: Vec<_> = read
            .items
            .iter()
            .map(|t| (kube::Resource::meta(t).name.clone().unwrap(), t.0.is_ok()))
            .collect();
        assert_eq!(
            names,
            [
                ("a".to_string(), true),
                ("deep".to_string(), false),
                ("b".to_string(), true)
            ]
        );
        let invalid = read.items[1].0.as_ref().unwrap_err();
        assert_eq!(invalid.metadata.resource_version.as_deref(), Some("7"));
        assert!(
            invalid.error.contains("recursion limit"),
            "{}",
            invalid.error
        );
    }

    #[test]
    fn a_watch_event_of_an_object_too_deep_is_read_as_invalid() {
        let event = format!(r#"{{"type": "ADDED", "object": {}}}"#, deep(300));
        let read: kube::core::WatchEvent<Tolerant> = serde_json::from_str(&event).unwrap();
        match read {
            kube::core::WatchEvent::Added(object) => assert!(object.0.is_err()),
            other => panic!("{other:?}"),
        }
    }
}
