//! Tasks and scheduling primitives for windlass, after yaook's `yaook.op.tasks` /
//! `yaook.op.common` and Heat's periodic tasks.
//!
//! | module | what it gives |
//! |---|---|
//! | [`backoff`] | [`ExponentialBackOff`] and its [`BackOffPolicy`]: start, base, max, jitter, reset, "failing" |
//! | [`queue`] | [`TaskQueue`]: one entry per key, one run per key at a time, bounded concurrency, per-key back-off, run-after-delay, clean shutdown — the reconcile queue of the windlass runtime |
//! | [`restarting`] | [`RestartingTask`]: a background task restarted with back-off when it errors or panics |
//! | [`periodic`] | [`PeriodicTaskSet`] / [`PeriodicTasks`]: Heat-style tasks run every N+1 ticks, with per-instance skip counters |
//! | [`scheduling`] | yaook scheduling keys: the catalogue, node affinity and tolerations merged into a pod spec, the forced-downscale label, labelled configs |
//!
//! Everything is event-driven on Tokio; nothing polls.

pub mod backoff;
pub mod periodic;
pub mod queue;
pub mod restarting;
pub mod scheduling;

pub use backoff::{BackOffPolicy, ExponentialBackOff};
pub use periodic::{PeriodicTaskSet, PeriodicTasks};
pub use queue::{Lease, TaskOutcome, TaskQueue};
pub use restarting::RestartingTask;
pub use scheduling::{SchedulingKey, SchedulingKeys};
