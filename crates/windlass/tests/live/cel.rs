//! CEL validation rules (`x-kubernetes-validations`) and defaults declared on a Rust type:
//! the real API server enforces them, and the in-memory cluster refuses the same objects
//! naming the same fields with the same messages and stores the same defaults, so `run
//! --dry-run` refuses and stores what the server would.

use kube::CustomResource;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use windlass::ClusterError;
use windlass::cluster::{Cluster, MemoryCluster, WriteMethod};

use crate::{install_crd, live};

/// A range with rules on the whole spec, on one field, and on a change (`oldSelf`).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug)]
#[kube(
    group = "test.windlass.dev",
    version = "v1",
    kind = "Bounded",
    namespaced
)]
#[x_kube(validation = Rule::new("self.min <= self.max").message("min must not exceed max"))]
pub struct BoundedSpec {
    min: i64,
    #[x_kube(validation = Rule::new("self <= 100").message("max must be at most 100"))]
    max: i64,
    #[x_kube(validation = Rule::new("self == oldSelf").message("zone cannot change"))]
    zone: String,
    /// Defaulted by the server when missing.
    #[serde(default = "one")]
    step: i64,
}

fn one() -> i64 {
    1
}

fn bounded(namespace: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.windlass.dev/v1", "kind": "Bounded",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

/// The fields and messages of a refusal, sorted; `None` when the write was accepted.
fn refusal(result: Result<Value, ClusterError>) -> Option<Vec<(String, String)>> {
    match result {
        Ok(_) => None,
        Err(ClusterError::Invalid { causes, .. }) => {
            let mut causes: Vec<(String, String)> =
                causes.into_iter().map(|c| (c.field, c.message)).collect();
            causes.sort();
            Some(causes)
        }
        Err(other) => panic!("not a refusal as invalid: {other}"),
    }
}

#[tokio::test]
async fn the_server_and_the_memory_cluster_refuse_the_same_objects_and_store_the_same_defaults() {
    let (live_cluster, env) = live().await;
    install_crd::<Bounded>(&live_cluster).await;
    let ns = env.namespace("cel").await.unwrap();
    let memory = MemoryCluster::new();
    memory.register_crd(&<Bounded as kube::CustomResourceExt>::crd());
    memory.create_namespace(ns.name()).unwrap();
    let clusters: [&dyn Cluster; 2] = [live_cluster.as_ref(), &memory];

    let cases = [
        ("ok", json!({"min": 1, "max": 10, "zone": "a"})),
        ("inverted", json!({"min": 5, "max": 1, "zone": "a"})),
        ("too-big", json!({"min": 1, "max": 200, "zone": "a"})),
        ("both", json!({"min": 300, "max": 200, "zone": "a"})),
    ];
    for (name, spec) in cases {
        let object = bounded(ns.name(), name, spec);
        let [on_server, in_memory] = [0, 1].map(|i| clusters[i].apply(&object, WriteMethod::Apply));
        let (on_server, in_memory) = (refusal(on_server.await), refusal(in_memory.await));
        assert_eq!(
            on_server, in_memory,
            "{name}: the server and the memory cluster disagree"
        );
        assert_eq!(on_server.is_none(), name == "ok", "{name}: {on_server:?}");
    }

    // The default the schema declares is stored by both.
    let ok =
        windlass::object::ObjectRef::from_manifest(&bounded(ns.name(), "ok", json!({}))).unwrap();
    let on_server = live_cluster.get(&ok).await.unwrap().unwrap();
    let in_memory = memory.get(&ok).await.unwrap().unwrap();
    assert_eq!(on_server["spec"]["step"], 1, "{on_server}");
    assert_eq!(on_server["spec"], in_memory["spec"]);

    // A transition rule: the zone of a stored object cannot change.
    let moved = bounded(ns.name(), "ok", json!({"min": 1, "max": 10, "zone": "b"}));
    let on_server = refusal(live_cluster.apply(&moved, WriteMethod::Apply).await);
    let in_memory = refusal(memory.apply(&moved, WriteMethod::Apply).await);
    assert_eq!(on_server, in_memory);
    let causes = on_server.expect("the zone change is refused");
    assert!(
        causes
            .iter()
            .any(|(field, message)| field == "spec.zone" && message.contains("zone cannot change")),
        "{causes:?}"
    );
}
