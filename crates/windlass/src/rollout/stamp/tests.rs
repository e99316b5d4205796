//! The laid-over view against the stamped copy: for any rendered manifest, CR and live
//! object, the applied hash, the written manifest and the drift answer are what stamping a
//! copy (as the rollout did before the view) gives.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;
use crate::object::ObjectRef;
use crate::rollout::drift::drift;
use crate::session::settled::Settled;
use crate::strategies::{any_json, key, scalar};

const MANAGER: &str = "windlass";

/// The stamped manifest as the rollout made it before the laid-over view: a copy, its owner
/// reference, labels and hash stamped in place.
fn stamped_copy(
    rendered: &Value,
    cr: &Value,
    component: &str,
    itself: bool,
    shard: Option<u32>,
) -> Value {
    let mut manifest = rendered.clone();
    add_owner_reference(&mut manifest, cr);
    if !itself {
        stamp_labels(&mut manifest, cr, component, shard);
    }
    stamp(&mut manifest);
    manifest
}

/// A field set owning every field of `value`: lists of items with a `uid` keyed by it
/// (as `ownerReferences` are), other lists atomic. With `drop`, the `drop`-th field (in
/// walking order, modulo their number) is left out, as when another writer took it.
fn fields_of(value: &Value, drop: Option<usize>) -> Value {
    fn walk(value: &Value, drop: Option<usize>, seen: &mut usize) -> Value {
        let mut fields = Map::new();
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    *seen += 1;
                    let dropped = drop == Some(*seen);
                    let child_fields = walk(child, drop, seen);
                    if !dropped {
                        fields.insert(format!("f:{key}"), child_fields);
                    }
                }
            }
            Value::Array(items) if items.iter().all(|i| i["uid"].is_string()) => {
                for item in items {
                    *seen += 1;
                    let dropped = drop == Some(*seen);
                    let key = format!("k:{}", json!({"uid": item["uid"]}));
                    let mut child = walk(item, drop, seen);
                    if let Some(map) = child.as_object_mut() {
                        map.insert(".".into(), json!({}));
                    }
                    if !dropped {
                        fields.insert(key, child);
                    }
                }
            }
            _ => {}
        }
        Value::Object(fields)
    }
    let mut count = 0;
    walk(value, None, &mut count);
    let drop = drop.map(|d| d % count.max(1) + 1);
    walk(value, drop, &mut 0)
}

/// What a cluster would return for `applied`: its field set as windlass's (or none), its
/// applied hash perhaps changed since, perhaps being deleted.
fn live_of(applied: &Value, shape: (Option<Option<usize>>, bool, bool)) -> Value {
    let (fields, rehashed, terminating) = shape;
    let mut live = applied.clone();
    if let Some(metadata) = live.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("uid".into(), json!("live-uid"));
        if let Some(drop) = fields {
            metadata.insert(
                "managedFields".into(),
                json!([{"manager": MANAGER, "operation": "Apply", "fieldsV1": fields_of(applied, drop)}]),
            );
        }
        if terminating {
            metadata.insert("deletionTimestamp".into(), json!("2026-01-01T00:00:00Z"));
        }
        if rehashed && let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
            annotations.insert(APPLIED_HASH.into(), json!("other"));
        }
    }
    live
}

/// A map of labels or annotations: windlass's keys and others, any values.
fn string_map(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => scalar(),
        4 => prop::collection::vec(
            (prop_oneof![prop::sample::select(keys).prop_map(str::to_string), key()], scalar()),
            0..5,
        )
        .prop_map(|entries| Value::Object(entries.into_iter().collect())),
    ]
}

/// `metadata.ownerReferences`: references (to the CR, by its uid, or others; controllers
/// or not), or something that is not a list.
fn owner_references() -> impl Strategy<Value = Value> {
    let reference = (
        prop::sample::select(vec!["cr-uid", "other-uid"]),
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(uid, controller)| {
            let mut reference = json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid});
            if let Some(controller) = controller {
                reference["controller"] = json!(controller);
            }
            reference
        });
    prop_oneof![
        1 => Just(Value::Null),
        1 => scalar(),
        4 => prop::collection::vec(prop_oneof![4 => reference, 1 => scalar()], 0..3)
            .prop_map(Value::Array),
    ]
}

/// A rendered manifest: of the CR's kind or not, in its namespace or not, with or without
/// labels, annotations and owner references of every shape, and any other content.
fn rendered() -> impl Strategy<Value = Value> {
    let metadata = (
        prop::sample::select(vec!["bench", "a"]),
        prop::option::of(prop::sample::select(vec!["ns", "other", ""])),
        prop::option::of(string_map(&[
            labels::NAME,
            labels::COMPONENT,
            annotations::OWNER_UID,
            annotations::COMPONENT,
        ])),
        prop::option::of(string_map(&[APPLIED_HASH, "team"])),
        prop::option::of(owner_references()),
        prop::option::of(any_json(2, 3)),
    )
        .prop_map(|(name, namespace, labels, annotations, owners, other)| {
            let mut metadata = json!({"name": name});
            for (key, value) in [
                ("namespace", namespace.map(|n| json!(n))),
                ("labels", labels),
                ("annotations", annotations),
                ("ownerReferences", owners),
                ("finalizers", other),
            ] {
                if let Some(value) = value {
                    metadata[key] = value;
                }
            }
            metadata
        });
    (
        prop::sample::select(vec![("v1", "ConfigMap"), ("example.com/v1", "Widget")]),
        prop_oneof![8 => metadata, 1 => scalar()],
        prop::option::of(any_json(3, 3)),
    )
        .prop_map(|((api_version, kind), metadata, data)| {
            let mut manifest =
                json!({"apiVersion": api_version, "kind": kind, "metadata": metadata});
            if let Some(data) = data {
                manifest["data"] = data;
            }
            manifest
        })
}

/// The CR: namespaced or not, with or without a uid.
fn cr() -> impl Strategy<Value = Value> {
    (
        prop::option::of(Just("ns")),
        prop::option::of(Just("cr-uid")),
    )
        .prop_map(|(namespace, uid)| {
            let mut cr = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "bench"}});
            if let Some(namespace) = namespace {
                cr["metadata"]["namespace"] = json!(namespace);
            }
            if let Some(uid) = uid {
                cr["metadata"]["uid"] = json!(uid);
            }
            cr
        })
}

fn method() -> impl Strategy<Value = WriteMethod> {
    prop::sample::select(vec![
        WriteMethod::Apply,
        WriteMethod::Update,
        WriteMethod::Replace,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// The written manifest and the drift answer are the stamped copy's.
    #[test]
    fn the_view_answers_as_the_stamped_copy(
        rendered in rendered(),
        cr in cr(),
        component in prop_oneof![key(), Just("web/Ü x".to_string())],
        itself in any::<bool>(),
        shard in prop::option::of(0u32..20),
        live in prop::option::of((
            prop::option::of(prop::option::of(any::<usize>())),
            any::<bool>(),
            any::<bool>(),
        )),
        other_live in prop::option::of(any_json(3, 3)),
        method in method(),
        other_rendered in rendered(),
    ) {
        let copy = stamped_copy(&rendered, &cr, &component, itself, shard);
        let other_copy = stamped_copy(&other_rendered, &cr, &component, itself, shard);
        let crs = CrStamp::new(&cr, shard);
        let stamp = crs.component(&component);
        // Every live object: none, the copy as applied (taken in part or not), another one;
        // each at a version of its own, as a server gives them.
        let lives = [
            None,
            live.map(|shape| live_of(&copy, shape)),
            other_live.map(|other| live_of(&other, (Some(None), false, false))),
        ];
        let settled = Settled::default();
        let reference = ObjectRef::new("v1", "ConfigMap", Some("ns"), "object");
        let memo = Memo { settled: &settled, object: &reference };
        for (version, live) in lives.iter().enumerate() {
            let live = live.clone().map(|mut live| {
                if let Some(metadata) = live.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.insert("resourceVersion".into(), json!(version.to_string()));
                }
                live
            });
            let object = stamp.object(&rendered, itself);
            let expected = drift(&copy, live.as_ref(), method, MANAGER);
            prop_assert_eq!(object.drift(live.as_ref(), method, MANAGER, None), expected.clone());
            prop_assert_eq!(object.manifest(), &copy);
            // With the memo: the same answer the first time and again, when it may answer
            // alone; and another manifest over the same version is checked, not recalled.
            for _ in 0..2 {
                let object = stamp.object(&rendered, itself);
                prop_assert_eq!(object.drift(live.as_ref(), method, MANAGER, Some(memo)), expected.clone());
            }
            let other = stamp.object(&other_rendered, itself);
            prop_assert_eq!(
                other.drift(live.as_ref(), method, MANAGER, Some(memo)),
                drift(&other_copy, live.as_ref(), method, MANAGER)
            );
            // The same rendered object stamped otherwise (another shard, another
            // component) over the same memo is checked, not recalled.
            let other_shard = match shard {
                Some(shard) => (shard % 2 == 0).then_some(shard + 1),
                None => Some(0),
            };
            let other_component = format!("{component}-b");
            for (shard, component) in [(other_shard, component.as_str()), (shard, &other_component)] {
                let crs = CrStamp::new(&cr, shard);
                let stamp = crs.component(component);
                let restamped = stamp.object(&rendered, itself);
                prop_assert_eq!(
                    restamped.drift(live.as_ref(), method, MANAGER, Some(memo)),
                    drift(
                        &stamped_copy(&rendered, &cr, component, itself, shard),
                        live.as_ref(),
                        method,
                        MANAGER
                    )
                );
            }
        }
        // The manifest alone, without a drift check first.
        let object = stamp.object(&rendered, itself);
        prop_assert_eq!(object.manifest(), &copy);
    }
}

/// The view's label keys are in key order, as it merges them (checked by the
/// `debug_assert` in `ObjectStamp::view` on every object in a debug build; this names it).
#[test]
fn windlass_labels_and_metadata_keys_are_in_key_order() {
    let keys = [
        labels::COMPONENT,
        labels::INSTANCE,
        labels::MANAGED_BY,
        labels::NAME,
        annotations::COMPONENT,
        annotations::OWNER_UID,
        annotations::SHARD,
    ];
    assert!(keys.is_sorted());
    assert!(["annotations", "labels", "ownerReferences"].is_sorted());
    assert!(
        maps_are_sorted(),
        "serde_json's preserve_order is off in this build"
    );
}

/// A CR, a ConfigMap its component `c` renders, and that stamped as the rollout applies it.
fn a_configmap_of_a_cr() -> (Value, Value, Value) {
    let cr = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "bench", "namespace": "ns", "uid": "cr-uid"}});
    let rendered = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bench-c", "namespace": "ns"}, "data": {"a": "1"}});
    let copy = stamped_copy(&rendered, &cr, "c", false, None);
    (cr, rendered, copy)
}

/// The steady case, as the rollout meets it: the object as applied, every field still
/// windlass's, is in sync, and a label another writer took is named.
#[test]
fn an_applied_object_is_in_sync_until_a_label_is_taken() {
    let (cr, rendered, copy) = a_configmap_of_a_cr();
    let crs = CrStamp::new(&cr, None);
    let stamp = crs.component("c");
    let live = live_of(&copy, (Some(None), false, false));
    let object = stamp.object(&rendered, false);
    assert_eq!(
        object.drift(Some(&live), WriteMethod::Apply, MANAGER, None),
        Drift::InSync
    );
    let mut taken = live.clone();
    let fields = &mut taken["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"];
    fields
        .as_object_mut()
        .unwrap()
        .remove("f:windlass.dev/owner-uid");
    assert_eq!(
        object.drift(Some(&taken), WriteMethod::Apply, MANAGER, None),
        Drift::Taken("metadata.labels.windlass.dev/owner-uid".into())
    );
    assert_eq!(object.manifest(), &copy);
}

/// A reconcile that finds nothing to do asks the memo and computes no applied hash: the
/// object was found in sync with this manifest at this version before. A new version of
/// the object, or another manifest, is checked in full.
#[test]
fn a_remembered_object_is_in_sync_without_its_applied_hash() {
    let (cr, rendered, copy) = a_configmap_of_a_cr();
    let crs = CrStamp::new(&cr, None);
    let stamp = crs.component("c");
    let mut live = live_of(&copy, (Some(None), false, false));
    live["metadata"]["resourceVersion"] = json!("41");
    let settled = Settled::default();
    let reference = ObjectRef::new("v1", "ConfigMap", Some("ns"), "bench-c");
    let memo = Memo {
        settled: &settled,
        object: &reference,
    };
    let first = stamp.object(&rendered, false);
    let answer = first.drift(Some(&live), WriteMethod::Apply, MANAGER, Some(memo));
    assert_eq!(answer, Drift::InSync);
    assert!(
        first.hash.get().is_some(),
        "the first check compares the hash"
    );

    let again = stamp.object(&rendered, false);
    let answer = again.drift(Some(&live), WriteMethod::Apply, MANAGER, Some(memo));
    assert_eq!(answer, Drift::InSync);
    assert!(again.hash.get().is_none(), "recalled, not hashed");

    // The annotation stands in for any change: a server would have given a new version.
    let mut rehashed = live.clone();
    rehashed["metadata"]["annotations"][APPLIED_HASH] = json!("other");
    rehashed["metadata"]["resourceVersion"] = json!("42");
    let at_new_version = stamp.object(&rendered, false);
    let answer = at_new_version.drift(Some(&rehashed), WriteMethod::Apply, MANAGER, Some(memo));
    assert_eq!(answer, Drift::Changed);

    let changed = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bench-c", "namespace": "ns"}, "data": {"a": "2"}});
    let other = stamp.object(&changed, false);
    let answer = other.drift(Some(&live), WriteMethod::Apply, MANAGER, Some(memo));
    assert_eq!(
        answer,
        Drift::Changed,
        "another manifest at the remembered version"
    );

    let replaced = stamp.object(&rendered, false);
    let answer = replaced.drift(Some(&live), WriteMethod::Replace, MANAGER, Some(memo));
    assert_eq!(answer, Drift::InSync);
    assert!(replaced.hash.get().is_some(), "only apply is remembered");
}
