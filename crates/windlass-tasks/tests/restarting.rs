//! RestartingTask on Tokio's paused clock.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, sleep};
use windlass_tasks::backoff::BackOffPolicy;
use windlass_tasks::restarting::RestartingTask;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        lock(&s).push(t0.elapsed());
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
    assert_eq!(*lock(&starts), expected);
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
        lock(&s).push(t0.elapsed());
        async { Err::<(), _>("down") }
    })
    .with_backoff(policy);
    task.start();
    sleep(secs(150)).await; // crashed at 0, restarted at 100 (crash), now waiting 200 s
    task.start(); // cuts the wait short and resets the back-off
    sleep(secs(50)).await;
    assert_eq!(*lock(&starts), [0, 100, 150].map(secs));
    sleep(secs(100)).await; // back-off was reset: next restart 100 s after 150
    assert_eq!(*lock(&starts), [0, 100, 150, 250].map(secs));
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
        lock(&s).push(t0.elapsed());
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
    assert_eq!(*lock(&starts), [0, 1, 3, 7, 15, 516, 518].map(secs));
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
