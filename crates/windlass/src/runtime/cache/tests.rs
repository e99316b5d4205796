use super::packed::{Key, Packed, Read};
use super::written::WrittenCopy;
use super::*;
use crate::cluster::DATA_DIGEST;
use crate::rollout::dependency_hash::data_digest;
use serde_json::json;
use std::collections::HashSet;

fn cm(name: &str, rv: &str) -> (ObjectRef, Arc<Value>) {
    let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}});
    (ObjectRef::from_manifest(&v).unwrap(), Arc::new(v))
}

#[test]
fn a_kind_lent_to_shared_stores_is_answered_from_there_and_its_own_copies_go() {
    let shared = Arc::new(Stores::new());
    let shard = Stores::over(shared.clone());
    let (a, a_obj) = cm("a", "1");
    let (b, b_obj) = cm("b", "2");
    let kind = a.type_ref();
    // The shard watched the kind by label before; the shared stores watch it whole.
    shard.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
    shard.replace(&kind, Some("ns"), vec![(a.clone(), a_obj.clone())]);
    shared.declare(&kind, None, Keep::Whole);
    shared.replace(&kind, Some("ns"), vec![(b.clone(), b_obj.clone())]);
    assert_eq!(shard.lookup_metadata(&b), Cached::Unknown, "not lent yet");

    shard.lend(&kind);
    assert_eq!(shard.lookup(&b), Cached::Present((*b_obj).clone()));
    assert_eq!(
        shard.lookup(&a),
        Cached::Absent,
        "the shared watch is complete"
    );
    assert!(shard.is_synced(&kind, Some("ns")));
    assert_eq!(shard.held_version(&b), Some(Some("2".into())));
    assert!(shard.sizes().is_empty(), "the shard's own copies are gone");
    let secret = ObjectRef::new("v1", "Secret", Some("ns"), "s");
    assert_eq!(
        shard.lookup(&secret),
        Cached::Unknown,
        "other kinds: its own"
    );

    // Stores over nothing lend nothing.
    let alone = Stores::new();
    alone.declare(&kind, None, Keep::Whole);
    alone.replace(&kind, Some("ns"), vec![(a.clone(), a_obj.clone())]);
    alone.lend(&kind);
    assert_eq!(alone.lookup(&a), Cached::Present((*a_obj).clone()));
}

#[test]
fn a_store_answers_only_for_what_its_watch_covers() {
    let stores = Stores::new();
    let (a, a_obj) = cm("a", "1");
    let (b, _) = cm("b", "1");
    assert_eq!(stores.lookup(&a), Cached::Unknown, "no watch yet");
    stores.declare(
        &a.type_ref(),
        Some(crate::annotations::OWNER_UID),
        Keep::Whole,
    );
    stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
    assert_eq!(stores.lookup(&a), Cached::Present((*a_obj).clone()));
    assert_eq!(
        stores.lookup(&b),
        Cached::Unknown,
        "label-scoped: ask the server"
    );
    let elsewhere = ObjectRef::new("v1", "ConfigMap", Some("other"), "a");
    assert_eq!(
        stores.lookup(&elsewhere),
        Cached::Unknown,
        "namespace not watched"
    );

    assert_eq!(
        stores.lookup_own(&b),
        Cached::Absent,
        "about to write it: no labelled object of that name exists"
    );
    stores.declare(&a.type_ref(), Some("app=other"), Keep::Whole);
    assert_eq!(
        stores.lookup_own(&b),
        Cached::Unknown,
        "another selector cannot tell"
    );
    // A whole watch replaces the label-scoped one: it knows once it has listed.
    stores.declare(&a.type_ref(), None, Keep::Whole);
    assert_eq!(stores.lookup(&b), Cached::Unknown, "not listed yet");
    assert_eq!(stores.lookup(&a), Cached::Unknown, "not listed yet");
    stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
    assert_eq!(stores.lookup(&b), Cached::Absent, "a complete watch knows");
    assert_eq!(stores.lookup(&a), Cached::Present((*a_obj).clone()));
}

#[test]
fn a_relist_removes_what_is_gone_in_its_namespace_only() {
    let stores = Stores::new();
    let (a, a_obj) = cm("a", "1");
    let (b, b_obj) = cm("b", "1");
    let other = ObjectRef::new("v1", "ConfigMap", Some("other"), "c");
    stores.replace(
        &a.type_ref(),
        Some("ns"),
        vec![(a.clone(), a_obj), (b.clone(), b_obj.clone())],
    );
    stores.upsert(other.clone(), &json!({}));
    let gone = stores.replace(&a.type_ref(), Some("ns"), vec![(b.clone(), b_obj)]);
    assert_eq!(gone.len(), 1);
    assert!(
        stores.objects(&a.type_ref()).len() == 2,
        "b and the other namespace's c"
    );
}

#[test]
fn a_store_lists_only_what_a_complete_watch_has_listed() {
    let stores = Stores::new();
    let (a, a_obj) = cm("a", "1");
    let query = ListQuery::new(a.type_ref(), Some("ns"));
    assert!(stores.list(&query).is_none(), "no watch yet");
    stores.declare(
        &a.type_ref(),
        Some(crate::annotations::OWNER_UID),
        Keep::Whole,
    );
    stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
    assert!(
        stores.list(&query).is_none(),
        "label-scoped: objects without the label exist too"
    );
    stores.declare(&a.type_ref(), None, Keep::Whole);
    assert!(
        stores.list(&query).is_none(),
        "the whole watch has not listed"
    );
    stores.replace(&a.type_ref(), Some("ns"), vec![(a.clone(), a_obj.clone())]);
    assert_eq!(stores.list(&query).map(|l| l.len()), Some(1));
    let everywhere = ListQuery::new(a.type_ref(), None);
    assert!(
        stores.list(&everywhere).is_none(),
        "only one namespace is listed"
    );
    let other = ListQuery::new(a.type_ref(), Some("other"));
    assert!(stores.list(&other).is_none(), "namespace not watched");

    stores.replace(&a.type_ref(), None, vec![(a.clone(), a_obj)]);
    assert_eq!(stores.list(&other).map(|l| l.len()), Some(0));
    assert_eq!(stores.list(&everywhere).map(|l| l.len()), Some(1));
}

/// A Deployment as the API server returns it, with what a rollout does not read.
fn deployment(rv: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "resourceVersion": rv,
            "generation": 2, "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {crate::annotations::OWNER_UID: "cr", "app": "web"},
            "annotations": {crate::annotations::APPLIED_HASH: "h",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"huge\": 1}"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "cr", "uid": "cr"}],
            "managedFields": [{"manager": crate::FIELD_MANAGER, "operation": "Apply",
                "time": "2026-01-01T00:00:00Z", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}},
        "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2, "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})
}

#[test]
fn a_slim_store_keeps_what_a_rollout_reads_and_answers_only_own_reads() {
    let stores = Stores::new();
    let full = deployment("5");
    let reference = ObjectRef::from_manifest(&full).unwrap();
    let kind = reference.type_ref();
    stores.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
    stores.replace(
        &kind,
        Some("ns"),
        vec![(reference.clone(), Arc::new(full.clone()))],
    );
    let Cached::Present(slim) = stores.lookup_own(&reference) else {
        panic!("an own read is answered");
    };
    let mut expected = full.clone();
    expected["spec"] = json!({"replicas": 2});
    let metadata = expected["metadata"].as_object_mut().unwrap();
    for dropped in ["creationTimestamp", "ownerReferences"] {
        metadata.remove(dropped);
    }
    metadata["labels"].as_object_mut().unwrap().remove("app");
    metadata["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    metadata["managedFields"][0]
        .as_object_mut()
        .unwrap()
        .remove("time");
    assert_eq!(slim, expected);
    // What deploying and verifying read answers the same from the slim copy.
    assert_eq!(
        crate::verify::verify_object(&slim),
        crate::verify::verify_object(&full)
    );
    assert!(crate::verify::verify_object(&slim));
    assert_eq!(
        crate::rollout::drift::drift(
            &full,
            Some(&slim),
            crate::cluster::WriteMethod::Apply,
            crate::FIELD_MANAGER
        ),
        crate::rollout::drift::drift(
            &full,
            Some(&full),
            crate::cluster::WriteMethod::Apply,
            crate::FIELD_MANAGER
        ),
    );
    assert_eq!(
        stores.lookup(&reference),
        Cached::Unknown,
        "a whole read asks the server"
    );
    assert_eq!(stores.lookup_metadata(&reference), Cached::Present(slim));
    let sizes = stores.sizes();
    assert_eq!(sizes.len(), 1);
    assert_eq!((sizes[0].1, sizes[0].2), (1, expected.to_string().len()));

    // Watched whole from now on: the partial copies go, and the store answers once listed.
    stores.declare(&kind, None, Keep::Whole);
    assert_eq!(stores.lookup_own(&reference), Cached::Unknown);
    assert_eq!(stores.sizes()[0].2, 0);
    stores.replace(
        &kind,
        Some("ns"),
        vec![(reference.clone(), Arc::new(full.clone()))],
    );
    assert_eq!(stores.lookup(&reference), Cached::Present(full));
}

/// A Secret windlass applied (labelled, with its managed fields) and 64 KiB of data.
fn big_secret(data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "tls", "namespace": "ns", "resourceVersion": "7", "uid": "u1",
            "labels": {crate::annotations::OWNER_UID: "cr-uid", "app": "web"},
            "managedFields": [{"manager": crate::FIELD_MANAGER, "operation": "Apply",
                "fieldsV1": {"f:data": {"f:key": {}}}, "time": "2026-01-01T00:00:00Z"}]},
        "type": "Opaque",
        "data": {"key": data.repeat(64 * 1024 / data.len())}})
}

#[test]
fn a_digest_store_keeps_a_digest_of_the_data_and_answers_dependency_and_own_reads_only() {
    let stores = Stores::new();
    let secret = big_secret("aGVsbG8h");
    let reference = ObjectRef::from_manifest(&secret).unwrap();
    let kind = reference.type_ref();
    stores.declare(&kind, None, Keep::Digest);
    stores.replace(
        &kind,
        Some("ns"),
        vec![(reference.clone(), Arc::new(secret.clone()))],
    );
    let Cached::Present(kept) = stores.lookup_with(&reference, Read::Dependency) else {
        panic!("a dependency read is answered");
    };
    assert!(kept.get("data").is_none(), "no data is kept: {kept}");
    assert_eq!(kept[DATA_DIGEST], json!(data_digest(&secret)));
    // What a dependency hash and a rollout read of it is the same as of the whole.
    let dependency = crate::rollout::dependency_hash::Dependency {
        kind: crate::rollout::dependency_hash::DependencyKind::Secret,
        name: "tls".into(),
        optional: false,
    };
    assert_eq!(
        crate::rollout::dependency_hash::hash([(&dependency, Some(&kept))]),
        crate::rollout::dependency_hash::hash([(&dependency, Some(&secret))]),
    );
    assert_eq!(kept.resource_version(), Some("7"));
    assert_eq!(
        kept.label(crate::annotations::OWNER_UID),
        Some("cr-uid"),
        "windlass's own label, which the rollout reads"
    );
    assert_eq!(stores.lookup_own(&reference), Cached::Present(kept.clone()));
    let sizes = stores.sizes();
    assert!(
        sizes[0].2 < 1024,
        "{} bytes kept of a 64 KiB Secret",
        sizes[0].2
    );
    // Another object's data changes its digest.
    let changed = big_secret("Ynll");
    assert_ne!(data_digest(&changed), data_digest(&secret));

    // Whole reads, and lists, ask the server: the store has no data to give.
    assert_eq!(stores.lookup(&reference), Cached::Unknown);
    let query = ListQuery::new(kind.clone(), Some("ns"));
    assert!(stores.list(&query).is_none());
    // A store of the kind that is complete knows what is absent.
    let other = ObjectRef::new("v1", "Secret", Some("ns"), "other");
    assert_eq!(stores.lookup_with(&other, Read::Dependency), Cached::Absent);

    // A slim store has no digest to give a dependency read; becoming a digest store,
    // it lists afresh.
    let slim = Stores::new();
    slim.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
    slim.replace(
        &kind,
        Some("ns"),
        vec![(reference.clone(), Arc::new(secret.clone()))],
    );
    assert_eq!(
        slim.lookup_with(&reference, Read::Dependency),
        Cached::Unknown
    );
    slim.declare(&kind, None, Keep::Digest);
    assert_eq!(slim.sizes()[0].2, 0, "the slim copies go");
    assert_eq!(
        slim.lookup_with(&reference, Read::Dependency),
        Cached::Unknown,
        "not listed yet"
    );
}

#[test]
fn an_object_read_whole_from_a_partial_store_is_kept_whole_until_it_goes() {
    let stores = Stores::new();
    let secret = big_secret("aGVsbG8h");
    let reference = ObjectRef::from_manifest(&secret).unwrap();
    let kind = reference.type_ref();
    let mut other = big_secret("Ynll");
    other["metadata"]["name"] = json!("other");
    let other_ref = ObjectRef::from_manifest(&other).unwrap();
    stores.declare(&kind, None, Keep::Digest);
    stores.replace(
        &kind,
        Some("ns"),
        vec![
            (reference.clone(), Arc::new(secret.clone())),
            (other_ref.clone(), Arc::new(other.clone())),
        ],
    );
    let digests = stores.sizes()[0].2;
    assert_eq!(stores.lookup(&reference), Cached::Unknown);

    // The server's answer is the version held: kept whole at once.
    stores.keep_whole(&reference, &secret);
    assert_eq!(stores.lookup(&reference), Cached::Present(secret.clone()));
    assert!(stores.sizes()[0].2 > digests + 60 * 1024);
    assert_eq!(
        stores.lookup(&other_ref),
        Cached::Unknown,
        "the rest stay digests"
    );
    // And so is the watch's next copy of it.
    let mut newer = secret.clone();
    newer["metadata"]["resourceVersion"] = json!("8");
    newer["data"]["key"] = json!("bmV3");
    stores.upsert(reference.clone(), &newer);
    assert_eq!(stores.lookup(&reference), Cached::Present(newer.clone()));
    // Gone: a copy of it that comes back is a digest again.
    stores.remove(&reference);
    stores.upsert(reference.clone(), &newer);
    assert_eq!(stores.lookup(&reference), Cached::Unknown);
    assert_eq!(stores.sizes()[0].2, digests);

    // An answer older or newer than the copy held: the watch's next copy is whole.
    let mut stale = other.clone();
    stale["metadata"]["resourceVersion"] = json!("6");
    stores.keep_whole(&other_ref, &stale);
    assert_eq!(stores.lookup(&other_ref), Cached::Unknown);
    stores.upsert(other_ref.clone(), &other);
    assert_eq!(stores.lookup(&other_ref), Cached::Present(other.clone()));

    // An object the store does not hold (outside its watch) is not marked.
    let label_scoped = Stores::new();
    label_scoped.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
    label_scoped.replace(&kind, Some("ns"), Vec::new());
    label_scoped.keep_whole(&reference, &secret);
    label_scoped.upsert(reference.clone(), &secret);
    assert_eq!(label_scoped.lookup(&reference), Cached::Unknown);
}

#[test]
fn a_list_stored_as_it_came_drops_what_it_no_longer_has_when_it_ends() {
    let stores = Stores::new();
    let (a, a_obj) = cm("a", "1");
    let (b, b_obj) = cm("b", "1");
    let kind = a.type_ref();
    stores.declare(&kind, None, Keep::Whole);
    stores.upsert(a.clone(), &a_obj);
    assert_eq!(stores.lookup(&a), Cached::Unknown, "not listed yet");
    let gone = stores.retain_listed(&kind, Some("ns"), &HashSet::from([a.clone()]));
    assert!(gone.is_empty());
    assert_eq!(stores.lookup(&a), Cached::Present((*a_obj).clone()));
    // A relist that reports b only: a went while the watch was down.
    stores.upsert(b.clone(), &b_obj);
    let gone = stores.retain_listed(&kind, Some("ns"), &HashSet::from([b.clone()]));
    assert_eq!(gone, vec![a_obj]);
    assert_eq!(stores.lookup(&a), Cached::Absent);
    assert_eq!(stores.sizes()[0].1, 1);
    assert_eq!(stores.sizes()[0].2, b_obj.to_string().len());
}

/// A cluster over `stores` whose API server is never asked (nothing listens there).
fn cached(stores: Arc<Stores>) -> CachedCluster {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let live = LiveCluster::new(kube::Client::try_from(config).unwrap());
    CachedCluster::new(Arc::new(live), stores)
}

/// The ConfigMap `a` at `rv` with `data`.
fn cm_with(rv: &str, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
            "managedFields": [{"manager": crate::FIELD_MANAGER, "operation": "Apply",
                "fieldsV1": {"f:data": {"f:k": {}}}}]},
        "data": {"k": data}})
}

#[tokio::test]
async fn a_written_copy_answers_whole_until_the_watch_delivers_its_version() {
    let stores = Arc::new(Stores::new());
    let v1 = cm_with("1", "old");
    let a = ObjectRef::from_manifest(&v1).unwrap();
    stores.declare(&a.type_ref(), None, Keep::Whole);
    stores.replace(
        &a.type_ref(),
        Some("ns"),
        vec![(a.clone(), Arc::new(v1.clone()))],
    );
    let cluster = cached(stores.clone());

    let v2 = cm_with("2", "new");
    cluster.remember(a.clone(), &v2);
    assert_eq!(
        cluster.get(&a).await.unwrap(),
        Some(v2.clone()),
        "read your write"
    );
    assert_eq!(cluster.get_own(&a).await.unwrap(), Some(v2.clone()));
    let listed = cluster
        .list(&ListQuery::new(a.type_ref(), Some("ns")))
        .await;
    assert_eq!(listed.unwrap(), vec![v2.clone()], "lists read it too");

    // An older version delivered: the copy stays.
    cluster.observed(&a, Some(&v1));
    assert_eq!(cluster.get(&a).await.unwrap(), Some(v2.clone()));
    // Its echo: the store answers, and the copy is gone.
    stores.upsert(a.clone(), &v2);
    cluster.observed(&a, Some(&v2));
    assert!(cluster.written.lock().copies.is_empty());
    assert_eq!(cluster.get(&a).await.unwrap(), Some(v2.clone()));

    // A write whose echo came before its response: nothing is kept.
    let v3 = cm_with("3", "newer");
    stores.upsert(a.clone(), &v3);
    cluster.remember(a.clone(), &v3);
    assert!(
        cluster.written.lock().copies.is_empty(),
        "the store has it already"
    );

    // A delete: gone for this process until the watch says so.
    cluster.remember_gone(a.clone(), None);
    assert_eq!(cluster.get(&a).await.unwrap(), None);
    cluster.observed(&a, None);
    assert!(cluster.written.lock().copies.is_empty());
}

#[tokio::test]
async fn a_write_that_deleted_its_object_leaves_it_gone_though_the_store_has_its_version() {
    // Deleted while held by one finalizer: the watch delivered the terminating copy.
    let stores = Arc::new(Stores::new());
    let mut held = cm_with("5", "x");
    held["metadata"]["deletionTimestamp"] = json!("2026-11-29T12:00:00Z");
    held["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    let a = ObjectRef::from_manifest(&held).unwrap();
    stores.declare(&a.type_ref(), None, Keep::Whole);
    stores.replace(
        &a.type_ref(),
        Some("ns"),
        vec![(a.clone(), Arc::new(held.clone()))],
    );
    let cluster = cached(stores);

    // The patch that removes the finalizer deletes it; the server answers at version 5.
    let mut released = held.clone();
    released["metadata"]["finalizers"] = json!([]);
    cluster.landed(a.clone(), &released, cluster.own.begin(&a));
    assert_eq!(
        cluster.get(&a).await.unwrap(),
        None,
        "gone, not the store's copy with the finalizer"
    );
    assert_eq!(cluster.own_version(&a).await.unwrap(), None);
    assert!(cluster.own.is_own_delete(&a));

    // The watch delivered the deletion before the write's answer came back: nothing is
    // kept, so the object re-created under the same name is seen as soon as delivered.
    cluster.stores.remove(&a);
    cluster.observed(&a, None);
    cluster.landed(a.clone(), &released, cluster.own.begin(&a));
    assert!(cluster.written.lock().copies.is_empty());
    let recreated = cm_with("9", "again");
    cluster.stores.upsert(a.clone(), &recreated);
    cluster.observed(&a, Some(&recreated));
    assert_eq!(cluster.get(&a).await.unwrap(), Some(recreated.clone()));
    // … and so when the re-creation had been delivered too: the store's copy is newer.
    cluster.landed(a.clone(), &released, cluster.own.begin(&a));
    assert_eq!(cluster.get(&a).await.unwrap(), Some(recreated));

    // A terminating object that keeps a grace period is still there after the write.
    let mut graceful = released.clone();
    graceful["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    graceful["metadata"]["resourceVersion"] = json!("10");
    cluster.landed(a.clone(), &graceful, cluster.own.begin(&a));
    assert_eq!(cluster.get(&a).await.unwrap(), Some(graceful));
}

#[tokio::test(start_paused = true)]
async fn a_written_copy_past_its_ttl_gives_way_and_is_swept_by_a_later_write() {
    let stores = Arc::new(Stores::new());
    let v1 = cm_with("1", "old");
    let a = ObjectRef::from_manifest(&v1).unwrap();
    let b = ObjectRef::new("v1", "ConfigMap", Some("ns"), "b");
    stores.declare(&a.type_ref(), None, Keep::Whole);
    stores.replace(
        &a.type_ref(),
        Some("ns"),
        vec![(a.clone(), Arc::new(v1.clone()))],
    );
    let cluster = cached(stores);
    // A version the watch never delivers.
    cluster.remember(a.clone(), &cm_with("2", "new"));
    tokio::time::advance(WRITTEN_TTL + std::time::Duration::from_millis(1)).await;
    let listed = cluster
        .list(&ListQuery::new(a.type_ref(), Some("ns")))
        .await;
    assert_eq!(
        listed.unwrap(),
        vec![v1.clone()],
        "past its TTL: the store's"
    );
    assert!(
        cluster.written.lock().copies.contains_key(&a),
        "not swept by a read"
    );
    let mut b_object = cm_with("1", "b");
    b_object["metadata"]["name"] = json!("b");
    cluster.remember(b.clone(), &b_object);
    let written = cluster.written.lock();
    assert!(!written.copies.contains_key(&a), "swept by the next write");
    assert!(written.copies.contains_key(&b));
}

#[test]
fn a_packed_copy_tells_its_resource_version_without_being_unpacked() {
    let whole = Packed::new(&deployment("7"), Keep::Whole);
    let slim = Packed::new(&deployment("8"), Keep::Slim);
    let digest = Packed::new(&big_secret("x"), Keep::Digest);
    assert_eq!(whole.resource_version().as_deref(), Some("7"));
    assert_eq!(slim.resource_version().as_deref(), Some("8"));
    assert_eq!(
        digest.resource_version(),
        big_secret("x")["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string)
    );
    // Read off the start of the text, where every copy has it; the order of the text's
    // fields is not the object's.
    for packed in [&whole, &slim, &digest] {
        assert!(
            packed.0.starts_with(r#"{"metadata":{"resourceVersion":""#),
            "{}",
            packed.0
        );
    }
    assert_eq!(whole.unpack(), Some(deployment("7")));
    let without = Packed::new(&json!({"metadata": {"name": "x"}}), Keep::Whole);
    assert_eq!(without.resource_version(), None);
    assert_eq!(
        Packed::new(&json!({}), Keep::Whole).resource_version(),
        None
    );

    let stores = Stores::new();
    let reference = ObjectRef::from_manifest(&deployment("9")).unwrap();
    assert_eq!(stores.held_version(&reference), None, "no watch");
    stores.declare(
        &reference.type_ref(),
        Some(crate::annotations::OWNER_UID),
        Keep::Slim,
    );
    stores.upsert(reference.clone(), &deployment("9"));
    assert_eq!(stores.held_version(&reference), None, "not listed yet");
    stores.retain_listed(
        &reference.type_ref(),
        Some("ns"),
        &HashSet::from([reference.clone()]),
    );
    assert_eq!(stores.held_version(&reference), Some(Some("9".to_string())));
}

#[test]
fn a_key_gives_back_the_reference_it_was_made_of() {
    let kind = TypeRef::new("v1", "ConfigMap");
    let namespaced = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
    let key = Key::of(&namespaced);
    assert_eq!(key.namespace(), Some("ns"));
    assert_eq!(key.reference(&kind), namespaced);
    let cluster = ObjectRef::new("v1", "Namespace", None, "ns");
    let key = Key::of(&cluster);
    assert_eq!(key.namespace(), None);
    assert_eq!(key.reference(&TypeRef::new("v1", "Namespace")), cluster);
    assert_ne!(
        Key::of(&namespaced),
        Key::of(&ObjectRef::new("v1", "ConfigMap", Some("n"), "sa"))
    );
}

#[test]
fn resource_versions_compare_as_integers() {
    let (_, v9) = cm("a", "9");
    let (_, v10) = cm("a", "10");
    let (v9, v10) = (WrittenCopy::new(&v9), WrittenCopy::new(&v10));
    assert!(v10.newer_than(Some("9")));
    assert!(!v9.newer_than(Some("10")));
    assert!(!v10.newer_than(Some("10")));
    assert!(v10.newer_than(None), "unknown counts as newer");
    assert!(v10.newer_than(Some("abc")), "not an integer: newer");
}

#[tokio::test]
async fn a_written_copy_older_than_a_partial_copy_held_does_not_answer_a_whole_read() {
    let stores = Arc::new(Stores::new());
    let mut written = big_secret("aGVsbG8h");
    written["metadata"]["resourceVersion"] = json!("8");
    let reference = ObjectRef::from_manifest(&written).unwrap();
    let kind = reference.type_ref();
    stores.declare(&kind, None, Keep::Digest);
    stores.replace(&kind, Some("ns"), Vec::new());
    let cluster = cached(stores.clone());

    // The watch holds an older version: the written copy answers.
    let mut older = written.clone();
    older["metadata"]["resourceVersion"] = json!("7");
    stores.upsert(reference.clone(), &older);
    cluster.remember(reference.clone(), &written);
    assert_eq!(
        cluster.get(&reference).await.unwrap(),
        Some(written.clone())
    );

    // Another writer's newer version reached the watch before the echo of this one's: the
    // written copy is stale, and the read goes to the server (here: none listens).
    let mut newer = written.clone();
    newer["metadata"]["resourceVersion"] = json!("9");
    stores.upsert(reference.clone(), &newer);
    assert!(
        cluster.get(&reference).await.is_err(),
        "asked the server, not answered with the stale copy"
    );
}

/// `own_version` answers with the version of the copy `get_own` would answer with, and
/// only where that copy is the store's: not over a copy this process wrote, not after a
/// conflict that makes the next read go to the API server.
#[tokio::test]
async fn the_version_of_a_copy_is_told_only_where_the_store_alone_answers() {
    let stores = Arc::new(Stores::new());
    let v1 = cm_with("1", "old");
    let a = ObjectRef::from_manifest(&v1).unwrap();
    let kind = a.type_ref();
    let cluster = cached(stores.clone());
    assert_eq!(cluster.own_version(&a).await.unwrap(), None, "no watch");
    stores.declare(&kind, Some(crate::annotations::OWNER_UID), Keep::Slim);
    stores.replace(&kind, Some("ns"), vec![(a.clone(), Arc::new(v1.clone()))]);
    assert_eq!(cluster.own_version(&a).await.unwrap(), Some("1".into()));
    let (b, _) = cm("b", "1");
    assert_eq!(cluster.own_version(&b).await.unwrap(), None, "absent");

    let v2 = cm_with("2", "new");
    cluster.remember(a.clone(), &v2);
    assert_eq!(
        cluster.own_version(&a).await.unwrap(),
        None,
        "a written copy is laid over the store's"
    );
    stores.upsert(a.clone(), &v2);
    cluster.observed(&a, Some(&v2));
    assert_eq!(cluster.own_version(&a).await.unwrap(), Some("2".into()));

    let conflict = Err::<(), _>(ClusterError::Conflict {
        object: a.to_string(),
        message: "the object has been modified".into(),
    });
    let _ = cluster.on_error(&a, conflict);
    assert_eq!(
        cluster.own_version(&a).await.unwrap(),
        None,
        "the next read goes to the API server"
    );
    assert!(
        cluster.stale.lock().contains(&a),
        "and asking did not take that from it"
    );
}
