//! The status vocabulary and its bookkeeping, in one place.
//!
//! A managed CR's status carries two conditions, `Ready` and `Updating`, each with a reason
//! from a fixed vocabulary; a `componentStatus` summary of the last rollout; `versions`
//! (the last fully verified version and the ones this operator supports); and a
//! `<kind>Status` field (`webAppStatus: Completed | InProgress | Failed`) for humans and
//! dashboards.
//!
//! Updates only touch what they say: other conditions, other keys and user-set
//! `<kind>Status` strings are kept, a condition not mentioned keeps its reason and
//! message, and a write is skipped when nothing but timestamps would change.
//!
//! Conditions follow Kubernetes' `metav1.Condition`: the time field is
//! `lastTransitionTime`, and it changes only when the condition's status flips, not
//! whenever its reason or message changes. Each written condition records the
//! `observedGeneration` it describes.

pub(crate) mod inventory;
pub use inventory::Inventory;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::dag::CompletionState;
use crate::error::{ClusterError, Error};
use crate::resource::ControllerTypes;

/// windlass's part of a CR's status, typed: `#[kube(status = "windlass::status::Status")]`,
/// or embedded in the operator's own status struct with `#[serde(flatten)]`:
///
/// ```
/// # use serde_json::json;
/// #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, schemars::JsonSchema)]
/// struct WebAppStatus {
///     #[serde(flatten)]
///     windlass: windlass::status::Status,
///     /// Where the application answers.
///     url: Option<String>,
/// }
///
/// let status: WebAppStatus = serde_json::from_value(json!({
///     "url": "http://shop",
///     "conditions": [{"type": "Ready", "status": "True", "reason": "Stable", "message": "",
///                     "lastTransitionTime": "2026-01-01T00:00:00Z"}],
///     "versions": {"reconciled": "1.0"}})).unwrap();
/// assert!(status.windlass.is_ready());
/// assert_eq!(status.windlass.reconciled_version(), Some("1.0"));
/// ```
///
/// windlass computes its part from the stored JSON, so a field this type does not know
/// (an older windlass's, `<kind>Status`) is kept in `other`. Conditions are Kubernetes'
/// `metav1.Condition`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `Ready` and `Updating` (see [`ReadyReason`], [`UpdatingReason`]), then anyone
    /// else's conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation of the spec the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A summary of the last rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_status: Option<ComponentStatus>,
    /// The versions rolled out and supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Versions>,
    /// Every other key (`<kind>Status`, `operatorVersion`, the author's), except the
    /// inventory: windlass's record of what it applied, which it reads from the stored
    /// status itself and keeps there. A typed status written back whole would drop it;
    /// change the status with [`Session::update_status`](crate::session::Session::update_status).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A Kubernetes `metav1.Condition`.
pub type Condition = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// `status.componentStatus`: which components of the last rollout got how far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// Every component of the graph.
    #[serde(default)]
    pub all_components: Vec<String>,
    /// Those that were deployed.
    #[serde(default)]
    pub deployed_components: Vec<String>,
    /// Those that verified.
    #[serde(default)]
    pub verified_components: Vec<String>,
    /// Those deployed but not verified yet.
    #[serde(default)]
    pub unverified_components: Vec<String>,
    /// Those that failed.
    #[serde(default)]
    pub failed_components: Vec<String>,
    /// `deployed/all`.
    #[serde(default)]
    pub deployed: String,
    /// `verified/all`.
    #[serde(default)]
    pub verified: String,
}

/// `status.versions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Versions {
    /// The last version fully rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<String>,
    /// The versions this operator supports: `{versions: [{name}]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<Value>,
}

impl Status {
    /// Whether the `Ready` condition is true.
    pub fn is_ready(&self) -> bool {
        self.condition(READY).is_some_and(|c| c.status == "True")
    }
    /// The condition of a type, if present.
    pub fn condition(&self, condition_type: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == condition_type)
    }
    /// `versions.reconciled`.
    pub fn reconciled_version(&self) -> Option<&str> {
        self.versions.as_ref()?.reconciled.as_deref()
    }
}

/// By hand, as `#[derive(Deserialize)]` would with `other` flattened, except that the
/// keys windlass does not know go straight into `other` instead of through serde's buffer
/// for flattened fields first, and that the inventory is skipped, not copied: it lists
/// every object of the CR, and a reconcile parses the typed CR, status included, on every
/// pass. Otherwise the same answers and errors (paths included, see `parses_as_derived`).
impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(StatusVisitor)
    }
}

/// [`Status`]'s fields other than `other`, as the status names them.
const STATUS_FIELDS: [&str; 4] = [
    "conditions",
    "observedGeneration",
    "componentStatus",
    "versions",
];

struct StatusVisitor;

impl<'de> serde::de::Visitor<'de> for StatusVisitor {
    type Value = Status;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("struct Status")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Status, A::Error> {
        let mut status = Status::default();
        let mut seen = [false; STATUS_FIELDS.len()];
        while let Some(key) = map.next_key::<String>()? {
            if key == inventory::FIELD {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            let Some(field) = STATUS_FIELDS.iter().position(|f| *f == key) else {
                status.other.insert(key, map.next_value()?);
                continue;
            };
            if std::mem::replace(&mut seen[field], true) {
                return Err(serde::de::Error::duplicate_field(STATUS_FIELDS[field]));
            }
            match field {
                0 => status.conditions = map.next_value()?,
                1 => status.observed_generation = map.next_value()?,
                2 => status.component_status = map.next_value()?,
                _ => status.versions = map.next_value()?,
            }
        }
        Ok(status)
    }
}

impl schemars::JsonSchema for Status {
    fn schema_name() -> Cow<'static, str> {
        "WindlassStatus".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // Written out rather than derived: the flattened `other` map would derive to
        // `additionalProperties`, which a structural CRD schema cannot combine with
        // `properties`; windlass's other fields are kept with preserve-unknown-fields. The
        // summaries windlass alone writes are open objects, so that their shape can grow
        // without every operator's CRD changing with it.
        let condition = generator.subschema_for::<Condition>();
        let open = |description: &str| {
            schemars::json_schema!({
                "type": "object",
                "description": description,
                "x-kubernetes-preserve-unknown-fields": true
            })
        };
        let components = open("Which components of the last rollout got how far.");
        let versions = open("The version last rolled out (`reconciled`) and the ones supported.");
        schemars::json_schema!({
            "type": "object",
            "description": "Written by windlass: Ready and Updating conditions, componentStatus, versions.",
            "properties": {
                "conditions": {"type": "array", "items": condition},
                "observedGeneration": {"type": "integer", "format": "int64"},
                "componentStatus": components,
                "versions": versions,
            },
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// The [`Controller::Status`](crate::controller::Controller::Status) of a primary whose
/// status is not windlass's to write: a built-in kind (`Namespace`) or another operator's
/// CRD. windlass then writes no status at all; the outcome of each rollout goes to Events
/// on the primary, and the default requeue policy follows the rollout itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unmanaged {}

/// Whether windlass writes the status of the controller's primary: its status type is
/// not [`Unmanaged`], and the operator config's `manage_status` is on.
pub(crate) fn is_managed<C: ControllerTypes>(operator: &crate::config::OperatorConfig) -> bool {
    operator.status.manage
        && std::any::TypeId::of::<C::Status>() != std::any::TypeId::of::<Unmanaged>()
}

/// The `Ready` condition type.
pub(crate) const READY: &str = "Ready";
/// The `Updating` condition type.
pub(crate) const UPDATING: &str = "Updating";

macro_rules! reasons {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),* }

        impl $name {
            /// The reason as written in the condition.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),* }
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                match s {
                    $(stringify!($variant) => Ok($name::$variant),)*
                    other => Err(Error::config(format!(
                        "`{other}` is not a {} reason", stringify!($name)
                    ))),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

reasons! {
    /// Reasons of the `Ready` condition. It is `True` only for `Stable`.
    ReadyReason {
        /// Everything verified.
        Stable,
        /// No version has been fully rolled out yet.
        Initializing,
        /// A rollout is under way.
        InProgress,
        /// The CR or its config is invalid.
        ConfigError,
        /// The rollout failed.
        Errored,
    }
}

reasons! {
    /// Reasons of the `Updating` condition. It is `False` for `Stable`,
    /// `ClusterError` and `Errored`: the operator is not working towards a new state.
    UpdatingReason {
        /// Nothing to do.
        Stable,
        /// Waiting for something outside this CR.
        PreconditionWait,
        /// Waiting for components to become ready.
        VerifyWait,
        /// The cluster could not be reached or refused a request.
        ClusterError,
        /// The rollout failed.
        Errored,
        /// Moving from one version to another.
        VersionChange,
    }
}

impl ReadyReason {
    /// The condition status this reason implies.
    pub fn is_true(self) -> bool {
        self == ReadyReason::Stable
    }
}

impl UpdatingReason {
    /// The condition status this reason implies.
    pub fn is_true(self) -> bool {
        !matches!(
            self,
            UpdatingReason::Stable | UpdatingReason::ClusterError | UpdatingReason::Errored
        )
    }
}

/// The reasons an error selects: the `Ready` reason is `None` where the error leaves
/// `Ready` as it was.
pub(crate) fn reasons_for_error(error: &Error) -> (Option<ReadyReason>, UpdatingReason) {
    match error {
        Error::Precondition(_) => (None, UpdatingReason::PreconditionWait),
        Error::Verification(_) => (None, UpdatingReason::VerifyWait),
        // An object the server refused as invalid (422) is the operator's or the CR's
        // input at fault, like a config error: nothing changes until that input does.
        Error::Config(_) | Error::Cluster(ClusterError::Invalid { .. }) => {
            (Some(ReadyReason::ConfigError), UpdatingReason::Errored)
        }
        Error::Cluster(_) => (None, UpdatingReason::ClusterError),
        Error::Rollout(_) | Error::Panic { .. } | Error::Other { .. } => {
            (Some(ReadyReason::Errored), UpdatingReason::Errored)
        }
    }
}

/// One change to a CR's status. Fields left `None` are left as they are.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatusUpdate {
    /// New `Ready` reason and message.
    pub ready: Option<(ReadyReason, String)>,
    /// New `Updating` reason and message.
    pub updating: Option<(UpdatingReason, String)>,
    /// The rollout's outcome, summarised into `componentStatus`.
    pub components: Option<CompletionState>,
    /// A version that is now fully rolled out (`versions.reconciled`).
    pub reconciled_version: Option<String>,
    /// The versions this operator supports (`versions.available.versions`).
    pub supported_versions: Option<Vec<String>>,
    /// The CR generation the written conditions describe.
    pub observed_generation: Option<i64>,
    /// `operatorVersion`, when configured.
    pub operator_version: Option<String>,
    /// What windlass applied for the CR (`inventory`, see `status::inventory`); shared, as
    /// a status write may be computed more than once.
    pub inventory: Option<std::sync::Arc<Inventory>>,
}

/// A status being updated: the stored status, and the top-level keys changed so far.
///
/// Every update replaces or removes whole top-level keys, so the status a reconcile would
/// write is the stored one with a few keys changed. Kept that way, a reconcile that
/// changes nothing compares those keys and copies nothing else (the stored status lists
/// every component and object of the CR); the whole status is made only to be written
/// ([`NextStatus::into_value`]).
#[derive(Debug)]
pub(crate) struct NextStatus<'s> {
    stored: &'s Value,
    /// The changed keys; `None` for a removed one.
    changed: BTreeMap<String, Option<Value>>,
}

impl<'s> NextStatus<'s> {
    /// `stored`, unchanged so far.
    pub(crate) fn over(stored: &'s Value) -> Self {
        NextStatus {
            stored,
            changed: BTreeMap::new(),
        }
    }

    /// The value of a top-level key, as changed so far.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        match self.changed.get(key) {
            Some(changed) => changed.as_ref(),
            None => self.stored.get(key),
        }
    }

    /// Set a top-level key; setting the value it has already changes nothing (and is not
    /// recorded: a steady reconcile sets most keys to what they are).
    pub(crate) fn set(&mut self, key: &str, value: Value) {
        if self.get(key) == Some(&value) {
            return;
        }
        self.changed.insert(key.to_string(), Some(value));
    }

    pub(crate) fn remove(&mut self, key: &str) {
        self.changed.insert(key.to_string(), None);
    }

    /// The reason of the condition `condition_type`, as changed so far.
    pub(crate) fn condition_reason<R: FromStr>(&self, condition_type: &str) -> Option<R> {
        reason_in(self.get("conditions"), condition_type)
    }

    /// Whether writing it would change anything but condition timestamps: what
    /// [`status_changed`] says of the stored status and [`NextStatus::into_value`].
    pub(crate) fn changes_anything(&self) -> bool {
        !self.stored.is_object()
            || self
                .changed
                .iter()
                .any(|(key, next)| match (self.stored.get(key), next) {
                    (Some(before), Some(after)) if key == "conditions" => {
                        !conditions_equal(before, after)
                    }
                    (before, after) => before != after.as_ref(),
                })
    }

    /// The status to write: the stored one (a map; anything else is replaced) with the
    /// changes.
    pub(crate) fn into_value(self) -> Value {
        let mut status = match self.stored {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        for (key, value) in self.changed {
            match value {
                Some(value) => status.insert(key, value),
                None => status.remove(&key),
            };
        }
        Value::Object(status)
    }
}

/// Apply `update` to `status`. `now` stamps conditions whose status flips.
pub(crate) fn apply_update(
    status: &mut NextStatus<'_>,
    kind: &str,
    update: &StatusUpdate,
    now: &str,
) {
    set_conditions(status, update, now);
    // Made only when it differs from the stored one (not in a steady reconcile).
    if let Some(state) = &update.components
        && !status
            .get("componentStatus")
            .is_some_and(|stored| component_status_is(state, stored))
    {
        status.set("componentStatus", component_status(state));
    }
    if let Some(generation) = update.observed_generation {
        status.set("observedGeneration", json!(generation));
    }
    set_versions(status, update);
    if let Some(v) = &update.operator_version {
        status.set("operatorVersion", json!(v));
    }
    match &update.inventory {
        Some(inventory) if inventory.is_empty() => {
            status.remove(crate::status::inventory::FIELD);
        }
        // The same inventory as stored (a steady reconcile): nothing to make.
        Some(inventory)
            if status
                .get(crate::status::inventory::FIELD)
                .is_some_and(|stored| inventory.is_value(stored)) => {}
        Some(inventory) => {
            status.set(crate::status::inventory::FIELD, inventory.to_value());
        }
        None => {}
    }
    set_service_status(status, kind);
}

/// `status.conditions` after [`updated_conditions`]; a status without a list of conditions
/// gets one if the update sets any.
fn set_conditions(status: &mut NextStatus<'_>, update: &StatusUpdate, now: &str) {
    if let Some(Value::Array(list)) = status.get("conditions") {
        // As they are (a steady reconcile): nothing to copy or make.
        if conditions_unchanged(list, update) {
            return;
        }
        let conditions = updated_conditions(list.clone(), update, now);
        status.set("conditions", Value::Array(conditions));
        return;
    }
    let conditions = updated_conditions(Vec::new(), update, now);
    if !conditions.is_empty() {
        status.set("conditions", Value::Array(conditions));
    }
}

/// Whether [`updated_conditions`] leaves `conditions` as they are, whatever the time: every
/// condition the update sets is there already exactly as it would be set (its status
/// unchanged, so its `lastTransitionTime` stays), and the list is in order.
fn conditions_unchanged(conditions: &[Value], update: &StatusUpdate) -> bool {
    let is_set = |type_: &str, is_true: bool, reason: &str, message: &str| {
        // The one `updated_conditions` would replace: the first of the type.
        let Some(condition) = conditions.iter().find(|c| c["type"] == type_) else {
            return false;
        };
        let keys = 5 + usize::from(update.observed_generation.is_some());
        condition.as_object().is_some_and(|map| map.len() == keys)
            && condition["status"] == if is_true { "True" } else { "False" }
            && condition["reason"] == reason
            && condition["message"] == message
            && condition["lastTransitionTime"].is_string()
            && update
                .observed_generation
                .is_none_or(|generation| condition["observedGeneration"] == json!(generation))
    };
    update
        .ready
        .as_ref()
        .is_none_or(|(reason, message)| is_set(READY, reason.is_true(), reason.as_str(), message))
        && update.updating.as_ref().is_none_or(|(reason, message)| {
            is_set(UPDATING, reason.is_true(), reason.as_str(), message)
        })
        && conditions.is_sorted_by_key(condition_rank)
}

/// Where a condition goes in the list: `Ready`, `Updating`, then the others.
fn condition_rank(condition: &Value) -> u8 {
    match condition["type"].as_str() {
        Some(READY) => 0,
        Some(UPDATING) => 1,
        _ => 2,
    }
}

/// `conditions` with `Ready` and `Updating` set as `update` says, first, then everyone
/// else's in their order. A condition keeps its `lastTransitionTime` while its status
/// stays; one whose status flips (or is new) is stamped `now`.
fn updated_conditions(mut conditions: Vec<Value>, update: &StatusUpdate, now: &str) -> Vec<Value> {
    let mut set_condition = |type_: &str, is_true: bool, reason: &str, message: &str| {
        let flag = if is_true { "True" } else { "False" };
        let existing = conditions.iter().position(|c| c["type"] == type_);
        let since = existing
            .map(|i| &conditions[i])
            .filter(|c| c["status"] == flag)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now)
            .to_string();
        let mut condition = json!({
            "type": type_, "status": flag, "reason": reason, "message": message,
            "lastTransitionTime": since,
        });
        if let Some(generation) = update.observed_generation {
            condition["observedGeneration"] = json!(generation);
        }
        match existing {
            Some(i) => conditions[i] = condition,
            None => conditions.push(condition),
        }
    };
    if let Some((reason, message)) = &update.ready {
        set_condition(READY, reason.is_true(), reason.as_str(), message);
    }
    if let Some((reason, message)) = &update.updating {
        set_condition(UPDATING, reason.is_true(), reason.as_str(), message);
    }
    // Ready and Updating first, then everyone else's conditions in their order.
    conditions.sort_by_key(condition_rank);
    conditions
}

/// `versions.reconciled` and `versions.available` as `update` says; `versions` itself is
/// left out when it holds nothing (and replaced when it is not a map).
fn set_versions(status: &mut NextStatus<'_>, update: &StatusUpdate) {
    // As they are (a steady reconcile): nothing to copy or make.
    if let Some(Value::Object(versions)) = status.get("versions")
        && !versions.is_empty()
        && update.reconciled_version.as_ref().is_none_or(|version| {
            versions.get("reconciled").and_then(Value::as_str) == Some(version)
        })
        && update
            .supported_versions
            .as_ref()
            .is_none_or(|names| available_is(versions.get("available"), names))
    {
        return;
    }
    let mut versions = match status.get("versions") {
        Some(Value::Object(versions)) => versions.clone(),
        _ => Map::new(),
    };
    if let Some(version) = &update.reconciled_version {
        versions.insert("reconciled".into(), json!(version));
    }
    if let Some(supported) = &update.supported_versions {
        let names: Vec<Value> = supported.iter().map(|v| json!({"name": v})).collect();
        versions.insert("available".into(), json!({"versions": names}));
    }
    match versions.is_empty() {
        true => status.remove("versions"),
        false => status.set("versions", Value::Object(versions)),
    }
}

/// Whether `available` is `versions.available` of the supported versions `names`:
/// `{versions: [{name}]}`.
fn available_is(available: Option<&Value>, names: &[String]) -> bool {
    let Some(available) = available.and_then(Value::as_object) else {
        return false;
    };
    let Some(listed) = available.get("versions").and_then(Value::as_array) else {
        return false;
    };
    available.len() == 1
        && listed.len() == names.len()
        && listed.iter().zip(names).all(|(entry, name)| {
            entry.as_object().is_some_and(|e| e.len() == 1)
                && entry.get("name").and_then(Value::as_str) == Some(name)
        })
}

/// The service status field (`<kind>Status`, see [`service_status_field`]): `Completed`,
/// `Failed` or `InProgress` from the conditions, unless it holds a value windlass did not
/// write.
fn set_service_status(status: &mut NextStatus<'_>, kind: &str) {
    let field = service_status_field(kind);
    let ours = ["Completed", "Failed", "InProgress"];
    let overwritable = match status.get(&field) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty() || ours.contains(&s.as_str()),
        Some(_) => false,
    };
    if overwritable {
        let value = service_status(status.get("conditions"));
        status.set(&field, json!(value));
    }
}

/// `componentStatus` of a completion state; both `verifiedComponents` and
/// `unverifiedComponents` are written.
pub(crate) fn component_status(state: &CompletionState) -> Value {
    let sorted = |s: &std::collections::BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>();
    let all = state.all_nodes();
    let deployed: std::collections::BTreeSet<String> = state
        .verified()
        .union(state.unverified())
        .cloned()
        .collect();
    json!({
        "allComponents": sorted(&all),
        "deployedComponents": sorted(&deployed),
        "verifiedComponents": sorted(state.verified()),
        "unverifiedComponents": sorted(state.unverified()),
        "failedComponents": sorted(state.failed_nodes()),
        "deployed": format!("{}/{}", deployed.len(), all.len()),
        "verified": format!("{}/{}", state.verified().len(), all.len()),
    })
}

/// Whether `stored` is [`component_status`] of `state`, compared without making it.
fn component_status_is(state: &CompletionState, stored: &Value) -> bool {
    use std::collections::BTreeSet;
    let all: BTreeSet<&String> = state
        .verified()
        .iter()
        .chain(state.unverified())
        .chain(state.failed_nodes())
        .chain(state.unstarted())
        .collect();
    let deployed = state.verified().union(state.unverified()).count();
    let names = |key: &str, expected: &mut dyn Iterator<Item = &String>| {
        stored[key].as_array().is_some_and(|names| {
            names
                .iter()
                .map(Value::as_str)
                .eq(expected.map(|n| Some(n.as_str())))
        })
    };
    let text = |key: &str, text: String| stored[key].as_str() == Some(text.as_str());
    stored.as_object().is_some_and(|map| map.len() == 7)
        && names("allComponents", &mut all.iter().copied())
        && names(
            "deployedComponents",
            &mut state.verified().union(state.unverified()),
        )
        && names("verifiedComponents", &mut state.verified().iter())
        && names("unverifiedComponents", &mut state.unverified().iter())
        && names("failedComponents", &mut state.failed_nodes().iter())
        && text("deployed", format!("{deployed}/{}", all.len()))
        && text(
            "verified",
            format!("{}/{}", state.verified().len(), all.len()),
        )
}

/// The name of the service status field: the kind with a lower-case first letter, plus
/// `Status` (`WebApp` → `webAppStatus`).
pub(crate) fn service_status_field(kind: &str) -> String {
    let mut chars = kind.chars();
    match chars.next() {
        Some(first) => format!("{}{}Status", first.to_lowercase(), chars.as_str()),
        None => "status".to_string(),
    }
}

/// `Completed`, `Failed` or `InProgress` from the Ready and Updating reasons.
fn service_status(conditions: Option<&Value>) -> &'static str {
    let ready = reason_in::<ReadyReason>(conditions, READY);
    let updating = reason_in::<UpdatingReason>(conditions, UPDATING);
    match (ready, updating) {
        (Some(ReadyReason::Stable), Some(UpdatingReason::Stable)) => "Completed",
        (Some(ReadyReason::Errored | ReadyReason::ConfigError), _)
        | (_, Some(UpdatingReason::Errored | UpdatingReason::ClusterError)) => "Failed",
        _ => "InProgress",
    }
}

/// The condition of a type in a status; an error if there is more than one.
pub(crate) fn condition<'a>(
    status: &'a Value,
    condition_type: &str,
) -> Result<Option<&'a Value>, Error> {
    find_condition(status.get("conditions"), condition_type)
}

fn find_condition<'a>(
    conditions: Option<&'a Value>,
    condition_type: &str,
) -> Result<Option<&'a Value>, Error> {
    let mut matching = conditions
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == condition_type);
    let first = matching.next();
    if matching.next().is_some() {
        return Err(Error::config(format!(
            "status has more than one {condition_type} condition"
        )));
    }
    Ok(first)
}

/// The parsed reason of the condition `condition_type` in a list of conditions, if
/// present and known.
fn reason_in<R: FromStr>(conditions: Option<&Value>, condition_type: &str) -> Option<R> {
    find_condition(conditions, condition_type)
        .ok()
        .flatten()
        .and_then(|c| c["reason"].as_str())
        .and_then(|r| r.parse().ok())
}

/// `versions.reconciled`: the last version that was fully rolled out.
pub(crate) fn reconciled_version(status: &Value) -> Option<&str> {
    status["versions"]["reconciled"].as_str()
}

/// Whether two statuses differ in anything but condition timestamps: what
/// [`NextStatus::changes_anything`] answers without making the next status.
#[cfg(test)]
fn status_changed(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return true;
    };
    if a.len() != b.len() {
        return true;
    }
    a.iter().any(|(key, av)| match (key.as_str(), b.get(key)) {
        (_, None) => true,
        ("conditions", Some(bv)) => !conditions_equal(av, bv),
        (_, Some(bv)) => av != bv,
    })
}

fn conditions_equal(a: &Value, b: &Value) -> bool {
    const TIMES: [&str; 2] = ["lastTransitionTime", "lastTransactionTime"];
    let (Some(a), Some(b)) = (a.as_array(), b.as_array()) else {
        return a == b;
    };
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(ca, cb)| match (ca.as_object(), cb.as_object()) {
                (Some(ma), Some(mb)) => {
                    let keys = |m: &'_ Map<String, Value>| {
                        m.keys().filter(|k| !TIMES.contains(&k.as_str())).count()
                    };
                    keys(ma) == keys(mb)
                        && ma
                            .iter()
                            .filter(|(k, _)| !TIMES.contains(&k.as_str()))
                            .all(|(k, v)| mb.get(k) == Some(v))
                }
                _ => ca == cb,
            })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `current` after [`apply_update`], as a whole.
    fn updated_status(current: Value, kind: &str, update: &StatusUpdate, now: &str) -> Value {
        let mut next = NextStatus::over(&current);
        apply_update(&mut next, kind, update, now);
        next.into_value()
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:01:00Z";

    fn update(ready: ReadyReason, updating: UpdatingReason) -> StatusUpdate {
        StatusUpdate {
            ready: Some((ready, format!("{ready}"))),
            updating: Some((updating, format!("{updating}"))),
            ..Default::default()
        }
    }

    #[test]
    fn condition_statuses_follow_reasons() {
        let s = updated_status(
            Value::Null,
            "WebApp",
            &update(ReadyReason::Stable, UpdatingReason::VerifyWait),
            T0,
        );
        assert_eq!(s["conditions"][0]["status"], "True");
        assert_eq!(s["conditions"][1]["status"], "True");
        let s = updated_status(
            s.clone(),
            "WebApp",
            &update(ReadyReason::InProgress, UpdatingReason::Errored),
            T0,
        );
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][1]["status"], "False");
    }

    #[test]
    fn transition_time_changes_only_when_the_status_flips() {
        let s0 = updated_status(
            Value::Null,
            "WebApp",
            &update(ReadyReason::Initializing, UpdatingReason::VerifyWait),
            T0,
        );
        let s1 = updated_status(
            s0.clone(),
            "WebApp",
            &update(ReadyReason::InProgress, UpdatingReason::VerifyWait),
            T1,
        );
        assert_eq!(
            s1["conditions"][0]["lastTransitionTime"], T0,
            "False -> False keeps the time"
        );
        assert_eq!(s1["conditions"][0]["reason"], "InProgress");
        let s2 = updated_status(
            s1.clone(),
            "WebApp",
            &update(ReadyReason::Stable, UpdatingReason::VerifyWait),
            T1,
        );
        assert_eq!(
            s2["conditions"][0]["lastTransitionTime"], T1,
            "False -> True moves it"
        );
    }

    #[test]
    fn unmentioned_conditions_keys_and_user_fields_are_kept() {
        let current = json!({
            "conditions": [{"type": "Backup", "status": "True"}, {"type": "Updating", "status": "True", "reason": "VersionChange", "message": "1 -> 2"}],
            "custom": {"keep": true},
            "webAppStatus": "Paused by ops"
        });
        let s = updated_status(
            current.clone(),
            "WebApp",
            &StatusUpdate {
                ready: Some((ReadyReason::InProgress, "working".into())),
                ..Default::default()
            },
            T0,
        );
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Ready", "Updating", "Backup"]);
        assert_eq!(
            s["conditions"][1]["reason"], "VersionChange",
            "carried over"
        );
        assert_eq!(s["custom"], json!({"keep": true}));
        assert_eq!(s["webAppStatus"], "Paused by ops", "user-set strings stay");
    }

    #[test]
    fn service_status_summarises() {
        let field =
            |u: StatusUpdate| updated_status(Value::Null, "WebApp", &u, T0)["webAppStatus"].clone();
        assert_eq!(
            field(update(ReadyReason::Stable, UpdatingReason::Stable)),
            "Completed"
        );
        assert_eq!(
            field(update(ReadyReason::ConfigError, UpdatingReason::Errored)),
            "Failed"
        );
        assert_eq!(
            field(update(
                ReadyReason::InProgress,
                UpdatingReason::ClusterError
            )),
            "Failed"
        );
        assert_eq!(
            field(update(ReadyReason::InProgress, UpdatingReason::VerifyWait)),
            "InProgress"
        );
        assert_eq!(field(StatusUpdate::default()), "InProgress");
        assert_eq!(service_status_field("MyApp"), "myAppStatus");
    }

    #[test]
    fn versions_and_component_status() {
        let state = CompletionState::new(["a"], ["b"], ["c"], ["d"], None).unwrap();
        let s = updated_status(
            Value::Null,
            "X",
            &StatusUpdate {
                components: Some(state),
                reconciled_version: Some("1.0".into()),
                supported_versions: Some(vec![]),
                ..Default::default()
            },
            T0,
        );
        assert_eq!(
            s["versions"],
            json!({"reconciled": "1.0", "available": {"versions": []}})
        );
        assert_eq!(s["componentStatus"]["deployed"], "2/4");
        assert_eq!(s["componentStatus"]["verified"], "1/4");
        assert_eq!(
            s["componentStatus"]["deployedComponents"],
            json!(["a", "b"])
        );
        assert_eq!(s["componentStatus"]["failedComponents"], json!(["c"]));
        let state = CompletionState::new(["a"], ["b"], ["c"], ["d"], None).unwrap();
        assert!(component_status_is(&state, &component_status(&state)));
        let other = CompletionState::new(["a"], ["b"], ["d"], ["c"], None).unwrap();
        assert!(!component_status_is(&other, &component_status(&state)));
    }

    #[test]
    fn changes_ignore_timestamps() {
        let a = updated_status(
            Value::Null,
            "X",
            &update(ReadyReason::Stable, UpdatingReason::Stable),
            T0,
        );
        let mut b = a.clone();
        b["conditions"][0]["lastTransitionTime"] = json!(T1);
        assert!(!status_changed(&a, &b));
        b["conditions"][0]["message"] = json!("other");
        assert!(status_changed(&a, &b));
        assert!(status_changed(&Value::Null, &a));
    }

    /// [`apply_update`] as it was before it left conditions and versions that would not
    /// change alone: every key set, the conditions and versions rebuilt every time.
    fn apply_update_rebuilding(status: &mut NextStatus<'_>, update: &StatusUpdate, now: &str) {
        let set = |status: &mut NextStatus<'_>, key: &str, value: Value| {
            status.changed.insert(key.to_string(), Some(value));
        };
        let list = match status.get("conditions") {
            Some(Value::Array(list)) => Some(list.clone()),
            _ => None,
        };
        let conditions = updated_conditions(list.clone().unwrap_or_default(), update, now);
        if list.is_some() || !conditions.is_empty() {
            set(status, "conditions", Value::Array(conditions));
        }
        if let Some(state) = &update.components
            && !status
                .get("componentStatus")
                .is_some_and(|stored| component_status_is(state, stored))
        {
            set(status, "componentStatus", component_status(state));
        }
        if let Some(generation) = update.observed_generation {
            set(status, "observedGeneration", json!(generation));
        }
        let mut versions = match status.get("versions") {
            Some(Value::Object(versions)) => versions.clone(),
            _ => Map::new(),
        };
        if let Some(version) = &update.reconciled_version {
            versions.insert("reconciled".into(), json!(version));
        }
        if let Some(supported) = &update.supported_versions {
            let names: Vec<Value> = supported.iter().map(|v| json!({"name": v})).collect();
            versions.insert("available".into(), json!({"versions": names}));
        }
        match versions.is_empty() {
            true => status.remove("versions"),
            false => set(status, "versions", Value::Object(versions)),
        }
        let field = service_status_field("X");
        let overwritable = match status.get(&field) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => {
                s.is_empty() || ["Completed", "Failed", "InProgress"].contains(&s.as_str())
            }
            Some(_) => false,
        };
        if overwritable {
            let value = service_status(status.get("conditions"));
            set(status, &field, json!(value));
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn pick<T: Clone + fmt::Debug + 'static>(items: &[T]) -> impl Strategy<Value = T> + use<T> {
            prop::sample::select(items.to_vec())
        }

        /// A stored condition: windlass's types and another, as windlass writes them or
        /// not quite (a time that is no string, a key more or less).
        fn condition() -> impl Strategy<Value = Value> {
            (
                pick(&["Ready", "Updating", "Backup"]),
                pick(&["True", "False"]),
                pick(&["Stable", "InProgress", "VerifyWait", "Initializing"]),
                pick(&[
                    "Verify Complete",
                    "Rollout Complete",
                    "Verify InProgress",
                    "x",
                ]),
                prop::option::of(pick(&[json!(T0), json!(3)])),
                prop::option::of(pick(&[json!(1), json!(2), json!(1.0)])),
                any::<bool>(),
            )
                .prop_map(|(t, status, reason, message, time, generation, extra)| {
                    let mut c =
                        json!({"type": t, "status": status, "reason": reason, "message": message});
                    if let Some(time) = time {
                        c["lastTransitionTime"] = time;
                    }
                    if let Some(generation) = generation {
                        c["observedGeneration"] = generation;
                    }
                    if extra {
                        c["extra"] = json!(true);
                    }
                    c
                })
        }

        fn status() -> impl Strategy<Value = Value> {
            let versions = (
                prop::option::of(pick(&["1.0", "2.0"])),
                prop::option::of(pick(&[
                    json!({"versions": [{"name": "1.0"}]}),
                    json!({"versions": [{"name": "1.0"}, {"name": "2.0"}]}),
                    json!({"versions": []}),
                    json!({"versions": [{"name": "1.0", "x": 1}]}),
                ])),
            )
                .prop_map(|(reconciled, available)| {
                    let mut v = json!({});
                    if let Some(r) = reconciled {
                        v["reconciled"] = json!(r);
                    }
                    if let Some(a) = available {
                        v["available"] = a;
                    }
                    v
                });
            (
                prop::option::of(prop_oneof![
                    4 => prop::collection::vec(condition(), 0..4).prop_map(Value::Array),
                    1 => Just(json!("no list")),
                ]),
                prop::option::of(prop_oneof![4 => versions, 1 => Just(json!(7))]),
                prop::option::of(pick(&[json!(1), json!(2)])),
                prop::option::of(pick(&[json!("Completed"), json!("Paused"), json!(1)])),
                any::<bool>(),
            )
                .prop_map(|(conditions, versions, generation, service, null)| {
                    if null {
                        return Value::Null;
                    }
                    let mut s = json!({});
                    for (key, value) in [
                        ("conditions", conditions),
                        ("versions", versions),
                        ("observedGeneration", generation),
                        ("xStatus", service),
                    ] {
                        if let Some(value) = value {
                            s[key] = value;
                        }
                    }
                    s
                })
        }

        fn update() -> impl Strategy<Value = StatusUpdate> {
            use ReadyReason as R;
            use UpdatingReason as U;
            (
                prop::option::of((
                    pick(&[R::Stable, R::InProgress, R::Initializing]),
                    pick(&["Verify Complete", "Verify InProgress"]),
                )),
                prop::option::of((
                    pick(&[U::Stable, U::VerifyWait]),
                    pick(&["Rollout Complete", "x"]),
                )),
                prop::option::of(pick(&[1i64, 2])),
                prop::option::of(pick(&["1.0", "2.0"])),
                prop::option::of(pick(&[vec![], vec!["1.0"], vec!["1.0", "2.0"]])),
                prop::option::of(pick(&[(vec!["a"], vec![]), (vec![], vec!["a"])])),
            )
                .prop_map(
                    |(ready, updating, generation, reconciled, supported, state)| StatusUpdate {
                        ready: ready.map(|(r, m)| (r, m.to_string())),
                        updating: updating.map(|(u, m)| (u, m.to_string())),
                        observed_generation: generation,
                        reconciled_version: reconciled.map(str::to_string),
                        supported_versions: supported
                            .map(|s| s.into_iter().map(str::to_string).collect()),
                        components: state.map(|(verified, unverified)| {
                            let none: [&str; 0] = [];
                            CompletionState::new(verified, unverified, none, none, None).unwrap()
                        }),
                        ..Default::default()
                    },
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3_000))]

            /// Two updates in a row (the start and the completion of a reconcile) leave
            /// the status as rebuilding every key did: the same status to write, the same
            /// answer to "does it change anything", the same reasons.
            #[test]
            fn apply_update_answers_as_rebuilding(
                stored in status(),
                start in update(),
                completion in update(),
            ) {
                let mut next = NextStatus::over(&stored);
                let mut rebuilt = NextStatus::over(&stored);
                for update in [&start, &completion] {
                    apply_update(&mut next, "X", update, T1);
                    apply_update_rebuilding(&mut rebuilt, update, T1);
                    prop_assert_eq!(
                        next.condition_reason::<String>(READY),
                        rebuilt.condition_reason::<String>(READY)
                    );
                }
                prop_assert_eq!(next.changes_anything(), rebuilt.changes_anything());
                prop_assert_eq!(next.into_value(), rebuilt.into_value());
            }
        }
    }

    #[test]
    fn next_status_changes_what_the_whole_status_would() {
        let stable = update(ReadyReason::Stable, UpdatingReason::Stable);
        let stored = updated_status(json!({"custom": 1}), "X", &stable, T0);
        let check = |stored: &Value, change: &dyn Fn(&mut NextStatus<'_>)| {
            let mut next = NextStatus::over(stored);
            change(&mut next);
            let answer = next.changes_anything();
            assert_eq!(answer, status_changed(stored, &next.into_value()));
            answer
        };
        // The same update again, a minute later: only timestamps would change.
        assert!(!check(&stored, &|n| apply_update(n, "X", &stable, T1)));
        let failed = update(ReadyReason::Errored, UpdatingReason::Errored);
        assert!(check(&stored, &|n| apply_update(n, "X", &failed, T1)));
        assert!(check(&stored, &|n| n.remove("custom")));
        assert!(!check(&stored, &|n| n.remove("absent")));
        assert!(check(&stored, &|n| n.set("custom", json!(2))));
        assert!(!check(&stored, &|n| n.set("custom", json!(1))));
        assert!(check(&Value::Null, &|n| apply_update(n, "X", &stable, T0)));
    }

    #[test]
    fn error_reasons_follow_oper8s_table() {
        use ReadyReason as R;
        use UpdatingReason as U;
        assert_eq!(
            reasons_for_error(&Error::precondition("p")),
            (None, U::PreconditionWait)
        );
        assert_eq!(
            reasons_for_error(&Error::verification("v")),
            (None, U::VerifyWait)
        );
        assert_eq!(
            reasons_for_error(&Error::config("c")),
            (Some(R::ConfigError), U::Errored)
        );
        assert_eq!(
            reasons_for_error(&Error::cluster("x")),
            (None, U::ClusterError)
        );
        let invalid = ClusterError::invalid(
            "apps/v1/Deployment/ns/web",
            "spec.replicas: Invalid value: -1",
        );
        assert_eq!(
            reasons_for_error(&Error::Cluster(invalid)),
            (Some(R::ConfigError), U::Errored),
            "a 422 is input at fault, not the cluster"
        );
        assert_eq!(
            reasons_for_error(&Error::rollout("r")),
            (Some(R::Errored), U::Errored)
        );
        assert_eq!(
            reasons_for_error(&Error::other("o")),
            (Some(R::Errored), U::Errored)
        );
    }

    #[test]
    fn duplicate_conditions_are_an_error_and_unknown_reasons_are_rejected() {
        let s = json!({"conditions": [{"type": "Ready"}, {"type": "Ready"}]});
        assert!(condition(&s, READY).is_err());
        assert!("Sleeping".parse::<ReadyReason>().is_err());
        assert_eq!(
            "VersionChange".parse::<UpdatingReason>().unwrap(),
            UpdatingReason::VersionChange
        );
    }

    /// [`Status`]'s hand-written Deserialize answers as the derived one would, errors and
    /// their paths included, alone and flattened into an operator's status.
    #[test]
    fn parses_as_derived() {
        // Read through Debug only.
        #[allow(dead_code)]
        #[derive(Debug, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Derived {
            #[serde(default)]
            conditions: Vec<Condition>,
            #[serde(default)]
            observed_generation: Option<i64>,
            #[serde(default)]
            component_status: Option<ComponentStatus>,
            #[serde(default)]
            versions: Option<Versions>,
            #[serde(flatten)]
            other: Map<String, Value>,
        }
        #[allow(dead_code)]
        #[derive(Debug, Deserialize)]
        struct Outer<S> {
            #[serde(flatten)]
            windlass: S,
            url: Option<String>,
        }
        fn parsed<T: serde::de::DeserializeOwned + fmt::Debug>(value: &Value) -> String {
            let answer = match serde_path_to_error::deserialize::<_, T>(value) {
                Ok(parsed) => format!("{parsed:?}"),
                Err(e) => format!("{}: {}", e.path(), e.inner()),
            };
            answer.replace("Derived", "Status")
        }
        let condition = json!({"type": "Ready", "status": "True", "reason": "Stable",
            "message": "", "lastTransitionTime": T0});
        let cases = [
            json!("x"),
            json!({"conditions": null}),
            json!({"conditions": [{"type": "Ready"}]}),
            json!({"conditions": "no"}),
            json!({"observedGeneration": "1"}),
            json!({"componentStatus": {"allComponents": [1]}}),
            json!({"versions": {"reconciled": 3}}),
            json!({"conditions": [condition], "inventory": [{"a": 1}], "webAppStatus": "x",
                   "observedGeneration": null, "versions": {"reconciled": "1.0"},
                   "componentStatus": {"deployed": "1/1"}}),
        ];
        // The derived struct keeps the inventory in `other`; Status skips it.
        let without_inventory = |value: &Value| {
            let mut value = value.clone();
            if let Some(map) = value.as_object_mut() {
                map.remove(inventory::FIELD);
            }
            value
        };
        for case in cases {
            assert_eq!(
                parsed::<Status>(&case),
                parsed::<Derived>(&without_inventory(&case)),
                "{case}"
            );
            let mut outer = case.clone();
            if let Some(map) = outer.as_object_mut() {
                map.insert("url".into(), json!("u"));
            }
            assert_eq!(
                parsed::<Outer<Status>>(&outer),
                parsed::<Outer<Derived>>(&without_inventory(&outer)),
                "{outer}"
            );
        }
    }

    /// The typed status leaves the inventory out of `other`, whatever its shape, and keeps
    /// every other unknown key.
    #[test]
    fn the_typed_status_skips_the_inventory() {
        for inventory in [
            json!([{"kind": "ConfigMap", "name": "a"}]),
            json!("x"),
            json!(null),
        ] {
            let status: Status = serde_json::from_value(json!({
                "inventory": inventory, "webAppStatus": "Completed", "url": "u"}))
            .unwrap();
            assert_eq!(
                Value::Object(status.other),
                json!({"webAppStatus": "Completed", "url": "u"})
            );
        }
    }
}
