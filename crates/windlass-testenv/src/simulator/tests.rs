use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};

use super::kubelet::parse_duration;
use super::nodes::{go_arch, kubernetes_arch, simulated_node};
use super::scheduling::{term_matches, tolerates};
use super::*;

#[test]
fn architectures_have_their_go_names() {
    assert_eq!(go_arch("x86_64", true), "amd64");
    assert_eq!(go_arch("aarch64", true), "arm64");
    assert_eq!(go_arch("x86", true), "386");
    assert_eq!(go_arch("arm", true), "arm");
    assert_eq!(go_arch("powerpc64", true), "ppc64le");
    assert_eq!(go_arch("powerpc64", false), "ppc64");
    assert_eq!(go_arch("s390x", false), "s390x");
    assert_eq!(go_arch("riscv64", true), "riscv64");
    assert_eq!(go_arch("loongarch64", true), "loong64");
    if cfg!(target_arch = "x86_64") {
        assert_eq!(kubernetes_arch(), "amd64");
    }
    let node = simulated_node("n-1");
    let labels = node.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("kubernetes.io/arch").map(String::as_str),
        Some(kubernetes_arch())
    );
    assert_eq!(
        node.status
            .and_then(|s| s.node_info)
            .map(|i| i.architecture)
            .as_deref(),
        Some(kubernetes_arch())
    );
}

#[tokio::test]
async fn a_stopped_task_is_reported_with_its_panic_message() {
    let (blow_up, blown) = tokio::sync::oneshot::channel::<()>();
    let mut simulator = NodeSimulator {
        node_names: Vec::new(),
        tasks: vec![
            SimulatorTask::spawn("Lease renewal", std::future::pending()),
            SimulatorTask::spawn("Pod controller", async {
                let _ = blown.await;
                panic!("reconciler blew up on pod x");
            }),
        ],
    };
    assert!(simulator.check_running().is_ok(), "both tasks still run");
    blow_up.send(()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let error = loop {
        match simulator.check_running() {
            Err(e) => break e,
            Ok(()) if tokio::time::Instant::now() > deadline => {
                panic!("the panicked task was not noticed")
            }
            Ok(()) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    match &error {
        Error::SimulatorStopped { task, reason } => {
            assert_eq!(*task, "Pod controller");
            assert!(reason.contains("reconciler blew up on pod x"), "{reason}");
        }
        other => panic!("unexpected error {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("Pod controller") && text.contains("panicked"),
        "{text}"
    );
    // Reported again, not only once (the handle is not polled twice).
    assert!(matches!(
        simulator.check_running(),
        Err(Error::SimulatorStopped {
            task: "Pod controller",
            ..
        })
    ));
}

#[test]
fn durations() {
    assert_eq!(parse_duration("3s"), Some(Duration::from_secs(3)));
    assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
    assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
    assert_eq!(parse_duration("soon"), None);
    assert_eq!(parse_duration("-1s"), None);
    // Too large for a Duration: invalid, not a panic.
    assert_eq!(parse_duration("99999999999999999999"), None);
    assert_eq!(parse_duration("99999999999999999999m"), None);
    assert_eq!(parse_duration("1e400"), None);
    assert_eq!(parse_duration("."), None);
    assert_eq!(parse_duration(""), None);
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect: effect.into(),
        ..Default::default()
    }
}

fn toleration(
    key: Option<&str>,
    operator: &str,
    value: Option<&str>,
    effect: Option<&str>,
) -> Toleration {
    Toleration {
        key: key.map(Into::into),
        operator: Some(operator.into()),
        value: value.map(Into::into),
        effect: effect.map(Into::into),
        ..Default::default()
    }
}

#[test]
fn tolerations_follow_the_scheduler_rules() {
    let t = taint("dedicated", Some("db"), "NoSchedule");
    assert!(!tolerates(None, &t));
    assert!(tolerates(
        Some(&[toleration(Some("dedicated"), "Equal", Some("db"), None)]),
        &t
    ));
    assert!(!tolerates(
        Some(&[toleration(Some("dedicated"), "Equal", Some("web"), None)]),
        &t
    ));
    assert!(tolerates(
        Some(&[toleration(
            Some("dedicated"),
            "Exists",
            None,
            Some("NoSchedule")
        )]),
        &t
    ));
    assert!(!tolerates(
        Some(&[toleration(
            Some("dedicated"),
            "Exists",
            None,
            Some("NoExecute")
        )]),
        &t
    ));
    assert!(tolerates(
        Some(&[toleration(None, "Exists", None, None)]),
        &t
    ));
}

#[test]
fn node_affinity_by_field_pins_daemonset_pods() {
    let node = simulated_node("n-1");
    let term = |name: &str| NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![name.into()]),
        }]),
        ..Default::default()
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert!(term_matches(&term("n-1"), &labels, "n-1"));
    assert!(!term_matches(&term("n-2"), &labels, "n-1"));
    assert!(!term_matches(&NodeSelectorTerm::default(), &labels, "n-1"));
}
