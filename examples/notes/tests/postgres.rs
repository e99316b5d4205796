//! End to end against a REAL PostgreSQL (windlass-x's harness; provisioned once by
//! `scripts/provision-datastores.sh`): the CR points at the server, the operator renders the
//! app's Deployment, and a client connects with exactly what that Deployment's pod would
//! get — its env, the `secretKeyRef`s resolved from the Secrets as the kubelet resolves
//! them, and the CA file from the mounted Secret — over TLS with verify-full. The claim
//! under test: the operator hands the app a working connection.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use notes_operator::NotesController;
use serde_json::{Value, json};
use support::pki::test_pki;
use support::servers::Postgres;
use windlass::object::ObjectRef;
use windlass::testing::{Harness, TEST_NAMESPACE};

const USER: &str = "notes-app";
const PASSWORD: &str = "correct-horse-battery-staple";

fn secret(name: &str, data: &[(&str, &str)]) -> Value {
    let data: BTreeMap<&str, ByteString> = data
        .iter()
        .map(|(k, v)| (*k, ByteString(v.as_bytes().to_vec())))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": TEST_NAMESPACE}, "data": data})
}

/// The value of `key` in the Secret `name`, read from the cluster as the kubelet would.
async fn secret_value(env: &Harness<NotesController>, name: &str, key: &str) -> String {
    let object = ObjectRef::new("v1", "Secret", Some(TEST_NAMESPACE), name);
    let secret = env
        .get(&object)
        .await
        .unwrap_or_else(|| panic!("the pod reads Secret {name}, which does not exist"));
    let bytes: ByteString = serde_json::from_value(secret["data"][key].clone())
        .unwrap_or_else(|e| panic!("Secret {name} has no key {key}: {e}"));
    String::from_utf8(bytes.0).unwrap()
}

/// The app container's environment as the pod sees it: plain values, and `secretKeyRef`s
/// resolved.
async fn pod_env(env: &Harness<NotesController>, pod: &Value) -> BTreeMap<String, String> {
    let mut resolved = BTreeMap::new();
    for var in pod["containers"][0]["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap().to_string();
        let value = if let Some(value) = var["value"].as_str() {
            value.to_string()
        } else {
            let reference = &var["valueFrom"]["secretKeyRef"];
            let (secret, key) = (reference["name"].as_str(), reference["key"].as_str());
            match (secret, key) {
                (Some(secret), Some(key)) => secret_value(env, secret, key).await,
                _ => panic!("{name} is neither a value nor a secretKeyRef: {var}"),
            }
        };
        resolved.insert(name, value);
    }
    resolved
}

/// The content of the file `path` in the app container: found through its volume mounts
/// and the Secret volume behind the mount.
async fn pod_file(env: &Harness<NotesController>, pod: &Value, path: &str) -> String {
    for mount in pod["containers"][0]["volumeMounts"].as_array().unwrap() {
        let dir = mount["mountPath"].as_str().unwrap();
        let Some(file) = path.strip_prefix(&format!("{dir}/")) else {
            continue;
        };
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("no volume for the mount {mount}"));
        let source = &volume["secret"];
        let item = source["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["path"] == file)
            .unwrap_or_else(|| panic!("volume {volume} has no file {file}"));
        return secret_value(
            env,
            source["secretName"].as_str().unwrap(),
            item["key"].as_str().unwrap(),
        )
        .await;
    }
    panic!("nothing is mounted at {path}: {pod:#}");
}

#[tokio::test]
async fn the_app_connects_to_a_real_postgres_with_exactly_what_its_pod_gets() {
    let pki = test_pki().await;
    let server = Postgres::start(USER, PASSWORD, Some(&pki.server));

    let env = Harness::dry_run(NotesController::new()).await;
    env.apply(&secret("team-db", &[("user", USER), ("pass", PASSWORD)]))
        .await;
    env.apply(&secret("team-db-ca", &[("root.pem", &pki.ca_pem)]))
        .await;
    let spec = json!({
        // initdb's own database: the server has no other.
        "database": "postgres",
        "datastores": {"postgres": {"connection": {
            "hostname": "127.0.0.1", "port": server.port().to_string(),
            "authSecretName": "team-db", "authSecretUsernameField": "user",
            "authSecretPasswordField": "pass",
            "tlsSecretName": "team-db-ca", "tlsSecretCertField": "root.pem",
        }}},
    });
    let cr = env.apply_cr("team", spec).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);

    let app = ObjectRef::new("apps/v1", "Deployment", Some(TEST_NAMESPACE), "team-app");
    let deployment = env.get(&app).await.unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let vars = pod_env(&env, pod).await;
    let var = |name: &str| {
        vars.get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {:?}", vars.keys()))
    };
    assert_eq!(var("PGSSLMODE"), "verify-full");
    let ca_pem = pod_file(&env, pod, &var("PGSSLROOTCERT")).await;

    // libpq's verify-full is tokio-postgres's `require` with rustls, which always checks
    // the chain and the host name.
    let mut config = tokio_postgres::Config::new();
    config
        .host(var("PGHOST"))
        .port(var("PGPORT").parse().unwrap())
        .user(var("PGUSER"))
        .password(var("PGPASSWORD"))
        .dbname(var("PGDATABASE"))
        .ssl_mode(tokio_postgres::config::SslMode::Require);
    let (client, connection) = config
        .connect(tokio_postgres_rustls::MakeRustlsConnect::new(client_tls(
            &ca_pem,
        )))
        .await
        .unwrap_or_else(|e| panic!("connect as the pod would: {e}\n{}", server.log_tail()));
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT current_user, current_database(), \
             (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid())",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), USER);
    assert_eq!(row.get::<_, String>(1), "postgres");
    assert!(row.get::<_, bool>(2), "the session is encrypted");

    // The claim can fail: the same env with another CA is refused by the client.
    let other_ca = test_pki().await.ca_pem;
    let refused = config
        .connect(tokio_postgres_rustls::MakeRustlsConnect::new(client_tls(
            &other_ca,
        )))
        .await;
    assert!(
        refused.is_err(),
        "a server certificate from another CA is refused"
    );
}

/// A rustls client trusting only `ca_pem`.
fn client_tls(ca_pem: &str) -> rustls::ClientConfig {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}
