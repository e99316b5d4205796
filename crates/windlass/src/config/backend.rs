//! The controller's own configuration ([`Controller::Config`]): the per-CR override
//! field, and the check that names keys the config type does not have.
//!
//! [`Controller::Config`]: crate::controller::Controller::Config

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The CR's `spec.configOverrides`: per-CR changes to the backend config
/// ([`Controller::Config`](crate::controller::Controller::Config)), the last of its layers.
/// Add it to a spec to let users override the operator's defaults per CR:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, schemars::JsonSchema)]
/// #[serde(rename_all = "camelCase")]
/// struct AppSpec {
///     #[serde(default, skip_serializing_if = "windlass::config::ConfigOverrides::is_empty")]
///     config_overrides: windlass::config::ConfigOverrides,
/// }
/// ```
///
/// Its schema accepts any object: the keys are checked when the layered config is parsed
/// into the controller's config type, and a wrong one becomes a config error in the CR's
/// status that names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConfigOverrides(pub serde_json::Map<String, serde_json::Value>);

impl ConfigOverrides {
    /// Whether no key is overridden.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl schemars::JsonSchema for ConfigOverrides {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ConfigOverrides".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "Per-CR overrides of the operator's backend config.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// The keys of `value` that `T`'s JSON schema does not name, as dotted paths: what a
/// misspelled key in a `config-defaults` ConfigMap or in `spec.configOverrides` would be.
/// serde drops such a key silently unless the type denies unknown fields; this finds it
/// whatever the type says. Objects whose schema admits any key (maps, preserved unknown
/// fields) are not looked into.
///
/// Tested by `misspelled_keys_are_found_at_any_depth`.
pub fn unknown_keys<T: schemars::JsonSchema>(value: &Value) -> Vec<String> {
    let schema = schemars::schema_for!(T);
    let root = schema.as_value();
    let mut unknown = Vec::new();
    walk(root, root, value, "", &mut unknown, 0);
    unknown
}

fn walk(root: &Value, node: &Value, value: &Value, path: &str, out: &mut Vec<String>, depth: u8) {
    // Schemas of recursive types refer to themselves; config values are shallow.
    if depth > 32 {
        return;
    }
    let Value::Object(map) = value else {
        return;
    };
    let Some(node) = object_schema(root, node, 0) else {
        return;
    };
    let open = node
        .get("additionalProperties")
        .is_some_and(|extra| extra != &Value::Bool(false))
        || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let Some(properties) = node.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, child) in map {
        let child_path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match properties.get(key) {
            Some(schema) => walk(root, schema, child, &child_path, out, depth + 1),
            None if !open => out.push(child_path),
            None => {}
        }
    }
}

/// The schema of an object with named properties that `node` stands for: itself, what its
/// `$ref` points at, or the one alternative of an `Option` (`anyOf` with `null`).
fn object_schema<'a>(root: &'a Value, node: &'a Value, hops: u8) -> Option<&'a Value> {
    if hops > 8 {
        return None;
    }
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let pointer = reference.strip_prefix('#')?;
        return object_schema(root, root.pointer(pointer)?, hops + 1);
    }
    if node.get("properties").is_some() {
        return Some(node);
    }
    ["anyOf", "oneOf", "allOf"]
        .iter()
        .filter_map(|k| node.get(*k).and_then(Value::as_array))
        .flatten()
        .find_map(|alternative| object_schema(root, alternative, hops + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelled_keys_are_found_at_any_depth() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Backend {
            replicas: u32,
            cache: Cache,
        }
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Cache {
            size: u32,
        }

        let value =
            serde_json::json!({"replicas": 2, "replica": 3, "cache": {"size": 1, "sise": 2}});
        assert_eq!(unknown_keys::<Backend>(&value), ["cache.sise", "replica"]);
    }
}
