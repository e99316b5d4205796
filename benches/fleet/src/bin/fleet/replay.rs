//! The same-writes ceiling: the operator's own writes, replayed from one client.
//!
//! A rollout of the fleet is not N × 6 ConfigMap applies: the API server takes an owned
//! Service (a cluster IP to allocate in etcd) at about 3.6 plain ConfigMap applies, an
//! owned ConfigMap or Secret at 1.4, and a `Fleet`'s create and status write at 1.1 and
//! 1.2 (`src/bin/write-costs.rs` measures it); the Ready clock also covers the CRs'
//! creates. So after the operator's run, the benchmark reads back what it wrote — every
//! object a `Fleet` owns, every CR's spec and status, every Event about a `Fleet` — and
//! writes it all again on a fresh control plane from one client with a fixed number of
//! requests in flight: first the CRs' creates, then, CR after CR, its objects' server-side
//! applies, its status write and its Events. The time that takes is what the API server
//! needs for the same writes with no operator at all; the operator's Ready time over it
//! is the operator's own cost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleet_bench::Fleet;
use futures::{FutureExt, StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret, Service};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// What the operator wrote for a fleet, ready to be written again elsewhere.
pub struct Capture {
    /// Per CR: its name, spec and the status the operator wrote.
    crs: Vec<(String, Value, Value)>,
    /// Objects the CRs own: their kind, body (namespace, uid, version and server-set
    /// fields removed) and the name of the owning CR.
    objects: Vec<(ApiResource, Value, String)>,
    /// Events about a CR: body and the CR's name.
    events: Vec<(Value, String)>,
}

impl Capture {
    /// The writes a replay makes.
    pub fn writes(&self) -> usize {
        self.crs.len() * 2 + self.objects.len() + self.events.len()
    }

    /// `1000 creates, 5000 applies, 1000 status writes, 1000 Events`.
    pub fn describe(&self) -> String {
        format!(
            "{} creates, {} applies, {} status writes, {} Events",
            self.crs.len(),
            self.objects.len(),
            self.crs.len(),
            self.events.len()
        )
    }
}

/// Reads back, with `client` (not the operator's), what the operator wrote in `namespace`.
pub async fn capture(client: &kube::Client, namespace: &str) -> Capture {
    let fleets: Api<Fleet> = Api::namespaced(client.clone(), namespace);
    let crs = fleets
        .list(&ListParams::default())
        .await
        .expect("the fleet's CRs are listed")
        .items
        .into_iter()
        .map(|cr| {
            (
                cr.metadata.name.clone().expect("a CR has a name"),
                serde_json::to_value(&cr.spec).expect("a spec serializes"),
                serde_json::to_value(&cr.status).expect("a status serializes"),
            )
        })
        .collect();
    let mut objects = Vec::new();
    for kind in [
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<Secret>(&()),
        ApiResource::erase::<Service>(&()),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kind);
        for object in api
            .list(&ListParams::default())
            .await
            .expect("the fleet's objects are listed")
            .items
        {
            let Some(owner) = object
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Fleet")
                .map(|o| o.name.clone())
            else {
                continue;
            };
            let stored = serde_json::to_value(&object).expect("an object serializes");
            // What the operator sent, not what the server stored: its apply's field set
            // picks the fields out of the stored object (the server's defaults and
            // allocations, a Service's cluster IP and IP families, stay out).
            let sent = object
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .find(|entry| {
                    entry.operation.as_deref() == Some("Apply")
                        && entry.subresource.as_deref().is_none_or(str::is_empty)
                })
                .and_then(|entry| entry.fields_v1.as_ref())
                .and_then(|fields| fields.0.as_object())
                .expect("the operator's apply is in the object's managed fields");
            let mut body = pick(&stored, sent);
            body["metadata"]["name"] = json!(object.metadata.name);
            body["apiVersion"] = json!(kind.api_version);
            body["kind"] = json!(kind.kind);
            objects.push((kind.clone(), body, owner));
        }
    }
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let events = events
        .list(&ListParams::default().fields("involvedObject.kind=Fleet"))
        .await
        .expect("the fleet's Events are listed")
        .items
        .into_iter()
        .map(|event| {
            let about = event.involved_object.name.clone().unwrap_or_default();
            let mut body = serde_json::to_value(&event).expect("an Event serializes");
            body["metadata"] = json!({ "name": event.metadata.name });
            (body, about)
        })
        .collect();
    Capture {
        crs,
        objects,
        events,
    }
}

/// The parts of `value` that the managed-fields set `fields` (a `fieldsV1`) names.
///
/// Enough for what windlass sends: maps, and lists keyed by fields (`k:`) or values
/// (`v:`). List items named by index (`i:`, atomic lists) are left out, and a named
/// field the stored object lacks is left out too; neither occurs in the fleet's objects.
fn pick(value: &Value, fields: &serde_json::Map<String, Value>) -> Value {
    let sub = |key: &str| fields.get(key).and_then(Value::as_object);
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(name, field)| {
                    let inner = sub(&format!("f:{name}"))?;
                    // An empty set owns the whole value (a leaf, or an atomic map or list).
                    Some((
                        name.clone(),
                        if inner.is_empty() {
                            field.clone()
                        } else {
                            pick(field, inner)
                        },
                    ))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter_map(|item| {
                    let inner = fields
                        .iter()
                        .find(|(key, _)| element_is(key, item))
                        .and_then(|(_, inner)| inner.as_object())?;
                    Some(if inner.keys().all(|k| k == ".") {
                        item.clone()
                    } else {
                        pick(item, inner)
                    })
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether a `fieldsV1` list key (`k:{"port":80,…}` by its key fields, `v:"a"` by value)
/// names `item`.
fn element_is(key: &str, item: &Value) -> bool {
    if let Some(keys) = key.strip_prefix("k:") {
        serde_json::from_str::<serde_json::Map<String, Value>>(keys)
            .is_ok_and(|keys| keys.iter().all(|(k, v)| item.get(k) == Some(v)))
    } else if let Some(value) = key.strip_prefix("v:") {
        serde_json::from_str::<Value>(value).is_ok_and(|v| &v == item)
    } else {
        false
    }
}

/// Writes `capture` again into `namespace` from `client`, `in_flight` requests at a time;
/// how long it took, from the first create to the last write.
pub async fn replay(
    client: &kube::Client,
    namespace: &str,
    capture: &Capture,
    in_flight: usize,
) -> Duration {
    let fleets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<Fleet>(&()));
    let start = Instant::now();
    // Each CR's uid (for the owner references and Events) and version (for its status).
    let created: BTreeMap<String, (String, String)> = stream::iter(&capture.crs)
        .map(|(name, spec, _)| {
            let fleets = fleets.clone();
            async move {
                let cr: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "bench.windlass.dev/v1alpha1", "kind": "Fleet",
                    "metadata": {"name": name}, "spec": spec,
                }))
                .expect("a CR body");
                let cr = fleets.create(&PostParams::default(), &cr).await?;
                let (uid, version) = (cr.metadata.uid, cr.metadata.resource_version);
                Ok::<_, kube::Error>((name.clone(), (uid, version)))
            }
        })
        .buffer_unordered(in_flight.max(1))
        .map_ok(|(name, (uid, version))| {
            (
                name,
                (
                    uid.expect("a created CR has a uid"),
                    version.expect("and a version"),
                ),
            )
        })
        .try_collect()
        .await
        .expect("the replay's CRs are created");
    let uid = |cr: &str| created.get(cr).map(|(uid, _)| uid.clone());

    let apply = PatchParams::apply("fleet-replay").force();
    let applies = capture.objects.iter().map(|(kind, body, owner)| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, kind);
        let mut body = body.clone();
        if let Some(references) = body["metadata"]["ownerReferences"].as_array_mut() {
            for reference in references
                .iter_mut()
                .filter(|r| r["kind"] == "Fleet" && r["name"] == owner.as_str())
            {
                reference["uid"] = json!(uid(owner));
            }
        }
        let apply = apply.clone();
        let write = async move {
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            api.patch(&name, &apply, &Patch::Apply(&body))
                .await
                .map(drop)
        };
        (owner, write.boxed())
    });
    let statuses = capture.crs.iter().map(|(name, _, status)| {
        let version = created.get(name).map(|(_, v)| v.clone());
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bench.windlass.dev/v1alpha1", "kind": "Fleet",
            "metadata": {"name": name, "resourceVersion": version}, "status": status,
        }))
        .expect("a status body");
        let fleets = fleets.clone();
        let write = async move {
            fleets
                .replace_status(
                    &body.metadata.name.clone().unwrap_or_default(),
                    &PostParams::default(),
                    &body,
                )
                .await
                .map(drop)
        };
        (name, write.boxed())
    });
    let events: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<Event>(&()));
    let event_creates = capture.events.iter().map(|(body, about)| {
        let mut body = body.clone();
        body["involvedObject"]["namespace"] = json!(namespace);
        body["involvedObject"]["uid"] = json!(uid(about));
        let body: DynamicObject = serde_json::from_value(body).expect("an Event body");
        let events = events.clone();
        let write = async move { events.create(&PostParams::default(), &body).await.map(drop) };
        (about, write.boxed())
    });
    // One CR's writes after another's, as an operator makes them (a block of a thousand
    // Services in a row would contend for the cluster-IP allocator more than the operator
    // ever does); within a CR: its objects, its status, its Events.
    let mut writes: Vec<_> = applies.chain(statuses).chain(event_creates).collect();
    writes.sort_by_key(|(cr, _)| *cr);
    stream::iter(writes.into_iter().map(|(_, write)| write))
        .buffer_unordered(in_flight.max(1))
        .try_collect::<Vec<()>>()
        .await
        .expect("the replay's writes succeed");
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_keeps_what_the_field_set_names_and_drops_the_servers_defaults() {
        let stored = json!({
            "metadata": {"name": "s", "uid": "u", "labels": {"a": "1", "b": "2"},
                "ownerReferences": [{"uid": "o", "kind": "Fleet"}, {"uid": "p", "kind": "X"}]},
            "spec": {"clusterIP": "10.0.0.7", "ipFamilies": ["IPv4"], "type": "ClusterIP",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080, "name": "web"}],
                "selector": {"app": "x"}},
        });
        let fields = json!({
            "f:metadata": {"f:labels": {"f:a": {}},
                "f:ownerReferences": {"k:{\"uid\":\"o\"}": {".": {}}}},
            "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}":
                {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                "f:selector": {}},
        });
        let sent = pick(&stored, fields.as_object().unwrap());
        assert_eq!(
            sent,
            json!({
                "metadata": {"labels": {"a": "1"},
                    "ownerReferences": [{"uid": "o", "kind": "Fleet"}]},
                "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
                    "selector": {"app": "x"}},
            })
        );
    }
}
