//! What windlass applied for one CR, per component: the CR's `status.inventory`.
//!
//! The inventory answers three questions without listing the cluster (which would cost a
//! request per kind on every reconcile):
//!
//! - **pruning**: objects a component rendered before and no longer renders (the previous
//!   version's migration Job) are deleted once the component deployed;
//! - **disabling**: a disabled component deletes exactly the objects it applied, and
//!   nothing at all once they are gone (no DELETE per object per reconcile);
//! - **ownership**: each entry keeps the uid of the object windlass applied, and deletes
//!   carry it as a precondition, so an object of the same name that someone else created
//!   since is never deleted.
//!
//! It is written with the status, so it costs no request of its own — with one exception.
//! An object the garbage collector cannot reach from the CR (cluster-scoped, or in another
//! namespace) is recorded *before* its first write, without a uid (a **pending** entry), in
//! a status write of its own: an operator killed between that write and the status write at
//! the end of the reconcile would otherwise leave an object nothing remembers, orphaned once
//! the CR is deleted. A pending entry names an object that may or may not exist; it counts as
//! this CR's only while the object carries the CR's ownership label. Objects also carry
//! the [`OWNER_UID`](crate::annotations::OWNER_UID) and
//! [`COMPONENT`](crate::annotations::COMPONENT) labels, which find them across namespaces
//! and let watches be scoped to windlass's objects.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::object::ObjectRef;

/// The status field holding the inventory.
pub const FIELD: &str = "inventory";

/// The objects windlass applied for a CR: component → object → uid.
///
/// Each component's objects are a list sorted by object, not a map: a component applies a
/// few objects, and a map node of (object, uid) pairs is over a kilobyte, which glibc's
/// allocator serves slowly (5 % of a steady 3-component reconcile went to it when the
/// inventory is read from the status).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory(BTreeMap<String, Vec<(ObjectRef, String)>>);

impl Inventory {
    /// The inventory recorded in a CR's status. Entries that do not parse are dropped:
    /// the inventory is windlass's own bookkeeping, and a hand-edited entry must not stop
    /// a reconcile.
    pub(crate) fn from_status(status: &Value) -> Self {
        let mut inventory = Inventory::default();
        for entry in status[FIELD].as_array().into_iter().flatten() {
            // The entry's fields, read in one pass over it rather than looked up one by
            // one: every reconcile reads every entry.
            let mut text = [None; 6];
            for (key, value) in entry.as_object().into_iter().flatten() {
                let at = match key.as_str() {
                    "component" => 0,
                    "apiVersion" => 1,
                    "kind" => 2,
                    "name" => 3,
                    "namespace" => 4,
                    "uid" => 5,
                    _ => continue,
                };
                text[at] = value.as_str();
            }
            let [
                Some(component),
                Some(api_version),
                Some(kind),
                Some(name),
                namespace,
                uid,
            ] = text
            else {
                continue;
            };
            let reference = ObjectRef::new(api_version, kind, namespace, name);
            // No uid: recorded before it was applied (pending).
            let object = (reference, uid.unwrap_or_default().to_string());
            match inventory.0.get_mut(component) {
                Some(objects) => objects.push(object),
                None => {
                    inventory.0.insert(component.to_string(), vec![object]);
                }
            }
        }
        // Sorted as `record` keeps them; of an object listed twice, the last uid stands.
        for objects in inventory.0.values_mut() {
            objects.sort_by(|(a, _), (b, _)| a.cmp(b));
            objects.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(&mut later.1, &mut kept.1);
                }
                same
            });
        }
        inventory
    }

    /// The inventory as the status stores it: a list sorted by component and object.
    pub(crate) fn to_value(&self) -> Value {
        let mut entries = Vec::new();
        for (component, objects) in &self.0 {
            for (reference, uid) in objects {
                let mut entry = json!({
                    "component": component, "apiVersion": reference.api_version,
                    "kind": reference.kind, "name": reference.name,
                });
                if !uid.is_empty() {
                    entry["uid"] = json!(uid);
                }
                if let Some(ns) = &reference.namespace {
                    entry["namespace"] = json!(ns);
                }
                entries.push(entry);
            }
        }
        Value::Array(entries)
    }

    /// Whether `value` is [`Inventory::to_value`] of this inventory, compared without making
    /// it: a steady reconcile finds the status holding it already.
    pub(crate) fn is_value(&self, value: &Value) -> bool {
        let Some(entries) = value.as_array() else {
            return false;
        };
        let mut entries = entries.iter();
        let ours = self
            .0
            .iter()
            .flat_map(|(component, objects)| objects.iter().map(move |o| (component, o)));
        for (component, (reference, uid)) in ours {
            let Some(entry) = entries.next().and_then(Value::as_object) else {
                return false;
            };
            let fields = [
                ("component", Some(component.as_str())),
                ("apiVersion", Some(reference.api_version.as_str())),
                ("kind", Some(reference.kind.as_str())),
                ("name", Some(reference.name.as_str())),
                ("uid", Some(uid.as_str()).filter(|uid| !uid.is_empty())),
                ("namespace", reference.namespace.as_deref()),
            ];
            let present = fields.iter().filter(|(_, v)| v.is_some()).count();
            let same = fields.iter().all(|(key, expected)| {
                expected.is_none_or(|v| entry.get(*key).and_then(Value::as_str) == Some(v))
            });
            if entry.len() != present || !same {
                return false;
            }
        }
        entries.next().is_none()
    }

    /// Note that `component` applied `reference`, now with `uid`. Nothing is copied for
    /// an entry that is already there, as it is in a steady reconcile.
    pub(crate) fn record(&mut self, component: &str, reference: &ObjectRef, uid: &str) {
        if !self.0.contains_key(component) {
            self.0.insert(component.to_string(), Vec::new());
        }
        let Some(objects) = self.0.get_mut(component) else {
            return;
        };
        match objects.binary_search_by(|(r, _)| r.cmp(reference)) {
            Ok(at) if objects[at].1 == uid => {}
            Ok(at) => objects[at].1 = uid.to_string(),
            Err(at) => objects.insert(at, (reference.clone(), uid.to_string())),
        }
    }

    /// Note that `component` is about to apply `reference` for the first time: a pending
    /// entry, without a uid. Returns whether the entry is new (nothing was recorded for it).
    pub(crate) fn record_pending(&mut self, component: &str, reference: &ObjectRef) -> bool {
        if self.contains(component, reference) {
            return false;
        }
        self.record(component, reference, "");
        true
    }

    /// Whether `component` has an entry for `reference`, pending or not.
    pub(crate) fn contains(&self, component: &str, reference: &ObjectRef) -> bool {
        self.objects(component)
            .binary_search_by(|(r, _)| r.cmp(reference))
            .is_ok()
    }

    /// Forget an object (it is gone, or no longer windlass's).
    pub(crate) fn forget(&mut self, component: &str, reference: &ObjectRef) {
        if let Some(objects) = self.0.get_mut(component) {
            if let Ok(at) = objects.binary_search_by(|(r, _)| r.cmp(reference)) {
                objects.remove(at);
            }
            if objects.is_empty() {
                self.0.remove(component);
            }
        }
    }

    /// The objects `component` applied, with their uids. The uid is empty for a pending
    /// entry: an object recorded before its first write, not yet seen to exist.
    pub fn of(&self, component: &str) -> Vec<(ObjectRef, String)> {
        self.objects(component).to_vec()
    }

    /// [`Inventory::of`], borrowed.
    pub(crate) fn objects(&self, component: &str) -> &[(ObjectRef, String)] {
        self.0.get(component).map_or(&[], Vec::as_slice)
    }

    /// The uid recorded for `component`'s `reference`: `None` when it has no entry, or a
    /// pending one.
    pub(crate) fn uid_of(&self, component: &str, reference: &ObjectRef) -> Option<&str> {
        let objects = self.objects(component);
        let at = objects.binary_search_by(|(r, _)| r.cmp(reference)).ok()?;
        Some(objects[at].1.as_str()).filter(|uid| !uid.is_empty())
    }

    /// The components with recorded objects.
    pub fn components(&self) -> BTreeSet<String> {
        self.component_names().map(str::to_string).collect()
    }

    /// [`Inventory::components`], borrowed, in order.
    pub(crate) fn component_names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// How many objects are recorded, pending ones included.
    pub(crate) fn len(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Inventory::from_status`] as it was, looking each field of an entry up.
    fn from_status_by_lookup(status: &Value) -> Inventory {
        let mut inventory = Inventory::default();
        for entry in status[FIELD].as_array().into_iter().flatten() {
            let text = |key: &str| entry[key].as_str();
            let (Some(component), Some(api_version), Some(kind), Some(name)) = (
                text("component"),
                text("apiVersion"),
                text("kind"),
                text("name"),
            ) else {
                continue;
            };
            let reference = ObjectRef::new(api_version, kind, text("namespace"), name);
            let uid = text("uid").unwrap_or_default().to_string();
            inventory
                .0
                .entry(component.to_string())
                .or_default()
                .push((reference, uid));
        }
        for objects in inventory.0.values_mut() {
            objects.sort_by(|(a, _), (b, _)| a.cmp(b));
            objects.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(&mut later.1, &mut kept.1);
                }
                same
            });
        }
        inventory
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// Reading an entry's fields in one pass finds what looking each up finds, for
        /// entries with fields missing, of other types, or unknown, and for non-maps.
        #[test]
        fn from_status_reads_entries_as_lookups_do(
            entries in proptest::collection::vec(
                proptest::collection::vec(
                    (
                        proptest::sample::select(vec![
                            "component", "apiVersion", "kind", "name", "namespace", "uid", "other",
                        ]),
                        proptest::prop_oneof![
                            proptest::sample::select(vec!["a", "b", ""]).prop_map(Value::from),
                            proptest::strategy::Just(Value::from(3)),
                            proptest::strategy::Just(Value::Null),
                        ],
                    ),
                    0..8,
                ),
                0..6,
            ),
            not_a_map in proptest::bool::ANY,
        ) {
            let mut list: Vec<Value> = entries
                .into_iter()
                .map(|fields| {
                    Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                })
                .collect();
            if not_a_map {
                list.push(json!(["component", "a"]));
            }
            let status = json!({FIELD: list});
            proptest::prop_assert_eq!(Inventory::from_status(&status), from_status_by_lookup(&status));
        }
    }

    #[test]
    fn round_trips_through_the_status_and_drops_malformed_entries() {
        let mut inventory = Inventory::default();
        let cm = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let ns = ObjectRef::new("v1", "Namespace", None, "team");
        inventory.record("web", &cm, "u1");
        inventory.record("tenant", &ns, "u2");
        let mut status = json!({FIELD: inventory.to_value()});
        status[FIELD]
            .as_array_mut()
            .unwrap()
            .push(json!({"component": "x", "kind": 3}));
        let back = Inventory::from_status(&status);
        assert_eq!(back, inventory);
        assert!(inventory.is_value(&inventory.to_value()));
        assert!(!inventory.is_value(&status[FIELD]), "the malformed entry");
        assert!(!Inventory::default().is_value(&inventory.to_value()));
        assert_eq!(back.of("web"), vec![(cm.clone(), "u1".to_string())]);
        let mut emptied = back;
        emptied.forget("web", &cm);
        assert_eq!(emptied.components(), BTreeSet::from(["tenant".to_string()]));
        assert!(Inventory::from_status(&json!({})).is_empty());
        // An object listed twice: the later entry stands, as recording it twice would.
        let entry = |uid: &str| {
            json!({"component": "web", "apiVersion": "v1",
            "kind": "ConfigMap", "namespace": "ns", "name": "a", "uid": uid})
        };
        let twice = Inventory::from_status(&json!({FIELD: [entry("u1"), entry("u2")]}));
        assert_eq!(twice.of("web"), vec![(cm, "u2".to_string())]);
    }

    #[test]
    fn a_pending_entry_has_no_uid_until_the_object_is_applied() {
        let mut inventory = Inventory::default();
        let ns = ObjectRef::new("v1", "Namespace", None, "team");
        assert!(inventory.record_pending("tenant", &ns));
        assert!(!inventory.record_pending("tenant", &ns), "recorded once");
        let value = inventory.to_value();
        assert_eq!(
            value,
            json!([{"component": "tenant", "apiVersion": "v1", "kind": "Namespace", "name": "team"}]),
            "stored without a uid"
        );
        assert!(inventory.is_value(&value));
        let back = Inventory::from_status(&json!({FIELD: value}));
        assert_eq!(back.of("tenant"), vec![(ns.clone(), String::new())]);
        // Applied: the uid replaces the pending entry, and a later pending note keeps it.
        inventory.record("tenant", &ns, "u9");
        assert!(!inventory.record_pending("tenant", &ns));
        assert_eq!(inventory.of("tenant"), vec![(ns, "u9".to_string())]);
        assert!(!inventory.is_value(&back.to_value()));
    }
}
