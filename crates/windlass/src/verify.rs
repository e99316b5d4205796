//! Is a deployed object ready? Per-kind rules, condition checks and the subsystem check.
//!
//! windlass also requires a workload's status to describe its current spec
//! (`status.observedGeneration >= metadata.generation`): right after an update, the old
//! status still says "available" for the old spec, and the object would verify too early.

use serde_json::Value;

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::managed::ManagedObject;
use crate::object::ManifestExt;

/// The answer of a readiness check ([`Component::verify`](crate::component::Component::verify),
/// an edge condition of
/// [`Components::depends_on_when`](crate::controller::Components::depends_on_when)): ready,
/// or not yet with the reason, which becomes the CR's status message.
///
/// "Not yet" is a value, not an error: the rollout is incomplete, not failed, and the CR is
/// requeued. An `Err` from the same check is a real failure (a cluster error, a bad
/// config); a [`Error::Precondition`] propagated with `?` from a helper is treated as "not
/// yet" too.
///
/// ```
/// use windlass::verify::Readiness;
///
/// let waiting = Readiness::not_yet("the database has no endpoint yet");
/// assert!(!waiting.is_ready());
/// assert_eq!(waiting.reason(), Some("the database has no endpoint yet"));
/// assert!(Readiness::from(true).is_ready());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Ready: the rollout goes on.
    Ready,
    /// Not ready yet, with the reason.
    NotYet(String),
}

impl Readiness {
    /// Not ready yet, for `reason`.
    pub fn not_yet(reason: impl Into<String>) -> Self {
        Readiness::NotYet(reason.into())
    }

    /// Whether this is [`Readiness::Ready`].
    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready)
    }

    /// Why it is not ready, if it is not.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Readiness::Ready => None,
            Readiness::NotYet(reason) => Some(reason),
        }
    }
}

/// `true` is ready; `false` is not yet, without a reason to give.
impl From<bool> for Readiness {
    fn from(ready: bool) -> Self {
        match ready {
            true => Readiness::Ready,
            false => Readiness::not_yet("not ready"),
        }
    }
}

/// The default verification of a component's objects: every object must exist and
/// pass its verify function or its kind's rule; the first that does not is named in the
/// [`Readiness::NotYet`]. An object that has failed for good (a Job with its `Failed`
/// condition) fails the component. A failed read is a cluster error, not a verification
/// that has not passed yet. Dry-run skips verification before calling this.
///
/// Pass the session's cluster ([`crate::session::Session::cluster`]): it answers with the
/// copies the reconcile already holds (read or returned by a write in the deploy phase),
/// so verifying costs no request. The kinds' rules read no more of an object than
/// [`Cluster::get_own`] answers with ([`verify_object`] and the failure of a Job read
/// `kind`, `metadata.generation`, `status` and `spec.replicas`), so an object without a
/// verify function of its own is read that way; one with a function, which may read any
/// field, is read whole ([`Cluster::get`]).
pub async fn verify_objects(cluster: &dyn Cluster, objects: &[ManagedObject]) -> Result<Readiness> {
    for object in objects {
        // A kind without a rule is ready once it exists: the version the cluster holds it
        // at says so without reading it (see `Cluster::own_version`).
        if object.verify.is_none()
            && rule(&object.reference.kind).is_none()
            && cluster.own_version(&object.reference).await?.is_some()
        {
            continue;
        }
        let live = match &object.verify {
            None => cluster.get_own_shared(&object.reference).await?,
            Some(_) => cluster.get_shared(&object.reference).await?,
        };
        let Some(live) = live else {
            return Ok(Readiness::not_yet(format!(
                "{} does not exist",
                object.reference
            )));
        };
        if let Some(why) = failure(&live) {
            return Err(Error::rollout(format!(
                "{} failed: {why}",
                object.reference
            )));
        }
        let ok = match &object.verify {
            Some(check) => check(&live),
            None => verify_object(&live),
        };
        if !ok {
            return Ok(Readiness::not_yet(format!(
                "{} is not ready",
                object.reference
            )));
        }
    }
    Ok(Readiness::Ready)
}

/// Whether a live object is ready by its kind's rule; kinds without a rule are
/// ready once they exist.
///
/// - `Pod`: condition `Ready` is true.
/// - `Job`: condition `Complete` is true.
/// - `Deployment`: `Available` is true and `Progressing` is true with reason
///   `NewReplicaSetAvailable`, and, as `kubectl rollout status` checks, every desired
///   replica is updated and available with no old one left.
/// - `StatefulSet`: every desired replica (`spec.replicas`, default 1) is ready and
///   updated. `status.replicas` is not the measure: it is 0 right after creation, and
///   comparing `readyReplicas` with it would call a brand-new StatefulSet ready.
/// - `DaemonSet`: every scheduled pod is updated and ready.
///
/// Workloads must also have been observed at their current generation: right after an
/// update, the old status still describes the old spec.
pub fn verify_object(object: &Value) -> bool {
    rule(object.kind().unwrap_or_default()).is_none_or(|ready| ready(object))
}

/// The rule [`verify_object`] holds an object of `kind` to, if the kind has one
/// ([`failure`] reads only Jobs, which have one): an object of any other kind is ready once
/// it exists, so verifying it reads nothing but whether it does.
fn rule(kind: &str) -> Option<fn(&Value) -> bool> {
    let ready: fn(&Value) -> bool = match kind {
        "Pod" => |pod| condition_is(pod, "Ready", true, None),
        "Job" => |job| condition_is(job, "Complete", true, None),
        "Deployment" => |deployment| {
            let status = &deployment["status"];
            let desired = desired_replicas(deployment);
            observed_current(deployment)
                && condition_is(deployment, "Available", true, None)
                && condition_is(
                    deployment,
                    "Progressing",
                    true,
                    Some("NewReplicaSetAvailable"),
                )
                && count(&status["updatedReplicas"]) == desired
                && count(&status["replicas"]) == desired
                && count(&status["availableReplicas"]) == desired
        },
        "StatefulSet" => |set| {
            let status = &set["status"];
            let desired = desired_replicas(set);
            observed_current(set)
                && count(&status["readyReplicas"]) == desired
                && status["updatedReplicas"]
                    .as_i64()
                    .is_none_or(|updated| updated == desired)
        },
        "DaemonSet" => |set| {
            let status = &set["status"];
            let scheduled = status["desiredNumberScheduled"].as_i64();
            observed_current(set)
                && scheduled.is_some_and(|d| {
                    count(&status["numberReady"]) == d
                        && count(&status["updatedNumberScheduled"]) == d
                })
        },
        _ => return None,
    };
    Some(ready)
}

/// A count of a workload's status; absent is none.
fn count(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// The replicas a workload's spec asks for (default 1).
fn desired_replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// Why a live object has failed for good, if it has: a Job whose `Failed` condition is
/// true (its back-off limit or deadline was reached; it will not run again by itself).
pub(crate) fn failure(object: &Value) -> Option<String> {
    match object.kind() {
        Some("Job") if condition_is(object, "Failed", true, None) => {
            let condition = newest_condition(object, "Failed")?;
            Some(format!(
                "{}: {}",
                condition["reason"].as_str().unwrap_or("Failed"),
                condition["message"].as_str().unwrap_or("the Job failed")
            ))
        }
        _ => None,
    }
}

/// Whether the object's status was computed for its current spec.
fn observed_current(object: &Value) -> bool {
    match (
        object["status"]["observedGeneration"].as_i64(),
        object.generation(),
    ) {
        (Some(observed), Some(generation)) => observed >= generation,
        // Servers that do not report generations cannot be checked.
        _ => true,
    }
}

/// Whether the newest condition of `condition_type` has the expected status and, if
/// given, reason. "Newest" is by `lastTransitionTime`, then by `lastTransactionTime`, a
/// misspelling some operators write; conditions without a time count as oldest.
///
/// Statuses are the strings `"True"`/`"False"` (any case) or booleans; a boolean `false`
/// matches an expected false (it is not judged by truthiness).
pub(crate) fn condition_is(
    object: &Value,
    condition_type: &str,
    expected: bool,
    reason: Option<&str>,
) -> bool {
    let Some(condition) = newest_condition(object, condition_type) else {
        return false;
    };
    let actual = match &condition["status"] {
        Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
        Value::Bool(b) => Some(*b),
        _ => None,
    };
    actual == Some(expected) && reason.is_none_or(|r| condition["reason"].as_str() == Some(r))
}

/// The newest condition of a type in `status.conditions`.
pub(crate) fn newest_condition<'a>(object: &'a Value, condition_type: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .filter(|c| c["type"].as_str() == Some(condition_type))
        .max_by_key(|c| condition_time(c))
}

fn condition_time(condition: &Value) -> jiff::Timestamp {
    ["lastTransitionTime", "lastTransactionTime"]
        .iter()
        .find_map(|k| condition[*k].as_str())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Whether a child CR whose status is laid out as windlass's is done:
/// `Ready` true, `Updating` false, and `versions.reconciled` equal to `desired_version`
/// (both absent also counts as equal).
pub fn verify_subsystem(object: &Value, desired_version: Option<&str>) -> bool {
    let reconciled = object["status"]["versions"]["reconciled"].as_str();
    if desired_version.is_some() && reconciled.is_none() {
        return false;
    }
    condition_is(object, "Ready", true, None)
        && condition_is(object, "Updating", false, None)
        && reconciled == desired_version
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with_conditions(kind: &str, conditions: Value) -> Value {
        json!({"kind": kind, "status": {"conditions": conditions}})
    }

    /// `verify_objects` does not read an object of a kind without a rule: the workload
    /// kinds have one that a bare object fails, and other kinds have none and pass bare.
    #[test]
    fn the_kinds_with_a_rule_are_the_workloads() {
        for kind in ["Pod", "Job", "Deployment", "StatefulSet", "DaemonSet"] {
            let bare = json!({"kind": kind, "metadata": {"generation": 1}});
            assert!(rule(kind).is_some(), "{kind} has a rule");
            assert!(!verify_object(&bare), "{kind}: a bare one is not ready");
        }
        for kind in [
            "ConfigMap",
            "Secret",
            "Service",
            "ServiceAccount",
            "Ingress",
        ] {
            assert!(rule(kind).is_none(), "{kind} has none");
            assert!(
                verify_object(&json!({"kind": kind})),
                "{kind}: ready once it exists"
            );
        }
    }

    #[test]
    fn pods_and_jobs_follow_their_conditions() {
        assert!(verify_object(&with_conditions(
            "Pod",
            json!([{"type": "Ready", "status": "True"}])
        )));
        assert!(!verify_object(&with_conditions(
            "Pod",
            json!([{"type": "Ready", "status": "False"}])
        )));
        assert!(!verify_object(&json!({"kind": "Pod"})));
        assert!(verify_object(&with_conditions(
            "Job",
            json!([{"type": "Complete", "status": "True"}])
        )));
        assert!(!verify_object(&with_conditions(
            "Job",
            json!([{"type": "Failed", "status": "True"}])
        )));
    }

    #[test]
    fn deployments_need_the_new_replica_set_available_for_the_current_generation() {
        let ready = json!({"kind": "Deployment", "metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}});
        assert!(verify_object(&ready));
        let mut rolling = ready.clone();
        rolling["status"]["conditions"][1]["reason"] = json!("ReplicaSetUpdated");
        assert!(!verify_object(&rolling));
        let mut stale = ready.clone();
        stale["metadata"]["generation"] = json!(3);
        assert!(
            !verify_object(&stale),
            "status of the previous generation does not count"
        );
        let mut old_pods_left = ready.clone();
        old_pods_left["status"]["replicas"] = json!(3);
        assert!(
            !verify_object(&old_pods_left),
            "an old replica is still running"
        );
        let mut scaled = ready.clone();
        scaled["spec"]["replicas"] = json!(3);
        assert!(
            !verify_object(&scaled),
            "not every desired replica is available"
        );
    }

    #[test]
    fn statefulsets_and_daemonsets_count_ready_pods() {
        let sts = |spec: Value, status: Value| json!({"kind": "StatefulSet", "spec": spec, "status": status});
        assert!(verify_object(&sts(
            json!({"replicas": 2}),
            json!({"replicas": 2, "readyReplicas": 2})
        )));
        assert!(!verify_object(&sts(
            json!({"replicas": 2}),
            json!({"replicas": 2, "readyReplicas": 1})
        )));
        assert!(!verify_object(&sts(
            json!({"replicas": 2}),
            json!({"replicas": 2, "readyReplicas": 2, "updatedReplicas": 1})
        )));
        // Right after creation the controller reports zero pods; that is not ready, though
        // readyReplicas equals status.replicas.
        assert!(!verify_object(&sts(json!({}), json!({"replicas": 0}))));
        assert!(verify_object(&sts(
            json!({}),
            json!({"replicas": 1, "readyReplicas": 1})
        )));
        assert!(verify_object(
            &json!({"kind": "DaemonSet", "status": {"desiredNumberScheduled": 3, "numberReady": 3, "updatedNumberScheduled": 3}})
        ));
        assert!(!verify_object(
            &json!({"kind": "DaemonSet", "status": {"desiredNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 3}})
        ));
    }

    #[test]
    fn other_kinds_are_ready_when_present() {
        assert!(verify_object(&json!({"kind": "ConfigMap"})));
    }

    #[test]
    fn the_newest_condition_wins() {
        let obj = with_conditions(
            "X",
            json!([
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2025-01-01T00:00:00Z"},
                {"type": "Ready", "status": "True"}
            ]),
        );
        assert!(condition_is(&obj, "Ready", false, None));
    }

    #[test]
    fn boolean_false_matches_expected_false() {
        // Booleans are not compared by truthiness: `false` matches an expected false.
        let obj = with_conditions("X", json!([{"type": "Updating", "status": false}]));
        assert!(condition_is(&obj, "Updating", false, None));
        assert!(!condition_is(&obj, "Updating", true, None));
    }

    #[test]
    fn subsystems_need_ready_not_updating_and_the_version() {
        let done = json!({"status": {"versions": {"reconciled": "1.2"}, "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Updating", "status": "False"}]}});
        assert!(verify_subsystem(&done, Some("1.2")));
        assert!(!verify_subsystem(&done, Some("1.3")));
        assert!(
            !verify_subsystem(&done, None),
            "reconciled 1.2 is not the absent version"
        );
        let mut unversioned = done.clone();
        unversioned["status"]["versions"] = json!({});
        assert!(verify_subsystem(&unversioned, None));
        assert!(!verify_subsystem(&unversioned, Some("1.2")));
    }
}
