//! Events about a CR through the [`LiveEventSink`], on the real API server: a repeat
//! continues the first Event's series, a different note is an Event of its own, both
//! point at the CR, and a series whose Event went starts afresh.

use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use windlass::Error;
use windlass::cluster::{Cluster, WriteMethod};
use windlass::events::{CrEvent, EventSink, LiveEventSink};
use windlass::object::ManifestExt;

use crate::{eventually, live};

#[tokio::test]
async fn repeated_events_become_a_series_on_one_event_regarding_the_cr() {
    let (cluster, env) = live().await;
    let ns = env.namespace("events").await.unwrap();
    let widget = json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": "noisy", "namespace": ns.name()}, "spec": {"version": "1.0"}});
    let stored = cluster.apply(&widget, WriteMethod::Update).await.unwrap();

    let sink = LiveEventSink::with_reporter(
        env.client().unwrap(),
        "windlass-test",
        Some("live-test".into()),
    );
    let failed = CrEvent::rollout_failed(&Error::config("spec.replicas: must be positive"));
    sink.publish(&stored, failed.clone()).await.unwrap();
    // The CR changes between the repeats, as it does between reconciles.
    let mut newer = widget.clone();
    newer["spec"]["version"] = json!("1.1");
    let changed = cluster.apply(&newer, WriteMethod::Update).await.unwrap();
    assert_ne!(changed.resource_version(), stored.resource_version());
    sink.publish(&changed, failed.clone()).await.unwrap();
    sink.publish(&changed, failed.clone()).await.unwrap();
    let other = CrEvent::rollout_failed(&Error::config("spec.image: required"));
    sink.publish(&changed, other.clone()).await.unwrap();

    let events: Api<K8sEvent> = Api::namespaced(env.client().unwrap(), ns.name());
    let list = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reporting_controller.as_deref() == Some("windlass-test"))
            .collect::<Vec<_>>()
    };
    eventually("both events are listed", || async {
        list().await.len() >= 2
    })
    .await;
    let found = list().await;
    assert_eq!(found.len(), 2, "one Event per note: {found:#?}");
    let by_note = |note: &str| {
        found
            .iter()
            .find(|e| e.note.as_deref() == Some(note))
            .unwrap_or_else(|| panic!("no event with note {note:?}: {found:#?}"))
    };
    let repeated = by_note(failed.note());
    let series = repeated
        .series
        .as_ref()
        .unwrap_or_else(|| panic!("the repeat continued a series: {repeated:#?}"));
    assert_eq!(series.count, 3, "{series:?}");
    assert!(by_note(other.note()).series.is_none());
    for event in &found {
        let regarding = event.regarding.as_ref().unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("Widget"));
        assert_eq!(
            regarding.api_version.as_deref(),
            Some("test.windlass.dev/v1")
        );
        assert_eq!(regarding.name.as_deref(), Some("noisy"));
        assert_eq!(regarding.namespace.as_deref(), Some(ns.name()));
        assert_eq!(regarding.uid.as_deref(), stored.uid());
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reason.as_deref(), Some("RolloutFailed"));
        assert_eq!(event.action.as_deref(), Some("Rollout"));
        assert_eq!(event.reporting_instance.as_deref(), Some("live-test"));
    }
    assert_eq!(
        repeated
            .regarding
            .as_ref()
            .unwrap()
            .resource_version
            .as_deref(),
        stored.resource_version(),
        "the series points at the CR as of its first occurrence"
    );

    // The Event of the series is deleted (by hand, or expired): the next repeat starts a
    // new one rather than failing.
    let name = repeated.metadata.name.clone().unwrap();
    events.delete(&name, &Default::default()).await.unwrap();
    sink.publish(&changed, failed.clone()).await.unwrap();
    eventually("a new Event for the note", || async {
        list().await.iter().any(|e| {
            e.note.as_deref() == Some(failed.note()) && e.metadata.name != Some(name.clone())
        })
    })
    .await;
    let fresh: Vec<_> = list()
        .await
        .into_iter()
        .filter(|e| e.note.as_deref() == Some(failed.note()))
        .collect();
    assert_eq!(fresh.len(), 1, "{fresh:#?}");
    assert!(fresh[0].series.is_none(), "{fresh:#?}");
}
