//! The notes operator on the in-memory cluster: both places the Postgres connection comes
//! from (the CR, or the Postgres the operator deploys with TLS from its internal CA), and
//! bad input as a status condition naming the key.

#![allow(clippy::unwrap_used)]

use notes_operator::NotesController;
use serde_json::{Value, json};
use windlass::object::ObjectRef;
use windlass::testing::{Harness, TEST_NAMESPACE, assert_condition};

fn obj(api_version: &str, kind: &str, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, Some(TEST_NAMESPACE), name)
}

fn secret(name: &str) -> ObjectRef {
    obj("v1", "Secret", name)
}

fn app() -> ObjectRef {
    obj("apps/v1", "Deployment", "team-app")
}

/// The CR's external connection, TLS on.
fn external() -> Value {
    json!({
        "hostname": "db.example.com", "port": 6432,
        "authSecretName": "team-db", "authSecretUsernameField": "user",
        "authSecretPasswordField": "pass",
        "tlsSecretName": "team-db-ca", "tlsSecretCertField": "root.pem",
    })
}

fn spec_with(connection: Value) -> Value {
    json!({"datastores": {"postgres": {"connection": connection}}})
}

/// The app container's env, by name.
fn env_of(deployment: &Value) -> Vec<Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn env_var(env: &[Value], name: &str) -> Value {
    env.iter()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {env:#?}"))
}

/// rustls's verification of `cert_pem` for `host` against `ca_pem`: libpq's verify-full.
fn verify_full(ca_pem: &str, cert_pem: &str, host: &str) -> Result<(), rustls::Error> {
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .unwrap();
    let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
    let host = ServerName::try_from(host.to_string()).unwrap();
    verifier
        .verify_server_cert(&cert, &[], &host, &[], UnixTime::now())
        .map(|_| ())
}

fn condition_message(status: &Value, condition: &str) -> String {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == condition)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn an_external_database_deploys_nothing_and_the_app_reads_the_crs_secrets() {
    let env = Harness::dry_run(NotesController::new()).await;
    let cr = env.apply_cr("team", spec_with(external())).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");

    // Nothing of the deployed mode: no Postgres, no CA, no generated password.
    for (api_version, kind, name) in [
        ("apps/v1", "StatefulSet", "team-postgres"),
        ("v1", "Service", "team-postgres"),
        ("v1", "Secret", "team-postgres-auth"),
        ("v1", "Secret", "team-postgres-tls"),
        ("v1", "Secret", "team-infra-tls-ca"),
    ] {
        assert!(
            env.get(&obj(api_version, kind, name)).await.is_none(),
            "{kind}/{name} deployed although the CR names its database"
        );
    }
    let applied: Vec<String> = env.log.applied().iter().map(|r| r.to_string()).collect();
    assert_eq!(applied.len(), 1, "only the app: {applied:?}");

    let deployment = env.get(&app()).await.unwrap();
    let vars = env_of(&deployment);
    assert_eq!(env_var(&vars, "PGHOST")["value"], "db.example.com");
    assert_eq!(env_var(&vars, "PGPORT")["value"], "6432");
    assert_eq!(env_var(&vars, "PGDATABASE")["value"], "notes");
    assert_eq!(env_var(&vars, "PGSSLMODE")["value"], "verify-full");
    assert_eq!(env_var(&vars, "PGSSLROOTCERT")["value"], "/tls/root.pem");
    for (name, key) in [("PGUSER", "user"), ("PGPASSWORD", "pass")] {
        let var = env_var(&vars, name);
        assert!(var.get("value").is_none(), "{name} is not in the manifest");
        assert_eq!(
            var["valueFrom"]["secretKeyRef"],
            json!({"name": "team-db", "key": key})
        );
    }
    // The CA Secret's one key is mounted where PGSSLROOTCERT says.
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"], "team-db-ca",
        "{pod:#}"
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["items"],
        json!([{"key": "root.pem", "path": "root.pem"}])
    );
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/tls");
}

#[tokio::test]
async fn without_a_connection_the_operator_deploys_postgres_with_tls_and_the_app_points_at_it() {
    let env = Harness::dry_run(NotesController::new()).await;
    let cr = env.apply_cr("team", json!({"replicas": 2})).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");

    // The generated credentials.
    let auth = env.get(&secret("team-postgres-auth")).await.unwrap();
    let password: k8s_openapi::ByteString =
        serde_json::from_value(auth["data"]["password"].clone()).unwrap();
    assert_eq!(password.0.len(), 48, "24 random bytes, hex");
    let username: k8s_openapi::ByteString =
        serde_json::from_value(auth["data"]["username"].clone()).unwrap();
    assert_eq!(username.0, b"notes");

    // The TLS pair for the Service's names, from the CR's internal CA.
    let pair = env.get(&secret("team-postgres-tls")).await.unwrap();
    assert_eq!(pair["type"], "kubernetes.io/tls");
    assert!(env.get(&secret("team-infra-tls-ca")).await.is_some());
    let field = |name: &str| {
        let bytes: k8s_openapi::ByteString =
            serde_json::from_value(pair["data"][name].clone()).unwrap();
        String::from_utf8(bytes.0).unwrap()
    };
    // What the app's verify-full will check: the certificate chains to ca.crt and names
    // the host the connection gives.
    verify_full(
        &field("ca.crt"),
        &field("tls.crt"),
        "team-postgres.test.svc",
    )
    .unwrap();
    assert!(verify_full(&field("ca.crt"), &field("tls.crt"), "elsewhere.test.svc").is_err());

    // The server: its Service, and a StatefulSet with the pair mounted and TLS on.
    let service = env
        .get(&obj("v1", "Service", "team-postgres"))
        .await
        .unwrap();
    assert_eq!(service["spec"]["ports"][0]["port"], 5432);
    let server = env
        .get(&obj("apps/v1", "StatefulSet", "team-postgres"))
        .await
        .unwrap();
    let server_pod = &server["spec"]["template"]["spec"];
    assert_eq!(
        server_pod["volumes"][0]["secret"]["secretName"],
        "team-postgres-tls"
    );
    let args = server_pod["containers"][0]["args"].to_string();
    assert!(args.contains("ssl=on"), "{args}");
    assert!(args.contains("ssl_key_file=/tls/tls.key"), "{args}");
    let server_env = server_pod["containers"][0]["env"].as_array().unwrap();
    assert_eq!(
        env_var(server_env, "POSTGRES_PASSWORD")["valueFrom"]["secretKeyRef"],
        json!({"name": "team-postgres-auth", "key": "password"})
    );

    // The app: env pointing at the Service, verify-full against the CA mounted from the
    // pair Secret (its ca.crt only, never the key), credentials by reference.
    let deployment = env.get(&app()).await.unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    let vars = env_of(&deployment);
    assert_eq!(env_var(&vars, "PGHOST")["value"], "team-postgres.test.svc");
    assert_eq!(env_var(&vars, "PGPORT")["value"], "5432");
    assert_eq!(env_var(&vars, "PGSSLMODE")["value"], "verify-full");
    assert_eq!(env_var(&vars, "PGSSLROOTCERT")["value"], "/tls/ca.crt");
    assert_eq!(
        env_var(&vars, "PGPASSWORD")["valueFrom"]["secretKeyRef"],
        json!({"name": "team-postgres-auth", "key": "password"})
    );
    let manifest = deployment.to_string();
    let password = String::from_utf8(password.0).unwrap();
    assert!(!manifest.contains(&password), "no password in the manifest");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "team-postgres-tls"
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["items"],
        json!([{"key": "ca.crt", "path": "ca.crt"}])
    );
    // The dependency hash: the pod template changes when the Secrets it reads do.
    let hash = &deployment["spec"]["template"]["metadata"]["annotations"]
        [windlass::annotations::DEPENDENCY_HASH];
    assert!(hash.is_string(), "{:#}", deployment["spec"]["template"]);

    // The app comes after the database, which comes after the CA.
    let order: Vec<String> = env.log.applied().iter().map(|r| r.to_string()).collect();
    let position = |needle: &str| {
        order
            .iter()
            .position(|r| r.contains(needle))
            .unwrap_or_else(|| panic!("{needle} not applied: {order:?}"))
    };
    assert!(position("team-infra-tls-ca") < position("StatefulSet"));
    assert!(position("StatefulSet") < position("team-app"));

    // The steady state writes nothing: the password, the CA and the pair stay.
    env.log.clear();
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        env.log.applied().is_empty(),
        "a second reconcile wrote {:?}",
        env.log.applied()
    );
    assert_eq!(
        env.get(&secret("team-postgres-tls")).await.unwrap()["data"],
        pair["data"]
    );
    assert_eq!(env.get(&app()).await.unwrap()["spec"], deployment["spec"]);
}

#[tokio::test]
async fn a_rotated_password_rolls_the_app() {
    let env = Harness::dry_run(NotesController::new()).await;
    let cr = env.apply_cr("team", json!({})).await;
    env.reconcile(&cr).await;
    let hash = |deployment: Value| {
        deployment["spec"]["template"]["metadata"]["annotations"]
            [windlass::annotations::DEPENDENCY_HASH]
            .clone()
    };
    let before = hash(env.get(&app()).await.unwrap());
    assert!(before.is_string());

    // Someone rotates the generated password (create-only: the operator keeps it).
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "team-postgres-auth", "namespace": TEST_NAMESPACE},
        "data": {"password": "cm90YXRlZA=="}}))
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let after = hash(env.get(&app()).await.unwrap());
    assert_ne!(before, after, "a new password, a new pod template");
}

#[tokio::test]
async fn bad_input_is_a_condition_naming_the_key() {
    let mut missing = external();
    missing.as_object_mut().unwrap().remove("authSecretName");
    let mut half_tls = external();
    half_tls
        .as_object_mut()
        .unwrap()
        .remove("tlsSecretCertField");
    for (connection, expected) in [
        (
            missing,
            "missing required connection element \
             spec.datastores.postgres.connection.authSecretName"
                .to_string(),
        ),
        (
            json!({"hostname": "db", "port": "postgres", "authSecretName": "a",
                   "authSecretUsernameField": "u", "authSecretPasswordField": "p"}),
            "spec.datastores.postgres.connection.port must be a port number".to_string(),
        ),
        (
            json!({"hostname": "db", "port": 70000, "authSecretName": "a",
                   "authSecretUsernameField": "u", "authSecretPasswordField": "p"}),
            "spec.datastores.postgres.connection.port must be a port number".to_string(),
        ),
        (
            half_tls,
            "spec.datastores.postgres.connection.tlsSecretName and \
             spec.datastores.postgres.connection.tlsSecretCertField"
                .to_string(),
        ),
    ] {
        let env = Harness::dry_run(NotesController::new()).await;
        let cr = env.apply_cr("team", spec_with(connection)).await;
        let report = env.reconcile(&cr).await;
        assert!(report.error.is_some(), "{expected}: no error");
        let status = env.status(&cr).await;
        assert_condition(&status, "Ready", false, "ConfigError");
        let message = condition_message(&status, "Ready");
        assert!(message.contains(&expected), "{expected}\n{message}");
        assert!(
            env.get(&app()).await.is_none(),
            "no app with a bad connection"
        );
    }
}

#[tokio::test]
async fn the_quick_start_rolls_out_the_database_before_the_app() {
    use std::process::ExitCode;
    use windlass::cli::{Output, run};
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/notes.yaml");
    let (out, buffer) = Output::buffer();
    let code = run(
        NotesController::new(),
        ["notes-operator", "run", "--dry-run", file],
        out,
    )
    .await;
    let text = buffer.text();
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let position = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing from:\n{text}"))
    };
    assert!(position("Secret/team-postgres-tls") < position("StatefulSet/team-postgres"));
    assert!(position("StatefulSet/team-postgres") < position("Deployment/team-app"));
    assert!(text.contains("Ready=Stable"), "{text}");
}
