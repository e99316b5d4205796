//! Keys and certificates: an internal CA, the server and intermediate
//! certificates it signs, PEM in and out.
//!
//! Built on `rcgen` with ring, the crypto library kube's rustls already compiles; stored
//! certificates are checked with `rustls-webpki`, rustls's own verifier, so what this module
//! accepts is what a rustls client accepts. There is no X.509 parser outside tests: every
//! check that matters (is this certificate signed by this CA, valid at that time, for these
//! names, for this key?) is a verification, not a field comparison.
//!
//! Choices, and why:
//!
//! - **ECDSA P-256 keys by default**: generated in microseconds (an RSA-2048 key takes about
//!   0.1 s optimised and up to a second unoptimised, with a random spread), small, and accepted by
//!   every TLS stack an operator deploys (OpenSSL-based Postgres and Redis, Go, Java, rustls).
//!   RSA-2048 stays available with the `tls-rsa` feature for clients that cannot do ECDSA.
//! - **Validity**: the CA for ten years ([`CA_VALIDITY`]), server and intermediate
//!   certificates for one year ([`CERT_VALIDITY`]) but never past the CA's own end,
//!   reissued once they expire within [`RENEW_BEFORE`]; the CA is due for replacement once
//!   it expires within [`CA_RENEW_BEFORE`]. Trust anchors carry no validity in webpki, so
//!   the CA's notAfter is read from its certificate (with `yasna`, which rcgen already
//!   builds) and checked here. The short life of server certificates limits how long a
//!   leaked key stays usable. Every certificate starts [`CLOCK_SKEW`] in the past, so a
//!   client whose clock is a little behind accepts a fresh one.
//! - **IP SANs are IP entries**: no conforming client matches an IP address written as a
//!   DNS name.
//! - The CA's KeyUsage is keyCertSign + cRLSign + digitalSignature (no keyEncipherment, which
//!   has no meaning for a CA's key); intermediates get the same with a path length of 0
//!   (they sign end-entity certificates only). Server certificates get digitalSignature
//!   (+ keyEncipherment for RSA keys only, RFC 5480 §3), EKU serverAuth + clientAuth, so one
//!   pair serves both ends of mutual TLS, and the fixed CN `windlass server`: their names
//!   are the SANs.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use serde::{Deserialize, Serialize};

/// How long a generated CA is valid: ten years.
pub const CA_VALIDITY: Duration = Duration::from_secs(3650 * 24 * 3600);
/// How long a server or intermediate certificate is valid: one year.
pub const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A stored certificate that expires within this time is reissued: 30 days.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Certificates start this long before they are made, for clients whose clock is behind.
pub const CLOCK_SKEW: Duration = Duration::from_secs(3600);
/// A CA that expires within this time is replaced (and every pair reissued from the new
/// one): [`CERT_VALIDITY`] + [`RENEW_BEFORE`], so a certificate issued from the CA always
/// gets its full validity and is never renewed only because the CA ends.
pub const CA_RENEW_BEFORE: Duration =
    Duration::from_secs(CERT_VALIDITY.as_secs() + RENEW_BEFORE.as_secs());

/// The subject of every CA this module generates. Loading a CA re-creates its issuer
/// from this name, so a CA made elsewhere (another subject) is refused rather than used
/// to sign certificates no client could chain.
pub const CA_COMMON_NAME: &str = "windlass internal CA";
const ORGANIZATION: &str = "windlass";
/// The subject of intermediate CAs.
const INTERMEDIATE_COMMON_NAME: &str = "windlass intermediate CA";
/// The subject CN of server certificates (their names are in the SANs).
const SERVER_COMMON_NAME: &str = "windlass server";

/// What went wrong with keys or certificates, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The text is not a PEM-encoded PKCS#8 private key of a supported algorithm.
    #[error("not a PEM PKCS#8 private key (ECDSA P-256/P-384, Ed25519 or RSA): {0}")]
    BadKey(String),
    /// The text is not a PEM-encoded X.509 certificate.
    #[error("not a PEM X.509 certificate: {0}")]
    BadCertificate(String),
    /// The key and the certificate do not belong together.
    #[error("the private key does not match the certificate's public key")]
    KeyMismatch,
    /// The certificate is not usable as a CA that issues verifiable certificates (another
    /// subject than [`CA_COMMON_NAME`], not CA:true, a KeyUsage without keyCertSign, a
    /// signature that does not verify).
    #[error(
        "not a CA windlass can issue certificates from ({0}); remove it to have a new one generated"
    )]
    ForeignCa(String),
    /// The certificate does not verify for what it was asked for: another CA signed it,
    /// it or the CA expires soon, or it lacks a name; or an expired CA was asked to issue.
    #[error("{0}")]
    NotValid(String),
    /// A SAN is not a valid DNS name.
    #[error("{name:?} is not a valid DNS name for a certificate: {reason}")]
    BadName {
        /// The name as given.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// A certificate request with neither a DNS name nor an IP address.
    #[error("a certificate needs at least one DNS name or IP address")]
    NoNames,
    /// The key algorithm needs a feature this build does not have.
    #[error("{0} keys need windlass-x's `tls-rsa` feature")]
    Unsupported(KeyAlgorithm),
    /// Key generation or signing failed (the system's random source, an internal error).
    #[error("generating TLS material failed: {0}")]
    Generate(String),
}

fn generate_error(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

/// The algorithm of generated keys (`tls.keyAlgorithm`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum KeyAlgorithm {
    /// ECDSA on NIST P-256 with SHA-256: the default (fast, small, universally supported).
    #[default]
    #[serde(rename = "ecdsa-p256")]
    EcdsaP256,
    /// RSA with a 2048-bit modulus and e = 65537, signing with PKCS#1 v1.5 SHA-256 (needs the
    /// `tls-rsa` feature).
    #[serde(rename = "rsa2048")]
    Rsa2048,
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyAlgorithm::EcdsaP256 => "ecdsa-p256",
            KeyAlgorithm::Rsa2048 => "rsa2048",
        })
    }
}

/// A private key, with its PKCS#8 PEM. Its `Debug` prints the algorithm only.
pub struct PrivateKey {
    pem: String,
    pair: KeyPair,
}

impl PrivateKey {
    /// A new random key.
    pub fn generate(algorithm: KeyAlgorithm) -> Result<Self, TlsError> {
        let pair = match algorithm {
            KeyAlgorithm::EcdsaP256 => {
                KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(generate_error)?
            }
            KeyAlgorithm::Rsa2048 => rsa_key()?,
        };
        Ok(PrivateKey {
            pem: pair.serialize_pem(),
            pair,
        })
    }

    /// Parse a PEM-encoded PKCS#8 private key (`-----BEGIN PRIVATE KEY-----`).
    pub fn from_pem(pem: &str) -> Result<Self, TlsError> {
        // rcgen's own error says only "could not parse"; say which part was wrong.
        let der = rustls_pki_types::PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| TlsError::BadKey(e.to_string()))?;
        let pair = KeyPair::try_from(&der).map_err(|e| TlsError::BadKey(e.to_string()))?;
        Ok(PrivateKey {
            pem: pem.to_string(),
            pair,
        })
    }

    /// The key as PKCS#8 PEM, exactly as generated or parsed.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The public key as PEM (`-----BEGIN PUBLIC KEY-----`, SubjectPublicKeyInfo).
    pub fn public_key_pem(&self) -> String {
        self.pair.public_key_pem()
    }

    fn spki_der(&self) -> Vec<u8> {
        use rcgen::PublicKeyData;
        self.pair.subject_public_key_info()
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateKey")
            .field("algorithm", &self.pair.algorithm())
            .field("pem", &"<redacted>")
            .finish()
    }
}

#[cfg(feature = "tls-rsa")]
fn rsa_key() -> Result<KeyPair, TlsError> {
    use rsa::pkcs8::EncodePrivateKey;
    let key = rsa::RsaPrivateKey::new(&mut rand::rng(), 2048)
        .map_err(|e| TlsError::Generate(format!("RSA key: {e}")))?;
    let der = key
        .to_pkcs8_der()
        .map_err(|e| TlsError::Generate(format!("RSA key as PKCS#8: {e}")))?;
    let der = rustls_pki_types::PrivatePkcs8KeyDer::from(der.as_bytes().to_vec());
    KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256).map_err(generate_error)
}

#[cfg(not(feature = "tls-rsa"))]
fn rsa_key() -> Result<KeyPair, TlsError> {
    Err(TlsError::Unsupported(KeyAlgorithm::Rsa2048))
}

/// A private key and its certificate, both PEM. Its `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyCertPair {
    key_pem: String,
    cert_pem: String,
}

impl KeyCertPair {
    /// A pair from PEM text (not checked: see [`CertificateAuthority::verify`]).
    pub fn new(key_pem: impl Into<String>, cert_pem: impl Into<String>) -> Self {
        KeyCertPair {
            key_pem: key_pem.into(),
            cert_pem: cert_pem.into(),
        }
    }
    /// The private key, PKCS#8 PEM. Keep it out of logs, Events and status.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
    /// The certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
}

impl fmt::Debug for KeyCertPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyCertPair")
            .field("key_pem", &"<redacted>")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .finish()
    }
}

/// What a server (or intermediate CA) certificate is for: its names, and whether it may
/// sign certificates itself.
///
/// ```
/// use windlass_x::tls::CertRequest;
///
/// let request = CertRequest::new()
///     .dns_names(["db", "db.shop.svc", "db.shop.svc.cluster.local"])
///     .ip_addresses(["127.0.0.1".parse().unwrap()]);
/// assert_eq!(request.names().count(), 4);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CertRequest {
    dns_names: Vec<String>,
    ip_addresses: Vec<IpAddr>,
    intermediate_ca: bool,
}

impl CertRequest {
    /// A request with no names yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Add DNS SANs (e.g. a Service's `name`, `name.namespace.svc`).
    pub fn dns_names<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.dns_names.extend(names.into_iter().map(Into::into));
        self
    }
    /// Add IP SANs, written as IP entries.
    pub fn ip_addresses(mut self, ips: impl IntoIterator<Item = IpAddr>) -> Self {
        self.ip_addresses.extend(ips);
        self
    }
    /// Make the certificate an intermediate CA (CA:true, keyCertSign): a server that signs
    /// certificates of its own, e.g. for its clients.
    pub fn intermediate_ca(mut self) -> Self {
        self.intermediate_ca = true;
        self
    }
    /// The DNS SANs, as given (certificates carry them without a trailing dot).
    pub fn dns(&self) -> &[String] {
        &self.dns_names
    }
    /// The IP SANs, as given.
    pub fn ips(&self) -> &[IpAddr] {
        &self.ip_addresses
    }
    /// Whether this is an intermediate CA.
    pub fn is_intermediate_ca(&self) -> bool {
        self.intermediate_ca
    }
    /// Every SAN as text, DNS names first.
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        self.dns_names
            .iter()
            .cloned()
            .chain(self.ip_addresses.iter().map(IpAddr::to_string))
    }

    /// The SANs in a canonical order without repeats: requests that differ only in order
    /// ask for the same certificate.
    /// DNS names are written without the trailing dot of an absolute name (`db.shop.svc.`
    /// becomes `db.shop.svc`): webpki, like most verifiers, refuses a certificate whose
    /// SAN ends in a dot, while a client connecting to the absolute name still matches
    /// the relative one.
    fn canonical(&self) -> (Vec<String>, Vec<IpAddr>) {
        let mut dns: Vec<String> = self
            .dns_names
            .iter()
            .map(|name| relative(name).to_string())
            .collect();
        dns.sort();
        dns.dedup();
        let mut ips = self.ip_addresses.clone();
        ips.sort();
        ips.dedup();
        (dns, ips)
    }

    /// A stable digest of what this request asks for, with the key algorithm: equal
    /// digests ask for interchangeable certificates. Order, repeats and a DNS name's
    /// trailing dot do not count: `db.shop.svc.` asks for the same SAN as `db.shop.svc`.
    pub fn fingerprint(&self, algorithm: KeyAlgorithm) -> String {
        use sha2::{Digest, Sha256};
        let (dns, ips) = self.canonical();
        let mut hash = Sha256::new();
        // Length-prefixed fields, so no two requests serialise alike.
        let mut field = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        field(algorithm.to_string().as_bytes());
        field(if self.intermediate_ca { b"ca" } else { b"leaf" });
        for name in &dns {
            field(b"dns");
            field(name.as_bytes());
        }
        for ip in &ips {
            field(b"ip");
            field(ip.to_string().as_bytes());
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether the request names something, and every DNS SAN is a valid DNS name (and not
    /// an IP address written as one).
    /// One trailing dot is allowed and left out of the certificate (see
    /// [`CertRequest::fingerprint`]).
    pub fn validate(&self) -> Result<(), TlsError> {
        if self.dns_names.is_empty() && self.ip_addresses.is_empty() {
            return Err(TlsError::NoNames);
        }
        for name in &self.dns_names {
            let presented = relative(name);
            if presented.ends_with('.') {
                return Err(TlsError::BadName {
                    name: name.clone(),
                    reason: "it ends with more than one dot".into(),
                });
            }
            ServerName::try_from(presented)
                .map_err(|e| TlsError::BadName {
                    name: name.clone(),
                    reason: e.to_string(),
                })
                .and_then(|parsed| match parsed {
                    ServerName::DnsName(_) => Ok(()),
                    // An IP given as a DNS name would never match: refuse it rather than hide it.
                    _ => Err(TlsError::BadName {
                        name: name.clone(),
                        reason: "it is an IP address: give it as an IP SAN".into(),
                    }),
                })?;
        }
        Ok(())
    }
}

/// `name` without the trailing dot of an absolute DNS name.
fn relative(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

/// A CA: its key and self-signed certificate. Its `Debug` never prints the key.
pub struct CertificateAuthority {
    key: PrivateKey,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    not_after: SystemTime,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("key", &self.key)
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("not_after", &humantime(self.not_after))
            .finish()
    }
}

impl CertificateAuthority {
    /// A new CA with a fresh key: self-signed, CN [`CA_COMMON_NAME`], BasicConstraints
    /// CA:true (critical), KeyUsage keyCertSign + cRLSign + digitalSignature (critical),
    /// valid for [`CA_VALIDITY`].
    pub fn generate(algorithm: KeyAlgorithm) -> Result<Self, TlsError> {
        Self::generate_valid_for(algorithm, CA_VALIDITY)
    }

    /// [`CertificateAuthority::generate`] with another validity than [`CA_VALIDITY`], e.g.
    /// a CA close to its end for tests.
    pub fn generate_valid_for(
        algorithm: KeyAlgorithm,
        validity: Duration,
    ) -> Result<Self, TlsError> {
        let key = PrivateKey::generate(algorithm)?;
        let mut params = ca_params(CA_COMMON_NAME);
        let now = SystemTime::now();
        params.not_before = to_time(now - CLOCK_SKEW);
        params.not_after = to_time(now + validity);
        let cert = params.self_signed(&key.pair).map_err(generate_error)?;
        let cert_der = cert.der().clone();
        Ok(CertificateAuthority {
            cert_pem: cert.pem(),
            not_after: ca_fields(&cert_der)?.not_after,
            cert_der,
            key,
        })
    }

    /// A CA from its PEM key and certificate, as stored. Refused unless the key belongs to
    /// the certificate, the certificate says CA:true (and keyCertSign, if it has a
    /// KeyUsage), and a certificate issued from them verifies against it. An expired
    /// CA loads (see [`CertificateAuthority::due_for_replacement`]) but issues nothing.
    pub fn from_pem(key_pem: &str, cert_pem: &str) -> Result<Self, TlsError> {
        let key = PrivateKey::from_pem(key_pem)?;
        let cert_der = certificate_der(cert_pem)?;
        let fields = ca_fields(&cert_der)?;
        let ca = CertificateAuthority {
            key,
            cert_pem: cert_pem.to_string(),
            not_after: fields.not_after,
            cert_der,
        };
        if spki_of(&ca.cert_der)? != ca.key.spki_der() {
            return Err(TlsError::KeyMismatch);
        }
        // webpki's trust anchors keep neither, but clients such as OpenSSL refuse a chain
        // whose CA lacks them.
        if !fields.is_ca {
            return Err(TlsError::ForeignCa(
                "its BasicConstraints does not say CA:true".into(),
            ));
        }
        if fields.key_cert_sign == Some(false) {
            return Err(TlsError::ForeignCa("its KeyUsage lacks keyCertSign".into()));
        }
        // A throwaway certificate proves the issuer re-created from the constant subject
        // matches this certificate, and that it really can sign. It is made and checked
        // without the CA's own validity (webpki's trust anchors have none), so an expired
        // CA still loads and can be replaced.
        let now = SystemTime::now();
        let request = CertRequest::new().dns_names(["probe.windlass.invalid"]);
        let probe = ca.sign(
            &request,
            KeyAlgorithm::EcdsaP256,
            now + Duration::from_secs(3600),
        )?;
        ca.verify_chain_at(&probe, &request, now)
            .map_err(|e| TlsError::ForeignCa(e.to_string()))?;
        Ok(ca)
    }

    /// When the CA's certificate expires (its notAfter).
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Whether the CA expires within [`CA_RENEW_BEFORE`] (or has expired): a new CA
    /// should then replace it, and every pair be reissued from the new one.
    pub fn due_for_replacement(&self) -> bool {
        self.not_after < SystemTime::now() + CA_RENEW_BEFORE
    }

    /// The CA's certificate, PEM: what clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> &str {
        self.key.pem()
    }

    /// A new key (of `algorithm`) and a certificate for it signed by this CA, valid for
    /// [`CERT_VALIDITY`] or until the CA expires if that is sooner, with the request's SANs (DNS names as DNS entries, IPs as IP
    /// entries) and EKU serverAuth + clientAuth.
    pub fn issue(
        &self,
        request: &CertRequest,
        algorithm: KeyAlgorithm,
    ) -> Result<KeyCertPair, TlsError> {
        self.issue_valid_for(request, algorithm, CERT_VALIDITY)
    }

    /// [`CertificateAuthority::issue`] with another validity than [`CERT_VALIDITY`], e.g.
    /// short-lived certificates for tests. The certificate never outlives the CA; an
    /// expired CA issues nothing ([`TlsError::NotValid`]).
    pub fn issue_valid_for(
        &self,
        request: &CertRequest,
        algorithm: KeyAlgorithm,
        validity: Duration,
    ) -> Result<KeyCertPair, TlsError> {
        let now = SystemTime::now();
        if self.not_after <= now {
            return Err(TlsError::NotValid(format!(
                "the CA expired on {}: replace it to issue certificates",
                humantime(self.not_after)
            )));
        }
        self.sign(request, algorithm, (now + validity).min(self.not_after))
    }

    /// A new key and a certificate for `request`, valid from [`CLOCK_SKEW`] ago until
    /// `not_after`.
    fn sign(
        &self,
        request: &CertRequest,
        algorithm: KeyAlgorithm,
        not_after: SystemTime,
    ) -> Result<KeyCertPair, TlsError> {
        request.validate()?;
        let key = PrivateKey::generate(algorithm)?;
        let issuer = Issuer::new(ca_params(CA_COMMON_NAME), &self.key.pair);
        let params = leaf_params(request, algorithm, not_after)?;
        let cert = params
            .signed_by(&key.pair, &issuer)
            .map_err(generate_error)?;
        Ok(KeyCertPair::new(key.pem, cert.pem()))
    }

    /// Whether `pair` is still good for `request` from this CA: the key belongs to the
    /// certificate, the certificate chains to this CA for server use, carries every name
    /// asked for, and is valid now and for [`RENEW_BEFORE`] more. An intermediate CA
    /// must also really be able to sign certificates that chain through it. The CA itself
    /// must be valid for [`RENEW_BEFORE`] more too.
    pub fn verify(&self, pair: &KeyCertPair, request: &CertRequest) -> Result<(), TlsError> {
        self.verify_at(pair, request, SystemTime::now() + RENEW_BEFORE)
    }

    /// [`CertificateAuthority::verify`] at another time than [`RENEW_BEFORE`] from now:
    /// whether `pair` (and this CA) will still be good for `request` at `at`.
    pub fn verify_at(
        &self,
        pair: &KeyCertPair,
        request: &CertRequest,
        at: SystemTime,
    ) -> Result<(), TlsError> {
        if self.not_after < at {
            return Err(TlsError::NotValid(format!(
                "the CA expires on {}, before {}",
                humantime(self.not_after),
                humantime(at)
            )));
        }
        self.verify_chain_at(pair, request, at)
    }

    /// [`CertificateAuthority::verify_at`] without the CA's own validity, which webpki's
    /// trust anchors do not have.
    fn verify_chain_at(
        &self,
        pair: &KeyCertPair,
        request: &CertRequest,
        at: SystemTime,
    ) -> Result<(), TlsError> {
        let key = PrivateKey::from_pem(pair.key_pem())?;
        let cert = certificate_der(pair.cert_pem())?;
        if spki_of(&cert)? != key.spki_der() {
            return Err(TlsError::KeyMismatch);
        }
        let anchor = webpki::anchor_from_trusted_cert(&self.cert_der)
            .map_err(|e| TlsError::ForeignCa(e.to_string()))?;
        let time = UnixTime::since_unix_epoch(
            at.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
        );
        let not_valid = |e: webpki::Error| {
            TlsError::NotValid(format!(
                "the certificate does not verify against the CA until {}: {e}",
                humantime(at)
            ))
        };
        // An intermediate is parsed as an end-entity certificate too, for its SANs.
        let leaf = webpki::EndEntityCert::try_from(&cert).map_err(not_valid)?;
        if request.is_intermediate_ca() {
            // webpki verifies leaf certificates only: have the intermediate issue one and
            // verify the chain leaf → intermediate → CA.
            let issuer = Issuer::new(ca_params(INTERMEDIATE_COMMON_NAME), &key.pair);
            let probe_key = PrivateKey::generate(KeyAlgorithm::EcdsaP256)?;
            let probe_request = CertRequest::new().dns_names(["probe.windlass.invalid"]);
            let params = leaf_params(
                &probe_request,
                KeyAlgorithm::EcdsaP256,
                at + Duration::from_secs(3600),
            )?;
            let probe = params
                .signed_by(&probe_key.pair, &issuer)
                .map_err(generate_error)?;
            let probe = webpki::EndEntityCert::try_from(probe.der()).map_err(not_valid)?;
            probe
                .verify_for_usage(
                    webpki::ALL_VERIFICATION_ALGS,
                    &[anchor],
                    std::slice::from_ref(&cert),
                    time,
                    webpki::KeyUsage::server_auth(),
                    None,
                    None,
                )
                .map_err(not_valid)?;
        } else {
            leaf.verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &[anchor],
                &[],
                time,
                webpki::KeyUsage::server_auth(),
                None,
                None,
            )
            .map_err(not_valid)?;
        }
        let (dns, ips) = request.canonical();
        let names = dns
            .iter()
            .map(|n| ServerName::try_from(n.as_str()).map(|s| s.to_owned()))
            .chain(ips.iter().map(|ip| Ok(ServerName::IpAddress((*ip).into()))));
        for name in names {
            let name = name.map_err(|e| TlsError::NotValid(e.to_string()))?;
            leaf.verify_is_valid_for_subject_name(&name)
                .map_err(|e| TlsError::NotValid(format!("not valid for {name:?}: {e}")))?;
        }
        Ok(())
    }
}

/// The public key (SubjectPublicKeyInfo) of a PEM certificate, as PEM
/// (`-----BEGIN PUBLIC KEY-----`): compare it with [`PrivateKey::public_key_pem`] to see
/// whether a key belongs to a certificate.
pub fn certificate_public_key_pem(cert_pem: &str) -> Result<String, TlsError> {
    let spki = spki_of(&certificate_der(cert_pem)?)?;
    Ok(pem::encode_config(
        &pem::Pem::new("PUBLIC KEY", spki),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    ))
}

/// The first certificate of a PEM text, as DER.
pub fn certificate_der(cert_pem: &str) -> Result<CertificateDer<'static>, TlsError> {
    CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .map_err(|e| TlsError::BadCertificate(e.to_string()))
}

fn spki_of(cert: &CertificateDer<'_>) -> Result<Vec<u8>, TlsError> {
    let parsed = webpki::EndEntityCert::try_from(cert)
        .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    Ok(parsed.subject_public_key_info().as_ref().to_vec())
}

/// What a CA certificate says about itself that webpki's trust anchors do not keep.
struct CaFields {
    /// Its notAfter.
    not_after: SystemTime,
    /// BasicConstraints cA (false when the extension is absent).
    is_ca: bool,
    /// KeyUsage keyCertSign, if the certificate has a KeyUsage at all.
    key_cert_sign: Option<bool>,
}

/// Read [`CaFields`] from a certificate's DER (RFC 5280 §4.1): `Certificate ::= SEQUENCE
/// { tbsCertificate, signatureAlgorithm, signature }`, where `tbsCertificate` is
/// `SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer, validity SEQUENCE {
/// notBefore, notAfter }, subject, subjectPublicKeyInfo, [1] [2] unique IDs OPTIONAL, [3]
/// extensions OPTIONAL }`.
fn ca_fields(cert: &CertificateDer<'_>) -> Result<CaFields, TlsError> {
    use yasna::models::ObjectIdentifier;
    use yasna::{ASN1Result, BERReader, Tag};
    fn time(reader: BERReader<'_, '_>) -> ASN1Result<time::OffsetDateTime> {
        if reader.lookahead_tag()? == yasna::tags::TAG_UTCTIME {
            Ok(*reader.read_utctime()?.datetime())
        } else {
            Ok(*reader.read_generalized_time()?.datetime())
        }
    }
    let key_usage = ObjectIdentifier::from_slice(&[2, 5, 29, 15]);
    let basic_constraints = ObjectIdentifier::from_slice(&[2, 5, 29, 19]);
    let mut is_ca = false;
    let mut key_cert_sign = None;
    let not_after = yasna::parse_der(cert.as_ref(), |reader| {
        reader.read_sequence(|certificate| {
            let not_after = certificate.next().read_sequence(|tbs| {
                tbs.read_optional(|version| {
                    version.read_tagged(Tag::context(0), |v| v.read_der())
                })?;
                tbs.next().read_der()?; // serialNumber
                tbs.next().read_der()?; // signature
                tbs.next().read_der()?; // issuer
                let not_after = tbs.next().read_sequence(|validity| {
                    validity.next().read_der()?; // notBefore
                    time(validity.next())
                })?;
                tbs.next().read_der()?; // subject
                tbs.next().read_der()?; // subjectPublicKeyInfo
                while tbs
                    .read_optional(|rest| {
                        if rest.lookahead_tag()? != Tag::context(3) {
                            return rest.read_der().map(drop); // a unique ID
                        }
                        rest.read_tagged(Tag::context(3), |extensions| {
                            extensions.read_sequence_of(|extension| {
                                extension.read_sequence(|extension| {
                                    let id = extension.next().read_oid()?;
                                    extension.read_optional(|critical| critical.read_bool())?;
                                    let value = extension.next().read_bytes()?;
                                    if id == key_usage {
                                        // keyCertSign is bit 5: 0x04 of the first byte.
                                        let (bits, _) = yasna::parse_der(&value, |bits| {
                                            bits.read_bitvec_bytes()
                                        })?;
                                        key_cert_sign =
                                            Some(bits.first().is_some_and(|b| b & 0x04 != 0));
                                    } else if id == basic_constraints {
                                        is_ca = yasna::parse_der(&value, |constraints| {
                                            constraints.read_sequence(|constraints| {
                                                let ca = constraints
                                                    .read_optional(|ca| ca.read_bool())?;
                                                constraints
                                                    .read_optional(|length| length.read_der())?;
                                                Ok(ca.unwrap_or(false))
                                            })
                                        })?;
                                    }
                                    Ok(())
                                })
                            })
                        })
                    })?
                    .is_some()
                {}
                Ok(not_after)
            })?;
            certificate.next().read_der()?; // signatureAlgorithm
            certificate.next().read_der()?; // signature
            Ok(not_after)
        })
    })
    .map_err(|e| TlsError::BadCertificate(format!("reading its validity and extensions: {e}")))?;
    Ok(CaFields {
        not_after: SystemTime::from(not_after),
        is_ca,
        key_cert_sign,
    })
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The parameters of a server or intermediate certificate for a key of `algorithm`, valid
/// from [`CLOCK_SKEW`] ago until `not_after`.
fn leaf_params(
    request: &CertRequest,
    algorithm: KeyAlgorithm,
    not_after: SystemTime,
) -> Result<CertificateParams, TlsError> {
    let (dns, ips) = request.canonical();
    let mut params = if request.is_intermediate_ca() {
        let mut params = ca_params(INTERMEDIATE_COMMON_NAME);
        // It signs end-entity certificates only, never another CA.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params
    } else {
        let mut params = CertificateParams::default();
        // A fixed CN: clients match the SANs (RFC 6125), and a name as the CN could
        // exceed the CN's 64 characters.
        params.distinguished_name = name(SERVER_COMMON_NAME);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Only an RSA key can encipher a TLS key exchange (RFC 5480 §3 forbids it for
        // ECDSA keys).
        if algorithm == KeyAlgorithm::Rsa2048 {
            params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        }
        params
    };
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    for dns_name in dns {
        let ia5 = dns_name
            .clone()
            .try_into()
            .map_err(|e: rcgen::Error| TlsError::BadName {
                name: dns_name,
                reason: e.to_string(),
            })?;
        params.subject_alt_names.push(SanType::DnsName(ia5));
    }
    params
        .subject_alt_names
        .extend(ips.into_iter().map(SanType::IpAddress));
    params.not_before = to_time(SystemTime::now() - CLOCK_SKEW);
    params.not_after = to_time(not_after);
    Ok(params)
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, ORGANIZATION);
    name.push(DnType::CommonName, common_name);
    name
}

fn to_time(at: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(at)
}

fn humantime(at: SystemTime) -> String {
    let t = to_time(at);
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}
