//! The controller: binds a CR kind to the graph of components it owns, and carries the
//! rollout hooks (oper8 F65–F72).
//!
//! ```
//! use windlass::prelude::*;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # #[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema)]
//! # #[kube(group = "example.com", version = "v1", kind = "App", namespaced)]
//! # struct AppSpec { cache: bool }
//! # struct Database; struct Web; struct Cache;
//! # #[async_trait] impl Component<App> for Database { fn name(&self) -> &str { "database" }
//! #   async fn render(&self, _: &Session<App>, _: &mut Resources) -> Result<()> { Ok(()) } }
//! # #[async_trait] impl Component<App> for Web { fn name(&self) -> &str { "web" }
//! #   async fn render(&self, _: &Session<App>, _: &mut Resources) -> Result<()> { Ok(()) } }
//! # #[async_trait] impl Component<App> for Cache { fn name(&self) -> &str { "cache" }
//! #   async fn render(&self, _: &Session<App>, _: &mut Resources) -> Result<()> { Ok(()) } }
//!
//! struct AppController;
//!
//! #[async_trait]
//! impl Controller for AppController {
//!     type Resource = App;
//!
//!     fn components(&self, session: &Session<App>) -> Result<Components<App>> {
//!         let mut graph = Components::new();
//!         let db = graph.add(Database)?;
//!         let web = graph.add(Web)?;
//!         graph.depends_on(web, db)?;
//!         // Switched on and off by the spec: when off, its objects are deleted.
//!         let cache = graph.add_enabled(Cache, session.cr().spec.cache)?;
//!         if session.cr().spec.cache {
//!             graph.depends_on(web, cache)?;
//!         }
//!         Ok(graph)
//!     }
//! }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::{Map, Value};

use crate::component::Component;
use crate::dag::{Graph, GraphError, NodeId};
use crate::error::{Error, Result};
pub use crate::resource::{PrimaryResource, Requeue};
use crate::session::Session;

/// A CR kind, the components it owns, and the hooks around its rollouts.
///
/// Only [`Controller::components`] is required. The hooks return `Ok(false)` for "not
/// yet" (the rollout is incomplete but not failed, F70) and `Err` for errors.
#[async_trait]
pub trait Controller: Send + Sync + 'static {
    /// The CR type this controller reconciles.
    type Resource: PrimaryResource;

    /// Build the component graph for one reconcile of the CR (F69). Return
    /// [`Error::Config`] for a CR that cannot be rolled out.
    fn components(&self, session: &Session<Self::Resource>) -> Result<Components<Self::Resource>>;

    /// The finalizer this controller puts on its CRs, or `None` for no finalizer (F66).
    /// When set, [`Controller::finalize_components`] runs when a CR is deleted, and the
    /// finalizer is removed once that rollout needs no requeue.
    /// [`default_finalizer`] gives the conventional name.
    fn finalizer(&self) -> Option<String> {
        None
    }

    /// The graph rolled out when a CR with this controller's finalizer is being deleted.
    /// By default: no components, so the finalizer is simply removed.
    fn finalize_components(
        &self,
        _session: &Session<Self::Resource>,
    ) -> Result<Components<Self::Resource>> {
        Ok(Components::new())
    }

    /// This controller's own watch filters, applied on top of the configured global one
    /// (oper8's `pwm_filters`, F187): a filter for every watched kind, or for one kind.
    /// Dependent watches AND them with [`DependentWatch`](crate::runtime::filter::DependentWatch).
    /// By default none: the global filter alone decides.
    ///
    /// ```
    /// # use windlass::prelude::*;
    /// # #[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema)]
    /// # #[kube(group = "example.com", version = "v1", kind = "App", namespaced)]
    /// # struct AppSpec {}
    /// use windlass::runtime::filter::{LabelSelector, WatchFilters};
    ///
    /// struct AppController;
    ///
    /// #[async_trait]
    /// impl Controller for AppController {
    ///     type Resource = App;
    ///     fn components(&self, _: &Session<App>) -> Result<Components<App>> {
    ///         Ok(Components::new())
    ///     }
    ///     // Only reconcile Apps labelled for this shard.
    ///     fn watch_filters(&self) -> WatchFilters {
    ///         WatchFilters::new().kind_of::<App>(LabelSelector::new([("shard", "a")]))
    ///     }
    /// }
    /// ```
    fn watch_filters(&self) -> crate::runtime::filter::WatchFilters {
        crate::runtime::filter::WatchFilters::new()
    }

    /// Kinds to watch besides the CR's and the ones its components render, each with the
    /// CRs an object concerns (oper8's dependent watches, F183–F186); see
    /// [`ExtraWatch`](crate::runtime::source::ExtraWatch). By default none. Their objects
    /// also serve the reconcile's reads of that kind from memory. A kind the components
    /// also render is then watched only by this watch (with its label selector, if any),
    /// not by the label-scoped watch of windlass's own objects.
    fn watches(&self) -> Vec<crate::runtime::source::ExtraWatch> {
        Vec::new()
    }

    /// Backend config defaults, the base of the config layering (F68, F117).
    fn config_defaults(&self) -> Value {
        Value::Object(Map::new())
    }

    /// Defaults merged under the CR before it is parsed: the CR wins (F68, F119).
    fn cr_defaults(&self) -> Value {
        Value::Object(Map::new())
    }

    /// After every component deployed and verified its deploy step (F70, F106).
    async fn after_deploy(&self, _session: &Session<Self::Resource>) -> Result<bool> {
        Ok(true)
    }

    /// After a deploy phase that did not complete; `failed` tells whether it failed.
    async fn after_deploy_unsuccessful(
        &self,
        _session: &Session<Self::Resource>,
        _failed: bool,
    ) -> Result<bool> {
        Ok(true)
    }

    /// After every component verified (F70, F108).
    async fn after_verify(&self, _session: &Session<Self::Resource>) -> Result<bool> {
        Ok(true)
    }

    /// After a verify phase that did not complete; `failed` tells whether it failed.
    async fn after_verify_unsuccessful(
        &self,
        _session: &Session<Self::Resource>,
        _failed: bool,
    ) -> Result<bool> {
        Ok(true)
    }

    /// Whether to reconcile again, given what the rollout achieved. The default re-reads
    /// the CR and requeues after `requeue_after_seconds` until its status shows Ready, not
    /// Updating, and the requested version reconciled (F71); see
    /// [`crate::status::default_should_requeue`].
    async fn should_requeue(
        &self,
        session: &Session<Self::Resource>,
        state: &crate::dag::CompletionState,
    ) -> Result<Requeue> {
        crate::status::default_should_requeue(session, state).await
    }
}

/// `<group>/<lowercase kind>-finalizer`, e.g. `example.com/webapp-finalizer`.
///
/// Domain-qualified as Kubernetes asks of finalizer names; oper8's
/// `finalizers.<kind>.<group>` has no `/` and draws API-server warnings.
pub fn default_finalizer<K: kube::Resource<DynamicType = ()>>() -> String {
    format!(
        "{}/{}-finalizer",
        K::group(&()),
        K::kind(&()).to_ascii_lowercase()
    )
}

/// `Controller(<group>/<version>/<kind>)`, the display form of a controller (F65).
pub fn controller_display<C: Controller>() -> String {
    use kube::Resource as _;
    format!(
        "Controller({}/{}/{})",
        C::Resource::group(&()),
        C::Resource::version(&()),
        C::Resource::kind(&())
    )
}

/// A condition on an edge of the component graph: the dependent starts only once it
/// returns `Ok(true)` (F89, rule 4 of [`crate::dag`]).
pub type EdgeCondition<K> =
    Arc<dyn for<'a> Fn(&'a Session<K>) -> BoxFuture<'a, Result<bool>> + Send + Sync>;

/// A component in a [`Components`] graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ComponentId(pub(crate) NodeId);

pub(crate) struct ComponentEntry<K: PrimaryResource> {
    pub(crate) component: Box<dyn Component<K>>,
    pub(crate) disabled: bool,
}

/// The graph of components one reconcile rolls out (oper8's session graph, F88–F90).
pub struct Components<K: PrimaryResource> {
    pub(crate) graph: Graph<ComponentEntry<K>, Option<EdgeCondition<K>>>,
}

impl<K: PrimaryResource> Default for Components<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PrimaryResource> Components<K> {
    /// An empty graph.
    pub fn new() -> Self {
        Components {
            graph: Graph::new(),
        }
    }

    /// Add an enabled component. Names must be unique and non-empty.
    pub fn add(&mut self, component: impl Component<K> + 'static) -> Result<ComponentId> {
        self.add_enabled(component, true)
    }

    /// Add a component that is disabled: its objects are rendered and deleted (F81, F103).
    pub fn add_disabled(&mut self, component: impl Component<K> + 'static) -> Result<ComponentId> {
        self.add_enabled(component, false)
    }

    /// Add a component, enabled or not, e.g. from a switch in the CR's spec.
    pub fn add_enabled(
        &mut self,
        component: impl Component<K> + 'static,
        enabled: bool,
    ) -> Result<ComponentId> {
        let name = component.name().to_string();
        self.graph
            .add_node(
                name,
                ComponentEntry {
                    component: Box::new(component),
                    disabled: !enabled,
                },
            )
            .map(ComponentId)
            .map_err(graph_error)
    }

    /// `component` starts only once `upstream` deployed (in the deploy phase) or verified
    /// (in the verify phase). Both must be enabled (F89).
    pub fn depends_on(&mut self, component: ComponentId, upstream: ComponentId) -> Result<()> {
        self.add_edge(component, upstream, None)
    }

    /// Like [`Components::depends_on`], and `component` also waits until `condition`
    /// holds. Conditions are skipped in dry-run (F104).
    pub fn depends_on_when<F>(
        &mut self,
        component: ComponentId,
        upstream: ComponentId,
        condition: F,
    ) -> Result<()>
    where
        F: for<'a> Fn(&'a Session<K>) -> BoxFuture<'a, Result<bool>> + Send + Sync + 'static,
    {
        self.add_edge(component, upstream, Some(Arc::new(condition)))
    }

    fn add_edge(
        &mut self,
        component: ComponentId,
        upstream: ComponentId,
        condition: Option<EdgeCondition<K>>,
    ) -> Result<()> {
        for id in [component, upstream] {
            if self.graph.data(id.0).disabled {
                return Err(Error::config(format!(
                    "component \"{}\" is disabled and cannot take part in a dependency",
                    self.graph.name(id.0)
                )));
            }
        }
        self.graph
            .add_dependency(component.0, upstream.0, condition)
            .map_err(graph_error)
    }

    /// The component of this name.
    pub fn get(&self, name: &str) -> Option<ComponentId> {
        self.graph.node(name).map(ComponentId)
    }

    /// The component's name.
    pub fn name(&self, id: ComponentId) -> &str {
        self.graph.name(id.0)
    }

    /// Whether the component is disabled.
    pub fn is_disabled(&self, id: ComponentId) -> bool {
        self.graph.data(id.0).disabled
    }

    /// Names of the enabled (`disabled == false`) or disabled components (F90).
    pub fn names(&self, disabled: bool) -> Vec<&str> {
        self.graph
            .topology()
            .into_iter()
            .filter(|id| self.graph.data(*id).disabled == disabled)
            .map(|id| self.graph.name(id))
            .collect()
    }

    /// The components `id` waits for (F90).
    pub fn dependencies(&self, id: ComponentId) -> Vec<ComponentId> {
        self.graph
            .upstream(id.0)
            .map(|(n, _)| ComponentId(n))
            .collect()
    }

    /// Number of components.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }

    /// The graph as a Mermaid flowchart; disabled components are marked.
    pub fn to_mermaid(&self) -> String {
        self.graph.to_mermaid(|id| self.label(id))
    }

    /// The graph in Graphviz DOT; disabled components are marked.
    pub fn to_dot(&self) -> String {
        self.graph.to_dot(|id| self.label(id))
    }

    fn label(&self, id: NodeId) -> String {
        if self.graph.data(id).disabled {
            format!("{} (disabled)", self.graph.name(id))
        } else {
            self.graph.name(id).to_string()
        }
    }
}

fn graph_error(e: GraphError) -> Error {
    Error::config(format!("component graph: {e}"))
}
