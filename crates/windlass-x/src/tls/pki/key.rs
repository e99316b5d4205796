//! Keys: the algorithm of generated keys, a private key with its PEM, and a key with its
//! certificate as stored.

use std::fmt;

use rcgen::KeyPair;
use rustls_pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

use super::{TlsError, generate_error};

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
    pub(super) pem: String,
    pub(super) pair: KeyPair,
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

    pub(super) fn spki_der(&self) -> Vec<u8> {
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
    /// A pair from PEM text (not checked: see
    /// [`CertificateAuthority::verify`](super::CertificateAuthority::verify)).
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
