//! How the watches decode what the API server sends: once, straight into what the stores
//! and the router use ([`Parsed`]); and, for a watch that met an object too deep to decode,
//! one object at a time ([`Tolerant`]).
//!
//! A watched object becomes a `serde_json::Value` in one pass ([`Parsed`]): the stores pack
//! that value, the router reads it, and kube-runtime's watcher only needs its
//! resourceVersion, which is copied out of it. (kube-rs's `DynamicObject` would parse the
//! object into serde's buffered content first, for its flattened fields, and then windlass
//! would convert it to a `Value` again: three passes where one does.)
//!
//! kube-rs decodes a whole list response, or a whole watch event, in one go; an object the
//! decoder refuses — nested deeper than serde_json's recursion limit (128), which the API
//! server stores happily in a free-form field — fails the list, so the watch restarts,
//! lists again, fails again, and no CR of the kind is ever reconciled. A watch whose
//! decoding failed on the recursion limit ([`too_deep`]) therefore switches to [`Tolerant`]
//! for good: it reads each object as raw text first (serde_json skips a raw value without
//! recursing), then decodes it alone; a refused object becomes an [`Invalid`] with the
//! metadata the watch needs, and the others go on. The watches log the invalid ones and
//! leave them out. Only such a watch pays the second pass.

use std::borrow::Cow;

use kube::api::ApiResource;
use kube::core::{DynamicObject, DynamicResourceScope, ObjectMeta};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

pub(crate) use crate::cluster::parsed::Parsed;

/// A watched object, or why it could not be read.
#[derive(Debug, Clone)]
pub(crate) struct Tolerant(pub(crate) Result<Parsed, Box<Invalid>>);

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
fn decode(text: &str) -> Result<Parsed, Box<Invalid>> {
    serde_json::from_str::<Parsed>(text).map_err(|error| {
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

/// What a watch of either decoding hands on: the object, or what could not be read.
pub(crate) trait Watched:
    kube::Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>
    + serde::de::DeserializeOwned
    + Clone
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The object as JSON, or why it could not be read.
    fn into_value(self) -> Result<Value, Box<Invalid>>;
}

impl Watched for Parsed {
    fn into_value(self) -> Result<Value, Box<Invalid>> {
        Ok(Parsed::into_value(self))
    }
}

impl Watched for Tolerant {
    fn into_value(self) -> Result<Value, Box<Invalid>> {
        self.0.map(Parsed::into_value)
    }
}

/// Whether `error` is a watch's decoding failing on an object, as it does on serde_json's
/// recursion limit: the watch must decode one object at a time ([`Tolerant`]) from now on.
///
/// A list response fails with the decoder's error. A watch event that does not decode is
/// read again by kube-rs as a `Status`, which any JSON object is (every field of it has a
/// default, and the rest is skipped without recursing): it comes as an API error with no
/// code, no reason and no message, which no API server sends.
pub(crate) fn too_deep(error: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error;
    let error = match error {
        Error::InitialListFailed(e) | Error::WatchStartFailed(e) | Error::WatchFailed(e) => e,
        _ => return false,
    };
    match error {
        kube::Error::SerdeError(e) => e.to_string().contains("recursion limit exceeded"),
        kube::Error::Api(status) => {
            status.code == 0 && status.reason.is_empty() && status.message.is_empty()
        }
        _ => false,
    }
}

/// The kube `Resource` of a dynamically typed watched object: the kind is the watch's, the
/// metadata what the type's `metadata` and `metadata_mut` give.
macro_rules! dynamic_resource {
    ($type:ty) => {
        impl kube::Resource for $type {
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
                self.metadata()
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                self.metadata_mut()
            }
        }
    };
}

impl Tolerant {
    fn metadata(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(object) => object.metadata(),
            Err(invalid) => &invalid.metadata,
        }
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(object) => kube::Resource::meta_mut(object),
            Err(invalid) => &mut invalid.metadata,
        }
    }
}

dynamic_resource!(Tolerant);

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn deep(depth: usize) -> String {
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
        let error = serde_json::from_str::<kube::core::ObjectList<Parsed>>(&list)
            .expect_err("so does the one-pass decoding");
        assert!(
            too_deep(&kube::runtime::watcher::Error::InitialListFailed(
                kube::Error::SerdeError(error)
            )),
            "and says why: the watch switches to decoding objects one by one"
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

#[cfg(test)]
mod parsed_tests {
    use super::tests::deep;
    use super::*;

    #[test]
    fn only_a_decoding_error_of_depth_switches_to_tolerant_decoding() {
        use kube::runtime::watcher::Error;
        let syntax = serde_json::from_str::<Value>("{").unwrap_err();
        assert!(!too_deep(&Error::WatchFailed(kube::Error::SerdeError(
            syntax
        ))));
        assert!(!too_deep(&Error::NoResourceVersion));
        // A watch event kube-rs could not decode, read again as an empty Status.
        let line = format!(r#"{{"type": "ADDED", "object": {}}}"#, deep(300));
        assert!(serde_json::from_str::<kube::core::WatchEvent<Parsed>>(&line).is_err());
        let status: kube::core::Status = serde_json::from_str(&line).unwrap();
        assert!(too_deep(&Error::WatchFailed(kube::Error::Api(Box::new(
            status
        )))));
        let gone = kube::core::Status {
            code: 410,
            reason: "Expired".into(),
            ..Default::default()
        };
        assert!(!too_deep(&Error::WatchFailed(kube::Error::Api(Box::new(
            gone
        )))));
    }
}
