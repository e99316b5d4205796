//! The runtime against a misbehaving API server: the real one behind a fault-injecting
//! proxy ([`windlass_testenv::proxy`]). Bursts of 500 and of 429 with `Retry-After` are ridden out,
//! the server's `Retry-After` honoured; a request that never gets an answer fails at
//! `runtime.request-timeout` and its CR converges anyway; watches that are dropped, expire
//! (410) or are down while a child is deleted list again, and the deletion they missed is
//! repaired.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use windlass::cluster::{Cluster, RequestCounter, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::object::ObjectRef;
use windlass::runtime::Manager;
use windlass::testing::{DummyComponent, DummyController};

use crate::runtime::Finished;
use crate::{eventually, live};
use windlass_testenv::proxy::{Fault, Proxy, Rule, upstream};

/// A Widget owns three ConfigMaps, `<cr>-a`, `<cr>-b`, `<cr>-c`.
fn controller() -> DummyController {
    DummyController::new()
        .component(DummyComponent::new("a").with_configmap("a"), &[])
        .component(DummyComponent::new("b").with_configmap("b"), &["a"])
        .component(DummyComponent::new("c").with_configmap("c"), &["b"])
}

/// A manager of [`controller`] in `ns` whose client goes through `proxy`, its requests
/// failing after `timeout`; its shutdown switch and task.
fn start(
    proxy: &Proxy,
    ns: &str,
    finished: &Finished,
    timeout: Duration,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<windlass::Result<()>>,
) {
    let client = RequestCounter::new()
        .client_with_timeout(proxy.config(), timeout)
        .unwrap();
    let mut config = OperatorConfig::default();
    config.runtime.watch_namespaces = vec![ns.to_string()];
    config.server.metrics_bind_address = String::new();
    let manager = Manager::new(client, config)
        .controller(controller())
        .with_observer(Arc::new(finished.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    (stop, task)
}

fn widget(ns: &str, name: &str) -> serde_json::Value {
    json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns}, "spec": {}})
}

fn cm(ns: &str, name: &str) -> ObjectRef {
    ObjectRef::new("v1", "ConfigMap", Some(ns), name)
}

#[tokio::test]
async fn bursts_of_500_and_429_are_ridden_out_and_retry_after_is_honoured() {
    let (admin, env) = live().await;
    let ns = env.namespace("faults-status").await.unwrap();
    let proxy = Proxy::start(upstream(env)).await;
    // The first two writes of a ConfigMap get 429 with Retry-After: 2, the next three 500.
    proxy.inject(Rule {
        method: Some("PATCH"),
        watch: None,
        path: "/configmaps/".into(),
        fault: Fault::Status(429, Some(2)),
        times: 2,
    });
    proxy.inject(Rule {
        method: Some("PATCH"),
        watch: None,
        path: "/configmaps/".into(),
        fault: Fault::Status(500, None),
        times: 3,
    });
    let finished = Finished::default();
    let (stop, task) = start(&proxy, ns.name(), &finished, Duration::from_secs(30));
    admin
        .apply(&widget(ns.name(), "w"), WriteMethod::Update)
        .await
        .unwrap();
    eventually(
        "the Widget is reconciled to Done through the faults",
        || async { finished.done("w") > 0 },
    )
    .await;
    for name in ["w-a", "w-b", "w-c"] {
        assert!(
            admin.get(&cm(ns.name(), name)).await.unwrap().is_some(),
            "{name}"
        );
    }
    // kube's retry waited as long as the server asked before writing again.
    let writes: Vec<_> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "PATCH" && s.path.contains("/configmaps/"))
        .collect();
    let first = writes
        .iter()
        .position(|s| s.injected == Some(Fault::Status(429, Some(2))))
        .expect("a 429 was injected");
    let gap = writes[first + 1].at - writes[first].at;
    assert!(
        gap >= Duration::from_millis(1900),
        "retried after {gap:?}, not after the 2 s asked"
    );
    let injected = writes.iter().filter(|s| s.injected.is_some()).count();
    assert_eq!(injected, 5, "every fault was met");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_request_never_answered_fails_at_the_deadline_and_the_cr_converges() {
    let (admin, env) = live().await;
    let ns = env.namespace("faults-stall").await.unwrap();
    let proxy = Proxy::start(upstream(env)).await;
    proxy.inject(Rule {
        method: Some("PATCH"),
        watch: None,
        path: "/configmaps/".into(),
        fault: Fault::Stall,
        times: 1,
    });
    let finished = Finished::default();
    let (stop, task) = start(&proxy, ns.name(), &finished, Duration::from_secs(2));
    admin
        .apply(&widget(ns.name(), "w"), WriteMethod::Update)
        .await
        .unwrap();
    eventually(
        "the Widget is reconciled to Done after the stall",
        || async { finished.done("w") > 0 },
    )
    .await;
    let writes: Vec<_> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "PATCH" && s.path.contains("/configmaps/"))
        .collect();
    assert_eq!(writes[0].injected, Some(Fault::Stall));
    let gap = writes[1].at - writes[0].at;
    assert!(
        gap >= Duration::from_secs(2),
        "the stalled write was given up after {gap:?}, before its deadline"
    );
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn dropped_and_expired_watches_list_again_and_a_deletion_they_missed_is_repaired() {
    let (admin, env) = live().await;
    let ns = env.namespace("faults-watch").await.unwrap();
    let proxy = Proxy::start(upstream(env)).await;
    let finished = Finished::default();
    let (stop, task) = start(&proxy, ns.name(), &finished, Duration::from_secs(30));
    admin
        .apply(&widget(ns.name(), "w"), WriteMethod::Update)
        .await
        .unwrap();
    eventually("the Widget is reconciled to Done", || async {
        finished.done("w") > 0
    })
    .await;
    let before = admin.get(&cm(ns.name(), "w-a")).await.unwrap().unwrap();

    // Watches dropped a few times in a row, then expired (410): each lists again.
    proxy.inject(Rule {
        method: Some("GET"),
        watch: Some(true),
        path: "/configmaps".into(),
        fault: Fault::EndWatch,
        times: 3,
    });
    proxy.inject(Rule {
        method: Some("GET"),
        watch: Some(true),
        path: "/configmaps".into(),
        fault: Fault::Gone,
        times: 1,
    });
    proxy.sever();
    eventually(
        "the dropped and expired ConfigMap watches are met",
        || async {
            proxy
                .seen()
                .iter()
                .filter(|s| s.watch && s.path.contains("/configmaps") && s.injected.is_some())
                .count()
                == 4
        },
    )
    .await;
    // The relists cost no write: every object listed is as windlass left it. Once a
    // ConfigMap watch is open again after the 410, the relist's events are routed within
    // milliseconds and a reconcile they started would write within a second.
    let gone_at = proxy
        .seen()
        .iter()
        .filter(|s| s.injected == Some(Fault::Gone))
        .map(|s| s.at)
        .max()
        .unwrap();
    eventually("a ConfigMap watch is open again after the 410", || async {
        proxy.seen().iter().any(|s| {
            s.watch && s.path.contains("/configmaps") && s.injected.is_none() && s.at > gone_at
        })
    })
    .await;
    windlass_testenv::quiet_window(
        "no write after the relists",
        Duration::from_secs(3),
        || async {
            !proxy
                .seen()
                .iter()
                .any(|s| s.at > gone_at && s.method != "GET")
        },
    )
    .await;

    // Down: the ConfigMap watch cannot be resumed, and a child is deleted meanwhile.
    proxy.inject(Rule {
        method: Some("GET"),
        watch: Some(true),
        path: "/configmaps".into(),
        fault: Fault::StallThenGone,
        times: usize::MAX,
    });
    proxy.sever();
    eventually("the ConfigMap watch is down", || async {
        proxy
            .seen()
            .iter()
            .any(|s| s.injected == Some(Fault::StallThenGone))
    })
    .await;
    admin.delete(&cm(ns.name(), "w-a"), None).await.unwrap();
    assert!(admin.get(&cm(ns.name(), "w-a")).await.unwrap().is_none());

    // Back up: told its resourceVersion is too old, the watch lists, finds the child gone,
    // and its CR puts it back.
    proxy.heal();
    eventually("the missed deletion is repaired", || async {
        admin
            .get(&cm(ns.name(), "w-a"))
            .await
            .unwrap()
            .is_some_and(|after| after["metadata"]["uid"] != before["metadata"]["uid"])
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
