//! Temporary patches: operator-side overrides of rendered objects, kept in patch objects
//! the CR lists in its `windlass.dev/temporary-patches` annotation.
//!
//! A patch object's `spec.patch` is a tree walked by the internal name of a rendered
//! object (`<component>.<resource>`); where the walk consumes every part and ends on a
//! non-empty value, that value is applied to the object, as a strategic merge patch
//! (`spec.patchType: patchStrategicMerge`) or a JSON patch (`patchJson6902`). Patches
//! apply oldest first.
//!
//! Tested by `a_strategic_patch_replaces_one_container_by_name`.

mod strategic;

use serde_json::Value;

pub use strategic::strategic_merge;

use crate::error::{Error, Result};
use crate::object::ManifestExt;

/// The `spec.patchType` of a strategic merge patch.
pub const STRATEGIC_MERGE: &str = "patchStrategicMerge";
/// The `spec.patchType` of an RFC 6902 JSON patch.
pub const JSON_6902: &str = "patchJson6902";
/// The kind of patch objects when the annotation does not name one.
pub const DEFAULT_PATCH_KIND: &str = "TemporaryPatch";

/// Apply, in order, every patch whose tree matches `internal_name`.
pub fn apply_patches(internal_name: &str, manifest: Value, patches: &[Value]) -> Result<Value> {
    let mut current = manifest;
    for patch in patches {
        let spec = &patch["spec"];
        let mut node = &spec["patch"];
        for part in internal_name.split('.') {
            node = &node[part];
        }
        let empty = match node {
            Value::Null => true,
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        };
        if empty {
            continue;
        }
        let name = patch.name().unwrap_or("<unnamed>");
        current = match spec["patchType"].as_str() {
            Some(STRATEGIC_MERGE) => strategic_merge(&current, node).map_err(|e| {
                Error::config(format!(
                    "temporary patch \"{name}\" on {internal_name}: {e}"
                ))
            })?,
            Some(JSON_6902) => {
                let ops: json_patch::Patch = serde_json::from_value(node.clone()).map_err(|e| {
                    Error::config(format!(
                        "temporary patch \"{name}\" is not a JSON patch: {e}"
                    ))
                })?;
                let mut patched = current;
                crate::values::apply_json_patch(&mut patched, &ops).map_err(|e| {
                    Error::config(format!(
                        "temporary patch \"{name}\" on {internal_name}: {e}"
                    ))
                })?;
                patched
            }
            other => {
                return Err(Error::config(format!(
                    "temporary patch \"{name}\" has patchType {}: use {STRATEGIC_MERGE} or {JSON_6902}",
                    other.map_or("<none>".to_string(), |t| format!("\"{t}\""))
                )));
            }
        };
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(kind: &str, tree: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"patchType": kind, "patch": tree}})
    }

    #[test]
    fn a_patch_matches_only_its_internal_name() {
        let obj = json!({"kind": "ConfigMap", "data": {"a": "1"}});
        let p = patch(
            STRATEGIC_MERGE,
            json!({"web": {"config": {"data": {"a": "2"}}}}),
        );
        assert_eq!(
            apply_patches("web.config", obj.clone(), std::slice::from_ref(&p)).unwrap()["data"]["a"],
            "2"
        );
        assert_eq!(
            apply_patches("web.other", obj.clone(), std::slice::from_ref(&p)).unwrap(),
            obj
        );
        assert_eq!(apply_patches("db.config", obj.clone(), &[p]).unwrap(), obj);
    }

    #[test]
    fn json_patches_apply_and_patches_apply_in_order() {
        let obj = json!({"kind": "ConfigMap", "data": {"a": "1"}});
        let first = patch(
            JSON_6902,
            json!({"web": {"config": [{"op": "replace", "path": "/data/a", "value": "2"}]}}),
        );
        let second = patch(
            STRATEGIC_MERGE,
            json!({"web": {"config": {"data": {"a": "3"}}}}),
        );
        let out =
            apply_patches("web.config", obj.clone(), &[first.clone(), second.clone()]).unwrap();
        assert_eq!(out["data"]["a"], "3");
        let out = apply_patches("web.config", obj, &[second, first]).unwrap();
        assert_eq!(out["data"]["a"], "2");
    }

    #[test]
    fn unknown_patch_types_and_failing_json_patches_are_config_errors() {
        let obj = json!({"kind": "ConfigMap"});
        let err = apply_patches(
            "w.c",
            obj.clone(),
            &[patch("merge", json!({"w": {"c": {"a": 1}}}))],
        )
        .unwrap_err();
        assert!(err.to_string().contains("patchType \"merge\""), "{err}");
        let err = apply_patches(
            "w.c",
            obj,
            &[patch(
                JSON_6902,
                json!({"w": {"c": [{"op": "remove", "path": "/nope"}]}}),
            )],
        )
        .unwrap_err();
        assert!(matches!(err, Error::Config(_)));
    }

    #[test]
    fn a_strategic_patch_replaces_one_container_by_name() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "web", "image": "web:1"}, {"name": "proxy", "image": "proxy:1"}]}}}});
        let patch = json!({"spec": {"patchType": "patchStrategicMerge", "patch": {"web": {"deployment": {
            "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "proxy:2"}]}}}}}}}});
        let patched = apply_patches("web.deployment", deployment, &[patch]).unwrap();
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"][1]["image"],
            "proxy:2"
        );
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"][0]["image"],
            "web:1"
        );
    }

    mod properties {
        use super::*;
        use crate::strategies::{any_json, any_json_object, any_text};
        use proptest::prelude::*;

        /// An internal name: usually `<component>.<resource>` of a small pool (so that
        /// patch trees name it), sometimes any text.
        fn internal_name() -> impl Strategy<Value = String> {
            prop_oneof![
                3 => (
                    prop::sample::select(vec!["web", "db", "a"]),
                    prop::sample::select(vec!["config", "deployment", "b"]),
                )
                    .prop_map(|(c, r)| format!("{c}.{r}")),
                1 => any_text(12),
            ]
        }

        /// A patch object: a type (mostly a real one) and a tree that often names the
        /// object, with a strategic patch, JSON patch operations, or anything at its end.
        fn patch_object() -> impl Strategy<Value = Value> {
            let kind = prop_oneof![
                2 => Just(json!(STRATEGIC_MERGE)),
                2 => Just(json!(JSON_6902)),
                1 => any_json(1, 3),
            ];
            let op = (
                prop::sample::select(vec![
                    "add", "remove", "replace", "move", "copy", "test", "bad",
                ]),
                prop::sample::select(vec![
                    "", "/", "/data", "/data/a", "/data/-", "/kind", "/x/0", "~", "/a~1b",
                ]),
                prop::option::of(any_json(2, 3)),
                prop::option::of(prop::sample::select(vec!["/data", "/data/a", "/nope"])),
            )
                .prop_map(|(op, path, value, from)| {
                    let mut o = json!({"op": op, "path": path});
                    if let Some(value) = value {
                        o["value"] = value;
                    }
                    if let Some(from) = from {
                        o["from"] = json!(from);
                    }
                    o
                });
            let leaf = prop_oneof![
                any_json(3, 4),
                prop::collection::vec(op, 0..4).prop_map(Value::Array),
                any_json_object(3, 4),
            ];
            (kind, internal_name(), leaf, any_json(2, 3)).prop_map(|(kind, name, leaf, other)| {
                let mut tree = json!({});
                for part in name.split('.').rev() {
                    tree = json!({ part: tree });
                }
                // Put the leaf where the walk by `name` ends.
                let mut node = &mut tree;
                for part in name.split('.') {
                    node = &mut node[part];
                }
                *node = leaf;
                json!({"metadata": {"name": "p"}, "spec": {"patchType": kind, "patch": tree, "other": other}})
            })
        }

        fn manifest() -> impl Strategy<Value = Value> {
            (
                prop::sample::select(vec!["ConfigMap", "Deployment", "Service", ""]),
                any_json_object(3, 4),
            )
                .prop_map(|(kind, mut body)| {
                    body["kind"] = json!(kind);
                    body
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(5_000))]

            /// Any patch objects on any manifest: the patched manifest or a config error
            /// naming the patch, never a panic or another kind of error.
            #[test]
            fn any_patches_give_a_manifest_or_a_config_error(
                name in internal_name(),
                manifest in manifest(),
                patches in prop::collection::vec(prop_oneof![patch_object(), any_json(3, 4)], 0..4),
            ) {
                match apply_patches(&name, manifest, &patches) {
                    Ok(_) => {}
                    Err(Error::Config(message)) => prop_assert!(message.contains("patch"), "{}", message),
                    Err(other) => return Err(TestCaseError::fail(format!("not a config error: {other:?}"))),
                }
            }

            /// A JSON patch that `json-patch` computes from one manifest to another, given
            /// as a temporary patch, turns the one into the other.
            #[test]
            fn a_json_patch_from_a_diff_applies_back(
                from in any_json_object(4, 5),
                to in any_json_object(4, 5),
            ) {
                let ops = serde_json::to_value(json_patch::diff(&from, &to)).unwrap();
                let patch = json!({"metadata": {"name": "diff"}, "spec": {
                    "patchType": JSON_6902, "patch": {"web": {"config": ops}}}});
                prop_assert_eq!(apply_patches("web.config", from, &[patch]), Ok(to));
            }

            /// A patch whose tree does not name the object leaves it as it is.
            #[test]
            fn a_patch_for_another_object_changes_nothing(
                manifest in manifest(),
                patch in patch_object(),
            ) {
                let tree = &patch["spec"]["patch"];
                prop_assume!(tree.get("other").is_none());
                prop_assert_eq!(apply_patches("other.object", manifest.clone(), &[patch]), Ok(manifest));
            }
        }
    }
}
