//! The TLS primitives, read back with an independent X.509 parser and used in real rustls
//! handshakes: what the CA and the certificates it issues really contain, that the chain
//! verifies, and that stored material is judged by verification.

#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used)]

mod tls_support;

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use tls_support::round_trip;
use windlass_x::tls::pki::{CA_RENEW_BEFORE, CA_VALIDITY, CERT_VALIDITY, RENEW_BEFORE};
use windlass_x::tls::{
    CertRequest, CertificateAuthority, KeyAlgorithm, KeyCertPair, PrivateKey, TlsError,
    certificate_public_key_pem,
};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer, X509Certificate};

fn der(pem: &str) -> Vec<u8> {
    windlass_x::tls::pki::certificate_der(pem).unwrap().to_vec()
}

fn parse(der: &[u8]) -> X509Certificate<'_> {
    let (rest, cert) = X509Certificate::from_der(der).unwrap();
    assert!(rest.is_empty(), "trailing bytes after the certificate");
    cert
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
}

fn request() -> CertRequest {
    CertRequest::new()
        .dns_names(["db.shop.svc", "db"])
        .ip_addresses(["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()])
}

#[test]
fn the_ca_is_a_self_signed_critical_ca_with_key_cert_sign_for_ten_years() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let der = der(ca.cert_pem());
    let cert = parse(&der);
    assert_eq!(cert.subject(), cert.issuer(), "self-signed");
    assert!(
        cert.subject()
            .to_string()
            .contains("CN=windlass internal CA"),
        "{}",
        cert.subject()
    );
    let constraints = cert.basic_constraints().unwrap().unwrap();
    assert!(constraints.critical, "BasicConstraints is critical");
    assert!(constraints.value.ca);
    let usage = cert.key_usage().unwrap().unwrap();
    assert!(usage.critical, "KeyUsage is critical");
    assert!(usage.value.key_cert_sign());
    assert!(usage.value.digital_signature());
    // ecdsa-with-SHA256
    assert_eq!(
        cert.signature_algorithm.algorithm.to_id_string(),
        "1.2.840.10045.4.3.2"
    );
    let now = unix(SystemTime::now());
    let not_before = cert.validity().not_before.timestamp();
    let not_after = cert.validity().not_after.timestamp();
    assert!(
        not_before <= now && now - not_before <= 3700,
        "starts about an hour ago"
    );
    let lifetime = not_after - now;
    assert!(
        (lifetime - CA_VALIDITY.as_secs() as i64).abs() < 60,
        "ten years: {lifetime} s"
    );
    // The CA's own signature verifies with its own key.
    cert.verify_signature(None).unwrap();
}

#[test]
fn server_certificates_carry_dns_names_as_dns_and_ips_as_ip_entries() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    let der = der(pair.cert_pem());
    let cert = parse(&der);
    let ca_der = self::der(ca.cert_pem());
    let ca_cert = parse(&ca_der);
    assert_eq!(cert.issuer(), ca_cert.subject());
    cert.verify_signature(Some(ca_cert.public_key())).unwrap();

    let sans = cert.subject_alternative_name().unwrap().unwrap();
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in &sans.value.general_names {
        match name {
            GeneralName::DNSName(n) => dns.push(n.to_string()),
            GeneralName::IPAddress(bytes) => ips.push(match bytes.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap()),
                16 => IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap()),
                n => panic!("an IP entry of {n} bytes"),
            }),
            other => panic!("unexpected SAN {other:?}"),
        }
    }
    dns.sort();
    assert_eq!(
        dns,
        ["db", "db.shop.svc"],
        "no IP written as a DNS name (Q13)"
    );
    assert_eq!(
        ips,
        [
            "127.0.0.1".parse::<IpAddr>().unwrap(),
            "::1".parse().unwrap()
        ]
    );

    let eku = cert.extended_key_usage().unwrap().unwrap();
    assert!(eku.value.server_auth && eku.value.client_auth);
    assert!(
        cert.basic_constraints()
            .unwrap()
            .is_none_or(|c| !c.value.ca),
        "a server certificate is no CA"
    );
    let usage = cert.key_usage().unwrap().unwrap();
    assert!(usage.value.digital_signature() && !usage.value.key_cert_sign());
    assert!(
        !usage.value.key_encipherment(),
        "keyEncipherment is for RSA keys only (RFC 5480 §3)"
    );
    assert!(
        cert.subject().to_string().ends_with("CN=windlass server"),
        "{}",
        cert.subject()
    );
    let lifetime = cert.validity().not_after.timestamp() - unix(SystemTime::now());
    assert!((lifetime - CERT_VALIDITY.as_secs() as i64).abs() < 60);
    assert!(
        cert.extensions().iter().any(|e| matches!(
            e.parsed_extension(),
            ParsedExtension::AuthorityKeyIdentifier(_)
        )),
        "chains by key identifier"
    );
}

#[test]
fn an_intermediate_ca_may_sign_certificates() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let request = CertRequest::new()
        .dns_names(["issuer.shop.svc"])
        .intermediate_ca();
    let pair = ca.issue(&request, KeyAlgorithm::EcdsaP256).unwrap();
    let der = der(pair.cert_pem());
    let cert = parse(&der);
    let constraints = cert.basic_constraints().unwrap().unwrap().value;
    assert!(constraints.ca);
    assert_eq!(
        constraints.path_len_constraint,
        Some(0),
        "signs no other CA"
    );
    let usage = cert.key_usage().unwrap().unwrap().value;
    assert!(usage.key_cert_sign() && !usage.key_encipherment());
    ca.verify(&pair, &request).unwrap();
    // Its names are checked like a server's.
    let err = ca
        .verify(
            &pair,
            &CertRequest::new()
                .dns_names(["other.shop.svc"])
                .intermediate_ca(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("other.shop.svc"), "{err}");
    // The same pair is no intermediate issued by another CA.
    let other = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    assert!(other.verify(&pair, &request).is_err());
}

#[test]
fn keys_are_pkcs8_pem_and_parse_back() {
    let key = PrivateKey::generate(KeyAlgorithm::EcdsaP256).unwrap();
    assert!(key.pem().starts_with("-----BEGIN PRIVATE KEY-----\n"));
    let again = PrivateKey::from_pem(key.pem()).unwrap();
    assert_eq!(again.public_key_pem(), key.public_key_pem());
    assert!(matches!(
        PrivateKey::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
        Err(TlsError::BadKey(_))
    ));
    assert!(matches!(
        PrivateKey::from_pem("not pem"),
        Err(TlsError::BadKey(_))
    ));
}

#[test]
fn the_public_key_of_a_certificate_is_its_keys() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    let key = PrivateKey::from_pem(pair.key_pem()).unwrap();
    assert_eq!(
        certificate_public_key_pem(pair.cert_pem()).unwrap(),
        key.public_key_pem()
    );
    assert!(matches!(
        certificate_public_key_pem("garbage"),
        Err(TlsError::BadCertificate(_))
    ));
}

#[test]
fn a_stored_pair_verifies_only_against_its_ca_for_its_names_with_its_key() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    ca.verify(&pair, &request()).unwrap();

    let other_ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    assert!(matches!(
        other_ca.verify(&pair, &request()),
        Err(TlsError::NotValid(_))
    ));
    let more_names = request().dns_names(["extra.shop.svc"]);
    assert!(matches!(
        ca.verify(&pair, &more_names),
        Err(TlsError::NotValid(_))
    ));
    let other_ip = request().ip_addresses(["10.0.0.1".parse().unwrap()]);
    assert!(ca.verify(&pair, &other_ip).is_err());
    let other_key = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    let mixed = KeyCertPair::new(other_key.key_pem(), pair.cert_pem());
    assert_eq!(ca.verify(&mixed, &request()), Err(TlsError::KeyMismatch));
}

#[test]
fn a_ca_loads_back_from_its_pem_and_a_foreign_one_is_refused() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let loaded = CertificateAuthority::from_pem(ca.key_pem(), ca.cert_pem()).unwrap();
    // What the loaded CA issues verifies against the original.
    let pair = loaded.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    ca.verify(&pair, &request()).unwrap();

    let other = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    assert_eq!(
        CertificateAuthority::from_pem(other.key_pem(), ca.cert_pem()).unwrap_err(),
        TlsError::KeyMismatch
    );
    // A CA of another subject (made elsewhere) cannot be re-created as an issuer.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "someone else's CA");
    let foreign = params.self_signed(&key).unwrap();
    assert!(matches!(
        CertificateAuthority::from_pem(&key.serialize_pem(), &foreign.pem()),
        Err(TlsError::ForeignCa(_))
    ));
}

#[test]
fn an_ip_given_as_a_dns_name_is_refused() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let err = ca
        .issue(
            &CertRequest::new().dns_names(["10.1.2.3"]),
            KeyAlgorithm::EcdsaP256,
        )
        .unwrap_err();
    assert!(matches!(err, TlsError::BadName { .. }), "{err}");
    assert!(err.to_string().contains("IP SAN"), "{err}");
    let err = CertRequest::new()
        .dns_names(["not a name"])
        .validate()
        .unwrap_err();
    assert!(err.to_string().contains("not a name"), "{err}");
}

#[tokio::test]
async fn an_absolute_dns_name_is_issued_without_its_trailing_dot_and_verifies() {
    // webpki refuses a certificate SAN ending in a dot: written as given, such a pair
    // would never verify and would be reissued on every reconcile.
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let absolute = CertRequest::new().dns_names(["db.shop.svc."]);
    let pair = ca.issue(&absolute, KeyAlgorithm::EcdsaP256).unwrap();
    ca.verify(&pair, &absolute).unwrap();
    let der = der(pair.cert_pem());
    let cert = parse(&der);
    let san = cert.subject_alternative_name().unwrap().unwrap();
    assert_eq!(
        san.value.general_names,
        [GeneralName::DNSName("db.shop.svc")]
    );
    let alg = KeyAlgorithm::EcdsaP256;
    assert_eq!(
        absolute.fingerprint(alg),
        CertRequest::new()
            .dns_names(["db.shop.svc"])
            .fingerprint(alg)
    );
    // Clients reach it by either form.
    for name in ["db.shop.svc.", "db.shop.svc"] {
        assert_eq!(
            round_trip(pair.cert_pem(), pair.key_pem(), ca.cert_pem(), name).await,
            Ok("hello".to_string()),
            "{name}"
        );
    }
    for bad in ["db.shop.svc..", ".", ""] {
        let err = CertRequest::new().dns_names([bad]).validate().unwrap_err();
        assert!(matches!(err, TlsError::BadName { .. }), "{bad:?}: {err}");
    }
}

#[test]
fn fingerprints_ignore_order_and_repeats_but_not_content() {
    let a = CertRequest::new().dns_names(["a", "b"]);
    let b = CertRequest::new().dns_names(["b", "a", "a"]);
    let alg = KeyAlgorithm::EcdsaP256;
    assert_eq!(a.fingerprint(alg), b.fingerprint(alg));
    assert_ne!(
        a.fingerprint(alg),
        a.clone().dns_names(["c"]).fingerprint(alg)
    );
    assert_ne!(
        a.fingerprint(alg),
        a.clone().intermediate_ca().fingerprint(alg)
    );
    assert_ne!(a.fingerprint(alg), a.fingerprint(KeyAlgorithm::Rsa2048));
}

#[test]
fn debug_output_never_shows_a_private_key() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    let key = PrivateKey::from_pem(pair.key_pem()).unwrap();
    for shown in [
        format!("{pair:?}"),
        format!("{ca:?}"),
        format!("{key:?}"),
        format!("{pair:#?}"),
    ] {
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        let body = pair.key_pem().lines().nth(1).unwrap();
        assert!(!shown.contains(body), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }
}

#[tokio::test]
async fn rustls_accepts_the_chain_by_name_and_ip_and_refuses_another_ca() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    for name in ["db.shop.svc", "db", "127.0.0.1"] {
        assert_eq!(
            round_trip(pair.cert_pem(), pair.key_pem(), ca.cert_pem(), name).await,
            Ok("hello".to_string()),
            "connecting to {name}"
        );
    }
    let other = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let refused = round_trip(pair.cert_pem(), pair.key_pem(), other.cert_pem(), "db").await;
    // All windlass CAs share a subject: the client finds the issuer by name, and the
    // signature gives it away.
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("invalid peer certificate: BadSignature")),
        "{refused:?}"
    );
    let wrong_name = round_trip(pair.cert_pem(), pair.key_pem(), ca.cert_pem(), "web").await;
    assert!(
        wrong_name
            .as_ref()
            .is_err_and(|e| e.contains("not valid for name \"web\"")),
        "{wrong_name:?}"
    );
}

#[cfg(not(feature = "tls-rsa"))]
#[test]
fn rsa_without_the_feature_says_which_feature() {
    let err = PrivateKey::generate(KeyAlgorithm::Rsa2048).unwrap_err();
    assert_eq!(err, TlsError::Unsupported(KeyAlgorithm::Rsa2048));
    assert!(err.to_string().contains("tls-rsa"));
}

#[cfg(feature = "tls-rsa")]
#[tokio::test]
async fn rsa_2048_keys_with_e_65537_sign_and_serve() {
    let started = std::time::Instant::now();
    let ca = CertificateAuthority::generate(KeyAlgorithm::Rsa2048).unwrap();
    let pair = ca.issue(&request(), KeyAlgorithm::Rsa2048).unwrap();
    let elapsed = started.elapsed();
    // Two RSA-2048 keys; the report quotes this line.
    println!("two RSA-2048 keys generated in {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(30),
        "RSA keygen is too slow ({elapsed:?}): is the bignum crates' opt-level set?"
    );
    let cert_der = der(pair.cert_pem());
    let cert = parse(&cert_der);
    match cert.public_key().parsed().unwrap() {
        x509_parser::public_key::PublicKey::RSA(rsa) => {
            assert_eq!(rsa.key_size(), 2048);
            assert_eq!(rsa.try_exponent().unwrap(), 65537);
        }
        other => panic!("not an RSA key: {other:?}"),
    }
    let usage = cert.key_usage().unwrap().unwrap().value;
    assert!(usage.digital_signature() && usage.key_encipherment());
    // sha256WithRSAEncryption
    assert_eq!(
        cert.signature_algorithm.algorithm.to_id_string(),
        "1.2.840.113549.1.1.11"
    );
    ca.verify(&pair, &request()).unwrap();
    let loaded = CertificateAuthority::from_pem(ca.key_pem(), ca.cert_pem()).unwrap();
    ca.verify(
        &loaded.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap(),
        &request(),
    )
    .unwrap();
    assert_eq!(
        round_trip(pair.cert_pem(), pair.key_pem(), ca.cert_pem(), "db").await,
        Ok("hello".to_string())
    );
}

#[test]
fn a_certificate_expiring_within_the_renewal_window_is_not_reused() {
    // `verify` looks RENEW_BEFORE ahead; a pair issued for less than that fails it.
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    ca.verify(&pair, &request()).unwrap();
    let short = ca
        .issue_valid_for(
            &request(),
            KeyAlgorithm::EcdsaP256,
            Duration::from_secs(24 * 3600),
        )
        .unwrap();
    let err = ca.verify(&short, &request()).unwrap_err();
    assert!(err.to_string().contains("Expired"), "{err}");
}

#[test]
fn the_cas_not_after_is_read_from_its_certificate_in_either_time_encoding() {
    // Up to 2049 X.509 writes UTCTime, from 2050 GeneralizedTime.
    for validity in [CA_VALIDITY, Duration::from_secs(40 * 365 * 24 * 3600)] {
        let ca =
            CertificateAuthority::generate_valid_for(KeyAlgorithm::EcdsaP256, validity).unwrap();
        let der = der(ca.cert_pem());
        let expected = parse(&der).validity().not_after.timestamp();
        assert_eq!(unix(ca.not_after()), expected);
        let loaded = CertificateAuthority::from_pem(ca.key_pem(), ca.cert_pem()).unwrap();
        assert_eq!(unix(loaded.not_after()), expected);
        assert!(!loaded.due_for_replacement());
    }
}

#[test]
fn certificates_never_outlive_their_ca_and_a_ca_near_its_end_is_due_for_replacement() {
    let short = Duration::from_secs(200 * 24 * 3600);
    assert!(short < CA_RENEW_BEFORE);
    let ca = CertificateAuthority::generate_valid_for(KeyAlgorithm::EcdsaP256, short).unwrap();
    assert!(ca.due_for_replacement());
    for request in [request(), request().intermediate_ca()] {
        let pair = ca.issue(&request, KeyAlgorithm::EcdsaP256).unwrap();
        let der = der(pair.cert_pem());
        assert_eq!(
            parse(&der).validity().not_after.timestamp(),
            unix(ca.not_after()),
            "capped at the CA's notAfter, not a year"
        );
        ca.verify(&pair, &request).unwrap();
    }
    // A long CA issues the full year.
    let long = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let pair = long.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    let der = der(pair.cert_pem());
    let lifetime = parse(&der).validity().not_after.timestamp() - unix(SystemTime::now());
    assert!((lifetime - CERT_VALIDITY.as_secs() as i64).abs() < 60);
}

#[test]
fn an_expired_ca_loads_but_issues_nothing() {
    let ca =
        CertificateAuthority::generate_valid_for(KeyAlgorithm::EcdsaP256, Duration::ZERO).unwrap();
    let loaded = CertificateAuthority::from_pem(ca.key_pem(), ca.cert_pem()).unwrap();
    assert!(loaded.due_for_replacement());
    let err = loaded
        .issue(&request(), KeyAlgorithm::EcdsaP256)
        .unwrap_err();
    assert!(err.to_string().contains("the CA expired"), "{err}");
}

#[test]
fn a_pair_is_not_good_once_its_ca_ends_within_the_renewal_window() {
    // The same CA key and subject, re-certified for ten days only: a year-long pair from
    // the long certificate still chains (trust anchors carry no validity) but the CA ends
    // first, which verify must see on its own.
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let key = rcgen::KeyPair::from_pem(ca.key_pem()).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "windlass");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "windlass internal CA");
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(3600)).into();
    params.not_after = (now + Duration::from_secs(10 * 24 * 3600)).into();
    let cert = params.self_signed(&key).unwrap();
    let short = CertificateAuthority::from_pem(ca.key_pem(), &cert.pem()).unwrap();

    let pair = ca.issue(&request(), KeyAlgorithm::EcdsaP256).unwrap();
    ca.verify(&pair, &request()).unwrap();
    short
        .verify_at(&pair, &request(), now + Duration::from_secs(24 * 3600))
        .unwrap();
    let err = short.verify(&pair, &request()).unwrap_err();
    assert!(err.to_string().contains("the CA expires"), "{err}");
    assert!(RENEW_BEFORE > Duration::from_secs(10 * 24 * 3600));
}

#[test]
fn a_ca_certificate_without_ca_true_or_key_cert_sign_is_refused() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    let key = rcgen::KeyPair::from_pem(ca.key_pem()).unwrap();
    let certificate = |is_ca: rcgen::IsCa, usages: Vec<rcgen::KeyUsagePurpose>| {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "windlass");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "windlass internal CA");
        params.is_ca = is_ca;
        params.key_usages = usages;
        params.self_signed(&key).unwrap().pem()
    };
    let ca_true = || rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // The same key and subject, so only the extensions differ.
    let no_cert_sign = certificate(ca_true(), vec![rcgen::KeyUsagePurpose::DigitalSignature]);
    let err = CertificateAuthority::from_pem(ca.key_pem(), &no_cert_sign).unwrap_err();
    assert!(
        matches!(&err, TlsError::ForeignCa(why) if why.contains("keyCertSign")),
        "{err}"
    );
    let not_ca = certificate(
        rcgen::IsCa::ExplicitNoCa,
        vec![rcgen::KeyUsagePurpose::KeyCertSign],
    );
    let err = CertificateAuthority::from_pem(ca.key_pem(), &not_ca).unwrap_err();
    assert!(
        matches!(&err, TlsError::ForeignCa(why) if why.contains("CA:true")),
        "{err}"
    );
    // No KeyUsage at all is accepted, as X.509 clients do.
    CertificateAuthority::from_pem(ca.key_pem(), &certificate(ca_true(), vec![])).unwrap();
}

#[test]
fn a_request_must_name_something_and_long_names_fit() {
    let ca = CertificateAuthority::generate(KeyAlgorithm::EcdsaP256).unwrap();
    for empty in [CertRequest::new(), CertRequest::new().intermediate_ca()] {
        assert_eq!(empty.validate(), Err(TlsError::NoNames));
        assert_eq!(
            ca.issue(&empty, KeyAlgorithm::EcdsaP256).unwrap_err(),
            TlsError::NoNames
        );
    }
    CertRequest::new()
        .ip_addresses(["10.0.0.1".parse().unwrap()])
        .validate()
        .unwrap();
    // Longer than a CN may be (64): it goes into the SANs only.
    let long = format!("{}.{}.shop.svc", "a".repeat(40), "b".repeat(40));
    let request = CertRequest::new().dns_names([long.as_str()]);
    let pair = ca.issue(&request, KeyAlgorithm::EcdsaP256).unwrap();
    ca.verify(&pair, &request).unwrap();
}
