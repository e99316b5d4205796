//! # The notes operator
//!
//! A small web app that keeps notes in PostgreSQL, and the operator that runs it: the
//! third example, after `examples/webapp` and `examples/backup`, showing windlass-x's
//! datastore connections and TLS context. One `Notes` custom resource becomes the app's
//! Deployment and, unless the CR names a database of its own, the database:
//!
//! ```text
//! CR gives spec.datastores.postgres.connection        CR gives none
//! ───────────────────────────────────────────         ─────────────────────────────────
//!                                                      internal-tls (CA Secret, pair Secret)
//!                                                            │
//!                                                      postgres (StatefulSet, Service,
//!                                                            │   password Secret)
//!   app (Deployment)                                   app (Deployment)
//! ```
//!
//! - **Where the connection comes from** is windlass-x's [`Datastores`] registry: the CR's
//!   `spec.datastores.postgres.connection` (hostname, port, the Secret with the username and
//!   password, optionally the Secret with the CA certificate) when it gives one, otherwise
//!   the component the operator deploys ([`PostgresServer`], a windlass-x [`Datastore`]),
//!   chosen by the backend config's `postgres.type` ([`POSTGRES_TYPE`]). The app component
//!   asks for "the Postgres connection" and does not care which.
//! - **TLS**: the deployed Postgres serves a certificate from windlass-x's internal TLS
//!   context (`tls.type: internal` in the config defaults): a per-CR CA in a Secret and a
//!   server pair for the Service's DNS names. The app verifies it (`sslmode=verify-full`)
//!   against the CA, mounted from the pair's Secret (its `ca.crt` only, never the key).
//! - **The app's Deployment** gets the connection as libpq environment variables
//!   (`PGHOST`, `PGPORT`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`, and `PGUSER` /
//!   `PGPASSWORD` by reference to the Secret: no password is ever in a manifest) and
//!   is rendered with [`ResourceOptions::restart_on_dependency_change`]: a rotated password or
//!   certificate changes the pod template's dependency hash, and the pods roll.
//! - **Bad input** (a connection missing a key, a port that is no port) is a config error
//!   from windlass-x naming the key, which windlass turns into `Ready=False` with reason
//!   `ConfigError` and that message.
//!
//! ## Try it
//!
//! ```text
//! cargo run -p notes-operator -- run --dry-run examples/notes/notes.yaml   # the rollout, in memory
//! cargo run -p notes-operator -- crds                                      # the Notes CRD
//! cargo test -p notes-operator                                             # all its tests
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PodSecurityContext, PodSpec, Secret, SecretKeySelector,
    SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use windlass::component::restricted_pod;
use windlass::config::ConfigOverrides;
use windlass::object::ObjectRef;
use windlass::prelude::*;
use windlass_x::datastore::postgres::{PostgresConnection, TLS_FILE_MODE};
use windlass_x::datastore::spec::{CredentialSecret, TlsSecret};
use windlass_x::datastore::{Datastore, Datastores};
use windlass_x::tls::{CertRequest, Tls, TlsConfig, TlsRegistry};

// ─── The custom resource ────────────────────────────────────────────────────────────────

/// A notes app and the database it keeps its notes in.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.windlass.dev",
    version = "v1alpha1",
    kind = "Notes",
    namespaced,
    status = "Status"
)]
#[serde(rename_all = "camelCase")]
pub struct NotesSpec {
    /// How many app pods to run.
    #[serde(default = "default_replicas")]
    pub replicas: i32,
    /// The database the app uses (`PGDATABASE`); the deployed Postgres creates it.
    #[serde(default = "default_database")]
    pub database: String,
    /// The datastores the app uses. Without `postgres.connection`, the operator deploys
    /// Postgres itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datastores: Option<DatastoresSpec>,
    /// Per-Notes changes to the operator's [`NotesConfig`].
    #[serde(default, skip_serializing_if = "ConfigOverrides::is_empty")]
    pub config_overrides: ConfigOverrides,
}

fn default_replicas() -> i32 {
    1
}
fn default_database() -> String {
    "notes".into()
}

/// `spec.datastores`: what windlass-x's registry reads, typed here for the CRD's schema.
/// Every key is optional in the schema, so that windlass-x checks them and names what is
/// missing or malformed in the status, instead of the API server refusing the CR.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct DatastoresSpec {
    /// The Postgres database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresSpec>,
}

/// `spec.datastores.postgres`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct PostgresSpec {
    /// How to reach an existing database; without it the operator deploys one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<PostgresConnectionSpec>,
}

/// `spec.datastores.postgres.connection`: an external database (windlass-x's connection
/// keys).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresConnectionSpec {
    /// The database's host name or address. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Its port, a number or a string of digits. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<IntOrString>,
    /// The Secret holding the username and password. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret_name: Option<String>,
    /// Its key holding the username. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret_username_field: Option<String>,
    /// Its key holding the password. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret_password_field: Option<String>,
    /// The Secret holding the CA certificate the server's certificate chains to: with it
    /// the app connects with `sslmode=verify-full`, without it in plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_name: Option<String>,
    /// Its key holding the PEM CA certificate (with `tlsSecretName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_cert_field: Option<String>,
}

// ─── The backend config ─────────────────────────────────────────────────────────────────

/// The label [`PostgresServer`] is registered under: the backend config's `postgres.type`.
pub const POSTGRES_TYPE: &str = "statefulset";

/// The operator's backend config: these defaults, then the ConfigMap named by the CR's
/// `windlass.dev/config-defaults` annotation, then `spec.configOverrides`.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct NotesConfig {
    /// The app's image.
    pub image: String,
    /// The Postgres the operator deploys when the CR names none.
    pub postgres: PostgresConfig,
    /// Where the deployed Postgres's certificate comes from (windlass-x's `tls` section).
    pub tls: TlsConfig,
}

impl Default for NotesConfig {
    fn default() -> Self {
        NotesConfig {
            image: "ghcr.io/example/notes:1.0".into(),
            postgres: PostgresConfig::default(),
            tls: TlsConfig::internal(),
        }
    }
}

/// The backend config's `postgres` section.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PostgresConfig {
    /// Which registered implementation deploys it ([`POSTGRES_TYPE`]).
    #[serde(rename = "type")]
    pub type_: String,
    /// The server's image.
    pub image: String,
    /// The size of its data volume.
    pub storage_size: String,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            type_: POSTGRES_TYPE.into(),
            image: "docker.io/library/postgres:16".into(),
            storage_size: "1Gi".into(),
        }
    }
}

// ─── The objects, each named once ───────────────────────────────────────────────────────

/// The app: `<notes>-app`.
pub const APP: Ref<Deployment> = Ref::new("app");
/// The deployed Postgres: `<notes>-postgres`, also its Service's name.
pub const POSTGRES: Ref<StatefulSet> = Ref::new("postgres");
/// Its Service.
pub const POSTGRES_SERVICE: Ref<Service> = Ref::new("postgres");
/// Its generated credentials: `<notes>-postgres-auth`, keys [`USERNAME`] and [`PASSWORD`].
pub const POSTGRES_AUTH: Ref<Secret> = Ref::new("postgres-auth");
/// The username key of [`POSTGRES_AUTH`].
pub const USERNAME: &str = "username";
/// The password key of [`POSTGRES_AUTH`].
pub const PASSWORD: &str = "password";
/// The user the deployed Postgres is created with.
pub const POSTGRES_USER: &str = "notes";
/// The port Postgres listens on.
pub const POSTGRES_PORT: u16 = 5432;
/// Where the Postgres pod mounts its key and certificate.
const SERVER_TLS_DIR: &str = "/tls";

// ─── The controller ─────────────────────────────────────────────────────────────────────

/// The Notes controller. Create it with [`NotesController::new`] (or `default`).
pub struct NotesController {
    /// Where the Postgres connection comes from: the CR, or the registered implementation
    /// of `postgres.type` (a [`PostgresServer`]).
    datastores: Datastores<NotesController>,
    /// The TLS contexts `tls.type` can name (`internal`).
    tls: TlsRegistry<NotesController>,
    /// The TLS handle of each CR's current reconcile, for its [`PostgresServer`].
    handles: TlsHandles,
}

/// The TLS handle each CR's reconcile made, for the [`PostgresServer`] the registry builds
/// (its builder sees the backend config, not the session). A CR has one reconcile in flight
/// at a time, so one entry per CR is enough; one entry per CR seen while the operator runs.
#[derive(Clone, Default)]
struct TlsHandles(Arc<Mutex<HashMap<ObjectRef, Tls<NotesController>>>>);

impl TlsHandles {
    fn set(&self, session: &Session<NotesController>, tls: Tls<NotesController>) {
        self.lock().insert(session.cr_ref(), tls);
    }

    fn get(&self, session: &Session<NotesController>) -> Result<Tls<NotesController>> {
        self.lock().get(&session.cr_ref()).cloned().ok_or_else(|| {
            Error::config(
                "no TLS context was made for this reconcile (NotesController::components)",
            )
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectRef, Tls<NotesController>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl NotesController {
    /// A controller with [`PostgresServer`] registered under [`POSTGRES_TYPE`].
    pub fn new() -> Self {
        let controller = NotesController {
            datastores: Datastores::new(),
            tls: TlsRegistry::new(),
            handles: TlsHandles::default(),
        };
        let handles = controller.handles.clone();
        controller
            .datastores
            .register(POSTGRES_TYPE, move |_config| {
                Ok(PostgresServer {
                    handles: handles.clone(),
                })
            });
        controller
    }
}

impl Default for NotesController {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Controller for NotesController {
    type Resource = Notes;
    type Config = NotesConfig;
    type Status = Status;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let spec = &session.cr().spec;
        if spec.replicas < 0 {
            return Err(Error::config(format!(
                "spec.replicas must not be negative, got {}",
                spec.replicas
            )));
        }
        if spec.database.trim().is_empty() {
            return Err(Error::config("spec.database must name a database"));
        }
        let mut graph = Components::new();
        // `None` when the CR gives the connection: nothing to deploy.
        let database = self
            .datastores
            .add_component::<PostgresConnection>(session, &mut graph, None)?;
        let app = graph.add(App {
            datastores: self.datastores.clone(),
        })?;
        if let Some(database) = database {
            // The deployed Postgres serves a certificate from the TLS context `tls.type`
            // names; the context adds its CA component, which the server now waits for.
            let tls = self.tls.context(session, &mut graph)?;
            tls.request(
                &mut graph,
                database,
                None,
                CertRequest::new().dns_names(postgres_dns_names(session)),
            )?;
            self.handles.set(session, tls);
            graph.depends_on(app, database)?;
        }
        Ok(graph)
    }
}

/// The names the deployed Postgres is reached by: its Service, short and qualified. The
/// connection uses `<service>.<namespace>.svc`.
fn postgres_dns_names(session: &Session<NotesController>) -> Vec<String> {
    let service = session.name_of(POSTGRES_SERVICE);
    let namespace = session.namespace();
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service,
    ]
}

// ─── The app ────────────────────────────────────────────────────────────────────────────

/// The notes app: a Deployment that reaches Postgres as the connection says.
struct App {
    datastores: Datastores<NotesController>,
}

#[async_trait]
impl Component<NotesController> for App {
    fn name(&self) -> &str {
        "app"
    }

    async fn render(&self, session: &Session<NotesController>, out: &mut Resources) -> Result<()> {
        // From the CR or from the deployed component, whichever the registry has: a
        // config error naming the key when the CR's section is incomplete.
        let db = self
            .datastores
            .connection::<PostgresConnection>(session, None)
            .await?;
        let spec = &session.cr().spec;
        let mut env = db.env(&db.tls_cert_path().unwrap_or_default());
        env.push(EnvVar {
            name: "PGDATABASE".into(),
            value: Some(spec.database.clone()),
            ..Default::default()
        });
        let container = Container {
            name: "notes".into(),
            image: Some(session.config().image.clone()),
            env: Some(env),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            volume_mounts: Some(db.tls_volume_mounts()),
            ..Default::default()
        };
        out.add_with(
            "deployment",
            &Deployment {
                metadata: session.meta(APP),
                spec: DeploymentSpec {
                    replicas: Some(spec.replicas),
                    selector: out.selector(),
                    template: out.pod_template(restricted_pod(PodSpec {
                        containers: vec![container],
                        volumes: Some(db.tls_volumes()),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                ..Default::default()
            },
            // A new password or CA in the Secrets the pods read rolls them.
            ResourceOptions::new().restart_on_dependency_change(),
        )?;
        Ok(())
    }
}

// ─── The Postgres the operator deploys ──────────────────────────────────────────────────

/// Postgres as a StatefulSet with a Service, a generated password and a server certificate
/// from the TLS context: the windlass-x [`Datastore`] registered as [`POSTGRES_TYPE`].
pub struct PostgresServer {
    handles: TlsHandles,
}

#[async_trait]
impl Component<NotesController> for PostgresServer {
    fn name(&self) -> &str {
        "postgres"
    }

    async fn render(&self, session: &Session<NotesController>, out: &mut Resources) -> Result<()> {
        let config = &session.config().postgres;
        let pair = self
            .handles
            .get(session)?
            .pair_secret(session, self.name(), None)
            .ok_or_else(|| Error::config("no TLS pair was requested for postgres"))?;

        // Generated once: every render makes a new password, only the first is kept.
        let password: String = rand::random::<[u8; 24]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.add_with(
            "auth",
            &Secret {
                metadata: session.meta(POSTGRES_AUTH),
                data: Some(BTreeMap::from([
                    (USERNAME.to_string(), ByteString(POSTGRES_USER.into())),
                    (PASSWORD.to_string(), ByteString(password.into_bytes())),
                ])),
                ..Default::default()
            },
            ResourceOptions::new().create_only(),
        )?;

        out.add(
            "service",
            &Service {
                metadata: session.meta(POSTGRES_SERVICE),
                spec: Some(ServiceSpec {
                    selector: Some(out.pod_labels()),
                    ports: Some(vec![ServicePort {
                        name: Some("postgres".into()),
                        port: POSTGRES_PORT.into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )?;

        let auth = session.name_of(POSTGRES_AUTH);
        let from_secret = |name: &str, key: &str| EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: auth.clone(),
                    key: key.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let plain = |name: &str, value: String| EnvVar {
            name: name.into(),
            value: Some(value),
            ..Default::default()
        };
        let container = Container {
            name: "postgres".into(),
            image: Some(config.image.clone()),
            args: Some(
                [
                    "-c",
                    "ssl=on",
                    "-c",
                    &format!("ssl_cert_file={SERVER_TLS_DIR}/{}", pair.cert),
                    "-c",
                    &format!("ssl_key_file={SERVER_TLS_DIR}/{}", pair.key),
                ]
                .map(String::from)
                .to_vec(),
            ),
            env: Some(vec![
                from_secret("POSTGRES_USER", USERNAME),
                from_secret("POSTGRES_PASSWORD", PASSWORD),
                plain("POSTGRES_DB", session.cr().spec.database.clone()),
                plain("PGDATA", "/var/lib/postgresql/data/pgdata".into()),
            ]),
            ports: Some(vec![ContainerPort {
                name: Some("postgres".into()),
                container_port: POSTGRES_PORT.into(),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "data".into(),
                    mount_path: "/var/lib/postgresql/data".into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "tls".into(),
                    mount_path: SERVER_TLS_DIR.into(),
                    read_only: Some(true),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        out.add_with(
            "statefulset",
            &StatefulSet {
                metadata: session.meta(POSTGRES),
                spec: StatefulSetSpec {
                    service_name: Some(session.name_of(POSTGRES_SERVICE)),
                    replicas: Some(1),
                    selector: out.selector(),
                    template: out.pod_template(restricted_pod(PodSpec {
                        containers: vec![container],
                        // The postgres image's user and group (999) instead of root, which
                        // `restricted` namespaces refuse. Postgres accepts a root-owned key
                        // readable by its group (0440), the group being that one.
                        security_context: Some(PodSecurityContext {
                            run_as_user: Some(999),
                            run_as_group: Some(999),
                            fs_group: Some(999),
                            ..Default::default()
                        }),
                        volumes: Some(vec![Volume {
                            name: "tls".into(),
                            secret: Some(SecretVolumeSource {
                                secret_name: Some(pair.name.clone()),
                                default_mode: Some(TLS_FILE_MODE),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    })),
                    volume_claim_templates: Some(vec![PersistentVolumeClaim {
                        metadata: ObjectMeta {
                            name: Some("data".into()),
                            ..Default::default()
                        },
                        spec: Some(PersistentVolumeClaimSpec {
                            access_modes: Some(vec!["ReadWriteOnce".into()]),
                            resources: Some(VolumeResourceRequirements {
                                requests: Some(BTreeMap::from([(
                                    "storage".into(),
                                    Quantity(config.storage_size.clone()),
                                )])),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                ..Default::default()
            },
            // A renewed certificate (or a new CA) restarts the server with it.
            ResourceOptions::new().restart_on_dependency_change(),
        )?;
        Ok(())
    }
}

#[async_trait]
impl Datastore<NotesController> for PostgresServer {
    type Connection = PostgresConnection;

    /// The Service's qualified name, the generated Secret, and verify-full against the CA
    /// kept in the server pair's Secret (`ca.crt`).
    async fn connection(&self, session: &Session<NotesController>) -> Result<PostgresConnection> {
        let pair = self
            .handles
            .get(session)?
            .pair_secret(session, self.name(), None)
            .ok_or_else(|| Error::config("no TLS pair was requested for postgres"))?;
        let ca = pair.ca.ok_or_else(|| {
            Error::config(format!(
                "the TLS context keeps no CA certificate in Secret {}",
                pair.name
            ))
        })?;
        let host = format!(
            "{}.{}.svc",
            session.name_of(POSTGRES_SERVICE),
            session.namespace()
        );
        let auth = CredentialSecret {
            secret_name: session.name_of(POSTGRES_AUTH),
            first_field: USERNAME.into(),
            second_field: PASSWORD.into(),
        };
        let tls = TlsSecret {
            secret_name: pair.name,
            cert_field: ca,
        };
        Ok(PostgresConnection::new(
            host,
            POSTGRES_PORT,
            auth,
            Some(tls),
        ))
    }
}
