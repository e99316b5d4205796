//! [`Harness`]: an in-memory cluster with a controller's CRD installed, its reconciler,
//! and the shortcuts tests drive it with; and the [`EventLog`] it records progress in.

use parking_lot::Mutex;
use std::sync::Arc;

use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::kinds::{TEST_NAMESPACE, cr_manifest};
use crate::cluster::{Cluster, Deletion, MemoryCluster, WriteMethod};
use crate::config::OperatorConfig;
use crate::controller::Controller;
use crate::events::MemoryEventSink;
use crate::object::ObjectRef;
use crate::progress::{Event, Observer};
use crate::reconcile::{Reconciler, Report};

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

    /// A harness whose reconciler talks to `cluster` (e.g. a
    /// [`FaultyCluster`](super::FaultyCluster) around `memory`), while the helpers read
    /// `memory` directly.
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
