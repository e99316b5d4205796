//! What kube-apiserver checks of built-in kinds' own fields that a component rendering
//! plain JSON can get wrong, so that a dry run refuses what the server would refuse:
//!
//! - **shape**: a ConfigMap's `data` and a Secret's `stringData` hold strings, a Secret's
//!   `data` and a ConfigMap's `binaryData` base64, a workload's `replicas` an integer. The
//!   server cannot decode such a body into its types (a 400; for a server-side apply, a
//!   500 that says so — the live cluster reports both as invalid);
//! - **workloads** (`apps/v1` Deployments, StatefulSets, DaemonSets, ReplicaSets): a
//!   non-empty `spec.selector` that matches the pod template's labels, and every container
//!   named and given an image (422s naming the field).
//!
//! Not a schema validator: the in-memory cluster checks these common mistakes, and the
//! conformance test holds each to what the real server answers. The rest of a built-in
//! kind's validation is the server's alone.

use serde_json::Value;

use crate::error::{ClusterError, FieldCause};
use crate::object::ManifestExt;

/// The workload kinds of `apps/v1` whose pods are chosen by `spec.selector`.
const WORKLOADS: [&str; 4] = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"];

/// Refuse a manifest, as sent, whose fields do not decode as its built-in kind's.
pub(super) fn check_shape(manifest: &Value) -> Result<(), String> {
    let (Some(api_version), Some(kind)) = (manifest.api_version(), manifest.kind()) else {
        return Ok(());
    };
    let mut problems = Vec::new();
    match (api_version, kind) {
        ("v1", "ConfigMap") => {
            each_value(manifest, "data", &mut problems, string);
            each_value(manifest, "binaryData", &mut problems, base64);
        }
        ("v1", "Secret") => {
            each_value(manifest, "data", &mut problems, base64);
            each_value(manifest, "stringData", &mut problems, string);
        }
        ("apps/v1", kind) if WORKLOADS.contains(&kind) => {
            let replicas = &manifest["spec"]["replicas"];
            if !(replicas.is_null() || replicas.is_i64()) {
                let got = json_type(replicas);
                problems.push(format!("spec.replicas: expected an integer, got {got}"));
            }
        }
        _ => {}
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(problems.join("; ")),
    }
}

/// Check every value of the map `field` with `check`, which says what it expected.
fn each_value(
    manifest: &Value,
    field: &str,
    problems: &mut Vec<String>,
    check: fn(&Value) -> Result<(), &'static str>,
) {
    match manifest.get(field) {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            // A null removes the key (a merge patch's delete).
            for (key, value) in map.iter().filter(|(_, value)| !value.is_null()) {
                if let Err(expected) = check(value) {
                    // The type only, never the value: a Secret's values are secret.
                    let got = json_type(value);
                    problems.push(format!("{field}.{key}: expected {expected}, got {got}"));
                }
            }
        }
        Some(other) => {
            let got = json_type(other);
            problems.push(format!("{field}: expected a map, got {got}"));
        }
    }
}

/// What kind of JSON value `value` is, for messages that must not show it.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

fn string(value: &Value) -> Result<(), &'static str> {
    match value {
        Value::String(_) => Ok(()),
        _ => Err("a string"),
    }
}

fn base64(value: &Value) -> Result<(), &'static str> {
    match serde_json::from_value::<k8s_openapi::ByteString>(value.clone()) {
        Ok(_) => Ok(()),
        Err(_) => Err("base64 text"),
    }
}

/// Refuse a workload, as it would be stored, whose selector is missing, empty or does not
/// match its pod template's labels, or with a container lacking a name or an image.
pub(super) fn check_workload(object: &Value) -> Result<(), ClusterError> {
    if object.api_version() != Some("apps/v1")
        || !object.kind().is_some_and(|kind| WORKLOADS.contains(&kind))
    {
        return Ok(());
    }
    let spec = &object["spec"];
    let mut causes = Vec::new();
    let mut cause = |field: String, reason: &str, message: String| {
        causes.push(FieldCause {
            field,
            reason: reason.to_string(),
            message,
        });
    };
    let selector = &spec["selector"];
    let labels = &spec["template"]["metadata"]["labels"];
    if selector.is_null() {
        cause(
            "spec.selector".into(),
            "FieldValueRequired",
            "Required value".into(),
        );
    } else if selects_nothing(selector) {
        cause(
            "spec.selector".into(),
            "FieldValueInvalid",
            "Invalid value: empty selector is invalid for this workload".into(),
        );
    } else if !selector_matches(selector, labels) {
        cause(
            "spec.template.metadata.labels".into(),
            "FieldValueInvalid",
            format!("Invalid value: {labels}: `selector` does not match template `labels`"),
        );
    }
    for list in ["initContainers", "containers"] {
        let containers = spec["template"]["spec"][list].as_array();
        for (i, container) in containers.into_iter().flatten().enumerate() {
            for field in ["name", "image"] {
                if container[field].as_str().is_none_or(str::is_empty) {
                    cause(
                        format!("spec.template.spec.{list}[{i}].{field}"),
                        "FieldValueRequired",
                        "Required value".into(),
                    );
                }
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let message = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect::<Vec<_>>()
        .join("; ");
    Err(ClusterError::Invalid {
        object: format!(
            "{}/{}/{}",
            object.kind().unwrap_or("?"),
            object.namespace().unwrap_or(""),
            object.name().unwrap_or("?")
        ),
        message,
        causes,
    })
}

/// Whether a label selector has neither labels nor expressions.
fn selects_nothing(selector: &Value) -> bool {
    let empty = |field: &str| match &selector[field] {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(list) => list.is_empty(),
        _ => false,
    };
    empty("matchLabels") && empty("matchExpressions")
}

/// Whether the label selector `selector` (matchLabels and matchExpressions) selects the
/// labels `labels`.
fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let by_label = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| value.as_str().is_some_and(|v| label(key) == Some(v)));
    let by_expression = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|expression| {
            let key = expression["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match expression["operator"].as_str() {
                Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    by_label && by_expression
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns"}, "spec": spec})
    }

    fn template(labels: Value) -> Value {
        json!({"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "x"}]}})
    }

    #[test]
    fn values_of_the_wrong_type_are_named() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
            "data": {"k": 1, "ok": "1"}, "binaryData": {"b": "not base64!"}});
        let err = check_shape(&cm).unwrap_err();
        assert_eq!(
            err,
            "data.k: expected a string, got a number; binaryData.b: expected base64 text, got a string"
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"},
            "data": {"k": "aGk="}, "stringData": {"s": true}});
        assert_eq!(
            check_shape(&secret).unwrap_err(),
            "stringData.s: expected a string, got a boolean"
        );
        let replicas = deployment(json!({"replicas": "two"}));
        assert!(
            check_shape(&replicas)
                .unwrap_err()
                .contains("spec.replicas")
        );
        // Another group's ConfigMap is not the built-in one.
        let custom = json!({"apiVersion": "example.com/v1", "kind": "ConfigMap", "data": {"k": 1}});
        assert!(check_shape(&custom).is_ok());
    }

    #[test]
    fn a_workload_needs_a_selector_matching_its_template_and_named_containers() {
        let good = json!({"selector": {"matchLabels": {"app": "a"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]},
            "template": template(json!({"app": "a", "tier": "web"}))});
        assert!(check_workload(&deployment(good.clone())).is_ok());

        let fields = |spec: Value| match check_workload(&deployment(spec)) {
            Err(ClusterError::Invalid { causes, .. }) => {
                causes.into_iter().map(|c| c.field).collect::<Vec<_>>()
            }
            other => panic!("not refused: {other:?}"),
        };
        let mut none = good.clone();
        none.as_object_mut().unwrap().remove("selector");
        assert_eq!(fields(none), ["spec.selector"]);
        let mut empty = good.clone();
        empty["selector"] = json!({});
        assert_eq!(fields(empty), ["spec.selector"]);
        let mut other = good.clone();
        other["template"] = template(json!({"app": "b"}));
        assert_eq!(fields(other), ["spec.template.metadata.labels"]);
        let mut excluded = good.clone();
        excluded["template"] = template(json!({"app": "a", "tier": "db"}));
        assert_eq!(fields(excluded), ["spec.template.metadata.labels"]);
        let mut nameless = good;
        nameless["template"]["spec"]["containers"] = json!([{"image": "x"}, {"name": "b"}]);
        assert_eq!(
            fields(nameless),
            [
                "spec.template.spec.containers[0].name",
                "spec.template.spec.containers[1].image"
            ]
        );
    }
}
