//! A test operator whose one application component asks the [`Datastores`] registry for a
//! connection during its render and resolves it (reads its Secrets) through the session, as
//! a real operator's component would; what it got is kept for the test to look at.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use windlass::prelude::*;
use windlass::testing::{Harness, TEST_NAMESPACE, Widget};
use windlass_x::datastore::spec::SecretReader;
use windlass_x::datastore::{Connection, Datastores};

/// What a test wants out of a connection once its Secrets are read.
#[async_trait]
pub trait Resolve: Connection {
    /// The resolved form.
    type Resolved: Clone + Send + Sync + 'static;
    /// Read what a client needs.
    async fn resolve(&self, secrets: &dyn SecretReader) -> Result<Self::Resolved>;
}

#[cfg(feature = "postgres")]
#[async_trait]
impl Resolve for windlass_x::datastore::postgres::PostgresConnection {
    type Resolved = windlass_x::datastore::postgres::PostgresParams;
    async fn resolve(&self, secrets: &dyn SecretReader) -> Result<Self::Resolved> {
        self.params(secrets).await
    }
}

/// A Redis connection resolved: the URL and, with TLS, the CA certificate.
#[cfg(feature = "redis")]
#[derive(Debug, Clone)]
pub struct RedisResolved {
    /// `redis[s]://user:password@host:port`.
    pub url: windlass_x::datastore::SecretString,
    /// The PEM CA certificate, with TLS.
    pub ca: Option<String>,
}

#[cfg(feature = "redis")]
#[async_trait]
impl Resolve for windlass_x::datastore::redis::RedisConnection {
    type Resolved = RedisResolved;
    async fn resolve(&self, secrets: &dyn SecretReader) -> Result<Self::Resolved> {
        Ok(RedisResolved {
            url: self.url(secrets).await?,
            ca: self.tls_cert(secrets).await?,
        })
    }
}

/// A COS connection resolved.
#[cfg(feature = "cos")]
#[derive(Debug, Clone)]
pub struct CosResolved {
    /// `http[s]://host:port`.
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// The access key and secret key.
    pub keys: windlass_x::datastore::cos::Keys,
    /// The one-line `s3,endpoint=…` form.
    pub connection_string: windlass_x::datastore::SecretString,
}

#[cfg(feature = "cos")]
#[async_trait]
impl Resolve for windlass_x::datastore::cos::CosConnection {
    type Resolved = CosResolved;
    async fn resolve(&self, secrets: &dyn SecretReader) -> Result<Self::Resolved> {
        Ok(CosResolved {
            endpoint: self.endpoint(),
            bucket: self.bucket().to_string(),
            keys: self.keys(secrets).await?,
            connection_string: self.connection_string(secrets).await?,
        })
    }
}

/// The backend config: any sections (the datastores' `<type>.type` among them).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct ProbeConfig {
    /// Every section.
    #[serde(flatten)]
    pub sections: BTreeMap<String, Value>,
}

/// The test operator.
pub struct Probe<K: Resolve> {
    /// Its registry; register implementations on it before the first reconcile.
    pub datastores: Datastores<Probe<K>>,
    /// The instance name the application asks for.
    pub name: Option<String>,
    /// Whether the controller adds the datastore's component (when the CR names none).
    pub deploy: bool,
    /// How many application components ask for the connection.
    pub apps: usize,
    /// What each render got.
    pub seen: Arc<Mutex<Vec<Result<K::Resolved>>>>,
}

impl<K: Resolve> Default for Probe<K> {
    /// An operator using the top-level instance of `K`'s type with one application component,
    /// deploying nothing.
    fn default() -> Self {
        Probe {
            datastores: Datastores::new(),
            name: None,
            deploy: false,
            apps: 1,
            seen: Arc::default(),
        }
    }
}

#[async_trait]
impl<K: Resolve> Controller for Probe<K> {
    type Resource = Widget;
    type Config = ProbeConfig;
    type Status = Status;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let store = if self.deploy {
            self.datastores
                .add_component::<K>(session, &mut graph, self.name.as_deref())?
        } else {
            None
        };
        for index in 0..self.apps {
            let app = graph.add(App {
                component: format!("app-{index}"),
                datastores: self.datastores.clone(),
                name: self.name.clone(),
                seen: self.seen.clone(),
            })?;
            if let Some(store) = store {
                graph.depends_on(app, store)?;
            }
        }
        Ok(graph)
    }
}

struct App<K: Resolve> {
    component: String,
    datastores: Datastores<Probe<K>>,
    name: Option<String>,
    seen: Arc<Mutex<Vec<Result<K::Resolved>>>>,
}

#[async_trait]
impl<K: Resolve> Component<Probe<K>> for App<K> {
    fn name(&self) -> &str {
        &self.component
    }

    async fn render(&self, session: &Session<Probe<K>>, out: &mut Resources) -> Result<()> {
        // A real render awaits other things first: let other reconciles run meanwhile.
        tokio::task::yield_now().await;
        let resolved = async {
            let connection = self
                .datastores
                .connection::<K>(session, self.name.as_deref())
                .await?;
            connection.resolve(session).await
        }
        .await;
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(resolved.clone());
        }
        resolved?;
        out.add(
            "config",
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some(session.scoped_name(&self.component)),
                    ..Default::default()
                },
                data: Some([("connected".to_string(), "yes".to_string())].into()),
                ..Default::default()
            },
        )?;
        Ok(())
    }
}

/// A Secret in the test namespace with these (plain-text) values.
pub fn secret(name: &str, data: &[(&str, &str)]) -> Value {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(TEST_NAMESPACE.to_string()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&secret).expect("a Secret serializes");
    value["apiVersion"] = json!("v1");
    value["kind"] = json!("Secret");
    value
}

/// What one dry-run reconcile of a CR with `spec` gave the application: its resolved
/// connection, or the error, and the CR's status.
pub async fn reconcile_once<K: Resolve>(
    probe: Probe<K>,
    spec: Value,
    objects: &[Value],
) -> (Result<K::Resolved>, Value) {
    let seen = probe.seen.clone();
    let env = Harness::dry_run(probe).await;
    for object in objects {
        env.apply(object).await;
    }
    let cr = env.apply_cr("shop", spec).await;
    let report = env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    let last = seen.lock().ok().and_then(|seen| seen.last().cloned());
    let result = match (last, report.error) {
        (Some(result), _) => result,
        (None, Some(error)) => Err(error),
        (None, None) => {
            panic!("the application never rendered and the reconcile reported no error")
        }
    };
    (result, status)
}
