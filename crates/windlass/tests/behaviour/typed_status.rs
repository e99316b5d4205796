//! The author's own status fields, next to windlass's: set through the session, written in
//! the reconcile's one status write, only when they change.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::json;
use windlass::prelude::*;
use windlass::progress::Event;
use windlass::testing::{Harness, Widget, assert_condition};

/// A Widget status with one field of the operator's own.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
struct WidgetStatus {
    #[serde(flatten)]
    windlass: windlass::status::Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// Publishes a URL while `publish` is on, takes it back when off; fails after setting it
/// when `fail` is on.
#[derive(Clone, Default)]
struct Publisher {
    publish: Arc<AtomicBool>,
    fail: Arc<AtomicBool>,
}

#[async_trait]
impl Component<Publisher> for Publisher {
    fn name(&self) -> &str {
        "publisher"
    }
    async fn render(&self, session: &Session<Publisher>, _: &mut Resources) -> Result<()> {
        let url = self
            .publish
            .load(Ordering::SeqCst)
            .then(|| format!("http://{}", session.name()));
        session.update_status(|status| status.url = url);
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::precondition("the load balancer has no address yet"));
        }
        Ok(())
    }
}

#[async_trait]
impl Controller for Publisher {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = WidgetStatus;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        graph.add(self.clone())?;
        Ok(graph)
    }
}

fn status_writes(env: &Harness<Publisher>) -> usize {
    env.log
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Status { written: true, .. }))
        .count()
}

#[tokio::test]
async fn the_authors_fields_land_in_the_one_status_write_and_only_when_they_change() {
    let publisher = Publisher::default();
    publisher.publish.store(true, Ordering::SeqCst);
    let env = Harness::new(publisher.clone()).await;
    let cr = env.apply_cr("shop", json!({})).await;

    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_eq!(status["url"], "http://shop");
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(
        status_writes(&env),
        1,
        "the author's field rides the one write"
    );

    env.log.clear();
    env.reconcile(&cr).await;
    assert_eq!(status_writes(&env), 0, "the same URL again writes nothing");

    publisher.publish.store(false, Ordering::SeqCst);
    env.log.clear();
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert!(
        status.get("url").is_none(),
        "a field set to None goes: {status}"
    );
    assert_condition(&status, "Ready", true, "Stable");
    assert_eq!(status_writes(&env), 1);
}

#[tokio::test]
async fn the_authors_fields_are_written_when_the_rollout_waits() {
    let publisher = Publisher::default();
    publisher.publish.store(true, Ordering::SeqCst);
    publisher.fail.store(true, Ordering::SeqCst);
    let env = Harness::new(publisher.clone()).await;
    let cr = env.apply_cr("shop", json!({})).await;

    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_eq!(status["url"], "http://shop");
    assert_condition(&status, "Updating", true, "PreconditionWait");
    assert!(
        status["conditions"][1]["message"]
            .as_str()
            .unwrap()
            .contains("the load balancer has no address yet"),
        "the not-yet reason is the status message: {status}"
    );
    assert_eq!(status_writes(&env), 1);
}

#[tokio::test]
async fn the_session_reads_the_stored_status_typed() {
    struct Reader(Arc<std::sync::Mutex<Option<String>>>);
    #[async_trait]
    impl Component<ReaderController> for Reader {
        fn name(&self) -> &str {
            "reader"
        }
        async fn render(
            &self,
            session: &Session<ReaderController>,
            _: &mut Resources,
        ) -> Result<()> {
            *self.0.lock().unwrap() = session.status().url.clone();
            Ok(())
        }
    }
    struct ReaderController(Arc<std::sync::Mutex<Option<String>>>);
    #[async_trait]
    impl Controller for ReaderController {
        type Resource = Widget;
        type Config = NoConfig;
        type Status = WidgetStatus;
        fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
            let mut graph = Components::new();
            graph.add(Reader(self.0.clone()))?;
            Ok(graph)
        }
    }
    let seen = Arc::new(std::sync::Mutex::new(None));
    let env = Harness::new(ReaderController(seen.clone())).await;
    let cr = env.apply_cr("shop", json!({})).await;
    env.set_status(&cr, json!({"url": "http://stored"})).await;
    env.reconcile(&cr).await;
    assert_eq!(seen.lock().unwrap().as_deref(), Some("http://stored"));
    assert_eq!(
        env.status(&cr).await["url"],
        "http://stored",
        "kept as it was"
    );
}
