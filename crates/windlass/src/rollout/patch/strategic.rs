//! Strategic merge patch for the fields whose merge keys are listed here: the subset of
//! kubectl's and kustomize's semantics that temporary patches use.
//!
//! Hand-written: no maintained Rust crate implements strategic merge (it needs the merge
//! keys of Kubernetes' Go types); the table below covers the lists operators patch in
//! practice: containers and their env, ports, volume mounts and devices; volumes; image
//! pull secrets; service ports; service account secrets; webhooks.
//!
//! Rules: in maps, `null` deletes a key, `$deleteFromPrimitiveList/<list>` removes values
//! from a list of scalars, and other keys merge recursively. A list with a merge key is
//! merged item by item (existing order kept, new items appended), honouring `$patch:
//! delete | replace | merge` per item; a list without one is replaced. Not supported:
//! map-level `$patch`, list-level `$patch: replace`, `$retainKeys` and
//! `$setElementOrder` (their keys are ignored), and `null` inside a newly added value is
//! kept rather than dropped.

use serde_json::{Map, Value};

/// Pod-spec paths under which container lists have merge keys. The kind is spelled as in
/// objects, `CronJob` (a `Cronjob` entry would never match a real object).
const POD_SPECS: [&str; 7] = [
    "Pod.spec",
    "Deployment.spec.template.spec",
    "ReplicaSet.spec.template.spec",
    "DaemonSet.spec.template.spec",
    "StatefulSet.spec.template.spec",
    "Job.spec.template.spec",
    "CronJob.spec.jobTemplate.spec.template.spec",
];

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// The merge key of the list at `position` (`<Kind>.<path>`), if it has one.
fn merge_key(position: &str) -> Option<&'static str> {
    match position {
        "Service.spec.ports" => return Some("port"),
        "ServiceAccount.secrets" => return Some("name"),
        "ValidatingWebhookConfiguration.webhooks" | "MutatingWebhookConfiguration.webhooks" => {
            return Some("name");
        }
        _ => {}
    }
    let rest = POD_SPECS
        .iter()
        .find_map(|prefix| position.strip_prefix(prefix)?.strip_prefix('.'))?;
    match rest {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "imagePullSecrets" => Some("name"),
        _ => {
            let (list, field) = rest.split_once('.')?;
            if !CONTAINER_LISTS.contains(&list) {
                return None;
            }
            match field {
                "volumeMounts" => Some("mountPath"),
                "volumeDevices" => Some("devicePath"),
                "env" => Some("name"),
                "ports" => Some("containerPort"),
                _ => None,
            }
        }
    }
}

/// Apply a strategic merge `patch` to `current`; the kind of `current` selects merge keys.
pub fn strategic_merge(current: &Value, patch: &Value) -> Result<Value, String> {
    let kind = current["kind"].as_str().unwrap_or_default().to_string();
    merge(&kind, current.clone(), patch)
}

fn merge(position: &str, current: Value, patch: &Value) -> Result<Value, String> {
    match (current, patch) {
        (Value::Object(current), Value::Object(patch)) => merge_maps(position, current, patch),
        (Value::Array(current), Value::Array(patch)) => merge_lists(position, current, patch),
        (_, patch) => Ok(strip_directives(patch.clone())),
    }
}

fn merge_maps(
    position: &str,
    mut current: Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Value, String> {
    for (key, value) in patch {
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let target = current
                .get_mut(list)
                .ok_or_else(|| {
                    format!("{position}.{list}: $deleteFromPrimitiveList on a missing list")
                })?
                .as_array_mut()
                .ok_or_else(|| {
                    format!("{position}.{list}: $deleteFromPrimitiveList on a non-list")
                })?;
            for item in value.as_array().into_iter().flatten() {
                let index = target.iter().position(|x| x == item).ok_or_else(|| {
                    format!("{position}.{list}: cannot delete {item}: not in the list")
                })?;
                target.remove(index);
            }
        } else if key.starts_with('$') {
            continue;
        } else if value.is_null() {
            current.remove(key);
        } else {
            let child = format!("{position}.{key}");
            let merged = match current.remove(key) {
                Some(existing) => merge(&child, existing, value)?,
                None => strip_directives(value.clone()),
            };
            current.insert(key.clone(), merged);
        }
    }
    Ok(Value::Object(current))
}

fn merge_lists(position: &str, mut current: Vec<Value>, patch: &[Value]) -> Result<Value, String> {
    let Some(key) = merge_key(position) else {
        return Ok(strip_directives(Value::Array(patch.to_vec())));
    };
    let key_of = |item: &Value, side: &str| -> Result<Value, String> {
        item.get(key)
            .cloned()
            .ok_or_else(|| format!("{position}: every {side} item must be a map with \"{key}\""))
    };
    for item in &current {
        key_of(item, "current")?;
    }
    for item in patch {
        let id = key_of(item, "patch")?;
        let directive = item
            .get("$patch")
            .and_then(Value::as_str)
            .unwrap_or("merge");
        let existing = current.iter().position(|c| c.get(key) == Some(&id));
        match (directive, existing) {
            ("delete", Some(i)) => {
                current.remove(i);
            }
            ("delete", None) => {
                return Err(format!(
                    "{position}: cannot delete item {key}={id}: not in the list"
                ));
            }
            ("replace", Some(i)) => current[i] = strip_directives(item.clone()),
            ("merge", Some(i)) => {
                let existing = std::mem::take(&mut current[i]);
                current[i] = merge(position, existing, item)?;
            }
            ("replace" | "merge", None) => current.push(strip_directives(item.clone())),
            (other, _) => return Err(format!("{position}: unknown $patch directive \"{other}\"")),
        }
    }
    Ok(Value::Array(current))
}

/// Remove `$patch` and other `$` directives from a value that is set as a whole.
fn strip_directives(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k, strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_directives).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(containers: Value) -> Value {
        json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": containers}}}})
    }

    #[test]
    fn containers_merge_by_name_keeping_order() {
        let current =
            deployment(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]));
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}}}});
        let out = strategic_merge(&current, &patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}])
        );
    }

    #[test]
    fn nested_env_merges_by_name_and_directives_work() {
        let current = deployment(
            json!([{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]),
        );
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "env": [
            {"name": "X", "$patch": "delete"}, {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}, "value": null}, {"name": "Z", "value": "3"}]}]}}}});
        let out = strategic_merge(&current, &patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "Y", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}, {"name": "Z", "value": "3"}])
        );
        let replace = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "$patch": "replace", "image": "only"}]}}}});
        let out = strategic_merge(&current, &replace).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "only"}])
        );
    }

    #[test]
    fn lists_without_a_merge_key_are_replaced() {
        let current = json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["x", "y"]}]}}}});
        let patch =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["z"]}]}}}});
        let out = strategic_merge(&current, &patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["z"])
        );
    }

    #[test]
    fn service_ports_merge_by_port_and_cronjob_is_recognised() {
        let svc = json!({"kind": "Service", "spec": {"ports": [{"port": 80, "name": "http"}]}});
        let out = strategic_merge(
            &svc,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "name": "http", "targetPort": 8080}, {"port": 443}])
        );
        let cron = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}}}}}});
        let out = strategic_merge(&cron, &json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "2"}]}}}}}})).unwrap();
        assert_eq!(
            out["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][1],
            json!({"name": "b"})
        );
    }

    #[test]
    fn delete_from_primitive_list_and_null_deletes() {
        let current = json!({"kind": "ConfigMap", "metadata": {"finalizers": ["a", "b"], "labels": {"x": "1"}}});
        let out = strategic_merge(&current, &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"x": null}}})).unwrap();
        assert_eq!(out["metadata"], json!({"finalizers": ["b"], "labels": {}}));
        assert!(
            strategic_merge(
                &current,
                &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["zz"]}})
            )
            .is_err()
        );
        assert!(
            strategic_merge(
                &current,
                &json!({"metadata": {"$deleteFromPrimitiveList/labels": ["x"]}})
            )
            .is_err()
        );
    }

    #[test]
    fn bad_items_and_directives_are_errors() {
        let current = deployment(json!([{"name": "a"}]));
        let no_key = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        assert!(strategic_merge(&current, &no_key).is_err());
        let bad = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "$patch": "explode"}]}}}});
        assert!(strategic_merge(&current, &bad).is_err());
        let missing = json!({"spec": {"template": {"spec": {"containers": [{"name": "zz", "$patch": "delete"}]}}}});
        assert!(strategic_merge(&current, &missing).is_err());
    }
}
