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
//! ```
//!
//! windlass applies each component after the ones it depends on, verifies that it became
//! ready (the StatefulSet's pods, the Job's completion, the Deployment's rollout), writes
//! `Ready`/`Updating` conditions into the WebApp's status, and deletes the cache's objects
//! when `spec.cache.enabled` is switched off.

use std::collections::BTreeMap;

use futures::FutureExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource,
    EnvVar, EnvVarSource, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec,
    PodTemplateSpec, Secret, SecretKeySelector, Service, ServicePort, ServiceSpec, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use windlass::prelude::*;

// ─── The custom resource ────────────────────────────────────────────────────────────────

/// What a user asks for: a version of the web application, how many replicas, and
/// whether it gets a cache. `#[derive(CustomResource)]` makes the `WebApp` type and its
/// CRD; windlass writes the status.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.windlass.dev",
    version = "v1alpha1",
    kind = "WebApp",
    namespaced,
    status = "windlass::status::Status",
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
    pub replicas: i32,
    /// The database.
    #[serde(default)]
    pub database: DatabaseSpec,
    /// The optional cache.
    #[serde(default)]
    pub cache: CacheSpec,
    /// Feature flags for the web tier, passed as `FEATURE_FLAGS` (empty or absent: none).
    /// An `Option` because Kubernetes 1.20 refuses `default: ""` in a CRD schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_flags: Option<String>,
    /// Extra arguments for the web server.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra labels for the migration's pods.
    #[serde(default)]
    pub migration_labels: BTreeMap<String, String>,
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

// ─── The controller: which components, in which order ───────────────────────────────────

/// The WebApp controller.
pub struct WebAppController;

#[async_trait]
impl Controller for WebAppController {
    type Resource = WebApp;

    fn components(&self, session: &Session<WebApp>) -> Result<Components<WebApp>> {
        let spec = &session.cr().spec;
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

        graph.depends_on(database, credentials)?;
        // The migration needs a database that accepts connections, not just one that was
        // applied: it waits until the StatefulSet reports its pod ready. Likewise the new
        // web version waits until its migration has completed.
        graph.depends_on_when(migration, database, |s| {
            is_ready::<StatefulSet>(s, s.scoped_name("db")).boxed()
        })?;
        graph.depends_on_when(web, migration, |s| {
            is_ready::<Job>(s, migration_name(s)).boxed()
        })?;
        if spec.cache.enabled {
            graph.depends_on(web, cache)?;
        }
        Ok(graph)
    }

    // The default hooks and requeue policy suit this operator: it is requeued until the
    // status says Ready at the requested version.
}

/// Whether the live object of kind `K` and this name is ready by windlass's per-kind rule
/// (a StatefulSet's pods ready, a Job complete, …). Conditions on graph edges use it.
async fn is_ready<K>(session: &Session<WebApp>, name: String) -> Result<bool>
where
    K: k8s_openapi::Resource + serde::de::DeserializeOwned + Serialize,
{
    let live: Option<K> = session.get(&name).await?;
    Ok(live
        .and_then(|object| windlass::object::to_manifest(&object).ok())
        .is_some_and(|manifest| windlass::verify::verify_object(&manifest)))
}

/// The migration Job of the requested version: `<cr>-migrate-<version>`, with the version
/// made a valid name (lower case, `-` for anything else). Jobs are immutable, so each
/// version gets its own.
fn migration_name(session: &Session<WebApp>) -> String {
    let version: String = session
        .cr()
        .spec
        .version
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    session.scoped_name(&format!("migrate-{}", version.trim_matches('-')))
}

/// Labels shared by every object of one component of one WebApp.
fn labels(session: &Session<WebApp>, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "webapp".into()),
        ("app.kubernetes.io/instance".into(), session.name().into()),
        ("app.kubernetes.io/component".into(), component.into()),
        ("app.kubernetes.io/managed-by".into(), "windlass".into()),
    ])
}

fn meta(session: &Session<WebApp>, name: &str, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(session.scoped_name(name)),
        labels: Some(labels(session, component)),
        ..Default::default()
    }
}

fn pod_template(session: &Session<WebApp>, component: &str, spec: PodSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(session, component)),
            ..Default::default()
        }),
        spec: Some(spec),
    }
}

fn selector(session: &Session<WebApp>, component: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(session, component)),
        ..Default::default()
    }
}

fn service(
    session: &Session<WebApp>,
    name: &str,
    component: &str,
    port: i32,
    target: i32,
) -> Service {
    Service {
        metadata: meta(session, name, component),
        spec: Some(ServiceSpec {
            selector: Some(labels(session, component)),
            ports: Some(vec![ServicePort {
                port,
                target_port: Some(IntOrString::Int(target)),
                // Server-side apply keys service ports by port and protocol; spell the
                // default out, as servers before 1.22 refuse an apply without it.
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The database password, from the generated Secret.
fn password_env(session: &Session<WebApp>, var: &str) -> EnvVar {
    EnvVar {
        name: var.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: session.scoped_name("db-credentials"),
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
impl Component<WebApp> for Credentials {
    fn name(&self) -> &str {
        "credentials"
    }

    async fn render(&self, session: &Session<WebApp>, out: &mut Resources) -> Result<()> {
        let name = session.scoped_name("db-credentials");
        // Read the live Secret first: rendering must be repeatable, so a password that
        // exists is kept rather than regenerated on every reconcile.
        let existing: Option<Secret> = session.get(&name).await?;
        let password = existing
            .and_then(|s| s.data)
            .and_then(|data| data.get("password").cloned())
            .unwrap_or_else(|| ByteString(generate_password().into_bytes()));
        out.add(
            "secret",
            &Secret {
                metadata: meta(session, "db-credentials", "credentials"),
                // `data`, not `stringData`: the API server turns stringData into data, so
                // a manifest with stringData would never look applied.
                data: Some(BTreeMap::from([("password".to_string(), password)])),
                ..Default::default()
            },
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
impl Component<WebApp> for Database {
    fn name(&self) -> &str {
        "database"
    }

    async fn render(&self, session: &Session<WebApp>, out: &mut Resources) -> Result<()> {
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
        let service = out.add("service", &service(session, "db", "database", 5432, 5432))?;
        let statefulset = out.add(
            "statefulset",
            &StatefulSet {
                metadata: meta(session, "db", "database"),
                spec: StatefulSetSpec {
                    replicas: Some(1),
                    service_name: Some(session.scoped_name("db")),
                    selector: selector(session, "database"),
                    template: pod_template(
                        session,
                        "database",
                        PodSpec {
                            containers: vec![container],
                            ..Default::default()
                        },
                    ),
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

/// The schema migration of this version, as a Job (see [`migration_name`]).
struct Migration;

#[async_trait]
impl Component<WebApp> for Migration {
    fn name(&self) -> &str {
        "migration"
    }

    async fn render(&self, session: &Session<WebApp>, out: &mut Resources) -> Result<()> {
        let spec = &session.cr().spec;
        out.add(
            "job",
            &Job {
                metadata: ObjectMeta {
                    name: Some(migration_name(session)),
                    labels: Some(labels(session, "migration")),
                    ..Default::default()
                },
                spec: Some(JobSpec {
                    backoff_limit: Some(3),
                    template: PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(spec.migration_labels.clone()),
                            ..Default::default()
                        }),
                        spec: Some(PodSpec {
                            restart_policy: Some("OnFailure".into()),
                            containers: vec![Container {
                                name: "migrate".into(),
                                image: Some(format!("{}:{}", spec.image, spec.version)),
                                args: Some(vec!["migrate".into()]),
                                env: Some(vec![
                                    EnvVar {
                                        name: "DATABASE_HOST".into(),
                                        value: Some(session.scoped_name("db")),
                                        ..Default::default()
                                    },
                                    password_env(session, "DATABASE_PASSWORD"),
                                ]),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
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
impl Component<WebApp> for Web {
    fn name(&self) -> &str {
        "web"
    }

    async fn render(&self, session: &Session<WebApp>, out: &mut Resources) -> Result<()> {
        let spec = &session.cr().spec;
        let mut settings = BTreeMap::from([
            ("DATABASE_HOST".to_string(), session.scoped_name("db")),
            ("APP_VERSION".to_string(), spec.version.clone()),
        ]);
        if spec.cache.enabled {
            settings.insert(
                "CACHE_URL".into(),
                format!("redis://{}:6379", session.scoped_name("cache")),
            );
        }
        let config = out.add(
            "config",
            &ConfigMap {
                metadata: meta(session, "web", "web"),
                data: Some(settings),
                ..Default::default()
            },
        )?;
        let container = Container {
            name: "web".into(),
            image: Some(format!("{}:{}", spec.image, spec.version)),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: session.scoped_name("web"),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            args: Some(spec.args.clone()),
            env: Some(vec![
                password_env(session, "DATABASE_PASSWORD"),
                EnvVar {
                    name: "FEATURE_FLAGS".into(),
                    value: Some(spec.feature_flags.clone().unwrap_or_default()),
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
                metadata: meta(session, "web", "web"),
                spec: DeploymentSpec {
                    replicas: Some(spec.replicas),
                    selector: selector(session, "web"),
                    template: pod_template(
                        session,
                        "web",
                        PodSpec {
                            containers: vec![container],
                            volumes: Some(vec![Volume {
                                name: "tmp".into(),
                                empty_dir: Some(EmptyDirVolumeSource::default()),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        },
                    ),
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        out.depends_on(deployment, config)?;
        out.add("service", &service(session, "web", "web", 80, 8080))?;
        Ok(())
    }
}

/// Redis, when `spec.cache.enabled`.
struct Cache;

#[async_trait]
impl Component<WebApp> for Cache {
    fn name(&self) -> &str {
        "cache"
    }

    async fn render(&self, session: &Session<WebApp>, out: &mut Resources) -> Result<()> {
        out.add(
            "deployment",
            &Deployment {
                metadata: meta(session, "cache", "cache"),
                spec: DeploymentSpec {
                    replicas: Some(1),
                    selector: selector(session, "cache"),
                    template: pod_template(
                        session,
                        "cache",
                        PodSpec {
                            containers: vec![Container {
                                name: "redis".into(),
                                image: Some("redis:7".into()),
                                ports: Some(vec![ContainerPort {
                                    container_port: 6379,
                                    ..Default::default()
                                }]),
                                ..Default::default()
                            }],
                            ..Default::default()
                        },
                    ),
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        out.add("service", &service(session, "cache", "cache", 6379, 6379))?;
        Ok(())
    }
}
