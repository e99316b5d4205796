//! Rules 3-5: the simulated kubelet. A Pod bound to a simulated Node runs, turns ready (after
//! [`READY_AFTER_ANNOTATION`]'s delay), completes if a Job's, or fails as
//! [`FAIL_ANNOTATION`] asks; [`next_status`] says which status it moves to next.

use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    Context, FAIL_ANNOTATION, KEEP_RUNNING_ANNOTATION, READY_AFTER_ANNOTATION, pod_condition,
};

/// The value of the Pod's annotation `key`, trimmed.
fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(|v| v.trim().to_string())
}

/// Whether the Pod's annotation `key` says `true`.
fn is_true(pod: &Pod, key: &str) -> bool {
    annotation(pod, key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// `"3s"`, `"500ms"`, `"2m"`, or a number of seconds; `None` for anything else, including
/// negative values and values too large for a [`Duration`].
pub(super) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return None,
    };
    // `try_`: a value too large for a `Duration` ("99999999999999999999") is invalid, not a
    // panic in the Pod controller.
    if seconds.is_finite() && seconds >= 0.0 {
        Duration::try_from_secs_f64(seconds).ok()
    } else {
        None
    }
}

/// Longest requeue the simulator asks for: a very long `ready-after` is re-checked now and then
/// rather than handed to the controller's timer as one huge deadline.
const MAX_REQUEUE: Duration = Duration::from_secs(3600);

/// What the simulated kubelet does next with a Pod on its Node.
pub(super) enum Next {
    /// Write this status, then look again after the duration, if any.
    Write(Box<PodStatus>, Option<Duration>),
    /// Nothing to write yet; look again after the duration.
    Wait(Duration),
    /// The Pod stays as it is until it changes.
    Nothing,
}

/// The status the Pod moves to next (rules 3-5).
pub(super) fn next_status(pod: &Pod, ctx: &Context) -> Next {
    let Some(spec) = pod.spec.as_ref() else {
        return Next::Nothing;
    };
    let current = pod.status.clone().unwrap_or_default();
    let phase = current.phase.as_deref().unwrap_or("Pending");
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let fail = is_true(pod, FAIL_ANNOTATION);
    let now = jiff::Timestamp::now();

    let ready_delay = annotation(pod, READY_AFTER_ANNOTATION)
        .and_then(|v| parse_duration(&v))
        .unwrap_or_default();
    match phase {
        "Pending" => {
            let n = ctx.next_ip.fetch_add(1, Ordering::Relaxed);
            let ip = format!("10.244.{}.{}", (n / 250) % 250, n % 250 + 2);
            let start = Time(now);
            let outcome = if fail && restart_policy == "Never" {
                Outcome::Failed
            } else if fail {
                Outcome::CrashLooping
            } else if ready_delay.is_zero() {
                Outcome::Ready
            } else {
                Outcome::RunningNotReady
            };
            let requeue =
                (outcome == Outcome::RunningNotReady).then_some(ready_delay.min(MAX_REQUEUE));
            Next::Write(build_status(pod, outcome, &start, Some(ip)), requeue)
        }
        "Running" => {
            let start = current.start_time.clone().unwrap_or(Time(now));
            if fail {
                return Next::Nothing;
            }
            let ready = pod_condition(pod, "Ready").is_some_and(|c| c.status == "True");
            if !ready {
                let elapsed = now.duration_since(start.0);
                let elapsed = Duration::try_from(elapsed).unwrap_or_default();
                if elapsed < ready_delay {
                    return Next::Wait((ready_delay - elapsed).min(MAX_REQUEUE));
                }
                return Next::Write(
                    build_status(pod, Outcome::Ready, &start, current.pod_ip.clone()),
                    None,
                );
            }
            if restart_policy != "Always" && !is_true(pod, KEEP_RUNNING_ANNOTATION) {
                return Next::Write(
                    build_status(pod, Outcome::Succeeded, &start, current.pod_ip.clone()),
                    None,
                );
            }
            Next::Nothing
        }
        _ => Next::Nothing,
    }
}

/// The state a status write puts the Pod in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    RunningNotReady,
    Ready,
    CrashLooping,
    Succeeded,
    Failed,
}

/// The Pod's status in `outcome`: its phase, conditions and container statuses, started at
/// `start`, with `pod_ip`.
fn build_status(
    pod: &Pod,
    outcome: Outcome,
    start: &Time,
    pod_ip: Option<String>,
) -> Box<PodStatus> {
    let now = Time(jiff::Timestamp::now());
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let statuses = container_statuses(&spec, &uid, outcome, start, &now);
    let init_statuses = init_container_statuses(&spec, &uid, start);
    let phase = match outcome {
        Outcome::Succeeded => "Succeeded",
        Outcome::Failed => "Failed",
        _ => "Running",
    };
    Box::new(PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(pod_conditions(outcome, &now)),
        host_ip: Some("127.0.0.1".to_string()),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: Some(start.clone()),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ..Default::default()
    })
}

/// The state of every container in `outcome`, as
/// `(state, last state, restart count, ready)`; a completed one exits with `exit_code`.
fn container_state(
    outcome: Outcome,
    exit_code: i32,
    start: &Time,
    now: &Time,
) -> (ContainerState, Option<ContainerState>, i32, bool) {
    match outcome {
        Outcome::RunningNotReady | Outcome::Ready => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(start.clone()),
                }),
                ..Default::default()
            },
            None,
            0,
            outcome == Outcome::Ready,
        ),
        Outcome::CrashLooping => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("CrashLoopBackOff".to_string()),
                    message: Some(format!("simulated failure ({FAIL_ANNOTATION})")),
                }),
                ..Default::default()
            },
            Some(terminated(1, "Error", start, now)),
            1,
            false,
        ),
        Outcome::Succeeded => (
            terminated(exit_code, "Completed", start, now),
            None,
            0,
            false,
        ),
        Outcome::Failed => (terminated(1, "Error", start, now), None, 0, false),
    }
}

/// The status of each of the Pod's containers in `outcome`.
fn container_statuses(
    spec: &PodSpec,
    uid: &str,
    outcome: Outcome,
    start: &Time,
    now: &Time,
) -> Vec<ContainerStatus> {
    spec.containers
        .iter()
        .map(|c| {
            let (state, last_state, restart_count, ready) = container_state(outcome, 0, start, now);
            ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                image_id: format!("windlass-sim://{}", c.image.clone().unwrap_or_default()),
                container_id: Some(format!("windlass-sim://{uid}/{}", c.name)),
                ready,
                restart_count,
                started: Some(matches!(outcome, Outcome::Ready | Outcome::RunningNotReady)),
                state: Some(state),
                last_state,
                ..Default::default()
            }
        })
        .collect()
}

/// The status of each init container: completed when the Pod started.
fn init_container_statuses(spec: &PodSpec, uid: &str, start: &Time) -> Vec<ContainerStatus> {
    spec.init_containers
        .iter()
        .flatten()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: format!("windlass-sim://{}", c.image.clone().unwrap_or_default()),
            container_id: Some(format!("windlass-sim://{uid}/{}", c.name)),
            ready: true,
            restart_count: 0,
            started: Some(false),
            state: Some(terminated(0, "Completed", start, start)),
            ..Default::default()
        })
        .collect()
}

/// The Pod's conditions in `outcome`: initialized and scheduled, ready only when `Ready`.
fn pod_conditions(outcome: Outcome, now: &Time) -> Vec<PodCondition> {
    let ready = outcome == Outcome::Ready;
    let not_ready_reason = match outcome {
        Outcome::Succeeded => "PodCompleted",
        Outcome::Failed => "PodFailed",
        _ => "ContainersNotReady",
    };
    let condition = |type_: &str, ok: bool| PodCondition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: (!ok).then(|| not_ready_reason.to_string()),
        last_transition_time: Some(now.clone()),
        last_probe_time: None,
        ..Default::default()
    };
    vec![
        condition("Initialized", true),
        condition("Ready", ready),
        condition("ContainersReady", ready),
        condition("PodScheduled", true),
    ]
}

/// A container state terminated with `exit_code` for `reason`, run from `start` to `end`.
fn terminated(exit_code: i32, reason: &str, start: &Time, end: &Time) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.to_string()),
            started_at: Some(start.clone()),
            finished_at: Some(end.clone()),
            ..Default::default()
        }),
        ..Default::default()
    }
}
