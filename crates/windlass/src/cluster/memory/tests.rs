use super::*;
use crate::cluster::parse_labels;
use serde_json::json;
use std::collections::BTreeMap;

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": data})
}

fn cm_ref(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "ConfigMap", Some("default"), name)
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
}

#[tokio::test]
async fn uid_and_creation_timestamp_survive_updates() {
    let c = MemoryCluster::new();
    let first = c
        .apply(&cm("a", json!({"k": "1"})), WriteMethod::Apply)
        .await
        .unwrap();
    let second = c
        .apply(&cm("a", json!({"k": "2"})), WriteMethod::Replace)
        .await
        .unwrap();
    let third = c
        .apply(&cm("a", json!({"k": "3"})), WriteMethod::Update)
        .await
        .unwrap();
    assert!(first.uid().is_some());
    assert_eq!(first.uid(), second.uid());
    assert_eq!(first.uid(), third.uid());
    assert_eq!(
        first["metadata"]["creationTimestamp"],
        third["metadata"]["creationTimestamp"]
    );
}

#[tokio::test]
async fn resource_versions_are_monotonic_and_only_bumped_by_changes() {
    let c = MemoryCluster::new();
    let rv = |v: &Value| v.resource_version().unwrap().parse::<u64>().unwrap();
    let a = c
        .apply(&cm("a", json!({"k": "1"})), WriteMethod::Apply)
        .await
        .unwrap();
    let b = c
        .apply(&cm("b", json!({"k": "1"})), WriteMethod::Apply)
        .await
        .unwrap();
    let a2 = c
        .apply(&cm("a", json!({"k": "2"})), WriteMethod::Apply)
        .await
        .unwrap();
    assert!(rv(&a) < rv(&b) && rv(&b) < rv(&a2));
    let a3 = c
        .apply(&cm("a", json!({"k": "2"})), WriteMethod::Apply)
        .await
        .unwrap();
    assert_eq!(
        rv(&a2),
        rv(&a3),
        "a no-op apply must not bump the resourceVersion"
    );
}

#[tokio::test]
async fn stale_resource_version_is_a_conflict() {
    let c = MemoryCluster::new();
    let a = c
        .apply(&cm("a", json!({"k": "1"})), WriteMethod::Apply)
        .await
        .unwrap();
    c.apply(&cm("a", json!({"k": "2"})), WriteMethod::Apply)
        .await
        .unwrap();
    let mut stale = cm("a", json!({"k": "3"}));
    stale["metadata"]["resourceVersion"] = a["metadata"]["resourceVersion"].clone();
    let err = c.apply(&stale, WriteMethod::Replace).await.unwrap_err();
    assert!(matches!(err, ClusterError::Conflict { .. }), "{err}");
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only() {
    let c = MemoryCluster::new();
    let d = c
        .apply(&deployment("web", 1), WriteMethod::Apply)
        .await
        .unwrap();
    assert_eq!(d.generation(), Some(1));
    let mut labelled = deployment("web", 1);
    labelled["metadata"]["labels"] = json!({"a": "b"});
    let d = c.apply(&labelled, WriteMethod::Apply).await.unwrap();
    assert_eq!(
        d.generation(),
        Some(1),
        "metadata changes keep the generation"
    );
    let r = ObjectRef::from_manifest(&d).unwrap();
    let d = c
        .write_status(&r, &json!({"readyReplicas": 1}), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        d.generation(),
        Some(1),
        "status changes keep the generation"
    );
    let d = c
        .apply(&deployment("web", 3), WriteMethod::Apply)
        .await
        .unwrap();
    assert_eq!(d.generation(), Some(2));
}

#[tokio::test]
async fn status_is_kept_apart_from_spec() {
    let c = MemoryCluster::new();
    let mut with_status = deployment("web", 1);
    with_status["status"] = json!({"readyReplicas": 9});
    let d = c.apply(&with_status, WriteMethod::Apply).await.unwrap();
    assert!(d.get("status").is_none(), "apply ignores status");
    let r = ObjectRef::from_manifest(&d).unwrap();
    c.write_status(&r, &json!({"readyReplicas": 1}), None)
        .await
        .unwrap();
    let d = c.apply(&with_status, WriteMethod::Replace).await.unwrap();
    assert_eq!(
        d["status"],
        json!({"readyReplicas": 1}),
        "replace keeps the stored status"
    );
    let missing = ObjectRef::new("apps/v1", "Deployment", Some("default"), "nope");
    assert_eq!(
        c.write_status(&missing, &json!({}), None).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn server_side_apply_removes_only_fields_the_manager_stopped_setting() {
    let c = MemoryCluster::new();
    c.apply(
        &cm("a", json!({"mine": "1", "gone": "2"})),
        WriteMethod::Apply,
    )
    .await
    .unwrap();
    // Someone else (kubectl edit) adds a key with a merge update.
    c.apply(&cm("a", json!({"theirs": "3"})), WriteMethod::Update)
        .await
        .unwrap();
    let after = c
        .apply(&cm("a", json!({"mine": "1"})), WriteMethod::Apply)
        .await
        .unwrap();
    assert_eq!(after["data"], json!({"mine": "1", "theirs": "3"}));
}

#[tokio::test]
async fn update_merges_and_null_deletes() {
    let c = MemoryCluster::new();
    c.apply(&cm("a", json!({"x": "1", "y": "2"})), WriteMethod::Apply)
        .await
        .unwrap();
    let after = c
        .apply(&cm("a", json!({"y": null, "z": "3"})), WriteMethod::Update)
        .await
        .unwrap();
    assert_eq!(after["data"], json!({"x": "1", "z": "3"}));
    let replaced = c
        .apply(&cm("a", json!({"only": "1"})), WriteMethod::Replace)
        .await
        .unwrap();
    assert_eq!(replaced["data"], json!({"only": "1"}));
}

#[tokio::test]
async fn finalizers_hold_deletion_and_none_may_be_added_meanwhile() {
    let c = MemoryCluster::new();
    let mut obj = cm("a", json!({}));
    obj["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    c.apply(&obj, WriteMethod::Apply).await.unwrap();
    assert_eq!(
        c.delete(&cm_ref("a"), None).await.unwrap(),
        Deletion::Terminating
    );
    let held = c.get(&cm_ref("a")).await.unwrap().unwrap();
    assert!(held.is_terminating());
    let mut more = obj.clone();
    more["metadata"]["finalizers"] = json!(["example.com/cleanup", "another"]);
    let err = c.apply(&more, WriteMethod::Apply).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::Invalid { .. }),
        "a 422, as the API server answers: {err}"
    );
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/cleanup"},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]))
    .unwrap();
    let answer = c.patch(&cm_ref("a"), &patch).await.unwrap();
    assert_eq!(
        c.get(&cm_ref("a")).await.unwrap(),
        None,
        "gone once the last finalizer is removed"
    );
    // As the API server answers: the object as the write left it, at the version it had.
    assert_eq!(answer.resource_version(), held.resource_version());
    assert!(crate::object::deleted_by_write(&answer));

    // The finalizer helper tells the caller the object is gone.
    c.apply(&obj, WriteMethod::Apply).await.unwrap();
    c.delete(&cm_ref("a"), None).await.unwrap();
    let held = c.get(&cm_ref("a")).await.unwrap().unwrap();
    let removed =
        crate::cluster::finalizer::remove(&c, &cm_ref("a"), held, "example.com/cleanup").await;
    assert_eq!(removed.unwrap(), None);
}

#[tokio::test]
async fn failed_patch_test_is_invalid() {
    let c = MemoryCluster::new();
    c.apply(&cm("a", json!({})), WriteMethod::Apply)
        .await
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": "999"},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
    ]))
    .unwrap();
    let err = c.patch(&cm_ref("a"), &patch).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::Invalid { .. }),
        "a 422, as the API server answers: {err}"
    );
}

#[tokio::test]
async fn deleting_an_owner_collects_its_dependents() {
    let c = MemoryCluster::new();
    let owner = c
        .apply(&cm("owner", json!({})), WriteMethod::Apply)
        .await
        .unwrap();
    let other = c
        .apply(&cm("other", json!({})), WriteMethod::Apply)
        .await
        .unwrap();
    let owner_ref = |o: &Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.name(), "uid": o.uid()});
    let mut child = cm("child", json!({}));
    child["metadata"]["ownerReferences"] = json!([owner_ref(&owner)]);
    let mut grandchild = cm("grandchild", json!({}));
    let child_stored = c.apply(&child, WriteMethod::Apply).await.unwrap();
    grandchild["metadata"]["ownerReferences"] = json!([owner_ref(&child_stored)]);
    c.apply(&grandchild, WriteMethod::Apply).await.unwrap();
    let mut shared = cm("shared", json!({}));
    shared["metadata"]["ownerReferences"] = json!([owner_ref(&owner), owner_ref(&other)]);
    c.apply(&shared, WriteMethod::Apply).await.unwrap();

    assert_eq!(
        c.delete(&cm_ref("owner"), None).await.unwrap(),
        Deletion::Deleted
    );
    assert_eq!(c.get(&cm_ref("child")).await.unwrap(), None);
    assert_eq!(c.get(&cm_ref("grandchild")).await.unwrap(), None);
    let kept = c
        .get(&cm_ref("shared"))
        .await
        .unwrap()
        .expect("one owner is still there");
    assert_eq!(
        kept["metadata"]["ownerReferences"],
        json!([owner_ref(&other)]),
        "the collector drops the reference to the deleted owner, as a real one does"
    );
}

#[tokio::test]
async fn namespaces_must_exist_and_deleting_one_deletes_its_contents() {
    let c = MemoryCluster::new();
    let mut obj = cm("a", json!({}));
    obj["metadata"]["namespace"] = json!("shop");
    assert!(matches!(
        c.apply(&obj, WriteMethod::Apply).await,
        Err(ClusterError::NotFound(_))
    ));
    c.create_namespace("shop").unwrap();
    c.apply(&obj, WriteMethod::Apply).await.unwrap();
    let ns = ObjectRef::new("v1", "Namespace", None, "shop");
    assert_eq!(c.delete(&ns, None).await.unwrap(), Deletion::Deleted);
    let a = ObjectRef::new("v1", "ConfigMap", Some("shop"), "a");
    assert_eq!(c.get(&a).await.unwrap(), None);
    assert_eq!(c.get(&ns).await.unwrap(), None);
}

#[tokio::test]
async fn names_labels_and_kinds_are_validated() {
    let c = MemoryCluster::new();
    let err = c
        .apply(&cm("Not_Valid", json!({})), WriteMethod::Apply)
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Invalid { .. }), "{err}");
    let mut bad_label = cm("a", json!({}));
    bad_label["metadata"]["labels"] = json!({"app": "has space"});
    assert!(c.apply(&bad_label, WriteMethod::Apply).await.is_err());
    let unknown = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}});
    assert!(matches!(
        c.apply(&unknown, WriteMethod::Apply).await,
        Err(ClusterError::UnknownKind { .. })
    ));
}

#[tokio::test]
async fn applying_a_crd_serves_its_kinds() {
    let c = MemoryCluster::new();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
                 "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}
    });
    c.apply(&crd, WriteMethod::Apply).await.unwrap();
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ignored"}});
    let stored = c.apply(&widget, WriteMethod::Apply).await.unwrap();
    assert_eq!(
        stored.namespace(),
        None,
        "cluster-scoped objects have no namespace"
    );
}

#[tokio::test]
async fn list_filters_by_namespace_and_selectors() {
    let c = MemoryCluster::new();
    c.create_namespace("other").unwrap();
    for (name, ns, tier) in [
        ("a", "default", "web"),
        ("b", "default", "db"),
        ("c", "other", "web"),
    ] {
        let mut o = cm(name, json!({}));
        o["metadata"]["namespace"] = json!(ns);
        o["metadata"]["labels"] = json!({"tier": tier});
        c.apply(&o, WriteMethod::Apply).await.unwrap();
    }
    let ty = TypeRef::new("v1", "ConfigMap");
    let names = |v: Vec<Value>| {
        v.iter()
            .map(|o| o.name().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(c.list(&ListQuery::new(ty.clone(), None)).await.unwrap()),
        ["a", "b", "c"]
    );
    assert_eq!(
        names(
            c.list(&ListQuery::new(ty.clone(), Some("default")))
                .await
                .unwrap()
        ),
        ["a", "b"]
    );
    assert_eq!(
        names(
            c.list(&ListQuery::new(ty.clone(), None).labels(parse_labels("tier=web").unwrap()))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            c.list(&ListQuery::new(ty, None).fields("metadata.namespace=other"))
                .await
                .unwrap()
        ),
        ["c"]
    );
}

#[tokio::test]
async fn owner_references_merge_by_uid_under_apply() {
    let c = MemoryCluster::new();
    let mut obj = cm("a", json!({}));
    obj["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u1"}]);
    c.apply(&obj, WriteMethod::Apply).await.unwrap();
    // Another writer adds a second owner.
    let r = cm_ref("a");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/ownerReferences/-", "value": {"apiVersion": "v1", "kind": "ConfigMap", "name": "y", "uid": "u2"}}
    ])).unwrap();
    c.patch(&r, &patch).await.unwrap();
    let after = c.apply(&obj, WriteMethod::Apply).await.unwrap();
    let uids: Vec<&str> = after["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uid"].as_str().unwrap())
        .collect();
    assert_eq!(uids, ["u1", "u2"]);
}

#[tokio::test]
async fn changes_are_published_as_watch_events() {
    let c = MemoryCluster::new();
    let mut rx = c.subscribe();
    c.apply(&cm("a", json!({"k": "1"})), WriteMethod::Apply)
        .await
        .unwrap();
    c.apply(&cm("a", json!({"k": "1"})), WriteMethod::Apply)
        .await
        .unwrap();
    c.apply(&cm("a", json!({"k": "2"})), WriteMethod::Apply)
        .await
        .unwrap();
    c.delete(&cm_ref("a"), None).await.unwrap();
    let types: Vec<WatchEventType> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        types,
        [
            WatchEventType::Added,
            WatchEventType::Modified,
            WatchEventType::Deleted
        ]
    );
}

#[tokio::test]
async fn secret_string_data_is_stored_as_data() {
    let c = MemoryCluster::new();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
        "data": {"a": "YQ=="}, "stringData": {"b": "bee"}});
    let stored = c.apply(&secret, WriteMethod::Apply).await.unwrap();
    assert_eq!(stored["data"], json!({"a": "YQ==", "b": "YmVl"}));
    assert!(stored.get("stringData").is_none());
    // As on a real server: the apply's managed fields are the ones sent.
    let fields = &stored["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(fields["f:stringData"], json!({"f:b": {}}), "{fields}");
    assert_eq!(fields["f:data"], json!({"f:a": {}}), "{fields}");
}

#[tokio::test]
async fn status_is_an_ordinary_field_of_crds_without_a_status_subresource() {
    let c = MemoryCluster::new();
    let crd = |subresources: Value| {
        json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Thing", "plural": "things"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": subresources}]}})
    };
    c.apply(&crd(json!({})), WriteMethod::Apply).await.unwrap();
    let thing = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t", "namespace": "default"}, "status": {"x": 1}});
    assert_eq!(
        c.apply(&thing, WriteMethod::Apply).await.unwrap()["status"],
        json!({"x": 1})
    );
    c.apply(&crd(json!({"status": {}})), WriteMethod::Apply)
        .await
        .unwrap();
    let mut other = thing.clone();
    other["metadata"]["name"] = json!("u");
    assert!(
        c.apply(&other, WriteMethod::Apply)
            .await
            .unwrap()
            .get("status")
            .is_none()
    );
}

#[tokio::test]
async fn loaded_objects_keep_their_identity_status_and_owners() {
    let c = MemoryCluster::new();
    let owner = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "owner-uid", "creationTimestamp": "2020-01-01T00:00:00Z", "generation": 4},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}},
        "status": {"readyReplicas": 1}});
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "shop", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "owner-uid"}]}});
    let orphan = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "orphan", "namespace": "shop", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "missing-uid"}]}});
    c.load([owner, child, orphan]).unwrap();
    let web = c
        .get(&ObjectRef::new(
            "apps/v1",
            "Deployment",
            Some("shop"),
            "web",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(web.uid(), Some("owner-uid"));
    assert_eq!(web["metadata"]["creationTimestamp"], "2020-01-01T00:00:00Z");
    assert_eq!(web.generation(), Some(4));
    assert_eq!(web["status"], json!({"readyReplicas": 1}));
    assert!(
        c.get(&ObjectRef::new("v1", "ConfigMap", Some("shop"), "cfg"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        c.get(&ObjectRef::new("v1", "ConfigMap", Some("shop"), "orphan"))
            .await
            .unwrap()
            .is_none(),
        "its owner was never there"
    );
    // An unrelated deletion leaves the owned object alone.
    c.apply(&cm("x", json!({})), WriteMethod::Apply)
        .await
        .unwrap();
    c.delete(&cm_ref("x"), None).await.unwrap();
    assert!(
        c.get(&ObjectRef::new("v1", "ConfigMap", Some("shop"), "cfg"))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn another_managers_edit_takes_the_field_and_an_apply_takes_it_back() {
    use crate::rollout::drift::{Drift, drift, stamp};
    let c = MemoryCluster::new();
    let mut desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v", "other": "o"}});
    stamp(&mut desired);
    let stored = c.apply(&desired, WriteMethod::Apply).await.unwrap();
    assert_eq!(
        drift(
            &desired,
            Some(&stored),
            WriteMethod::Apply,
            crate::FIELD_MANAGER
        ),
        Drift::InSync
    );
    // kubectl edit changes one field windlass applied.
    let edit = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "edited"}});
    c.update_as("kubectl-edit", &edit, WriteMethod::Update)
        .unwrap();
    let live = c.get(&cm_ref("a")).await.unwrap().unwrap();
    assert_eq!(
        drift(
            &desired,
            Some(&live),
            WriteMethod::Apply,
            crate::FIELD_MANAGER
        ),
        Drift::Taken("data.k".into()),
        "only the changed field changes hands: {:#}",
        live["metadata"]["managedFields"]
    );
    let back = c.apply(&desired, WriteMethod::Apply).await.unwrap();
    assert_eq!(back["data"]["k"], "v");
    assert_eq!(
        drift(
            &desired,
            Some(&back),
            WriteMethod::Apply,
            crate::FIELD_MANAGER
        ),
        Drift::InSync
    );
}

/// The resourceVersion of an event's object.
fn event_rv(event: &WatchEvent) -> u64 {
    event
        .object
        .resource_version()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("an event without a numeric resourceVersion: {event:?}"))
}

#[test]
fn watch_events_come_in_resource_version_order_across_concurrent_writers() {
    // A watch resumes from the last resourceVersion it saw and a watch cache keeps the
    // newest object per key: both need every event, each with a resourceVersion greater
    // than the one before, whatever the number of writers. Writers on their own threads
    // create, change, write the status of and delete objects, while a watcher on another
    // thread receives the events; replaying them must end with exactly what the store holds.
    const WRITERS: usize = 4;
    const ROUNDS: usize = 500;
    let c = MemoryCluster::new();
    use futures::executor::block_on;
    let owner = block_on(c.apply(&cm("owner", json!({})), WriteMethod::Apply)).unwrap();
    let mut rx = c.subscribe();
    let events = std::thread::scope(|threads| {
        let watcher = threads.spawn(move || {
            let mut events = Vec::new();
            loop {
                let event = rx.blocking_recv().expect("the watcher keeps up");
                let last = event.object.name() == Some("last");
                events.push(event);
                if last {
                    return events;
                }
            }
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (c, owner) = (&c, &owner);
                threads.spawn(move || {
                    block_on(async move {
                        for round in 0..ROUNDS {
                            let name = format!("w{writer}-{}", round % 7);
                            let mut object = cm(&name, json!({"round": round.to_string()}));
                            if round % 3 == 0 {
                                object["metadata"]["ownerReferences"] =
                                    json!([{"apiVersion": "v1", "kind": "ConfigMap",
                                            "name": "owner", "uid": owner.uid()}]);
                            }
                            c.apply(&object, WriteMethod::Apply).await.unwrap();
                            let reference = cm_ref(&name);
                            c.write_status(&reference, &json!({"round": round}), None)
                                .await
                                .unwrap();
                            if round % 4 == 1 {
                                c.delete(&reference, None).await.unwrap();
                            }
                        }
                    })
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        // Deleting the owner collects its dependents: several deletions in one operation.
        block_on(c.delete(&cm_ref("owner"), None)).unwrap();
        block_on(c.apply(&cm("last", json!({})), WriteMethod::Apply)).unwrap();
        watcher.join().unwrap()
    });

    assert!(
        events.len() > WRITERS * ROUNDS * 2,
        "{} events",
        events.len()
    );
    for pair in events.windows(2) {
        assert!(
            event_rv(&pair[0]) < event_rv(&pair[1]),
            "resourceVersion {} ({:?} {}) came before {} ({:?} {})",
            event_rv(&pair[0]),
            pair[0].event_type,
            pair[0].object.name().unwrap_or("?"),
            event_rv(&pair[1]),
            pair[1].event_type,
            pair[1].object.name().unwrap_or("?"),
        );
    }
    assert!(
        events
            .iter()
            .any(|e| e.event_type == WatchEventType::Deleted && e.object.name() != Some("owner")),
        "deletions are among the events"
    );

    // A watch cache fed by the events holds what the store holds.
    let mut cache = BTreeMap::new();
    for event in &events {
        let name = event.object.name().unwrap().to_string();
        match event.event_type {
            WatchEventType::Deleted => {
                cache.remove(&name);
            }
            WatchEventType::Added | WatchEventType::Modified => {
                cache.insert(name, event.object.clone());
            }
        }
    }
    let stored: BTreeMap<String, Value> = c
        .objects()
        .into_iter()
        .filter(|o| o.kind() == Some("ConfigMap") && o.namespace() == Some("default"))
        .map(|o| (o.name().unwrap().to_string(), o))
        .collect();
    assert_eq!(cache, stored);
}
