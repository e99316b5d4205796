//! Components and controllers made of data, [`DummyComponent`] and [`DummyController`],
//! with switches to fail, panic or stay unverified, for testing rollout logic.

use parking_lot::Mutex;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::kinds::Widget;
use crate::component::{Component, ManagedObject, ResourceOptions, Resources};
use crate::controller::{Components, Controller, Finalize, PrimaryResource};
use crate::error::{Error, Result};
use crate::progress::{Phase, PhaseOutcome};
use crate::session::Session;
use crate::verify::Readiness;

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
    /// `render` never returns: the reconcile stops there, as when the operator is killed
    /// in the middle of a rollout (a test drops the reconcile).
    Hang,
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
            Behaviour::Hang => std::future::pending().await,
            _ => {}
        }
        for (resource, manifest, options) in &self.objects {
            // `{cr}` in names stands for the CR's name, so several CRs do not collide.
            let text = manifest.to_string().replace("{cr}", session.name());
            let manifest: Value = serde_json::from_str(&text).map_err(Error::other)?;
            out.add_value_with(resource, manifest, options.clone())?;
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
/// the cluster-scoped [`Gadget`](super::Gadget)).
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
