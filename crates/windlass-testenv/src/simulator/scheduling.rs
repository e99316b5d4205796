//! Rule 2: scheduling. A Pod is bound to the feasible simulated Node with the fewest Pods,
//! counting the bindings not yet seen in the Pod store; an unschedulable Pod is marked so and
//! retried.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Binding, Node, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, Pod, PodCondition,
    Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt as _};

use super::{Context, ReconcileError, pod_condition};

const MAX_PODS: usize = 110;

/// Binds `pod` to the feasible Node with the fewest Pods, or marks it unschedulable and
/// retries it in 2 s.
pub(super) async fn schedule(
    pod: &Pod,
    api: &Api<Pod>,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let name = pod.name_any();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let Some(node_name) = choose_node(pod, &uid, ctx) else {
        report_unschedulable(pod, api, ctx, &name).await;
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    bind(pod, api, ctx, &uid, &node_name).await
}

/// The feasible Node with the fewest Pods, recorded as `uid`'s in the assume cache; `None`
/// if no Node fits.
fn choose_node(pod: &Pod, uid: &str, ctx: &Context) -> Option<String> {
    // Like the real scheduler's assume cache: a binding we just made is not in the Pod
    // store until its watch event arrives, so count it ourselves, or a burst of replicas
    // would all see empty Nodes and land on the same one.
    let pods = ctx.pods.state();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut live = HashSet::new();
    let mut bound = HashSet::new();
    for p in &pods {
        let p_uid = p.metadata.uid.clone().unwrap_or_default();
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            bound.insert(p_uid.clone());
            if !is_terminal(p) {
                *counts.entry(node).or_default() += 1;
            }
        }
        live.insert(p_uid);
    }
    let mut assumed = ctx
        .assumed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assumed.retain(|uid, _| live.contains(uid) && !bound.contains(uid));
    for node in assumed.values() {
        *counts.entry(node.clone()).or_default() += 1;
    }
    let mut candidates: Vec<(usize, String)> = ctx
        .nodes
        .state()
        .iter()
        .filter(|node| node_fits(pod, node))
        .map(|node| {
            let node_name = node.name_any();
            (counts.get(&node_name).copied().unwrap_or(0), node_name)
        })
        .filter(|(count, _)| *count < MAX_PODS)
        .collect();
    candidates.sort();
    let (_, node) = candidates.into_iter().next()?;
    assumed.insert(uid.to_string(), node.clone());
    Some(node)
}

/// Sets `PodScheduled=False` (`Unschedulable`) on the Pod, unless it already says so.
async fn report_unschedulable(pod: &Pod, api: &Api<Pod>, ctx: &Context, name: &str) {
    let already = pod_condition(pod, "PodScheduled").is_some_and(|c| c.status == "False");
    if !already {
        let condition = PodCondition {
            type_: "PodScheduled".to_string(),
            status: "False".to_string(),
            reason: Some("Unschedulable".to_string()),
            message: Some(format!(
                "0/{} simulated nodes are available (node selector, affinity, taints or pod count)",
                ctx.nodes.state().len()
            )),
            last_transition_time: Some(Time(jiff::Timestamp::now())),
            ..Default::default()
        };
        let patch = serde_json::json!({ "status": { "conditions": [condition] } });
        let _ = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await;
    }
}

/// Binds the Pod to `node_name`; a failed binding is taken out of the assume cache.
async fn bind(
    pod: &Pod,
    api: &Api<Pod>,
    ctx: &Context,
    uid: &str,
    node_name: &str,
) -> Result<Action, ReconcileError> {
    let name = pod.name_any();
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: pod.namespace(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node_name.to_string()),
            ..Default::default()
        },
    };
    let result = api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await;
    if result.is_err() {
        ctx.assumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(uid);
    }
    match result {
        Ok(_) => Ok(Action::await_change()),
        // Bound meanwhile, or gone.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError(format!(
            "binding pod {}/{name} to {node_name}: {e}",
            pod.namespace().unwrap_or_default()
        ))),
    }
}

/// Whether the Pod has ended (`Succeeded` or `Failed`): it no longer counts on its Node.
fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Scheduling predicate of rule 2.
pub(super) fn node_fits(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let node_name = node.name_any();
    if node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
        && !tolerates(
            spec.tolerations.as_deref(),
            &Taint {
                key: "node.kubernetes.io/unschedulable".to_string(),
                effect: "NoSchedule".to_string(),
                ..Default::default()
            },
        )
    {
        return false;
    }
    if let Some(selector) = &spec.node_selector
        && !selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice());
    if let Some(terms) = terms
        && !terms
            .iter()
            .any(|term| term_matches(term, &labels, &node_name))
    {
        return false;
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| tolerates(spec.tolerations.as_deref(), t))
}

/// Whether a required node-affinity term matches the Node's labels and name.
pub(super) fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        // An empty term matches nothing, as in the scheduler.
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(node_name)))
}

/// Whether one requirement of a term holds for `value` (the label, or the field).
fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x)
        }
        "Lt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x)
        }
        _ => false,
    }
}

/// Whether one of `tolerations` tolerates `taint`, by the scheduler's rules.
pub(super) fn tolerates(tolerations: Option<&[Toleration]>, taint: &Taint) -> bool {
    tolerations.unwrap_or_default().iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or_default();
        let operator = t.operator.as_deref().unwrap_or("Equal");
        match operator {
            "Exists" => effect_ok && (key.is_empty() || key == taint.key),
            _ => {
                effect_ok
                    && key == taint.key
                    && t.value.as_deref().unwrap_or_default()
                        == taint.value.as_deref().unwrap_or_default()
            }
        }
    })
}
