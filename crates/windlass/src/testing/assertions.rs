//! Assertions on what a reconcile left behind: conditions in a status, and the harness's
//! shortcuts for a Ready CR and a published Event.

use serde_json::Value;

use super::harness::Harness;
use crate::controller::Controller;
use crate::events::{Reason, RecordedEvent};
use crate::object::ObjectRef;

impl<C: Controller> Harness<C> {
    /// Assert that the CR is Ready: `Ready=True` and `Updating=False`, both `Stable`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use serde_json::json;
    /// use windlass::events::Reason;
    /// use windlass::testing::{DummyComponent, DummyController, Harness};
    ///
    /// let controller =
    ///     DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]);
    /// let env = Harness::dry_run(controller).await;
    /// let cr = env.apply_cr("shop", json!({})).await;
    /// env.reconcile(&cr).await;
    /// env.assert_ready(&cr).await;
    /// env.assert_event(&cr, Reason::RolloutCompleted);
    /// # }
    /// ```
    pub async fn assert_ready(&self, cr: &ObjectRef) {
        let status = self.status(cr).await;
        assert_condition(&status, "Ready", true, "Stable");
        assert_condition(&status, "Updating", false, "Stable");
    }

    /// Assert that a Kubernetes Event with `reason` was published about the CR.
    #[track_caller]
    pub fn assert_event(&self, cr: &ObjectRef, reason: Reason) {
        let events = self.events.events();
        let about = |e: &&RecordedEvent| {
            e.regarding.name.as_deref() == Some(cr.name.as_str())
                && e.regarding.namespace.as_deref() == cr.namespace.as_deref()
        };
        assert!(
            events
                .iter()
                .filter(about)
                .any(|e| e.event.reason() == reason),
            "no {reason:?} Event about {cr} among {events:#?}"
        );
    }
}

/// Assert that the status has a condition of `type_` with this status and reason.
#[track_caller]
pub fn assert_condition(status: &Value, type_: &str, is_true: bool, reason: &str) {
    let condition = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in status {status:#}"));
    let expected = if is_true { "True" } else { "False" };
    assert_eq!(
        (condition["status"].as_str(), condition["reason"].as_str()),
        (Some(expected), Some(reason)),
        "{type_} condition: {condition:#}"
    );
}
