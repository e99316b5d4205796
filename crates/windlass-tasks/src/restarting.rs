//! A background task that is restarted with exponential back-off when it crashes (yaook's
//! `RestartingTask`). Meant for the loops an operator must keep alive: watch streams,
//! leader election, periodic resyncs.
//!
//! ```
//! use std::time::Duration;
//! use windlass_tasks::restarting::RestartingTask;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let task = RestartingTask::new("watch-pods", || async {
//!     // ... a loop that returns Err (or panics) when its stream breaks ...
//!     tokio::time::sleep(Duration::from_secs(3600)).await;
//!     Ok::<(), std::io::Error>(())
//! });
//! task.start();
//! assert!(task.is_running());
//! task.wait_for_termination().await; // cancels it and waits until it is gone
//! assert!(!task.is_running());
//! # }
//! ```
//!
//! # Semantics
//!
//! * A new task is stopped. [`start`](RestartingTask::start) resets the back-off and, unless
//!   the task is already running, calls the function and runs its future on a Tokio task.
//!   Called after the task's future has ended — while it waits out a back-off, or in the
//!   moment between the future's end and the supervisor's decision — it restarts it at once
//!   (an addition: in yaook the call only resets the back-off and the wait goes on). Called
//!   while the future is still running, it only resets the back-off, as in yaook. The future
//!   has ended when it returned (or panicked), before it is dropped: a `start` from its own
//!   drop guards, or from whoever saw its last words, counts as after the end.
//! * The future ending in `Err` or panicking is a **crash**: it is logged and the function is
//!   called again after the next back-off delay (default 1 s, doubling, capped at **120 s**).
//! * The future ending in `Ok(())` is a **clean exit**, and being cancelled by
//!   [`stop`](RestartingTask::stop) is a **cancellation**; neither is restarted.
//! * [`stop`](RestartingTask::stop) cancels (drops) the running future, or ends a back-off wait;
//!   it does nothing to a stopped task. [`restart`](RestartingTask::restart) is `stop` + `start`;
//!   the new run begins only after the old future is gone, so two runs never overlap.
//! * [`wait_for_termination`](RestartingTask::wait_for_termination) stops the task and waits
//!   until its future has been dropped. Crashes are logged, never returned.
//! * A run that lasted at least [`reset_after`](RestartingTask::reset_after) before crashing
//!   counts as healthy: the back-off restarts from its first delay (default: after 120 s).
//!   This is an addition over yaook, where only `start` resets the back-off, so that a watch
//!   loop that breaks once a day is not restarted after the 120 s cap forever after; pass
//!   `None` for yaook's behaviour.
//! * Dropping the last handle stops the task, so a background loop cannot outlive everything
//!   that could stop it.
//!
//! The start delay of 1 s is a choice: the seed gives only the 120 s cap.

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::{BackOffPolicy, ExponentialBackOff};

type Factory = dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync;

/// A background task restarted with back-off when it crashes; see the [module docs](self).
///
/// Cloning gives another handle to the same task. Needs a Tokio runtime: like
/// [`tokio::spawn`], [`start`](Self::start) panics when called outside one.
#[derive(Clone)]
pub struct RestartingTask {
    handle: Arc<HandleInner>,
}

struct HandleInner {
    core: Arc<Core>,
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        self.core.stop();
    }
}

struct Core {
    name: String,
    factory: Box<Factory>,
    policy: BackOffPolicy,
    reset_after: Option<Duration>,
    control: Mutex<Control>,
    runs: AtomicU64,
    crashes: AtomicU64,
}

struct Control {
    backoff: ExponentialBackOff,
    /// Set while started; cancelled by `stop`.
    token: Option<CancellationToken>,
    /// Closed when the latest supervisor has ended (its future and the user's are dropped).
    alive: Option<watch::Receiver<()>>,
    /// Where the supervisor is; `start` reads it to restart an ended task at once.
    phase: Phase,
}

/// The supervisor's phase, kept under the control lock so `start` never misses a run's end.
enum Phase {
    /// The future is running, or about to be made.
    Running,
    /// The future has returned; the supervisor has not decided what follows yet. A `start`
    /// now sets `start_requested`, which the supervisor reads before waiting (or exiting).
    Ended { start_requested: bool },
    /// Waiting out a back-off; notifying cuts the wait short.
    BackingOff(Arc<Notify>),
}

impl std::fmt::Debug for RestartingTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestartingTask")
            .field("name", &self.handle.core.name)
            .field("running", &self.is_running())
            .field("runs", &self.run_count())
            .field("crashes", &self.crash_count())
            .finish()
    }
}

impl RestartingTask {
    /// A stopped task that will run `task()` when started. `name` appears in its log lines.
    pub fn new<F, Fut, E>(name: impl Into<String>, task: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let factory = move || -> BoxFuture<'static, Result<(), String>> {
            Box::pin(ErrorToString {
                run: Box::pin(task()),
            })
        };
        let policy = BackOffPolicy::new(Duration::from_secs(1), 2.0, Duration::from_secs(120))
            .unwrap_or_default();
        Self {
            handle: Arc::new(HandleInner {
                core: Arc::new(Core {
                    name: name.into(),
                    factory: Box::new(factory),
                    policy,
                    reset_after: Some(Duration::from_secs(120)),
                    control: Mutex::new(Control {
                        backoff: ExponentialBackOff::new(policy),
                        token: None,
                        alive: None,
                        phase: Phase::Running,
                    }),
                    runs: AtomicU64::new(0),
                    crashes: AtomicU64::new(0),
                }),
            }),
        }
    }

    /// Uses `policy` for the delays between restarts instead of 1 s × 2 up to 120 s.
    /// Only takes effect before the first [`start`](Self::start) and on handles not yet cloned;
    /// otherwise the task keeps its policy.
    #[must_use]
    pub fn with_backoff(mut self, policy: BackOffPolicy) -> Self {
        if let Some(handle) = Arc::get_mut(&mut self.handle)
            && let Some(core) = Arc::get_mut(&mut handle.core)
        {
            core.policy = policy;
            core.control.lock().backoff = ExponentialBackOff::new(policy);
        }
        self
    }

    /// A run that lasted at least this long before crashing resets the back-off first
    /// (`None`: only [`start`](Self::start) resets it, as in yaook). Default 120 s.
    /// Same restrictions as [`with_backoff`](Self::with_backoff).
    #[must_use]
    pub fn reset_after(mut self, healthy_for: Option<Duration>) -> Self {
        if let Some(handle) = Arc::get_mut(&mut self.handle)
            && let Some(core) = Arc::get_mut(&mut handle.core)
        {
            core.reset_after = healthy_for;
        }
        self
    }

    /// The back-off policy between restarts.
    pub fn backoff_policy(&self) -> BackOffPolicy {
        self.handle.core.policy
    }

    /// Starts the task if it is not running, and resets the back-off either way. A task whose
    /// future has ended (it is waiting out a back-off, or has just crashed or exited) is
    /// restarted at once; see the [module docs](self).
    ///
    /// # Panics
    /// When called outside a Tokio runtime, as [`tokio::spawn`] does.
    pub fn start(&self) {
        Core::start(&self.handle.core);
    }

    /// Stops the task (cancelling its future) if it is running; otherwise does nothing.
    pub fn stop(&self) {
        self.handle.core.stop();
    }

    /// [`stop`](Self::stop), then [`start`](Self::start); the new run waits for the old one
    /// to be gone.
    ///
    /// # Panics
    /// When called outside a Tokio runtime, as [`tokio::spawn`] does.
    pub fn restart(&self) {
        self.handle.core.stop();
        Core::start(&self.handle.core);
    }

    /// Stops the task and waits until its future has been dropped. Crashes are not returned;
    /// they were logged when they happened.
    pub async fn wait_for_termination(&self) {
        let alive = {
            let mut control = self.handle.core.control.lock();
            if let Some(token) = control.token.take() {
                token.cancel();
            }
            control.alive.clone()
        };
        if let Some(alive) = alive {
            wait_closed(alive).await;
        }
    }

    /// Whether the task is started and has not ended (it is running or waiting to restart).
    pub fn is_running(&self) -> bool {
        let control = self.handle.core.control.lock();
        control.token.is_some() && control.alive.as_ref().is_some_and(is_open)
    }

    /// How many times the task's function was called.
    pub fn run_count(&self) -> u64 {
        self.handle.core.runs.load(Ordering::Relaxed)
    }

    /// How many runs crashed (returned an error or panicked).
    pub fn crash_count(&self) -> u64 {
        self.handle.core.crashes.load(Ordering::Relaxed)
    }
}

fn is_open(alive: &watch::Receiver<()>) -> bool {
    alive.has_changed().is_ok()
}

async fn wait_closed(mut alive: watch::Receiver<()>) {
    while alive.changed().await.is_ok() {}
}

impl Core {
    fn start(core: &Arc<Self>) {
        let mut control = core.control.lock();
        control.backoff.reset();
        let running = control.token.is_some() && control.alive.as_ref().is_some_and(is_open);
        if running {
            match &mut control.phase {
                Phase::Running => {}
                Phase::Ended { start_requested } => *start_requested = true,
                Phase::BackingOff(wake) => {
                    wake.notify_one();
                    control.phase = Phase::Running;
                }
            }
            return;
        }
        let token = CancellationToken::new();
        let (alive_tx, alive_rx) = watch::channel(());
        let previous = control.alive.replace(alive_rx);
        control.token = Some(token.clone());
        control.phase = Phase::Running;
        drop(control);
        tokio::spawn(supervise(Arc::clone(core), token, previous, alive_tx));
    }

    fn stop(&self) {
        let mut control = self.control.lock();
        if let Some(token) = control.token.take() {
            token.cancel();
        }
        control.phase = Phase::Running;
    }

    /// Marks the current run's future as ended; called in the poll in which it returned.
    /// A supervisor whose token is cancelled no longer owns the phase (a newer one may).
    fn end_run(&self, token: &CancellationToken) {
        let mut control = self.control.lock();
        if !token.is_cancelled() {
            control.phase = Phase::Ended {
                start_requested: false,
            };
        }
    }
}

/// A run with its error turned into text. Unlike `FutureExt::map`, it keeps the run's future
/// until it is itself dropped, so the future's drop (and whatever its drop glue does, such as
/// calling `start`) comes after the supervisor has seen the run end.
struct ErrorToString<Fut> {
    run: std::pin::Pin<Box<Fut>>,
}

impl<Fut, E> Future for ErrorToString<Fut>
where
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    type Output = Result<(), String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.run
            .as_mut()
            .poll(cx)
            .map(|result| result.map_err(|e| e.to_string()))
    }
}

/// What follows a crash.
enum AfterCrash {
    /// The task was stopped meanwhile.
    Stop,
    /// `start` was called after the crash.
    RestartNow,
    /// The usual back-off, cut short by notifying the `Notify`.
    RestartAfter(Duration, Arc<Notify>),
}

/// How one run ended.
enum RunEnd {
    Clean,
    Cancelled,
    Crashed(String),
}

/// The supervisor of one start of the task: it waits for the previous supervisor to be
/// gone, then runs the task's future again and again, as a clean exit, a crash, `start` and
/// `stop` decide (see the [module docs](self)).
async fn supervise(
    core: Arc<Core>,
    token: CancellationToken,
    previous: Option<watch::Receiver<()>>,
    alive: watch::Sender<()>,
) {
    // Declared first so it is dropped last: waiters see the end only once everything is gone.
    let _alive = alive;
    if let Some(previous) = previous {
        wait_closed(previous).await;
    }
    loop {
        if !core.begin_run(&token) {
            return;
        }
        core.runs.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let error = match run_once(&core, &token).await {
            RunEnd::Cancelled => {
                tracing::debug!(task = %core.name, "restarting task stopped");
                return;
            }
            RunEnd::Clean if core.start_requested_after_clean_exit(&token) => continue,
            RunEnd::Clean => return,
            RunEnd::Crashed(error) => error,
        };
        core.crashes.fetch_add(1, Ordering::Relaxed);
        let next = core.after_crash(&token, started);
        if !wait_after_crash(&core, &token, next, &error).await {
            return;
        }
    }
}

/// Make the task's future and run it until it ends or the token is cancelled; a panic,
/// making it or running it, is a crash. The future is dropped when this returns, before the
/// supervisor decides what follows.
async fn run_once(core: &Core, token: &CancellationToken) -> RunEnd {
    match std::panic::catch_unwind(AssertUnwindSafe(|| (core.factory)())) {
        Err(panic) => {
            core.end_run(token);
            RunEnd::Crashed(format!("panicked: {}", panic_message(&*panic)))
        }
        Ok(run) => {
            let mut run = std::pin::pin!(AssertUnwindSafe(run).catch_unwind());
            // The run's end is recorded in the poll in which the future returns, before
            // it is dropped, so a `start` from then on (its drop guards, another thread)
            // is seen by the supervisor.
            let ended = std::future::poll_fn(|cx| {
                let result = std::task::ready!(run.as_mut().poll(cx));
                core.end_run(token);
                std::task::Poll::Ready(result)
            });
            tokio::select! {
                biased;
                () = token.cancelled() => RunEnd::Cancelled,
                result = ended => match result {
                    Ok(Ok(())) => RunEnd::Clean,
                    Ok(Err(error)) => RunEnd::Crashed(error),
                    Err(panic) => RunEnd::Crashed(format!("panicked: {}", panic_message(&*panic))),
                },
            }
        }
    }
}

/// Log the crash, then wait as `next` says: not at all, or out the back-off (cut short by
/// `start`). Returns whether to run the task again.
async fn wait_after_crash(
    core: &Core,
    token: &CancellationToken,
    next: AfterCrash,
    error: &str,
) -> bool {
    match next {
        AfterCrash::Stop => {
            tracing::warn!(task = %core.name, %error, "restarting task crashed while being stopped; not restarting");
            false
        }
        AfterCrash::RestartNow => {
            tracing::warn!(task = %core.name, %error, "restarting task crashed and was started again; restarting now");
            true
        }
        AfterCrash::RestartAfter(delay, wake) => {
            tracing::warn!(task = %core.name, %error, retry_in = ?delay, "restarting task crashed; restarting after back-off");
            tokio::select! {
                () = token.cancelled() => return false,
                () = tokio::time::sleep(delay) => {}
                () = wake.notified() => {}
            }
            true
        }
    }
}

impl Core {
    /// Claim the control state for the next run; false when the task was stopped.
    fn begin_run(&self, token: &CancellationToken) -> bool {
        // The token is only cancelled under this lock, so while it is not, the control
        // state is this supervisor's.
        let mut control = self.control.lock();
        if token.is_cancelled() {
            return false;
        }
        control.phase = Phase::Running;
        true
    }

    /// After a clean exit: whether `start` was called since the run ended, so it runs
    /// again. If not, the task is no longer running.
    fn start_requested_after_clean_exit(&self, token: &CancellationToken) -> bool {
        let mut control = self.control.lock();
        if token.is_cancelled() {
            return false;
        }
        if matches!(
            control.phase,
            Phase::Ended {
                start_requested: true
            }
        ) {
            control.phase = Phase::Running;
            drop(control);
            tracing::debug!(task = %self.name, "restarting task exited cleanly and was started again");
            return true;
        }
        // Not running any more: a `start` from now on spawns a new supervisor (which
        // waits for this one to be gone) instead of talking to this one.
        control.token = None;
        drop(control);
        tracing::debug!(task = %self.name, "restarting task exited cleanly; not restarting");
        false
    }

    /// What follows a crash of the run begun at `started`: the back-off is reset first if
    /// the run was healthy long enough, and a back-off wait is recorded in the phase so that
    /// `start` can cut it short.
    fn after_crash(&self, token: &CancellationToken, started: Instant) -> AfterCrash {
        let mut control = self.control.lock();
        if token.is_cancelled() {
            return AfterCrash::Stop;
        }
        if self
            .reset_after
            .is_some_and(|healthy| started.elapsed() >= healthy)
        {
            control.backoff.reset();
        }
        if matches!(
            control.phase,
            Phase::Ended {
                start_requested: true
            }
        ) {
            // `start` came after the crash: it reset the back-off and asked for a
            // run now.
            AfterCrash::RestartNow
        } else {
            let wake = Arc::new(Notify::new());
            control.phase = Phase::BackingOff(Arc::clone(&wake));
            AfterCrash::RestartAfter(control.backoff.next_jittered(), wake)
        }
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
