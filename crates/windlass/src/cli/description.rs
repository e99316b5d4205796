//! What `describe` tells about a CR, put together from a reconcile through a
//! [`Plan`](super::plan::Plan): the model `-o json` prints, and its text form.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::plan::Planned;
use crate::cluster::{Cluster, ListQuery};
use crate::object::{ObjectRef, TypeRef};
use crate::progress::{Event, Observer};
use crate::reconcile::Report;
use crate::rollout::drift::Drift;
use crate::status::inventory::Inventory;

/// Records every progress event of the planned reconcile.
#[derive(Clone, Default)]
pub(super) struct Recorder(Arc<Mutex<Vec<Event>>>);

impl Observer for Recorder {
    fn event(&self, event: &Event) {
        self.0.lock().push(event.clone());
    }
}

impl Recorder {
    pub(super) fn events(&self) -> Vec<Event> {
        self.0.lock().clone()
    }
}

/// What `describe` found, as `-o json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Description {
    /// The CR, `apiVersion/kind/namespace/name`.
    pub cr: String,
    /// Its status conditions as stored.
    pub conditions: Vec<Value>,
    /// Each component of its graph, in rollout order.
    pub components: Vec<ComponentView>,
    /// What a reconcile now would end with.
    pub outcome: String,
    /// The error a reconcile now would end with, if any.
    pub error: Option<String>,
    /// The CR's latest Events, oldest first.
    pub events: Vec<EventView>,
    /// The operator process's view of the CR (`describe --operator`): its place in the
    /// queue, its failures in a row, its last reconcile; or why it could not be read.
    pub operator: Option<Value>,
    /// The component graph as a Mermaid flowchart.
    #[serde(skip)]
    pub mermaid: String,
}

/// One component.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ComponentView {
    pub name: String,
    /// `verified`, `deployed` (not verified yet), `to deploy` (objects a reconcile would
    /// create), `waiting`, `failed`, `disabled` or `not reached` (an upstream stopped
    /// short).
    pub state: String,
    /// Why it waits or how it failed.
    pub reason: Option<String>,
    pub objects: Vec<ObjectView>,
}

/// One object a component renders (or rendered, for a disabled one).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ObjectView {
    /// `apiVersion/kind/namespace/name`.
    pub object: String,
    pub present: bool,
    /// By the readiness rules verify uses; `None` where there is no object.
    pub ready: Option<bool>,
    /// `in sync`, `drifted: <field> taken by another writer`, `changed` (the operator
    /// wants something else now), `would be created`, `would be deleted`; none for a
    /// missing object nothing would create (a disabled component's, say).
    pub sync: Option<String>,
}

/// One Kubernetes Event of the CR.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct EventView {
    pub time: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub note: String,
}

/// How many Events `describe` shows.
const EVENTS: usize = 10;

/// Put together what the planned reconcile of `cr` reported.
pub(super) async fn build(
    cluster: &dyn Cluster,
    cr: &ObjectRef,
    names: Vec<(String, bool)>,
    mermaid: String,
    report: &Report,
    events: Vec<Event>,
    planned: Vec<Planned>,
) -> Description {
    let live = cluster.get(cr).await.ok().flatten().unwrap_or(Value::Null);
    let inventory = Inventory::from_status(&live["status"]);
    let progress = Progress::of(events);
    let waiting = waiting_components(report);
    let mut components = Vec::new();
    for (name, disabled) in names {
        let (state, reason) = progress.state(&name, disabled, &waiting);
        let mut objects = Vec::new();
        for reference in progress.objects(&name, &inventory) {
            objects.push(object_view(cluster, &reference, &planned).await);
        }
        components.push(ComponentView {
            name,
            state: shown_state(state, &objects).to_string(),
            reason,
            objects,
        });
    }
    let conditions = live["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Description {
        cr: cr.to_string(),
        conditions,
        components,
        outcome: format!("{:?}", report.outcome),
        error: report.error.as_ref().map(ToString::to_string),
        events: cr_events(cluster, cr, live["metadata"]["uid"].as_str()).await,
        operator: None,
        mermaid,
    }
}

/// What the progress events of the planned reconcile told of each component, by name.
#[derive(Default)]
struct Progress {
    /// The objects each component rendered.
    rendered: BTreeMap<String, Vec<ObjectRef>>,
    /// The components that stopped the rollout: whether as a failure, and why.
    halted: BTreeMap<String, (bool, Option<String>)>,
    /// The components verified, and whether they passed.
    verified: BTreeMap<String, bool>,
    /// The components deployed or disabled.
    deployed: BTreeSet<String>,
}

impl Progress {
    /// Sort `events` by what they tell; the others are of no use to `describe`.
    fn of(events: Vec<Event>) -> Self {
        let mut progress = Progress::default();
        for event in events {
            match event {
                Event::Rendered {
                    component, objects, ..
                } => {
                    progress.rendered.insert(component, objects);
                }
                Event::Deployed { component, .. } | Event::Disabled { component, .. } => {
                    progress.deployed.insert(component);
                }
                Event::Verified { component, ok } => {
                    progress.verified.insert(component, ok);
                }
                Event::Halted {
                    component,
                    failure,
                    message,
                    ..
                } => {
                    progress.halted.insert(component, (failure, message));
                }
                _ => {}
            }
        }
        progress
    }

    /// The state of component `name` (see [`ComponentView::state`]), and why it waits or
    /// how it failed: the furthest the reconcile took it.
    fn state(
        &self,
        name: &str,
        disabled: bool,
        waiting: &BTreeMap<&str, &str>,
    ) -> (&'static str, Option<String>) {
        if disabled {
            ("disabled", None)
        } else if let Some((failure, message)) = self.halted.get(name) {
            let state = if *failure { "failed" } else { "waiting" };
            (state, message.clone())
        } else if let Some(reason) = waiting.get(name) {
            ("waiting", Some(reason.to_string()))
        } else if self.verified.get(name) == Some(&true) {
            ("verified", None)
        } else if self.deployed.contains(name) {
            ("deployed", None)
        } else {
            ("not reached", None)
        }
    }

    /// The objects of component `name`.
    fn objects(&self, name: &str, inventory: &Inventory) -> Vec<ObjectRef> {
        // What it renders now; else what it applied last time.
        self.rendered.get(name).cloned().unwrap_or_else(|| {
            inventory
                .of(name)
                .into_iter()
                .map(|(reference, _)| reference)
                .collect()
        })
    }
}

/// The components the rollout left waiting, with why, as the report's state tells.
fn waiting_components(report: &Report) -> BTreeMap<&str, &str> {
    report
        .state
        .as_ref()
        .map(|s| {
            s.waiting()
                .iter()
                .map(|(c, r)| (c.as_str(), r.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// The state to show for a component in `state` whose objects are `objects`.
fn shown_state<'a>(state: &'a str, objects: &[ObjectView]) -> &'a str {
    // Verified against what the reconcile would create is not verified yet.
    let creates = objects.iter().any(|o| !o.present && o.sync.is_some());
    match state {
        "verified" | "deployed" if creates => "to deploy",
        state => state,
    }
}

async fn object_view(
    cluster: &dyn Cluster,
    reference: &ObjectRef,
    planned: &[Planned],
) -> ObjectView {
    let live = cluster.get(reference).await.ok().flatten();
    let write = planned.iter().rev().find_map(|p| match p {
        Planned::Apply(r, why) if r == reference => Some(match why {
            Drift::Absent => "would be created".to_string(),
            Drift::Terminating => "being deleted; would be created again".to_string(),
            Drift::Changed => "changed: the operator would apply a new version".to_string(),
            Drift::Taken(field) => format!("drifted: {field} taken by another writer"),
            Drift::InSync => "in sync".to_string(),
        }),
        Planned::Delete(r) if r == reference => Some("would be deleted".to_string()),
        _ => None,
    });
    ObjectView {
        object: reference.to_string(),
        present: live.is_some(),
        ready: live.as_ref().map(crate::verify::verify_object),
        sync: write.or_else(|| live.is_some().then(|| "in sync".to_string())),
    }
}

/// The latest Events about the CR, oldest first; none where they cannot be read.
async fn cr_events(cluster: &dyn Cluster, cr: &ObjectRef, uid: Option<&str>) -> Vec<EventView> {
    let Some(uid) = uid else {
        return Vec::new();
    };
    let query = ListQuery::new(
        TypeRef::new("events.k8s.io/v1", "Event"),
        cr.namespace.as_deref().or(Some("default")),
    )
    .fields(format!("regarding.uid={uid}"));
    let Ok(events) = cluster.list(&query).await else {
        return Vec::new();
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut views: Vec<EventView> = events
        .iter()
        .filter(|e| e["regarding"]["uid"] == uid)
        .map(|e| EventView {
            time: [
                &e["eventTime"],
                &e["series"]["lastObservedTime"],
                &e["metadata"]["creationTimestamp"],
            ]
            .into_iter()
            .find_map(|t| t.as_str())
            .unwrap_or_default()
            .to_string(),
            type_: text(&e["type"]),
            reason: text(&e["reason"]),
            note: text(&e["note"]),
        })
        .collect();
    views.sort_by(|a, b| a.time.cmp(&b.time));
    let skip = views.len().saturating_sub(EVENTS);
    views.split_off(skip)
}

impl Description {
    /// The text `describe` prints: the CR's conditions, a tree of components and objects,
    /// the Events. `colour` marks states on a terminal.
    pub(super) fn to_text(&self, colour: bool) -> String {
        let mut out = vec![self.cr.clone()];
        out.extend(self.conditions.iter().map(condition_line));
        out.push("components (as a reconcile now would find them; nothing was written):".into());
        for component in &self.components {
            out.extend(component_lines(component, colour));
        }
        match &self.error {
            Some(error) => out.push(format!("outcome: {} ({error})", self.outcome)),
            None => out.push(format!("outcome: {}", self.outcome)),
        }
        if let Some(operator) = &self.operator {
            out.push("operator:".into());
            out.extend(operator_lines(operator));
        }
        if !self.events.is_empty() {
            out.push("events:".into());
            for event in &self.events {
                out.push(format!(
                    "  {} {} {}: {}",
                    event.time, event.type_, event.reason, event.note
                ));
            }
        }
        out.join("\n")
    }
}

/// One status condition in a line: type, status, reason and the first line of its message.
fn condition_line(c: &Value) -> String {
    format!(
        "  {:<9} {:<5} {}: {}",
        c["type"].as_str().unwrap_or_default(),
        c["status"].as_str().unwrap_or_default(),
        c["reason"].as_str().unwrap_or_default(),
        c["message"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or_default()
    )
}

/// A component's line, its state marked (and coloured with `colour`), then a line per object.
fn component_lines(component: &ComponentView, colour: bool) -> Vec<String> {
    let paint = |code: &str, text: &str| {
        if colour {
            format!("\u{1b}[{code}m{text}\u{1b}[0m")
        } else {
            text.to_string()
        }
    };
    let (mark, code) = match component.state.as_str() {
        "verified" => ("✓", "32"),
        "failed" => ("✗", "31"),
        "waiting" | "deployed" | "to deploy" => ("…", "33"),
        "disabled" => ("-", "2"),
        _ => ("·", "2"),
    };
    let reason = component
        .reason
        .as_deref()
        .map(|r| format!(": {}", r.lines().next().unwrap_or_default()))
        .unwrap_or_default();
    let mut out = vec![format!(
        "  {} {} {}{}",
        paint(code, mark),
        component.name,
        paint(code, &component.state),
        reason
    )];
    for object in &component.objects {
        let state = match (object.present, object.ready) {
            (false, _) => "missing",
            (true, Some(false)) => "not ready",
            (true, _) => "ready",
        };
        match &object.sync {
            Some(sync) => out.push(format!("      {}  {state}, {sync}", object.object)),
            None => out.push(format!("      {}  {state}", object.object)),
        }
    }
    out
}

/// The operator's view of the CR as lines: where it is in the queue, its last reconcile.
fn operator_lines(view: &Value) -> Vec<String> {
    if let Some(error) = view["error"].as_str() {
        return vec![format!("  cannot be read: {error}")];
    }
    let queue = &view["queue"];
    let failures = queue["failures"].as_u64().unwrap_or(0);
    let after = if failures > 0 {
        format!(", after {failures} failed reconcile(s) in a row")
    } else {
        String::new()
    };
    let place = match queue["state"].as_str() {
        None => "not queued".to_string(),
        Some("ready") => format!("queued, due now{after}"),
        Some("running") if queue["rerun"] == true => {
            format!("being reconciled, and again after that{after}")
        }
        Some("running") => format!("being reconciled{after}"),
        Some("delayed") => format!(
            "queued, due in {:.1} s{after}",
            queue["inSeconds"].as_f64().unwrap_or_default()
        ),
        Some(other) => other.to_string(),
    };
    let mut lines = vec![format!("  queue: {place}")];
    let last = &view["lastReconcile"];
    if last.is_object() {
        let error = last["error"]
            .as_str()
            .map(|e| format!(" ({})", e.lines().next().unwrap_or_default()))
            .unwrap_or_default();
        lines.push(format!(
            "  last reconcile: {} {}{error}",
            last["finishedAt"].as_str().unwrap_or_default(),
            last["outcome"].as_str().unwrap_or_default(),
        ));
    } else {
        lines.push("  last reconcile: none since the operator started".to_string());
    }
    lines
}
