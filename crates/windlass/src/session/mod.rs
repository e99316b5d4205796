//! The context of one reconcile: the CR, typed and raw, its merged backend config, the
//! operator config, the cluster, the temporary patches, the status and versions as they were
//! when the reconcile began. Components render from it; what it describes never changes
//! while the rollout runs.
//!
//! A session also keeps the reconcile's ledger: the freshest copy of every object the
//! reconcile read or wrote (the object a write returns is the freshest there is), so that
//! one reconcile reads each object at most once, and the inventory of what it applied.

use parking_lot::Mutex;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::cluster::{Cluster, ListQuery, Selector};
use crate::config::OperatorConfig;
use crate::error::{Error, Result};
use crate::events::CrEvent;
use crate::object::{ManifestExt, ObjectRef, TypeRef, scoped_name, truncated_name};
use crate::progress::{Event, Observer, emit};
use crate::reference::{ObjectName, Ref};
use crate::resource::ControllerTypes;
use crate::values::parse_with_path;
use crate::version::Versions;
use settled::Settled;
mod ledger;
pub(crate) mod settled;
/// The ledger's test cluster, for tests of the layers a reconcile's cluster passes through.
#[cfg(test)]
pub(crate) use ledger::tests as ledger_tests;

pub(crate) use ledger::{Ledger, Recorded};

/// Everything a component may know about the reconcile it is part of.
///
/// A session is a cheap handle (an `Arc` inside): clone it into a spawned task or an edge
/// condition's future.
///
/// What a component reads from it, and how it reports back: the CR and the backend config,
/// typed; names of the CR's objects from [`Ref`]s; reads of the cluster; the status as the
/// reconcile began, and changes to the author's part of it.
///
/// ```
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// use windlass::prelude::*;
/// # use kube::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
/// # #[kube(group = "example.com", version = "v1", kind = "App", namespaced, status = "AppStatus")]
/// # pub struct AppSpec { greeting: String }
/// # #[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
/// # pub struct AppStatus {
/// #     #[serde(flatten)] windlass: Status,
/// #     #[serde(default, skip_serializing_if = "Option::is_none")] greeting: Option<String>,
/// # }
/// # #[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
/// # pub struct AppConfig { suffix: String }
/// # impl Default for AppConfig { fn default() -> Self { AppConfig { suffix: "!".into() } } }
/// # struct AppController;
/// # #[async_trait]
/// # impl Controller for AppController {
/// #     type Resource = App;
/// #     type Config = AppConfig;
/// #     type Status = AppStatus;
/// #     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
/// #         let mut graph = Components::new();
/// #         graph.add(Greeting)?;
/// #         Ok(graph)
/// #     }
/// # }
///
/// /// `<cr name>-greeting`.
/// const GREETING: Ref<ConfigMap> = Ref::new("greeting");
///
/// struct Greeting;
///
/// #[async_trait]
/// impl Component<AppController> for Greeting {
///     fn name(&self) -> &str {
///         "greeting"
///     }
///
///     async fn render(&self, session: &Session<AppController>, out: &mut Resources) -> Result<()> {
///         // The CR and the layered backend config, both typed.
///         let text = format!("{}{}", session.cr().spec.greeting, session.config().suffix);
///         // A typed read, by full name: `None` when it does not exist.
///         if session.get::<Secret>("api-token").await?.is_none() {
///             return Err(Error::precondition("Secret api-token does not exist yet"));
///         }
///         out.add("configmap", &ConfigMap {
///             metadata: session.meta(GREETING),
///             data: Some([("text".to_string(), text)].into()),
///             ..Default::default()
///         })?;
///         // The status as the reconcile began; the change lands in the reconcile's one
///         // status write.
///         let name = session.name_of(GREETING);
///         if session.status().greeting.as_ref() != Some(&name) {
///             session.update_status(|status| status.greeting = Some(name));
///         }
///         Ok(())
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use serde_json::json;
/// use windlass::testing::{Harness, assert_condition};
///
/// let env = Harness::dry_run(AppController).await;
/// let cr = env.apply_cr("hello", json!({"greeting": "Hello"})).await;
/// env.reconcile(&cr).await;
/// assert_condition(&env.status(&cr).await, "Updating", true, "PreconditionWait");
///
/// env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
///     "metadata": {"name": "api-token", "namespace": "test"}})).await;
/// env.reconcile(&cr).await;
/// let status = env.status(&cr).await;
/// assert_condition(&status, "Ready", true, "Stable");
/// assert_eq!(status["greeting"], "hello-greeting");
/// # });
/// ```
pub struct Session<C: ControllerTypes> {
    inner: Arc<Parts<C>>,
}

impl<C: ControllerTypes> Clone for Session<C> {
    fn clone(&self) -> Self {
        Session {
            inner: self.inner.clone(),
        }
    }
}

/// What a session is made of; [`crate::reconcile`] builds it.
pub(crate) struct Parts<C: ControllerTypes> {
    pub(crate) id: String,
    /// Boxed, as are the typed statuses below: the parts are made every reconcile, and
    /// kept under 1 KiB they stay clear of glibc malloc's slow path for larger blocks (the
    /// runtime's worker module says what it costs).
    pub(crate) cr: Box<C::Resource>,
    /// The CR merged over the controller's CR defaults (`read` itself when there are none).
    pub(crate) manifest: Arc<Value>,
    /// The CR's reference, from `manifest` (see [`Parts::reference_of`]): read once, as
    /// every object a component renders asks for the CR's name or compares itself with it.
    pub(crate) reference: ObjectRef,
    pub(crate) config: C::Config,
    pub(crate) config_value: Value,
    pub(crate) operator: Arc<OperatorConfig>,
    pub(crate) cluster: Arc<Recorded>,
    pub(crate) temporary_patches: Vec<Value>,
    /// The CR as read: its status is the status as read.
    pub(crate) read: Arc<Value>,
    /// The status as read, typed (the type's default when it does not parse), parsed when
    /// first asked for: parsing a status that lists every component and object costs a
    /// reconcile that does not look at it.
    pub(crate) typed_status: std::sync::OnceLock<Box<C::Status>>,
    /// The author's changes to the status, once [`Session::update_status`] was called.
    pub(crate) status_changes: Mutex<Option<Box<C::Status>>>,
    pub(crate) version: Option<String>,
    pub(crate) current_version: Option<String>,
    /// The versions a CR may ask for.
    pub(crate) versions: Arc<Versions>,
    pub(crate) observer: Arc<dyn Observer>,
    /// The Events the progress of this reconcile calls for (a component that failed),
    /// published by the reconcile once the rollout is over.
    pub(crate) component_events: Mutex<Vec<CrEvent>>,
    pub(crate) ledger: Arc<Ledger>,
    /// The reconciler's memo of objects found in sync (see [`crate::session::settled`]).
    pub(crate) settled: Arc<Settled>,
}

impl<C: ControllerTypes> Parts<C> {
    /// The reference of the CR `manifest`: its apiVersion, kind and name (empty where
    /// missing) and its namespace (none where missing or empty).
    pub(crate) fn reference_of(manifest: &Value) -> ObjectRef {
        ObjectRef::new(
            manifest.api_version().unwrap_or_default(),
            manifest.kind().unwrap_or_default(),
            manifest.namespace(),
            manifest.name().unwrap_or_default(),
        )
    }
}

impl<C: ControllerTypes> Session<C> {
    pub(crate) fn new(parts: Parts<C>) -> Self {
        Session {
            inner: Arc::new(parts),
        }
    }

    pub(crate) fn ledger(&self) -> &Arc<Ledger> {
        &self.inner.ledger
    }

    /// The reconciler's memo of the objects found in sync, by version.
    pub(crate) fn settled(&self) -> &Settled {
        &self.inner.settled
    }

    /// [`Session::cluster`], with the reads and writes that answer with the ledger's copy.
    pub(crate) fn recorded(&self) -> &Recorded {
        &self.inner.cluster
    }

    /// Before `component` first writes `object`, which the garbage collector cannot reach
    /// from the CR: make sure the CR carries
    /// [`crate::cluster::finalizer::CLEANUP_FINALIZER`], and that its stored inventory names
    /// the object (a pending entry, see [`crate::status::Inventory`]) — so that whenever the
    /// operator stops after the write, the CR's deletion finds the object to delete. Costs no
    /// request once both are there, as they are for every write after the first. A CR
    /// already being deleted can take no new finalizer; its cleanup already runs.
    pub(crate) async fn hold_for_cleanup(&self, component: &str, object: &ObjectRef) -> Result<()> {
        use crate::cluster::finalizer::{CLEANUP_FINALIZER, add};
        let _guard = self.inner.ledger.finalizers.lock().await;
        let cr = self.cr_ref();
        let Some(current) = self.get_object(&cr).await? else {
            return Ok(());
        };
        if !current.is_terminating() && !current.finalizers().contains(&CLEANUP_FINALIZER) {
            add(self.inner.cluster.as_ref(), &cr, current, CLEANUP_FINALIZER).await?;
        }
        let new = self
            .inner
            .ledger
            .inventory_mut(|i| i.record_pending(component, object));
        // Without a managed status there is no stored inventory to write ahead.
        if new && crate::status::is_managed::<C>(&self.inner.operator) {
            self.write_inventory(&cr).await?;
        }
        Ok(())
    }

    /// Write the inventory as the ledger holds it into the CR's stored status, and nothing
    /// else of the status. Conditional on the resourceVersion last seen; on a conflict the
    /// CR is read again (another writer's status survives).
    async fn write_inventory(&self, cr: &ObjectRef) -> Result<()> {
        const ATTEMPTS: u32 = 5;
        let cluster = self.inner.cluster.as_ref();
        let inventory = self.inner.ledger.inventory().to_value();
        let mut attempt = 1;
        loop {
            let Some(current) = cluster.get_shared(cr).await? else {
                return Ok(());
            };
            let mut status = match current.get("status") {
                Some(Value::Object(status)) => status.clone(),
                _ => Map::new(),
            };
            status.insert(crate::status::inventory::FIELD.into(), inventory.clone());
            let written = cluster
                .write_status(cr, &Value::Object(status), current.resource_version())
                .await;
            match written {
                Ok(_) => return Ok(()),
                Err(crate::error::ClusterError::Conflict { .. }) if attempt < ATTEMPTS => {
                    attempt += 1;
                    // The ledger's copy is stale: read the CR afresh.
                    self.inner.ledger.forget(cr);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The reconcile id that tags every log line of this reconcile.
    pub fn id(&self) -> &str {
        &self.inner.id
    }
    /// The CR, typed (after the controller's CR defaults were merged in).
    pub fn cr(&self) -> &C::Resource {
        &self.inner.cr
    }
    /// The CR as JSON, as read from the cluster (plus defaults).
    pub fn manifest(&self) -> &Value {
        &self.inner.manifest
    }
    /// The CR's name.
    pub fn name(&self) -> &str {
        &self.inner.reference.name
    }
    /// The CR's namespace; rendered objects of namespaced kinds default to it. For a
    /// cluster-scoped CR this is `default`, so its components should name namespaces.
    pub fn namespace(&self) -> &str {
        self.inner
            .reference
            .namespace
            .as_deref()
            .unwrap_or("default")
    }
    /// The CR's kind.
    pub fn kind(&self) -> &str {
        &self.inner.reference.kind
    }
    /// The CR's apiVersion.
    pub fn api_version(&self) -> &str {
        &self.inner.reference.api_version
    }
    /// A reference to the CR.
    pub fn cr_ref(&self) -> ObjectRef {
        self.inner.reference.clone()
    }
    /// Whether `object` is the CR ([`Session::cr_ref`], compared without making it).
    pub(crate) fn is_cr(&self, object: &ObjectRef) -> bool {
        *object == self.inner.reference
    }
    /// The backend config: [`Controller::Config`](crate::controller::Controller::Config)'s defaults ← the config-defaults
    /// ConfigMap ← the CR's `spec.configOverrides`, parsed once per reconcile.
    pub fn config(&self) -> &C::Config {
        &self.inner.config
    }
    /// The backend config as JSON, as layered before it was parsed.
    pub fn config_value(&self) -> &Value {
        &self.inner.config_value
    }
    /// The operator configuration.
    pub fn operator_config(&self) -> &OperatorConfig {
        &self.inner.operator
    }
    /// The cluster this reconcile reads and writes. Within one reconcile an object is read
    /// at most once: later reads get the copy read first or the one a write returned.
    pub fn cluster(&self) -> &dyn Cluster {
        self.inner.cluster.as_ref()
    }
    /// The CR's status when the reconcile began, typed (parsed when first asked for). A
    /// stored status that does not parse as [`Controller::Status`](crate::controller::Controller::Status)
    /// reads as its default (and is logged, then).
    pub fn status(&self) -> &C::Status {
        self.inner
            .typed_status
            .get_or_init(|| Box::new(typed_status::<C>(self.status_value())))
    }
    /// The CR's status when the reconcile began, as JSON.
    pub fn status_value(&self) -> &Value {
        &self.inner.read["status"]
    }
    /// Change the author's fields of the status, e.g. an URL a component learned. The
    /// changes are written with windlass's own part, in the one status write at the end of
    /// the reconcile (also when the rollout fails or waits); calls add up.
    ///
    /// ```
    /// # use windlass::prelude::*;
    /// # #[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
    /// # struct WebStatus { url: Option<String> }
    /// # fn report<C: Controller<Status = WebStatus>>(session: &Session<C>, host: &str) {
    /// session.update_status(|status| status.url = Some(format!("http://{host}")));
    /// # }
    /// ```
    pub fn update_status(&self, change: impl FnOnce(&mut C::Status)) {
        let mut changes = self.inner.status_changes.lock();
        change(changes.get_or_insert_with(|| Box::new(self.status().clone())));
    }
    /// The author's status changes as one JSON merge over the status (keys that changed,
    /// `null` for keys that went away), if any were made.
    pub(crate) fn status_changes(&self) -> Option<Map<String, Value>> {
        let changed = self.inner.status_changes.lock().clone()?;
        let before = serde_json::to_value(self.status()).ok()?;
        let after = serde_json::to_value(&changed).ok()?;
        let (Value::Object(before), Value::Object(after)) = (before, after) else {
            return None;
        };
        let mut merge = Map::new();
        for (key, value) in &after {
            if before.get(key) != Some(value) {
                merge.insert(key.clone(), value.clone());
            }
        }
        for key in before.keys() {
            if !after.contains_key(key) {
                merge.insert(key.clone(), Value::Null);
            }
        }
        Some(merge)
    }
    /// The version the CR asks for (`vcs.version_override`, else the `vcs.field` path,
    /// `spec.version` by default), if any.
    pub fn version(&self) -> Option<&str> {
        self.inner.version.as_deref()
    }
    /// The last version fully rolled out (`status.versions.reconciled`), if any.
    pub fn current_version(&self) -> Option<&str> {
        self.inner.current_version.as_deref()
    }
    /// Whether the CR's version satisfies the semantic-versioning `requirement` (`^1.4`,
    /// `>=2.0, <3`): what `components` dispatches on to build the graph of a version.
    /// `false` when the CR has no version or one that is not a semantic version (see
    /// [`crate::version`]).
    ///
    /// # Errors
    /// [`Error::Config`] when `requirement` is not a requirement.
    pub fn version_matches(&self, requirement: &str) -> Result<bool> {
        crate::version::matches(requirement, self.version())
    }
    /// The versions this operator supports: the controller's
    /// ([`Controller::versions`](crate::controller::Controller::versions)) narrowed by the
    /// configuration's `versions.supported`.
    pub fn supported_versions(&self) -> &Versions {
        &self.inner.versions
    }
    /// The temporary patch objects in force, oldest first.
    pub fn temporary_patches(&self) -> &[Value] {
        &self.inner.temporary_patches
    }
    /// Whether this reconcile runs on the in-memory cluster without verification.
    pub fn dry_run(&self) -> bool {
        self.inner.operator.dry_run
    }
    /// Whether what this reconcile writes takes effect: false in a dry run (the in-memory
    /// cluster) and in `describe` (writes are recorded, not made). A hook or component that
    /// acts outside the cluster (calls a service's API, sends a message) does so only when
    /// this is true, so that describing a CR never acts.
    pub fn writes_take_effect(&self) -> bool {
        !self.inner.operator.dry_run && !self.inner.operator.planning
    }
    /// `<cr name>-<name>`, truncated to a valid object name.
    pub fn scoped_name(&self, name: &str) -> String {
        scoped_name(self.name(), name)
    }
    /// `name` truncated to a valid object name.
    pub fn truncated_name(&self, name: &str) -> String {
        truncated_name(name)
    }

    /// The full name of an object the CR owns: `<cr name>-<local name>`.
    pub fn name_of<K>(&self, object: Ref<K>) -> String {
        object.name_for(self.name())
    }

    /// Metadata naming the object `object`; windlass adds the namespace, the owner
    /// reference and the standard labels when it applies it.
    pub fn meta<K>(
        &self,
        object: Ref<K>,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(self.name_of(object)),
            ..Default::default()
        }
    }

    /// A typed object from the CR's namespace, `None` if it does not exist: by
    /// [`Ref`], or by full name.
    ///
    /// ```
    /// # use k8s_openapi::api::apps::v1::StatefulSet;
    /// # use k8s_openapi::api::core::v1::Secret;
    /// # use windlass::prelude::*;
    /// # const DATABASE: Ref<StatefulSet> = Ref::new("db");
    /// # async fn read<C: Controller>(session: &Session<C>) -> Result<()> {
    /// let db: Option<StatefulSet> = session.get(DATABASE).await?;
    /// let secret: Option<Secret> = session.get("external-credentials").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get<T>(&self, name: impl ObjectName<T>) -> Result<Option<T>>
    where
        T: k8s_openapi::Resource + DeserializeOwned,
    {
        let name = name.resolve(self.name());
        let namespace = self.namespace_for::<T>().await?;
        self.get_object(&ObjectRef::of::<T>(namespace.as_deref(), &name))
            .await?
            .map(|v| typed(v, T::KIND))
            .transpose()
    }

    /// An object by reference, as JSON; `None` if it does not exist.
    ///
    /// Within one reconcile an object is read at most once: later calls, and the rollout's
    /// own deploy and verify steps, get the copy read first or the one a write returned.
    /// The next reconcile reads afresh.
    pub async fn get_object(&self, object: &ObjectRef) -> Result<Option<Value>> {
        Ok(self.inner.cluster.get(object).await?)
    }

    /// Typed objects in the CR's namespace matching `selector` (`Selector::default()`:
    /// all of them).
    pub async fn list<T>(&self, selector: &Selector) -> Result<Vec<T>>
    where
        T: k8s_openapi::Resource + DeserializeOwned,
    {
        let namespace = self.namespace_for::<T>().await?;
        let mut query = ListQuery::new(TypeRef::of::<T>(), namespace.as_deref());
        if !selector.selects_all() {
            query = query.labels(selector.clone());
        }
        self.inner
            .cluster
            .list(&query)
            .await?
            .into_iter()
            .map(|v| typed(v, T::KIND))
            .collect()
    }

    /// The scope of `object`'s kind, asked of the cluster once per kind per reconcile: every
    /// object a component renders needs it, and a kind's scope cannot change (a CRD's
    /// `scope` is immutable).
    pub(crate) async fn scope_of(
        &self,
        object: &ObjectRef,
    ) -> std::result::Result<crate::cluster::Scope, crate::error::ClusterError> {
        let ledger = &self.inner.ledger;
        if let Some(scope) = ledger.scope(&object.api_version, &object.kind) {
            return Ok(scope);
        }
        let type_ref = object.type_ref();
        let scope = self.inner.cluster.scope(&type_ref).await?;
        ledger.remember_scope(type_ref, scope);
        Ok(scope)
    }

    async fn namespace_for<T: k8s_openapi::Resource>(&self) -> Result<Option<String>> {
        Ok(match self.inner.cluster.scope(&TypeRef::of::<T>()).await? {
            crate::cluster::Scope::Namespaced => Some(self.namespace().to_string()),
            crate::cluster::Scope::Cluster => None,
        })
    }

    pub(crate) fn emit(&self, event: Event) {
        if let Some(cr_event) = CrEvent::from_progress(&event) {
            self.inner.component_events.lock().push(cr_event);
        }
        emit(self.inner.observer.as_ref(), event);
    }

    /// [`Session::emit`] the event `make` makes, if it would go anywhere (see
    /// [`crate::progress::wanted`]): for the events of every component's steps, not halts.
    pub(crate) fn emit_with(&self, make: impl FnOnce() -> Event) {
        if crate::progress::wanted(self.inner.observer.as_ref()) {
            self.emit(make());
        }
    }

    /// The Events the rollout's progress called for so far, handed over once.
    pub(crate) fn take_component_events(&self) -> Vec<CrEvent> {
        std::mem::take(&mut self.inner.component_events.lock())
    }
}

/// The stored status as the controller's status type; one that does not parse (an older
/// operator wrote it, say) is logged and replaced by the default.
fn typed_status<C: ControllerTypes>(status: &Value) -> C::Status {
    match status {
        Value::Null => C::Status::default(),
        stored => parse_with_path(stored).unwrap_or_else(|e| {
            tracing::warn!(
                "the stored status does not parse ({}: {}); starting from the default",
                e.path(),
                e.inner()
            );
            C::Status::default()
        }),
    }
}

fn typed<T: DeserializeOwned>(value: Value, kind: &str) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        Error::cluster(format!(
            "{kind} from the cluster does not parse: {}: {}",
            e.path(),
            e.inner()
        ))
    })
}

/// The version of a CR manifest: `version_override` if set, else the value at the
/// dotted `field`.
pub(crate) fn manifest_version(manifest: &Value, operator: &OperatorConfig) -> Option<String> {
    if let Some(v) = &operator.versions.version_override {
        return Some(v.clone());
    }
    crate::values::nested_get(manifest, &operator.versions.field)
        .ok()
        .flatten()
        .and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
}
