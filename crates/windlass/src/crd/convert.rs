//! Converting one object between two served versions through the hub, keeping what the
//! target version cannot hold in an annotation and restoring it on the way back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{CONVERSION_DATA, Served};

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The object's `apiVersion`, or the one asked for, is not one of the CRD's versions.
    #[error("{asked} is not a version of this CRD, which serves {served}")]
    UnknownVersion {
        /// The version asked for or found.
        asked: String,
        /// The versions served, comma-separated.
        served: String,
    },
    /// The object does not deserialise as the type of its version.
    #[error("the object is not a valid {api_version} object: {source}")]
    Malformed {
        /// The version it claimed to be.
        api_version: String,
        /// Where and why it did not deserialise.
        #[source]
        source: serde_path_to_error::Error<serde_json::Error>,
    },
    /// A conversion function (`TryFrom`) refused the object.
    #[error("cannot convert the object to {api_version}: {reason}")]
    Refused {
        /// The version it was converted to.
        api_version: String,
        /// The conversion function's error.
        reason: String,
    },
    /// The versions do not make one CRD (different groups, kinds or scopes, or a storage
    /// version that is not served).
    #[error("the versions do not make one CRD: {0}")]
    Definition(String),
}

/// The hub's conversion to itself.
pub(super) fn identity(object: Value) -> Result<Value, ConversionError> {
    Ok(object)
}

/// `object`, a `From` as JSON, as a `To` as JSON, through `To: TryFrom<From>`.
pub(super) fn typed<From, To>(object: Value) -> Result<Value, ConversionError>
where
    From: DeserializeOwned + kube::Resource<DynamicType = ()>,
    To: Serialize + TryFrom<From, Error: std::fmt::Display> + kube::Resource<DynamicType = ()>,
{
    let from: From =
        serde_path_to_error::deserialize(object).map_err(|source| ConversionError::Malformed {
            api_version: From::api_version(&()).into_owned(),
            source,
        })?;
    let to = To::try_from(from).map_err(|e| ConversionError::Refused {
        api_version: To::api_version(&()).into_owned(),
        reason: e.to_string(),
    })?;
    serde_json::to_value(to).map_err(|e| ConversionError::Refused {
        api_version: To::api_version(&()).into_owned(),
        reason: e.to_string(),
    })
}

/// `object` as `api_version`, through the hub (`served[0]`).
pub(super) fn convert(
    served: &[Served],
    mut object: Value,
    api_version: &str,
) -> Result<Value, ConversionError> {
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let source = position(served, &from)?;
    let target = position(served, api_version)?;
    if source == target {
        return Ok(object);
    }
    let (metadata, kept) = take_metadata(&mut object);
    let mut hub = (served[source].to_hub)(object)?;
    if let Some(original) = kept.filter(|_| source != 0) {
        restore_from(&mut hub, &original, &served[source])?;
    }
    let mut out = (served[target].from_hub)(hub.clone())?;
    let lost = target != 0 && {
        let back = (served[target].to_hub)(out.clone())?;
        parts(&back) != parts(&hub)
    };
    put_metadata(&mut out, metadata, lost.then(|| parts(&hub)));
    Ok(out)
}

/// The index of `api_version` among the served versions.
fn position(served: &[Served], api_version: &str) -> Result<usize, ConversionError> {
    served
        .iter()
        .position(|s| s.api_version == api_version)
        .ok_or_else(|| ConversionError::UnknownVersion {
            asked: api_version.to_string(),
            served: served
                .iter()
                .map(|s| s.api_version.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The object's metadata, without the conversion data, and the conversion data (the hub's
/// spec and status when it was last converted down), if any parses.
fn take_metadata(object: &mut Value) -> (Value, Option<Value>) {
    let mut metadata = object
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut kept = None;
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        kept = annotations
            .remove(CONVERSION_DATA)
            .and_then(|v| v.as_str().and_then(|s| serde_json::from_str(s).ok()));
        if annotations.is_empty()
            && let Some(meta) = metadata.as_object_mut()
        {
            meta.remove("annotations");
        }
    }
    if let Some(object) = object.as_object_mut() {
        object.insert("metadata".to_string(), metadata.clone());
    }
    (metadata, kept)
}

/// `object` with `metadata` as its metadata, and `kept` (the hub's spec and status) in
/// the conversion-data annotation when given.
fn put_metadata(object: &mut Value, mut metadata: Value, kept: Option<Value>) {
    if let (Some(kept), Some(meta)) = (kept, metadata.as_object_mut()) {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(CONVERSION_DATA.to_string(), Value::String(kept.to_string()));
        }
    }
    if let Some(object) = object.as_object_mut() {
        object.insert("metadata".to_string(), metadata);
    }
}

/// What a conversion is about: the `spec` and `status` of an object.
fn parts(object: &Value) -> Value {
    let mut parts = Map::new();
    for key in ["spec", "status"] {
        if let Some(value) = object.get(key) {
            parts.insert(key.to_string(), value.clone());
        }
    }
    Value::Object(parts)
}

/// Restore into `hub` (converted up from `spoke`'s version) the fields of `original` (the
/// hub's spec and status before it was converted down) that the spoke could not hold and
/// the client left alone.
///
/// What the spoke could not hold is what a round trip of `original` through it changes:
/// where `hub` still equals that round trip, the client did not touch the field and the
/// original value comes back; where it differs, the client's edit wins.
fn restore_from(hub: &mut Value, original: &Value, spoke: &Served) -> Result<(), ConversionError> {
    let mut original_object = hub.clone();
    for key in ["spec", "status"] {
        if let Some(object) = original_object.as_object_mut() {
            match original.get(key) {
                Some(value) => object.insert(key.to_string(), value.clone()),
                None => object.remove(key),
            };
        }
    }
    let round_trip = (spoke.to_hub)((spoke.from_hub)(original_object)?)?;
    for key in ["spec", "status"] {
        let restored = restore(hub.get(key), round_trip.get(key), original.get(key));
        if let Some(object) = hub.as_object_mut() {
            match restored {
                Some(value) => object.insert(key.to_string(), value),
                None => object.remove(key),
            };
        }
    }
    Ok(())
}

/// A three-way merge: `current` where it differs from `base`, else `original`; objects
/// key by key. `None` is an absent field.
fn restore(
    current: Option<&Value>,
    base: Option<&Value>,
    original: Option<&Value>,
) -> Option<Value> {
    if current == base {
        return original.cloned();
    }
    match (current, base, original) {
        (
            Some(Value::Object(current)),
            Some(Value::Object(base)),
            Some(Value::Object(original)),
        ) => {
            let mut keys: Vec<&String> = current
                .keys()
                .chain(base.keys())
                .chain(original.keys())
                .collect();
            keys.sort();
            keys.dedup();
            let merged = keys
                .into_iter()
                .filter_map(|key| {
                    restore(current.get(key), base.get(key), original.get(key))
                        .map(|value| (key.clone(), value))
                })
                .collect();
            Some(Value::Object(merged))
        }
        _ => current.cloned(),
    }
}

#[cfg(test)]
mod tests;
