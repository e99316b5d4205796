//! Property tests of the scheduling-key parsers and merges: any input gets an answer, never
//! a panic; keys parse back from their names; merging keys into a pod spec is idempotent
//! and means "the template's own constraint, and one of the keys"; labelled configs are
//! picked as kube-rs's label selector matching picks them.

#![cfg(feature = "scheduling")]
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use proptest::prelude::*;
use serde_json::{Value, json};
use windlass::cluster::validate_label_key;
use windlass_x::scheduling::{
    FORCED_DOWNSCALE_LABEL, SchedulingError, SchedulingKey, SchedulingKeys,
    extract_labeled_configs, transpose_config, validate_node_labels,
};

/// Any Unicode text of fewer than `max` characters.
fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
}

/// A label key: mostly from a small pool (so that keys, labels and selectors meet), with
/// the catalogue's keys, the reserved one, invalid ones and any text.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec!["a", "b", "c", "zone", "x.io/d"]).prop_map(str::to_string),
        2 => prop::sample::select(SchedulingKey::ALL.to_vec()).prop_map(|k| k.as_str().to_string()),
        1 => Just(FORCED_DOWNSCALE_LABEL.to_string()),
        1 => prop::sample::select(vec!["", "-a", "a/", "/a", "a/b/c", "A.io/x", "a b"]).prop_map(str::to_string),
        1 => any_text(12),
    ]
}

fn value() -> BoxedStrategy<String> {
    prop::sample::select(vec!["", "1", "2", "yes"])
        .prop_map(str::to_string)
        .boxed()
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "c", "zone", "x.io/d"]).prop_map(str::to_string),
        value(),
        0..5,
    )
}

/// A requirement of a node selector term, over the small key pool.
fn requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    let key = prop::sample::select(vec!["a", "b", "c", "zone", "x.io/d"]).prop_map(str::to_string);
    let values = prop::collection::vec(value(), 1..3);
    prop_oneof![
        (key.clone(), values.clone()).prop_map(|(key, values)| NodeSelectorRequirement {
            key,
            operator: "In".into(),
            values: Some(values),
        }),
        (key.clone(), values).prop_map(|(key, values)| NodeSelectorRequirement {
            key,
            operator: "NotIn".into(),
            values: Some(values),
        }),
        key.clone().prop_map(|key| NodeSelectorRequirement {
            key,
            operator: "Exists".into(),
            values: None,
        }),
        key.prop_map(|key| NodeSelectorRequirement {
            key,
            operator: "DoesNotExist".into(),
            values: None,
        }),
    ]
}

fn term() -> impl Strategy<Value = NodeSelectorTerm> {
    prop::option::of(prop::collection::vec(requirement(), 0..3)).prop_map(|match_expressions| {
        NodeSelectorTerm {
            match_expressions,
            match_fields: None,
        }
    })
}

/// A pod spec with what a template may already have: tolerations, required terms, a node
/// selector.
fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        prop::option::of(prop::collection::vec(term(), 0..3)),
        prop::option::of(prop::collection::vec(
            (key(), prop::sample::select(vec!["NoSchedule", "NoExecute"])),
            0..3,
        )),
        prop::option::of(labels()),
    )
        .prop_map(|(terms, tolerations, node_selector)| {
            let mut spec = json!({"containers": [{"name": "c"}]});
            if let Some(terms) = terms {
                spec["affinity"] = json!({"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}});
            }
            if let Some(tolerations) = tolerations {
                spec["tolerations"] = tolerations
                    .into_iter()
                    .map(|(key, effect)| json!({"key": key, "operator": "Exists", "effect": effect}))
                    .collect();
            }
            if let Some(node_selector) = node_selector {
                spec["nodeSelector"] = json!(node_selector);
            }
            serde_json::from_value(spec).unwrap()
        })
}

fn valid_keys() -> impl Strategy<Value = SchedulingKeys> {
    prop::collection::btree_set(
        prop_oneof![
            prop::sample::select(vec!["a", "b", "c", "zone", "x.io/d"]).prop_map(str::to_string),
            prop::sample::select(SchedulingKey::ALL.to_vec()).prop_map(|k| k.as_str().to_string()),
        ],
        1..4,
    )
    .prop_map(|keys| keys.into_iter().collect::<Vec<_>>())
    .prop_shuffle()
    .prop_map(|keys| SchedulingKeys::new(keys).unwrap())
}

/// Whether a node with `labels` satisfies `requirement`, as Kubernetes decides it.
fn satisfies(requirement: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let actual = labels.get(&requirement.key);
    let values = requirement.values.as_deref().unwrap_or_default();
    match requirement.operator.as_str() {
        "In" => actual.is_some_and(|a| values.contains(a)),
        "NotIn" => actual.is_none_or(|a| !values.contains(a)),
        "Exists" => actual.is_some(),
        "DoesNotExist" => actual.is_none(),
        other => panic!("not generated: {other}"),
    }
}

/// Whether a term selects the node: an empty term selects none.
fn term_selects(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>) -> bool {
    let requirements = term.match_expressions.as_deref().unwrap_or_default();
    !requirements.is_empty() && requirements.iter().all(|r| satisfies(r, labels))
}

fn required_terms(spec: &PodSpec) -> Vec<NodeSelectorTerm> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// Any text is a catalogue key, by its label key or its yaook name, or an error naming
    /// the text; never a panic.
    #[test]
    fn any_text_is_a_catalogue_key_or_unknown(text in prop_oneof![
        any_text(40),
        prop::sample::select(SchedulingKey::ALL.to_vec()).prop_map(|k| k.as_str().to_string()),
        prop::sample::select(SchedulingKey::ALL.to_vec()).prop_map(|k| k.python_name().to_string()),
    ]) {
        match text.parse::<SchedulingKey>() {
            Ok(key) => prop_assert!(key.as_str() == text || key.python_name() == text),
            Err(e) => prop_assert_eq!(e.0, text),
        }
    }

    /// Keys are accepted exactly when there is at least one, and each is a valid label key,
    /// not the reserved one, and not given before; accepted keys keep their order.
    #[test]
    fn scheduling_keys_are_accepted_exactly_when_valid(keys in prop::collection::vec(key(), 0..5)) {
        let valid = !keys.is_empty()
            && keys.iter().enumerate().all(|(i, k)| {
                !k.is_empty()
                    && validate_label_key(k).is_ok()
                    && k != FORCED_DOWNSCALE_LABEL
                    && !keys[..i].contains(k)
            });
        match SchedulingKeys::new(&keys) {
            Ok(accepted) => {
                prop_assert!(valid, "{:?} accepted", keys);
                prop_assert_eq!(accepted.keys().collect::<Vec<_>>(), keys.iter().map(String::as_str).collect::<Vec<_>>());
            }
            Err(e) => prop_assert!(!valid, "{:?} refused: {}", keys, e),
        }
    }

    /// Node labels are accepted exactly when every key and value is valid and the reserved
    /// label is not among them (the first problem in key order is the one reported).
    #[test]
    fn node_labels_are_accepted_exactly_when_valid(
        labels in prop::collection::btree_map(key(), prop_oneof![value(), any_text(8), "[a-z]{64}"], 0..4),
    ) {
        let result = validate_node_labels(&labels);
        let valid = !labels.contains_key(FORCED_DOWNSCALE_LABEL)
            && labels.iter().all(|(k, v)| {
                validate_label_key(k).is_ok() && windlass::cluster::validate_label_value(v).is_ok()
            });
        prop_assert_eq!(result.is_ok(), valid, "{:?}", labels);
        if result == Err(SchedulingError::ReservedLabel) {
            prop_assert!(labels.contains_key(FORCED_DOWNSCALE_LABEL));
        }
    }

    /// Merging keys into a pod spec is idempotent, keeps every toleration and node
    /// selector, tolerates every key, and requires a node the template's own terms admit
    /// that carries one of the keys.
    #[test]
    fn keys_merged_into_a_pod_spec_keep_its_constraint_and_add_theirs(
        spec in pod_spec(),
        keys in valid_keys(),
        nodes in prop::collection::vec(labels(), 1..6),
    ) {
        let mut once = spec.clone();
        keys.apply_to_pod_spec(&mut once);
        let mut twice = once.clone();
        keys.apply_to_pod_spec(&mut twice);
        prop_assert_eq!(&twice, &once, "applying the keys again changed the spec");

        let tolerations = once.tolerations.clone().unwrap_or_default();
        for toleration in spec.tolerations.iter().flatten() {
            prop_assert!(tolerations.contains(toleration));
        }
        for toleration in keys.tolerations() {
            prop_assert!(tolerations.contains(&toleration));
        }
        prop_assert_eq!(&once.node_selector, &spec.node_selector);

        let before: Vec<NodeSelectorTerm> = required_terms(&spec)
            .into_iter()
            .filter(|t| t.match_expressions.as_ref().is_some_and(|e| !e.is_empty()))
            .collect();
        let after = required_terms(&once);
        for node in nodes {
            // No term with a requirement: no constraint of the template's own (the module
            // docs: ours are then the rule).
            let admitted = before.is_empty() || before.iter().any(|t| term_selects(t, &node));
            let keyed = keys.keys().any(|k| node.contains_key(k));
            let selected = after.iter().any(|t| term_selects(t, &node));
            prop_assert_eq!(selected, admitted && keyed, "node {:?}, terms {:?}", node, after);
        }
    }

    /// Any list of configs gets picked entries or an error naming an entry; never a panic.
    #[test]
    fn any_configs_are_picked_or_refused(
        configs in prop::collection::vec(any_config_entry(), 0..5),
        labels in labels(),
    ) {
        if let Ok(picked) = extract_labeled_configs(&configs, &labels) {
            prop_assert!(picked.len() <= configs.len());
        }
    }

    /// Well-formed configs are picked exactly when one of their selectors matches the
    /// node's labels as kube-rs's label selector matching decides, in input order.
    #[test]
    fn configs_are_picked_as_kube_rs_matches_their_selectors(
        configs in prop::collection::vec(
            prop::option::of(prop::collection::vec(label_selector(), 0..3)),
            0..5,
        ),
        labels in labels(),
    ) {
        let entries: Vec<Value> = configs
            .iter()
            .enumerate()
            .map(|(i, selectors)| match selectors {
                Some(selectors) => json!({"nodeSelectors": selectors, "index": i}),
                None => json!({"index": i}),
            })
            .collect();
        let picked = extract_labeled_configs(&entries, &labels).unwrap();
        let expected: Vec<&Value> = entries
            .iter()
            .zip(&configs)
            .filter(|(_, selectors)| {
                selectors.iter().flatten().any(|s| {
                    let selector: Selector = s.clone().try_into().unwrap();
                    selector.matches(&labels)
                })
            })
            .map(|(entry, _)| entry)
            .collect();
        prop_assert_eq!(picked, expected);
    }

    /// Transposing gives, for each key asked for, its values in the configs' order.
    #[test]
    fn transposed_configs_hold_each_keys_values_in_order(
        configs in prop::collection::vec(
            prop::collection::btree_map(prop::sample::select(vec!["a", "b", "c"]), any::<i8>(), 0..3),
            0..5,
        ),
        keys in prop::collection::btree_set(prop::sample::select(vec!["a", "b", "c", "d"]), 0..4),
    ) {
        let configs: Vec<Value> = configs.iter().map(|c| json!(c)).collect();
        let keys: Vec<&str> = keys.into_iter().collect();
        let transposed = transpose_config(&configs, &keys).unwrap();
        prop_assert_eq!(transposed.keys().map(String::as_str).collect::<BTreeSet<_>>(), keys.iter().copied().collect());
        for key in keys {
            let expected: Vec<&Value> = configs.iter().filter_map(|c| c.get(key)).collect();
            prop_assert_eq!(&transposed[key], &expected);
        }
    }
}

/// A LabelSelector over the small key pool, In/NotIn with values, Exists/DoesNotExist
/// without: the shapes both implementations accept.
fn label_selector() -> impl Strategy<Value = LabelSelector> {
    (
        prop::option::of(labels()),
        prop::option::of(prop::collection::vec(requirement(), 0..3)),
    )
        .prop_map(|(match_labels, requirements)| {
            serde_json::from_value(json!({
                "matchLabels": match_labels,
                "matchExpressions": requirements,
            }))
            .unwrap()
        })
}

/// A config entry: an object with (or without) `nodeSelectors` of any shape, or not an
/// object at all.
fn any_config_entry() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        any_text(6).prop_map(Value::String),
    ];
    let anything = scalar.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "matchLabels",
                    "matchExpressions",
                    "key",
                    "operator",
                    "values",
                    "a",
                ]),
                inner,
                0..4,
            )
            .prop_map(|m| json!(m)),
        ]
    });
    prop_oneof![
        anything.clone(),
        anything
            .clone()
            .prop_map(|selectors| json!({"nodeSelectors": selectors})),
        prop::collection::vec(anything, 0..3)
            .prop_map(|selectors| json!({"nodeSelectors": selectors})),
        prop::collection::vec(label_selector(), 0..3)
            .prop_map(|selectors| json!({"nodeSelectors": selectors})),
    ]
}
