//! windlass against a real kube-apiserver (from `windlass-testenv`):
//!
//! - `conformance`: the same scenarios on the in-memory cluster and on the real API server
//!   through [`windlass::cluster::LiveCluster`], their observations compared, so the dry-run
//!   cluster stays faithful;
//! - `rollout`: whole reconciles on the real control plane, where the node simulator makes
//!   workloads really become ready and the verify phase waits for them;
//! - `events`: Events about a CR through [`windlass::events::LiveEventSink`];
//! - `live_path`: conflicts, deletions and failures on the live path;
//! - `leader`: leader election (Lease, leader-for-life, annotation lock);
//! - `manifests`: the `manifests` command's output applied, and the access it grants.

#![allow(clippy::unwrap_used)]

mod conformance;
mod events;
mod leader;
mod live_path;
mod manifests;
mod rollout;

use std::sync::Arc;
use std::time::Duration;

use windlass::cluster::{Cluster, LiveCluster, WriteMethod};
use windlass::object::TypeRef;
use windlass_testenv::TestEnv;

/// A live cluster over the shared control plane, with the test CRD (`Widget`) installed.
pub async fn live() -> (Arc<LiveCluster>, &'static TestEnv) {
    let env = TestEnv::shared()
        .await
        .expect("the control plane starts (see scripts/provision-control-plane.sh)");
    let cluster = Arc::new(LiveCluster::new(env.client().unwrap()));
    let crd = serde_json::to_value(<windlass::testing::Widget as kube::CustomResourceExt>::crd())
        .unwrap();
    cluster.apply(&crd, WriteMethod::Apply).await.unwrap();
    let widget = TypeRef::new("test.windlass.dev/v1", "Widget");
    eventually("the Widget CRD is served", || async {
        cluster.scope(&widget).await.is_ok()
    })
    .await;
    (cluster, env)
}

/// Wait up to 60 s for `check` to hold, re-checking every 200 ms.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
