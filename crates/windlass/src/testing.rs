//! Test helpers for operator authors, on the in-memory cluster.
//!
//! Behind the `testing` feature, off by default so operator binaries do not carry it;
//! enable it for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! windlass = { version = "0.1", features = ["testing"] }
//! ```
//!
//! - [`Harness`]: an in-memory cluster with the controller's CRD installed, a reconciler,
//!   the progress events, and shortcuts to apply CRs, reconcile them and read them back.
//! - [`FaultyCluster`]: wraps any cluster and makes chosen calls fail, always or a given
//!   number of times.
//! - [`DummyComponent`] and [`DummyController`]: components and controllers built from
//!   data, with switches to fail, panic or stay unverified, for testing rollout logic.
//! - [`Widget`]: a ready-made CR type for tests that need any CR; [`Gadget`], the same
//!   cluster-scoped.
//! - [`make_patch`]: a temporary-patch object.
//! - assertions on conditions and objects.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use serde_json::json;
//! use windlass::testing::{DummyComponent, DummyController, Harness, assert_condition};
//!
//! let controller = DummyController::new()
//!     .component(DummyComponent::new("db").with_configmap("db"), &[])
//!     .component(DummyComponent::new("web").with_configmap("web"), &["db"]);
//! let env = Harness::new(controller).await;
//! let cr = env.apply_cr("shop", json!({"version": "1.0"})).await;
//! let report = env.reconcile(&cr).await;
//! assert!(report.error.is_none());
//! assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
//! # });
//! ```

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cluster::{Cluster, Deletion, ListQuery, MemoryCluster, Scope, WriteMethod};
use crate::component::{Component, ManagedObject, ResourceOptions, Resources};
use crate::config::OperatorConfig;
use crate::controller::{Components, Controller, Finalize, PrimaryResource};
use crate::error::{ClusterError, Error, Result};
use crate::events::{MemoryEventSink, Reason, RecordedEvent};
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::progress::{Event, Observer, Phase, PhaseOutcome};
use crate::reconcile::{Reconciler, Report};
use crate::session::Session;
use crate::verify::Readiness;

/// The namespace test CRs live in.
pub const TEST_NAMESPACE: &str = "test";
/// The default name of a test CR.
pub const TEST_INSTANCE_NAME: &str = "test-instance";

/// A CR for tests: any spec, with an optional `version`.
#[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "test.windlass.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "crate::status::Status"
)]
pub struct WidgetSpec {
    /// The version the CR asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Any other spec fields.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A cluster-scoped CR for tests (no namespace): the same spec as [`Widget`]. Its
/// components name the namespace of each namespaced object they render.
#[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "test.windlass.dev",
    version = "v1",
    kind = "Gadget",
    status = "crate::status::Status"
)]
pub struct GadgetSpec {
    /// The version the CR asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Any other spec fields.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Records every progress event, for assertions on what a reconcile did.
#[derive(Debug, Clone, Default)]
pub struct EventLog(Arc<Mutex<Vec<Event>>>);

impl EventLog {
    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().clone()
    }
    /// Forget the events so far.
    pub fn clear(&self) {
        self.0.lock().clear();
    }
    /// Objects written by `Deployed` events since the last clear.
    pub fn applied(&self) -> Vec<ObjectRef> {
        self.events()
            .into_iter()
            .flat_map(|e| match e {
                Event::Deployed { applied, .. } => applied,
                _ => Vec::new(),
            })
            .collect()
    }
}

impl Observer for EventLog {
    fn event(&self, event: &Event) {
        self.0.lock().push(event.clone());
    }
}

/// An in-memory cluster with a controller's CRD installed and the test namespace
/// created, a reconciler for the controller, and an [`EventLog`]. (Not to be confused with
/// `windlass_testenv::TestEnv`, a real control plane for live tests.)
pub struct Harness<C: Controller> {
    /// The in-memory cluster.
    pub memory: Arc<MemoryCluster>,
    /// The reconciler (over [`Harness::memory`], or a wrapper of it).
    pub reconciler: Reconciler<C>,
    /// What reconciles reported.
    pub log: EventLog,
    /// The Kubernetes Events reconciles published about CRs.
    pub events: Arc<MemoryEventSink>,
}

impl<C: Controller> Harness<C> {
    /// A harness with the default operator config (verification on: tests drive
    /// object status themselves, e.g. with [`Harness::set_status`]).
    pub async fn new(controller: C) -> Self
    where
        C::Resource: CustomResourceExt,
    {
        Self::with_config(controller, OperatorConfig::default()).await
    }

    /// A harness in dry-run mode: verification passes without looking.
    pub async fn dry_run(controller: C) -> Self
    where
        C::Resource: CustomResourceExt,
    {
        let config = OperatorConfig {
            dry_run: true,
            ..OperatorConfig::default()
        };
        Self::with_config(controller, config).await
    }

    /// A harness with the given operator config.
    pub async fn with_config(controller: C, config: OperatorConfig) -> Self
    where
        C::Resource: CustomResourceExt,
    {
        let memory = Arc::new(MemoryCluster::new());
        Self::on_cluster(controller, config, memory.clone(), memory)
    }

    /// A harness whose reconciler talks to `cluster` (e.g. a [`FaultyCluster`]
    /// around `memory`), while the helpers read `memory` directly.
    pub fn on_cluster(
        controller: C,
        config: OperatorConfig,
        memory: Arc<MemoryCluster>,
        cluster: Arc<dyn Cluster>,
    ) -> Self
    where
        C::Resource: CustomResourceExt,
    {
        Self::with_crd(
            controller,
            Some(C::Resource::crd()),
            config,
            memory,
            cluster,
        )
    }

    /// [`Harness::on_cluster`] for a primary kind given its CRD, or none for a kind the
    /// in-memory cluster serves already (`Namespace`, `ConfigMap`, …).
    pub fn with_crd(
        controller: C,
        crd: crate::resource::Crd,
        config: OperatorConfig,
        memory: Arc<MemoryCluster>,
        cluster: Arc<dyn Cluster>,
    ) -> Self {
        if let Some(crd) = &crd {
            memory.register_crd(crd);
        }
        memory
            .create_namespace(TEST_NAMESPACE)
            .expect("the test namespace name is valid");
        let log = EventLog::default();
        let events = Arc::new(MemoryEventSink::new());
        let reconciler = Reconciler::new(controller, cluster, config)
            .with_observer(log.clone())
            .with_events(events.clone());
        Harness {
            memory,
            reconciler,
            log,
            events,
        }
    }

    /// Create or update a CR of the controller's kind in the test namespace with this
    /// spec, and return its reference.
    pub async fn apply_cr(&self, name: &str, spec: Value) -> ObjectRef {
        let manifest = cr_manifest::<C::Resource>(name, spec);
        self.apply(&manifest).await;
        ObjectRef::from_manifest(&manifest).expect("cr_manifest names the CR")
    }

    /// Create or update any object as another client would, with a JSON merge patch:
    /// fields given are set, `null` deletes a field, nothing else is touched.
    pub async fn apply(&self, manifest: &Value) -> Value {
        match self.memory.apply(manifest, WriteMethod::Update).await {
            Ok(v) => v,
            Err(e) => panic!("test setup: cannot apply {manifest}: {e}"),
        }
    }

    /// Set an annotation on an object (e.g. the pause switch on a CR) and return it.
    pub async fn annotate(&self, object: &ObjectRef, key: &str, value: &str) -> Value {
        let mut patch = json!({"apiVersion": object.api_version, "kind": object.kind,
            "metadata": {"name": object.name, "annotations": {key: value}}});
        if let Some(ns) = &object.namespace {
            patch["metadata"]["namespace"] = json!(ns);
        }
        self.apply(&patch).await
    }

    /// Reconcile a CR once.
    pub async fn reconcile(&self, cr: &ObjectRef) -> Report {
        self.reconciler.reconcile(cr).await
    }

    /// Assert that the CR is Ready: `Ready=True` and `Updating=False`, both `Stable`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use serde_json::json;
    /// use windlass::events::Reason;
    /// use windlass::testing::{DummyComponent, DummyController, Harness};
    ///
    /// let controller =
    ///     DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]);
    /// let env = Harness::dry_run(controller).await;
    /// let cr = env.apply_cr("shop", json!({})).await;
    /// env.reconcile(&cr).await;
    /// env.assert_ready(&cr).await;
    /// env.assert_event(&cr, Reason::RolloutCompleted);
    /// # }
    /// ```
    pub async fn assert_ready(&self, cr: &ObjectRef) {
        let status = self.status(cr).await;
        assert_condition(&status, "Ready", true, "Stable");
        assert_condition(&status, "Updating", false, "Stable");
    }

    /// Assert that a Kubernetes Event with `reason` was published about the CR.
    #[track_caller]
    pub fn assert_event(&self, cr: &ObjectRef, reason: Reason) {
        let events = self.events.events();
        let about = |e: &&RecordedEvent| {
            e.regarding.name.as_deref() == Some(cr.name.as_str())
                && e.regarding.namespace.as_deref() == cr.namespace.as_deref()
        };
        assert!(
            events
                .iter()
                .filter(about)
                .any(|e| e.event.reason() == reason),
            "no {reason:?} Event about {cr} among {events:#?}"
        );
    }

    /// The objects the component `component` renders for `cr`, without a rollout: to test
    /// one component's output. See [`Reconciler::render`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use serde_json::json;
    /// use windlass::testing::{DummyComponent, DummyController, Harness};
    ///
    /// let controller =
    ///     DummyController::new().component(DummyComponent::new("web").with_configmap("web"), &[]);
    /// let env = Harness::dry_run(controller).await;
    /// let cr = env.apply_cr("shop", json!({})).await;
    /// let objects = env.render("web", &cr).await.unwrap();
    /// assert_eq!(objects[0]["metadata"]["name"], "shop-web");
    /// assert!(env.get(&windlass::object::ObjectRef::new("v1", "ConfigMap", Some("test"), "shop-web")).await.is_none(), "nothing applied");
    /// assert!(env.render("db", &cr).await.is_err(), "no such component");
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Reconciler::render`].
    pub async fn render(&self, component: &str, cr: &ObjectRef) -> crate::Result<Vec<Value>> {
        self.reconciler.render(cr, component).await
    }

    /// The object, if it exists.
    pub async fn get(&self, object: &ObjectRef) -> Option<Value> {
        self.memory
            .get(object)
            .await
            .expect("in-memory reads succeed")
    }

    /// The CR's status (`null` when it has none or is gone).
    pub async fn status(&self, cr: &ObjectRef) -> Value {
        self.get(cr)
            .await
            .map(|v| v["status"].clone())
            .unwrap_or(Value::Null)
    }

    /// Replace an object's status, e.g. to mark a Deployment available.
    pub async fn set_status(&self, object: &ObjectRef, status: Value) {
        let written = self.memory.write_status(object, &status, None).await;
        assert!(
            matches!(written, Ok(Some(_))),
            "test setup: no {object} to set the status of"
        );
    }

    /// Delete an object as a user would.
    pub async fn delete(&self, object: &ObjectRef) -> Deletion {
        self.memory
            .delete(object, None)
            .await
            .expect("in-memory deletes succeed")
    }
}

/// A manifest of a CR of kind `K` in the test namespace with this spec.
pub fn cr_manifest<K: PrimaryResource>(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": TEST_NAMESPACE},
        "spec": spec,
    })
}

/// Assert that the status has a condition of `type_` with this status and reason.
#[track_caller]
pub fn assert_condition(status: &Value, type_: &str, is_true: bool, reason: &str) {
    let condition = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in status {status:#}"));
    let expected = if is_true { "True" } else { "False" };
    assert_eq!(
        (condition["status"].as_str(), condition["reason"].as_str()),
        (Some(expected), Some(reason)),
        "{type_} condition: {condition:#}"
    );
}

/// A temporary patch object, to be stored in the cluster and listed in the CR's
/// `windlass.dev/temporary-patches` annotation.
pub fn make_patch(name: &str, patch_type: &str, tree: Value) -> Value {
    json!({
        "apiVersion": "test.windlass.dev/v1",
        "kind": crate::rollout::patch::DEFAULT_PATCH_KIND,
        "metadata": {"name": name, "namespace": TEST_NAMESPACE},
        "spec": {"patchType": patch_type, "patch": tree},
    })
}

/// The kind of [`make_patch`] objects, to register on a test cluster.
pub fn patch_kind() -> TypeRef {
    TypeRef::new(
        "test.windlass.dev/v1",
        crate::rollout::patch::DEFAULT_PATCH_KIND,
    )
}

// ---------------------------------------------------------------------------------------
// Fault injection

/// A cluster operation, for [`FaultyCluster`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`Cluster::scope`]
    Scope,
    /// [`Cluster::get`]
    Get,
    /// [`Cluster::list`]
    List,
    /// [`Cluster::apply`]
    Apply,
    /// [`Cluster::delete`]
    Delete,
    /// [`Cluster::write_status`]
    WriteStatus,
    /// [`Cluster::patch`]
    Patch,
}

#[derive(Debug, Clone)]
struct Fault {
    op: Op,
    kind: Option<String>,
    error: ClusterError,
    remaining: Option<usize>,
}

/// A cluster that fails chosen operations.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use windlass::cluster::{Cluster, MemoryCluster};
/// use windlass::testing::{FaultyCluster, Op};
/// use windlass::{ClusterError, object::ObjectRef};
///
/// let cluster = FaultyCluster::new(Arc::new(MemoryCluster::new()));
/// cluster.fail_times(Op::Get, Some("ConfigMap"), ClusterError::api("down"), 1);
/// let cm = ObjectRef::new("v1", "ConfigMap", Some("default"), "x");
/// assert!(cluster.get(&cm).await.is_err());
/// assert!(cluster.get(&cm).await.is_ok(), "failed once only");
/// # });
/// ```
pub struct FaultyCluster {
    inner: Arc<dyn Cluster>,
    faults: Mutex<Vec<Fault>>,
}

impl FaultyCluster {
    /// Wrap `inner`; nothing fails until told to.
    pub fn new(inner: Arc<dyn Cluster>) -> Self {
        FaultyCluster {
            inner,
            faults: Mutex::new(Vec::new()),
        }
    }

    /// Make every `op` (on objects of `kind`, or any kind) fail with `error`.
    pub fn fail(&self, op: Op, kind: Option<&str>, error: ClusterError) {
        self.push(op, kind, error, None);
    }

    /// Make the next `times` calls of `op` fail.
    pub fn fail_times(&self, op: Op, kind: Option<&str>, error: ClusterError, times: usize) {
        self.push(op, kind, error, Some(times));
    }

    /// Stop failing.
    pub fn heal(&self) {
        self.faults.lock().clear();
    }

    fn push(&self, op: Op, kind: Option<&str>, error: ClusterError, remaining: Option<usize>) {
        self.faults.lock().push(Fault {
            op,
            kind: kind.map(str::to_string),
            error,
            remaining,
        });
    }

    fn check(&self, op: Op, kind: &str) -> std::result::Result<(), ClusterError> {
        let mut faults = self.faults.lock();
        let hit = faults.iter_mut().find(|f| {
            f.op == op
                && f.kind.as_deref().is_none_or(|k| k == kind)
                && f.remaining.is_none_or(|n| n > 0)
        });
        match hit {
            Some(fault) => {
                if let Some(n) = &mut fault.remaining {
                    *n -= 1;
                }
                Err(fault.error.clone())
            }
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Cluster for FaultyCluster {
    async fn scope(&self, type_ref: &TypeRef) -> std::result::Result<Scope, ClusterError> {
        self.check(Op::Scope, &type_ref.kind)?;
        self.inner.scope(type_ref).await
    }
    async fn get(&self, object: &ObjectRef) -> std::result::Result<Option<Value>, ClusterError> {
        self.check(Op::Get, &object.kind)?;
        self.inner.get(object).await
    }
    async fn list(&self, query: &ListQuery) -> std::result::Result<Vec<Value>, ClusterError> {
        self.check(Op::List, &query.type_ref.kind)?;
        self.inner.list(query).await
    }
    async fn apply(
        &self,
        manifest: &Value,
        method: WriteMethod,
    ) -> std::result::Result<Value, ClusterError> {
        self.check(Op::Apply, manifest.kind().unwrap_or_default())?;
        self.inner.apply(manifest, method).await
    }
    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> std::result::Result<Deletion, ClusterError> {
        self.check(Op::Delete, &object.kind)?;
        self.inner.delete(object, uid).await
    }
    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> std::result::Result<Option<Value>, ClusterError> {
        self.check(Op::WriteStatus, &object.kind)?;
        self.inner
            .write_status(object, status, resource_version)
            .await
    }
    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> std::result::Result<Value, ClusterError> {
        self.check(Op::Patch, &object.kind)?;
        self.inner.patch(object, patch).await
    }
}

// ---------------------------------------------------------------------------------------
// Dummy components and controllers

/// How a [`DummyComponent`] behaves.
#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    /// Renders its objects and verifies by the per-kind rules.
    Normal,
    /// `render` returns this error.
    RenderError(Error),
    /// `render` panics.
    RenderPanic,
    /// `verify` says "not yet".
    NeverVerifies,
    /// `verify` returns this error.
    VerifyError(Error),
}

/// A component made of data.
#[derive(Debug, Clone)]
pub struct DummyComponent {
    name: String,
    objects: Vec<(String, Value, ResourceOptions)>,
    behaviour: Behaviour,
}

impl DummyComponent {
    /// A component with no objects that renders and verifies.
    pub fn new(name: &str) -> Self {
        DummyComponent {
            name: name.to_string(),
            objects: Vec::new(),
            behaviour: Behaviour::Normal,
        }
    }

    /// Add an object under a resource name.
    pub fn with_object(self, resource: &str, manifest: Value) -> Self {
        self.with_object_options(resource, manifest, ResourceOptions::new())
    }

    /// Add an object under a resource name with its own [`ResourceOptions`] (a verify
    /// function, a write method, recreation when an immutable field changes).
    pub fn with_object_options(
        mut self,
        resource: &str,
        manifest: Value,
        options: ResourceOptions,
    ) -> Self {
        self.objects.push((resource.to_string(), manifest, options));
        self
    }

    /// Add a ConfigMap named `<cr name>-<name>` (resource name `name`).
    pub fn with_configmap(self, name: &str) -> Self {
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{{cr}}-{name}")}, "data": {"component": name}});
        self.with_object(name, manifest)
    }

    /// Change how the component behaves.
    pub fn behave(mut self, behaviour: Behaviour) -> Self {
        self.behaviour = behaviour;
        self
    }
}

#[async_trait]
impl<C: Controller> Component<C> for DummyComponent {
    fn name(&self) -> &str {
        &self.name
    }

    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        match &self.behaviour {
            Behaviour::RenderError(e) => return Err(e.clone()),
            Behaviour::RenderPanic => {
                panic!("dummy component {} panics while rendering", self.name)
            }
            _ => {}
        }
        for (resource, manifest, options) in &self.objects {
            // `{cr}` in names stands for the CR's name, so several CRs do not collide.
            let text = manifest.to_string().replace("{cr}", session.name());
            let manifest: Value = serde_json::from_str(&text).map_err(Error::other)?;
            out.add_value_with(resource, &manifest, options.clone())?;
        }
        Ok(())
    }

    async fn verify(&self, session: &Session<C>, objects: &[ManagedObject]) -> Result<Readiness> {
        match &self.behaviour {
            Behaviour::NeverVerifies => {
                Ok(Readiness::not_yet(format!("{} never verifies", self.name)))
            }
            Behaviour::VerifyError(e) => Err(e.clone()),
            _ if session.dry_run() => Ok(Readiness::Ready),
            _ => crate::verify::verify_objects(session.cluster(), objects).await,
        }
    }
}

/// What the `after_phase` hook of a [`DummyController`] returns, by phase.
#[derive(Debug, Clone)]
pub struct Hooks {
    /// After the deploy phase, however it ended.
    pub after_deploy: Result<Readiness>,
    /// After the verify phase, however it ended.
    pub after_verify: Result<Readiness>,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            after_deploy: Ok(Readiness::Ready),
            after_verify: Ok(Readiness::Ready),
        }
    }
}

/// A controller made of data: components with their upstreams, components
/// switched off by a spec field, hook results, and a finalizer. It records which hooks
/// ran. It controls [`Widget`]s unless made with [`DummyController::of_kind`] (e.g. for
/// the cluster-scoped [`Gadget`]).
pub struct DummyController<K = Widget> {
    components: Vec<(DummyComponent, Vec<String>, Option<String>)>,
    /// What the hooks return.
    pub hooks: Hooks,
    finalizer: Option<String>,
    finalize: Vec<DummyComponent>,
    calls: Arc<Mutex<Vec<String>>>,
    kind: std::marker::PhantomData<fn() -> K>,
}

impl Default for DummyController<Widget> {
    fn default() -> Self {
        Self::of_kind()
    }
}

impl DummyController<Widget> {
    /// A controller of [`Widget`]s with no components.
    pub fn new() -> Self {
        Self::of_kind()
    }
}

impl<K: PrimaryResource> DummyController<K> {
    /// A controller of CRs of kind `K` with no components.
    pub fn of_kind() -> Self {
        DummyController {
            components: Vec::new(),
            hooks: Hooks::default(),
            finalizer: None,
            finalize: Vec::new(),
            calls: Arc::default(),
            kind: std::marker::PhantomData,
        }
    }

    /// Add a component that waits for `upstreams`.
    pub fn component(mut self, component: DummyComponent, upstreams: &[&str]) -> Self {
        self.components.push((
            component,
            upstreams.iter().map(|s| s.to_string()).collect(),
            None,
        ));
        self
    }

    /// Add a component that is enabled only when the CR's `spec.<switch>` is `true`.
    pub fn optional_component(mut self, component: DummyComponent, switch: &str) -> Self {
        self.components
            .push((component, Vec::new(), Some(switch.to_string())));
        self
    }

    /// Set what the hooks return.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Use a finalizer; `finalize` components run when the CR is deleted.
    pub fn finalizer(mut self, name: &str, finalize: Vec<DummyComponent>) -> Self {
        self.finalizer = Some(name.to_string());
        self.finalize = finalize;
        self
    }

    /// The hooks called so far, in order.
    pub fn calls(&self) -> Arc<Mutex<Vec<String>>> {
        self.calls.clone()
    }

    fn record(&self, hook: &str, result: &Result<Readiness>) -> Result<Readiness> {
        self.calls.lock().push(hook.to_string());
        result.clone()
    }
}

impl<K: PrimaryResource> Finalize<DummyController<K>> for DummyController<K> {
    fn name(&self) -> String {
        self.finalizer.clone().unwrap_or_default()
    }

    fn finalize_components(&self, _session: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        for component in &self.finalize {
            graph.add(component.clone())?;
        }
        Ok(graph)
    }
}

#[async_trait]
impl<K: PrimaryResource> Controller for DummyController<K> {
    type Resource = K;
    type Config = crate::controller::NoConfig;
    type Status = crate::status::Status;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        for (component, _, switch) in &self.components {
            let enabled = switch
                .as_ref()
                .is_none_or(|s| session.manifest()["spec"][s.as_str()] == Value::Bool(true));
            graph.add_enabled(component.clone(), enabled)?;
        }
        for (component, upstreams, _) in &self.components {
            let id = graph.get(&component.name).expect("added above");
            for upstream in upstreams {
                let up = graph
                    .get(upstream)
                    .ok_or_else(|| Error::config(format!("no component named {upstream}")))?;
                graph.depends_on(id, up)?;
            }
        }
        Ok(graph)
    }

    fn finalizer(&self) -> Option<&dyn Finalize<Self>> {
        self.finalizer
            .is_some()
            .then_some(self as &dyn Finalize<Self>)
    }

    async fn after_phase(
        &self,
        _: &Session<Self>,
        phase: Phase,
        outcome: PhaseOutcome,
    ) -> Result<Readiness> {
        let verdict = match phase {
            Phase::Deploy => &self.hooks.after_deploy,
            Phase::Verify => &self.hooks.after_verify,
        };
        self.record(&format!("after_phase({phase}, {outcome})"), verdict)
    }
}
