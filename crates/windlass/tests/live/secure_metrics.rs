//! Secure metrics on the real API server: `/metrics` over HTTPS answers a ServiceAccount
//! allowed to get it (200), refuses one without the grant (403) and a caller without a
//! valid token (401), while the probes stay open on their own port for the kubelet.

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams, PostParams};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use windlass::cluster::{Cluster, WriteMethod};
use windlass::config::OperatorConfig;
use windlass::runtime::Manager;

use crate::live;

/// Accepts the server's self-signed certificate, as a scraper of secure metrics is told
/// to (`insecureSkipVerify`); what is under test is the token.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The status code of `GET path` on `port`, over TLS when `tls`, with `token` as bearer.
async fn status(port: u16, path: &str, tls: bool, token: Option<&str>) -> Option<u16> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    let mut response = Vec::new();
    if tls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .ok()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let mut stream = connector
            .connect(ServerName::try_from("127.0.0.1").ok()?, tcp)
            .await
            .ok()?;
        stream.write_all(request.as_bytes()).await.ok()?;
        let _ = stream.read_to_end(&mut response).await;
    } else {
        let mut tcp = tcp;
        tcp.write_all(request.as_bytes()).await.ok()?;
        let _ = tcp.read_to_end(&mut response).await;
    }
    String::from_utf8_lossy(&response)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// A token of the ServiceAccount `name` in `ns`, created for the test.
async fn token(client: &kube::Client, ns: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .and_then(|s| s.token)
        .expect("a token")
}

#[tokio::test]
async fn secure_metrics_answer_only_callers_the_api_server_allows() {
    let (admin, env) = live().await;
    let ns = env.namespace("secure-metrics").await.unwrap();
    let client = env.client().unwrap();
    let reader = format!("{}-metrics-reader", ns.name());
    admin
        .apply(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": reader},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
            WriteMethod::Apply,
        )
        .await
        .unwrap();
    admin
        .apply(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": reader},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
                "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns.name()}]}),
            WriteMethod::Apply,
        )
        .await
        .unwrap();
    let allowed = token(&client, ns.name(), "scraper").await;
    let stranger = token(&client, ns.name(), "stranger").await;

    // Port 0 for both servers: the manager says which ports it got.
    let mut config = OperatorConfig::default();
    config.server.metrics_bind_address = "127.0.0.1:0".to_string();
    config.server.health_probe_bind_address = "127.0.0.1:0".to_string();
    config.server.secure_metrics = true;
    let manager = Manager::new(client.clone(), config);
    let mut serving = manager.serving();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(manager.run(async {
        let _ = stopped.await;
    }));
    let bound = *serving
        .wait_for(|s| s.metrics.is_some() && s.probes.is_some())
        .await
        .unwrap();
    let (metrics, probes) = (bound.metrics.unwrap().port(), bound.probes.unwrap().port());
    crate::eventually("the probes answer", || async {
        status(probes, "/healthz", false, None).await == Some(200)
    })
    .await;

    assert_eq!(
        status(metrics, "/metrics", true, Some(&allowed)).await,
        Some(200)
    );
    assert_eq!(
        status(metrics, "/metrics", true, Some(&stranger)).await,
        Some(403)
    );
    assert_eq!(
        status(metrics, "/metrics", true, Some("not-a-token")).await,
        Some(401)
    );
    assert_eq!(status(metrics, "/metrics", true, None).await, Some(401));
    assert_eq!(
        status(metrics, "/metrics", false, Some(&allowed))
            .await
            .filter(|c| *c == 200),
        None,
        "no plain HTTP"
    );
    assert_eq!(status(probes, "/readyz", false, None).await, Some(200));

    let _ = stop.send(());
    task.await.unwrap().unwrap();
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client);
    roles
        .delete(&reader, &DeleteParams::default())
        .await
        .unwrap();
    bindings
        .delete(&reader, &DeleteParams::default())
        .await
        .unwrap();
}
