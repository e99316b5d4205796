//! The shared connection rules through whole reconciles on windlass's in-memory cluster: a
//! component asks the registry for a connection while it renders, and what the CR and its
//! Secrets say decides what it gets, or which error names the problem.

#![cfg(all(feature = "postgres", feature = "redis", feature = "cos"))]
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use windlass::cluster::MemoryCluster;
use windlass::config::OperatorConfig;
use windlass::prelude::*;
use windlass::testing::{FaultyCluster, Harness, Op, assert_condition};
use windlass::{ClusterError, Error};
use windlass_x::datastore::cos::CosConnection;
use windlass_x::datastore::postgres::{Credentials, PostgresConnection, SslMode};
use windlass_x::datastore::redis::RedisConnection;
use windlass_x::datastore::spec::{CredentialSecret, TlsSecret};
use windlass_x::datastore::{Datastore, InstanceConfig, SecretString};

use support::probe::{Probe, reconcile_once, secret};

fn pg_spec(connection: Value) -> Value {
    json!({"datastores": {"postgres": {"connection": connection}}})
}

fn pg_connection() -> Value {
    json!({
        "hostname": "db.test", "port": 5432, "authSecretName": "db-auth",
        "authSecretUsernameField": "username", "authSecretPasswordField": "password",
    })
}

fn db_auth() -> Value {
    secret("db-auth", &[("username", "app"), ("password", "s3cret")])
}

fn with(mut base: Value, changes: Value) -> Value {
    for (key, value) in changes.as_object().unwrap() {
        base[key] = value.clone();
    }
    base
}

fn config_message(result: windlass::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Config(message)) => message,
        other => panic!("expected a config error, got {other:?}"),
    }
}

fn not_yet_message(result: windlass::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Precondition(message)) => message,
        other => panic!("expected not yet, got {other:?}"),
    }
}

#[tokio::test]
async fn a_cr_connection_reads_its_secret() {
    let (params, status) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(pg_connection()),
        &[db_auth()],
    )
    .await;
    let params = params.unwrap();
    assert_eq!((params.host.as_str(), params.port), ("db.test", 5432));
    assert_eq!(params.user, "app");
    assert_eq!(params.password.expose(), "s3cret");
    assert_eq!((params.ssl_mode, params.ca_cert), (SslMode::Disable, None));
    assert_condition(&status, "Ready", true, "Stable");
    assert!(
        !status.to_string().contains("s3cret"),
        "no secret in the status"
    );
}

#[tokio::test]
async fn a_named_instance_has_its_own_section() {
    let spec = json!({"datastores": {"postgres": {
        "connection": pg_connection(),
        "audit": {"connection": with(pg_connection(), json!({"hostname": "audit.test"}))},
    }}});
    let probe = Probe::<PostgresConnection> {
        name: Some("audit".into()),
        ..Default::default()
    };
    let (params, _) = reconcile_once(probe, spec, &[db_auth()]).await;
    assert_eq!(params.unwrap().host, "audit.test");
}

#[tokio::test]
async fn every_missing_element_is_named() {
    for key in [
        "hostname",
        "port",
        "authSecretName",
        "authSecretUsernameField",
        "authSecretPasswordField",
    ] {
        let mut connection = pg_connection();
        connection.as_object_mut().unwrap().remove(key);
        let (result, status) = reconcile_once(
            Probe::<PostgresConnection>::default(),
            pg_spec(connection),
            &[db_auth()],
        )
        .await;
        let expected = format!(
            "missing required connection element spec.datastores.postgres.connection.{key}"
        );
        assert_eq!(config_message(result), expected);
        assert_condition(&status, "Ready", false, "ConfigError");
        assert!(status.to_string().contains(&expected), "{status:#}");
    }
}

#[tokio::test]
async fn an_empty_string_is_null() {
    let (result, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(with(pg_connection(), json!({"hostname": ""}))),
        &[db_auth()],
    )
    .await;
    assert_eq!(
        config_message(result),
        "missing required connection element spec.datastores.postgres.connection.hostname"
    );
    // An empty TLS pair is "no TLS", not half a pair.
    let (params, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(with(
            pg_connection(),
            json!({"tlsSecretName": "", "tlsSecretCertField": ""}),
        )),
        &[db_auth()],
    )
    .await;
    assert_eq!(params.unwrap().ssl_mode, SslMode::Disable);
}

#[tokio::test]
async fn tls_takes_both_or_neither() {
    for half in [
        json!({"tlsSecretName": "db-ca"}),
        json!({"tlsSecretCertField": "ca.crt"}),
    ] {
        let (result, _) = reconcile_once(
            Probe::<PostgresConnection>::default(),
            pg_spec(with(pg_connection(), half)),
            &[db_auth()],
        )
        .await;
        let message = config_message(result);
        assert!(
            message.contains(
                "spec.datastores.postgres.connection.tlsSecretName and \
                 spec.datastores.postgres.connection.tlsSecretCertField"
            ),
            "{message}"
        );
    }
}

#[tokio::test]
async fn tls_reads_the_ca_certificate_and_waits_for_it() {
    let spec = pg_spec(with(
        pg_connection(),
        json!({"tlsSecretName": "db-ca", "tlsSecretCertField": "ca.crt"}),
    ));
    let (result, status) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        spec.clone(),
        &[db_auth()],
    )
    .await;
    assert!(not_yet_message(result).contains("Secret db-ca"));
    assert_condition(&status, "Updating", true, "PreconditionWait");

    let ca = secret("db-ca", &[("ca.crt", "-----BEGIN CERTIFICATE-----")]);
    let (params, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        spec,
        &[db_auth(), ca],
    )
    .await;
    let params = params.unwrap();
    assert_eq!(params.ssl_mode, SslMode::VerifyFull);
    assert_eq!(
        params.ca_cert.as_deref(),
        Some("-----BEGIN CERTIFICATE-----")
    );
}

#[tokio::test]
async fn a_port_is_an_integer() {
    let (params, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(with(pg_connection(), json!({"port": "6543"}))),
        &[db_auth()],
    )
    .await;
    assert_eq!(params.unwrap().port, 6543);
    for bad in [json!("five"), json!(1.5), json!(-1), json!(70000)] {
        let (result, _) = reconcile_once(
            Probe::<PostgresConnection>::default(),
            pg_spec(with(pg_connection(), json!({"port": bad}))),
            &[db_auth()],
        )
        .await;
        let message = config_message(result);
        assert!(
            message.starts_with("spec.datastores.postgres.connection.port must be a port"),
            "{bad}: {message}"
        );
    }
}

#[tokio::test]
async fn a_missing_secret_is_not_yet() {
    let (result, status) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(pg_connection()),
        &[],
    )
    .await;
    assert_eq!(
        not_yet_message(result),
        "Secret db-auth (Postgres credentials) does not exist yet"
    );
    assert_condition(&status, "Updating", true, "PreconditionWait");

    let half = secret("db-auth", &[("username", "app")]);
    let (result, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(pg_connection()),
        &[half],
    )
    .await;
    assert_eq!(
        not_yet_message(result),
        "Secret db-auth has no field password yet"
    );
}

#[tokio::test]
async fn a_failed_secret_read_is_the_cluster_error() {
    let memory = Arc::new(MemoryCluster::new());
    let faulty = Arc::new(FaultyCluster::new(memory.clone()));
    faulty.fail(Op::Get, Some("Secret"), ClusterError::api("etcd is down"));
    let probe = Probe::<PostgresConnection>::default();
    let seen = probe.seen.clone();
    let config = OperatorConfig {
        dry_run: true,
        ..OperatorConfig::default()
    };
    let env = Harness::on_cluster(probe, config, memory, faulty);
    env.apply(&db_auth()).await;
    let cr = env.apply_cr("shop", pg_spec(pg_connection())).await;
    env.reconcile(&cr).await;
    let result = seen.lock().unwrap().last().cloned().unwrap();
    assert!(
        matches!(&result, Err(Error::Cluster(e)) if e.to_string().contains("etcd is down")),
        "{result:?}"
    );
}

#[tokio::test]
async fn the_uri_secret_gives_the_address() {
    let connection = json!({
        "uriSecret": "db-uri", "uriSecretHostnameField": "host", "uriSecretPortField": "port",
        "authSecretName": "db-auth", "authSecretUsernameField": "username",
        "authSecretPasswordField": "password",
    });
    let (result, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(connection.clone()),
        &[db_auth()],
    )
    .await;
    assert!(not_yet_message(result).starts_with("Secret db-uri"));

    let uri = secret("db-uri", &[("host", "10.0.0.7"), ("port", "5433")]);
    let (params, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(connection.clone()),
        &[db_auth(), uri],
    )
    .await;
    let params = params.unwrap();
    assert_eq!((params.host.as_str(), params.port), ("10.0.0.7", 5433));

    let bad = secret("db-uri", &[("host", "10.0.0.7"), ("port", "postgres")]);
    let (result, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(connection.clone()),
        &[db_auth(), bad],
    )
    .await;
    assert!(config_message(result).starts_with("field port of Secret db-uri must be a port"));

    let mut no_field = connection;
    no_field
        .as_object_mut()
        .unwrap()
        .remove("uriSecretPortField");
    let (result, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(no_field),
        &[db_auth()],
    )
    .await;
    assert_eq!(
        config_message(result),
        "missing required connection element \
         spec.datastores.postgres.connection.uriSecretPortField"
    );
}

#[tokio::test]
async fn redis_wants_its_credentials() {
    let spec = json!({"datastores": {"redis": {"connection": {
        "hostname": "cache.test", "port": "6379", "authSecretName": "cache-auth",
        "authSecretUsernameField": "user", "authSecretPasswordField": "pass",
        "tlsSecretName": "cache-ca", "tlsSecretCertField": "ca.crt",
    }}}});
    let (result, _) = reconcile_once(
        Probe::<RedisConnection>::default(),
        spec.clone(),
        &[secret("cache-auth", &[("user", "app")])],
    )
    .await;
    assert_eq!(
        not_yet_message(result),
        "Secret cache-auth has no field pass yet"
    );
    let objects = [
        secret("cache-auth", &[("user", "app"), ("pass", "pw")]),
        secret("cache-ca", &[("ca.crt", "PEM")]),
    ];
    let (resolved, _) = reconcile_once(Probe::<RedisConnection>::default(), spec, &objects).await;
    let resolved = resolved.unwrap();
    assert_eq!(resolved.url.expose(), "rediss://app:pw@cache.test:6379");
    assert_eq!(resolved.ca.as_deref(), Some("PEM"));
}

#[tokio::test]
async fn cos_names_its_bucket() {
    let connection = json!({
        "hostname": "s3.test", "port": 9000, "bucketName": "reports",
        "authSecretName": "s3-keys", "authSecretAccessKeyField": "ak",
        "authSecretSecretKeyField": "sk",
    });
    let objects = [secret("s3-keys", &[("ak", "AKID"), ("sk", "shh")])];
    let spec = |c: &Value| json!({"datastores": {"cos": {"connection": c}}});
    let (resolved, _) = reconcile_once(
        Probe::<CosConnection>::default(),
        spec(&connection),
        &objects,
    )
    .await;
    let resolved = resolved.unwrap();
    assert_eq!(resolved.endpoint, "http://s3.test:9000");
    assert_eq!(resolved.bucket, "reports");
    assert_eq!(
        resolved.connection_string.expose(),
        "s3,endpoint=http://s3.test:9000,accesskey=AKID,secretkey=shh,bucketsuffix=reports"
    );
    let mut without_bucket = connection;
    without_bucket["bucketName"] = json!("");
    let (result, _) = reconcile_once(
        Probe::<CosConnection>::default(),
        spec(&without_bucket),
        &objects,
    )
    .await;
    assert_eq!(
        config_message(result),
        "missing required connection element spec.datastores.cos.connection.bucketName"
    );
}

/// A Postgres the operator deploys: its connection comes from the component, with the
/// credentials it knows, and counts how often it is asked.
struct InClusterPostgres {
    name: String,
    asked: Arc<AtomicUsize>,
}

#[async_trait]
impl Component<Probe<PostgresConnection>> for InClusterPostgres {
    fn name(&self) -> &str {
        &self.name
    }
    async fn render(
        &self,
        session: &Session<Probe<PostgresConnection>>,
        out: &mut Resources,
    ) -> Result<()> {
        out.add_value(
            "service",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": session.scoped_name(&self.name)}}),
        )?;
        Ok(())
    }
}

#[async_trait]
impl Datastore<Probe<PostgresConnection>> for InClusterPostgres {
    type Connection = PostgresConnection;
    async fn connection(
        &self,
        session: &Session<Probe<PostgresConnection>>,
    ) -> Result<PostgresConnection> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        // As a real lookup would, give other reconciles a turn before answering.
        tokio::task::yield_now().await;
        let auth = CredentialSecret {
            secret_name: session.scoped_name("postgres-auth"),
            first_field: "username".into(),
            second_field: "password".into(),
        };
        let tls = TlsSecret {
            secret_name: session.scoped_name("postgres-tls"),
            cert_field: "ca.crt".into(),
        };
        PostgresConnection::new(session.scoped_name("postgres"), 5432, auth, Some(tls))
            .with_credentials(Credentials {
                username: "owner".into(),
                password: SecretString::new("generated"),
            })
            .with_tls_cert("IN-MEMORY-CA")
    }
}

fn deploying_probe(asked: &Arc<AtomicUsize>) -> Probe<PostgresConnection> {
    let probe = Probe::<PostgresConnection> {
        deploy: true,
        apps: 3,
        ..Default::default()
    };
    let counter = asked.clone();
    probe
        .datastores
        .register("in-cluster", move |config: &InstanceConfig| {
            assert_eq!(
                config.config["size"], "small",
                "the section reaches the builder"
            );
            Ok(InClusterPostgres {
                name: "postgres".into(),
                asked: counter.clone(),
            })
        });
    probe
}

#[tokio::test]
async fn without_a_cr_connection_the_deployed_component_hands_it_out_once_per_reconcile() {
    let asked = Arc::new(AtomicUsize::new(0));
    let probe = deploying_probe(&asked);
    let seen = probe.seen.clone();
    let env = Harness::dry_run(probe).await;
    let overrides =
        json!({"configOverrides": {"postgres": {"type": "in-cluster", "size": "small"}}});
    let cr = env.apply_cr("shop", overrides).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "three components asked");
        for result in seen.iter() {
            let params = result.as_ref().unwrap();
            assert_eq!(params.host, "shop-postgres");
            assert_eq!(params.user, "owner");
            assert_eq!(params.password.expose(), "generated");
            assert_eq!(params.ca_cert.as_deref(), Some("IN-MEMORY-CA"));
        }
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "one connection per reconcile"
    );
    let deployed =
        windlass::object::ObjectRef::new("v1", "ConfigMap", Some("test"), "shop-postgres");
    assert!(
        env.get(&deployed).await.is_some(),
        "the datastore component was deployed"
    );

    env.reconcile(&cr).await;
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "a new reconcile builds it afresh"
    );
}

#[tokio::test]
async fn a_cr_connection_means_nothing_is_deployed() {
    let asked = Arc::new(AtomicUsize::new(0));
    let probe = deploying_probe(&asked);
    let env = Harness::dry_run(probe).await;
    env.apply(&db_auth()).await;
    let mut spec = pg_spec(pg_connection());
    spec["configOverrides"] = json!({"postgres": {"type": "in-cluster", "size": "small"}});
    let cr = env.apply_cr("shop", spec).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    let deployed =
        windlass::object::ObjectRef::new("v1", "ConfigMap", Some("test"), "shop-postgres");
    assert!(env.get(&deployed).await.is_none(), "no datastore component");
}

#[tokio::test]
async fn the_backend_config_must_name_a_registered_implementation() {
    let asked = Arc::new(AtomicUsize::new(0));
    for (overrides, expected) in [
        (
            json!({}),
            "the backend config has no postgres section for the postgres datastore: set it to \
             one of the registered implementations (in-cluster), or give \
             spec.datastores.postgres.connection in the CR",
        ),
        (
            json!({"postgres": {"size": "small"}}),
            "missing required backend config postgres.type",
        ),
        (
            json!({"postgres": {"type": "operator-hub"}}),
            "backend config postgres.type is \"operator-hub\", which is no registered postgres \
             implementation (registered: in-cluster)",
        ),
    ] {
        let (result, status) = reconcile_once(
            deploying_probe(&asked),
            json!({"configOverrides": overrides}),
            &[],
        )
        .await;
        let message = config_message(result);
        assert!(message.starts_with(expected), "{message}");
        assert_condition(&status, "Ready", false, "ConfigError");
    }
}

#[tokio::test]
async fn a_named_deployed_instance_is_named_after_it() {
    let asked = Arc::new(AtomicUsize::new(0));
    let mut probe = deploying_probe(&asked);
    probe.name = Some("audit".into());
    let env = Harness::dry_run(probe).await;
    let cr = env
        .apply_cr(
            "shop",
            json!({"configOverrides": {"postgres": {"audit": {"type": "in-cluster", "size": "small"}}}}),
        )
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let status = env.status(&cr).await.to_string();
    assert!(status.contains("postgres-audit"), "{status}");
}

#[tokio::test]
async fn concurrent_reconciles_of_two_crs_keep_their_own_connections() {
    let asked = Arc::new(AtomicUsize::new(0));
    let probe = deploying_probe(&asked);
    let seen = probe.seen.clone();
    let env = Harness::dry_run(probe).await;
    let overrides =
        json!({"configOverrides": {"postgres": {"type": "in-cluster", "size": "small"}}});
    let shop = env.apply_cr("shop", overrides.clone()).await;
    let blog = env.apply_cr("blog", overrides).await;
    let (a, b) = tokio::join!(env.reconcile(&shop), env.reconcile(&blog));
    assert!(
        a.error.is_none() && b.error.is_none(),
        "{:?} {:?}",
        a.error,
        b.error
    );
    let hosts: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.as_ref().unwrap().host.clone())
        .collect();
    assert_eq!(hosts.len(), 6);
    for cr in ["shop", "blog"] {
        let own = format!("{cr}-postgres");
        assert_eq!(hosts.iter().filter(|h| **h == own).count(), 3, "{hosts:?}");
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "one connection per CR's reconcile"
    );
}
