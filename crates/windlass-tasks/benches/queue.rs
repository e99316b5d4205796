//! TaskQueue throughput on one core (a current-thread Tokio runtime), 100k distinct keys.
//!
//! One element = one key enqueued and dispatched (and its run reported back), so the
//! elements/s criterion prints is "enqueue + dispatch pairs per second".
//!
//! Run: `cargo bench -p windlass-tasks --bench queue`

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use windlass_tasks::queue::{Action, TaskQueue};

const KEYS: u64 = 100_000;

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a Tokio runtime: {e}"),
    }
}

fn queue(max_concurrent: usize) -> TaskQueue<u64> {
    match TaskQueue::builder().max_concurrent(max_concurrent).build() {
        Ok(q) => q,
        Err(e) => panic!("{e}"),
    }
}

/// Fill 100k distinct keys, then pull and complete every one of them.
async fn fill_then_drain(q: &TaskQueue<u64>, duplicates: u64) {
    for _ in 0..=duplicates {
        for key in 0..KEYS {
            black_box(q.enqueue(key));
        }
    }
    for _ in 0..KEYS {
        match q.acquire().await {
            Some(lease) => lease.complete(Action::Done),
            None => panic!("queue shut down"),
        }
    }
}

/// 100k keys always pending: each step dispatches the oldest and enqueues it again.
async fn steady_state(q: &TaskQueue<u64>) {
    for _ in 0..KEYS {
        match q.acquire().await {
            Some(lease) => {
                let key = *lease.key();
                lease.complete(Action::Done);
                black_box(q.enqueue(key));
            }
            None => panic!("queue shut down"),
        }
    }
}

/// The whole `run` path: every key dispatched onto its own Tokio task, 64 at a time.
async fn run_spawned() {
    let q = queue(64);
    for key in 0..KEYS {
        q.enqueue(key);
    }
    let done = Arc::new(AtomicUsize::new(0));
    let q2 = q.clone();
    q.run(move |key| {
        let (done, q) = (Arc::clone(&done), q2.clone());
        async move {
            black_box(key);
            if done.fetch_add(1, Ordering::Relaxed) + 1 == KEYS as usize {
                q.shutdown();
            }
            Action::Done
        }
    })
    .await;
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("task_queue_100k_keys");
    group.throughput(Throughput::Elements(KEYS));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));

    group.bench_function("fill_then_drain", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let q = queue(1);
                let start = Instant::now();
                for _ in 0..iters {
                    fill_then_drain(&q, 0).await;
                }
                start.elapsed()
            })
        });
    });

    group.bench_function("fill_twice_then_drain (dedup)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let q = queue(1);
                let start = Instant::now();
                for _ in 0..iters {
                    fill_then_drain(&q, 1).await;
                }
                start.elapsed()
            })
        });
    });

    group.bench_function("steady_state_100k_pending", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let q = queue(1);
                for key in 0..KEYS {
                    q.enqueue(key);
                }
                let start = Instant::now();
                for _ in 0..iters {
                    steady_state(&q).await;
                }
                start.elapsed()
            })
        });
    });

    group.bench_function("run_spawned_tasks", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    run_spawned().await;
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
