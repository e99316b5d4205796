//! The reconcile queue on `windlass-tasks`' [`TaskQueue`]: one run per CR at a time, and
//! one pending run that takes the newest request; bounded concurrency; per-CR exponential
//! back-off with jitter that a success resets; requeue-after; the periodic re-reconcile.
//!
//! What a reconcile asks for next ([`Action`]) becomes the queue's [`Action`] here,
//! with the `runtime.sync-period` folded in: a CR that is done is reconciled again after the
//! period (and a failing one after its back-off, whatever the period), so the period
//! survives failures and a requeue is never later than the period. The periodic
//! re-reconcile runs at low priority ([`Priority::Low`], see [`next_run`]), behind every
//! change someone waits for.

use std::sync::Arc;
use std::time::Duration;

use windlass_tasks::backoff::BackOffPolicy;
use windlass_tasks::queue::{Priority, QueueConfigError, TaskQueue};

use crate::Action;

use crate::config::OperatorConfig;
use crate::object::ObjectRef;

/// The queue of CRs to reconcile. A CR is named by a shared reference: the queue keeps a
/// key in its table and one in its line or timer for every CR, all the time (the periodic
/// re-reconcile), and the router already holds one per CR.
pub type ReconcileQueue = TaskQueue<Arc<ObjectRef>>;

/// A queue running `concurrency` reconciles at once (at least one), backing off failing
/// CRs by `backoff`.
pub fn new_queue(
    concurrency: usize,
    backoff: BackOffPolicy,
) -> Result<ReconcileQueue, QueueConfigError> {
    TaskQueue::builder()
        .max_concurrent(concurrency)
        .backoff(backoff)
        .build()
}

/// The queue a controller runs on and its periodic re-reconcile (`None`: off), as `config`
/// sets them: `runtime.max-concurrent-reconciles` and `runtime.sync-period`.
pub fn from_config(
    config: &OperatorConfig,
) -> Result<(ReconcileQueue, Option<Duration>), QueueConfigError> {
    let queue = new_queue(
        config.runtime.max_concurrent_reconciles as usize,
        BackOffPolicy::default(),
    )?;
    let period = Some(Duration::from(config.runtime.sync_period)).filter(|p| !p.is_zero());
    Ok((queue, period))
}

/// What the queue does after a reconcile that ended in `outcome`, with the periodic
/// re-reconcile `period` (`None`: off), and at which priority: the periodic re-reconcile
/// is low, a requeue the reconcile asked for sooner than the period is high.
pub fn next_run(outcome: Action, period: Option<Duration>) -> (Action, Priority) {
    match (outcome, period) {
        (Action::Retry, _) => (Action::Retry, Priority::High),
        (Action::Done, None) => (Action::Done, Priority::High),
        (Action::Done, Some(period)) => (Action::RequeueAfter(period), Priority::Low),
        (Action::RequeueAfter(delay), None) => (Action::RequeueAfter(delay), Priority::High),
        (Action::RequeueAfter(delay), Some(period)) if delay < period => {
            (Action::RequeueAfter(delay), Priority::High)
        }
        (Action::RequeueAfter(_), Some(period)) => (Action::RequeueAfter(period), Priority::Low),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_sets_the_concurrency_and_the_sync_period() {
        let mut config = OperatorConfig::default();
        let (queue, period) = from_config(&config).unwrap();
        assert_eq!(queue.max_concurrent(), 16);
        assert_eq!(period, Some(Duration::from_secs(600)));
        config.runtime.max_concurrent_reconciles = 3;
        config.runtime.sync_period = Duration::ZERO.into();
        let (queue, period) = from_config(&config).unwrap();
        assert_eq!(queue.max_concurrent(), 3);
        assert_eq!(period, None, "0s: no periodic reconcile");
        config.runtime.max_concurrent_reconciles = 0;
        assert!(from_config(&config).is_err());
    }

    #[test]
    fn the_period_bounds_every_success_and_never_a_failure_and_runs_low() {
        let s = Duration::from_secs;
        let (high, low) = (Priority::High, Priority::Low);
        assert_eq!(next_run(Action::Done, None), (Action::Done, high));
        assert_eq!(
            next_run(Action::Done, Some(s(30))),
            (Action::RequeueAfter(s(30)), low)
        );
        assert_eq!(
            next_run(Action::RequeueAfter(s(5)), Some(s(30))),
            (Action::RequeueAfter(s(5)), high),
            "asked for by the reconcile"
        );
        assert_eq!(
            next_run(Action::RequeueAfter(s(60)), Some(s(30))),
            (Action::RequeueAfter(s(30)), low)
        );
        assert_eq!(
            next_run(Action::RequeueAfter(s(5)), None),
            (Action::RequeueAfter(s(5)), high)
        );
        assert_eq!(next_run(Action::Retry, Some(s(30))), (Action::Retry, high));
    }
}
