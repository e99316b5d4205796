//! What the example's live tests share: the operator run as a separate process, the CRD,
//! waiting with a deadline (`examples/support/operator.rs`, shared with the other examples).

#![allow(dead_code, clippy::unwrap_used)]

#[path = "../../../support/operator.rs"]
mod operator;

pub use operator::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};
use windlass::cluster::{Cluster, LiveCluster};
use windlass::object::ObjectRef;

/// The operator binary the tests run.
const BINARY: &str = env!("CARGO_BIN_EXE_webapp-operator");

/// Install the WebApp CRD and wait (up to 30 s) until the server serves the kind.
pub async fn install_crd(cluster: &LiveCluster) {
    install_crd_of::<webapp_operator::WebApp>(cluster).await;
}

/// A WebApp `name` in `namespace` with `replicas` web replicas.
pub fn webapp(namespace: &str, name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"version": "1.4.0", "image": format!("ghcr.io/example/{name}"),
                 "replicas": replicas}})
}

/// Whether every WebApp called one of `names` in `namespace` is Ready at its generation.
pub async fn all_ready(cluster: &LiveCluster, namespace: &str, names: &[&str]) -> bool {
    for name in names {
        let cr = ObjectRef::new(
            "example.windlass.dev/v1alpha1",
            "WebApp",
            Some(namespace),
            *name,
        );
        match cluster.get(&cr).await {
            Ok(Some(cr)) if ready(&cr) => {}
            _ => return false,
        }
    }
    true
}

/// Every object windlass applied in `namespace` (the kinds the WebApp deploys), whole
/// (`managedFields` included): `kind/name` → object.
pub async fn children(client: &kube::Client, namespace: &str) -> BTreeMap<String, DynamicObject> {
    let mut all = BTreeMap::new();
    for (group, version, kind) in [
        ("", "v1", "ConfigMap"),
        ("", "v1", "Secret"),
        ("", "v1", "Service"),
        ("apps", "v1", "Deployment"),
        ("apps", "v1", "StatefulSet"),
        ("batch", "v1", "Job"),
    ] {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let listed = api
            .list(&ListParams::default().labels(windlass::annotations::OWNER_UID))
            .await
            .unwrap();
        for object in listed {
            let name = object.metadata.name.clone().unwrap_or_default();
            all.insert(format!("{kind}/{name}"), object);
        }
    }
    all
}

/// `kind/name` → uid.
pub fn uids(objects: &BTreeMap<String, DynamicObject>) -> BTreeMap<String, String> {
    objects
        .iter()
        .map(|(key, o)| (key.clone(), o.metadata.uid.clone().unwrap_or_default()))
        .collect()
}

/// The objects a WebApp named `name` in `ns` has once Ready (the cache is off), the
/// monitoring target in `monitoring` included.
pub fn expected_objects(ns: &str, monitoring: &str, name: &str) -> Vec<ObjectRef> {
    let own = |api_version: &str, kind: &str, object: String| {
        ObjectRef::new(api_version, kind, Some(ns), object)
    };
    vec![
        own("v1", "Secret", format!("{name}-db-credentials")),
        own("apps/v1", "StatefulSet", format!("{name}-db")),
        own("v1", "Service", format!("{name}-db")),
        own("v1", "ConfigMap", format!("{name}-web")),
        own("apps/v1", "Deployment", format!("{name}-web")),
        own("v1", "Service", format!("{name}-web")),
        ObjectRef::new(
            "v1",
            "ConfigMap",
            Some(monitoring),
            format!("{ns}-{name}-web"),
        ),
    ]
}

/// The WebApp `name` at `version` with `replicas`, announcing itself in `monitoring`.
pub fn announced(ns: &str, monitoring: &str, name: &str, version: &str, replicas: i64) -> Value {
    let mut cr = webapp(ns, name, replicas);
    cr["spec"]["version"] = json!(version);
    cr["spec"]["monitoring"] = json!({"namespace": monitoring});
    cr
}

/// What [`watch_ready_claims`] found: how many Ready statuses it checked, and the objects
/// missing behind one.
pub type ReadyClaims = Arc<Mutex<(usize, Vec<String>)>>;

/// Watch the WebApps of `ns`; every time one says Ready, look for each of its objects.
/// Returns (how many Ready statuses were checked, the objects found missing behind one),
/// and the watching task.
pub fn watch_ready_claims(
    client: kube::Client,
    cluster: Arc<LiveCluster>,
    ns: String,
    monitoring: String,
) -> (ReadyClaims, tokio::task::JoinHandle<()>) {
    let found = Arc::new(Mutex::new((0, Vec::new())));
    let record = found.clone();
    let task = tokio::spawn(async move {
        let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "example.windlass.dev",
            "v1alpha1",
            "WebApp",
        ));
        let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let Ok(watcher::Event::Apply(cr) | watcher::Event::InitApply(cr)) = event else {
                continue;
            };
            let cr = serde_json::to_value(&cr).unwrap();
            if !ready(&cr) || cr["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let name = cr["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut missing = Vec::new();
            for object in expected_objects(&ns, &monitoring, &name) {
                if cluster.get(&object).await.ok().flatten().is_none() {
                    missing.push(format!("{name} Ready without {object}"));
                }
            }
            let mut record = record.lock().unwrap();
            record.0 += 1;
            record.1.extend(missing);
        }
    });
    (found, task)
}
