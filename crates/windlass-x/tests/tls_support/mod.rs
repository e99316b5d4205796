//! What the TLS tests share: a controller whose server component gets a pair from the
//! configured TLS context, and a real TLS handshake over loopback with rustls.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use windlass::prelude::*;
use windlass::testing::Widget;
use windlass_x::tls::{CertRequest, Tls, TlsRegistry};

/// The server component's name.
pub const SERVER: &str = "web";

/// A controller of Widgets with one server component, `web`, whose pair is requested
/// with the DNS names in `spec.dnsNames` (default `web.test.svc`) and the IPs in
/// `spec.ips` (default `127.0.0.1`); `spec.webDisabled: true` disables `web`. `web` renders a ConfigMap `<cr>-web-cert` with the
/// certificate it got (never the key) and the CA, so tests can see what render saw.
pub struct TlsController {
    pub registry: TlsRegistry<Self>,
    /// Request the same pair twice (the repeat must be ignored).
    pub repeat_request: bool,
    /// Request the pair at all (`web` asks for it while rendering either way).
    pub request_pair: bool,
    /// Request `web`'s pair under the key name `x`, and one for a component `web-x`: both
    /// spell `web-x`.
    pub colliding_pairs: bool,
}

impl TlsController {
    pub fn new() -> Self {
        TlsController {
            registry: TlsRegistry::new(),
            repeat_request: false,
            request_pair: true,
            colliding_pairs: false,
        }
    }
}

fn strings(spec: &Value, field: &str, default: &str) -> Vec<String> {
    match spec[field].as_array() {
        Some(items) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        None => vec![default.to_string()],
    }
}

#[async_trait]
impl Controller for TlsController {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let tls = self.registry.context(session, &mut graph)?;
        let spec = &session.manifest()["spec"];
        let enabled = spec["webDisabled"] != Value::Bool(true);
        let web = graph.add_enabled(Server { tls: tls.clone() }, enabled)?;
        let ips = strings(spec, "ips", "127.0.0.1")
            .into_iter()
            .map(|ip| {
                ip.parse::<IpAddr>()
                    .map_err(|e| Error::config(format!("spec.ips: {ip}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let request = CertRequest::new()
            .dns_names(strings(spec, "dnsNames", "web.test.svc"))
            .ip_addresses(ips);
        if self.request_pair {
            tls.request(&mut graph, web, None, request.clone())?;
        }
        if self.colliding_pairs {
            let other = graph.add(Quiet("web-x"))?;
            tls.request(&mut graph, web, Some("x"), request.clone())?;
            tls.request(&mut graph, other, None, request.clone())?;
        }
        if self.repeat_request {
            tls.request(&mut graph, web, None, request.dns_names(["other.test.svc"]))?;
        }
        Ok(graph)
    }
}

/// A component that renders nothing.
struct Quiet(&'static str);

#[async_trait]
impl Component<TlsController> for Quiet {
    fn name(&self) -> &str {
        self.0
    }

    async fn render(&self, _: &Session<TlsController>, _: &mut Resources) -> Result<()> {
        Ok(())
    }
}

struct Server {
    tls: Tls<TlsController>,
}

#[async_trait]
impl Component<TlsController> for Server {
    fn name(&self) -> &str {
        SERVER
    }

    async fn render(&self, session: &Session<TlsController>, out: &mut Resources) -> Result<()> {
        let pair = self.tls.server_pair(session, SERVER, None).await?;
        let ca = self.tls.ca_pem(session).await?;
        out.add(
            "cert",
            &ConfigMap {
                metadata: session.meta(Ref::<ConfigMap>::new("web-cert")),
                data: Some(
                    [
                        ("tls.crt".to_string(), pair.cert_pem().to_string()),
                        ("ca.crt".to_string(), ca),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
        )?;
        Ok(())
    }
}

/// The backend config overrides selecting a TLS context type, for a CR's spec.
pub fn tls_spec(tls_type: &str) -> Value {
    serde_json::json!({"configOverrides": {"tls": {"type": tls_type}}})
}

/// The request `TlsController` makes for a CR with `dns_names` and `ips`.
pub fn request_for(dns_names: &[&str], ips: &[&str]) -> CertRequest {
    CertRequest::new()
        .dns_names(dns_names.iter().copied())
        .ip_addresses(ips.iter().map(|ip| ip.parse::<IpAddr>().unwrap()))
}

/// A Secret's data field, decoded (data is base64 in the JSON form).
pub fn secret_text(secret: &Value, field: &str) -> String {
    let typed: k8s_openapi::api::core::v1::Secret = serde_json::from_value(secret.clone()).unwrap();
    let value = typed
        .data
        .and_then(|data| data.get(field).cloned())
        .unwrap_or_else(|| panic!("no data.{field} in {}", secret["metadata"]["name"]));
    String::from_utf8(value.0).unwrap()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Serve TLS with `cert_pem`/`key_pem` on a loopback port, and connect a rustls client
/// trusting `ca_pem` to `server_name` there. `Ok` with what the server echoed back when
/// the handshake and one exchange succeed, `Err` with the client's error otherwise.
pub async fn round_trip(
    cert_pem: &str,
    key_pem: &str,
    ca_pem: &str,
    server_name: &str,
) -> std::result::Result<String, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let server_config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        // A refused handshake ends here with an error; that is the client's story to tell.
        if let Ok(mut tls) = acceptor.accept(tcp).await {
            let mut buf = [0u8; 5];
            if tls.read_exact(&mut buf).await.is_ok() {
                let _ = tls.write_all(&buf).await;
                let _ = tls.shutdown().await;
            }
        }
    });

    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let client_config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let result = async {
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(b"hello").await.map_err(|e| e.to_string())?;
        let mut echoed = String::new();
        tls.read_to_string(&mut echoed)
            .await
            .map_err(|e| e.to_string())?;
        Ok(echoed)
    }
    .await;
    server.abort();
    result
}
