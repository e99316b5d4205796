//! HTTPS for an axum router: rustls over each accepted connection, HTTP/1 by hyper, and a
//! certificate that can be swapped while serving (connections made after the swap get the
//! new one; those open keep theirs).
//!
//! axum serves plain TCP only; the accept loop is written here so that the TLS handshake
//! happens per connection without another server crate.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use parking_lot::RwLock;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::certificate::Material;
use crate::error::{Error, Result};

/// The certificate new connections are served with.
#[derive(Debug)]
pub(crate) struct CurrentCertificate(RwLock<Arc<CertifiedKey>>);

impl CurrentCertificate {
    pub(crate) fn new(material: &Material) -> Result<Self> {
        Ok(CurrentCertificate(RwLock::new(certified(material)?)))
    }

    /// Serve `material` from now on.
    pub(crate) fn replace(&self, material: &Material) -> Result<()> {
        *self.0.write() = certified(material)?;
        Ok(())
    }
}

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().clone())
    }
}

/// The chain and key of `material` as rustls serves them; a key that does not match the
/// certificate is an error.
fn certified(material: &Material) -> Result<Arc<CertifiedKey>> {
    let chain = CertificateDer::pem_slice_iter(material.cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::with_source("the webhook certificate is not PEM", e))?;
    if chain.is_empty() {
        return Err(Error::config(
            "the webhook certificate file holds no certificate",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(material.key_pem.as_bytes())
        .map_err(|e| Error::with_source("the webhook key is not a PEM private key", e))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider)
        .map(Arc::new)
        .map_err(|e| Error::with_source("the webhook key does not fit its certificate", e))
}

/// Listen on `address` (before returning, so that a port in use is the caller's error).
pub(crate) async fn bind(address: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(address).await.map_err(|e| {
        Error::with_source(
            format!("cannot listen on {address} (webhook.bind-address)"),
            e,
        )
    })
}

/// Serve `router` over TLS on `listener` until `stop` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    certificate: Arc<CurrentCertificate>,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map(|b| b.with_no_client_auth().with_cert_resolver(certificate));
    let acceptor = match config.as_mut() {
        Ok(config) => {
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            TlsAcceptor::from(Arc::new(config.clone()))
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot configure TLS for the webhook server");
            return;
        }
    };
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook server: accept failed");
                    continue;
                }
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "webhook server: TLS handshake failed");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |request| {
                let mut router = router.clone();
                async move {
                    tower_service::Service::call(&mut router, request.map(axum::body::Body::new))
                        .await
                }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "webhook server: connection ended");
            }
        });
    }
}
