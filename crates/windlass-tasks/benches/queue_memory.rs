//! Heap bytes a TaskQueue holds per pending key, measured with a counting allocator.
//!
//! Run: `cargo bench -p windlass-tasks --bench queue_memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use windlass_tasks::queue::{Action, TaskQueue};

/// Counts the bytes currently allocated through it.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn queue<K: std::hash::Hash + Eq + Clone + Send + 'static>() -> TaskQueue<K> {
    match TaskQueue::builder().max_concurrent(1).build() {
        Ok(q) => q,
        Err(e) => panic!("{e}"),
    }
}

fn per_key(bytes: usize, n: usize) -> f64 {
    bytes as f64 / n as f64
}

async fn drain<K: std::hash::Hash + Eq + Clone + Send + 'static>(q: &TaskQueue<K>, n: usize) {
    for _ in 0..n {
        match q.acquire().await {
            Some(lease) => lease.complete(Action::Done),
            None => panic!("queue shut down"),
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once more, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if quick {
        &[1_000]
    } else {
        &[1_000, 10_000, 100_000, 1_000_000]
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a Tokio runtime: {e}"),
    };
    println!(
        "{:>9} | {:>10} | {:>10} | {:>12} | {:>14} | {:>12}",
        "keys", "u64 ready", "u64 delayed", "u64 10x re-enq", "String ready", "after drain"
    );
    for &n in sizes {
        rt.block_on(async {
            // u64 keys due now.
            let base = live();
            let q = queue::<u64>();
            for key in 0..n as u64 {
                q.enqueue(key);
            }
            let ready = live() - base;
            drain(&q, n).await;
            let after_drain = live().saturating_sub(base);
            drop(q);

            // u64 keys waiting on a timer.
            let base = live();
            let q = queue::<u64>();
            for key in 0..n as u64 {
                q.enqueue_after(key, Duration::from_secs(3600));
            }
            let delayed = live() - base;

            // The same keys re-enqueued ten times, each time for an earlier due time: every
            // re-enqueue leaves a stale timer behind that compaction must reclaim.
            for round in 1..=10u64 {
                for key in 0..n as u64 {
                    q.enqueue_after(key, Duration::from_secs(3600 - round));
                }
            }
            let reenqueued = live() - base;
            drop(q);

            // String keys like an object reference, `namespace/name-000123` (22 bytes).
            let base = live();
            let q = queue::<String>();
            for key in 0..n {
                q.enqueue(format!("namespace/name-{key:06}"));
            }
            let strings = live() - base;
            drop(q);

            println!(
                "{:>9} | {:>8.1} B | {:>9.1} B | {:>12.1} B | {:>12.1} B | {:>9} B",
                n,
                per_key(ready, n),
                per_key(delayed, n),
                per_key(reenqueued, n),
                per_key(strings, n),
                after_drain,
            );
        });
    }
}
