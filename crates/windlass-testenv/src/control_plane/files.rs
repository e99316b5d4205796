//! What the control plane's processes are configured with, written as files readable by us
//! only: bearer tokens, the service account key pair, kubeconfigs.

use std::path::Path;

use base64::Engine as _;
use ring::rand::SecureRandom as _;

use crate::error::{Error, Result};

/// `N` random bytes from the system's generator; `what` they are for names a failure.
pub(crate) fn random_bytes<const N: usize>(what: &'static str) -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Crypto { what })?;
    Ok(bytes)
}

/// A random bearer token: 24 bytes in hex.
pub(super) fn random_token() -> Result<String> {
    let bytes = random_bytes::<24>("a bearer token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A fresh ECDSA P-256 key pair as (PKCS#8 private key PEM, SubjectPublicKeyInfo PEM): the
/// apiserver and the controller manager sign service account tokens with the private key, the
/// apiserver verifies them with the public one (its public-key reader does not take PKCS#8).
pub(super) fn service_account_key_pems() -> Result<(String, String)> {
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};
    let failed = || Error::Crypto {
        what: "the service account signing key",
    };
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| failed())?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| failed())?;
    // DER header of a SubjectPublicKeyInfo for id-ecPublicKey on prime256v1 with a 65-byte
    // uncompressed point: SEQUENCE { SEQUENCE { OID, OID }, BIT STRING }.
    const P256_SPKI_PREFIX: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    let point = pair.public_key().as_ref();
    if point.len() != 65 {
        return Err(failed());
    }
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(point);
    Ok((pem("PRIVATE KEY", pkcs8.as_ref()), pem("PUBLIC KEY", &spki)))
}

/// `der` as PEM with `label`, in lines of 64 characters.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

/// A kubeconfig for one user. Written as text: the shape is fixed and tiny, and kubectl as
/// well as kube-rs read it back.
pub(super) fn kubeconfig_yaml(server: &str, ca_file: &Path, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: windlass-testenv\n\
         \x20 cluster:\n\
         \x20   server: {server}\n\
         \x20   certificate-authority: {ca}\n\
         users:\n\
         - name: {user}\n\
         \x20 user:\n\
         \x20   token: {token}\n\
         contexts:\n\
         - name: windlass-testenv\n\
         \x20 context:\n\
         \x20   cluster: windlass-testenv\n\
         \x20   user: {user}\n\
         \x20   namespace: default\n\
         current-context: windlass-testenv\n",
        ca = ca_file.display(),
    )
}

/// Creates `path` and its parents.
pub(super) fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))
}

/// Writes `contents` to `path`, readable and writable by us only.
pub(super) fn write_file(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Tokens and keys: readable by us only.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    file.write_all(contents.as_bytes())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}
