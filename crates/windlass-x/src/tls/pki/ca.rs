//! The CA: generated or loaded from its PEM, issuing server and intermediate certificates,
//! and verifying stored pairs against itself.

use std::fmt;
use std::time::{Duration, SystemTime};

use rcgen::Issuer;
use rustls_pki_types::{CertificateDer, ServerName, TrustAnchor, UnixTime};

use super::params::{ca_params, leaf_params, to_time};
use super::read::{ca_fields, certificate_der, spki_of};
use super::{
    CA_COMMON_NAME, CA_RENEW_BEFORE, CA_VALIDITY, CERT_VALIDITY, CLOCK_SKEW, CertRequest,
    INTERMEDIATE_COMMON_NAME, KeyAlgorithm, KeyCertPair, PrivateKey, RENEW_BEFORE, TlsError,
    generate_error,
};

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
        // An intermediate is parsed as an end-entity certificate too, for its SANs.
        let leaf = webpki::EndEntityCert::try_from(&cert).map_err(|e| not_valid(at, e))?;
        if request.is_intermediate_ca() {
            verify_intermediate_issues(&key, &cert, anchor, time, at)?;
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
            .map_err(|e| not_valid(at, e))?;
        }
        verify_names(&leaf, request)
    }
}

/// Whether the intermediate `cert`, with its `key`, really issues certificates that
/// chain to `anchor` at `time`. webpki verifies leaf certificates only: have the
/// intermediate issue one and verify the chain leaf → intermediate → CA.
fn verify_intermediate_issues(
    key: &PrivateKey,
    cert: &CertificateDer<'_>,
    anchor: TrustAnchor<'_>,
    time: UnixTime,
    at: SystemTime,
) -> Result<(), TlsError> {
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
    let probe = webpki::EndEntityCert::try_from(probe.der()).map_err(|e| not_valid(at, e))?;
    probe
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &[anchor],
            std::slice::from_ref(cert),
            time,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| not_valid(at, e))?;
    Ok(())
}

/// Whether `leaf` is valid for every name of `request`, as the certificate carries them
/// (the canonical form: no trailing dots, no repeats).
fn verify_names(leaf: &webpki::EndEntityCert<'_>, request: &CertRequest) -> Result<(), TlsError> {
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

/// The error of a certificate that does not verify against the CA at `at`: one wording
/// for every step of the check (parsing it, its chain, the intermediate's probe).
fn not_valid(at: SystemTime, e: webpki::Error) -> TlsError {
    TlsError::NotValid(format!(
        "the certificate does not verify against the CA until {}: {e}",
        humantime(at)
    ))
}

fn humantime(at: SystemTime) -> String {
    let t = to_time(at);
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}
