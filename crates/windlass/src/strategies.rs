//! proptest strategies the property tests of several modules share: arbitrary text and
//! arbitrary JSON, for the "any input gets an answer, never a panic" properties of every
//! parser.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Any Unicode text of fewer than `max` characters: control characters, multi-byte ones
/// and unassigned code points included.
pub(crate) fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
}

/// A short map key: usually a plain word (so that keys meet again across a value and a
/// patch of it), sometimes any text.
pub(crate) fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "c", "name", "spec", "kind", "data", "items", "x.y", "$patch"])
            .prop_map(str::to_string),
        1 => any_text(8),
    ]
}

/// A JSON scalar: null, a boolean, an integer or float, or text.
pub(crate) fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter_map("finite", serde_json::Number::from_f64)
            .prop_map(Value::Number),
        any_text(12).prop_map(Value::String),
    ]
}

/// Any JSON value, nested up to `depth` levels, with at most `width` entries per map or
/// list.
pub(crate) fn any_json(depth: u32, width: usize) -> impl Strategy<Value = Value> {
    scalar().prop_recursive(depth, 64, width as u32, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..width).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..width)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Any JSON object (the shape of a manifest or a configuration file).
pub(crate) fn any_json_object(depth: u32, width: usize) -> impl Strategy<Value = Value> {
    prop::collection::vec((key(), any_json(depth, width)), 0..width)
        .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>()))
}
