//! TaskQueue behaviour under Tokio's paused clock: every time below is virtual and exact.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::time::{Instant, sleep};
use windlass_tasks::backoff::BackOffPolicy;
use windlass_tasks::queue::{Action, Enqueued, KeyPlace, KeyState, Priority, TaskQueue};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn policy(start: Duration, max: Duration, jitter: f64) -> BackOffPolicy {
    let policy = match BackOffPolicy::new(start, 2.0, max) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    match policy.with_jitter(jitter) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

fn queue<K: std::hash::Hash + Eq + Clone + Send + 'static>(
    max_concurrent: usize,
    backoff: BackOffPolicy,
) -> TaskQueue<K> {
    match TaskQueue::builder()
        .max_concurrent(max_concurrent)
        .backoff(backoff)
        .build()
    {
        Ok(q) => q,
        Err(e) => panic!("{e}"),
    }
}

/// A log of run starts: (key, virtual time since `t0`).
type Starts<K> = Arc<Mutex<Vec<(K, Duration)>>>;

fn starts<K>() -> Starts<K> {
    Arc::new(Mutex::new(Vec::new()))
}

#[tokio::test(start_paused = true)]
async fn first_runs_are_fifo_and_duplicates_merge() {
    let q = queue::<u32>(1, BackOffPolicy::default());
    for key in 0..100 {
        assert_eq!(q.enqueue(key), Enqueued::Added);
    }
    // Re-enqueue everything, in reverse: no new entries, no change of order.
    for key in (0..100).rev() {
        assert_eq!(q.enqueue(key), Enqueued::Unchanged);
    }
    assert_eq!(q.stats().ready, 100);
    let log = starts();
    let (log2, q2) = (Arc::clone(&log), q.clone());
    let t0 = Instant::now();
    q.run(move |key| {
        let (log, q) = (Arc::clone(&log2), q2.clone());
        async move {
            let mut log = log.lock();
            log.push((key, t0.elapsed()));
            if log.len() == 100 {
                q.shutdown();
            }
            Action::Done
        }
    })
    .await;
    let order: Vec<u32> = log.lock().iter().map(|(k, _)| *k).collect();
    assert_eq!(order, (0..100).collect::<Vec<_>>());
    assert_eq!(q.stats().keys(), 0, "done keys are forgotten");
    assert_eq!(q.stats().dispatched_total, 100);
}

/// Drives `q` until `until` has passed, recording the start of every run.
async fn run_for<K, F>(q: &TaskQueue<K>, until: Duration, outcome: F) -> Starts<K>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    F: Fn(&K, usize) -> Action + Send + Sync + 'static,
{
    let log = starts();
    let runs: Arc<Mutex<HashMap<K, usize>>> = Arc::default();
    let t0 = Instant::now();
    let outcome = Arc::new(outcome);
    let runner = {
        let (q, log) = (q.clone(), Arc::clone(&log));
        tokio::spawn(async move {
            q.run(move |key: K| {
                let (log, runs, outcome) =
                    (Arc::clone(&log), Arc::clone(&runs), Arc::clone(&outcome));
                async move {
                    log.lock().push((key.clone(), t0.elapsed()));
                    let n = {
                        let mut runs = runs.lock();
                        let n = runs.entry(key.clone()).or_insert(0);
                        *n += 1;
                        *n
                    };
                    outcome(&key, n)
                }
            })
            .await;
        })
    };
    sleep(until).await;
    q.shutdown();
    if let Err(e) = runner.await {
        panic!("runner failed: {e}");
    }
    log
}

fn times_of<K: PartialEq>(log: &Starts<K>, key: &K) -> Vec<Duration> {
    log.lock()
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, t)| *t)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn failed_keys_back_off_exponentially_without_blocking_others() {
    let q = queue::<&str>(1, policy(secs(1), secs(8), 0.0));
    q.enqueue("flaky");
    q.enqueue("steady");
    let log = run_for(&q, secs(40), |key, _| match *key {
        "flaky" => Action::Retry,
        _ => Action::Done,
    })
    .await;
    // Runs at 0, then after 1, 2, 4, 8, 8, 8 … seconds.
    assert_eq!(
        times_of(&log, &"flaky"),
        [0, 1, 3, 7, 15, 23, 31, 39].map(secs)
    );
    assert_eq!(times_of(&log, &"steady"), [secs(0)]);
    let stats = q.stats();
    assert_eq!((stats.delayed, stats.failing), (1, 1), "never dropped");
}

#[tokio::test(start_paused = true)]
async fn jittered_back_off_stays_in_its_band() {
    let jitter = 0.5;
    let q = queue::<u32>(8, policy(secs(1), secs(16), jitter));
    for key in 0..8 {
        q.enqueue(key);
    }
    let log = run_for(&q, secs(200), |_, _| Action::Retry).await;
    for key in 0..8 {
        let times = times_of(&log, &key);
        assert!(times.len() >= 8, "key {key} ran only {} times", times.len());
        for (n, pair) in times.windows(2).enumerate() {
            let nominal = secs(1 << n.min(4)).as_secs_f64();
            let gap = (pair[1] - pair[0]).as_secs_f64();
            let (lo, hi) = (
                nominal * (1.0 - jitter),
                (nominal * (1.0 + jitter)).min(16.0),
            );
            assert!(
                gap >= lo - 1e-3 && gap <= hi + 1e-3,
                "key {key}, retry {n}: gap {gap}s outside [{lo}, {hi}]"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn success_resets_the_back_off() {
    let q = queue::<u8>(1, policy(secs(1), secs(60), 0.0));
    q.enqueue(1);
    // Retry, Retry, RequeueAfter(10s) (a success), Retry, Retry, then done.
    let log = run_for(&q, secs(60), |_, n| match n {
        1 | 2 | 4 | 5 => Action::Retry,
        3 => Action::RequeueAfter(secs(10)),
        _ => Action::Done,
    })
    .await;
    assert_eq!(times_of(&log, &1), [0, 1, 3, 13, 14, 16].map(secs));
    assert_eq!(q.stats().keys(), 0);
}

/// The reconcile hot loop: a run that writes status gets its own watch event while it runs,
/// then fails. The rerun mark must wait for the back-off like the retry it is folded into.
#[tokio::test(start_paused = true)]
async fn an_event_during_a_failing_run_does_not_skip_the_back_off() {
    let q = queue::<u8>(1, policy(secs(10), secs(100), 0.0));
    q.enqueue(1);
    let marks = Arc::new(Mutex::new(Vec::new()));
    let log = {
        let (q2, marks) = (q.clone(), Arc::clone(&marks));
        let log = starts();
        let t0 = Instant::now();
        let (q3, log2) = (q.clone(), Arc::clone(&log));
        let runs = Arc::new(AtomicU64::new(0));
        let runner = tokio::spawn(async move {
            q3.run(move |key| {
                let (q, marks, log, runs) = (
                    q2.clone(),
                    Arc::clone(&marks),
                    Arc::clone(&log2),
                    Arc::clone(&runs),
                );
                async move {
                    log.lock().push((key, t0.elapsed()));
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    if n > 2 {
                        return Action::Done;
                    }
                    sleep(secs(1)).await;
                    // The status write's watch event arrives while the run is still going.
                    marks.lock().push(q.enqueue(key));
                    sleep(secs(4)).await;
                    Action::Retry
                }
            })
            .await;
        });
        sleep(secs(100)).await;
        q.shutdown();
        if let Err(e) = runner.await {
            panic!("{e}");
        }
        log
    };
    assert_eq!(*marks.lock(), [Enqueued::Rerun, Enqueued::Rerun]);
    // 0–5: fails, back-off 10 s · 15–20: fails, back-off 20 s · 40: succeeds. Without the
    // rule, the rerun marks would have run it at 5 and 10.
    assert_eq!(times_of(&log, &1), [0, 15, 40].map(secs));
    assert_eq!(q.stats().keys(), 0);
    assert_eq!(q.stats().failures_total, 2);
}

#[tokio::test(start_paused = true)]
async fn an_enqueue_during_the_back_off_wait_does_not_bring_it_forward() {
    let q = queue::<u8>(1, policy(secs(100), secs(1000), 0.0));
    q.enqueue(1);
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            sleep(secs(5)).await;
            // Failing since 0 (back-off 100 s): nothing brings it forward.
            assert_eq!(q.enqueue(1), Enqueued::BackingOff);
            assert_eq!(q.enqueue_after(1, secs(1)), Enqueued::BackingOff);
            assert_eq!(
                q.enqueue_at(1, Instant::now() + secs(50)),
                Enqueued::BackingOff
            );
            assert_eq!(q.enqueue_after(1, secs(500)), Enqueued::Unchanged);
            let s = q.stats();
            assert_eq!((s.ready, s.delayed, s.failing), (0, 1, 1));
            sleep(secs(200)).await;
            // 205: failing again since 100 (back-off 200 s, until 300).
            assert_eq!(q.enqueue(1), Enqueued::BackingOff);
            sleep(secs(145)).await;
            // 350: it succeeded at 300 (requeue after 100 s): merging is back to normal.
            assert_eq!(q.stats().failing, 0);
            assert_eq!(q.enqueue(1), Enqueued::Advanced);
        })
    };
    let log = run_for(&q, secs(500), |_, n| match n {
        1 | 2 => Action::Retry,
        3 => Action::RequeueAfter(secs(100)),
        _ => Action::Done,
    })
    .await;
    if let Err(e) = producer.await {
        panic!("{e}");
    }
    assert_eq!(times_of(&log, &1), [0, 100, 300, 350].map(secs));
}

/// The opt-in: events cut a back-off short (client-go's behaviour); the back-off is kept.
#[tokio::test(start_paused = true)]
async fn with_preempt_backoff_a_fresh_event_runs_a_backing_off_key_now() {
    let q: TaskQueue<u8> = match TaskQueue::builder()
        .backoff(policy(secs(100), secs(1000), 0.0))
        .preempt_backoff(true)
        .build()
    {
        Ok(q) => q,
        Err(e) => panic!("{e}"),
    };
    q.enqueue(1);
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            sleep(secs(5)).await;
            assert_eq!(q.enqueue(1), Enqueued::Advanced);
        })
    };
    let log = run_for(&q, secs(400), |_, n| {
        if n <= 2 { Action::Retry } else { Action::Done }
    })
    .await;
    if let Err(e) = producer.await {
        panic!("{e}");
    }
    // 0: fail (back-off 100 s) · 5: event runs it now, fails again (back-off 200 s) · 205: done.
    assert_eq!(times_of(&log, &1), [0, 5, 205].map(secs));
}

#[tokio::test(start_paused = true)]
async fn later_enqueues_never_postpone_and_earlier_ones_advance() {
    let q = queue::<u8>(1, BackOffPolicy::default());
    assert_eq!(q.enqueue_after(1, secs(10)), Enqueued::Added);
    assert_eq!(q.enqueue_after(1, secs(50)), Enqueued::Unchanged);
    assert_eq!(q.enqueue_after(2, secs(30)), Enqueued::Added);
    assert_eq!(q.enqueue_after(2, secs(20)), Enqueued::Advanced);
    let at = Instant::now() + secs(25);
    assert_eq!(q.enqueue_at(3, at), Enqueued::Added);
    let log = run_for(&q, secs(60), |_, _| Action::Done).await;
    let all: Vec<_> = log.lock().clone();
    assert_eq!(all, [(1, secs(10)), (2, secs(20)), (3, secs(25))]);
}

#[tokio::test(start_paused = true)]
async fn requeue_after_runs_again_after_the_delay() {
    let q = queue::<u8>(1, BackOffPolicy::default());
    q.enqueue(1);
    let log = run_for(&q, secs(100), |_, n| {
        if n < 4 {
            Action::RequeueAfter(secs(30))
        } else {
            Action::Done
        }
    })
    .await;
    assert_eq!(times_of(&log, &1), [0, 30, 60, 90].map(secs));
}

#[tokio::test(start_paused = true)]
async fn an_enqueue_during_a_run_reruns_once_after_it_never_alongside() {
    let q = queue::<u8>(4, BackOffPolicy::default());
    let in_flight = Arc::new(AtomicU64::new(0));
    let max_in_flight = Arc::new(AtomicU64::new(0));
    let log = starts();
    let t0 = Instant::now();
    q.enqueue(1);
    let runner = {
        let (q, log, in_flight, max_in_flight) = (
            q.clone(),
            Arc::clone(&log),
            Arc::clone(&in_flight),
            Arc::clone(&max_in_flight),
        );
        tokio::spawn(async move {
            q.run(move |key| {
                let (log, in_flight, max_in_flight) = (
                    Arc::clone(&log),
                    Arc::clone(&in_flight),
                    Arc::clone(&max_in_flight),
                );
                async move {
                    log.lock().push((key, t0.elapsed()));
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    max_in_flight.fetch_max(now, Ordering::SeqCst);
                    sleep(secs(10)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    Action::Done
                }
            })
            .await;
        })
    };
    sleep(secs(1)).await;
    assert_eq!(q.enqueue(1), Enqueued::Rerun);
    for _ in 0..5 {
        assert_eq!(q.enqueue(1), Enqueued::Unchanged);
    }
    assert_eq!(q.stats().rerun_marked, 1);
    sleep(secs(60)).await;
    q.shutdown();
    if let Err(e) = runner.await {
        panic!("{e}");
    }
    assert_eq!(times_of(&log, &1), [secs(0), secs(10)]);
    assert_eq!(max_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_bounded() {
    let q = queue::<u32>(3, BackOffPolicy::default());
    let in_flight = Arc::new(AtomicU64::new(0));
    let max_in_flight = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    for key in 0..20 {
        q.enqueue(key);
    }
    let t0 = Instant::now();
    let (q2, f, m, d) = (
        q.clone(),
        Arc::clone(&in_flight),
        Arc::clone(&max_in_flight),
        Arc::clone(&done),
    );
    q.run(move |_key| {
        let (q, f, m, d) = (q2.clone(), Arc::clone(&f), Arc::clone(&m), Arc::clone(&d));
        async move {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            assert!(q.stats().running <= 3);
            sleep(secs(1)).await;
            f.fetch_sub(1, Ordering::SeqCst);
            if d.fetch_add(1, Ordering::SeqCst) + 1 == 20 {
                q.shutdown();
            }
            Action::Done
        }
    })
    .await;
    assert_eq!(max_in_flight.load(Ordering::SeqCst), 3);
    assert_eq!(t0.elapsed(), secs(7), "20 one-second runs, 3 at a time");
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_dispatch_and_waits_for_running_tasks() {
    let q = queue::<u32>(2, BackOffPolicy::default());
    for key in 0..10 {
        q.enqueue(key);
    }
    let finished = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let runner = {
        let (q, finished) = (q.clone(), Arc::clone(&finished));
        tokio::spawn(async move {
            q.run(move |key| {
                let finished = Arc::clone(&finished);
                async move {
                    sleep(secs(5)).await;
                    finished.lock().push((key, t0.elapsed()));
                    Action::Done
                }
            })
            .await;
            t0.elapsed()
        })
    };
    sleep(secs(1)).await;
    q.shutdown();
    let returned_at = match runner.await {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        returned_at,
        secs(5),
        "run returns when the running tasks end"
    );
    assert_eq!(*finished.lock(), [(0, secs(5)), (1, secs(5))]);
    let stats = q.stats();
    assert!(stats.shut_down);
    assert_eq!(
        (stats.ready, stats.running),
        (8, 0),
        "pending keys are kept"
    );
    assert!(q.acquire().await.is_none());
    q.enqueue(99);
    assert!(q.contains(&99), "enqueues after shutdown are recorded");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_worker_is_a_failure_not_a_crash() {
    let q = queue::<&str>(1, policy(secs(1), secs(1), 0.0));
    q.enqueue("bomb");
    q.enqueue("fine");
    let log = run_for(&q, ms(2500), |key, n| {
        if *key == "bomb" && n < 3 {
            panic!("worker bug");
        }
        Action::Done
    })
    .await;
    assert_eq!(times_of(&log, &"bomb"), [0, 1, 2].map(secs));
    assert_eq!(times_of(&log, &"fine"), [secs(0)]);
    assert_eq!(q.stats().failures_total, 2);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_lease_counts_as_a_failure() {
    let q = queue::<u8>(1, policy(secs(2), secs(2), 0.0));
    q.enqueue(1);
    let Some(lease) = q.acquire().await else {
        panic!("shut down")
    };
    assert_eq!((lease.key(), lease.retries()), (&1, 0));
    drop(lease);
    let stats = q.stats();
    assert_eq!((stats.delayed, stats.failing, stats.running), (1, 1, 0));
    let t0 = Instant::now();
    let Some(lease) = q.acquire().await else {
        panic!("shut down")
    };
    assert_eq!(t0.elapsed(), secs(2));
    assert_eq!(lease.retries(), 1);
    lease.complete(Action::Done);
    assert_eq!(q.stats().keys(), 0);
}

#[tokio::test(start_paused = true)]
async fn remove_drops_a_pending_key_but_not_a_running_one() {
    let q = queue::<u8>(2, BackOffPolicy::default());
    q.enqueue(1);
    q.enqueue_after(2, secs(5));
    let Some(lease) = q.acquire().await else {
        panic!("shut down")
    };
    assert!(!q.remove(&1), "running");
    assert!(q.remove(&2));
    assert!(!q.remove(&2));
    lease.complete(Action::Done);
    assert_eq!(q.stats().keys(), 0);
}

#[tokio::test(start_paused = true)]
async fn remove_leaves_a_running_key_and_its_rerun_mark_alone() {
    let q = queue::<u8>(1, BackOffPolicy::default());
    q.enqueue(1);
    let Some(lease) = q.acquire().await else {
        panic!("shut down")
    };
    assert_eq!(q.enqueue(1), Enqueued::Rerun);
    assert!(!q.remove(&1), "a running key is not removed");
    assert!(q.contains(&1));
    let s = q.stats();
    assert_eq!((s.running, s.rerun_marked), (1, 1), "the mark survives");
    lease.complete(Action::Done);
    let s = q.stats();
    assert_eq!(
        (s.ready, s.running, s.rerun_marked),
        (1, 0, 0),
        "the rerun is pending"
    );
    let Some(lease) = q.try_acquire() else {
        panic!("the rerun is due now")
    };
    assert_eq!(*lease.key(), 1);
    // Once it is pending again, remove does take it (run ends in Done with a fresh mark).
    assert_eq!(q.enqueue(1), Enqueued::Rerun);
    lease.complete(Action::Done);
    assert!(q.remove(&1));
    let s = q.stats();
    assert_eq!((s.keys(), s.rerun_marked, s.failing), (0, 0, 0));
    assert!(!q.contains(&1));
    assert!(q.try_acquire().is_none());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_run_future_brings_in_flight_keys_back_as_retry() {
    let q = queue::<u8>(2, policy(secs(3), secs(3), 0.0));
    for key in 1..=3 {
        q.enqueue(key);
    }
    let dropped = Arc::new(AtomicU64::new(0));
    let runner = {
        let (q, dropped) = (q.clone(), Arc::clone(&dropped));
        tokio::spawn(async move {
            q.run(move |_key| {
                let flag = CountOnDrop(Arc::clone(&dropped));
                async move {
                    let _flag = flag;
                    sleep(secs(100)).await;
                    Action::Done
                }
            })
            .await;
        })
    };
    sleep(secs(1)).await;
    assert_eq!(q.stats().running, 2);
    runner.abort();
    match runner.await {
        Err(e) if e.is_cancelled() => {}
        other => panic!("the runner was not cancelled: {other:?}"),
    }
    let aborted_at = Instant::now();
    // The runs were aborted with the run future; let the runtime drop them (no time passes).
    for _ in 0..100 {
        if q.stats().running == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(Instant::now(), aborted_at);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "both worker futures are gone"
    );
    let s = q.stats();
    assert_eq!(
        (s.running, s.ready, s.delayed, s.failing, s.failures_total),
        (0, 1, 2, 2, 2),
        "the two in-flight keys failed and wait out their back-off; key 3 never ran"
    );
    // A new consumer gets key 3 at once and the aborted keys after their back-off, not before.
    let mut got = Vec::new();
    for _ in 0..3 {
        let Some(lease) = q.acquire().await else {
            panic!("shut down")
        };
        got.push((*lease.key(), lease.retries(), aborted_at.elapsed()));
        lease.complete(Action::Done);
    }
    assert_eq!(got, [(3, 0, secs(0)), (1, 1, secs(3)), (2, 1, secs(3))]);
}

/// Counts the drops of a worker future.
struct CountOnDrop(Arc<AtomicU64>);
impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn two_run_consumers_share_the_concurrency_bound() {
    const KEYS: u32 = 20;
    let q = queue::<u32>(4, BackOffPolicy::default());
    for key in 0..KEYS {
        q.enqueue(key);
    }
    let in_flight = Arc::new(AtomicU64::new(0));
    let max_in_flight = Arc::new(AtomicU64::new(0));
    let ran: Arc<Mutex<Vec<u32>>> = Arc::default();
    let t0 = Instant::now();
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (q, in_flight, max_in_flight, ran) = (
                q.clone(),
                Arc::clone(&in_flight),
                Arc::clone(&max_in_flight),
                Arc::clone(&ran),
            );
            tokio::spawn(async move {
                let q2 = q.clone();
                q.run(move |key| {
                    let (q, f, m, ran) = (
                        q2.clone(),
                        Arc::clone(&in_flight),
                        Arc::clone(&max_in_flight),
                        Arc::clone(&ran),
                    );
                    async move {
                        let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                        m.fetch_max(now, Ordering::SeqCst);
                        assert!(q.stats().running <= 4);
                        sleep(secs(1)).await;
                        f.fetch_sub(1, Ordering::SeqCst);
                        let mut ran = ran.lock();
                        ran.push(key);
                        if ran.len() == KEYS as usize {
                            q.shutdown();
                        }
                        Action::Done
                    }
                })
                .await;
                t0.elapsed()
            })
        })
        .collect();
    for c in consumers {
        match c.await {
            Ok(returned_at) => assert_eq!(returned_at, secs(5), "both return after the last run"),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(
        max_in_flight.load(Ordering::SeqCst),
        4,
        "4 at once over both consumers, not 4 each"
    );
    let mut ran = ran.lock().clone();
    ran.sort_unstable();
    assert_eq!(ran, (0..KEYS).collect::<Vec<_>>(), "each key ran once");
    assert_eq!(q.stats().failures_total, 0);
}

#[tokio::test(start_paused = true)]
async fn several_pull_consumers_share_the_bound_and_the_timers() {
    // Two consumers asleep on a far timer; two nearer keys must both be picked up on time.
    let q = queue::<u8>(2, BackOffPolicy::default());
    q.enqueue_after(9, secs(1000));
    let t0 = Instant::now();
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut consumers = Vec::new();
    for _ in 0..2 {
        let (q, got) = (q.clone(), Arc::clone(&got));
        consumers.push(tokio::spawn(async move {
            while let Some(lease) = q.acquire().await {
                got.lock().push((*lease.key(), t0.elapsed()));
                sleep(secs(100)).await;
                lease.complete(Action::Done);
            }
        }));
    }
    sleep(secs(1)).await;
    q.enqueue_after(1, secs(1));
    q.enqueue_after(2, secs(2));
    sleep(secs(10)).await;
    q.shutdown();
    for c in consumers {
        if let Err(e) = c.await {
            panic!("{e}");
        }
    }
    assert_eq!(*got.lock(), [(1, secs(2)), (2, secs(3))]);
}

/// One scenario of random producers and a random worker, on a paused clock of its own;
/// checks the queue's invariants on the whole history.
fn check_invariants(seed: u64, max_concurrent: usize, jitter: f64, producers: u64) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    };
    runtime.block_on(invariants_scenario(seed, max_concurrent, jitter, producers));
}

async fn invariants_scenario(seed: u64, max_concurrent: usize, jitter: f64, producers: u64) {
    const KEYS: u32 = 40;
    const ENQUEUES_PER_PRODUCER: usize = 150;
    let backoff = policy(ms(100), secs(2), jitter);
    let q = queue::<u32>(max_concurrent, backoff);

    #[derive(Clone, Copy, Debug)]
    struct EnqueueRec {
        seq: u64,
    }
    #[derive(Clone, Copy, Debug)]
    struct RunRec {
        start_seq: u64,
        start: Instant,
        end: Instant,
        failed: bool,
    }
    #[derive(Default)]
    struct History {
        enqueues: HashMap<u32, Vec<EnqueueRec>>,
        runs: HashMap<u32, Vec<RunRec>>,
        in_flight: HashSet<u32>,
        overlaps: Vec<u32>,
        max_in_flight: usize,
    }
    let history = Arc::new(Mutex::new(History::default()));
    let seq = Arc::new(AtomicU64::new(0));

    let runner = {
        let (q, history, seq) = (q.clone(), Arc::clone(&history), Arc::clone(&seq));
        tokio::spawn(async move {
            q.run(move |key: u32| {
                let (history, seq) = (Arc::clone(&history), Arc::clone(&seq));
                async move {
                    let start_seq = seq.fetch_add(1, Ordering::SeqCst);
                    let start = Instant::now();
                    let n = {
                        let mut h = history.lock();
                        if !h.in_flight.insert(key) {
                            h.overlaps.push(key);
                        }
                        h.max_in_flight = h.max_in_flight.max(h.in_flight.len());
                        h.runs.get(&key).map_or(0, Vec::len) as u64
                    };
                    let mut rng = SmallRng::seed_from_u64(
                        seed.wrapping_mul(1_000_003) ^ (u64::from(key) * 1000 + n),
                    );
                    sleep(ms(rng.random_range(0..30))).await;
                    // Fail 40% of runs, but never more than 4 times in a row.
                    let streak = {
                        let h = history.lock();
                        h.runs
                            .get(&key)
                            .map_or(0, |r| r.iter().rev().take_while(|r| r.failed).count())
                    };
                    let failed = streak < 4 && rng.random_range(0..10) < 4;
                    let mut h = history.lock();
                    h.in_flight.remove(&key);
                    h.runs.entry(key).or_default().push(RunRec {
                        start_seq,
                        start,
                        end: Instant::now(),
                        failed,
                    });
                    if failed { Action::Retry } else { Action::Done }
                }
            })
            .await;
        })
    };

    let mut handles = Vec::new();
    for p in 0..producers {
        let (q, history, seq) = (q.clone(), Arc::clone(&history), Arc::clone(&seq));
        handles.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(p));
            for _ in 0..ENQUEUES_PER_PRODUCER {
                let key = rng.random_range(0..KEYS);
                let delay = if rng.random_range(0..10) < 3 {
                    ms(rng.random_range(1..3000))
                } else {
                    Duration::ZERO
                };
                let s = seq.fetch_add(1, Ordering::SeqCst);
                q.enqueue_after(key, delay);
                history
                    .lock()
                    .enqueues
                    .entry(key)
                    .or_default()
                    .push(EnqueueRec { seq: s });
                sleep(ms(rng.random_range(0..40))).await;
            }
        }));
    }
    for p in handles {
        if let Err(e) = p.await {
            panic!("{e}");
        }
    }
    // Long enough for everything to play out: at most 4 failures in a row (each back-off
    // <= 2 s), runs < 30 ms, and at most 1200 enqueues even one run at a time.
    sleep(secs(120)).await;
    let stats = q.stats();
    q.shutdown();
    if let Err(e) = runner.await {
        panic!("{e}");
    }

    let h = history.lock();
    assert!(
        h.overlaps.is_empty(),
        "keys ran twice at once: {:?}",
        h.overlaps
    );
    assert!(h.max_in_flight <= max_concurrent);
    assert_eq!(stats.keys(), 0, "everything ran to completion: {stats:?}");
    let mut total_runs = 0;
    for (key, enqueues) in &h.enqueues {
        let runs = h.runs.get(key).map_or(&[][..], Vec::as_slice);
        total_runs += runs.len();
        // No task lost: every enqueue is followed by a run that started after it.
        for e in enqueues {
            assert!(
                runs.iter().any(|r| r.start_seq > e.seq),
                "key {key}: enqueue #{} never ran",
                e.seq
            );
        }
        // De-duplication: each run is paid for by an enqueue or a failure.
        let failures = runs.iter().filter(|r| r.failed).count();
        assert!(runs.len() <= enqueues.len() + failures, "key {key}");
        // A failed key comes back after its back-off and not before, whatever was enqueued
        // meanwhile.
        let mut streak = 0u32;
        for pair in runs.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            if !prev.failed {
                streak = 0;
                continue;
            }
            streak += 1;
            let nominal = (0.1 * 2f64.powi(streak as i32 - 1)).min(2.0);
            let gap = (next.start - prev.end).as_secs_f64();
            assert!(
                gap >= nominal * (1.0 - jitter) - 1e-6,
                "key {key}: retry {streak} came back after {gap}s, back-off is {nominal}s ±{jitter}"
            );
        }
    }
    assert!(
        total_runs >= h.enqueues.len(),
        "every enqueued key ran ({total_runs} runs, {} keys)",
        h.enqueues.len()
    );
    assert_eq!(stats.dispatched_total as usize, total_runs);
}

proptest! {
    // Each case is a whole paused-clock scenario (a few hundred to a thousand runs); a handful
    // of cases keeps the suite fast while varying every knob.
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// No task lost, no key run twice at once, de-dup holds, at most `max_concurrent` at once,
    /// failed keys come back after their back-off and not before.
    #[test]
    fn invariants_hold_under_concurrent_producers(
        seed in any::<u64>(),
        max_concurrent in 1usize..=8,
        jitter in 0.0f64..0.5,
        producers in 1u64..=8,
    ) {
        check_invariants(seed, max_concurrent, jitter, producers);
    }
}

#[tokio::test(start_paused = true)]
async fn a_consumer_waiting_for_a_free_slot_is_woken_when_one_frees() {
    let q = queue::<u8>(1, BackOffPolicy::default());
    q.enqueue(1);
    q.enqueue(2);
    let Some(first) = q.acquire().await else {
        panic!("shut down")
    };
    let t0 = Instant::now();
    let second = {
        let q = q.clone();
        tokio::spawn(async move { q.acquire().await.map(|lease| (*lease.key(), t0.elapsed())) })
    };
    sleep(secs(10)).await;
    assert_eq!(q.stats().running, 1, "the bound holds while key 1 runs");
    first.complete(Action::Done);
    match tokio::time::timeout(secs(100), second).await {
        Ok(Ok(got)) => assert_eq!(got, Some((2, secs(10)))),
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => panic!("the parked consumer was never woken"),
    }
}

#[tokio::test(start_paused = true)]
async fn try_acquire_never_waits_and_respects_the_bound() {
    let q = queue::<u8>(1, BackOffPolicy::default());
    assert!(q.try_acquire().is_none(), "empty");
    q.enqueue_after(1, secs(5));
    assert!(q.try_acquire().is_none(), "not due yet");
    sleep(secs(5)).await;
    q.enqueue(2);
    let Some(lease) = q.try_acquire() else {
        panic!("key 1 is due")
    };
    assert_eq!(*lease.key(), 1, "the expired timer was enqueued first");
    assert!(q.try_acquire().is_none(), "at the bound");
    lease.complete(Action::Done);
    q.shutdown();
    assert!(q.try_acquire().is_none(), "shut down");
    assert_eq!(q.stats().ready, 1);
}

/// Real parallelism: producer threads hammer the queue while a multi-threaded runtime runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_producers_on_a_multi_threaded_runtime() {
    const KEYS: u64 = 500;
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 20_000;
    let q = queue::<u64>(8, policy(ms(1), ms(4), 0.0));
    let seq = Arc::new(AtomicU64::new(0));
    /// Per key: (last enqueue seq, start seqs of its runs).
    type RunLog = HashMap<u64, (u64, Vec<u64>)>;
    let log: Arc<Mutex<RunLog>> = Arc::default();
    let in_flight: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let overlaps = Arc::new(AtomicU64::new(0));
    let runner = {
        let (q, seq, log, in_flight, overlaps) = (
            q.clone(),
            Arc::clone(&seq),
            Arc::clone(&log),
            Arc::clone(&in_flight),
            Arc::clone(&overlaps),
        );
        tokio::spawn(async move {
            q.run(move |key| {
                let (seq, log, in_flight, overlaps) = (
                    Arc::clone(&seq),
                    Arc::clone(&log),
                    Arc::clone(&in_flight),
                    Arc::clone(&overlaps),
                );
                async move {
                    if !in_flight.lock().insert(key) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    let start = seq.fetch_add(1, Ordering::SeqCst);
                    log.lock().entry(key).or_default().1.push(start);
                    tokio::task::yield_now().await;
                    in_flight.lock().remove(&key);
                    // Every 7th run of a key fails once, to mix retries in.
                    if start % 7 == 0 {
                        Action::Retry
                    } else {
                        Action::Done
                    }
                }
            })
            .await;
        })
    };
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (q, seq, log) = (q.clone(), Arc::clone(&seq), Arc::clone(&log));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                for _ in 0..PER_THREAD {
                    let key = rng.random_range(0..KEYS);
                    let s = seq.fetch_add(1, Ordering::SeqCst);
                    q.enqueue(key);
                    let mut log = log.lock();
                    let entry = log.entry(key).or_default();
                    entry.0 = entry.0.max(s);
                }
            })
        })
        .collect();
    for p in producers {
        if p.join().is_err() {
            panic!("producer thread panicked");
        }
    }
    // Wait (real time, bounded) for the queue to run dry.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while q.stats().keys() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "queue did not drain: {:?}",
            q.stats()
        );
        tokio::time::sleep(ms(5)).await;
    }
    q.shutdown();
    if let Err(e) = runner.await {
        panic!("{e}");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a key ran twice at once"
    );
    let log = log.lock();
    let (mut runs, mut failures) = (0u64, 0u64);
    for (key, (last_enqueue, starts)) in log.iter() {
        assert!(
            starts.iter().any(|s| s > last_enqueue),
            "key {key}: its last enqueue (#{last_enqueue}) never ran"
        );
        runs += starts.len() as u64;
        failures += starts.iter().filter(|s| *s % 7 == 0).count() as u64;
    }
    // De-duplication, whatever the timing: each run is paid for by an enqueue or a failure.
    assert!(
        runs <= THREADS * PER_THREAD + failures,
        "{runs} runs for {} enqueues and {failures} failures",
        THREADS * PER_THREAD
    );
    assert_eq!(q.stats().dispatched_total, runs);
}

/// Per call: a plain enqueue leaves a backing-off key alone, a preempting one (a spec
/// fix) runs it now; the back-off is kept for the next failure.
#[tokio::test(start_paused = true)]
async fn a_preempting_enqueue_runs_a_backing_off_key_now_and_a_plain_one_does_not() {
    let q = queue::<u8>(1, policy(secs(100), secs(1000), 0.0));
    q.enqueue(1);
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            sleep(secs(5)).await;
            assert_eq!(q.enqueue(1), Enqueued::BackingOff);
            sleep(secs(5)).await;
            assert_eq!(q.enqueue_preempting(1), Enqueued::Advanced);
        })
    };
    let log = run_for(&q, secs(400), |_, n| {
        if n <= 2 { Action::Retry } else { Action::Done }
    })
    .await;
    if let Err(e) = producer.await {
        panic!("{e}");
    }
    // 0: fail (back-off 100 s) · 5: plain event, nothing · 10: the fix runs it now, it
    // fails again (back-off 200 s) · 210: done.
    assert_eq!(times_of(&log, &1), [0, 10, 210].map(secs));
}

/// A lease tells how long its key waited from becoming due: a key queued behind a busy
/// slot waits for it; a delayed key counts from its due time, not from its enqueue.
#[tokio::test(start_paused = true)]
async fn a_lease_reports_how_long_its_key_waited_since_it_was_due() {
    let q = queue::<u8>(1, BackOffPolicy::default());
    q.enqueue(1);
    q.enqueue(2);
    q.enqueue_after(3, secs(1));
    let first = q.acquire().await.unwrap();
    assert_eq!(first.waited(), Duration::ZERO);
    sleep(secs(5)).await;
    first.complete(Action::Done);
    let second = q.acquire().await.unwrap();
    assert_eq!((*second.key(), second.waited()), (2, secs(5)));
    second.complete(Action::Done);
    let third = q.acquire().await.unwrap();
    assert_eq!(
        (*third.key(), third.waited()),
        (3, secs(4)),
        "due at 1 s, run at 5 s"
    );
    third.complete(Action::Done);
}

#[tokio::test(start_paused = true)]
async fn inspect_tells_where_a_key_is_and_how_often_it_failed() {
    let q: TaskQueue<&str> = queue(1, policy(secs(1), secs(60), 0.0));
    assert_eq!(q.inspect(&"a"), None);
    q.enqueue("a");
    assert_eq!(
        q.inspect(&"a"),
        Some(KeyState {
            place: KeyPlace::Ready,
            failures: 0,
            priority: Priority::High,
        })
    );
    let lease = q.try_acquire().expect("a is due");
    assert_eq!(
        q.inspect(&"a").map(|s| s.place),
        Some(KeyPlace::Running { rerun: false })
    );
    q.enqueue("a");
    assert_eq!(
        q.inspect(&"a").map(|s| s.place),
        Some(KeyPlace::Running { rerun: true })
    );
    let failed_at = Instant::now();
    lease.complete(Action::Retry);
    let state = q.inspect(&"a").expect("backing off");
    assert_eq!(state.failures, 1);
    assert_eq!(state.place, KeyPlace::Delayed(failed_at + secs(1)));
    sleep(secs(1)).await;
    let lease = q.acquire().await.expect("due after the back-off");
    lease.complete(Action::Done);
    assert_eq!(q.inspect(&"a"), None, "done and gone, failures forgotten");
}

/// Takes every due key without waiting, completing each with `Done`, and returns them in
/// the order they were handed out.
fn drain_order<K: std::hash::Hash + Eq + Clone + Send + 'static>(q: &TaskQueue<K>) -> Vec<K> {
    let mut order = Vec::new();
    while let Some(lease) = q.try_acquire() {
        order.push(lease.key().clone());
        lease.complete(Action::Done);
    }
    order
}

#[tokio::test(start_paused = true)]
async fn high_keys_go_before_low_ones_and_each_line_is_fifo() {
    let q = queue::<u32>(1, BackOffPolicy::default());
    for key in 0..3 {
        assert_eq!(q.enqueue_as(key, Priority::Low), Enqueued::Added);
    }
    q.enqueue(10);
    q.enqueue(11);
    let stats = q.stats();
    assert_eq!((stats.ready, stats.ready_low), (5, 3));
    assert_eq!(drain_order(&q), [10, 11, 0, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_high_enqueue_promotes_a_low_key_and_a_low_one_never_demotes() {
    let q = queue::<u32>(1, BackOffPolicy::default());
    for key in 0..4 {
        q.enqueue_as(key, Priority::Low);
    }
    q.enqueue(10);
    assert_eq!(q.enqueue(2), Enqueued::Advanced, "promoted");
    assert_eq!(q.enqueue(2), Enqueued::Unchanged);
    assert_eq!(q.enqueue_as(10, Priority::Low), Enqueued::Unchanged);
    assert_eq!(q.inspect(&2).map(|s| s.priority), Some(Priority::High));
    assert_eq!(q.inspect(&10).map(|s| s.priority), Some(Priority::High));
    assert_eq!(q.stats().ready_low, 3);
    assert_eq!(q.stats().ready, 5, "the promoted key is counted once");
    // The promoted key joins the back of the high line.
    assert_eq!(drain_order(&q), [10, 2, 0, 1, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_promoted_key_keeps_the_time_it_became_due() {
    let q = queue::<u32>(1, BackOffPolicy::default());
    q.enqueue_as(1, Priority::Low);
    sleep(secs(7)).await;
    q.enqueue(1);
    let lease = q.try_acquire().expect("due");
    assert_eq!(lease.waited(), secs(7));
    lease.complete(Action::Done);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_low_key_promoted_runs_high_when_due() {
    let q = queue::<u32>(1, BackOffPolicy::default());
    q.enqueue_after_as(1, secs(10), Priority::Low);
    q.enqueue_after_as(2, secs(10), Priority::Low);
    // A high enqueue for later than the key's timer changes no time, only the priority.
    assert_eq!(q.enqueue_after(2, secs(20)), Enqueued::Advanced);
    assert_eq!(
        q.inspect(&2).map(|s| (s.place, s.priority)),
        Some((KeyPlace::Delayed(Instant::now() + secs(10)), Priority::High))
    );
    sleep(secs(10)).await;
    assert_eq!(drain_order(&q), [2, 1]);
}

#[tokio::test(start_paused = true)]
async fn low_keys_get_one_run_in_low_share_plus_one_while_high_keys_keep_coming() {
    // One worker; high keys arrive faster than it runs them: without a share, the low
    // keys would wait forever (controller-runtime#3496).
    let q: TaskQueue<(bool, u32)> =
        match TaskQueue::builder().max_concurrent(1).low_share(4).build() {
            Ok(q) => q,
            Err(e) => panic!("{e}"),
        };
    for i in 0..10 {
        q.enqueue_as((false, i), Priority::Low);
    }
    let mut next_high = 0;
    let mut order = Vec::new();
    while order.iter().filter(|(high, _)| !high).count() < 10 {
        // Two new high keys for every run.
        for _ in 0..2 {
            q.enqueue((true, next_high));
            next_high += 1;
        }
        let lease = q.try_acquire().expect("keys are due");
        order.push(*lease.key());
        lease.complete(Action::Done);
        assert!(order.len() < 1000, "the low keys starve: {order:?}");
    }
    // Every fifth run is a low key, in their order.
    let lows: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, (high, _))| !high)
        .map(|(at, _)| at)
        .collect();
    assert_eq!(lows, (0..10).map(|i| 4 + 5 * i).collect::<Vec<_>>());
    let low_keys: Vec<u32> = order.iter().filter(|(h, _)| !h).map(|(_, k)| *k).collect();
    assert_eq!(low_keys, (0..10).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn with_no_high_keys_waiting_the_low_line_has_every_slot() {
    let q = queue::<u32>(3, BackOffPolicy::default());
    for key in 0..3 {
        q.enqueue_as(key, Priority::Low);
    }
    let leases: Vec<_> = std::iter::from_fn(|| q.try_acquire()).collect();
    assert_eq!(leases.len(), 3);
    // A high key arriving now takes the first slot that frees.
    q.enqueue_as(9, Priority::Low);
    q.enqueue(10);
    drop(leases);
    let lease = q.try_acquire().expect("a slot is free");
    assert_eq!(*lease.key(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_resync_requeue_runs_low_and_an_event_during_the_run_raises_it() {
    let q = queue::<u32>(2, BackOffPolicy::default());
    q.enqueue(1);
    q.enqueue(2);
    let one = q.try_acquire().expect("due");
    let two = q.try_acquire().expect("due");
    // 1 ends in a resync at low priority; 2 too, but was enqueued (high) while it ran.
    assert_eq!(q.enqueue_as(2, Priority::Low), Enqueued::Rerun);
    assert_eq!(q.enqueue(2), Enqueued::Rerun, "the mark is raised");
    assert_eq!(q.inspect(&2).map(|s| s.priority), Some(Priority::High));
    one.complete_as(Action::RequeueAfter(secs(30)), Priority::Low);
    two.complete_as(Action::RequeueAfter(secs(30)), Priority::Low);
    assert_eq!(q.inspect(&1).map(|s| s.priority), Some(Priority::Low));
    assert_eq!(
        q.inspect(&2).map(|s| (s.place, s.priority)),
        Some((KeyPlace::Ready, Priority::High)),
        "the rerun mark: due now, high"
    );
    assert_eq!(drain_order(&q), [2]);
    sleep(secs(30)).await;
    q.enqueue(3);
    assert_eq!(drain_order(&q), [3, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_retries_at_the_priority_it_ran_at() {
    let q = queue::<u32>(1, policy(secs(1), secs(60), 0.0));
    q.enqueue_as(1, Priority::Low);
    let lease = q.try_acquire().expect("due");
    assert_eq!(lease.priority(), Priority::Low);
    lease.complete(Action::Retry);
    assert_eq!(q.inspect(&1).map(|s| s.priority), Some(Priority::Low));
    q.enqueue(2);
    sleep(secs(1)).await;
    q.enqueue(3);
    assert_eq!(drain_order(&q), [2, 3, 1]);
}

#[test]
fn a_low_share_of_zero_is_refused() {
    let refused = TaskQueue::builder().low_share(0).build::<u32>();
    assert_eq!(
        refused.err(),
        Some(windlass_tasks::queue::QueueConfigError::ZeroLowShare)
    );
}
