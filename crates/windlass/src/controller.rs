//! The controller: binds a CR kind to the graph of components it owns, and carries the
//! rollout hooks.
//!
//! ```
//! use windlass::prelude::*;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # #[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema)]
//! # #[kube(group = "example.com", version = "v1", kind = "App", namespaced)]
//! # struct AppSpec { cache: bool }
//! # struct Database; struct Web; struct Cache;
//! # #[async_trait] impl Component<AppController> for Database { fn name(&self) -> &str { "database" }
//! #   async fn render(&self, _: &Session<AppController>, _: &mut Resources) -> Result<()> { Ok(()) } }
//! # #[async_trait] impl Component<AppController> for Web { fn name(&self) -> &str { "web" }
//! #   async fn render(&self, _: &Session<AppController>, _: &mut Resources) -> Result<()> { Ok(()) } }
//! # #[async_trait] impl Component<AppController> for Cache { fn name(&self) -> &str { "cache" }
//! #   async fn render(&self, _: &Session<AppController>, _: &mut Resources) -> Result<()> { Ok(()) } }
//!
//! struct AppController;
//!
//! #[async_trait]
//! impl Controller for AppController {
//!     type Resource = App;
//!     type Config = NoConfig;
//!     type Status = Status;
//!
//!     fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
//!         let mut graph = Components::new();
//!         let db = graph.add(Database)?;
//!         let web = graph.add(Web)?;
//!         // The web tier is deployed once the database is ready, not merely applied.
//!         graph.depends_on_ready(web, db)?;
//!         // Switched on and off by the spec: when off, its objects are deleted.
//!         let cache = graph.add_enabled(Cache, session.cr().spec.cache)?;
//!         if session.cr().spec.cache {
//!             graph.depends_on(web, cache)?;
//!         }
//!         Ok(graph)
//!     }
//! }
//! ```

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::Action;
use crate::component::Component;
use crate::dag::{Graph, GraphError, NodeId};
use crate::error::{Error, Result};
pub use crate::progress::{Phase, PhaseOutcome};
pub use crate::resource::{ControllerTypes, PrimaryResource};
use crate::session::Session;
use crate::verify::Readiness;
use crate::version::Versions;

/// The default of [`Controller::should_requeue`]: requeue after
/// `runtime.requeue-after` until the CR's status, read back, shows it done: `Ready`,
/// not `Updating`, and the requested version reconciled (a CR without a version needs
/// only the conditions). Without a managed status (`status.manage` off, or an
/// [`Unmanaged`](crate::status::Unmanaged) status type) there is no status to read, so the
/// rollout's own outcome decides.
pub async fn default_should_requeue<C: ControllerTypes>(
    session: &Session<C>,
    state: &crate::dag::CompletionState,
) -> crate::error::Result<Action> {
    let again = Action::RequeueAfter(session.operator_config().requeue_after());
    if !crate::status::is_managed::<C>(session.operator_config()) {
        return Ok(if state.verify_completed() {
            Action::Done
        } else {
            again
        });
    }
    // The CR as this reconcile's status write left it: no request.
    Ok(
        match session.cluster().get_shared(&session.cr_ref()).await {
            Err(_) => again,
            Ok(None) => Action::Done,
            Ok(Some(cr)) => {
                let done = match session.version() {
                    Some(version) => crate::verify::verify_subsystem(&cr, Some(version)),
                    None => {
                        crate::verify::condition_is(&cr, crate::status::READY, true, None)
                            && crate::verify::condition_is(
                                &cr,
                                crate::status::UPDATING,
                                false,
                                None,
                            )
                    }
                };
                if done { Action::Done } else { again }
            }
        },
    )
}

/// What a controller does when one of its CRs is deleted, opted into by implementing this
/// and returning `Some(self)` from [`Controller::finalizer`].
///
/// ```
/// # use windlass::prelude::*;
/// struct App;
///
/// #[async_trait]
/// impl Controller for App {
/// #   type Resource = windlass::testing::Widget;
/// #   type Config = NoConfig;
/// #   type Status = Status;
///     // …
/// #   fn components(&self, _: &Session<Self>) -> Result<Components<Self>> { Ok(Components::new()) }
///     fn finalizer(&self) -> Option<&dyn Finalize<Self>> {
///         Some(self)
///     }
/// }
///
/// impl Finalize<App> for App {
///     fn name(&self) -> String {
///         default_finalizer::<windlass::testing::Widget>()
///     }
///     // finalize_components: none by default, so the finalizer is simply removed.
/// }
/// ```
pub trait Finalize<C: Controller>: Send + Sync {
    /// The finalizer's name, e.g. [`default_finalizer`]'s.
    fn name(&self) -> String;

    /// The graph rolled out while a CR carrying the finalizer is being deleted; the
    /// finalizer is removed once that rollout needs no requeue. By default no components:
    /// the finalizer is simply removed.
    fn finalize_components(&self, _session: &Session<C>) -> Result<Components<C>> {
        Ok(Components::new())
    }
}

/// Every controller has its types, for the session and the components.
impl<C: Controller> ControllerTypes for C {
    type Resource = C::Resource;
    type Config = C::Config;
    type Status = C::Status;
}

/// A CR kind, the components it owns, and the hooks around its rollouts.
///
/// Only the three types and [`Controller::components`] are required. A check that can be
/// "not yet" (a component's verify, a condition on an edge, [`Controller::after_phase`])
/// returns a [`Readiness`], [`Readiness::NotYet`] with the reason, which lands in the CR's
/// status message; a render that cannot proceed yet returns [`Error::precondition`].
#[async_trait]
pub trait Controller: Send + Sync + Sized + 'static {
    /// The primary resource this controller reconciles: usually the CR type
    /// `#[derive(CustomResource)]` made, but any kind will do (see [`crate::status::Unmanaged`]).
    type Resource: PrimaryResource;

    /// The backend config, layered: `Config::default()` ← the config-defaults ConfigMap ←
    /// the CR's `spec.configOverrides`; a key of the wrong type is a config error
    /// naming it. [`NoConfig`] when the operator has none. Read it with
    /// [`Session::config`].
    type Config: Serialize + DeserializeOwned + Default + JsonSchema + Send + Sync + 'static;

    /// The CR's status: [`crate::status::Status`] (windlass's part alone), the author's own
    /// struct embedding it with `#[serde(flatten)]`, or [`crate::status::Unmanaged`] when
    /// the status is not windlass's to write (a built-in kind, another operator's CRD).
    /// Components set the author's fields with [`Session::update_status`].
    type Status: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;

    /// Build the component graph for one reconcile of the CR. Return
    /// [`Error::Config`] for a CR that cannot be rolled out.
    fn components(&self, session: &Session<Self>) -> Result<Components<Self>>;

    /// The controller's finalization, if it has one: a controller that implements
    /// [`Finalize`] returns `Some(self)`. Its CRs then carry its finalizer, and deleting one
    /// rolls out [`Finalize::finalize_components`] before the finalizer is removed. By
    /// default none.
    fn finalizer(&self) -> Option<&dyn Finalize<Self>> {
        None
    }

    /// What this controller watches besides its CR's kind and the kinds its components
    /// render, and its own event filters on top of the configured global one; see
    /// [`Watches`](crate::watch::Watches). By default nothing more: the global filter alone
    /// decides. Called once, when the controller starts.
    ///
    /// ```
    /// # use windlass::prelude::*;
    /// # #[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema)]
    /// # #[kube(group = "example.com", version = "v1", kind = "App", namespaced)]
    /// # struct AppSpec {}
    /// use k8s_openapi::api::core::v1::Secret;
    /// use windlass::object::{ManifestExt, ObjectRef};
    /// use windlass::watch::Watches;
    /// use windlass::watch::filter::LabelSelector;
    ///
    /// struct AppController;
    ///
    /// #[async_trait]
    /// impl Controller for AppController {
    ///     type Resource = App;
    ///     type Config = NoConfig;
    ///     type Status = Status;
    ///     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
    ///         Ok(Components::new())
    ///     }
    ///     fn watches(&self) -> Watches {
    ///         Watches::new()
    ///             // The Secret `<app>-credentials` concerns the App `<app>`.
    ///             .watch::<Secret>(|secret| {
    ///                 let app = secret.name()?.strip_suffix("-credentials")?;
    ///                 Some(vec![ObjectRef::new("example.com/v1", "App", secret.namespace(), app)])
    ///             })
    ///             // Only reconcile Apps labelled for this shard.
    ///             .filter_kind::<App>(LabelSelector::new([("shard", "a")]))
    ///     }
    /// }
    /// ```
    fn watches(&self) -> crate::watch::Watches {
        crate::watch::Watches::new()
    }

    /// The application versions this controller can roll out (see [`crate::version`]):
    /// listed in `status.versions.available`, and, with `versions.strict`, the only ones a
    /// CR may ask for. `components` builds the graph for the CR's version
    /// ([`Session::version`], [`Session::version_matches`]). By default none are declared,
    /// and the configuration's `versions.supported` is the list. Called once, when the
    /// controller starts.
    ///
    /// ```
    /// # use windlass::prelude::*;
    /// use windlass::version::Versions;
    /// # struct Shop;
    /// # #[async_trait]
    /// # impl Controller for Shop {
    /// #     type Resource = windlass::testing::Widget;
    /// #     type Config = NoConfig;
    /// #     type Status = Status;
    /// #     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> { Ok(Components::new()) }
    /// fn versions(&self) -> Versions {
    ///     Versions::new().version("1.4.2").version("2.0.0")
    /// }
    /// # }
    /// ```
    fn versions(&self) -> Versions {
        Versions::new()
    }

    /// Defaults merged under the CR before it is parsed: the CR wins.
    fn cr_defaults(&self) -> Value {
        Value::Object(Map::new())
    }

    /// After each phase of a rollout, told how it ended: after [`Phase::Deploy`] always;
    /// after [`Phase::Verify`] when deploy and this hook's deploy call both completed.
    /// [`Readiness::NotYet`] leaves the rollout incomplete (the status says why), an error
    /// fails it; after a completed deploy, anything but [`Readiness::Ready`] also keeps the
    /// verify phase from counting as complete.
    async fn after_phase(
        &self,
        _session: &Session<Self>,
        _phase: Phase,
        _outcome: PhaseOutcome,
    ) -> Result<Readiness> {
        Ok(Readiness::Ready)
    }

    /// Whether to reconcile again, given what the rollout achieved: [`Action::Done`],
    /// [`Action::RequeueAfter`], or [`Action::Retry`] (again with back-off, as after an
    /// error). The default re-reads the CR and requeues after `runtime.requeue-after` until
    /// its status shows Ready, not Updating, and the requested version reconciled; see
    /// [`default_should_requeue`].
    async fn should_requeue(
        &self,
        session: &Session<Self>,
        state: &crate::dag::CompletionState,
    ) -> Result<Action> {
        default_should_requeue(session, state).await
    }
}

/// The [`Controller::Config`] of an operator without backend config: any keys are accepted
/// and ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
pub struct NoConfig {}

/// `<group>/<lowercase kind>-finalizer`, e.g. `example.com/webapp-finalizer`.
///
/// Domain-qualified as Kubernetes asks of finalizer names; a name of the form
/// `finalizers.<kind>.<group>` has no `/` and draws API-server warnings.
pub fn default_finalizer<K: kube::Resource<DynamicType = ()>>() -> String {
    format!(
        "{}/{}-finalizer",
        K::group(&()),
        K::kind(&()).to_ascii_lowercase()
    )
}

/// `Controller(<group>/<version>/<kind>)`, the display form of a controller.
pub(crate) fn controller_display<C: Controller>() -> String {
    use kube::Resource as _;
    format!(
        "Controller({}/{}/{})",
        C::Resource::group(&()),
        C::Resource::version(&()),
        C::Resource::kind(&())
    )
}

/// A condition on an edge of the component graph: the dependent starts only once it holds
/// (rule 4 of `dag`). Conditions are skipped in dry-run.
pub(crate) enum EdgeCondition<C: Controller> {
    /// The upstream component's own verify passes.
    UpstreamReady,
    /// The author's check: [`Readiness::Ready`] holds, [`Readiness::NotYet`] waits with a
    /// reason.
    Check(Arc<dyn Fn(Session<C>) -> BoxFuture<'static, Result<Readiness>> + Send + Sync>),
}

impl<C: Controller> Clone for EdgeCondition<C> {
    fn clone(&self) -> Self {
        match self {
            EdgeCondition::UpstreamReady => EdgeCondition::UpstreamReady,
            EdgeCondition::Check(check) => EdgeCondition::Check(check.clone()),
        }
    }
}

/// A component in a [`Components`] graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ComponentId(pub(crate) NodeId);

pub(crate) struct ComponentEntry<C: Controller> {
    pub(crate) component: Box<dyn Component<C>>,
    pub(crate) disabled: bool,
}

/// The graph of components one reconcile rolls out.
///
/// [`Controller::components`] builds one for each reconcile, so it may depend on the spec.
/// Edges say "waits for": [`depends_on`](Components::depends_on) waits until the upstream
/// component was applied, [`depends_on_ready`](Components::depends_on_ready) until it is
/// also ready. Independent components deploy concurrently. The rules are in
/// `dag`.
///
/// ```
/// use windlass::prelude::*;
/// # use windlass::testing::Widget;
/// # struct App;
/// # #[async_trait]
/// # impl Controller for App {
/// #     type Resource = Widget;
/// #     type Config = NoConfig;
/// #     type Status = Status;
/// #     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> { Ok(Components::new()) }
/// # }
/// # macro_rules! components {
/// #     ($($component:ident = $name:literal),*) => {$(
/// #         struct $component;
/// #         #[async_trait]
/// #         impl Component<App> for $component {
/// #             fn name(&self) -> &str { $name }
/// #             async fn render(&self, _: &Session<App>, _: &mut Resources) -> Result<()> { Ok(()) }
/// #         }
/// #     )*};
/// # }
/// # components!(Credentials = "credentials", Database = "database", Web = "web", Cache = "cache");
/// # fn main() -> Result<()> {
/// let cache_enabled = false; // e.g. from session.cr().spec
///
/// let mut graph = Components::<App>::new();
/// let credentials = graph.add(Credentials)?;
/// let database = graph.add(Database)?;
/// let web = graph.add(Web)?;
/// // Switched off: rendered, and what it applied before is deleted.
/// let cache = graph.add_enabled(Cache, cache_enabled)?;
///
/// // The database needs its password Secret to exist.
/// graph.depends_on(database, credentials)?;
/// // The web tier needs a database that accepts connections, not one just applied.
/// graph.depends_on_ready(web, database)?;
/// // A disabled component takes part in no edge: add this one only when it is on.
/// if cache_enabled {
///     graph.depends_on(web, cache)?;
/// }
///
/// assert_eq!(graph.len(), 4);
/// assert!(graph.is_disabled(cache) && !graph.is_disabled(web));
/// assert_eq!(graph.dependencies(web), [database]);
/// assert!(graph.depends_on(web, cache).is_err());
/// assert!(graph.depends_on(credentials, web).is_err(), "cycles are refused");
/// # Ok(())
/// # }
/// ```
pub struct Components<C: Controller> {
    pub(crate) graph: Graph<ComponentEntry<C>, Option<EdgeCondition<C>>>,
}

impl<C: Controller> Default for Components<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Controller> Components<C> {
    /// An empty graph.
    pub fn new() -> Self {
        Components {
            graph: Graph::new(),
        }
    }

    /// Add an enabled component. Names must be unique and non-empty.
    pub fn add(&mut self, component: impl Component<C> + 'static) -> Result<ComponentId> {
        self.add_enabled(component, true)
    }

    /// Add a component whose render is a function of the session: for the many
    /// components that only turn the spec into objects, without a type of their own. It
    /// verifies by the per-kind rules.
    ///
    /// ```
    /// # use windlass::prelude::*;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # fn graph<C: Controller>() -> Result<Components<C>> {
    /// const SETTINGS: Ref<ConfigMap> = Ref::new("settings");
    /// let mut graph = Components::new();
    /// graph.add_fn("settings", |session, out| {
    ///     out.add("config", &ConfigMap { metadata: session.meta(SETTINGS), ..Default::default() })?;
    ///     Ok(())
    /// })?;
    /// # Ok(graph)
    /// # }
    /// ```
    pub fn add_fn<F>(&mut self, name: &str, render: F) -> Result<ComponentId>
    where
        F: Fn(&Session<C>, &mut crate::component::Resources) -> Result<()> + Send + Sync + 'static,
    {
        self.add(crate::component::FnComponent {
            name: name.to_string(),
            render,
        })
    }

    /// Add a component that is disabled: its objects are rendered and deleted.
    pub fn add_disabled(&mut self, component: impl Component<C> + 'static) -> Result<ComponentId> {
        self.add_enabled(component, false)
    }

    /// Add a component, enabled or not, e.g. from a switch in the CR's spec.
    pub fn add_enabled(
        &mut self,
        component: impl Component<C> + 'static,
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
    /// (in the verify phase). Both must be enabled.
    pub fn depends_on(&mut self, component: ComponentId, upstream: ComponentId) -> Result<()> {
        self.add_edge(component, upstream, None)
    }

    /// Like [`Components::depends_on`], and `component` is not even deployed until
    /// `upstream` is ready by its own [`Component::verify`] (a database that accepts
    /// connections, a migration Job that completed), judged by the same per-kind rules.
    pub fn depends_on_ready(
        &mut self,
        component: ComponentId,
        upstream: ComponentId,
    ) -> Result<()> {
        self.add_edge(component, upstream, Some(EdgeCondition::UpstreamReady))
    }

    /// Like [`Components::depends_on`], and `component` also waits until `condition`
    /// holds: it gets the session (a cheap handle) and returns [`Readiness::Ready`] when the
    /// edge holds or [`Readiness::NotYet`] with the reason it waits.
    ///
    /// ```
    /// # use windlass::prelude::*;
    /// # use k8s_openapi::api::core::v1::Secret;
    /// # fn edge<C: Controller>(graph: &mut Components<C>, web: ComponentId, db: ComponentId) -> Result<()> {
    /// graph.depends_on_when(web, db, |session| async move {
    ///     match session.get::<Secret>("external-db").await? {
    ///         Some(_) => Ok(Readiness::Ready),
    ///         None => Ok(Readiness::not_yet("Secret external-db does not exist yet")),
    ///     }
    /// })
    /// # }
    /// ```
    pub fn depends_on_when<F, Fut>(
        &mut self,
        component: ComponentId,
        upstream: ComponentId,
        condition: F,
    ) -> Result<()>
    where
        F: Fn(Session<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Readiness>> + Send + 'static,
    {
        let check = Arc::new(
            move |session: Session<C>| -> BoxFuture<'static, Result<Readiness>> {
                Box::pin(condition(session))
            },
        );
        self.add_edge(component, upstream, Some(EdgeCondition::Check(check)))
    }

    fn add_edge(
        &mut self,
        component: ComponentId,
        upstream: ComponentId,
        condition: Option<EdgeCondition<C>>,
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

    /// Names of the enabled (`disabled == false`) or disabled components.
    pub(crate) fn names(&self, disabled: bool) -> Vec<&str> {
        self.graph
            .topology()
            .into_iter()
            .filter(|id| self.graph.data(*id).disabled == disabled)
            .map(|id| self.graph.name(id))
            .collect()
    }

    /// The components `id` waits for.
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
    pub(crate) fn to_mermaid(&self) -> String {
        self.graph.to_mermaid(|id| self.label(id))
    }

    /// The graph in Graphviz DOT; disabled components are marked.
    pub(crate) fn to_dot(&self) -> String {
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
