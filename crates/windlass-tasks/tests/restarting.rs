//! RestartingTask on Tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use tokio::time::{Instant, sleep};
use windlass_tasks::backoff::BackOffPolicy;
use windlass_tasks::restarting::RestartingTask;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn boom() -> Result<(), String> {
    panic!("boom")
}

/// Sets its flag when dropped: shows that a run's future is gone.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_task_is_restarted_with_back_off_capped_at_120s() {
    let t0 = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&starts);
    let task = RestartingTask::new("bomb", move || {
        s.lock().push(t0.elapsed());
        async move {
            sleep(Duration::ZERO).await;
            boom()
        }
    })
    .reset_after(None);
    assert!(!task.is_running(), "a new task is stopped");
    task.start();
    sleep(secs(1000)).await;
    // 1 s, doubling: runs at 0, 1, 3, 7, 15, 31, 63, 127, 247 (cap 120), 367, …
    let expected: Vec<Duration> = [
        0, 1, 3, 7, 15, 31, 63, 127, 247, 367, 487, 607, 727, 847, 967,
    ]
    .map(secs)
    .to_vec();
    assert_eq!(*starts.lock(), expected);
    assert!(task.is_running(), "still alive, waiting to restart");
    assert_eq!(task.crash_count(), 15);
    task.wait_for_termination().await;
    assert!(!task.is_running());
    sleep(secs(1000)).await;
    assert_eq!(task.run_count(), 15, "no restart after stop");
}

#[tokio::test(start_paused = true)]
async fn an_error_is_a_crash_and_a_clean_exit_is_not_restarted() {
    let runs = Arc::new(AtomicU32::new(0));
    let r = Arc::clone(&runs);
    let task = RestartingTask::new("flaky", move || {
        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if n < 3 {
                Err(format!("attempt {n} failed"))
            } else {
                Ok(())
            }
        }
    });
    task.start();
    sleep(secs(60)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(task.crash_count(), 2);
    assert!(!task.is_running(), "a clean exit ends the task");
    // start() runs it again after a clean exit.
    task.start();
    sleep(secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_the_running_future_and_nothing_restarts_it() {
    let runs = Arc::new(AtomicU32::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let (r, d) = (Arc::clone(&runs), Arc::clone(&dropped));
    let task = RestartingTask::new("forever", move || {
        r.fetch_add(1, Ordering::SeqCst);
        let flag = DropFlag(Arc::clone(&d));
        async move {
            let _flag = flag;
            sleep(secs(1_000_000)).await;
            Ok::<(), String>(())
        }
    });
    task.start();
    task.start(); // already running: no second run
    sleep(secs(5)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(task.is_running());
    task.stop();
    task.stop(); // no-op
    task.wait_for_termination().await;
    assert!(dropped.load(Ordering::SeqCst), "the future was dropped");
    assert!(!task.is_running());
    sleep(secs(1000)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(task.crash_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn restart_waits_for_the_old_run_to_be_gone() {
    let live = Arc::new(AtomicU32::new(0));
    let overlap = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU32::new(0));
    let (l, o, r) = (Arc::clone(&live), Arc::clone(&overlap), Arc::clone(&runs));
    struct Live(Arc<AtomicU32>);
    impl Drop for Live {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let task = RestartingTask::new("single", move || {
        r.fetch_add(1, Ordering::SeqCst);
        if l.fetch_add(1, Ordering::SeqCst) > 0 {
            o.store(true, Ordering::SeqCst);
        }
        let guard = Live(Arc::clone(&l));
        async move {
            let _guard = guard;
            sleep(secs(1_000_000)).await;
            Ok::<(), String>(())
        }
    });
    task.start();
    for _ in 0..5 {
        sleep(secs(1)).await;
        task.restart();
    }
    sleep(secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 6);
    assert!(
        !overlap.load(Ordering::SeqCst),
        "two runs were alive at once"
    );
    task.wait_for_termination().await;
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn start_during_a_back_off_resets_it_and_runs_now() {
    let t0 = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&starts);
    let policy = match BackOffPolicy::new(secs(100), 2.0, secs(1000)) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let task = RestartingTask::new("slow-backoff", move || {
        s.lock().push(t0.elapsed());
        async { Err::<(), _>("down") }
    })
    .with_backoff(policy);
    task.start();
    sleep(secs(150)).await; // crashed at 0, restarted at 100 (crash), now waiting 200 s
    task.start(); // cuts the wait short and resets the back-off
    sleep(secs(50)).await;
    assert_eq!(*starts.lock(), [0, 100, 150].map(secs));
    sleep(secs(100)).await; // back-off was reset: next restart 100 s after 150
    assert_eq!(*starts.lock(), [0, 100, 150, 250].map(secs));
    task.wait_for_termination().await;
}

#[tokio::test(start_paused = true)]
async fn a_long_healthy_run_resets_the_back_off() {
    let t0 = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&starts);
    let runs = Arc::new(AtomicU32::new(0));
    let r = Arc::clone(&runs);
    let task = RestartingTask::new("watch", move || {
        s.lock().push(t0.elapsed());
        let n = r.fetch_add(1, Ordering::SeqCst);
        async move {
            // Runs 0-3 crash at once; run 4 is healthy for 500 s, then crashes.
            if n == 4 {
                sleep(secs(500)).await;
            }
            Err::<(), _>("stream broke")
        }
    });
    task.start();
    sleep(secs(520)).await;
    // 0, 1, 3, 7, 15 (healthy until 515), then 1 s later (not 16 s), then 2 s later.
    assert_eq!(*starts.lock(), [0, 1, 3, 7, 15, 516, 518].map(secs));
    task.wait_for_termination().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_stops_the_task() {
    let dropped = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&dropped);
    let task = RestartingTask::new("orphan", move || {
        let flag = DropFlag(Arc::clone(&d));
        async move {
            let _flag = flag;
            sleep(secs(1_000_000)).await;
            Ok::<(), String>(())
        }
    });
    let clone = task.clone();
    task.start();
    sleep(secs(1)).await;
    drop(task);
    sleep(secs(1)).await;
    assert!(!dropped.load(Ordering::SeqCst), "a clone still holds it");
    drop(clone);
    sleep(secs(1)).await;
    assert!(dropped.load(Ordering::SeqCst));
}

/// A run that ends at once with `result` and, if given a slot, calls `start()` on the task in
/// it when dropped: right after the run has ended and before the supervisor has decided what
/// follows — the moment a `start()` from another thread that saw the crash can land in.
struct EndThenStart {
    result: Option<Result<(), String>>,
    start_on_drop: Option<Arc<Mutex<Option<RestartingTask>>>>,
}

impl std::future::Future for EndThenStart {
    type Output = Result<(), String>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::task::Poll::Ready(self.result.take().unwrap_or(Ok(())))
    }
}

impl Drop for EndThenStart {
    fn drop(&mut self) {
        if let Some(slot) = &self.start_on_drop
            && let Some(task) = slot.lock().as_ref()
        {
            task.start();
        }
    }
}

/// A task whose first run ends with `first` and calls `start()` right after; later runs fail.
fn end_then_start(
    first: Result<(), String>,
    policy: BackOffPolicy,
) -> (RestartingTask, Arc<Mutex<Vec<Duration>>>) {
    let t0 = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let slot: Arc<Mutex<Option<RestartingTask>>> = Arc::default();
    let runs = Arc::new(AtomicU32::new(0));
    let (s, sl, r) = (Arc::clone(&starts), Arc::clone(&slot), Arc::clone(&runs));
    let task = RestartingTask::new("observed", move || {
        s.lock().push(t0.elapsed());
        let first_run = r.fetch_add(1, Ordering::SeqCst) == 0;
        EndThenStart {
            result: Some(if first_run {
                first.clone()
            } else {
                Err("down".to_string())
            }),
            start_on_drop: first_run.then(|| Arc::clone(&sl)),
        }
    })
    .with_backoff(policy);
    // The slot holds a handle only until the first run's drop guard has used it.
    *slot.lock() = Some(task.clone());
    (task, starts)
}

#[tokio::test(start_paused = true)]
async fn start_right_after_a_crash_restarts_at_once() {
    let policy = match BackOffPolicy::new(secs(100), 2.0, secs(1000)) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let (task, starts) = end_then_start(Err("down".to_string()), policy);
    task.start();
    sleep(secs(50)).await;
    // The first run crashed at 0 and start() came right after: restarted at once, not at 100.
    assert_eq!(*starts.lock(), [0, 0].map(secs));
    sleep(secs(100)).await;
    // The start() also reset the back-off, and asked for one restart only: the second crash
    // waits the first delay (100 s).
    assert_eq!(*starts.lock(), [0, 0, 100].map(secs));
    assert_eq!(task.crash_count(), 3);
    task.wait_for_termination().await;
}

#[tokio::test(start_paused = true)]
async fn start_right_after_a_clean_exit_runs_it_again() {
    let policy = match BackOffPolicy::new(secs(100), 2.0, secs(1000)) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let (task, starts) = end_then_start(Ok(()), policy);
    task.start();
    sleep(secs(50)).await;
    // Exited cleanly at 0, started again right after: the start is not lost.
    assert_eq!(*starts.lock(), [0, 0].map(secs));
    assert!(
        task.is_running(),
        "waiting out the back-off of the second run's crash"
    );
    task.wait_for_termination().await;
}

#[tokio::test(start_paused = true)]
async fn start_during_a_run_only_resets_the_back_off() {
    let t0 = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let runs = Arc::new(AtomicU32::new(0));
    let (s, r) = (Arc::clone(&starts), Arc::clone(&runs));
    let policy = match BackOffPolicy::new(secs(100), 2.0, secs(1000)) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let task = RestartingTask::new("busy", move || {
        s.lock().push(t0.elapsed());
        let n = r.fetch_add(1, Ordering::SeqCst);
        async move {
            // Run 0 crashes at once; run 1 (at 100) works for 10 s, then crashes.
            if n == 1 {
                sleep(secs(10)).await;
            }
            Err::<(), _>("down")
        }
    })
    .with_backoff(policy)
    .reset_after(None);
    task.start();
    sleep(secs(105)).await;
    task.start(); // during run 1: resets the back-off (200 s → 100 s), no immediate restart
    sleep(secs(200)).await;
    assert_eq!(*starts.lock(), [0, 100, 210].map(secs));
    task.wait_for_termination().await;
}

/// Real threads: whoever sees `crash_count()` go up and calls `start()` gets a restart at once,
/// however the call interleaves with the supervisor (before or after it registers the wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_after_an_observed_crash_restarts_at_once_across_threads() {
    let policy = match BackOffPolicy::new(secs(3600), 2.0, secs(3600)) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    for round in 0..50 {
        let task =
            RestartingTask::new("watched", || async { Err::<(), _>("down") }).with_backoff(policy);
        let observer = {
            let task = task.clone();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + secs(10);
                while task.crash_count() == 0 {
                    assert!(std::time::Instant::now() < deadline, "no crash seen");
                    std::hint::spin_loop();
                }
                task.start();
            })
        };
        task.start();
        if observer.join().is_err() {
            panic!("observer thread panicked");
        }
        let deadline = std::time::Instant::now() + secs(10);
        while task.run_count() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: start() after the crash did not restart it at once"
            );
            tokio::task::yield_now().await;
        }
        task.wait_for_termination().await;
    }
}
