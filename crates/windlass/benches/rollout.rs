//! Dry-run reconcile of a whole CR on the in-memory cluster, for a 3-component DAG
//! (base → {left, right}, one ConfigMap each) and a 100-component DAG (a binary tree).
//!
//! Two figures per graph:
//! - `first`: a fresh cluster and CR, so every object is created (the cluster setup is not
//!   timed);
//! - `steady`: the CR reconciled again with nothing to change (reads and comparisons only,
//!   no writes).
//!
//! Run: `cargo bench -p windlass --bench rollout`. Targets (issue 21, the operator's own
//! cost): steady median at most 40 µs for 3 components and 1 ms for 100 (steady must cost
//! less than first: it writes nothing); first as low as it goes (issue 2 asked under
//! 200 µs and 5 ms).
//!
//! Wall-clock medians depend on what else the machine runs; for instruction counts that do
//! not, `examples/rollout_profile.rs` runs the same reconciles under callgrind.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;
use windlass::cluster::MemoryCluster;
use windlass::config::OperatorConfig;
use windlass::object::ObjectRef;
use windlass::prelude::*;
use windlass::reconcile::Reconciler;
use windlass::testing::{TEST_NAMESPACE, Widget, cr_manifest};

/// One ConfigMap per component.
struct Leaf(String);

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Widget>> windlass::component::Component<C>
    for Leaf
{
    fn name(&self) -> &str {
        &self.0
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        out.add_value(
            "config",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": session.scoped_name(&self.0)},
                    "data": {"component": self.0, "version": session.version()}}),
        )?;
        Ok(())
    }
}

/// `n` components; component `i > 0` waits for component `(i - 1) / 2`.
struct Tree(usize);

#[async_trait]
impl Controller for Tree {
    type Resource = Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let ids: Vec<_> = (0..self.0)
            .map(|i| graph.add(Leaf(format!("c{i:03}"))))
            .collect::<Result<_>>()?;
        for i in 1..self.0 {
            graph.depends_on(ids[i], ids[(i - 1) / 2])?;
        }
        Ok(graph)
    }
}

fn setup(components: usize) -> (Reconciler<Tree>, ObjectRef) {
    let memory = Arc::new(MemoryCluster::new());
    memory.register_crd(&<Widget as kube::CustomResourceExt>::crd());
    memory.create_namespace(TEST_NAMESPACE).expect("namespace");
    let cr = cr_manifest::<Widget>("bench", json!({"version": "1.0"}));
    memory.load([cr.clone()]).expect("cr");
    let config = OperatorConfig {
        dry_run: true,
        ..OperatorConfig::default()
    };
    let reconciler = Reconciler::new(Tree(components), memory, config);
    (reconciler, ObjectRef::from_manifest(&cr).expect("named"))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for (name, components) in [("3 components", 3), ("100 components", 100)] {
        let mut group = c.benchmark_group(format!("dry-run reconcile, {name}"));
        group.bench_function("first", |b| {
            b.to_async(&rt).iter_batched(
                || setup(components),
                |(reconciler, cr)| async move {
                    let report = reconciler.reconcile(&cr).await;
                    assert!(report.error.is_none());
                },
                BatchSize::SmallInput,
            )
        });
        let (reconciler, cr) = setup(components);
        rt.block_on(reconciler.reconcile(&cr));
        group.bench_function("steady", |b| {
            b.to_async(&rt).iter(|| async {
                let report = reconciler.reconcile(&cr).await;
                assert!(report.error.is_none());
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
