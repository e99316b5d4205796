//! Heat-style periodic tasks: a named set of tasks, each run every `ticks_between_runs + 1`
//! ticks of a periodic scheduler.
//!
//! Heat collects decorated methods with a metaclass; here a [`PeriodicTaskSet`] is built
//! explicitly (the "class": names, order, `ticks_between_runs`, the functions), and
//! [`PeriodicTaskSet::instance`] makes a [`PeriodicTasks`] (the "instance") that owns its own
//! skip counters and is ticked with a context.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use windlass_tasks::periodic::{ErrorPolicy, PeriodicTaskSet};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let set = PeriodicTaskSet::<Arc<AtomicU32>>::new("Manager")
//!     .task("every_tick", 0, |n: Arc<AtomicU32>| async move {
//!         n.fetch_add(1, Ordering::Relaxed);
//!         Ok::<(), std::io::Error>(())
//!     })?
//!     .task("every_third_tick", 2, |n: Arc<AtomicU32>| async move {
//!         n.fetch_add(100, Ordering::Relaxed);
//!         Ok::<(), std::io::Error>(())
//!     })?;
//! let mut tasks = set.instance();
//! let count = Arc::new(AtomicU32::new(0));
//! for _ in 0..3 {
//!     tasks.tick(&count, ErrorPolicy::LogAndContinue).await?;
//! }
//! assert_eq!(count.load(Ordering::Relaxed), 3 + 100); // the second task ran on tick 3
//! # Ok(())
//! # }
//! ```
//!
//! # Semantics (kept from Heat)
//!
//! * A task with `ticks_between_runs = N` skips N ticks, runs, skips N ticks, runs, …: with
//!   N = 2 it runs on ticks 3, 6, 9. Its first run comes *after* N skipped ticks, and the
//!   period is N + 1 ticks. N = 0 runs on every tick.
//! * Tasks run one after another in the order they were added; an inherited set
//!   ([`PeriodicTaskSet::inherit`]) runs the parent's tasks first.
//! * A task that fails (returns `Err` or panics) is logged and the tick goes on with the next
//!   task ([`ErrorPolicy::LogAndContinue`]), unless the tick was asked to raise
//!   ([`ErrorPolicy::Raise`]): then the tick stops at that task and returns its error.
//!
//! # Skip counters per instance
//!
//! In Heat the skip counters live on the class, so every instance of a manager class shares
//! them and two instances each advance the other's schedule. Here every [`PeriodicTasks`] made
//! by [`PeriodicTaskSet::instance`] has its own counters; ticking one instance never moves
//! another's schedule.
//!
//! Heat's `Manager` (host name, `init_host`, `service_version`, `service_config`) is not ported:
//! those belong to the operator's own configuration, not to a task registry.

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::restarting::panic_message;

type TaskFn<C> = dyn Fn(C) -> BoxFuture<'static, Result<(), String>> + Send + Sync;

struct TaskDef<C> {
    name: Arc<str>,
    ticks_between_runs: u32,
    run: Arc<TaskFn<C>>,
}

impl<C> Clone for TaskDef<C> {
    fn clone(&self) -> Self {
        Self {
            name: Arc::clone(&self.name),
            ticks_between_runs: self.ticks_between_runs,
            run: Arc::clone(&self.run),
        }
    }
}

/// A mistake in building a [`PeriodicTaskSet`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeriodicSetError {
    /// A task name was empty.
    #[error("periodic task names must not be empty; name the task after what it does")]
    EmptyName,
    /// A task of that name is already in the set.
    #[error(
        "periodic task `{0}` is already in the set; use replace_task to override an inherited task"
    )]
    DuplicateTask(String),
    /// `replace_task` named a task that is not in the set.
    #[error("no periodic task `{0}` to replace; use task to add a new one")]
    UnknownTask(String),
}

/// A periodic task failed during a tick run with [`ErrorPolicy::Raise`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("periodic task {task} failed: {message}")]
pub struct PeriodicTaskError {
    /// The full task name, `Set.task`.
    pub task: String,
    /// The task's error (or panic message).
    pub message: String,
}

/// What a tick does when a task fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// Log the failure and go on with the next task (Heat's default).
    #[default]
    LogAndContinue,
    /// Stop the tick at the failing task and return its error (Heat's `raise_on_error=True`).
    Raise,
}

/// The ordered task list of a "manager class"; see the [module docs](self).
pub struct PeriodicTaskSet<C> {
    name: Arc<str>,
    tasks: Vec<TaskDef<C>>,
}

impl<C> Clone for PeriodicTaskSet<C> {
    fn clone(&self) -> Self {
        Self {
            name: Arc::clone(&self.name),
            tasks: self.tasks.clone(),
        }
    }
}

impl<C> std::fmt::Debug for PeriodicTaskSet<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeriodicTaskSet")
            .field("name", &self.name)
            .field(
                "tasks",
                &self
                    .tasks
                    .iter()
                    .map(|t| (&*t.name, t.ticks_between_runs))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<C: Clone + Send + 'static> PeriodicTaskSet<C> {
    /// An empty set; `name` prefixes task names in logs and errors (`Name.task`).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: Arc::from(name.into()),
            tasks: Vec::new(),
        }
    }

    /// A new set that starts with a copy of `parent`'s tasks (Heat's subclassing). Adding to or
    /// replacing in the new set leaves `parent` as it was.
    pub fn inherit(name: impl Into<String>, parent: &Self) -> Self {
        Self {
            name: Arc::from(name.into()),
            tasks: parent.tasks.clone(),
        }
    }

    /// Adds a task run every `ticks_between_runs + 1` ticks, after the tasks already in the set.
    /// The task gets a clone of the tick's context (use an `Arc` for anything large).
    ///
    /// # Errors
    /// [`PeriodicSetError::EmptyName`], or [`PeriodicSetError::DuplicateTask`] if the set has a
    /// task of that name.
    pub fn task<F, Fut, E>(
        mut self,
        name: impl Into<String>,
        ticks_between_runs: u32,
        task: F,
    ) -> Result<Self, PeriodicSetError>
    where
        F: Fn(C) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let name = name.into();
        if name.is_empty() {
            return Err(PeriodicSetError::EmptyName);
        }
        if self.position(&name).is_some() {
            return Err(PeriodicSetError::DuplicateTask(name));
        }
        self.tasks.push(def(name, ticks_between_runs, task));
        Ok(self)
    }

    /// Replaces the task named `name` (typically an inherited one), keeping its place in the
    /// order.
    ///
    /// # Errors
    /// [`PeriodicSetError::UnknownTask`] if the set has no task of that name.
    pub fn replace_task<F, Fut, E>(
        mut self,
        name: impl Into<String>,
        ticks_between_runs: u32,
        task: F,
    ) -> Result<Self, PeriodicSetError>
    where
        F: Fn(C) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let name = name.into();
        let Some(index) = self.position(&name) else {
            return Err(PeriodicSetError::UnknownTask(name));
        };
        self.tasks[index] = def(name, ticks_between_runs, task);
        Ok(self)
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Task names and their `ticks_between_runs`, in run order.
    pub fn tasks(&self) -> impl Iterator<Item = (&str, u32)> {
        self.tasks.iter().map(|t| (&*t.name, t.ticks_between_runs))
    }

    /// A runnable instance with its own skip counters, each starting at its task's
    /// `ticks_between_runs`.
    pub fn instance(&self) -> PeriodicTasks<C> {
        PeriodicTasks {
            set_name: Arc::clone(&self.name),
            tasks: self.tasks.clone(),
            ticks_to_skip: self.tasks.iter().map(|t| t.ticks_between_runs).collect(),
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.tasks.iter().position(|t| &*t.name == name)
    }
}

fn def<C, F, Fut, E>(name: String, ticks_between_runs: u32, task: F) -> TaskDef<C>
where
    C: Send + 'static,
    F: Fn(C) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let run = move |ctx: C| -> BoxFuture<'static, Result<(), String>> {
        task(ctx).map(|r| r.map_err(|e| e.to_string())).boxed()
    };
    TaskDef {
        name: Arc::from(name),
        ticks_between_runs,
        run: Arc::new(run),
    }
}

/// What one tick did, task by task (full names, `Set.task`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Tasks that ran and succeeded.
    pub ran: Vec<String>,
    /// Tasks that were skipped, with the skips still left before their next run (0: it runs
    /// on the next tick).
    pub skipped: Vec<(String, u32)>,
    /// Tasks that failed, with their error (only with [`ErrorPolicy::LogAndContinue`]).
    pub failed: Vec<(String, String)>,
}

/// An instance of a [`PeriodicTaskSet`] with its own skip counters; see the [module docs](self).
pub struct PeriodicTasks<C> {
    set_name: Arc<str>,
    tasks: Vec<TaskDef<C>>,
    ticks_to_skip: Vec<u32>,
}

impl<C> std::fmt::Debug for PeriodicTasks<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeriodicTasks")
            .field("set", &self.set_name)
            .field(
                "ticks_to_skip",
                &self
                    .tasks
                    .iter()
                    .zip(&self.ticks_to_skip)
                    .map(|(t, n)| (&*t.name, *n))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<C: Clone + Send + 'static> PeriodicTasks<C> {
    /// One tick of the periodic scheduler: walks the tasks in order; a task with skips left
    /// has its counter decremented, any other runs (with a clone of `ctx`) and its counter is
    /// set back to its `ticks_between_runs`.
    ///
    /// # Errors
    /// With [`ErrorPolicy::Raise`], the first failing task's error; the tasks after it are not
    /// looked at in this tick.
    pub async fn tick(
        &mut self,
        ctx: &C,
        on_error: ErrorPolicy,
    ) -> Result<TickReport, PeriodicTaskError> {
        let mut report = TickReport::default();
        for (task, skip) in self.tasks.iter().zip(self.ticks_to_skip.iter_mut()) {
            let full_name = format!("{}.{}", self.set_name, task.name);
            if *skip > 0 {
                tracing::debug!(task = %full_name, ticks_left = *skip, "skipping periodic task");
                *skip -= 1;
                report.skipped.push((full_name, *skip));
                continue;
            }
            *skip = task.ticks_between_runs;
            tracing::debug!(task = %full_name, "running periodic task");
            let result =
                match std::panic::catch_unwind(AssertUnwindSafe(|| (task.run)(ctx.clone()))) {
                    Err(panic) => Err(format!("panicked: {}", panic_message(&*panic))),
                    Ok(run) => match AssertUnwindSafe(run).catch_unwind().await {
                        Ok(result) => result,
                        Err(panic) => Err(format!("panicked: {}", panic_message(&*panic))),
                    },
                };
            match result {
                Ok(()) => report.ran.push(full_name),
                Err(message) => match on_error {
                    ErrorPolicy::Raise => {
                        return Err(PeriodicTaskError {
                            task: full_name,
                            message,
                        });
                    }
                    ErrorPolicy::LogAndContinue => {
                        tracing::error!(task = %full_name, error = %message, "periodic task failed");
                        report.failed.push((full_name, message));
                    }
                },
            }
        }
        Ok(report)
    }

    /// Ticks until `shutdown` is cancelled or, with [`ErrorPolicy::Raise`], a task fails: the
    /// first tick right away, then one every `period` (a tick that overruns delays the next
    /// instead of bursting to catch up).
    ///
    /// # Errors
    /// With [`ErrorPolicy::Raise`], the first failing task's error.
    pub async fn run(
        &mut self,
        ctx: C,
        period: Duration,
        on_error: ErrorPolicy,
        shutdown: CancellationToken,
    ) -> Result<(), PeriodicTaskError> {
        let mut interval = tokio::time::interval(period.max(Duration::from_millis(1)));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                _ = interval.tick() => {}
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                result = self.tick(&ctx, on_error) => { result?; }
            }
        }
    }

    /// Ticks left before the task `name` runs again (0: it runs on the next tick).
    pub fn ticks_to_skip(&self, name: &str) -> Option<u32> {
        self.tasks
            .iter()
            .position(|t| &*t.name == name)
            .map(|i| self.ticks_to_skip[i])
    }
}
