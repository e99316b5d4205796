//! # The webapp operator
//!
//! A complete windlass operator, to be read top to bottom. One `WebApp` custom resource
//! becomes:
//!
//! ```text
//! credentials (Secret, generated once)
//!      │
//! database (StatefulSet + Service)          cache (Deployment + Service)   ← only when
//!      │  …and the database must be ready                │                    spec.cache.enabled
//! migration (Job for this version)                        │
//!      │  …and the migration must have completed          │
//! web (ConfigMap + Deployment + Service) ◀────────────────┘
//!      │  …and the web tier must be ready
//! monitoring (ConfigMap in another namespace)   ← only when spec.monitoring.namespace is set
//! ```
//!
//! windlass applies each component after the ones it depends on, verifies that it became
//! ready (the StatefulSet's pods, the Job's completion, the Deployment's rollout), writes
//! `Ready`/`Updating` conditions and the application's URL into the WebApp's status, and
//! deletes the cache's objects when `spec.cache.enabled` is switched off. The monitoring
//! target lives in another namespace, out of the garbage collector's reach: windlass
//! records it in the WebApp's status before it writes it, and deletes it with the WebApp.
//!
//! Every object name is declared once, as a typed [`Ref`] below; the standard
//! `app.kubernetes.io/*` labels and owner references are windlass's to stamp.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource,
    EnvVar, EnvVarSource, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext,
    PodSpec, PodTemplateSpec, Secret, SecretKeySelector, Service, ServicePort, ServiceSpec, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use windlass::component::restricted_pod;
use windlass::config::ConfigOverrides;
use windlass::prelude::*;

// ─── The custom resource ────────────────────────────────────────────────────────────────

/// What a user asks for: a version of the web application, how many replicas, and
/// whether it gets a cache. `#[derive(CustomResource)]` makes the `WebApp` type and its
/// CRD; windlass writes the status. `KubeSchema` puts the `#[x_kube(validation)]` rules in
/// the CRD: the API server refuses a WebApp that breaks one, and so does `run --dry-run`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, kube::KubeSchema)]
#[kube(
    group = "example.windlass.dev",
    version = "v1alpha1",
    kind = "WebApp",
    namespaced,
    status = "WebAppStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.webAppStatus"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WebAppSpec {
    /// The application version: the image tag, and the migration to run.
    pub version: String,
    /// The application image, without tag.
    pub image: String,
    /// Web replicas.
    #[serde(default = "default_replicas")]
    #[x_kube(validation = Rule::new("self >= 0").message("replicas must not be negative"))]
    pub replicas: i32,
    /// The database.
    #[serde(default)]
    pub database: DatabaseSpec,
    /// The optional cache.
    #[serde(default)]
    pub cache: CacheSpec,
    /// Where the cluster's monitoring finds the web tier (optional).
    #[serde(default)]
    pub monitoring: MonitoringSpec,
    /// Feature flags for the web tier, passed as `FEATURE_FLAGS` (empty: none).
    #[serde(default)]
    pub feature_flags: String,
    /// Extra arguments for the web server.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra labels for the migration's pods.
    #[serde(default)]
    pub migration_labels: BTreeMap<String, String>,
    /// Per-WebApp changes to the operator's [`WebAppConfig`].
    #[serde(default, skip_serializing_if = "ConfigOverrides::is_empty")]
    pub config_overrides: ConfigOverrides,
}

/// The WebApp's status: windlass's conditions and rollout summary, and where the
/// application answers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct WebAppStatus {
    /// Ready and Updating conditions, componentStatus, versions: written by windlass.
    #[serde(flatten)]
    pub windlass: windlass::status::Status,
    /// The web tier's in-cluster URL, once its Service is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The operator's backend config: these defaults, then the ConfigMap named by the
/// `windlass.dev/config-defaults` annotation, then `spec.configOverrides`.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct WebAppConfig {
    /// The cache's image.
    pub cache_image: String,
    /// How often the migration Job retries before it fails.
    pub migration_backoff_limit: i32,
}

impl Default for WebAppConfig {
    fn default() -> Self {
        WebAppConfig {
            cache_image: "redis:7".into(),
            migration_backoff_limit: 3,
        }
    }
}

fn default_replicas() -> i32 {
    2
}

/// The PostgreSQL database of a WebApp.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
pub struct DatabaseSpec {
    /// The PostgreSQL image.
    #[serde(default = "default_postgres")]
    pub image: String,
    /// The size of its volume.
    #[serde(default = "default_storage")]
    pub storage: String,
}

impl Default for DatabaseSpec {
    fn default() -> Self {
        DatabaseSpec {
            image: default_postgres(),
            storage: default_storage(),
        }
    }
}

fn default_postgres() -> String {
    "postgres:16".into()
}
fn default_storage() -> String {
    "1Gi".into()
}

/// The optional Redis cache of a WebApp.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct CacheSpec {
    /// Whether the cache runs.
    #[serde(default)]
    pub enabled: bool,
}

/// Where Prometheus finds a WebApp's web tier.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct MonitoringSpec {
    /// The namespace of the ConfigMaps Prometheus reads its file-based discovery targets
    /// from (none: the web tier is not announced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

// ─── The objects, each named once ───────────────────────────────────────────────────────

/// The generated database password: `<webapp>-db-credentials`.
const CREDENTIALS: Ref<Secret> = Ref::new("db-credentials");
/// The database and its governing Service: `<webapp>-db`.
const DATABASE: Ref<StatefulSet> = Ref::new("db");
const DATABASE_SERVICE: Ref<Service> = DATABASE.cast();
/// The web tier, its settings and its Service: `<webapp>-web`.
const WEB: Ref<Deployment> = Ref::new("web");
const WEB_SETTINGS: Ref<ConfigMap> = WEB.cast();
const WEB_SERVICE: Ref<Service> = WEB.cast();
/// The cache and its Service: `<webapp>-cache`.
const CACHE: Ref<Deployment> = Ref::new("cache");
const CACHE_SERVICE: Ref<Service> = CACHE.cast();

// ─── The controller: which components, in which order ───────────────────────────────────

/// The WebApp controller.
pub struct WebAppController;

#[async_trait]
impl Controller for WebAppController {
    type Resource = WebApp;
    type Config = WebAppConfig;
    type Status = WebAppStatus;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let spec = &session.cr().spec;
        // The CRD's rule refuses this already; a CR stored before the rule existed is not
        // rechecked by the server until it changes.
        if spec.replicas < 0 {
            return Err(Error::config("spec.replicas must not be negative"));
        }
        let mut graph = Components::new();
        let credentials = graph.add(Credentials)?;
        let database = graph.add(Database)?;
        let migration = graph.add(Migration)?;
        let web = graph.add(Web)?;
        // A disabled component is rendered and its objects deleted, so switching the
        // cache off cleans up after it.
        let cache = graph.add_enabled(Cache, spec.cache.enabled)?;
        let monitoring = graph.add_enabled(Monitoring, spec.monitoring.namespace.is_some())?;

        graph.depends_on(database, credentials)?;
        // The migration needs a database that accepts connections, not just one that was
        // applied: it waits until the database component verifies (its StatefulSet's pod
        // is ready). Likewise the new web version waits until its migration completed.
        graph.depends_on_ready(migration, database)?;
        graph.depends_on_ready(web, migration)?;
        if spec.cache.enabled {
            graph.depends_on(web, cache)?;
        }
        // Announced once it answers.
        if spec.monitoring.namespace.is_some() {
            graph.depends_on_ready(monitoring, web)?;
        }
        Ok(graph)
    }

    // The default hooks and requeue policy suit this operator: it is requeued until the
    // status says Ready at the requested version.
}

/// A Service in front of the component's pods.
fn service(
    session: &Session<WebAppController>,
    out: &Resources,
    name: Ref<Service>,
    port: i32,
    target: i32,
) -> Service {
    Service {
        metadata: session.meta(name),
        spec: Some(ServiceSpec {
            selector: Some(out.pod_labels()),
            ports: Some(vec![ServicePort {
                port,
                target_port: Some(IntOrString::Int(target)),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Run as the image's own non-root user (and group, which also owns mounted volumes) instead
/// of root, as namespaces enforcing the `restricted` Pod Security Standard require.
fn image_user(id: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(id),
        run_as_group: Some(id),
        fs_group: Some(id),
        ..Default::default()
    }
}

/// The database password, from the generated Secret.
fn password_env(session: &Session<WebAppController>, var: &str) -> EnvVar {
    EnvVar {
        name: var.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: session.name_of(CREDENTIALS),
                key: "password".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

// ─── The components ─────────────────────────────────────────────────────────────────────

/// The database password, generated on the first reconcile and kept afterwards.
struct Credentials;

#[async_trait]
impl Component<WebAppController> for Credentials {
    fn name(&self) -> &str {
        "credentials"
    }

    async fn render(&self, session: &Session<WebAppController>, out: &mut Resources) -> Result<()> {
        // Create-only: a fresh password is rendered every time, and only the first one
        // is ever written. Nothing reads it back.
        let password = ByteString(generate_password().into_bytes());
        out.add_with(
            "secret",
            &Secret {
                metadata: session.meta(CREDENTIALS),
                // `data`, not `stringData`: the API server turns stringData into data.
                data: Some(BTreeMap::from([("password".to_string(), password)])),
                ..Default::default()
            },
            ResourceOptions::new().create_only(),
        )?;
        Ok(())
    }
}

fn generate_password() -> String {
    const CHARS: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    (0..24)
        .map(|_| CHARS[rand::random_range(0..CHARS.len())] as char)
        .collect()
}

/// PostgreSQL: a StatefulSet with a volume, and its Service.
struct Database;

#[async_trait]
impl Component<WebAppController> for Database {
    fn name(&self) -> &str {
        "database"
    }

    async fn render(&self, session: &Session<WebAppController>, out: &mut Resources) -> Result<()> {
        let db = &session.cr().spec.database;
        let storage = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".into(),
                        Quantity(db.storage.clone()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let container = Container {
            name: "postgres".into(),
            image: Some(db.image.clone()),
            env: Some(vec![password_env(session, "POSTGRES_PASSWORD")]),
            ports: Some(vec![ContainerPort {
                container_port: 5432,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".into(),
                mount_path: "/var/lib/postgresql/data".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let service = out.add(
            "service",
            &service(session, out, DATABASE_SERVICE, 5432, 5432),
        )?;
        let statefulset = out.add(
            "statefulset",
            &StatefulSet {
                metadata: session.meta(DATABASE),
                spec: StatefulSetSpec {
                    replicas: Some(1),
                    service_name: Some(session.name_of(DATABASE_SERVICE)),
                    selector: out.selector(),
                    // The postgres image starts as root unless told its user (999);
                    // `restricted` namespaces refuse root.
                    template: out.pod_template(restricted_pod(PodSpec {
                        containers: vec![container],
                        security_context: Some(image_user(999)),
                        ..Default::default()
                    })),
                    volume_claim_templates: Some(vec![storage]),
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        // The StatefulSet names its governing Service, so the Service goes first.
        out.depends_on(statefulset, service)?;
        Ok(())
    }
}

/// The schema migration of this version, as a Job: `<webapp>-migrate-<version>`, the
/// version made a valid name. Jobs are immutable, so each version gets its own.
struct Migration;

#[async_trait]
impl Component<WebAppController> for Migration {
    fn name(&self) -> &str {
        "migration"
    }

    async fn render(&self, session: &Session<WebAppController>, out: &mut Resources) -> Result<()> {
        let spec = &session.cr().spec;
        let version: String = spec
            .version
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        out.add(
            "job",
            &Job {
                metadata: ObjectMeta {
                    name: Some(
                        session.scoped_name(&format!("migrate-{}", version.trim_matches('-'))),
                    ),
                    ..Default::default()
                },
                spec: Some(JobSpec {
                    backoff_limit: Some(session.config().migration_backoff_limit),
                    template: PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(spec.migration_labels.clone()),
                            ..Default::default()
                        }),
                        spec: Some(restricted_pod(PodSpec {
                            restart_policy: Some("OnFailure".into()),
                            containers: vec![Container {
                                name: "migrate".into(),
                                image: Some(format!("{}:{}", spec.image, spec.version)),
                                args: Some(vec!["migrate".into()]),
                                env: Some(vec![
                                    EnvVar {
                                        name: "DATABASE_HOST".into(),
                                        value: Some(session.name_of(DATABASE_SERVICE)),
                                        ..Default::default()
                                    },
                                    password_env(session, "DATABASE_PASSWORD"),
                                ]),
                                ..Default::default()
                            }],
                            ..Default::default()
                        })),
                    },
                    ..Default::default()
                }),
                ..Default::default()
            },
        )?;
        Ok(())
    }
}

/// The web tier: its settings, its Deployment and its Service.
struct Web;

#[async_trait]
impl Component<WebAppController> for Web {
    fn name(&self) -> &str {
        "web"
    }

    async fn render(&self, session: &Session<WebAppController>, out: &mut Resources) -> Result<()> {
        let spec = &session.cr().spec;
        let mut settings = BTreeMap::from([
            (
                "DATABASE_HOST".to_string(),
                session.name_of(DATABASE_SERVICE),
            ),
            ("APP_VERSION".to_string(), spec.version.clone()),
        ]);
        if spec.cache.enabled {
            settings.insert(
                "CACHE_URL".into(),
                format!("redis://{}:6379", session.name_of(CACHE_SERVICE)),
            );
        }
        let config = out.add(
            "config",
            &ConfigMap {
                metadata: session.meta(WEB_SETTINGS),
                data: Some(settings),
                ..Default::default()
            },
        )?;
        let container = Container {
            name: "web".into(),
            image: Some(format!("{}:{}", spec.image, spec.version)),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: session.name_of(WEB_SETTINGS),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            args: Some(spec.args.clone()),
            env: Some(vec![
                password_env(session, "DATABASE_PASSWORD"),
                EnvVar {
                    name: "FEATURE_FLAGS".into(),
                    value: Some(spec.feature_flags.clone()),
                    ..Default::default()
                },
            ]),
            ports: Some(vec![ContainerPort {
                container_port: 8080,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            // Writable scratch space.
            volume_mounts: Some(vec![VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                read_only: Some(false),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let deployment = out.add(
            "deployment",
            &Deployment {
                metadata: session.meta(WEB),
                spec: DeploymentSpec {
                    replicas: Some(spec.replicas),
                    selector: out.selector(),
                    template: out.pod_template(restricted_pod(PodSpec {
                        containers: vec![container],
                        volumes: Some(vec![Volume {
                            name: "tmp".into(),
                            empty_dir: Some(EmptyDirVolumeSource::default()),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        out.depends_on(deployment, config)?;
        out.add("service", &service(session, out, WEB_SERVICE, 80, 8080))?;
        let url = format!(
            "http://{}.{}.svc",
            session.name_of(WEB_SERVICE),
            session.namespace()
        );
        session.update_status(|status| status.url = Some(url));
        Ok(())
    }
}

/// Redis, when `spec.cache.enabled`.
struct Cache;

#[async_trait]
impl Component<WebAppController> for Cache {
    fn name(&self) -> &str {
        "cache"
    }

    async fn render(&self, session: &Session<WebAppController>, out: &mut Resources) -> Result<()> {
        out.add(
            "deployment",
            &Deployment {
                metadata: session.meta(CACHE),
                spec: DeploymentSpec {
                    replicas: Some(1),
                    selector: out.selector(),
                    template: out.pod_template(restricted_pod(PodSpec {
                        containers: vec![Container {
                            name: "redis".into(),
                            image: Some(session.config().cache_image.clone()),
                            ports: Some(vec![ContainerPort {
                                container_port: 6379,
                                ..Default::default()
                            }]),
                            ..Default::default()
                        }],
                        // The redis image's user; it starts as root otherwise.
                        security_context: Some(image_user(999)),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        out.add("service", &service(session, out, CACHE_SERVICE, 6379, 6379))?;
        Ok(())
    }
}

/// The web tier's scrape target, announced in the monitoring namespace when
/// `spec.monitoring.namespace` names one. That namespace is not the WebApp's, so the
/// WebApp cannot own the ConfigMap and deleting it does not collect it: windlass records the
/// ConfigMap before writing it and deletes it with the WebApp.
struct Monitoring;

#[async_trait]
impl Component<WebAppController> for Monitoring {
    fn name(&self) -> &str {
        "monitoring"
    }

    async fn render(&self, session: &Session<WebAppController>, out: &mut Resources) -> Result<()> {
        let Some(namespace) = &session.cr().spec.monitoring.namespace else {
            return Ok(());
        };
        // One file per WebApp, named after its namespace too: WebApps of the same name in
        // two namespaces announce into the same one.
        let name = format!("{}-{}", session.namespace(), session.name_of(WEB_SERVICE));
        let target = format!(
            "{}.{}.svc:80",
            session.name_of(WEB_SERVICE),
            session.namespace()
        );
        let targets = serde_json::json!([{
            "targets": [target],
            "labels": {"namespace": session.namespace(), "webapp": session.name()},
        }]);
        out.add(
            "targets",
            &ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(name),
                    namespace: Some(namespace.clone()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "targets.json".to_string(),
                    targets.to_string(),
                )])),
                ..Default::default()
            },
        )?;
        Ok(())
    }
}
