//! Server-side apply's field ownership: merging what a manager applies into the stored
//! object, removing the fields it stopped applying, taking fields from managers when
//! another writer changes them, and showing what a manager owns as `managedFields`.
//!
//! Pure functions over JSON values; the store keeps, per object, what each manager last
//! applied (`Entry::applied`) and calls these on every write.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The field set of an applied configuration in the API's `FieldsV1` shape: `f:<key>` per
/// map key, `{}` for leaves and (atomic, here) lists.
pub(super) fn fields_v1(applied: &Value, top: bool) -> Value {
    let Some(map) = applied.as_object() else {
        return json!({});
    };
    let mut fields = Map::new();
    for (key, value) in map {
        if top && (key == "apiVersion" || key == "kind") {
            continue;
        }
        let child = match value {
            Value::Object(_) => fields_v1(value, false),
            _ => json!({}),
        };
        fields.insert(format!("f:{key}"), child);
    }
    Value::Object(fields)
}

/// Server-side apply's ownership rule: a field whose value a write changes now belongs to
/// that writer, so every other manager's applied configuration loses it. `writer` is the
/// manager of an apply; `None` for updates and patches, which take fields from every
/// applier.
pub(super) fn disown_changed(
    applied: &mut BTreeMap<String, Value>,
    writer: Option<&str>,
    stored: &Value,
    next: &Value,
) {
    fn prune(config: &mut Value, stored: &Value, next: &Value) {
        let Some(map) = config.as_object_mut() else {
            return;
        };
        map.retain(|key, value| {
            let (before, after) = (stored.get(key), next.get(key));
            match value {
                Value::Object(inner) if !inner.is_empty() => {
                    prune(
                        value,
                        before.unwrap_or(&Value::Null),
                        after.unwrap_or(&Value::Null),
                    );
                    after.is_some()
                }
                _ => before == after,
            }
        });
    }
    for (manager, config) in applied.iter_mut() {
        if Some(manager.as_str()) != writer {
            prune(config, stored, next);
        }
    }
}

/// Remove from `base` what the manager applied before (`previous`) and no longer applies
/// (`desired`): server-side apply's "fields you stop owning are removed".
pub(super) fn remove_unapplied(base: &mut Value, previous: &Value, desired: &Value, top: bool) {
    let (Some(base_map), Some(previous)) = (base.as_object_mut(), previous.as_object()) else {
        return;
    };
    for (key, prev_value) in previous {
        match desired.get(key) {
            None => {
                if !(top && key == "metadata") {
                    base_map.remove(key);
                }
            }
            Some(desired_value) => {
                if let Some(child) = base_map.get_mut(key) {
                    if top && key == "metadata" {
                        remove_unapplied_metadata(child, prev_value, desired_value);
                    } else if prev_value.is_object() && desired_value.is_object() {
                        remove_unapplied(child, prev_value, desired_value, false);
                    }
                }
            }
        }
    }
}

/// [`remove_unapplied`] for `metadata`, whose `finalizers` and `ownerReferences` lose only
/// the items the manager stopped applying (they merge item by item, not as a whole).
fn remove_unapplied_metadata(base: &mut Value, previous: &Value, desired: &Value) {
    for list in ["finalizers", "ownerReferences"] {
        let previous_items = previous.get(list).and_then(Value::as_array);
        let desired_items = desired.get(list).and_then(Value::as_array);
        if let (Some(prev), Some(items)) = (
            previous_items,
            base.get_mut(list).and_then(Value::as_array_mut),
        ) {
            items.retain(|item| {
                let was_ours = prev.iter().any(|p| same_item(list, p, item));
                let still_ours =
                    desired_items.is_some_and(|d| d.iter().any(|p| same_item(list, p, item)));
                !was_ours || still_ours
            });
        }
    }
    let mut previous = previous.clone();
    let mut desired = desired.clone();
    for list in ["finalizers", "ownerReferences"] {
        previous.as_object_mut().map(|m| m.remove(list));
        desired.as_object_mut().map(|m| m.remove(list));
    }
    remove_unapplied(base, &previous, &desired, false);
}

/// Merge what is applied into `base`: maps recursively, lists replaced, except the
/// metadata lists whose list type is a set (`finalizers`) or a map keyed by uid
/// (`ownerReferences`), which are unioned.
pub(super) fn merge_applied(base: &mut Value, desired: &Value, top: bool) {
    let (Some(base_map), Some(desired_map)) = (base.as_object_mut(), desired.as_object()) else {
        *base = desired.clone();
        return;
    };
    for (key, value) in desired_map {
        match base_map.get_mut(key) {
            Some(existing) if top && key == "metadata" => merge_applied_metadata(existing, value),
            Some(existing) if existing.is_object() && value.is_object() => {
                merge_applied(existing, value, false)
            }
            _ => {
                base_map.insert(key.clone(), value.clone());
            }
        }
    }
}

/// [`merge_applied`] for `metadata`: `finalizers` and `ownerReferences` gain the applied
/// items (an owner reference of the same uid is replaced), other fields merge as maps.
fn merge_applied_metadata(existing: &mut Value, value: &Value) {
    let Some(existing_map) = existing.as_object_mut() else {
        *existing = value.clone();
        return;
    };
    for (mkey, mvalue) in value.as_object().into_iter().flatten() {
        if let ("finalizers" | "ownerReferences", Some(items)) = (mkey.as_str(), mvalue.as_array())
        {
            let list = existing_map
                .entry(mkey.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Some(list) = list.as_array_mut() {
                for item in items {
                    match list.iter_mut().find(|i| same_item(mkey, i, item)) {
                        Some(slot) => *slot = item.clone(),
                        None => list.push(item.clone()),
                    }
                }
            }
        } else {
            match existing_map.get_mut(mkey) {
                Some(slot) if slot.is_object() && mvalue.is_object() => {
                    merge_applied(slot, mvalue, false)
                }
                _ => {
                    existing_map.insert(mkey.clone(), mvalue.clone());
                }
            }
        }
    }
}

/// Whether two items of the metadata list `list` are the same item: owner references by
/// uid, finalizers by value.
fn same_item(list: &str, a: &Value, b: &Value) -> bool {
    match list {
        "ownerReferences" => a.get("uid").is_some() && a.get("uid") == b.get("uid"),
        _ => a == b,
    }
}
