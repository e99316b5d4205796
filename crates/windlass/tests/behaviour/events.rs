//! Kubernetes Events about a CR, published by the reconcile (on the in-memory sink).

use std::sync::Arc;

use serde_json::json;
use windlass::Action;
use windlass::config::OperatorConfig;
use windlass::error::Error;
use windlass::events::{MemoryEventSink, Reason};
use windlass::reconcile::Reconciler;
use windlass::testing::{Behaviour, DummyComponent, DummyController, Harness};

fn reasons(sink: &MemoryEventSink) -> Vec<(Reason, u32)> {
    sink.events()
        .iter()
        .map(|e| (e.event.reason(), e.count))
        .collect()
}

#[tokio::test]
async fn a_rollout_done_in_one_reconcile_is_announced_once_when_it_completes() {
    let controller =
        DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]);
    // The environment only provides the cluster with the CRD; the reconciler under test
    // publishes to the sink.
    let env = Harness::new(DummyController::new()).await;
    let sink = Arc::new(MemoryEventSink::new());
    let reconciler = Reconciler::new(controller, env.memory.clone(), OperatorConfig::default())
        .with_events(sink.clone());
    let cr = env.apply_cr("a", json!({})).await;
    assert_eq!(reconciler.reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(reasons(&sink), [(Reason::RolloutCompleted, 1)]);
    // Steady state: nothing new to say.
    assert_eq!(reconciler.reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(reasons(&sink), [(Reason::RolloutCompleted, 1)]);
    // A spec change is a new rollout.
    env.apply_cr("a", json!({"size": 2})).await;
    reconciler.reconcile(&cr).await;
    let events = sink.events();
    assert_eq!(
        events.len(),
        1,
        "same reasons and notes are a series: {events:?}"
    );
    assert_eq!(events[0].count, 2);
}

#[tokio::test]
async fn a_rollout_that_waits_is_announced_when_it_starts_and_when_it_completes() {
    let web = DummyComponent::new("web").with_configmap("web");
    let env = Harness::new(DummyController::new()).await;
    let sink = Arc::new(MemoryEventSink::new());
    let reconciler = |web: DummyComponent| {
        Reconciler::new(
            DummyController::new().component(web, &[]),
            env.memory.clone(),
            OperatorConfig::default(),
        )
        .with_events(sink.clone())
    };
    let cr = env.apply_cr("a", json!({})).await;
    // Deployed, not ready yet: the rollout has started.
    let waiting = reconciler(web.clone().behave(Behaviour::NeverVerifies));
    waiting.reconcile(&cr).await;
    assert_eq!(reasons(&sink), [(Reason::RolloutStarted, 1)]);
    // Still waiting: already announced.
    waiting.reconcile(&cr).await;
    assert_eq!(reasons(&sink), [(Reason::RolloutStarted, 1)]);
    // Ready now: the same rollout completes.
    assert_eq!(reconciler(web).reconcile(&cr).await.outcome, Action::Done);
    assert_eq!(
        reasons(&sink),
        [(Reason::RolloutStarted, 1), (Reason::RolloutCompleted, 1)]
    );
}

#[tokio::test]
async fn a_failed_rollout_is_a_warning_naming_the_error() {
    let controller = DummyController::new().component(
        DummyComponent::new("db").behave(Behaviour::RenderError(Error::other("disk on fire"))),
        &[],
    );
    // The environment only provides the cluster with the CRD; the reconciler under test
    // publishes to the sink.
    let env = Harness::new(DummyController::new()).await;
    let sink = Arc::new(MemoryEventSink::new());
    let reconciler = Reconciler::new(controller, env.memory.clone(), OperatorConfig::default())
        .with_events(sink.clone());
    let cr = env.apply_cr("a", json!({})).await;
    assert_eq!(reconciler.reconcile(&cr).await.outcome, Action::Retry);
    let events = sink.events();
    let failed = events
        .iter()
        .find(|e| e.event.reason() == Reason::RolloutFailed)
        .expect("a RolloutFailed event");
    assert!(failed.event.note().contains("disk on fire"), "{failed:?}");
    assert!(
        !events
            .iter()
            .any(|e| e.event.reason() == Reason::RolloutCompleted),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_test_env_records_events_for_one_line_assertions() {
    let env = Harness::dry_run(
        DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]),
    )
    .await;
    let cr = env.apply_cr("a", json!({})).await;
    env.reconcile(&cr).await;
    env.assert_ready(&cr).await;
    env.assert_event(&cr, Reason::RolloutCompleted);
    let missing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        env.assert_event(&cr, Reason::RolloutFailed)
    }));
    assert!(missing.is_err(), "an Event never published is not found");
}

#[tokio::test]
async fn a_failed_component_gets_an_event_naming_it_before_the_rollout_failed_one() {
    let broken = DummyComponent::new("db")
        .with_configmap("db")
        .behave(Behaviour::VerifyError(Error::rollout("the volume is lost")));
    let env = Harness::new(DummyController::new()).await;
    let sink = Arc::new(MemoryEventSink::new());
    let reconciler = Reconciler::new(
        DummyController::new()
            .component(broken, &[])
            .component(DummyComponent::new("web").with_configmap("web"), &[]),
        env.memory.clone(),
        OperatorConfig::default(),
    )
    .with_events(sink.clone());
    let cr = env.apply_cr("a", json!({})).await;
    let report = reconciler.reconcile(&cr).await;
    assert!(report.error.is_some_and(|e| e.is_fatal()));
    let events = sink.events();
    let reasons: Vec<Reason> = events.iter().map(|e| e.event.reason()).collect();
    assert_eq!(
        reasons,
        [Reason::ComponentFailed, Reason::RolloutFailed],
        "{events:#?}"
    );
    let note = events[0].event.note();
    assert!(
        note.contains("db") && note.contains("the volume is lost"),
        "the Event names the component and why: {note}"
    );

    // A component that only waits is no failure: no ComponentFailed.
    sink.clear();
    let waiting = Reconciler::new(
        DummyController::new().component(
            DummyComponent::new("db")
                .with_configmap("db")
                .behave(Behaviour::NeverVerifies),
            &[],
        ),
        env.memory.clone(),
        OperatorConfig::default(),
    )
    .with_events(sink.clone());
    let cr = env.apply_cr("b", json!({})).await;
    waiting.reconcile(&cr).await;
    assert!(
        sink.events()
            .iter()
            .all(|e| e.event.reason() != Reason::ComponentFailed),
        "{:#?}",
        sink.events()
    );
}
