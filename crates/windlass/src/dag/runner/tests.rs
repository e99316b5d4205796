//! Tests of the runner's rules, several of which a naive implementation gets wrong.

use super::*;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Barrier;

type G = Graph<&'static str>;

/// base → {left, right}; leaf waits for left.
fn diamond() -> (G, [NodeId; 4]) {
    let mut g = G::new();
    let base = g.add_node("base", "").unwrap();
    let left = g.add_node("left", "").unwrap();
    let right = g.add_node("right", "").unwrap();
    let leaf = g.add_node("leaf", "").unwrap();
    g.add_dependency(left, base, ()).unwrap();
    g.add_dependency(right, base, ()).unwrap();
    g.add_dependency(leaf, left, ()).unwrap();
    (g, [base, left, right, leaf])
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

async fn always(_: NodeId, _: NodeId, _: &()) -> Result<bool, Halt> {
    Ok(true)
}

#[tokio::test]
async fn dependencies_run_first() {
    let (g, _) = diamond();
    let order = Mutex::new(Vec::new());
    let state = Runner::new(&g)
        .concurrency(1)
        .run(
            |id| {
                order.lock().push(g.name(id).to_string());
                async { Ok(()) }
            },
            always,
        )
        .await;
    assert_eq!(*order.lock(), ["base", "left", "leaf", "right"]);
    assert!(state.verify_completed());
}

#[tokio::test]
async fn independent_nodes_run_concurrently() {
    // left and right each wait at a barrier of two: only a runner that runs them at the
    // same time gets past it.
    let (g, [_, left, right, _]) = diamond();
    let barrier = Barrier::new(2);
    let runner = Runner::new(&g).concurrency(4);
    let run = runner.run(
        |id| {
            let barrier = &barrier;
            async move {
                if id == left || id == right {
                    barrier.wait().await;
                }
                Ok(())
            }
        },
        always,
    );
    let state = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("left and right must run concurrently");
    assert!(state.verify_completed());
}

#[tokio::test]
async fn a_halt_stops_only_its_downstream() {
    let (g, [_, left, _, _]) = diamond();
    let state = Runner::new(&g)
        .run(
            |id| async move {
                if id == left {
                    Err(Halt::failed(Error::config("left is broken")))
                } else {
                    Ok(())
                }
            },
            always,
        )
        .await;
    assert_eq!(state.verified(), &set(&["base", "right"]));
    assert_eq!(state.failed_nodes(), &set(&["left"]));
    assert_eq!(state.unstarted(), &set(&["leaf"]));
    assert_eq!(state.error(), Some(&Error::config("left is broken")));
    assert!(state.failed());
}

#[tokio::test]
async fn an_expected_halt_leaves_the_node_unverified_not_failed() {
    let (g, [_, left, _, _]) = diamond();
    let state = Runner::new(&g)
        .run(
            |id| async move {
                if id == left {
                    Err(Halt::incomplete(Error::verification("not yet")))
                } else {
                    Ok(())
                }
            },
            always,
        )
        .await;
    assert_eq!(state.unverified(), &set(&["left"]));
    assert!(state.failed_nodes().is_empty());
    assert!(!state.failed(), "an expected error does not fail the run");
    assert!(!state.verify_completed());
}

#[tokio::test]
async fn a_panic_fails_the_node_without_recording_an_error() {
    let (g, [_, _, right, _]) = diamond();
    let state = Runner::new(&g)
        .run(
            |id| async move {
                if id == right {
                    panic!("bug in right");
                }
                Ok(())
            },
            always,
        )
        .await;
    assert_eq!(state.failed_nodes(), &set(&["right"]));
    assert_eq!(state.verified(), &set(&["base", "left", "leaf"]));
    assert_eq!(state.error(), None);
}

#[tokio::test]
async fn disabled_nodes_are_unstarted_and_block_their_dependents() {
    let (g, [_, left, _, _]) = diamond();
    let mut runner = Runner::new(&g);
    runner.disable(left);
    let state = runner.run(|_| async { Ok(()) }, always).await;
    assert_eq!(state.verified(), &set(&["base", "right"]));
    assert_eq!(state.unstarted(), &set(&["left", "leaf"]));
    assert!(!state.deploy_completed());
}

#[tokio::test(start_paused = true)]
async fn a_slow_edge_condition_does_not_end_the_run_early() {
    // A polling runner has to snapshot completed nodes before computing ready ones, or a
    // slow edge check lets the run end with the gated node unstarted. Here `leaf`'s
    // condition takes longer than everything else and must still be honoured.
    let (g, [_, _, _, leaf]) = diamond();
    let state = Runner::new(&g)
        .run(
            |_| async { Ok(()) },
            |node, _, _| async move {
                if node == leaf {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Ok(true)
            },
        )
        .await;
    assert!(state.verify_completed(), "{state}");
}

#[tokio::test(start_paused = true)]
async fn a_gated_node_is_rechecked_while_others_run_and_then_starts() {
    // right's condition becomes true after "slow" has run for a while; the runner must
    // re-check it on its timer, without polling when nothing else runs.
    let mut g = G::new();
    let base = g.add_node("base", "").unwrap();
    let gated = g.add_node("gated", "").unwrap();
    let slow = g.add_node("slow", "").unwrap();
    g.add_dependency(gated, base, ()).unwrap();
    let checks = AtomicUsize::new(0);
    let opened = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let state = Runner::new(&g)
        .run(
            |id| {
                let opened = opened.clone();
                async move {
                    if id == slow {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        opened.store(true, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    Ok(())
                }
            },
            |_, _, _| {
                checks.fetch_add(1, Ordering::SeqCst);
                let open = opened.load(Ordering::SeqCst);
                async move { Ok(open) }
            },
        )
        .await;
    assert!(state.verified().contains("gated"), "{state}");
    let n = checks.load(Ordering::SeqCst);
    assert!(
        (2..=12).contains(&n),
        "rechecked on a back-off timer, not in a busy loop: {n} checks"
    );
}

#[tokio::test]
async fn a_node_gated_when_nothing_else_runs_stays_unstarted() {
    let (g, _) = diamond();
    let state = Runner::new(&g)
        .run(|_| async { Ok(()) }, |_, _, _| async { Ok(false) })
        .await;
    assert_eq!(state.verified(), &set(&["base"]));
    assert_eq!(state.unstarted(), &set(&["left", "right", "leaf"]));
}

#[tokio::test]
async fn conditions_are_skipped_when_not_checked() {
    let (g, _) = diamond();
    let state = Runner::new(&g)
        .check_conditions(false)
        .run(|_| async { Ok(()) }, |_, _, _| async { Ok(false) })
        .await;
    assert!(state.verify_completed());
}

#[tokio::test]
async fn the_concurrency_limit_holds() {
    let mut g = G::new();
    for i in 0..10 {
        g.add_node(format!("n{i}"), "").unwrap();
    }
    let running = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let state = Runner::new(&g)
        .concurrency(3)
        .run(
            |_| {
                let (running, peak) = (&running, &peak);
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            },
            always,
        )
        .await;
    assert!(state.verify_completed());
    assert_eq!(peak.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_first_error_is_kept() {
    let mut g = G::new();
    let a = g.add_node("a", "").unwrap();
    let b = g.add_node("b", "").unwrap();
    g.add_dependency(b, a, ()).unwrap();
    let c = g.add_node("c", "").unwrap();
    let state = Runner::new(&g)
        .concurrency(1)
        .run(
            |id| async move {
                if id == a {
                    Err(Halt::incomplete(Error::verification("first")))
                } else if id == c {
                    Err(Halt::failed(Error::config("second")))
                } else {
                    Ok(())
                }
            },
            always,
        )
        .await;
    assert_eq!(state.error(), Some(&Error::verification("first")));
    assert!(
        state.failed(),
        "c failed, so the run failed even though the error is expected"
    );
}

#[tokio::test]
async fn a_condition_that_fails_halts_the_node_it_gates() {
    let (g, [_, left, _, _]) = diamond();
    let state = Runner::new(&g)
        .run(
            |_| async { Ok(()) },
            |node, _, _| async move {
                if node == left {
                    Err(Halt::failed(Error::cluster("cannot read the database")))
                } else {
                    Ok(true)
                }
            },
        )
        .await;
    assert_eq!(state.failed_nodes(), &set(&["left"]));
    assert_eq!(state.unstarted(), &set(&["leaf"]));
    assert_eq!(
        state.error(),
        Some(&Error::cluster("cannot read the database"))
    );
}

#[tokio::test]
async fn a_failed_node_stops_what_waits_for_it_and_nothing_else() {
    let mut g: Graph<&str> = Graph::new();
    let base = g.add_node("base", "ok").unwrap();
    let left = g.add_node("left", "fail").unwrap();
    let right = g.add_node("right", "ok").unwrap();
    let leaf = g.add_node("leaf", "ok").unwrap();
    g.add_dependency(left, base, ()).unwrap();
    g.add_dependency(right, base, ()).unwrap();
    g.add_dependency(leaf, left, ()).unwrap();

    let state = Runner::new(&g)
        .run(
            |id| {
                let fails = *g.data(id) == "fail";
                async move {
                    if fails {
                        Err(Halt::failed(None))
                    } else {
                        Ok(())
                    }
                }
            },
            |_, _, _| async { Ok(true) },
        )
        .await;
    // `left` failed, so `leaf` never started; `right` is independent and verified.
    assert_eq!(
        state.verified().iter().collect::<Vec<_>>(),
        ["base", "right"]
    );
    assert!(state.failed_nodes().contains("left"));
    assert!(state.unstarted().contains("leaf"));
}
