//! The internal TLS context: a CA the operator generates once and keeps in a Secret, and
//! server pairs it signs, kept in Secrets too.
//!
//! The `internal-tls` component owns, per CR:
//!
//! - `<cr>-infra-tls-ca` (Opaque): `key.ca.pem` and `crt.ca.pem`, the CA. A complete Secret
//!   is reused as it is until it expires within
//!   [`CA_RENEW_BEFORE`](super::pki::CA_RENEW_BEFORE) (a server certificate's validity and
//!   its renewal window), when a new CA replaces it, with a warning, and every pair is
//!   reissued from the new one; a partial one (a key missing or empty) is replaced by a new
//!   CA, with a warning; none at all is generated. A Secret whose content does not parse, or holds a
//!   CA this context did not make, is a config error naming it: the operator never throws
//!   away a CA someone may have put there on purpose.
//! - `<cr>-<component>[-<key name>]-tls` (`kubernetes.io/tls`): `tls.crt`, `tls.key` and
//!   `ca.crt` for each requested pair, ready to mount. The
//!   [`REQUEST_ANNOTATION`] records what the pair was issued for. Two pairs whose names
//!   spell the same Secret (component `db` with key name `x`, component `db-x` without
//!   one) are a config error naming both.
//!
//! **Per CR, not per namespace.** Everything windlass applies belongs to one CR: it carries
//! the CR's owner reference and ownership label, is garbage-collected with it, and windlass
//! refuses to write an object another CR owns. A namespace-wide CA would be one object that
//! several CRs render, which that rule forbids, and deleting the first CR would take every
//! other CR's trust root with it. A CR's servers and clients share its CA, which is the
//! scope that matters.
//!
//! **Steady state writes nothing.** windlass skips a write when the rendered object is what
//! it applied last time, so this context renders byte-for-byte what the cluster holds
//! whenever it is still good: the CA is read back from its Secret, and a stored pair is
//! reused while it verifies against the current CA (rustls's verifier), is valid for
//! [`RENEW_BEFORE`](super::pki::RENEW_BEFORE) more, and was issued for the same names and
//! key algorithm. New material appears only when something changed: no CA yet, a partial
//! CA Secret, a new CA, a CA or a pair close to expiry, other names.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use windlass::component::{Component, Resources};
use windlass::controller::{ComponentId, Components, Controller};
use windlass::reference::Ref;
use windlass::session::Session;
use windlass::{Error, Result};

pub use super::config::INTERNAL;
use super::config::TlsConfig;
use super::context::{PairKey, PairSecret, Tls, TlsContext};
use super::pki::{CertRequest, CertificateAuthority, KeyAlgorithm, KeyCertPair, TlsError};
/// The name of the component that owns the CA and the pairs.
pub const CA_COMPONENT: &str = "internal-tls";
/// The CA Secret, `<cr>-infra-tls-ca`.
pub const CA_SECRET: Ref<Secret> = Ref::new("infra-tls-ca");
/// The CA Secret's key holding the CA's private key (PKCS#8 PEM).
pub const CA_KEY_FIELD: &str = "key.ca.pem";
/// The CA Secret's key holding the CA's certificate (PEM).
pub const CA_CERT_FIELD: &str = "crt.ca.pem";
/// The field of a pair Secret with the server (or client) certificate, as a
/// `kubernetes.io/tls` Secret names it.
const PAIR_CERT_FIELD: &str = "tls.crt";
/// The field of a pair Secret with the private key.
const PAIR_KEY_FIELD: &str = "tls.key";
/// The field of a pair Secret with the CA's certificate.
const PAIR_CA_FIELD: &str = "ca.crt";
/// The annotation on a pair Secret with the fingerprint of what it was issued for
/// ([`CertRequest::fingerprint`]): names, intermediate or not, key algorithm.
pub const REQUEST_ANNOTATION: &str = "windlass.dev/tls-request";

/// The internal context: see the [module docs](self).
pub struct InternalTls<C: Controller> {
    shared: Arc<Shared>,
    ca_component: ComponentId,
    controller: PhantomData<fn() -> C>,
}

impl<C: Controller> InternalTls<C> {
    /// The `tls.type` of this context, as registered by [`super::TlsRegistry::new`].
    pub const TYPE: &'static str = INTERNAL;

    /// Add the `internal-tls` component to `graph` and return the context's handle: the
    /// [`super::TlsFactory`] of `internal`.
    pub fn install(
        _session: &Session<C>,
        config: &TlsConfig,
        graph: &mut Components<C>,
    ) -> Result<Tls<C>> {
        if graph.get(CA_COMPONENT).is_some() {
            return Err(Error::config(format!(
                "component {CA_COMPONENT} is already in the graph: make the TLS context once \
                 in Controller::components and clone the handle"
            )));
        }
        let shared = Arc::new(Shared {
            key_algorithm: config.key_algorithm,
            labels: config.labels.clone(),
            requests: Mutex::default(),
            ca: tokio::sync::OnceCell::new(),
            pairs: tokio::sync::Mutex::default(),
        });
        let ca_component = graph.add(CaComponent {
            shared: shared.clone(),
        })?;
        Ok(Tls::new(InternalTls {
            shared,
            ca_component,
            controller: PhantomData,
        }))
    }
}

#[async_trait]
impl<C: Controller> TlsContext<C> for InternalTls<C> {
    fn request_server_pair(
        &self,
        graph: &mut Components<C>,
        server: ComponentId,
        key_name: Option<&str>,
        request: CertRequest,
    ) -> Result<()> {
        let key = PairKey::new(graph.name(server), key_name);
        request
            .validate()
            .map_err(|e| Error::config(format!("TLS server pair for {key}: {e}")))?;
        let mut requests = self.shared.requests.lock();
        if requests.contains_key(&key) {
            tracing::warn!(pair = %key, "a TLS server pair was requested twice; the repeat is ignored");
            return Ok(());
        }
        // `<component>-<key name>` can spell another component's pair: both would be kept
        // in one Secret, each overwriting the other.
        let name = key.to_string();
        if let Some(other) = requests.keys().find(|other| other.to_string() == name) {
            return Err(Error::config(format!(
                "TLS server pairs {} and {} would share the Secret <cr>-{name}-tls: rename a \
                 component or a key name",
                describe(other),
                describe(&key),
            )));
        }
        // A disabled server takes part in no edge; its pair is not kept in the cluster
        // (its Secret is pruned), though its render may still ask for one.
        let enabled = !graph.is_disabled(server);
        if enabled {
            graph.depends_on(server, self.ca_component)?;
        }
        requests.insert(key, Requested { request, enabled });
        Ok(())
    }

    async fn server_pair(&self, session: &Session<C>, key: &PairKey) -> Result<KeyCertPair> {
        self.shared.pair(session, key).await
    }

    async fn ca_cert(&self, session: &Session<C>) -> Result<String> {
        Ok(self.shared.ca(session).await?.cert_pem().to_string())
    }

    fn pair_secret(&self, session: &Session<C>, key: &PairKey) -> Option<PairSecret> {
        self.shared
            .requests
            .lock()
            .contains_key(key)
            .then(|| PairSecret {
                name: pair_secret_name(session, key),
                cert: PAIR_CERT_FIELD.into(),
                key: PAIR_KEY_FIELD.into(),
                ca: Some(PAIR_CA_FIELD.into()),
            })
    }
}

/// How a config error names a pair: its component and key name.
fn describe(key: &PairKey) -> String {
    match &key.key_name {
        Some(key_name) => format!("(component {}, key name {key_name})", key.component),
        None => format!("(component {}, no key name)", key.component),
    }
}

/// `<cr>-<component>[-<key name>]-tls`.
pub fn pair_secret_name<C: Controller>(session: &Session<C>, key: &PairKey) -> String {
    session.scoped_name(&format!("{key}-tls"))
}

#[derive(Clone)]
struct Requested {
    request: CertRequest,
    enabled: bool,
}

/// What the context and its component share for one reconcile.
struct Shared {
    key_algorithm: KeyAlgorithm,
    labels: BTreeMap<String, String>,
    requests: Mutex<BTreeMap<PairKey, Requested>>,
    /// Loaded or generated once per reconcile, whoever asks first: components render
    /// concurrently, and two CAs in one reconcile would sign pairs no client could verify.
    ca: tokio::sync::OnceCell<Arc<CertificateAuthority>>,
    /// Each pair, once decided (reused or issued), for every later reader.
    pairs: tokio::sync::Mutex<BTreeMap<PairKey, KeyCertPair>>,
}

impl Shared {
    async fn ca<C: Controller>(&self, session: &Session<C>) -> Result<Arc<CertificateAuthority>> {
        self.ca
            .get_or_try_init(|| self.load_ca(session))
            .await
            .cloned()
    }

    async fn load_ca<C: Controller>(
        &self,
        session: &Session<C>,
    ) -> Result<Arc<CertificateAuthority>> {
        let name = session.name_of(CA_SECRET);
        let Some(secret) = session.get(CA_SECRET).await? else {
            tracing::info!(secret = %name, "no CA Secret yet: generating a CA");
            return self.generate_ca().await;
        };
        let data = secret.data.unwrap_or_default();
        let field = |key: &str| data.get(key).filter(|value| !value.0.is_empty());
        match (field(CA_KEY_FIELD), field(CA_CERT_FIELD)) {
            (Some(key), Some(cert)) => {
                let ca = stored_ca(&name, key, cert).await?;
                if ca.due_for_replacement() {
                    tracing::warn!(
                        secret = %name,
                        not_after = ?time::OffsetDateTime::from(ca.not_after()).date(),
                        "the CA expires within a server certificate's validity: generating a \
                         new CA; every server pair is reissued"
                    );
                    return self.generate_ca().await;
                }
                tracing::debug!(secret = %name, "reusing the CA from its Secret");
                Ok(Arc::new(ca))
            }
            (key, cert) => {
                let missing: Vec<&str> = [(CA_KEY_FIELD, key), (CA_CERT_FIELD, cert)]
                    .into_iter()
                    .filter(|(_, value)| value.is_none())
                    .map(|(field, _)| field)
                    .collect();
                tracing::warn!(
                    secret = %name,
                    missing = ?missing,
                    "the CA Secret is incomplete: generating a new CA; every server pair is reissued"
                );
                self.generate_ca().await
            }
        }
    }

    async fn generate_ca(&self) -> Result<Arc<CertificateAuthority>> {
        let algorithm = self.key_algorithm;
        let ca = tokio::task::spawn_blocking(move || CertificateAuthority::generate(algorithm))
            .await
            .map_err(|e| Error::with_source("generating the CA", e))?
            .map_err(material_error)?;
        Ok(Arc::new(ca))
    }

    fn requested(&self, key: &PairKey) -> Option<Requested> {
        self.requests.lock().get(key).cloned()
    }

    async fn pair<C: Controller>(
        &self,
        session: &Session<C>,
        key: &PairKey,
    ) -> Result<KeyCertPair> {
        let requested = self.requested(key).ok_or_else(|| {
            Error::config(format!(
                "no TLS server pair was requested for {key}: request it with Tls::request in \
                 Controller::components"
            ))
        })?;
        let mut pairs = self.pairs.lock().await;
        if let Some(pair) = pairs.get(key) {
            return Ok(pair.clone());
        }
        let ca = self.ca(session).await?;
        let fingerprint = requested.request.fingerprint(self.key_algorithm);
        let name = pair_secret_name(session, key);
        let stored = session.get::<Secret>(name.as_str()).await?;
        let pair = match reusable(stored, &fingerprint, &ca, &requested.request) {
            Ok(pair) => {
                tracing::debug!(pair = %key, secret = %name, "reusing the stored TLS pair");
                pair
            }
            Err(why) => {
                tracing::info!(pair = %key, secret = %name, reason = %why, "issuing a TLS pair");
                let (request, algorithm) = (requested.request.clone(), self.key_algorithm);
                let ca = ca.clone();
                tokio::task::spawn_blocking(move || ca.issue(&request, algorithm))
                    .await
                    .map_err(|e| Error::with_source(format!("issuing the TLS pair for {key}"), e))?
                    .map_err(material_error)?
            }
        };
        pairs.insert(key.clone(), pair.clone());
        Ok(pair)
    }
}

/// The stored pair, if it is still good for `request` from `ca`; else why not.
fn reusable(
    stored: Option<Secret>,
    fingerprint: &str,
    ca: &CertificateAuthority,
    request: &CertRequest,
) -> std::result::Result<KeyCertPair, String> {
    let secret = stored.ok_or("there is no pair Secret yet")?;
    let issued_for = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REQUEST_ANNOTATION));
    if issued_for.map(String::as_str) != Some(fingerprint) {
        return Err("the pair was issued for other names or another key algorithm".into());
    }
    let data = secret.data.unwrap_or_default();
    let text = |field: &str| {
        data.get(field)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .ok_or_else(|| format!("data.{field} is missing or not text"))
    };
    let pair = KeyCertPair::new(text(PAIR_KEY_FIELD)?, text(PAIR_CERT_FIELD)?);
    ca.verify(&pair, request).map_err(|e| e.to_string())?;
    Ok(pair)
}

/// The CA kept in the Secret `name`, from its key and certificate fields, loaded (and so
/// checked) on a blocking thread; a config error naming the field at fault if it does
/// not load.
async fn stored_ca(
    name: &str,
    key: &ByteString,
    cert: &ByteString,
) -> Result<CertificateAuthority> {
    let (key, cert) = (
        pem_text(name, CA_KEY_FIELD, key)?,
        pem_text(name, CA_CERT_FIELD, cert)?,
    );
    tokio::task::spawn_blocking(move || CertificateAuthority::from_pem(&key, &cert))
        .await
        .map_err(|e| Error::with_source("loading the CA", e))?
        .map_err(|e| stored_ca_error(name, e))
}

/// A field of the CA Secret `name` as text: PEM is text, so anything else is a config
/// error naming the field.
fn pem_text(name: &str, field: &str, value: &ByteString) -> Result<String> {
    std::str::from_utf8(&value.0)
        .map(str::to_string)
        .map_err(|_| {
            Error::config(format!(
                "Secret {name} data.{field} is not PEM text; delete the Secret to have a new CA \
                 generated"
            ))
        })
}

/// Why the CA in the Secret `name` does not load, as a config error naming the field at
/// fault: the key, the certificate, or both when together they are no usable CA.
fn stored_ca_error(name: &str, e: TlsError) -> Error {
    let at = match e {
        TlsError::BadKey(_) => format!("data.{CA_KEY_FIELD}"),
        TlsError::BadCertificate(_) => format!("data.{CA_CERT_FIELD}"),
        _ => format!("data.{CA_KEY_FIELD} and data.{CA_CERT_FIELD}"),
    };
    Error::config(format!(
        "Secret {name} {at}: {e}; delete the Secret to have a new CA generated \
         (every server pair is then reissued)"
    ))
}

fn material_error(e: TlsError) -> Error {
    match e {
        TlsError::Unsupported(_) => Error::config(format!("tls.keyAlgorithm: {e}")),
        other => Error::with_source("TLS material", other),
    }
}

/// The `internal-tls` component: renders the CA Secret and one Secret per enabled pair.
struct CaComponent {
    shared: Arc<Shared>,
}

#[async_trait]
impl<C: Controller> Component<C> for CaComponent {
    fn name(&self) -> &str {
        CA_COMPONENT
    }

    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        let ca = self.shared.ca(session).await?;
        let labels = (!self.shared.labels.is_empty()).then(|| self.shared.labels.clone());
        out.add(
            "ca",
            &Secret {
                metadata: ObjectMeta {
                    name: Some(session.name_of(CA_SECRET)),
                    labels: labels.clone(),
                    ..Default::default()
                },
                type_: Some("Opaque".into()),
                data: Some(BTreeMap::from([
                    (CA_KEY_FIELD.to_string(), bytes(ca.key_pem())),
                    (CA_CERT_FIELD.to_string(), bytes(ca.cert_pem())),
                ])),
                ..Default::default()
            },
        )?;
        let enabled: Vec<(PairKey, Requested)> = self
            .shared
            .requests
            .lock()
            .iter()
            .filter(|(_, r)| r.enabled)
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        for (key, requested) in enabled {
            let pair = self.shared.pair(session, &key).await?;
            let fingerprint = requested.request.fingerprint(self.shared.key_algorithm);
            out.add(
                &format!("pair-{key}"),
                &Secret {
                    metadata: ObjectMeta {
                        name: Some(pair_secret_name(session, &key)),
                        labels: labels.clone(),
                        annotations: Some(BTreeMap::from([(
                            REQUEST_ANNOTATION.to_string(),
                            fingerprint,
                        )])),
                        ..Default::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(BTreeMap::from([
                        (PAIR_CERT_FIELD.to_string(), bytes(pair.cert_pem())),
                        (PAIR_KEY_FIELD.to_string(), bytes(pair.key_pem())),
                        (PAIR_CA_FIELD.to_string(), bytes(ca.cert_pem())),
                    ])),
                    ..Default::default()
                },
            )?;
        }
        Ok(())
    }
}

fn bytes(text: &str) -> ByteString {
    ByteString(text.as_bytes().to_vec())
}
