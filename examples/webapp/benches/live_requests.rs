//! Requests and latency of the example operator on the real control plane: how many
//! requests a WebApp costs on its first reconcile and on a steady-state one, by verb, and
//! the reconcile latency of N CRs reconciled one after another (p50, p99).
//!
//! ```sh
//! cargo bench -p webapp-operator --bench live_requests          # N = 100
//! WINDLASS_BENCH_CRS=20 cargo bench -p webapp-operator --bench live_requests
//! ```
//!
//! It starts its own control plane (provision it first: `scripts/provision-control-plane.sh`)
//! and prints a table. The first reconcile of a CR cannot finish the rollout (nothing is
//! ready yet); the bench then reconciles every CR until it is Ready and measures one more
//! reconcile of each: the steady state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use webapp_operator::{WebApp, WebAppController};
use windlass::Action;
use windlass::cluster::{Cluster, LiveCluster, RequestCounter, RequestCounts, Verb, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::object::{ObjectRef, TypeRef};
use windlass::reconcile::Reconciler;
use windlass_testenv::TestEnv;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn per_cr(counts: &RequestCounts, n: usize) -> String {
    let verbs = [
        Verb::Get,
        Verb::List,
        Verb::Apply,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
    ];
    verbs
        .iter()
        .filter(|v| counts.verb(**v) > 0)
        .map(|v| format!("{v} {:.1}", counts.verb(*v) as f64 / n as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

fn main() {
    let n: usize = std::env::var("WINDLASS_BENCH_CRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let env = TestEnv::start().await.expect("the control plane starts");
        let ns = env.namespace("bench").await.unwrap();
        let counter = RequestCounter::new();
        let cluster = Arc::new(LiveCluster::new(counter.client(env.kube_config()).unwrap()));
        let crd = serde_json::to_value(<WebApp as kube::CustomResourceExt>::crd()).unwrap();
        cluster.apply(&crd, WriteMethod::Apply).await.unwrap();
        let kind = TypeRef::new("example.windlass.dev/v1alpha1", "WebApp");
        while cluster.scope(&kind).await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reconciler = Reconciler::new(WebAppController, cluster.clone(), OperatorConfig::default());
        let mut crs = Vec::new();
        for i in 0..n {
            let shop = json!({"apiVersion": "example.windlass.dev/v1alpha1", "kind": "WebApp",
                "metadata": {"name": format!("shop-{i}"), "namespace": ns.name()},
                "spec": {"version": "1.4.0", "image": "ghcr.io/example/shop", "replicas": 1,
                         "database": {"storage": "1024Mi"}}});
            cluster.apply(&shop, WriteMethod::Update).await.unwrap();
            crs.push(ObjectRef::from_manifest(&shop).unwrap());
        }
        // Warm the kind cache (discovery) so it is not charged to the first CR.
        reconciler.reconcile(&crs[0]).await;
        counter.take();

        let mut first = Vec::new();
        for cr in &crs[1..] {
            let start = Instant::now();
            reconciler.reconcile(cr).await;
            first.push(start.elapsed());
        }
        let first_counts = counter.take();

        let deadline = Instant::now() + Duration::from_secs(600);
        let mut pending: Vec<&ObjectRef> = crs.iter().collect();
        while !pending.is_empty() {
            assert!(Instant::now() < deadline, "{} CRs never became ready", pending.len());
            let mut still = Vec::new();
            for cr in pending {
                if reconciler.reconcile(cr).await.outcome != Action::Done {
                    still.push(cr);
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        counter.take();
        let mut steady = Vec::new();
        for cr in &crs {
            let start = Instant::now();
            let report = reconciler.reconcile(cr).await;
            steady.push(start.elapsed());
            assert_eq!(report.outcome, Action::Done);
        }
        let steady_counts = counter.take();
        first.sort();
        steady.sort();
        let m = first.len();
        println!("windlass live requests: webapp example (cache off), {n} CRs, one client, one reconcile at a time");
        println!("| reconcile | requests per CR | writes per CR | reads per CR | p50 | p99 |");
        println!("| --- | --- | --- | --- | --- | --- |");
        println!(
            "| first | {} | {:.1} | {:.1} | {:.1} ms | {:.1} ms |",
            per_cr(&first_counts, m),
            first_counts.mutating() as f64 / m as f64,
            first_counts.reads() as f64 / m as f64,
            percentile(&first, 0.5).as_secs_f64() * 1e3,
            percentile(&first, 0.99).as_secs_f64() * 1e3
        );
        println!(
            "| steady state | {} | {:.1} | {:.1} | {:.1} ms | {:.1} ms |",
            per_cr(&steady_counts, n),
            steady_counts.mutating() as f64 / n as f64,
            steady_counts.reads() as f64 / n as f64,
            percentile(&steady, 0.5).as_secs_f64() * 1e3,
            percentile(&steady, 0.99).as_secs_f64() * 1e3
        );
        println!("\nfirst reconciles, by request:\n{first_counts}");
        println!("steady-state reconciles, by request:\n{steady_counts}");
    });
}
