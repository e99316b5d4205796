//! The rollout bench's reconciles (`benches/rollout.rs`), run a given number of times
//! outside criterion, for instruction counts under callgrind: only `measured` is counted.
//!
//! ```text
//! cargo build --release -p windlass --example rollout_profile
//! valgrind --tool=callgrind --toggle-collect='*measured*' \
//!     target/release/examples/rollout_profile 100 steady 20
//! ```
//!
//! Arguments: the number of components (a binary tree, as the bench's), `first` or
//! `steady`, and how many reconciles; the total divided by that count is the cost of one.
//! It prints the allocations per reconcile (callgrind's call counts include the uncounted
//! reconciles).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use windlass::object::ObjectRef;
use windlass::reconcile::Reconciler;

#[path = "../benches/support/tree.rs"]
mod tree;

use tree::{Tree, setup};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The reconciles counted: each of `pairs` reconciled once.
#[inline(never)]
fn measured(rt: &tokio::runtime::Runtime, pairs: &[(Reconciler<Tree>, ObjectRef)]) {
    rt.block_on(async {
        for (reconciler, cr) in pairs {
            let report = reconciler.reconcile(cr).await;
            assert!(report.error.is_none(), "{:?}", report.error);
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let components: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let steady = args.get(2).is_none_or(|a| a == "steady");
    let count: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(20);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let pairs: Vec<_> = if steady {
        let (reconciler, cr) = setup(components);
        // The first reconcile creates everything; the second makes the in-memory
        // cluster's shared views, which later reads reuse. Neither is counted.
        for _ in 0..2 {
            rt.block_on(reconciler.reconcile(&cr));
        }
        // The same CR again and again: a steady reconcile writes nothing.
        (0..count)
            .map(|_| (reconciler.clone(), cr.clone()))
            .collect()
    } else {
        (0..count).map(|_| setup(components)).collect()
    };
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    measured(&rt, &pairs);
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    eprintln!(
        "{} allocations per reconcile",
        allocations / count.max(1) as u64
    );
}
