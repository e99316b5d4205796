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
//! delete | replace | merge` per item (a missing list is an empty one, so deleting from it
//! is an error too); a list without one is replaced. A value set as a
//! whole (new, or replacing one of another type) loses its `null` map entries, as
//! Kubernetes' own implementation drops them (`null` means "delete", and there is nothing
//! to delete). Not supported: map-level `$patch`, list-level `$patch: replace`,
//! `$retainKeys` and `$setElementOrder` (their keys are ignored).

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
            // A missing map or list is an empty one: the patch's directives still apply (a
            // `$patch: delete` item is an error, as for a list that lacks the item).
            let existing = current.remove(key).unwrap_or_else(|| match value {
                Value::Object(_) => Value::Object(Map::new()),
                Value::Array(_) => Value::Array(Vec::new()),
                _ => Value::Null,
            });
            let merged = merge(&child, existing, value)?;
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

/// Remove `$patch` and other `$` directives, and `null` map entries (deletions of what is
/// not there), from a value that is set as a whole.
fn strip_directives(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
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

    #[test]
    fn a_null_in_a_new_value_is_dropped_so_a_patch_applies_the_same_twice() {
        // Found by `applying_a_patch_twice_is_applying_it_once`: the new container kept its
        // `image: null` the first time, and lost it when the patch merged into it again.
        let current = deployment(json!([{"name": "a"}]));
        let patch =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": null}]}}}});
        let once = strategic_merge(&current, &patch).unwrap();
        assert_eq!(
            once["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a"}, {"name": "b"}])
        );
        assert_eq!(strategic_merge(&once, &patch).unwrap(), once);
        let new_map = strategic_merge(
            &json!({"kind": "ConfigMap"}),
            &json!({"data": {"x": null, "y": "1"}}),
        )
        .unwrap();
        assert_eq!(new_map, json!({"kind": "ConfigMap", "data": {"y": "1"}}));
    }

    #[test]
    fn deleting_from_a_missing_list_is_an_error_not_an_addition() {
        // Found by `merged_lists_keep_their_order_and_append_new_items`: the item to delete
        // was added, its `$patch` stripped, when the pod had no `containers` at all.
        let pod = json!({"kind": "Pod", "spec": {}});
        let patch = json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}});
        let err = strategic_merge(&pod, &patch).unwrap_err();
        assert!(err.contains("cannot delete item name=\"a\""), "{err}");
        let patch = json!({"spec": {"containers": [{"name": "a", "$patch": "explode"}]}});
        assert!(strategic_merge(&pod, &patch).is_err());
        let patch =
            json!({"spec": {"containers": [{"name": "a", "$patch": "replace", "image": "x"}]}});
        assert_eq!(
            strategic_merge(&pod, &patch).unwrap()["spec"]["containers"],
            json!([{"name": "a", "image": "x"}])
        );
    }

    mod properties {
        use super::*;
        use crate::strategies::{any_json, any_json_object, any_text};
        use proptest::prelude::*;

        /// A name from a small pool, so that patch items meet current items.
        fn name() -> impl Strategy<Value = Value> {
            prop::sample::select(vec!["a", "b", "c", "d", "e"]).prop_map(|n| json!(n))
        }

        fn port() -> impl Strategy<Value = Value> {
            prop::sample::select(vec![80, 443, 8080, 9090]).prop_map(|p| json!(p))
        }

        /// A field value of a list item: a scalar, `null` (delete) only in patches.
        fn field(nulls: bool) -> BoxedStrategy<Value> {
            if nulls {
                prop_oneof![3 => any_json(1, 3), 1 => Just(Value::Null)].boxed()
            } else {
                any_json(1, 3)
                    .prop_filter("no null", |v| !v.is_null())
                    .boxed()
            }
        }

        /// A list of maps with unique merge keys (`key` drawn by `id`), in any order, each
        /// with a few more fields; with `directives`, items may carry `$patch`.
        fn keyed_list(
            key: &'static str,
            id: impl Strategy<Value = Value> + 'static,
            body: impl Strategy<Value = Value> + 'static,
            directives: bool,
        ) -> BoxedStrategy<Value> {
            let directive = if directives {
                prop::option::of(prop::sample::select(vec![
                    "merge", "replace", "delete", "explode",
                ]))
                .boxed()
            } else {
                Just(None).boxed()
            };
            prop::collection::vec((id, body, directive), 0..4)
                .prop_map(move |items| {
                    let mut seen = Vec::new();
                    let mut out = Vec::new();
                    for (id, mut body, directive) in items {
                        if seen.contains(&id) {
                            continue;
                        }
                        seen.push(id.clone());
                        if let Value::Object(map) = &mut body {
                            map.insert(key.to_string(), id);
                            if let Some(directive) = directive {
                                map.insert("$patch".into(), json!(directive));
                            }
                        }
                        out.push(body);
                    }
                    out
                })
                .prop_shuffle()
                .prop_map(Value::Array)
                .boxed()
        }

        /// Keep only the entries that are not `None` (so that a field may be absent).
        fn object(entries: Vec<(&str, Option<Value>)>) -> Value {
            Value::Object(
                entries
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.to_string(), v?)))
                    .collect(),
            )
        }

        /// A container; in a patch (`nulls`) fields may be `null`, and with `directives`
        /// items may carry `$patch` and the container a `$deleteFromPrimitiveList/args`.
        fn container(nulls: bool, directives: bool) -> BoxedStrategy<Value> {
            let env_body =
                prop::option::of(field(nulls)).prop_map(|value| object(vec![("value", value)]));
            let port_body = prop::option::of(prop::sample::select(vec!["TCP", "UDP"]))
                .prop_map(|p| object(vec![("protocol", p.map(|p| json!(p)))]));
            let mount_body = prop::option::of(name()).prop_map(|n| object(vec![("name", n)]));
            let paths = prop::sample::select(vec!["/a", "/b", "/c"]).prop_map(|p| json!(p));
            (
                prop::option::of(field(nulls)),
                prop::option::of(keyed_list("name", name(), env_body, directives)),
                prop::option::of(keyed_list("containerPort", port(), port_body, directives)),
                prop::option::of(keyed_list("mountPath", paths, mount_body, directives)),
                prop::option::of(prop::collection::vec(name(), 0..4).prop_map(Value::Array)),
                if directives {
                    prop::option::of(prop::collection::vec(name(), 0..3).prop_map(Value::Array))
                        .boxed()
                } else {
                    Just(None).boxed()
                },
            )
                .prop_map(|(image, env, ports, mounts, args, delete_args)| {
                    object(vec![
                        ("image", image),
                        ("env", env),
                        ("ports", ports),
                        ("volumeMounts", mounts),
                        ("args", args),
                        ("$deleteFromPrimitiveList/args", delete_args),
                    ])
                })
                .boxed()
        }

        fn pod_spec(nulls: bool, directives: bool) -> BoxedStrategy<Value> {
            let simple =
                move || prop::option::of(field(nulls)).prop_map(|v| object(vec![("x", v)]));
            (
                prop::option::of(keyed_list(
                    "name",
                    name(),
                    container(nulls, directives),
                    directives,
                )),
                prop::option::of(keyed_list(
                    "name",
                    name(),
                    container(nulls, directives),
                    directives,
                )),
                prop::option::of(keyed_list("name", name(), simple(), directives)),
                prop::option::of(keyed_list("name", name(), simple(), directives)),
                prop::option::of(field(nulls)),
            )
                .prop_map(|(containers, init, volumes, secrets, other)| {
                    object(vec![
                        ("containers", containers),
                        ("initContainers", init),
                        ("volumes", volumes),
                        ("imagePullSecrets", secrets),
                        ("hostname", other),
                    ])
                })
                .boxed()
        }

        /// Where each kind keeps its pod spec.
        fn wrap(kind: &str, spec: Value) -> Value {
            let inner = match kind {
                "Pod" => spec,
                "CronJob" => json!({"jobTemplate": {"spec": {"template": {"spec": spec}}}}),
                _ => json!({"template": {"spec": spec}}),
            };
            json!({"kind": kind, "spec": inner})
        }

        fn kind() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "Pod",
                "Deployment",
                "ReplicaSet",
                "DaemonSet",
                "StatefulSet",
                "Job",
                "CronJob",
            ])
        }

        /// A workload and a patch of it, shaped like the real thing so that the merge keys,
        /// directives and nested lists are exercised, not just the map merge.
        fn workload_and_patch(directives: bool) -> impl Strategy<Value = (Value, Value)> {
            (kind(), pod_spec(false, false), pod_spec(true, directives)).prop_map(
                |(kind, current, patch)| {
                    let mut patch = wrap(kind, patch);
                    if let Some(map) = patch.as_object_mut() {
                        map.remove("kind");
                    }
                    (wrap(kind, current), patch)
                },
            )
        }

        fn has_directive(value: &Value) -> bool {
            match value {
                Value::Object(map) => map
                    .iter()
                    .any(|(k, v)| k.starts_with('$') || has_directive(v)),
                Value::Array(items) => items.iter().any(has_directive),
                _ => false,
            }
        }

        /// Any JSON whose lists hold no maps and no nulls: there a strategic merge without
        /// merge keys and an RFC 7386 merge patch must agree.
        fn mergeable(depth: u32) -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i32>().prop_map(Value::from),
                "[a-z]{0,3}".prop_map(Value::String),
                prop::collection::vec("[a-z]{0,3}".prop_map(Value::String), 0..3)
                    .prop_map(Value::Array),
            ];
            let key = prop::sample::select(vec!["a", "b", "c", "data", "spec"]);
            leaf.prop_recursive(depth, 48, 4, move |inner| {
                prop::collection::btree_map(key.clone(), inner, 0..4).prop_map(|m| {
                    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                })
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(5_000))]

            /// Arbitrary input, shaped or not: a merged object or an error, never a panic;
            /// and no directive of the patch ends up in the object.
            #[test]
            fn any_object_and_patch_get_an_answer(
                (current, patch) in prop_oneof![
                    workload_and_patch(true),
                    (any_json_object(4, 5), any_json(4, 5)),
                    (kind(), any_json(4, 5), any_json_object(4, 5))
                        .prop_map(|(kind, spec, patch)| (wrap(kind, spec), patch)),
                    (any_text(16), any_json(4, 5))
                        .prop_map(|(kind, patch)| (json!({"kind": kind}), patch)),
                ],
            ) {
                if let Ok(merged) = strategic_merge(&current, &patch)
                    && !has_directive(&current)
                {
                    prop_assert!(!has_directive(&merged), "{}", merged);
                }
            }

            /// An empty patch changes nothing.
            #[test]
            fn an_empty_patch_changes_nothing(current in any_json_object(4, 5)) {
                prop_assert_eq!(strategic_merge(&current, &json!({})), Ok(current));
            }

            /// Where no list has a merge key, a strategic merge is a JSON merge patch
            /// (RFC 7386): `null` deletes, maps merge, everything else is replaced.
            #[test]
            fn without_merge_keys_it_is_a_json_merge_patch(
                current in mergeable(4),
                patch in mergeable(4),
            ) {
                let mut current = current;
                if let Value::Object(map) = &mut current {
                    map.insert("kind".into(), json!("ConfigMap"));
                }
                let mut expected = current.clone();
                json_patch::merge(&mut expected, &patch);
                prop_assert_eq!(strategic_merge(&current, &patch), Ok(expected));
            }

            /// A patch without directives is idempotent: applying it to its own result
            /// changes nothing (a temporary patch is re-applied at every reconcile).
            #[test]
            fn applying_a_patch_twice_is_applying_it_once(
                (current, patch) in workload_and_patch(false),
            ) {
                prop_assume!(!has_directive(&patch));
                let once = strategic_merge(&current, &patch);
                prop_assert!(once.is_ok(), "{:?}", once);
                let once = once.unwrap();
                prop_assert_eq!(strategic_merge(&once, &patch), Ok(once.clone()));
            }

            /// Lists with a merge key keep their items' order; new items come after them,
            /// in the patch's order; an item deleted is gone.
            #[test]
            fn merged_lists_keep_their_order_and_append_new_items(
                (current, patch) in workload_and_patch(true),
            ) {
                let Ok(merged) = strategic_merge(&current, &patch) else {
                    return Ok(());
                };
                let spec = |v: &Value| -> Value {
                    let spec = &v["spec"];
                    if !spec["jobTemplate"].is_null() {
                        spec["jobTemplate"]["spec"]["template"]["spec"].clone()
                    } else if !spec["template"].is_null() {
                        spec["template"]["spec"].clone()
                    } else {
                        spec.clone()
                    }
                };
                let names = |list: &Value| -> Vec<Value> {
                    list.as_array().into_iter().flatten().map(|c| c["name"].clone()).collect()
                };
                let before = names(&spec(&current)["containers"]);
                let patched = spec(&patch)["containers"].clone();
                let deleted: Vec<Value> = patched.as_array().into_iter().flatten()
                    .filter(|c| c["$patch"] == "delete")
                    .map(|c| c["name"].clone())
                    .collect();
                let mut expected: Vec<Value> = before.iter().filter(|n| !deleted.contains(n)).cloned().collect();
                for name in names(&patched) {
                    if !before.contains(&name) && !deleted.contains(&name) {
                        expected.push(name);
                    }
                }
                prop_assert_eq!(names(&spec(&merged)["containers"]), expected);
            }
        }
    }
}
