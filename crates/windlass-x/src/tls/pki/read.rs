//! Reading certificates: PEM to DER, the public key, and the few fields of a CA
//! certificate that webpki's trust anchors do not keep.

use std::time::SystemTime;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::TlsError;

/// The public key (SubjectPublicKeyInfo) of a PEM certificate, as PEM
/// (`-----BEGIN PUBLIC KEY-----`): compare it with
/// [`PrivateKey::public_key_pem`](super::PrivateKey::public_key_pem) to see
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

pub(super) fn spki_of(cert: &CertificateDer<'_>) -> Result<Vec<u8>, TlsError> {
    let parsed = webpki::EndEntityCert::try_from(cert)
        .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    Ok(parsed.subject_public_key_info().as_ref().to_vec())
}

/// What a CA certificate says about itself that webpki's trust anchors do not keep.
pub(super) struct CaFields {
    /// Its notAfter.
    pub(super) not_after: SystemTime,
    /// BasicConstraints cA (false when the extension is absent).
    pub(super) is_ca: bool,
    /// KeyUsage keyCertSign, if the certificate has a KeyUsage at all.
    pub(super) key_cert_sign: Option<bool>,
}

/// Read [`CaFields`] from a certificate's DER (RFC 5280 §4.1): `Certificate ::= SEQUENCE
/// { tbsCertificate, signatureAlgorithm, signature }`, where `tbsCertificate` is
/// `SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer, validity SEQUENCE {
/// notBefore, notAfter }, subject, subjectPublicKeyInfo, [1] [2] unique IDs OPTIONAL, [3]
/// extensions OPTIONAL }`.
pub(super) fn ca_fields(cert: &CertificateDer<'_>) -> Result<CaFields, TlsError> {
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
