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

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

#[path = "support/tree.rs"]
mod tree;

use tree::setup;

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
