//! yaook-style scheduling keys: where a component's pods may run, expressed as a node affinity
//! and tolerations merged into a pod template (feature `scheduling`).
//!
//! Also here: per-node config templates chosen by node labels ([`extract_labeled_configs`],
//! [`transpose_config`]) and reading and labelling nodes ([`node_labels`], [`label_node`]).
//! Label syntax is checked by windlass's [`validate_label_key`] and [`validate_label_value`],
//! the rules the in-memory cluster applies.
//!
//! # The rule
//!
//! A component has one or more scheduling keys, each a node label key (its own key, plus any
//! group keys it listens to). For every key `K` its pods
//!
//! * **tolerate** taints with key `K`, effect `NoSchedule` and effect `NoExecute`
//!   (operator `Exists`, so any taint value), and
//! * **require** a node labelled `K` (any value): the required node affinity gets one
//!   `nodeSelectorTerm` per key, each with one `Exists` expression. Terms are ORed by
//!   Kubernetes, so a node labelled with *any* of the keys matches.
//!
//! On a fresh cluster with no labelled node nothing is scheduled; that is intended.
//!
//! ```
//! use k8s_openapi::api::core::v1::PodSpec;
//! use windlass_x::scheduling::{SchedulingKey, SchedulingKeys};
//!
//! // nova-api: its own key, and the group key of all API services.
//! let keys = SchedulingKeys::for_component(SchedulingKey::ComputeApi);
//! assert_eq!(keys.keys().collect::<Vec<_>>(), ["compute.yaook.cloud/api", "any.yaook.cloud/api"]);
//! let mut spec = PodSpec::default();
//! keys.apply_to_pod_spec(&mut spec);
//! assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(4));
//! ```
//!
//! # Merging without clobbering
//!
//! [`SchedulingKeys::apply_to_pod_spec`] keeps everything already in the spec:
//! * tolerations are appended unless an identical one is there;
//! * if the spec already *requires* node selector terms `T1 … Tn`, the result requires
//!   `(T1 ∨ … ∨ Tn) ∧ (K1 ∨ … ∨ Km)`: each `Ti` is combined with each key's expression, and
//!   terms implied by a smaller one are dropped. So a constraint the author put in the
//!   template (an architecture, or yaook's L2 maintenance label) still holds, and
//!   applying the same keys twice changes nothing;
//! * `nodeSelector`, preferred affinities and pod (anti-)affinities are not touched.
//!
//! # Special cases
//!
//! * The Neutron L2 (and OVN) agent runs wherever any service that needs it runs: it tolerates
//!   and selects the union of those services' keys plus its own
//!   ([`SchedulingKeys::union`], [`SchedulingKeys::neutron_l2_agent`]).
//! * [`FORCED_DOWNSCALE_LABEL`] is a reserved node label that no node may carry; putting it in
//!   a pod's `nodeSelector` ([`apply_forced_downscale`]) therefore matches no node and drains a
//!   DaemonSet to zero pods. [`validate_node_labels`] is the guard that refuses to put it on a
//!   node, and it may not be used as a scheduling key.
//! * Not catalogued: the keys of the OVN and BGP agents (pass them as strings to
//!   [`SchedulingKeys::new`]) and yaook's L2 maintenance label (put it into the template's
//!   required node affinity; the merge keeps it).
//!
//! Hand-written because no crate carries yaook's rules; the Kubernetes types are k8s-openapi's.

mod catalogue;
mod config;
mod node;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    PodTemplateSpec, Toleration,
};
use windlass::cluster::{LabelError, validate_label_key, validate_label_value};

pub use catalogue::{SchedulingKey, UnknownSchedulingKey};
pub use config::{ConfigError, extract_labeled_configs, transpose_config};
pub use node::{NodeError, label_node, node_labels};

/// The reserved label that no node may carry; as a `nodeSelector` it matches no node.
pub const FORCED_DOWNSCALE_LABEL: &str = "state.yaook.cloud/forced-downscale";

/// The value [`apply_forced_downscale`] selects on. Any value would do: no node has the key.
pub const FORCED_DOWNSCALE_VALUE: &str = "true";

/// The taint effects every scheduling key is tolerated with, in the order they are emitted.
pub const TOLERATED_EFFECTS: [&str; 2] = ["NoSchedule", "NoExecute"];

/// Bad scheduling input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulingError {
    /// No key was given.
    #[error(
        "a component needs at least one scheduling key; without one its pods could run nowhere"
    )]
    NoKeys,
    /// A key was the empty string.
    #[error("scheduling key #{index} is empty; use a label key such as `compute.yaook.cloud/api`")]
    EmptyKey {
        /// Position of the key in the input, from 0.
        index: usize,
    },
    /// The same key was given twice.
    #[error("scheduling key `{0}` is given twice; list each key once")]
    DuplicateKey(String),
    /// A key is not valid label syntax.
    #[error("scheduling key is not a valid label key: {0}")]
    InvalidKey(#[source] LabelError),
    /// A label value is not valid syntax.
    #[error("invalid node label value for `{key}`: {source}")]
    InvalidValue {
        /// The label key.
        key: String,
        /// What is wrong with the value.
        #[source]
        source: LabelError,
    },
    /// The reserved forced-downscale label was used as a key or node label.
    #[error(
        "`{FORCED_DOWNSCALE_LABEL}` is reserved: it must never be put on a node or used as a scheduling key (it is the selector that matches no node)"
    )]
    ReservedLabel,
}

/// The scheduling keys of one component, validated, unique and in order; see the
/// [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SchedulingKeys {
    keys: Vec<String>,
}

impl SchedulingKeys {
    /// Keys given as strings or [`SchedulingKey`]s (the first is usually the component's own,
    /// the rest group keys; the output treats them alike).
    ///
    /// # Errors
    /// [`SchedulingError::NoKeys`], [`EmptyKey`](SchedulingError::EmptyKey),
    /// [`DuplicateKey`](SchedulingError::DuplicateKey),
    /// [`InvalidKey`](SchedulingError::InvalidKey) (label syntax) or
    /// [`ReservedLabel`](SchedulingError::ReservedLabel).
    pub fn new<I, S>(keys: I) -> Result<Self, SchedulingError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out: Vec<String> = Vec::new();
        for (index, key) in keys.into_iter().enumerate() {
            let key = key.as_ref();
            if key.is_empty() {
                return Err(SchedulingError::EmptyKey { index });
            }
            validate_label_key(key).map_err(SchedulingError::InvalidKey)?;
            if key == FORCED_DOWNSCALE_LABEL {
                return Err(SchedulingError::ReservedLabel);
            }
            if out.iter().any(|k| k == key) {
                return Err(SchedulingError::DuplicateKey(key.to_string()));
            }
            out.push(key.to_string());
        }
        if out.is_empty() {
            return Err(SchedulingError::NoKeys);
        }
        Ok(Self { keys: out })
    }

    /// A catalogue key together with its catalogue group key, if it has one
    /// (see [`SchedulingKey::group`]).
    pub fn for_component(key: SchedulingKey) -> Self {
        let mut keys = vec![key.as_str().to_string()];
        if let Some(group) = key.group() {
            keys.push(group.as_str().to_string());
        }
        Self { keys }
    }

    /// These keys followed by `groups`.
    ///
    /// # Errors
    /// As [`new`](Self::new); a group key equal to a key already present is a
    /// [`DuplicateKey`](SchedulingError::DuplicateKey).
    pub fn with_group_keys<I, S>(self, groups: I) -> Result<Self, SchedulingError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let groups: Vec<S> = groups.into_iter().collect();
        Self::new(
            self.keys
                .iter()
                .map(String::as_str)
                .chain(groups.iter().map(AsRef::as_ref)),
        )
    }

    /// The L2/OVN agent rule: `own` keys followed by every key of `dependents` not already
    /// present (duplicates across services are expected and merged, not an error).
    pub fn union<'a>(own: &Self, dependents: impl IntoIterator<Item = &'a SchedulingKeys>) -> Self {
        let mut keys = own.keys.clone();
        for dependent in dependents {
            for key in &dependent.keys {
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
        }
        Self { keys }
    }

    /// The Neutron L2 agent: its own key plus the keys of the catalogued services that need it
    /// (the L3 agent, the DHCP agent and nova-compute's hypervisor key). yaook's docs also
    /// name the BGP agent, whose key is not in the catalogue: add it with
    /// [`union`](Self::union).
    pub fn neutron_l2_agent() -> Self {
        let own = Self::for_component(SchedulingKey::NetworkNeutronL2Agent);
        let dependents = [
            SchedulingKey::NetworkNeutronL3Agent,
            SchedulingKey::NetworkNeutronDhcpAgent,
            SchedulingKey::ComputeHypervisor,
        ]
        .map(Self::for_component);
        Self::union(&own, &dependents)
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.keys.iter().map(String::as_str)
    }

    /// Two tolerations per key: `NoSchedule` and `NoExecute`, operator `Exists`.
    pub fn tolerations(&self) -> Vec<Toleration> {
        self.keys
            .iter()
            .flat_map(|key| {
                TOLERATED_EFFECTS.iter().map(move |effect| Toleration {
                    key: Some(key.clone()),
                    operator: Some("Exists".to_string()),
                    effect: Some((*effect).to_string()),
                    ..Toleration::default()
                })
            })
            .collect()
    }

    /// One node selector term per key, each requiring the label to exist.
    pub fn node_selector_terms(&self) -> Vec<NodeSelectorTerm> {
        self.keys
            .iter()
            .map(|key| NodeSelectorTerm {
                match_expressions: Some(vec![exists(key)]),
                match_fields: None,
            })
            .collect()
    }

    /// The required node affinity alone (what [`apply_to_pod_spec`](Self::apply_to_pod_spec)
    /// writes into a spec that has none).
    pub fn affinity(&self) -> Affinity {
        Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: self.node_selector_terms(),
                }),
                ..NodeAffinity::default()
            }),
            ..Affinity::default()
        }
    }

    /// Merges the affinity and tolerations into `spec` without clobbering what is there (see
    /// the [module docs](self)). Idempotent.
    pub fn apply_to_pod_spec(&self, spec: &mut PodSpec) {
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        for toleration in self.tolerations() {
            if !tolerations.contains(&toleration) {
                tolerations.push(toleration);
            }
        }
        let required = spec
            .affinity
            .get_or_insert_with(Affinity::default)
            .node_affinity
            .get_or_insert_with(NodeAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(NodeSelector::default);
        required.node_selector_terms =
            and_terms(&required.node_selector_terms, &self.node_selector_terms());
    }

    /// [`apply_to_pod_spec`](Self::apply_to_pod_spec) on a template's spec (created if missing).
    pub fn apply_to_template(&self, template: &mut PodTemplateSpec) {
        self.apply_to_pod_spec(template.spec.get_or_insert_with(PodSpec::default));
    }
}

fn exists(key: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: "Exists".to_string(),
        values: None,
    }
}

fn is_empty_term(term: &NodeSelectorTerm) -> bool {
    term.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && term.match_fields.as_ref().is_none_or(Vec::is_empty)
}

/// Whether every requirement of `small` is also in `big` (so `big` selects a subset of `small`).
fn implied_by(small: &NodeSelectorTerm, big: &NodeSelectorTerm) -> bool {
    let subset = |a: &Option<Vec<NodeSelectorRequirement>>,
                  b: &Option<Vec<NodeSelectorRequirement>>| {
        a.iter()
            .flatten()
            .all(|r| b.iter().flatten().any(|s| s == r))
    };
    subset(&small.match_expressions, &big.match_expressions)
        && subset(&small.match_fields, &big.match_fields)
}

/// `(existing₁ ∨ …) ∧ (ours₁ ∨ …)` as a list of ORed terms, without redundant terms.
fn and_terms(existing: &[NodeSelectorTerm], ours: &[NodeSelectorTerm]) -> Vec<NodeSelectorTerm> {
    let existing: Vec<&NodeSelectorTerm> = existing.iter().filter(|t| !is_empty_term(t)).collect();
    if existing.is_empty() {
        // An empty term matches no node; with no real constraint in place, ours are the rule.
        return ours.to_vec();
    }
    let mut combined: Vec<NodeSelectorTerm> = Vec::with_capacity(existing.len() * ours.len());
    for base in &existing {
        for add in ours {
            let mut term = (*base).clone();
            let exprs = term.match_expressions.get_or_insert_with(Vec::new);
            for requirement in add.match_expressions.iter().flatten() {
                if !exprs.contains(requirement) {
                    exprs.push(requirement.clone());
                }
            }
            combined.push(term);
        }
    }
    // Absorption: drop a term implied by another (keep the first of equal ones).
    let mut kept: Vec<NodeSelectorTerm> = Vec::with_capacity(combined.len());
    for (i, term) in combined.iter().enumerate() {
        let absorbed = combined.iter().enumerate().any(|(j, other)| {
            j != i && implied_by(other, term) && (!implied_by(term, other) || j < i)
        });
        if !absorbed {
            kept.push(term.clone());
        }
    }
    kept
}

/// Puts the reserved [`FORCED_DOWNSCALE_LABEL`] into the spec's `nodeSelector`, so its pods
/// match no node (a DaemonSet drains to zero). Undo with [`clear_forced_downscale`].
pub fn apply_forced_downscale(spec: &mut PodSpec) {
    spec.node_selector.get_or_insert_with(BTreeMap::new).insert(
        FORCED_DOWNSCALE_LABEL.to_string(),
        FORCED_DOWNSCALE_VALUE.to_string(),
    );
}

/// Removes the forced-downscale selector; returns whether it was there.
pub fn clear_forced_downscale(spec: &mut PodSpec) -> bool {
    let Some(selector) = spec.node_selector.as_mut() else {
        return false;
    };
    let removed = selector.remove(FORCED_DOWNSCALE_LABEL).is_some();
    if selector.is_empty() {
        spec.node_selector = None;
    }
    removed
}

/// Whether the spec is forced down (its `nodeSelector` has the reserved label).
pub fn is_forced_downscale(spec: &PodSpec) -> bool {
    spec.node_selector
        .as_ref()
        .is_some_and(|s| s.contains_key(FORCED_DOWNSCALE_LABEL))
}

/// The guard for labelling nodes: checks every key and value for Kubernetes syntax and refuses
/// the reserved [`FORCED_DOWNSCALE_LABEL`].
///
/// ```
/// use std::collections::BTreeMap;
/// use windlass_x::scheduling::{validate_node_labels, SchedulingError, FORCED_DOWNSCALE_LABEL};
///
/// let ok = BTreeMap::from([("compute.yaook.cloud/hypervisor".to_string(), "true".to_string())]);
/// assert!(validate_node_labels(&ok).is_ok());
/// let bad = BTreeMap::from([(FORCED_DOWNSCALE_LABEL.to_string(), "true".to_string())]);
/// assert_eq!(validate_node_labels(&bad), Err(SchedulingError::ReservedLabel));
/// ```
///
/// # Errors
/// [`SchedulingError::ReservedLabel`], [`InvalidKey`](SchedulingError::InvalidKey) or
/// [`InvalidValue`](SchedulingError::InvalidValue).
pub fn validate_node_labels(labels: &BTreeMap<String, String>) -> Result<(), SchedulingError> {
    for (key, value) in labels {
        if key == FORCED_DOWNSCALE_LABEL {
            return Err(SchedulingError::ReservedLabel);
        }
        validate_label_key(key).map_err(SchedulingError::InvalidKey)?;
        validate_label_value(value).map_err(|source| SchedulingError::InvalidValue {
            key: key.clone(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> SchedulingKeys {
        match SchedulingKeys::new(k) {
            Ok(k) => k,
            Err(e) => panic!("{e}"),
        }
    }

    fn term(exprs: &[(&str, &str, &[&str])]) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(
                exprs
                    .iter()
                    .map(|(k, op, v)| NodeSelectorRequirement {
                        key: (*k).to_string(),
                        operator: (*op).to_string(),
                        values: if v.is_empty() {
                            None
                        } else {
                            Some(v.iter().map(|s| (*s).to_string()).collect())
                        },
                    })
                    .collect(),
            ),
            match_fields: None,
        }
    }

    #[test]
    fn and_of_terms_distributes_and_absorbs() {
        let ours = keys(&["a/k", "b/g"]).node_selector_terms();
        let existing = vec![
            term(&[("arch", "In", &["amd64"])]),
            term(&[("arch", "In", &["arm64"]), ("fast", "Exists", &[])]),
        ];
        let merged = and_terms(&existing, &ours);
        assert_eq!(
            merged,
            vec![
                term(&[("arch", "In", &["amd64"]), ("a/k", "Exists", &[])]),
                term(&[("arch", "In", &["amd64"]), ("b/g", "Exists", &[])]),
                term(&[
                    ("arch", "In", &["arm64"]),
                    ("fast", "Exists", &[]),
                    ("a/k", "Exists", &[])
                ]),
                term(&[
                    ("arch", "In", &["arm64"]),
                    ("fast", "Exists", &[]),
                    ("b/g", "Exists", &[])
                ]),
            ]
        );
        assert_eq!(and_terms(&merged, &ours), merged, "idempotent");
        assert_eq!(and_terms(&[NodeSelectorTerm::default()], &ours), ours);
    }

    #[test]
    fn forced_downscale_roundtrip() {
        let mut spec = PodSpec::default();
        assert!(!is_forced_downscale(&spec));
        apply_forced_downscale(&mut spec);
        assert!(is_forced_downscale(&spec));
        assert_eq!(
            spec.node_selector
                .as_ref()
                .and_then(|s| s.get(FORCED_DOWNSCALE_LABEL))
                .map(String::as_str),
            Some("true")
        );
        assert!(clear_forced_downscale(&mut spec));
        assert_eq!(spec.node_selector, None);
        assert!(!clear_forced_downscale(&mut spec));
    }
}
