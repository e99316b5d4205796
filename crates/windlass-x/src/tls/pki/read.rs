//! Reading certificates: PEM to DER, the public key, and the few fields of a CA
//! certificate that webpki's trust anchors do not keep.

use std::time::SystemTime;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use yasna::{ASN1Result, BERReader, Tag};

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
    let (not_after, extensions) = yasna::parse_der(cert.as_ref(), |reader| {
        reader.read_sequence(|certificate| {
            let tbs = read_tbs_certificate(certificate.next())?;
            certificate.next().read_der()?; // signatureAlgorithm
            certificate.next().read_der()?; // signature
            Ok(tbs)
        })
    })
    .map_err(|e| TlsError::BadCertificate(format!("reading its validity and extensions: {e}")))?;
    Ok(CaFields {
        not_after: SystemTime::from(not_after),
        is_ca: extensions.is_ca,
        key_cert_sign: extensions.key_cert_sign,
    })
}

/// The OID of the KeyUsage extension.
const KEY_USAGE: &[u64] = &[2, 5, 29, 15];
/// The OID of the BasicConstraints extension.
const BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];

/// The two extensions of [`CaFields`], as far as they have been read.
#[derive(Default)]
struct CaExtensions {
    /// BasicConstraints cA (false until a BasicConstraints is read).
    is_ca: bool,
    /// KeyUsage keyCertSign, once a KeyUsage has been read.
    key_cert_sign: Option<bool>,
}

/// The notAfter and the CA extensions of a `tbsCertificate`, stepping over the fields
/// before and between them.
fn read_tbs_certificate(
    reader: BERReader<'_, '_>,
) -> ASN1Result<(time::OffsetDateTime, CaExtensions)> {
    reader.read_sequence(|tbs| {
        tbs.read_optional(|version| version.read_tagged(Tag::context(0), |v| v.read_der()))?;
        tbs.next().read_der()?; // serialNumber
        tbs.next().read_der()?; // signature
        tbs.next().read_der()?; // issuer
        let not_after = read_not_after(tbs.next())?;
        tbs.next().read_der()?; // subject
        tbs.next().read_der()?; // subjectPublicKeyInfo
        let mut extensions = CaExtensions::default();
        while tbs
            .read_optional(|rest| read_trailing_field(rest, &mut extensions))?
            .is_some()
        {}
        Ok((not_after, extensions))
    })
}

/// The notAfter of a `Validity ::= SEQUENCE { notBefore, notAfter }`.
fn read_not_after(validity: BERReader<'_, '_>) -> ASN1Result<time::OffsetDateTime> {
    validity.read_sequence(|validity| {
        validity.next().read_der()?; // notBefore
        read_time(validity.next())
    })
}

/// A `Time ::= CHOICE { utcTime, generalTime }`.
fn read_time(reader: BERReader<'_, '_>) -> ASN1Result<time::OffsetDateTime> {
    if reader.lookahead_tag()? == yasna::tags::TAG_UTCTIME {
        Ok(*reader.read_utctime()?.datetime())
    } else {
        Ok(*reader.read_generalized_time()?.datetime())
    }
}

/// One optional field after subjectPublicKeyInfo: a unique ID, skipped, or the `[3]`
/// extensions, read into `found`.
fn read_trailing_field(rest: BERReader<'_, '_>, found: &mut CaExtensions) -> ASN1Result<()> {
    if rest.lookahead_tag()? != Tag::context(3) {
        return rest.read_der().map(drop); // a unique ID
    }
    rest.read_tagged(Tag::context(3), |extensions| {
        extensions.read_sequence_of(|extension| read_extension(extension, found))
    })
}

/// One `Extension ::= SEQUENCE { extnID, critical DEFAULT FALSE, extnValue }`: a KeyUsage
/// or a BasicConstraints is read into `found` (a repeated one overrides the earlier),
/// any other is skipped.
fn read_extension(extension: BERReader<'_, '_>, found: &mut CaExtensions) -> ASN1Result<()> {
    extension.read_sequence(|extension| {
        let id = extension.next().read_oid()?;
        extension.read_optional(|critical| critical.read_bool())?;
        let value = extension.next().read_bytes()?;
        if id.components().as_slice() == KEY_USAGE {
            found.key_cert_sign = Some(has_key_cert_sign(&value)?);
        } else if id.components().as_slice() == BASIC_CONSTRAINTS {
            found.is_ca = says_ca(&value)?;
        }
        Ok(())
    })
}

/// Whether a KeyUsage extension's value has keyCertSign.
fn has_key_cert_sign(value: &[u8]) -> ASN1Result<bool> {
    // keyCertSign is bit 5: 0x04 of the first byte.
    let (bits, _) = yasna::parse_der(value, |bits| bits.read_bitvec_bytes())?;
    Ok(bits.first().is_some_and(|b| b & 0x04 != 0))
}

/// Whether a BasicConstraints extension's value says cA (false when it leaves cA out,
/// its default).
fn says_ca(value: &[u8]) -> ASN1Result<bool> {
    yasna::parse_der(value, |constraints| {
        constraints.read_sequence(|constraints| {
            let ca = constraints.read_optional(|ca| ca.read_bool())?;
            constraints.read_optional(|length| length.read_der())?;
            Ok(ca.unwrap_or(false))
        })
    })
}
