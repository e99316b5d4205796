//! Test TLS material: a CA and a server certificate it issued, from one function, so the
//! tests can move to windlass-x's own internal CA by changing only [`test_pki`].

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};

use super::servers::ServerTls;

/// A CA and a server identity it issued.
pub struct TestPki {
    /// The CA certificate clients verify the server with.
    pub ca_pem: String,
    /// The server's certificate and key (and the CA, for servers that want it configured).
    pub server: ServerTls,
}

/// A fresh CA and a server certificate for `localhost` and 127.0.0.1, signed by it.
pub fn test_pki() -> TestPki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "windlass test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().expect("a CA key");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("a self-signed CA");

    let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "windlass test server");
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    let key = KeyPair::generate().expect("a server key");
    let cert = params.signed_by(&key, &ca).expect("a server certificate");
    TestPki {
        ca_pem: ca.pem(),
        server: ServerTls {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_pem: ca.pem(),
        },
    }
}
