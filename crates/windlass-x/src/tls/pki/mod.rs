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

mod ca;
mod key;
mod params;
mod read;
mod request;

use std::time::Duration;

pub use ca::CertificateAuthority;
pub use key::{KeyAlgorithm, KeyCertPair, PrivateKey};
pub use read::{certificate_der, certificate_public_key_pem};
pub use request::CertRequest;

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
