//! The in-memory cluster against the real API server: every scenario runs on both and
//! records what a client can observe; the records must be equal.

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use windlass::ClusterError;
use windlass::cluster::{Cluster, Deletion, ListQuery, MemoryCluster, WriteMethod, parse_labels};
use windlass::object::{ManifestExt, ObjectRef, TypeRef};

use crate::{eventually, live};
use windlass_testenv::{restricted_container_security, restricted_pod_security};

type Scenario = for<'a> fn(&'a dyn Cluster, &'a str) -> BoxFuture<'a, Vec<String>>;

async fn compare(name: &str, scenario: Scenario) {
    let memory = MemoryCluster::new();
    memory.create_namespace("conformance").unwrap();
    memory.register_crd(&<windlass::testing::Widget as kube::CustomResourceExt>::crd());
    let in_memory = scenario(&memory, "conformance").await;

    let (live, env) = live().await;
    let ns = env.namespace("conformance").await.unwrap();
    let on_server = scenario(live.as_ref(), ns.name()).await;
    assert_eq!(
        in_memory, on_server,
        "{name}: the in-memory cluster (left) and the API server (right) disagree"
    );
}

fn kind_of(result: Result<Value, ClusterError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(ClusterError::UnknownKind { .. }) => "unknown kind".into(),
        Err(ClusterError::NotFound(_)) => "not found".into(),
        Err(ClusterError::Conflict { .. }) => "conflict".into(),
        Err(ClusterError::Invalid { .. }) => "invalid".into(),
        Err(ClusterError::Forbidden(_)) => "forbidden".into(),
        Err(ClusterError::Api { message, .. }) => format!("api error: {message}"),
    }
}

fn rv(object: &Value) -> u64 {
    object
        .resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn configmap(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

fn cm_ref(ns: &str, name: &str) -> ObjectRef {
    ObjectRef::new("v1", "ConfigMap", Some(ns), name)
}

fn widget(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget", "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn identity<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let cm = configmap(ns, "a", json!({"k": "1"}));
        let a = c.apply(&cm, WriteMethod::Apply).await.unwrap();
        let b = c.apply(&cm, WriteMethod::Apply).await.unwrap();
        let d = c
            .apply(&configmap(ns, "a", json!({"k": "2"})), WriteMethod::Apply)
            .await
            .unwrap();
        let e = c
            .apply(&configmap(ns, "a", json!({"k": "3"})), WriteMethod::Replace)
            .await
            .unwrap();
        vec![
            format!("uid set: {}", a.uid().is_some()),
            format!(
                "no-op apply keeps the resourceVersion: {}",
                rv(&a) == rv(&b)
            ),
            format!(
                "changes increase the resourceVersion: {}",
                rv(&b) < rv(&d) && rv(&d) < rv(&e)
            ),
            format!("uid stable: {}", a.uid() == e.uid()),
            format!(
                "creationTimestamp stable: {}",
                a["metadata"]["creationTimestamp"] == e["metadata"]["creationTimestamp"]
            ),
            format!("ConfigMap generation: {:?}", e.generation()),
        ]
    }
    .boxed()
}

fn generation_and_status<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let mut w = widget(ns, "w", json!({"size": 1}));
        w["status"] = json!({"ignored": true});
        let created = c.apply(&w, WriteMethod::Apply).await.unwrap();
        let r = ObjectRef::from_manifest(&created).unwrap();
        let mut labelled = widget(ns, "w", json!({"size": 1}));
        labelled["metadata"]["labels"] = json!({"a": "b"});
        let after_label = c.apply(&labelled, WriteMethod::Apply).await.unwrap();
        let after_status = c
            .write_status(&r, &json!({"phase": "Ready"}), None)
            .await
            .unwrap()
            .unwrap();
        let mut bigger = labelled.clone();
        bigger["spec"]["size"] = json!(2);
        let after_spec = c.apply(&bigger, WriteMethod::Apply).await.unwrap();
        let gone = ObjectRef::new("test.windlass.dev/v1", "Widget", Some(ns), "nope");
        vec![
            format!(
                "status in an apply ignored: {}",
                created.get("status").is_none()
            ),
            format!(
                "generations: {:?} {:?} {:?} {:?}",
                created.generation(),
                after_label.generation(),
                after_status.generation(),
                after_spec.generation()
            ),
            format!("status written: {}", after_status["status"]),
            format!("status kept by a spec apply: {}", after_spec["status"]),
            format!(
                "status of a missing object: {:?}",
                c.write_status(&gone, &json!({}), None)
                    .await
                    .map(|o| o.is_some())
            ),
        ]
    }
    .boxed()
}

/// Which kinds carry `metadata.generation`: those whose registry strategy sets it (Pods and
/// Jobs too, on current servers) and those whose does not.
fn generation_by_kind<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let pod = json!({"securityContext": restricted_pod_security(), "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "securityContext": restricted_container_security()}]});
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns}, "spec": pod}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": ns},
                "spec": {"template": {"spec": pod}}}),
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj", "namespace": ns},
                "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": {"spec": pod}}}}}),
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb", "namespace": ns},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np", "namespace": ns},
                "spec": {"podSelector": {}}}),
            configmap(ns, "cm", json!({"k": "v"})),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": ns},
                "spec": {"ports": [{"port": 80}]}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": ns}}),
        ];
        let mut seen = Vec::new();
        for object in &objects {
            let applied = c.apply(object, WriteMethod::Apply).await.unwrap();
            seen.push(format!("{} generation: {:?}", object["kind"], applied.generation()));
        }
        seen
    }
    .boxed()
}

fn workload_generation<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let deployment = |replicas: i64, labels: Value| json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": ns, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"securityContext": restricted_pod_security(), "containers": [{"name": "c", "image": "busybox", "securityContext": restricted_container_security()}]}}}});
        let a = c.apply(&deployment(1, json!({})), WriteMethod::Apply).await.unwrap();
        let b = c.apply(&deployment(1, json!({"x": "y"})), WriteMethod::Apply).await.unwrap();
        let d = c.apply(&deployment(2, json!({"x": "y"})), WriteMethod::Apply).await.unwrap();
        vec![format!("Deployment generations: {:?} {:?} {:?}", a.generation(), b.generation(), d.generation())]
    }
    .boxed()
}

fn apply_ownership<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        c.apply(
            &configmap(ns, "a", json!({"mine": "1", "gone": "2"})),
            WriteMethod::Apply,
        )
        .await
        .unwrap();
        c.apply(
            &configmap(ns, "a", json!({"theirs": "3"})),
            WriteMethod::Update,
        )
        .await
        .unwrap();
        let applied = c
            .apply(
                &configmap(ns, "a", json!({"mine": "1"})),
                WriteMethod::Apply,
            )
            .await
            .unwrap();
        let merged = c
            .apply(
                &configmap(ns, "a", json!({"theirs": null, "more": "4"})),
                WriteMethod::Update,
            )
            .await
            .unwrap();
        let replaced = c
            .apply(
                &configmap(ns, "a", json!({"only": "5"})),
                WriteMethod::Replace,
            )
            .await
            .unwrap();
        vec![
            format!(
                "apply drops what it stopped setting, keeps others': {}",
                applied["data"]
            ),
            format!("merge patch null deletes: {}", merged["data"]),
            format!("replace: {}", replaced["data"]),
        ]
    }
    .boxed()
}

fn finalizers<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let mut cm = configmap(ns, "held", json!({}));
        cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
        c.apply(&cm, WriteMethod::Update).await.unwrap();
        let r = cm_ref(ns, "held");
        let deletion = c.delete(&r, None).await.unwrap();
        let held = c.get(&r).await.unwrap().unwrap();
        let mut more = cm.clone();
        more["metadata"]["finalizers"] = json!(["example.com/hold", "example.com/other"]);
        let adding = kind_of(c.apply(&more, WriteMethod::Update).await);
        let failed_test: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "wrong"},
            {"op": "remove", "path": "/metadata/finalizers/0"}]))
        .unwrap();
        let failing_patch = kind_of(c.patch(&r, &failed_test).await);
        let release: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/hold"},
            {"op": "remove", "path": "/metadata/finalizers/0"}]))
        .unwrap();
        let released = c.patch(&r, &release).await.unwrap();
        vec![
            format!("delete with a finalizer: {deletion:?}"),
            format!("deletionTimestamp set: {}", held.is_terminating()),
            format!("adding a finalizer while terminating: {adding}"),
            format!("a failed JSON-patch test: {failing_patch}"),
            format!(
                "the releasing patch answers the last state stored: finalizers {:?}, terminating {}, version newer than the terminating copy's: {}",
                released.finalizers(),
                released.is_terminating(),
                rv(&released) > rv(&held)
            ),
            format!("gone once released: {}", c.get(&r).await.unwrap().is_none()),
            format!("deleting again: {:?}", c.delete(&r, None).await.unwrap()),
        ]
    }
    .boxed()
}

fn errors<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let first = c.apply(&configmap(ns, "a", json!({"k": "1"})), WriteMethod::Apply).await.unwrap();
        c.apply(&configmap(ns, "a", json!({"k": "2"})), WriteMethod::Apply).await.unwrap();
        let mut stale = configmap(ns, "a", json!({"k": "3"}));
        stale["metadata"]["resourceVersion"] = first["metadata"]["resourceVersion"].clone();
        let unknown = json!({"apiVersion": "nope.example.com/v1", "kind": "Nothing", "metadata": {"name": "n", "namespace": ns}});
        let mut bad_label = configmap(ns, "b", json!({}));
        bad_label["metadata"]["labels"] = json!({"k": "not valid!"});
        let mut bad_finalizer = configmap(ns, "c", json!({}));
        bad_finalizer["metadata"]["finalizers"] = json!(["example.com/not a name!"]);
        vec![
            format!("stale resourceVersion: {}", kind_of(c.apply(&stale, WriteMethod::Replace).await)),
            format!("invalid name: {}", kind_of(c.apply(&configmap(ns, "Not_Valid", json!({})), WriteMethod::Apply).await)),
            format!("invalid label: {}", kind_of(c.apply(&bad_label, WriteMethod::Apply).await)),
            format!("invalid finalizer: {}", kind_of(c.apply(&bad_finalizer, WriteMethod::Apply).await)),
            format!("unknown kind: {}", kind_of(c.apply(&unknown, WriteMethod::Apply).await)),
            format!("missing namespace: {}", kind_of(c.apply(&configmap("no-such-namespace", "a", json!({})), WriteMethod::Apply).await)),
            format!("get of a missing object: {:?}", c.get(&cm_ref(ns, "missing")).await.map(|o| o.is_some())),
        ]
    }
    .boxed()
}

/// Fields of the wrong type and workloads the server's validation refuses, as an author's
/// component might render them: a dry run must refuse them as the server does.
fn typed_fields<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let deployment = |name: &str, spec: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns}, "spec": spec})
        };
        let template = |labels: Value| {
            json!({"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "x"}]}})
        };
        let good = json!({"selector": {"matchLabels": {"app": "a"}}, "template": template(json!({"app": "a"}))});
        let mut no_selector = good.clone();
        no_selector.as_object_mut().unwrap().remove("selector");
        let mut mismatched = good.clone();
        mismatched["template"] = template(json!({"app": "b"}));
        let mut replicas_text = good.clone();
        replicas_text["replicas"] = json!("two");
        let mut nameless = good.clone();
        nameless["template"]["spec"]["containers"] = json!([{"image": "x"}]);
        let secret = |name: &str, data: Value| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "data": data})
        };
        let mut results = Vec::new();
        for method in [WriteMethod::Apply, WriteMethod::Update] {
            let cases = [
                ("configmap data number", configmap(ns, "n", json!({"k": 1}))),
                ("configmap data object", configmap(ns, "o", json!({"k": {"a": "b"}}))),
                ("configmap data string", configmap(ns, "s", json!({"k": "1"}))),
                ("secret data not base64", secret("s1", json!({"k": "not base64!"}))),
                ("secret data base64", secret("s2", json!({"k": "aGk="}))),
                ("secret stringData number", {
                    let mut s = secret("s3", json!(null));
                    s["stringData"] = json!({"pin": 987_654});
                    s
                }),
                ("deployment", deployment("d1", good.clone())),
                ("deployment without selector", deployment("d2", no_selector.clone())),
                ("deployment selector not matching", deployment("d3", mismatched.clone())),
                ("deployment replicas text", deployment("d4", replicas_text.clone())),
                ("deployment container without name", deployment("d5", nameless.clone())),
            ];
            for (what, manifest) in cases {
                results.push(format!("{method:?} {what}: {}", kind_of(c.apply(&manifest, method).await)));
            }
        }
        results
    }
    .boxed()
}

fn garbage_collection<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let owner = c.apply(&configmap(ns, "owner", json!({})), WriteMethod::Apply).await.unwrap();
        let other = c.apply(&configmap(ns, "other", json!({})), WriteMethod::Apply).await.unwrap();
        let owned_by = |o: &[&Value]| Value::Array(o.iter().map(|o| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.name(), "uid": o.uid()})).collect());
        let mut child = configmap(ns, "child", json!({}));
        child["metadata"]["ownerReferences"] = owned_by(&[&owner]);
        c.apply(&child, WriteMethod::Apply).await.unwrap();
        let mut shared = configmap(ns, "shared", json!({}));
        shared["metadata"]["ownerReferences"] = owned_by(&[&owner, &other]);
        c.apply(&shared, WriteMethod::Apply).await.unwrap();
        c.delete(&cm_ref(ns, "owner"), None).await.unwrap();
        eventually("the child is collected", || async { c.get(&cm_ref(ns, "child")).await.unwrap().is_none() }).await;
        // The collector judges the shared object too: it keeps it, removing only the
        // reference to the deleted owner. Once that reference is gone, the decision to keep
        // it has been made; until then, "it is still there" would prove nothing.
        let owners = || async {
            c.get(&cm_ref(ns, "shared")).await.unwrap().map(|o| {
                o["metadata"]["ownerReferences"].as_array().into_iter().flatten()
                    .filter_map(|r| r["name"].as_str().map(str::to_string)).collect::<Vec<_>>()
            })
        };
        eventually("the collector has judged the shared object", || async {
            owners().await.is_none_or(|names| !names.iter().any(|n| n == "owner"))
        })
        .await;
        vec![format!("object with another owner kept, owned by: {:?}", owners().await)]
    }
    .boxed()
}

fn selectors<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web")] {
            let mut cm = configmap(ns, name, json!({}));
            cm["metadata"]["labels"] = json!({"tier": tier, "windlass-conformance": "yes"});
            c.apply(&cm, WriteMethod::Apply).await.unwrap();
        }
        let names = |items: Vec<Value>| {
            items
                .iter()
                .map(|o| o.name().unwrap().to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let all = ListQuery::new(TypeRef::new("v1", "ConfigMap"), Some(ns))
            .labels(parse_labels("windlass-conformance").unwrap());
        vec![
            format!("all: {}", names(c.list(&all).await.unwrap())),
            format!(
                "tier=web: {}",
                names(
                    c.list(&all.clone().labels(parse_labels("tier=web").unwrap()))
                        .await
                        .unwrap()
                )
            ),
            format!(
                "tier in (db, cache): {}",
                names(
                    c.list(
                        &all.clone()
                            .labels(parse_labels("tier in (db, cache)").unwrap())
                    )
                    .await
                    .unwrap()
                )
            ),
            format!(
                "!tier: {}",
                names(
                    c.list(
                        &all.clone()
                            .labels(parse_labels("windlass-conformance,!tier").unwrap())
                    )
                    .await
                    .unwrap()
                )
            ),
            format!(
                "metadata.name=b: {}",
                names(
                    c.list(&all.clone().fields("metadata.name=b"))
                        .await
                        .unwrap()
                )
            ),
        ]
    }
    .boxed()
}

fn secrets<'a>(c: &'a dyn Cluster, ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns},
            "data": {"a": "YQ=="}, "stringData": {"b": "bee"}});
        let stored = c.apply(&secret, WriteMethod::Apply).await.unwrap();
        vec![format!("data: {}, stringData: {}", stored["data"], stored.get("stringData").is_some())]
    }
    .boxed()
}

fn scopes<'a>(c: &'a dyn Cluster, _ns: &'a str) -> BoxFuture<'a, Vec<String>> {
    async move {
        let scope = |api_version: &'static str, kind: &'static str| async move {
            format!(
                "{kind}: {:?}",
                c.scope(&TypeRef::new(api_version, kind)).await
            )
        };
        vec![
            scope("v1", "Namespace").await,
            scope("v1", "ConfigMap").await,
            scope("rbac.authorization.k8s.io/v1", "ClusterRole").await,
            scope("test.windlass.dev/v1", "Widget").await,
            scope("v1", "NoSuchKind").await,
        ]
    }
    .boxed()
}

#[tokio::test]
async fn identity_and_resource_versions() {
    compare("identity", identity).await;
}

#[tokio::test]
async fn generation_and_status_subresource() {
    compare("generation and status", generation_and_status).await;
}

#[tokio::test]
async fn workload_generations() {
    compare("workload generation", workload_generation).await;
}

#[tokio::test]
async fn generations_by_kind() {
    compare("generation by kind", generation_by_kind).await;
}

#[tokio::test]
async fn server_side_apply_ownership() {
    compare("apply ownership", apply_ownership).await;
}

#[tokio::test]
async fn finalizers_and_deletion() {
    compare("finalizers", finalizers).await;
}

#[tokio::test]
async fn error_kinds() {
    compare("errors", errors).await;
}

#[tokio::test]
async fn typed_fields_and_workload_validation() {
    compare("typed fields", typed_fields).await;
}

#[tokio::test]
async fn a_secret_of_the_wrong_shape_is_refused_without_its_values() {
    let (live, env) = live().await;
    let ns = env.namespace("secret-shape").await.unwrap();
    let memory = MemoryCluster::new();
    memory.create_namespace(ns.name()).unwrap();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pins", "namespace": ns.name()},
        "stringData": {"pin": 987_654}, "data": {"key": "!!not base64: s3cr3t"}});
    for (name, cluster) in [
        ("server", live.as_ref() as &dyn Cluster),
        ("memory", &memory),
    ] {
        for method in [WriteMethod::Apply, WriteMethod::Update] {
            let err = cluster.apply(&secret, method).await.unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, ClusterError::Invalid { .. }),
                "{name} {method:?}: {err:?}"
            );
            for value in ["987654", "s3cr3t"] {
                assert!(
                    !text.contains(value),
                    "{name} {method:?} shows a secret value: {text}"
                );
            }
        }
    }
}

#[tokio::test]
async fn owner_garbage_collection() {
    compare("garbage collection", garbage_collection).await;
}

#[tokio::test]
async fn label_and_field_selectors() {
    compare("selectors", selectors).await;
}

#[tokio::test]
async fn secret_string_data() {
    compare("secrets", secrets).await;
}

#[tokio::test]
async fn kind_scopes() {
    compare("scopes", scopes).await;
}

#[tokio::test]
async fn deletion_outcomes() {
    let (live, env) = live().await;
    let ns = env.namespace("deletion").await.unwrap();
    let memory = MemoryCluster::new();
    memory.create_namespace(ns.name()).unwrap();
    for c in [live.as_ref() as &dyn Cluster, &memory] {
        c.apply(&configmap(ns.name(), "x", json!({})), WriteMethod::Apply)
            .await
            .unwrap();
        assert_eq!(
            c.delete(&cm_ref(ns.name(), "x"), None).await.unwrap(),
            Deletion::Deleted
        );
        assert_eq!(
            c.delete(&cm_ref(ns.name(), "x"), None).await.unwrap(),
            Deletion::NotFound
        );
    }
}
