//! The renew loop shared by the replica-wide locks, as one tokio task: try the lock every
//! poll period, publish leadership, and give it up at the renew deadline when renewals stop
//! succeeding.

use parking_lot::{Mutex, MutexGuard};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::error::Elapsed;
use tokio::time::{Instant, sleep_until, timeout};

use super::{LockError, Timing};

/// What one attempt on a replica-wide lock found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the lock now (it took or renewed it).
    Held,
    /// Another replica holds it (`holder`, when the lock names it), or won a race for it.
    Taken {
        /// The other holder's identity, if known.
        holder: Option<String>,
    },
}

/// A replica-wide lock the renew loop keeps: a Lease, a leader-for-life ConfigMap, or a
/// test double.
#[async_trait]
pub trait RenewedLock: Send + 'static {
    /// Take the lock if it is free, renew it if this replica holds it. A lock another
    /// replica holds is [`Attempt::Taken`], not an error.
    ///
    /// # Errors
    /// [`LockError`] if it could not find out (a failed request): the loop keeps the
    /// leadership it had until the renew deadline and retries sooner.
    async fn try_acquire(&mut self) -> Result<Attempt, LockError>;

    /// Give the lock up if this replica holds it, so another replica can take it at once.
    ///
    /// # Errors
    /// [`LockError`] if the request failed; the lock then expires (or is collected) on its
    /// own.
    async fn release(&mut self) -> Result<(), LockError>;
}

/// Leadership as the loop last established it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    No,
    /// Until the renew deadline.
    Until(Instant),
    /// Until released or lost (leader-for-life).
    Forever,
}

/// State shared by the loop and every handle.
struct Shared {
    held: Mutex<Held>,
    /// Mirrors `held`, for notifications.
    leader: watch::Sender<bool>,
    /// Set by shutdown and drop: an attempt that completes afterwards must not lead again.
    stopping: AtomicBool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            held: Mutex::new(Held::No),
            leader: watch::Sender::new(false),
            stopping: AtomicBool::new(false),
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // A panic while holding this lock cannot leave `Held` half-written.
        self.held.lock()
    }

    fn is_leader(&self) -> bool {
        match *self.held() {
            Held::No => false,
            Held::Until(deadline) => Instant::now() < deadline,
            Held::Forever => true,
        }
    }

    /// The renew deadline while leading with an expiring lock.
    fn deadline(&self) -> Option<Instant> {
        match *self.held() {
            Held::Until(deadline) => Some(deadline),
            Held::No | Held::Forever => None,
        }
    }

    fn lead(&self, held: Held) {
        let mut current = self.held();
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        if *current == Held::No {
            tracing::info!("this replica is now the leader");
        }
        *current = held;
        self.leader
            .send_if_modified(|leader| !std::mem::replace(leader, true));
    }

    /// Step down for good: no later attempt leads again.
    fn stop(&self, why: &str) {
        self.stopping.store(true, Ordering::SeqCst);
        self.step_down(why);
    }

    fn step_down(&self, why: &str) {
        let mut current = self.held();
        if *current != Held::No {
            tracing::warn!("this replica is no longer the leader: {why}");
        }
        *current = Held::No;
        self.leader
            .send_if_modified(|leader| std::mem::replace(leader, false));
    }
}

/// Steps down when the loop ends for any reason: shutdown, a drop of every handle, a
/// panic in a lock, an aborted task.
struct StepDownOnExit(Arc<Shared>);

impl Drop for StepDownOnExit {
    fn drop(&mut self) {
        self.0.step_down("the leader-election task stopped");
    }
}

/// The handle of one renew loop.
pub(super) struct Elector {
    shared: Arc<Shared>,
    /// Sent: stop and release. Dropped (with the last handle): stop without releasing.
    stop: Mutex<Option<oneshot::Sender<()>>>,
    task: tokio::sync::Mutex<Option<JoinHandle<Result<(), LockError>>>>,
}

impl Elector {
    pub(super) fn spawn(lock: impl RenewedLock, timing: Timing) -> Elector {
        let shared = Arc::new(Shared::new());
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(run(lock, timing, shared.clone(), stop_rx));
        Elector {
            shared,
            stop: Mutex::new(Some(stop_tx)),
            task: tokio::sync::Mutex::new(Some(task)),
        }
    }

    pub(super) fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    pub(super) fn watch(&self) -> watch::Receiver<bool> {
        self.shared.leader.subscribe()
    }

    pub(super) async fn shutdown(&self) -> Result<(), LockError> {
        let stop = self.stop.lock().take();
        let Some(stop) = stop else {
            return Ok(());
        };
        // Step down before anything else, so nothing new starts while the lock is released.
        self.shared.stop("shutting down");
        // The loop may have ended already (a panic); its result says so below.
        let _ = stop.send(());
        let task = self.task.lock().await.take();
        match task {
            Some(task) => task.await.map_err(|e| LockError::Task(e.to_string()))?,
            None => Ok(()),
        }
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        // Dropping the stop sender ends the loop without a release; nothing to do here
        // beyond making sure no handle observes leadership afterwards.
        self.shared.stop("the leadership handle was dropped");
    }
}

/// The loop: attempt, publish, wait; until told to stop (release) or abandoned (no release).
async fn run(
    mut lock: impl RenewedLock,
    timing: Timing,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) -> Result<(), LockError> {
    let _step_down = StepDownOnExit(shared.clone());
    let release = loop {
        let started = Instant::now();
        let outcome = match attempt(&mut lock, &timing, &shared, &mut stop, started).await {
            ControlFlow::Continue(outcome) => outcome,
            ControlFlow::Break(release) => break release,
        };
        let pause = publish(outcome, &timing, &shared, started);
        if let ControlFlow::Break(release) = pause_until(started + pause, &shared, &mut stop).await
        {
            break release;
        }
    };
    shared.stop("leader election stopped");
    if !release {
        return Ok(());
    }
    match timeout(timing.attempt_timeout(), lock.release()).await {
        Ok(result) => result,
        Err(_) => Err(LockError::Timeout {
            what: "releasing the lock".to_string(),
            after: timing.attempt_timeout(),
        }),
    }
}

/// What one attempt on the lock came to: its answer, or `Err` if it timed out.
type Outcome = Result<Result<Attempt, LockError>, Elapsed>;

/// One attempt on the lock, begun at `started` and bounded by the attempt timeout. While it
/// runs, the renew deadline still applies: leadership ends there even if the request hangs.
/// `Break` if told to stop first, with whether to release the lock (a stop sent, not only
/// dropped).
async fn attempt(
    lock: &mut impl RenewedLock,
    timing: &Timing,
    shared: &Shared,
    stop: &mut oneshot::Receiver<()>,
    started: Instant,
) -> ControlFlow<bool, Outcome> {
    let attempt = timeout(timing.attempt_timeout(), lock.try_acquire());
    tokio::pin!(attempt);
    loop {
        let deadline = shared.deadline();
        tokio::select! {
            biased;
            stopped = &mut *stop => return ControlFlow::Break(stopped.is_ok()),
            _ = sleep_until(deadline.unwrap_or(started)), if deadline.is_some() => {
                shared.step_down("the lock could not be renewed before the renew deadline");
            }
            outcome = &mut attempt => return ControlFlow::Continue(outcome),
        }
    }
}

/// Publish what the attempt begun at `started` found: lead (until the renew deadline
/// counted from `started`), or follow. Returns how long after `started` to try again:
/// the poll period, or the shorter retry period after a failure.
fn publish(outcome: Outcome, timing: &Timing, shared: &Shared, started: Instant) -> Duration {
    match outcome {
        Ok(Ok(Attempt::Held)) => {
            match timing.renew_deadline {
                None => shared.lead(Held::Forever),
                Some(valid) if started + valid > Instant::now() => {
                    shared.lead(Held::Until(started + valid));
                }
                Some(valid) => shared.step_down(&format!(
                    "renewing took longer than the renew deadline ({valid:?})"
                )),
            }
            timing.poll
        }
        Ok(Ok(Attempt::Taken { holder })) => {
            let holder = holder.as_deref().unwrap_or("another replica");
            shared.step_down(&format!("the lock is held by {holder}"));
            timing.poll
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "leader election: attempt on the lock failed");
            timing.retry_after_error
        }
        Err(_) => {
            tracing::warn!(
                after = ?timing.attempt_timeout(),
                "leader election: attempt on the lock timed out"
            );
            timing.retry_after_error
        }
    }
}

/// Wait until `wake`, the time of the next attempt, stepping down at the renew deadline if
/// that comes first. `Break` if told to stop first, with whether to release the lock.
async fn pause_until(
    wake: Instant,
    shared: &Shared,
    stop: &mut oneshot::Receiver<()>,
) -> ControlFlow<bool> {
    loop {
        let deadline = shared.deadline();
        tokio::select! {
            biased;
            stopped = &mut *stop => return ControlFlow::Break(stopped.is_ok()),
            _ = sleep_until(deadline.unwrap_or(wake)), if deadline.is_some_and(|d| d < wake) => {
                shared.step_down("the lock could not be renewed before the renew deadline");
            }
            _ = sleep_until(wake) => return ControlFlow::Continue(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::VecDeque;

    use super::*;
    use crate::runtime::leader::Leadership;

    /// What the scripted lock answers, in order; the last answer repeats.
    #[derive(Clone)]
    enum Answer {
        Held,
        Taken,
        Fail,
        /// Never answers.
        Hang,
    }

    #[derive(Default)]
    struct Log {
        attempts: Vec<Instant>,
        released: bool,
    }

    struct Scripted {
        answers: VecDeque<Answer>,
        log: Arc<Mutex<Log>>,
    }

    #[async_trait]
    impl RenewedLock for Scripted {
        async fn try_acquire(&mut self) -> Result<Attempt, LockError> {
            self.log.lock().attempts.push(Instant::now());
            let answer = if self.answers.len() > 1 {
                self.answers.pop_front().unwrap()
            } else {
                self.answers.front().cloned().unwrap()
            };
            // A request takes a little while.
            tokio::time::sleep(Duration::from_millis(10)).await;
            match answer {
                Answer::Held => Ok(Attempt::Held),
                Answer::Taken => Ok(Attempt::Taken {
                    holder: Some("other".into()),
                }),
                Answer::Fail => Err(LockError::Task("connection refused".into())),
                Answer::Hang => std::future::pending().await,
            }
        }

        async fn release(&mut self) -> Result<(), LockError> {
            self.log.lock().released = true;
            Ok(())
        }
    }

    fn scripted(answers: &[Answer]) -> (Scripted, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        (
            Scripted {
                answers: answers.iter().cloned().collect(),
                log: log.clone(),
            },
            log,
        )
    }

    /// A 10 s lease renewed every 2 s: renew deadline 8 s, retry after errors every 2 s.
    fn timing() -> Timing {
        Timing::for_lease(Duration::from_secs(10), Duration::from_secs(2)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn leads_after_the_first_successful_attempt_and_renews_every_poll() {
        let (lock, log) = scripted(&[Answer::Held]);
        let leadership = Leadership::elect(lock, timing());
        assert!(!leadership.is_leader());
        leadership.wait_until_leader().await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(leadership.is_leader());
        let attempts = log.lock().attempts.clone();
        let gaps: Vec<_> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|g| *g == Duration::from_secs(2)),
            "{gaps:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failing_renewals_step_down_at_the_renew_deadline_before_the_lease_expires() {
        let (lock, log) = scripted(&[Answer::Held, Answer::Fail]);
        let leadership = Leadership::elect(lock, timing());
        let mut changes = leadership.watch();
        changes.wait_for(|l| *l).await.unwrap();
        let last_success = log.lock().attempts[0];
        changes.wait_for(|l| !*l).await.unwrap();
        let stepped_down = Instant::now();
        // Stepped down exactly at the renew deadline, counted from the start of the last
        // successful attempt: well before the lease expires at the other replicas' end.
        assert_eq!(stepped_down - last_success, Duration::from_secs(8));
        assert!(stepped_down < last_success + Duration::from_secs(10));
        assert!(!leadership.is_leader());
        // Failures were retried in between, more often than the poll period allows for.
        let attempts = log.lock().attempts.len();
        assert!(attempts >= 4, "{attempts} attempts");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_request_does_not_keep_leadership_past_the_deadline() {
        let (lock, log) = scripted(&[Answer::Held, Answer::Hang]);
        let leadership = Leadership::elect(lock, timing());
        leadership.wait_until_leader().await;
        let last_success = log.lock().attempts[0];
        let mut changes = leadership.watch();
        changes.wait_for(|l| !*l).await.unwrap();
        assert_eq!(Instant::now() - last_success, Duration::from_secs(8));
    }

    #[tokio::test(start_paused = true)]
    async fn is_leader_goes_false_at_the_deadline_even_if_the_task_is_late() {
        let shared = Shared::new();
        shared.lead(Held::Until(Instant::now() + Duration::from_secs(1)));
        assert!(shared.is_leader());
        // Advance the clock without letting any task run.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!shared.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn another_holder_means_follower_at_once_and_taking_over_later_means_leader() {
        let (lock, _log) = scripted(&[Answer::Held, Answer::Taken, Answer::Taken, Answer::Held]);
        let leadership = Leadership::elect(lock, timing());
        let mut changes = leadership.watch();
        changes.wait_for(|l| *l).await.unwrap();
        let led = Instant::now();
        changes.wait_for(|l| !*l).await.unwrap();
        assert_eq!(Instant::now() - led, Duration::from_secs(2));
        changes.wait_for(|l| *l).await.unwrap();
        assert!(leadership.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_steps_down_and_releases_and_dropping_does_not_release() {
        let (lock, log) = scripted(&[Answer::Held]);
        let leadership = Leadership::elect(lock, timing());
        leadership.wait_until_leader().await;
        let watcher = leadership.watch();
        leadership.shutdown().await.unwrap();
        assert!(!leadership.is_leader());
        assert!(!*watcher.borrow());
        assert!(log.lock().released);
        // A second shutdown (from any clone) is a no-op.
        leadership.clone().shutdown().await.unwrap();

        let (lock, log) = scripted(&[Answer::Held]);
        let leadership = Leadership::elect(lock, timing());
        leadership.wait_until_leader().await;
        let mut watcher = leadership.watch();
        drop(leadership);
        watcher.wait_for(|l| !*l).await.ok();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let log = log.lock();
        assert!(!log.released);
        assert_eq!(log.attempts.len(), 1, "no renewals after the drop");
    }

    #[tokio::test(start_paused = true)]
    async fn leader_for_life_keeps_leading_while_requests_fail() {
        let (lock, _log) = scripted(&[Answer::Held, Answer::Fail]);
        let leadership = Leadership::elect(
            lock,
            Timing::until_released(Duration::from_secs(2)).unwrap(),
        );
        leadership.wait_until_leader().await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(leadership.is_leader());
    }
}
