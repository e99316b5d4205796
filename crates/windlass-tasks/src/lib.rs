//! Async task primitives for windlass, after yaook's `yaook.op.tasks` and Heat's periodic
//! tasks: generic over what runs, with no Kubernetes dependency (yaook's scheduling keys are
//! in `windlass-x`, feature `scheduling`).
//!
//! | module | what it gives |
//! |---|---|
//! | [`backoff`] | [`ExponentialBackOff`] and its [`BackOffPolicy`]: start, base, max, jitter, reset, "failing" |
//! | [`queue`] | [`TaskQueue`]: one entry per key, one run per key at a time, bounded concurrency, per-key back-off, run-after-delay, clean shutdown — the reconcile queue of the windlass runtime |
//! | [`restarting`] | [`RestartingTask`]: a background task restarted with back-off when it errors or panics |
//! | [`periodic`] | [`PeriodicTaskSet`] / [`PeriodicTasks`]: Heat-style tasks run every N+1 ticks, with per-instance skip counters |
//!
//! Everything is event-driven on Tokio; nothing polls.
//!
//! # A reconcile queue on [`TaskQueue`]
//!
//! Watch events enqueue the object's key; a reconcile ends in a [`Action`]; a periodic
//! resync is a [`Action::RequeueAfter`]. The queue guarantees one reconcile per object at
//! a time, merges event bursts, backs off per object on errors, and resets on success.
//!
//! ```
//! use std::time::Duration;
//! use windlass_tasks::{Action, TaskQueue};
//!
//! #[derive(Clone, Debug, PartialEq, Eq, Hash)]
//! struct ObjectKey { namespace: String, name: String }
//!
//! async fn reconcile(key: ObjectKey) -> Result<Option<Duration>, String> {
//!     // ... read the object, roll out its components, write status ...
//!     Ok(Some(Duration::from_secs(300))) // resync in five minutes
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let queue: TaskQueue<ObjectKey> = TaskQueue::builder().max_concurrent(8).build()?;
//!
//! // The runtime: reconcile every due key, at most 8 at once.
//! let runner = tokio::spawn({
//!     let queue = queue.clone();
//!     async move {
//!         queue
//!             .run(|key| async move {
//!                 match reconcile(key).await {
//!                     Ok(None) => Action::Done,
//!                     Ok(Some(resync)) => Action::RequeueAfter(resync),
//!                     Err(_) => Action::Retry, // back off: 0.5 s, 1 s, 2 s … 120 s, ±10 %
//!                 }
//!                 // (the same mapping, as a conversion: `reconcile(key).await.into()`)
//!             })
//!             .await
//!     }
//! });
//!
//! // The watch side: every event for an object enqueues its key (merged while pending).
//! queue.enqueue(ObjectKey { namespace: "default".into(), name: "web".into() });
//!
//! // Metrics: queue depth and work in flight.
//! let stats = queue.stats();
//! println!("depth={} delayed={} running={}", stats.ready, stats.delayed, stats.running);
//!
//! // Shutdown: stop dispatching, let running reconciles finish.
//! queue.shutdown();
//! runner.await?;
//! # Ok(())
//! # }
//! ```

pub mod backoff;
pub mod periodic;
pub mod queue;
pub mod restarting;

pub use backoff::{BackOffPolicy, ExponentialBackOff};
pub use periodic::{PeriodicTaskSet, PeriodicTasks};
pub use queue::{Action, Lease, Priority, TaskQueue};
pub use restarting::RestartingTask;
