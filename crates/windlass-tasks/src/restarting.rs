//! A background task that is restarted with exponential back-off when it crashes (yaook's
//! `RestartingTask`, F251). Meant for the loops an operator must keep alive: watch streams,
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
//!   Called while the task is waiting out a back-off, it restarts it at once (an addition: in
//!   yaook the call only resets the back-off and the wait goes on).
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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
    /// Set while the supervisor waits out a back-off; `start` uses it to cut the wait short.
    backoff_wake: Option<Arc<Notify>>,
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
            task().map(|r| r.map_err(|e| e.to_string())).boxed()
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
                        backoff_wake: None,
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
            core.lock().backoff = ExponentialBackOff::new(policy);
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

    /// Starts the task if it is not running, and resets the back-off either way.
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
            let mut control = self.handle.core.lock();
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
        let control = self.handle.core.lock();
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
    fn lock(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start(core: &Arc<Self>) {
        let mut control = core.lock();
        control.backoff.reset();
        let running = control.token.is_some() && control.alive.as_ref().is_some_and(is_open);
        if running {
            if let Some(wake) = control.backoff_wake.take() {
                wake.notify_one();
            }
            return;
        }
        let token = CancellationToken::new();
        let (alive_tx, alive_rx) = watch::channel(());
        let previous = control.alive.replace(alive_rx);
        control.token = Some(token.clone());
        drop(control);
        tokio::spawn(supervise(Arc::clone(core), token, previous, alive_tx));
    }

    fn stop(&self) {
        let mut control = self.lock();
        if let Some(token) = control.token.take() {
            token.cancel();
        }
        control.backoff_wake = None;
    }
}

/// How one run ended.
enum RunEnd {
    Clean,
    Cancelled,
    Crashed(String),
}

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
        if token.is_cancelled() {
            return;
        }
        core.runs.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let end = match std::panic::catch_unwind(AssertUnwindSafe(|| (core.factory)())) {
            Err(panic) => RunEnd::Crashed(format!("panicked: {}", panic_message(&*panic))),
            Ok(run) => {
                tokio::select! {
                    biased;
                    () = token.cancelled() => RunEnd::Cancelled,
                    result = AssertUnwindSafe(run).catch_unwind() => match result {
                        Ok(Ok(())) => RunEnd::Clean,
                        Ok(Err(error)) => RunEnd::Crashed(error),
                        Err(panic) => RunEnd::Crashed(format!("panicked: {}", panic_message(&*panic))),
                    },
                }
            }
        };
        let error = match end {
            RunEnd::Clean => {
                tracing::debug!(task = %core.name, "restarting task exited cleanly; not restarting");
                return;
            }
            RunEnd::Cancelled => {
                tracing::debug!(task = %core.name, "restarting task stopped");
                return;
            }
            RunEnd::Crashed(error) => error,
        };
        core.crashes.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let delay = {
            let mut control = core.lock();
            if core
                .reset_after
                .is_some_and(|healthy| started.elapsed() >= healthy)
            {
                control.backoff.reset();
            }
            control.backoff_wake = Some(Arc::clone(&wake));
            control.backoff.next_jittered()
        };
        tracing::warn!(task = %core.name, %error, retry_in = ?delay, "restarting task crashed; restarting after back-off");
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
            () = wake.notified() => {}
        }
        core.lock().backoff_wake = None;
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
