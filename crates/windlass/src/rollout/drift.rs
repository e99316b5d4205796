//! Does a rendered object need writing? The answer must survive a real API server, which
//! normalises what it stores: it drops zero values (`value: ""`, `args: []`, `labels: {}`),
//! rewrites Quantities (`1024Mi` → `1Gi`), fills defaults. Comparing the desired manifest
//! with the live object therefore "finds" a change on every pass, and an operator that
//! applies on every pass under a watch triggers itself forever.
//!
//! So windlass never compares values. It decides from two things the server does not
//! rewrite:
//!
//! 1. **What windlass asked for last time**: the hash of the desired manifest, stamped on
//!    the object as the [`APPLIED_HASH`] annotation when it is applied. A different hash
//!    means the operator wants something else now (including "stop setting this field",
//!    which server-side apply then removes).
//! 2. **Whether windlass still owns what it asked for**: the live object's `managedFields`
//!    entry of windlass's field manager. When another writer changes a field windlass
//!    applied (`kubectl edit`, another controller), server-side apply moves the field to
//!    that writer; the desired field is then missing from windlass's set, and one apply
//!    puts it back. Fields windlass never set are nobody's business here.
//!
//! Objects written with [`WriteMethod::Update`] or [`WriteMethod::Replace`] have no apply
//! entry to consult; for them the hash alone decides, and changes by other writers are not
//! put back until the desired manifest changes.
//!
//! Both answers depend on the desired manifest and the live object alone, and the server
//! gives an object a new resourceVersion for any change. So a reconcile remembers each
//! object it found in sync, by its version and a fingerprint of the manifest
//! ([`crate::session::settled`]), and the next one that meets both unchanged (the periodic
//! resync) skips the hash and the walk.
//!
//! The field set is matched without a schema: map keys are `f:<key>`, and a map whose entry
//! has no `f:` children is atomic (a label selector: `f:selector: {}`), owned as a whole; a
//! list is either atomic (`f:args: {}`), a set of values (`v:<json>`) or a map keyed by
//! some of its items' fields (`k:{"name":"main"}`), matched on the key fields the desired
//! item sets (the server defaults the others, e.g. a port's `protocol`). Values made only
//! of empty maps and lists (`metadata: {labels: {}}`) are not recorded by the server and
//! need no owner.

use serde_json::{Map, Value, json};

use crate::annotations::APPLIED_HASH;
use crate::cluster::WriteMethod;
use crate::object::ManifestExt;
use crate::object::applied_fields;
use crate::session::settled::Recall;

/// Why an object is (or is not) written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// It does not exist yet.
    Absent,
    /// It is being deleted; it is written again so it exists once the deletion is done.
    Terminating,
    /// The operator wants something other than what it applied last time.
    Changed,
    /// Another writer took a field windlass applied (the path, e.g. `spec.replicas`).
    Taken(String),
    /// The live object is as windlass last applied it and windlass still owns every field.
    InSync,
}

impl Drift {
    /// Whether the object has to be written.
    pub fn needs_write(&self) -> bool {
        *self != Drift::InSync
    }
}

/// Stamp the hash of `manifest` on it as the [`APPLIED_HASH`] annotation. Call it on the
/// final manifest (owner references and labels included), before [`drift`].
pub fn stamp(manifest: &mut Value) {
    let hash = crate::values::canonical_hash(manifest);
    let metadata = manifest.metadata_mut();
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if let Some(map) = annotations.as_object_mut() {
        map.insert(APPLIED_HASH.into(), json!(hash));
    }
}

/// Whether `desired` (stamped) must be written over `live`, as `field_manager` writing
/// with `method`.
pub fn drift(
    desired: &Value,
    live: Option<&Value>,
    method: WriteMethod,
    field_manager: &str,
) -> Drift {
    drift_remembered(desired, live, method, field_manager, None)
}

/// [`drift`], remembering in `memo` an object found in sync (see [`drift_of`]).
pub(crate) fn drift_remembered(
    desired: &Value,
    live: Option<&Value>,
    method: WriteMethod,
    field_manager: &str,
    memo: Option<Recall<'_>>,
) -> Drift {
    drift_of(
        Node::Plain(desired),
        || desired.annotation(APPLIED_HASH),
        live,
        method,
        field_manager,
        memo,
    )
}

/// [`drift`] of the manifest `desired` stands for, whose [`APPLIED_HASH`] annotation
/// `applied_hash` gives (asked only when there is a live object to compare it with). With
/// a `memo`, an object found in sync now is remembered (see [`crate::session::settled`]);
/// whether it was found so before is the caller's to ask, with [`remembered`], before it
/// computes anything of the desired manifest.
pub(crate) fn drift_of<'d>(
    desired: Node<'d>,
    applied_hash: impl FnOnce() -> Option<&'d str>,
    live: Option<&Value>,
    method: WriteMethod,
    field_manager: &str,
    memo: Option<Recall<'_>>,
) -> Drift {
    let Some(live) = live else {
        return Drift::Absent;
    };
    if live.is_terminating() {
        return Drift::Terminating;
    }
    let hash = applied_hash();
    if hash.is_none() || hash != live.annotation(APPLIED_HASH) {
        return Drift::Changed;
    }
    if method != WriteMethod::Apply {
        return Drift::InSync;
    }
    let Some(owned) = applied_fields(live, field_manager) else {
        // Nothing of it is windlass's any more (or it was written another way).
        return Drift::Taken("metadata".into());
    };
    let Some(desired) = desired.entries() else {
        return Drift::Changed;
    };
    let mut owned = Fields::of(owned);
    for (key, value) in desired {
        if matches!(key, "apiVersion" | "kind" | "status") {
            continue;
        }
        let fields = owned.get(key);
        let result = match value.entries() {
            // Name and namespace identify the object and are in no manager's field set.
            Some(metadata) if key == "metadata" => {
                covered_map(metadata, &["name", "namespace"], fields)
            }
            _ => covered(value, fields),
        };
        if let Err(Uncovered(mut path)) = result {
            path.push(key.to_string());
            path.reverse();
            return Drift::Taken(path.join("."));
        }
    }
    if let Some(memo) = memo {
        memo.record(live);
    }
    Drift::InSync
}

/// Whether `memo` alone says `live` is in sync: found so before at its resourceVersion with
/// the same desired manifest (only for server-side apply, the method the memo records).
/// Asked before anything else is computed of the desired manifest: it is the whole check
/// of a reconcile that finds nothing to do.
pub(crate) fn remembered(live: &Value, method: WriteMethod, memo: Option<Recall<'_>>) -> bool {
    method == WriteMethod::Apply && !live.is_terminating() && memo.is_some_and(|m| m.holds(live))
}

/// A value of a desired manifest as the drift check walks it: a plain JSON value, or a map
/// or list of the rendered manifest with windlass's additions laid over it, which is what
/// the rollout checks without making the stamped copy (`rollout::stamp`). Items of lists
/// are always plain.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Node<'a> {
    /// A JSON value as it is.
    Plain(&'a Value),
    /// A map with entries laid over it.
    Map(Layered<'a>),
    /// A list (the rendered items) with one more item at its end.
    Appended(&'a [Value], &'a Value),
}

/// A map: the rendered one, if there is one, with `over` laid over it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layered<'a> {
    pub(crate) base: Option<&'a Map<String, Value>>,
    /// Sorted by key.
    pub(crate) over: &'a [Layer<'a>],
}

/// One entry laid over a map.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layer<'a> {
    pub(crate) key: &'a str,
    pub(crate) value: Node<'a>,
    /// Whether a value the map has already stays (otherwise this one replaces it).
    pub(crate) keep_rendered: bool,
}

impl<'a> Node<'a> {
    /// The entries of a map, in key order; `None` for anything else.
    pub(crate) fn entries(self) -> Option<Entries<'a>> {
        match self {
            Node::Plain(Value::Object(map)) => Some(Entries::new(Some(map), &[])),
            Node::Map(Layered { base, over }) => Some(Entries::new(base, over)),
            _ => None,
        }
    }

    /// Whether it is null or made only of empty maps and lists.
    fn vacuous(self) -> bool {
        match self {
            Node::Plain(value) => vacuous(value),
            Node::Map(_) => self
                .entries()
                .into_iter()
                .flatten()
                .all(|(_, v)| v.vacuous()),
            Node::Appended(..) => false,
        }
    }
}

type MapEntries<'a> = std::iter::Flatten<std::option::IntoIter<serde_json::map::Iter<'a>>>;

/// The entries of a map [`Node`], the rendered ones merged with the laid-over ones in key
/// order (serde_json's map is ordered by key; `rollout::stamp` lays nothing over a map
/// that is not).
#[derive(Clone)]
pub(crate) struct Entries<'a> {
    base: std::iter::Peekable<MapEntries<'a>>,
    over: &'a [Layer<'a>],
}

impl<'a> Entries<'a> {
    fn new(base: Option<&'a Map<String, Value>>, over: &'a [Layer<'a>]) -> Self {
        Entries {
            base: base.map(|m| m.iter()).into_iter().flatten().peekable(),
            over,
        }
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, Node<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        use std::cmp::Ordering;
        let order = match (self.base.peek(), self.over.first()) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((key, _)), Some(layer)) => key.as_str().cmp(layer.key),
        };
        if order == Ordering::Less {
            let (key, value) = self.base.next()?;
            return Some((key.as_str(), Node::Plain(value)));
        }
        let (layer, rest) = self.over.split_first()?;
        self.over = rest;
        if order == Ordering::Greater {
            return Some((layer.key, layer.value));
        }
        let (key, value) = self.base.next()?;
        Some(match layer.keep_rendered {
            true => (key.as_str(), Node::Plain(value)),
            false => (key.as_str(), layer.value),
        })
    }
}

/// The path of a desired field that the field set does not cover, innermost segment first
/// (it is built on the way out, so a value that is covered costs no allocation).
struct Uncovered(Vec<String>);

impl Uncovered {
    /// `self` one level further out, under `segment`.
    fn under(mut self, segment: String) -> Self {
        self.0.push(segment);
        self
    }
}

/// The fields of a field set's map (its `f:<key>` entries), asked for in key order, as a
/// walk of the desired map's entries asks: both maps are ordered by key (and so are the
/// `f:` keys without their common prefix), so one pass over the field set answers every
/// lookup, without searching it for each key. Where serde_json's maps are not ordered
/// (its `preserve_order` feature), each is looked up.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    /// The `f:` entries not passed yet, their keys without `f:`; `None`: look up each.
    ordered: Option<std::iter::Peekable<FieldEntries<'a>>>,
}

type FieldEntries<'a> = std::iter::FilterMap<serde_json::map::Iter<'a>, StripField<'a>>;

/// A field set's entry as its `f:` key without `f:`, or `None` for other entries.
type StripField<'a> = fn((&'a String, &'a Value)) -> Option<(&'a str, &'a Value)>;

impl<'a> Fields<'a> {
    fn of(map: &'a Map<String, Value>) -> Self {
        let strip: StripField<'a> = |(key, value)| Some((key.strip_prefix("f:")?, value));
        Fields {
            map,
            ordered: crate::values::maps_are_sorted()
                .then(|| map.iter().filter_map(strip).peekable()),
        }
    }

    /// `fields["f:<key>"]`, for keys asked in increasing order.
    fn get(&mut self, key: &str) -> Option<&'a Value> {
        let Some(ordered) = &mut self.ordered else {
            return field(self.map, key);
        };
        while let Some((owned, value)) = ordered.peek() {
            match (*owned).cmp(key) {
                std::cmp::Ordering::Less => {
                    ordered.next();
                }
                std::cmp::Ordering::Equal => {
                    let value = *value;
                    ordered.next();
                    return Some(value);
                }
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }
}

/// `fields["f:<key>"]`. Short keys (all but the longest annotation keys) are looked up
/// without allocating `f:<key>`: a rollout checks every field of every object it renders.
fn field<'a>(fields: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    let mut buffer = [0u8; 128];
    let len = key.len() + 2;
    if len > buffer.len() {
        return fields.get(format!("f:{key}").as_str());
    }
    buffer[..2].copy_from_slice(b"f:");
    buffer[2..len].copy_from_slice(key.as_bytes());
    // "f:" and a `str` make valid UTF-8.
    std::str::from_utf8(&buffer[..len])
        .ok()
        .and_then(|name| fields.get(name))
}

/// Whether the field set `fields` covers everything `value` sets; if not, where not.
fn covered(value: Node<'_>, fields: Option<&Value>) -> Result<(), Uncovered> {
    let missing = || Err(Uncovered(Vec::new()));
    if let Some(entries) = value.entries() {
        return covered_map(entries, &[], fields);
    }
    if value.vacuous() {
        // Nothing to own: the server records no field for it.
        return Ok(());
    }
    if fields.is_none() {
        return missing();
    }
    match value {
        Node::Plain(Value::Array(items)) => covered_list(items.iter(), fields),
        Node::Appended(items, last) => covered_list(items.iter().chain([last]), fields),
        // A scalar: present in the set is owned.
        _ => Ok(()),
    }
}

/// [`covered`] for a list that is not empty.
fn covered_list<'v>(
    items: impl Iterator<Item = &'v Value>,
    fields: Option<&Value>,
) -> Result<(), Uncovered> {
    let missing = || Err(Uncovered(Vec::new()));
    let Some(children) = fields.and_then(Value::as_object) else {
        return missing();
    };
    let mut elements = children.iter().filter(|(k, _)| k.as_str() != ".");
    // An atomic list is owned as a whole.
    if elements.next().is_none() {
        return Ok(());
    }
    for (index, item) in items.enumerate() {
        let owned = children
            .iter()
            .filter(|(k, _)| k.as_str() != ".")
            .find(|(key, _)| element_matches(key, item, index));
        let result = match owned {
            None => missing(),
            Some((_, child)) if item.is_object() => covered(Node::Plain(item), Some(child)),
            Some(_) => Ok(()),
        };
        result.map_err(|u| u.under(format!("[{index}]")))?;
    }
    Ok(())
}

/// [`covered`] for the entries of a map, leaving out the keys `skip`.
fn covered_map(
    entries: Entries<'_>,
    skip: &[&str],
    fields: Option<&Value>,
) -> Result<(), Uncovered> {
    let mut entries = entries.filter(|(k, _)| !skip.contains(k));
    if entries.clone().all(|(_, v)| v.vacuous()) {
        // Nothing to own: the server records no field for it.
        return Ok(());
    }
    let Some(fields) = fields.and_then(Value::as_object) else {
        return Err(Uncovered(Vec::new()));
    };
    if !fields.keys().any(|k| k.starts_with("f:")) {
        // An atomic map, owned as a whole.
        return Ok(());
    }
    let mut fields = Fields::of(fields);
    entries.try_for_each(|(key, child)| {
        covered(child, fields.get(key)).map_err(|u| u.under(key.to_string()))
    })
}

/// Whether a value is null or made only of empty maps and lists.
fn vacuous(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.values().all(vacuous),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Whether the field-set key of a list element (`k:{…}`, `v:…`, `i:N`) names `item`.
fn element_matches(key: &str, item: &Value, index: usize) -> bool {
    if let Some(keys) = key.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(keys) else {
            return false;
        };
        let Some(item) = item.as_object() else {
            return false;
        };
        // Key fields the desired item leaves out are defaulted by the server.
        let mut set = keys
            .iter()
            .filter(|(k, _)| item.contains_key(*k))
            .peekable();
        set.peek().is_some() && set.all(|(k, v)| item.get(k) == Some(v))
    } else if let Some(value) = key.strip_prefix("v:") {
        serde_json::from_str::<Value>(value).is_ok_and(|v| v == *item)
    } else if let Some(i) = key.strip_prefix("i:") {
        i.parse::<usize>().is_ok_and(|i| i == index)
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "windlass";

    fn stamped(mut v: Value) -> Value {
        stamp(&mut v);
        v
    }

    /// `desired` as a live object whose windlass entry owns `fields`.
    fn live_with(desired: &Value, fields: Value) -> Value {
        let mut live = desired.clone();
        live["metadata"]["uid"] = json!("u");
        live["metadata"]["managedFields"] = json!([
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": M, "operation": "Apply", "fieldsV1": fields},
        ]);
        live
    }

    fn deployment() -> Value {
        stamped(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "main", "image": "web:1", "args": [], "env": [{"name": "A", "value": ""}],
                 "ports": [{"containerPort": 80}]}]}}}}))
    }

    fn deployment_fields() -> Value {
        json!({"f:metadata": {"f:annotations": {"f:windlass.dev/applied-hash": {}}, "f:labels": {"f:app": {}}},
               "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                   "k:{\"name\":\"main\"}": {".": {}, "f:name": {}, "f:image": {}, "f:args": {},
                       "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                       "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}})
    }

    #[test]
    fn in_sync_when_hash_matches_and_every_field_is_still_owned() {
        let desired = deployment();
        let mut live = live_with(&desired, deployment_fields());
        // What the server does to it changes nothing: zero values dropped, defaults added.
        live["spec"]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("args");
        live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
        live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        assert_eq!(
            drift(&desired, Some(&live), WriteMethod::Apply, M),
            Drift::InSync
        );
    }

    #[test]
    fn a_field_taken_by_another_writer_is_named() {
        let desired = deployment();
        let mut fields = deployment_fields();
        fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]
            .as_object_mut()
            .unwrap()
            .remove("f:image");
        let live = live_with(&desired, fields);
        assert_eq!(
            drift(&desired, Some(&live), WriteMethod::Apply, M),
            Drift::Taken("spec.template.spec.containers.[0].image".into())
        );
    }

    #[test]
    fn a_new_desired_manifest_is_a_change_and_absence_is_absence() {
        let desired = deployment();
        let live = live_with(&desired, deployment_fields());
        let mut other = desired.clone();
        other["spec"]["replicas"] = json!(3);
        stamp(&mut other);
        assert_eq!(
            drift(&other, Some(&live), WriteMethod::Apply, M),
            Drift::Changed
        );
        assert_eq!(drift(&desired, None, WriteMethod::Apply, M), Drift::Absent);
        let mut terminating = live.clone();
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            drift(&desired, Some(&terminating), WriteMethod::Apply, M),
            Drift::Terminating
        );
    }

    #[test]
    fn without_an_apply_entry_applies_must_take_the_object_back_but_updates_trust_the_hash() {
        let desired = deployment();
        let mut live = desired.clone();
        live["metadata"]["managedFields"] =
            json!([{"manager": M, "operation": "Update", "fieldsV1": {}}]);
        assert!(drift(&desired, Some(&live), WriteMethod::Apply, M).needs_write());
        assert_eq!(
            drift(&desired, Some(&live), WriteMethod::Update, M),
            Drift::InSync
        );
    }

    #[test]
    fn atomic_maps_and_vacuous_values_as_a_real_server_records_them() {
        // As kube-apiserver records them: a label selector is an atomic map, and a pod
        // template's `metadata: {labels: {}}` leaves no trace in the field set.
        let desired = stamped(
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {}}, "spec": {"restartPolicy": "Never"}}}}),
        );
        let fields = json!({"f:metadata": {"f:annotations": {"f:windlass.dev/applied-hash": {}}},
            "f:spec": {"f:selector": {}, "f:template": {"f:spec": {"f:restartPolicy": {}}}}});
        let live = live_with(&desired, fields.clone());
        assert_eq!(
            drift(&desired, Some(&live), WriteMethod::Apply, M),
            Drift::InSync
        );
        // A map with owned children is not atomic: losing one of them is drift.
        let mut lost = fields;
        lost["f:spec"]["f:template"]["f:spec"] = json!({"f:dnsPolicy": {}});
        let live = live_with(&desired, lost);
        assert_eq!(
            drift(&desired, Some(&live), WriteMethod::Apply, M),
            Drift::Taken("spec.template.spec.restartPolicy".into())
        );
    }

    proptest::proptest! {
        /// The field set walked in key order answers as looking up each key.
        #[test]
        fn fields_in_key_order_answer_as_lookups(
            owned in proptest::collection::btree_set(
                (proptest::sample::select(vec!["f:", "k:", "v:", "", "."]), crate::strategies::key()), 0..8),
            asked in proptest::collection::btree_set(crate::strategies::key(), 0..8),
        ) {
            let map: Map<String, Value> = owned
                .into_iter()
                .enumerate()
                .map(|(i, (prefix, key))| (format!("{prefix}{key}"), json!(i)))
                .collect();
            let mut fields = Fields::of(&map);
            for key in &asked {
                proptest::prop_assert_eq!(fields.get(key), field(&map, key), "{}", key);
            }
        }
    }

    #[test]
    fn set_lists_and_atomic_lists() {
        let desired = stamped(
            json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x",
            "finalizers": ["a/b"]}, "spec": {"args": ["-v"]}}),
        );
        let fields = json!({"f:metadata": {"f:annotations": {"f:windlass.dev/applied-hash": {}},
            "f:finalizers": {".": {}, "v:\"a/b\"": {}}}, "f:spec": {"f:args": {}}});
        let live = live_with(&desired, fields.clone());
        assert_eq!(
            drift(&desired, Some(&live), WriteMethod::Apply, M),
            Drift::InSync
        );
        let mut lost = fields;
        lost["f:metadata"]["f:finalizers"] = json!({".": {}, "v:\"c/d\"": {}});
        let live = live_with(&desired, lost);
        assert_eq!(
            drift(&desired, Some(&live), WriteMethod::Apply, M),
            Drift::Taken("metadata.finalizers.[0]".into())
        );
    }
}
