//! The runtime's own view of one CR, for `describe`: where the CR is in its controller's
//! queue (due, waiting until when, running) after how many failures in a row, and how its
//! last reconcile ended. Served as JSON at `/debug/windlass/<kind>/<namespace>/<name>`
//! (`-` for the namespace of a cluster-scoped kind) on the metrics server, only when
//! `server.debug-endpoints` is on: there is no authentication on that server, and error
//! messages name objects.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use windlass_tasks::queue::KeyPlace;

use super::queue::ReconcileQueue;
use super::worker::ReconcileObserver;
use crate::Action;
use crate::object::{ObjectRef, TypeRef};
use crate::reconcile::Report;

/// How the last reconcile of a CR ended.
struct Last {
    at: jiff::Timestamp,
    outcome: Action,
    error: Option<String>,
    took: Duration,
}

/// The queues of a manager's controllers and the last report of each CR.
#[derive(Default)]
pub struct Debug {
    queues: Mutex<Vec<(TypeRef, ReconcileQueue)>>,
    last: Mutex<HashMap<ObjectRef, Last>>,
}

impl Debug {
    /// Answer for the CRs of `kind` from `queue`.
    pub(crate) fn register(&self, kind: TypeRef, queue: ReconcileQueue) {
        self.queues.lock().push((kind, queue));
    }

    /// The view of the CR `name` (in `namespace`) of the kind named `kind` (its `kind`,
    /// any case); `None` when no controller here reconciles that kind.
    pub fn view(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let queues = self.queues.lock();
        let (type_ref, queue) = queues
            .iter()
            .find(|(type_ref, _)| type_ref.kind.eq_ignore_ascii_case(kind))?;
        let cr = ObjectRef::new(&type_ref.api_version, &type_ref.kind, namespace, name);
        let now = tokio::time::Instant::now();
        let queued = queue.inspect(&cr).map(|state| {
            let mut view = match state.place {
                KeyPlace::Ready => json!({"state": "ready"}),
                KeyPlace::Delayed(until) => json!({
                    "state": "delayed",
                    "inSeconds": until.saturating_duration_since(now).as_secs_f64(),
                }),
                KeyPlace::Running { rerun } => json!({"state": "running", "rerun": rerun}),
            };
            view["failures"] = json!(state.failures);
            view
        });
        let last = self.last.lock().get(&cr).map(|last| {
            json!({
                "finishedAt": last.at.to_string(),
                "outcome": format!("{:?}", last.outcome),
                "error": last.error,
                "tookSeconds": last.took.as_secs_f64(),
            })
        });
        Some(json!({"cr": cr.to_string(), "queue": queued, "lastReconcile": last}))
    }
}

impl ReconcileObserver for Debug {
    fn started(&self, _controller: &str, _waited: Duration) {}

    fn finished(&self, _controller: &str, report: &Report, took: Duration) {
        self.last.lock().insert(
            report.cr.clone(),
            Last {
                at: jiff::Timestamp::now(),
                outcome: report.outcome,
                error: report.error.as_ref().map(ToString::to_string),
                took,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use windlass_tasks::queue::Action;

    #[tokio::test(start_paused = true)]
    async fn the_view_has_the_queue_place_the_failures_and_the_last_reconcile() {
        let debug = Debug::default();
        let queue = super::super::queue::new_queue(1, Default::default()).unwrap();
        let kind = TypeRef::new("test.windlass.dev/v1", "Widget");
        debug.register(kind.clone(), queue.clone());
        let cr = ObjectRef::new(&kind.api_version, &kind.kind, Some("shop"), "w");
        assert!(
            debug.view("gadget", Some("shop"), "w").is_none(),
            "not a kind here"
        );
        let view = debug.view("widget", Some("shop"), "w").unwrap();
        assert_eq!(view["queue"], Value::Null);
        assert_eq!(view["lastReconcile"], Value::Null);

        queue.enqueue(std::sync::Arc::new(cr.clone()));
        let lease = queue.try_acquire().unwrap();
        assert_eq!(
            debug.view("Widget", Some("shop"), "w").unwrap()["queue"]["state"],
            "running"
        );
        lease.complete(Action::Retry);
        debug.finished(
            "widget",
            &Report {
                id: "r1".into(),
                cr: cr.clone(),
                outcome: Action::Retry,
                state: None,
                error: Some(crate::Error::rollout("the database refused")),
            },
            Duration::from_millis(30),
        );
        let view = debug.view("widget", Some("shop"), "w").unwrap();
        assert_eq!(view["queue"]["state"], "delayed", "{view}");
        assert_eq!(view["queue"]["failures"], 1, "{view}");
        assert!(view["queue"]["inSeconds"].as_f64().unwrap() > 0.0, "{view}");
        assert_eq!(view["lastReconcile"]["outcome"], "Retry");
        assert!(
            view["lastReconcile"]["error"]
                .as_str()
                .unwrap()
                .contains("the database refused"),
            "{view}"
        );
    }
}
