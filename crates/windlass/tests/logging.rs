//! Per-CR log levels: a CR annotated with its own level is logged at that level
//! while it is reconciled; every other CR keeps the process-wide level.
//!
//! A test binary of its own: its subscriber is installed for the whole process before
//! anything logs, as an operator's is, rather than per thread while other tests log.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer};
use windlass::logging::ReconcileFilter;
use windlass::testing::{DummyComponent, DummyController, Harness};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_cr_can_ask_for_its_own_log_level() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .with_filter(ReconcileFilter::new(EnvFilter::new("warn"))),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let env = Harness::dry_run(
        DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]),
    )
    .await;
    let loud = env.apply_cr("loud", json!({})).await;
    env.annotate(&loud, "windlass.dev/log-default-level", "DEBUG")
        .await;
    let quiet = env.apply_cr("quiet", json!({})).await;
    env.reconcile(&loud).await;
    env.reconcile(&quiet).await;
    tracing::debug!("after the reconciles: back to the process-wide level");

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let deployed = |name: &str| {
        text.lines().any(|l| {
            l.contains("component deployed") && l.contains(&format!("resource_name={name}"))
        })
    };
    assert!(
        deployed("loud"),
        "the annotated CR is logged at debug:\n{text}"
    );
    assert!(
        !deployed("quiet"),
        "the other CR keeps the process-wide warn level:\n{text}"
    );
    assert!(
        !text.contains("after the reconciles"),
        "the override ends with the reconcile:\n{text}"
    );
}
