//! windlass against a real kube-apiserver (from `windlass-testenv`):
//!
//! - `conformance`: the same scenarios on the in-memory cluster and on the real API server
//!   through [`windlass::cluster::LiveCluster`], their observations compared, so the dry-run
//!   cluster stays faithful;
//! - `rollout`: whole reconciles on the real control plane, where the node simulator makes
//!   workloads really become ready and the verify phase waits for them;
//! - `describe`: `describe` of a CR whose component fails, in process;
//! - `events`: Events about a CR through [`windlass::events::LiveEventSink`];
//! - `live_path`: conflicts, deletions and failures on the live path;
//! - `leader`: leader election (Lease, leader-for-life, annotation lock);
//! - `immutable`: changes of fields that cannot change: recreate, config error, PUT fallback;
//! - `runtime`: the operator runtime: reads from the watches, back-off;
//! - `dependency_hash`: pods rolled when a Secret they read changes, under the runtime;
//! - `manifests`: the `manifests` command's output applied, and the access it grants.
//! - `cel`: CEL validation rules, enforced by the server and by the in-memory cluster alike;
//! - `versions`: application versions, dispatched per CR;
//! - `admission`: admission webhooks from Rust functions, registered by the operator;
//! - `faults` (with `windlass_testenv::proxy`, a fault-injecting proxy): 500s, 429s, stalls, dropped and
//!   expired watches between the operator and the API server;
//! - `secure_metrics`: /metrics for callers the API server allows only;
//! - `conversion`: CRD versions converted by the operator's webhook, its certificate, storage
//!   migration.

#![allow(clippy::unwrap_used)]

mod admission;
mod cel;
mod conformance;
mod conversion;
mod dependency_hash;
mod describe;
mod events;
mod faults;
mod immutable;
mod leader;
mod live_path;
mod manifests;
mod rollout;
mod runtime;
mod secure_metrics;
mod versions;

use std::sync::Arc;

use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::object::TypeRef;
use windlass_testenv::TestEnv;

/// A live cluster over the shared control plane, with the test CRDs (the namespaced
/// `Widget`, the cluster-scoped `Gadget`) installed.
pub async fn live() -> (Arc<LiveCluster>, &'static TestEnv) {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    install_crd::<windlass::testing::Widget>(&cluster).await;
    install_crd::<windlass::testing::Gadget>(&cluster).await;
    (cluster, env)
}

/// Install the CRD of `K` and wait until the server serves the kind.
pub(crate) async fn install_crd<K: kube::CustomResourceExt + kube::Resource<DynamicType = ()>>(
    cluster: &LiveCluster,
) {
    let crd = serde_json::to_value(K::crd()).unwrap();
    cluster.apply(&crd, WriteMethod::Apply).await.unwrap();
    let kind = TypeRef::new(K::api_version(&()), K::kind(&()));
    eventually(&format!("the {} CRD is served", kind.kind), || async {
        cluster.scope(&kind).await.is_ok()
    })
    .await;
}

pub use windlass_testenv::eventually;
