//! Components: named groups of related objects that deploy, verify and disable together.
//!
//! A component renders typed Kubernetes objects into [`Resources`]; windlass does the rest:
//! patches, the internal-name annotation, owner references, applying in order, skipping
//! what is already as desired, deleting what a disabled component owned, and verifying
//! readiness per kind.
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use windlass::prelude::*;
//! # #[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema)]
//! # #[kube(group = "example.com", version = "v1", kind = "App", namespaced)]
//! # struct AppSpec { greeting: String }
//! # struct AppController;
//! # #[async_trait] impl Controller for AppController {
//! #     type Resource = App; type Config = NoConfig; type Status = Status;
//! #     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> { Ok(Components::new()) }
//! # }
//!
//! /// `<app>-settings`, named once.
//! const SETTINGS: Ref<ConfigMap> = Ref::new("settings");
//!
//! struct Settings;
//!
//! #[async_trait]
//! impl Component<AppController> for Settings {
//!     fn name(&self) -> &str {
//!         "settings"
//!     }
//!
//!     async fn render(&self, session: &Session<AppController>, out: &mut Resources) -> Result<()> {
//!         out.add("config", &ConfigMap {
//!             metadata: session.meta(SETTINGS),
//!             data: Some([("greeting".to_string(), session.cr().spec.greeting.clone())].into()),
//!             ..Default::default()
//!         })?;
//!         Ok(())
//!     }
//! }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, PodTemplateSpec, SeccompProfile,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Serialize;
use serde_json::Value;

use crate::dag::{Graph, NodeId};
use crate::error::{Error, Result};
use crate::object::{ManifestExt, to_manifest, value_to_manifest};
use crate::resource::ControllerTypes;
use crate::session::Session;
use crate::verify::Readiness;

pub use crate::managed::{ManagedObject, ResourceOptions, VerifyFn};

/// One unit of the rollout graph.
///
/// Only [`Component::name`] and [`Component::render`] are required. The default
/// [`Component::verify`] checks every rendered object with [`crate::verify`]'s per-kind
/// rules (Deployments available, Jobs complete, …) or its own verify function.
#[async_trait]
pub trait Component<C: ControllerTypes>: Send + Sync {
    /// The component's name, unique in the controller's graph. Rendered objects get the
    /// internal name `<component>.<resource>`.
    fn name(&self) -> &str;

    /// Add this component's objects to `out`. Called once per rollout; the verify phase
    /// reuses the result (a render that failed is tried again there).
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()>;

    /// Whether the deployed objects are ready: [`Readiness::Ready`], or
    /// [`Readiness::NotYet`] with what is not; an `Err` fails the component. The default
    /// checks each object by its kind's rule or its own verify function, naming the first
    /// one that is not ready; in dry-run it passes without looking.
    async fn verify(&self, session: &Session<C>, objects: &[ManagedObject]) -> Result<Readiness> {
        if session.dry_run() {
            return Ok(Readiness::Ready);
        }
        crate::verify::verify_objects(session.cluster(), objects).await
    }

    /// A last chance to edit each rendered manifest, after patches and annotations.
    fn update_object_definition(
        &self,
        _session: &Session<C>,
        _internal_name: &str,
        manifest: Value,
    ) -> Result<Value> {
        Ok(manifest)
    }
}

/// A component whose render is a plain function: what
/// [`Components::add_fn`](crate::controller::Components::add_fn) adds.
pub(crate) struct FnComponent<F> {
    pub(crate) name: String,
    pub(crate) render: F,
}

#[async_trait]
impl<C, F> Component<C> for FnComponent<F>
where
    C: ControllerTypes,
    F: Fn(&Session<C>, &mut Resources) -> Result<()> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }

    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        (self.render)(session, out)
    }
}

/// A resource added to [`Resources`], for declaring order between resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceId(NodeId);

/// The objects a component renders, with their order, and the labels of this
/// component's pods.
///
/// [`Component::render`] fills it. Objects are applied in the order their dependencies
/// ([`Resources::depends_on`]) and then their resource names give; the first that fails
/// stops the component.
///
/// ```
/// use std::collections::BTreeMap;
/// use k8s_openapi::ByteString;
/// use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
/// use k8s_openapi::api::core::v1::{Container, PodSpec, Secret, Service, ServiceSpec};
/// use windlass::prelude::*;
/// # use windlass::testing::Widget;
/// # struct App;
/// # #[async_trait]
/// # impl Controller for App {
/// #     type Resource = Widget;
/// #     type Config = NoConfig;
/// #     type Status = Status;
/// #     fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
/// #         let mut graph = Components::new();
/// #         graph.add(Cache)?;
/// #         Ok(graph)
/// #     }
/// # }
/// # fn random_password() -> String { format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()) }
///
/// const CACHE: Ref<Deployment> = Ref::new("cache");
/// const CACHE_PASSWORD: Ref<Secret> = CACHE.cast();
/// const CACHE_SERVICE: Ref<Service> = CACHE.cast();
///
/// struct Cache;
///
/// #[async_trait]
/// impl Component<App> for Cache {
///     fn name(&self) -> &str {
///         "cache"
///     }
///
///     async fn render(&self, session: &Session<App>, out: &mut Resources) -> Result<()> {
///         // Generated on the first reconcile and never overwritten: a fresh value is
///         // rendered every time, only the first one is written.
///         let password = out.add_with(
///             "password",
///             &Secret {
///                 metadata: session.meta(CACHE_PASSWORD),
///                 data: Some(BTreeMap::from([(
///                     "password".to_string(),
///                     ByteString(random_password().into_bytes()),
///                 )])),
///                 ..Default::default()
///             },
///             ResourceOptions::new().create_only(),
///         )?;
///         // The pods of this component, selected by its own labels.
///         let deployment = out.add("deployment", &Deployment {
///             metadata: session.meta(CACHE),
///             spec: DeploymentSpec {
///                 selector: out.selector(),
///                 template: out.pod_template(PodSpec {
///                     containers: vec![Container {
///                         name: "redis".into(),
///                         image: Some("redis:7".into()),
///                         ..Default::default()
///                     }],
///                     ..Default::default()
///                 }),
///                 ..Default::default()
///             },
///             ..Default::default()
///         })?;
///         out.add("service", &Service {
///             metadata: session.meta(CACHE_SERVICE),
///             spec: Some(ServiceSpec {
///                 selector: Some(out.pod_labels()),
///                 ..Default::default()
///             }),
///             ..Default::default()
///         })?;
///         // The pods read the Secret: it goes first.
///         out.depends_on(deployment, password)?;
///         Ok(())
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use serde_json::json;
/// use windlass::object::ObjectRef;
/// use windlass::testing::Harness;
///
/// let env = Harness::dry_run(App).await;
/// let cr = env.apply_cr("shop", json!({})).await;
/// env.reconcile(&cr).await;
/// let applied: Vec<String> = env.log.applied().into_iter().map(|o| o.name).collect();
/// assert_eq!(applied, ["shop-cache", "shop-cache", "shop-cache"]);
/// let kinds: Vec<String> = env.log.applied().into_iter().map(|o| o.kind).collect();
/// assert_eq!(kinds, ["Secret", "Deployment", "Service"]);
///
/// let secret = ObjectRef::new("v1", "Secret", Some("test"), "shop-cache");
/// let password = env.get(&secret).await.unwrap()["data"]["password"].clone();
/// env.log.clear();
/// env.reconcile(&cr).await;
/// assert!(env.log.applied().is_empty(), "nothing changed: nothing written");
/// assert_eq!(env.get(&secret).await.unwrap()["data"]["password"], password);
///
/// // The Service selects exactly the pods of the Deployment.
/// let service = env.get(&ObjectRef::new("v1", "Service", Some("test"), "shop-cache")).await.unwrap();
/// let deployment = env.get(&ObjectRef::new("apps/v1", "Deployment", Some("test"), "shop-cache")).await.unwrap();
/// assert_eq!(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"]);
/// # });
/// ```
pub struct Resources {
    component: String,
    cr: Arc<CrNames>,
    graph: Graph<(Value, ResourceOptions)>,
}

/// What every component's [`Resources`] take from the CR, made once per reconcile and
/// shared, not copied for each component.
#[derive(Debug)]
pub(crate) struct CrNames {
    /// The namespace objects default to.
    pub(crate) namespace: String,
    /// The primary's kind and the CR's name, for the standard labels.
    pub(crate) kind: String,
    pub(crate) instance: String,
}

impl CrNames {
    /// The session's CR's namespace (as [`Session::namespace`]), kind and name: made once
    /// per rollout, shared by every component's [`Resources`].
    pub(crate) fn of<C: crate::resource::ControllerTypes>(session: &Session<C>) -> Arc<Self> {
        Arc::new(CrNames {
            namespace: session.namespace().to_string(),
            kind: session.kind().to_string(),
            instance: session.name().to_string(),
        })
    }
}

impl Resources {
    /// The resources of `component` of the CR `cr`.
    pub(crate) fn new(component: &str, cr: Arc<CrNames>) -> Self {
        Resources {
            component: component.to_string(),
            cr,
            graph: Graph::new(),
        }
    }

    /// The labels of this component's pods: `app.kubernetes.io/name`, `instance` and
    /// `component` (see [`crate::annotations::labels`]). A Service selects with them.
    pub fn pod_labels(&self) -> BTreeMap<String, String> {
        crate::annotations::labels::selector(&self.cr.kind, &self.cr.instance, &self.component)
    }

    /// The label selector of this component's pods, for a Deployment, StatefulSet or
    /// DaemonSet; pair it with [`Resources::pod_template`].
    pub fn selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: Some(self.pod_labels()),
            ..Default::default()
        }
    }

    /// A pod template carrying this component's pod labels.
    pub fn pod_template(&self, spec: PodSpec) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(self.pod_labels()),
                ..Default::default()
            }),
            spec: Some(spec),
        }
    }

    /// Add a typed object (a k8s-openapi struct, a CR type) under a name unique in this
    /// component. `null` fields are dropped and the namespace defaults to the CR's. An
    /// object known only as JSON goes through [`Resources::add_value`].
    pub fn add<K>(&mut self, name: &str, object: &K) -> Result<ResourceId>
    where
        K: kube::Resource<DynamicType = ()> + Serialize,
    {
        self.add_with(name, object, ResourceOptions::default())
    }

    /// [`Resources::add`] with a custom verify function or write method.
    pub fn add_with<K>(
        &mut self,
        name: &str,
        object: &K,
        options: ResourceOptions,
    ) -> Result<ResourceId>
    where
        K: kube::Resource<DynamicType = ()> + Serialize,
    {
        self.insert(name, to_manifest(object), options)
    }

    /// Add an object given as JSON (a `json!` manifest, a `kube::core::DynamicObject`
    /// serialized, another operator's kind without a Rust type): it must name its
    /// `apiVersion` and `kind` itself. The manifest is moved in, not copied: pass a
    /// `clone()` of one you keep.
    pub fn add_value(&mut self, name: &str, manifest: Value) -> Result<ResourceId> {
        self.add_value_with(name, manifest, ResourceOptions::default())
    }

    /// [`Resources::add_value`] with a custom verify function or write method.
    pub fn add_value_with(
        &mut self,
        name: &str,
        manifest: Value,
        options: ResourceOptions,
    ) -> Result<ResourceId> {
        self.insert(name, value_to_manifest(manifest), options)
    }

    /// Add the object `manifest` (as [`to_manifest`] made it) under `name`.
    fn insert(
        &mut self,
        name: &str,
        manifest: Result<Value>,
        options: ResourceOptions,
    ) -> Result<ResourceId> {
        let mut manifest = manifest.map_err(|e| {
            Error::config(format!(
                "component \"{}\" resource \"{name}\": {e}",
                self.component
            ))
        })?;
        for (field, present) in [
            ("apiVersion", manifest.api_version().is_some()),
            ("kind", manifest.kind().is_some()),
            ("metadata.name", manifest.name().is_some()),
        ] {
            if !present {
                return Err(Error::config(format!(
                    "component \"{}\" resource \"{name}\" has no {field}",
                    self.component
                )));
            }
        }
        if manifest.namespace().is_none() {
            manifest
                .metadata_mut()
                .insert("namespace".into(), Value::String(self.cr.namespace.clone()));
        }
        self.graph
            .add_node(name, (manifest, options))
            .map(ResourceId)
            .map_err(|e| Error::config(format!("component \"{}\" resource: {e}", self.component)))
    }

    /// Apply `resource` only after `upstream` (within this component).
    pub fn depends_on(&mut self, resource: ResourceId, upstream: ResourceId) -> Result<()> {
        self.graph
            .add_dependency(resource.0, upstream.0, ())
            .map_err(|e| Error::config(format!("component \"{}\": {e}", self.component)))
    }

    /// Number of resources added.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }

    /// The resources in apply order (dependencies first, then by name) with their
    /// internal names `<component>.<resource>`.
    pub(crate) fn into_ordered(mut self) -> Vec<(String, Value, ResourceOptions)> {
        let order = self.graph.topology();
        order
            .into_iter()
            .map(|id| {
                let name = format!("{}.{}", self.component, self.graph.name(id));
                let (manifest, options) = std::mem::take(self.graph.data_mut(id));
                (name, manifest, options)
            })
            .collect()
    }
}

/// `spec` made to meet the `restricted` Pod Security Standard where it leaves a setting
/// open: the pod runs as non-root with the runtime's default seccomp profile, and every
/// container (init containers too) without privilege escalation and with every capability
/// dropped. What `spec` sets already is kept, so a choice made on purpose stands (and
/// admission judges it). Namespaces that enforce `restricted` refuse Pods without these
/// settings; a Deployment's Pods then never appear, with nothing in its status but a
/// `FailedCreate` on its ReplicaSet.
///
/// An image that starts as root needs a numeric non-root `run_as_user` besides; that is the
/// image's business, so it is left to the caller.
///
/// ```
/// use k8s_openapi::api::core::v1::{Container, PodSpec};
/// use windlass::component::restricted_pod;
///
/// let spec = restricted_pod(PodSpec {
///     containers: vec![Container { name: "web".into(), image: Some("nginx".into()), ..Default::default() }],
///     ..Default::default()
/// });
/// let pod = spec.security_context.unwrap_or_default();
/// assert_eq!(pod.run_as_non_root, Some(true));
/// let container = spec.containers[0].security_context.clone().unwrap_or_default();
/// assert_eq!(container.allow_privilege_escalation, Some(false));
/// ```
pub fn restricted_pod(mut spec: PodSpec) -> PodSpec {
    let pod = spec
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    pod.run_as_non_root.get_or_insert(true);
    pod.seccomp_profile.get_or_insert_with(|| SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    });
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for container in containers {
        restrict_container(container);
    }
    spec
}

fn restrict_container(container: &mut Container) {
    let security = container
        .security_context
        .get_or_insert_with(SecurityContext::default);
    security.allow_privilege_escalation.get_or_insert(false);
    security
        .capabilities
        .get_or_insert_with(Capabilities::default)
        .drop
        .get_or_insert_with(|| vec!["ALL".into()]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn names(namespace: &str, kind: &str, instance: &str) -> Arc<CrNames> {
        Arc::new(CrNames {
            namespace: namespace.into(),
            kind: kind.into(),
            instance: instance.into(),
        })
    }

    #[test]
    fn restricted_pod_sets_what_the_test_namespaces_enforce() {
        // windlass-testenv spells the same contexts out for fixtures; the two must agree.
        let spec = restricted_pod(PodSpec {
            containers: vec![Container::default()],
            ..Default::default()
        });
        assert_eq!(
            spec.security_context,
            Some(windlass_testenv::restricted_pod_security())
        );
        assert_eq!(
            spec.containers[0].security_context,
            Some(windlass_testenv::restricted_container_security())
        );
    }

    #[test]
    fn restricted_pod_fills_what_is_open_and_keeps_what_is_set() {
        let spec = restricted_pod(PodSpec {
            security_context: Some(PodSecurityContext {
                run_as_user: Some(999),
                run_as_non_root: Some(false),
                ..Default::default()
            }),
            init_containers: Some(vec![Container {
                name: "init".into(),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: "main".into(),
                security_context: Some(SecurityContext {
                    capabilities: Some(Capabilities {
                        add: Some(vec!["NET_BIND_SERVICE".into()]),
                        drop: Some(vec!["ALL".into()]),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        let pod = spec.security_context.clone().unwrap_or_default();
        assert_eq!(pod.run_as_user, Some(999));
        assert_eq!(
            pod.run_as_non_root,
            Some(false),
            "an explicit choice stands"
        );
        assert_eq!(
            pod.seccomp_profile.map(|p| p.type_).as_deref(),
            Some("RuntimeDefault")
        );
        let all: Vec<&Container> = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .collect();
        assert_eq!(all.len(), 2);
        for container in all {
            let security = container.security_context.clone().unwrap_or_default();
            assert_eq!(security.allow_privilege_escalation, Some(false));
            let capabilities = security.capabilities.unwrap_or_default();
            assert_eq!(capabilities.drop, Some(vec!["ALL".to_string()]));
        }
        let main = spec.containers[0]
            .security_context
            .clone()
            .unwrap_or_default();
        assert_eq!(
            main.capabilities.and_then(|c| c.add),
            Some(vec!["NET_BIND_SERVICE".to_string()])
        );
    }

    #[test]
    fn resources_default_the_namespace_and_drop_nulls() {
        let mut r = Resources::new("web", names("shop", "app", "a"));
        r.add_value(
            "config",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": null}}),
        )
        .unwrap();
        let ordered = r.into_ordered();
        assert_eq!(ordered[0].0, "web.config");
        assert_eq!(
            ordered[0].1,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "shop"}})
        );
    }

    #[test]
    fn typed_objects_get_their_type_meta() {
        let mut r = Resources::new("web", names("shop", "app", "a"));
        let cm = ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("a".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        r.add("config", &cm).unwrap();
        let ordered = r.into_ordered();
        assert_eq!(ordered[0].1.kind(), Some("ConfigMap"));
        assert_eq!(ordered[0].1.api_version(), Some("v1"));
    }

    #[test]
    fn bad_resources_are_config_errors_naming_the_component() {
        let mut r = Resources::new("web", names("shop", "app", "a"));
        let err = r.add_value("x", json!({"kind": "ConfigMap"})).unwrap_err();
        assert!(matches!(err, Error::Config(_)));
        assert!(
            err.to_string()
                .contains("component \"web\" resource \"x\" has no apiVersion"),
            "{err}"
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        r.add_value("dup", cm.clone()).unwrap();
        assert!(
            r.add_value("dup", cm.clone())
                .unwrap_err()
                .to_string()
                .contains("already exists")
        );
        assert!(r.add_value("", cm).is_err());
    }

    #[test]
    fn resource_order_follows_dependencies_then_names() {
        let mut r = Resources::new("db", names("ns", "app", "a"));
        let cm =
            |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}});
        let a = r.add_value("a", cm("a")).unwrap();
        let b = r.add_value("b", cm("b")).unwrap();
        r.depends_on(a, b).unwrap();
        assert!(r.depends_on(b, a).is_err(), "cycles are rejected");
        let names: Vec<String> = r.into_ordered().into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(names, ["db.b", "db.a"]);
    }
}
