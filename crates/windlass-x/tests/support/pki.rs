//! Test TLS material from windlass-x's own internal TLS context: a controller with the
//! `internal` context reconciles a CR on the in-memory cluster, and the CA and the server
//! pair are read back from the Secrets its `internal-tls` component wrote — what an
//! operator's pods would mount.

use serde_json::json;
use windlass::object::ObjectRef;
use windlass::testing::Harness;

use super::servers::ServerTls;
#[path = "../tls_support/mod.rs"]
mod tls_support;
use tls_support::{TlsController, secret_text};

/// A CA and a server identity it issued.
pub struct TestPki {
    /// The CA certificate clients verify the server with (`crt.ca.pem` of the CA Secret).
    pub ca_pem: String,
    /// The server's certificate and key (and the CA, for servers that want it configured).
    pub server: ServerTls,
}

/// A fresh internal CA and a server pair for `localhost` and 127.0.0.1 it issued, as the
/// internal TLS context stores them in Secrets.
pub async fn test_pki() -> TestPki {
    let env = Harness::dry_run(TlsController::new()).await;
    let spec = json!({"configOverrides": {"tls": {"type": "internal"}},
        "dnsNames": ["localhost"], "ips": ["127.0.0.1"]});
    let cr = env.apply_cr("db", spec).await;
    let report = env.reconcile(&cr).await;
    assert!(
        report.error.is_none(),
        "the internal TLS context: {:?}",
        report.error
    );
    let secret = |name: &str| ObjectRef::new("v1", "Secret", Some("test"), name);
    let ca = env
        .get(&secret("db-infra-tls-ca"))
        .await
        .expect("the CA Secret");
    let pair = env
        .get(&secret("db-web-tls"))
        .await
        .expect("the pair Secret");
    let ca_pem = secret_text(&ca, "crt.ca.pem");
    assert_eq!(secret_text(&pair, "ca.crt"), ca_pem);
    TestPki {
        server: ServerTls {
            cert_pem: secret_text(&pair, "tls.crt"),
            key_pem: secret_text(&pair, "tls.key"),
            ca_pem: ca_pem.clone(),
        },
        ca_pem,
    }
}
