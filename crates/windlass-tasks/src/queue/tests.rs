use std::time::Duration;

use super::state::COMPACT_MIN;
use super::*;

fn queue(max: usize) -> TaskQueue<u32> {
    match TaskQueue::builder().max_concurrent(max).build() {
        Ok(q) => q,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn results_map_onto_outcomes() {
    let ok: Result<Option<Duration>, String> = Ok(None);
    assert_eq!(Action::from(ok), Action::Done);
    let requeue: Result<Option<Duration>, String> = Ok(Some(Duration::from_secs(3)));
    assert_eq!(
        Action::from(requeue),
        Action::RequeueAfter(Duration::from_secs(3))
    );
    let failed: Result<Option<Duration>, String> = Err("conflict".into());
    assert_eq!(Action::from(failed), Action::Retry);
}

#[test]
fn zero_concurrency_is_rejected() {
    let err = TaskQueue::builder().max_concurrent(0).build::<u32>();
    assert_eq!(err.err(), Some(QueueConfigError::ZeroConcurrency));
}

#[tokio::test(start_paused = true)]
async fn merge_results_are_reported() {
    let q = queue(1);
    assert_eq!(q.enqueue_after(1, Duration::from_secs(10)), Enqueued::Added);
    assert_eq!(
        q.enqueue_after(1, Duration::from_secs(20)),
        Enqueued::Unchanged
    );
    assert_eq!(
        q.enqueue_after(1, Duration::from_secs(5)),
        Enqueued::Advanced
    );
    assert_eq!(q.enqueue(1), Enqueued::Advanced);
    assert_eq!(q.enqueue(1), Enqueued::Unchanged);
    let s = q.stats();
    assert_eq!((s.ready, s.delayed, s.keys()), (1, 0, 1));
    let Some(lease) = q.acquire().await else {
        panic!("queue shut down")
    };
    assert_eq!(q.enqueue(1), Enqueued::Rerun);
    assert_eq!(q.enqueue(1), Enqueued::Unchanged);
    assert_eq!(q.stats().rerun_marked, 1);
    lease.complete(Action::Done);
    let s = q.stats();
    assert_eq!((s.ready, s.running, s.rerun_marked), (1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn stale_slots_are_compacted() {
    let q = queue(1);
    // Each advance leaves a stale timer behind.
    for round in 0..10u64 {
        for key in 0..1000u32 {
            q.enqueue_after(key, Duration::from_secs(10_000 - round));
        }
    }
    let state = q.shared.state.lock();
    assert_eq!(state.lines.delayed, 1000);
    assert!(
        state.lines.timers.len() <= 3 * 1000 + COMPACT_MIN,
        "timer heap holds {} slots for 1000 keys",
        state.lines.timers.len()
    );
}

#[tokio::test]
async fn shared_keys_are_found_by_what_they_point_at() {
    let a = || "a".to_string();
    let queue: TaskQueue<std::sync::Arc<String>> = TaskQueue::builder().build().unwrap();
    queue.enqueue(std::sync::Arc::new(a()));
    assert!(queue.contains(&a()));
    assert!(queue.inspect(&a()).is_some());
    assert!(!queue.contains(&"b".to_string()));
    assert!(queue.remove(&a()), "pending, so removed");
    assert!(!queue.contains(&a()));
    assert!(!queue.remove(&a()), "gone");
}
