//! What the certificates say: the rcgen parameters of the CA, intermediate and server
//! certificates (see the choices in the [module docs](super)).

use std::time::SystemTime;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyUsagePurpose, SanType,
};

use super::{
    CLOCK_SKEW, CertRequest, INTERMEDIATE_COMMON_NAME, KeyAlgorithm, ORGANIZATION,
    SERVER_COMMON_NAME, TlsError,
};

pub(super) fn ca_params(common_name: &str) -> CertificateParams {
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
pub(super) fn leaf_params(
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

pub(super) fn to_time(at: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(at)
}
