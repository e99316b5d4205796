//! Datastore connections against REAL servers: PostgreSQL 15, Redis 7 and moto's S3,
//! provisioned by `scripts/provision-datastores.sh` and started per test on free loopback
//! ports (see `support::servers`).
//!
//! Each test follows the path an operator takes: the CR names the server and a Secret, a
//! component asks the registry for the connection during a reconcile and reads the Secret
//! through the session, and a real client (tokio-postgres, redis, hyper with SigV4) connects
//! with exactly what the component got. A wrong password, a wrong CA and plain text where TLS
//! is required are refused by the servers themselves.

#![cfg(all(feature = "postgres", feature = "redis", feature = "cos"))]
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::pki::test_pki;
use support::probe::{Probe, reconcile_once, secret};
use support::servers::{Postgres, Redis, S3, pick_next_ports};
use windlass_x::datastore::cos::CosConnection;
use windlass_x::datastore::postgres::{PostgresConnection, PostgresParams, SslMode};
use windlass_x::datastore::redis::RedisConnection;

const PASSWORD: &str = "correct-horse-battery-staple";

fn rustls_config(ca_pem: &str) -> rustls::ClientConfig {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a usable CA certificate");
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// Connect as `params` say, verifying the server against `ca` (by default the CA the
/// connection read), and return the client once the connection is up.
async fn pg_connect(
    params: &PostgresParams,
    ca: Option<&str>,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&params.host)
        .port(params.port)
        .user(&params.user)
        .password(params.password.expose())
        .dbname("postgres");
    match params.ssl_mode {
        SslMode::Disable => {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            Ok(client)
        }
        SslMode::VerifyFull => {
            // tokio-postgres's `require` + rustls is libpq's verify-full: rustls always checks
            // the chain and the host name.
            config.ssl_mode(tokio_postgres::config::SslMode::Require);
            let ca = ca.or(params.ca_cert.as_deref()).expect("TLS needs a CA");
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(rustls_config(ca));
            let (client, connection) = config.connect(tls).await?;
            tokio::spawn(connection);
            Ok(client)
        }
    }
}

/// rustls refused the server's certificate: another CA with the same name fails its
/// signature check, any other CA is no issuer of it.
fn assert_refused_certificate(error: &str) {
    assert!(
        error.contains("BadSignature") || error.contains("UnknownIssuer"),
        "expected rustls to refuse the server certificate, got {error}"
    );
}

fn pg_spec(port: u16, tls: bool) -> Value {
    let mut connection = json!({
        "hostname": "127.0.0.1", "port": port, "authSecretName": "db-auth",
        "authSecretUsernameField": "username", "authSecretPasswordField": "password",
    });
    if tls {
        connection["tlsSecretName"] = json!("db-ca");
        connection["tlsSecretCertField"] = json!("ca.crt");
    }
    json!({"datastores": {"postgres": {"connection": connection}}})
}

async fn pg_params(port: u16, password: &str, ca: Option<&str>) -> PostgresParams {
    let mut objects = vec![secret(
        "db-auth",
        &[("username", "app"), ("password", password)],
    )];
    if let Some(ca) = ca {
        objects.push(secret("db-ca", &[("ca.crt", ca)]));
    }
    let (params, _) = reconcile_once(
        Probe::<PostgresConnection>::default(),
        pg_spec(port, ca.is_some()),
        &objects,
    )
    .await;
    params.unwrap()
}

#[tokio::test]
async fn postgres_takes_the_credentials_from_the_crs_secret() {
    let server = Postgres::start("app", PASSWORD, None);
    let params = pg_params(server.port(), PASSWORD, None).await;
    assert_eq!(params.ssl_mode, SslMode::Disable);
    let client = pg_connect(&params, None)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", server.log_tail()));
    let row = client
        .query_one("SELECT current_user, 40 + 2", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "app");
    assert_eq!(row.get::<_, i32>(1), 42);

    let wrong = pg_params(server.port(), "not-the-password", None).await;
    let Err(err) = pg_connect(&wrong, None).await else {
        panic!("a wrong password is refused");
    };
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD),
        "{err}"
    );
}

#[tokio::test]
async fn postgres_verify_full_against_the_secrets_ca() {
    let pki = test_pki().await;
    let server = Postgres::start("app", PASSWORD, Some(&pki.server));
    let params = pg_params(server.port(), PASSWORD, Some(&pki.ca_pem)).await;
    assert_eq!(params.ssl_mode, SslMode::VerifyFull);
    assert_eq!(params.ca_cert.as_deref(), Some(pki.ca_pem.as_str()));

    let client = pg_connect(&params, None)
        .await
        .unwrap_or_else(|e| panic!("connect over TLS: {e}\n{}", server.log_tail()));
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the session is encrypted");

    let other_ca = test_pki().await.ca_pem;
    let Err(err) = pg_connect(&params, Some(&other_ca)).await else {
        panic!("a server certificate from another CA is refused");
    };
    assert_refused_certificate(&format!("{err:?}"));

    let plain = PostgresParams {
        ssl_mode: SslMode::Disable,
        ..params
    };
    let Err(err) = pg_connect(&plain, None).await else {
        panic!("plain text is refused");
    };
    let refusal = err.as_db_error().expect("the server refused it");
    assert_eq!(
        refusal.code(),
        &tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    );
    assert!(refusal.message().contains("no encryption"), "{refusal}");
}

fn redis_spec(port: u16, tls: bool) -> Value {
    let mut connection = json!({
        "hostname": "127.0.0.1", "port": port.to_string(), "authSecretName": "cache-auth",
        "authSecretUsernameField": "user", "authSecretPasswordField": "pass",
    });
    if tls {
        connection["tlsSecretName"] = json!("cache-ca");
        connection["tlsSecretCertField"] = json!("ca.crt");
    }
    json!({"datastores": {"redis": {"connection": connection}}})
}

async fn redis_roundtrip(client: &redis::Client) -> redis::RedisResult<String> {
    let mut connection = client.get_multiplexed_async_connection().await?;
    redis::cmd("SET")
        .arg("windlass")
        .arg("connected")
        .query_async::<()>(&mut connection)
        .await?;
    redis::cmd("GET")
        .arg("windlass")
        .query_async::<String>(&mut connection)
        .await
}

#[tokio::test]
async fn redis_authenticates_with_the_crs_secret() {
    let server = Redis::start("app", PASSWORD, None);
    let auth = |password: &str| secret("cache-auth", &[("user", "app"), ("pass", password)]);
    let (resolved, _) = reconcile_once(
        Probe::<RedisConnection>::default(),
        redis_spec(server.port(), false),
        &[auth(PASSWORD)],
    )
    .await;
    let url = resolved.unwrap().url;
    assert!(url.expose().starts_with("redis://app:"));
    let client = redis::Client::open(url.expose()).unwrap();
    let value = redis_roundtrip(&client)
        .await
        .unwrap_or_else(|e| panic!("SET/GET: {e}\n{}", server.log_tail()));
    assert_eq!(value, "connected");

    let (resolved, _) = reconcile_once(
        Probe::<RedisConnection>::default(),
        redis_spec(server.port(), false),
        &[auth("not-the-password")],
    )
    .await;
    let client = redis::Client::open(resolved.unwrap().url.expose()).unwrap();
    let err = redis_roundtrip(&client)
        .await
        .expect_err("a wrong password is refused");
    assert_eq!(err.kind(), redis::ErrorKind::AuthenticationFailed, "{err}");
}

#[tokio::test]
async fn rediss_verifies_the_server_against_the_secrets_ca() {
    let pki = test_pki().await;
    let server = Redis::start("app", PASSWORD, Some(&pki.server));
    let objects = [
        secret("cache-auth", &[("user", "app"), ("pass", PASSWORD)]),
        secret("cache-ca", &[("ca.crt", &pki.ca_pem)]),
    ];
    let (resolved, _) = reconcile_once(
        Probe::<RedisConnection>::default(),
        redis_spec(server.tls_port(), true),
        &objects,
    )
    .await;
    let resolved = resolved.unwrap();
    assert!(resolved.url.expose().starts_with("rediss://app:"));
    let ca = resolved.ca.clone().expect("TLS comes with the CA");
    let tls_client = |ca: String| {
        redis::Client::build_with_tls(
            resolved.url.expose(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.into_bytes()),
            },
        )
        .unwrap()
    };
    let value = redis_roundtrip(&tls_client(ca))
        .await
        .unwrap_or_else(|e| panic!("SET/GET over TLS: {e}\n{}", server.log_tail()));
    assert_eq!(value, "connected");

    let err = redis_roundtrip(&tls_client(test_pki().await.ca_pem))
        .await
        .expect_err("a server certificate from another CA is refused");
    assert_refused_certificate(&format!("{err:?}"));
}

/// One signed S3 request over hyper; the status and body of the answer.
async fn s3_request(
    endpoint: &str,
    method: &str,
    path: &str,
    body: &[u8],
    access_key: &str,
    secret_key: &str,
) -> (u16, String) {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;

    let authority = endpoint
        .strip_prefix("http://")
        .expect("the test store speaks http");
    let stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let amz_date = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let payload_hash = support::sigv4::sha256_hex(body);
    let authorization = support::sigv4::authorization(
        method,
        path,
        &[
            ("host", authority),
            ("x-amz-date", &amz_date),
            ("x-amz-content-sha256", &payload_hash),
        ],
        "us-east-1",
        access_key,
        secret_key,
    );
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", authority)
        .header("x-amz-date", &amz_date)
        .header("x-amz-content-sha256", &payload_hash)
        .header("authorization", authorization)
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn s3_puts_and_gets_with_the_crs_keys() {
    let server = S3::start();
    let spec = json!({"datastores": {"cos": {"connection": {
        "hostname": "127.0.0.1", "port": server.port(), "bucketName": "reports",
        "authSecretName": "s3-keys", "authSecretAccessKeyField": "accessKey",
        "authSecretSecretKeyField": "secretKey",
    }}}});
    let keys = secret(
        "s3-keys",
        &[
            ("accessKey", server.access_key()),
            ("secretKey", server.secret_key()),
        ],
    );
    let (resolved, _) = reconcile_once(Probe::<CosConnection>::default(), spec, &[keys]).await;
    let cos = resolved.unwrap();
    assert_eq!(cos.endpoint, format!("http://127.0.0.1:{}", server.port()));
    let (ak, sk) = (cos.keys.access_key.as_str(), cos.keys.secret_key.expose());
    let bucket = format!("/{}", cos.bucket);
    let object = format!("{bucket}/hello.txt");

    let (status, body) = s3_request(&cos.endpoint, "PUT", &bucket, b"", ak, sk).await;
    assert_eq!(status, 200, "create the bucket: {body}");
    let (status, body) =
        s3_request(&cos.endpoint, "PUT", &object, b"hello, windlass", ak, sk).await;
    assert_eq!(status, 200, "put the object: {body}");
    let (status, body) = s3_request(&cos.endpoint, "GET", &object, b"", ak, sk).await;
    assert_eq!((status, body.as_str()), (200, "hello, windlass"));

    let (status, body) = s3_request(&cos.endpoint, "GET", &object, b"", ak, "not-the-key").await;
    assert_eq!(status, 403, "a wrong secret key is refused: {body}");
    assert!(body.contains("SignatureDoesNotMatch"), "{body}");
}

#[test]
fn the_s3_signer_signs_the_example_of_the_s3_documentation() {
    // "GET Object" from AWS's Signature Version 4 examples for the Authorization header.
    let empty = support::sigv4::sha256_hex(b"");
    let header = support::sigv4::authorization(
        "GET",
        "/test.txt",
        &[
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("Range", "bytes=0-9"),
            ("x-amz-content-sha256", &empty),
            ("x-amz-date", "20130524T000000Z"),
        ],
        "us-east-1",
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    );
    assert_eq!(
        header,
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
         SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
         Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    );
}

/// The race of picking a free port: another process takes it before the server binds it.
/// The server says the address is in use and exits; the harness starts it again on a fresh
/// port instead of failing the test (or, worse, taking the other process for the server).
#[test]
fn a_server_whose_port_was_taken_starts_again_on_a_fresh_one() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    pick_next_ports(&[taken_port]);
    let redis = Redis::start("app", PASSWORD, None);
    assert_ne!(redis.port(), taken_port);
    let mut connection = std::net::TcpStream::connect(("127.0.0.1", redis.port())).unwrap();
    use std::io::{Read, Write};
    connection.write_all(b"PING\r\n").unwrap();
    let mut reply = [0u8; 7];
    connection.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"-NOAUTH", "{}", redis.log_tail());
    assert!(
        redis.log_tail().contains("Ready to accept connections"),
        "{}",
        redis.log_tail()
    );
}
