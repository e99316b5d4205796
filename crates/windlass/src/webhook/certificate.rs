//! The serving certificate: issued by the operator's own CA and kept in a Secret, or read
//! from files issued elsewhere.
//!
//! The Secret holds the CA (`ca.crt`, `ca.key`), the serving pair (`tls.crt`, `tls.key`),
//! and, after the CA was renewed, the previous CA (`ca-previous.crt`), which stays in the
//! bundle the API server trusts until the next renewal so that a replica still serving the
//! old pair is trusted too. When each expires, and which hosts the pair is for, are
//! annotations: windlass wrote them with the certificates, so it never has to parse X.509 to
//! decide a renewal. Every replica reads the same Secret; the first to find it missing or
//! due writes it, the others lose the write's conflict and read the winner's.
//!
//! windlass-x's `tls` module is a fuller CA for the operands' TLS; it depends on windlass,
//! so this small issuer (a CA and one server certificate, with rcgen) lives here.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::error::{Error, Result};

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const PREVIOUS_CA: &str = "ca-previous.crt";
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
const NOT_AFTER: &str = "windlass.dev/not-after";
const CA_NOT_AFTER: &str = "windlass.dev/ca-not-after";
const HOSTS: &str = "windlass.dev/hosts";
const CA_NAME: &str = "windlass webhook CA";

/// What the server serves with and what its callers must trust.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Material {
    /// The serving certificate (PEM).
    pub(crate) cert_pem: String,
    /// Its key (PEM).
    pub(crate) key_pem: String,
    /// The CAs the callers trust (PEM, one or two), when the operator is its own CA.
    pub(crate) ca_bundle: Option<String>,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &"<secret>")
            .field("ca_bundle", &self.ca_bundle.as_ref().map(String::len))
            .finish()
    }
}

/// Where the serving certificate comes from.
pub(crate) enum Source {
    /// The operator is its own CA and keeps everything in the Secret `name`.
    Secret {
        api: Box<Api<Secret>>,
        name: String,
        /// DNS names and IP addresses the certificate is for.
        hosts: Vec<String>,
        validity: Duration,
        ca_validity: Duration,
    },
    /// `tls.crt` and `tls.key` in a directory, issued elsewhere.
    Files(PathBuf),
}

impl Source {
    /// The current material: from the files; or from the Secret, created or renewed first
    /// when it is missing, unreadable, for other hosts, or a third of its life from the end.
    pub(crate) async fn current(&self) -> Result<Material> {
        match self {
            Source::Files(dir) => read_files(dir),
            Source::Secret {
                api,
                name,
                hosts,
                validity,
                ca_validity,
            } => {
                let wanted = Wanted {
                    hosts,
                    validity: *validity,
                    ca_validity: *ca_validity,
                };
                ensure_secret(api, name, &wanted).await
            }
        }
    }
}

fn read_files(dir: &std::path::Path) -> Result<Material> {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file)).map_err(|e| {
            Error::with_source(
                format!(
                    "cannot read the webhook certificate {}",
                    dir.join(file).display()
                ),
                e,
            )
        })
    };
    Ok(Material {
        cert_pem: read(TLS_CERT)?,
        key_pem: read(TLS_KEY)?,
        ca_bundle: None,
    })
}

/// What the Secret must hold.
struct Wanted<'a> {
    hosts: &'a [String],
    validity: Duration,
    ca_validity: Duration,
}

/// Read the Secret and return its material, writing a new one first when needed. A
/// conflict means another replica wrote it: read again and use theirs.
async fn ensure_secret(api: &Api<Secret>, name: &str, wanted: &Wanted<'_>) -> Result<Material> {
    for _ in 0..3 {
        let found = api
            .get_opt(name)
            .await
            .map_err(|e| Error::with_source(format!("cannot read the Secret {name}"), e))?;
        let stored = found.as_ref().and_then(Stored::read);
        if let Some(stored) = &stored
            && !stored.due(wanted, SystemTime::now())
        {
            return Ok(stored.material());
        }
        let renewed = issue(stored.as_ref(), wanted)?;
        let mut secret = renewed.to_secret(name);
        let written = match found {
            Some(old) => {
                secret.metadata.resource_version = old.metadata.resource_version;
                api.replace(name, &PostParams::default(), &secret).await
            }
            None => api.create(&PostParams::default(), &secret).await,
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = name, "issued a webhook serving certificate");
                return Ok(renewed.material());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(Error::with_source(
                    format!("cannot write the Secret {name}"),
                    e,
                ));
            }
        }
    }
    Err(Error::cluster(format!(
        "the Secret {name} kept changing while this replica renewed it"
    )))
}

/// What windlass keeps in the Secret.
#[derive(Clone)]
struct Stored {
    ca_cert: String,
    ca_key: String,
    previous_ca: Option<String>,
    cert: String,
    key: String,
    not_after: SystemTime,
    ca_not_after: SystemTime,
    hosts: Vec<String>,
}

impl Stored {
    /// The Secret's contents, if it holds all of them and its key pairs parse.
    fn read(secret: &Secret) -> Option<Stored> {
        let data = secret.data.as_ref()?;
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        let annotations = secret.metadata.annotations.as_ref()?;
        let time = |key: &str| {
            annotations
                .get(key)?
                .parse::<jiff::Timestamp>()
                .ok()
                .map(SystemTime::from)
        };
        let stored = Stored {
            ca_cert: text(CA_CERT)?,
            ca_key: text(CA_KEY)?,
            previous_ca: text(PREVIOUS_CA),
            cert: text(TLS_CERT)?,
            key: text(TLS_KEY)?,
            not_after: time(NOT_AFTER)?,
            ca_not_after: time(CA_NOT_AFTER)?,
            hosts: annotations
                .get(HOSTS)?
                .split(',')
                .filter(|h| !h.is_empty())
                .map(str::to_string)
                .collect(),
        };
        (KeyPair::from_pem(&stored.ca_key).is_ok() && KeyPair::from_pem(&stored.key).is_ok())
            .then_some(stored)
    }

    /// Whether the serving pair must be issued again at `now`: for other hosts, or with a
    /// third of its validity (or less) left; or the CA has less than a pair's validity left.
    fn due(&self, wanted: &Wanted<'_>, now: SystemTime) -> bool {
        let left = |until: SystemTime| until.duration_since(now).unwrap_or_default();
        self.hosts != wanted.hosts
            || left(self.not_after) <= wanted.validity / 3
            || left(self.ca_not_after) < wanted.validity
    }

    fn material(&self) -> Material {
        let mut bundle = self.ca_cert.clone();
        if let Some(previous) = &self.previous_ca {
            bundle.push_str(previous);
        }
        Material {
            cert_pem: self.cert.clone(),
            key_pem: self.key.clone(),
            ca_bundle: Some(bundle),
        }
    }

    fn to_secret(&self, name: &str) -> Secret {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
        };
        put(CA_CERT, &self.ca_cert);
        put(CA_KEY, &self.ca_key);
        put(TLS_CERT, &self.cert);
        put(TLS_KEY, &self.key);
        if let Some(previous) = &self.previous_ca {
            put(PREVIOUS_CA, previous);
        }
        let stamp = |t: SystemTime| {
            jiff::Timestamp::try_from(t)
                .map(|t| t.to_string())
                .unwrap_or_default()
        };
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                annotations: Some(BTreeMap::from([
                    (NOT_AFTER.to_string(), stamp(self.not_after)),
                    (CA_NOT_AFTER.to_string(), stamp(self.ca_not_after)),
                    (HOSTS.to_string(), self.hosts.join(",")),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_string()),
            data: Some(data),
            ..Secret::default()
        }
    }
}

/// A serving pair for `hosts` from a CA of its own, kept nowhere: for a server whose
/// clients skip verification or pin it (the secure metrics server), valid a year.
pub(crate) fn self_signed(hosts: &[String]) -> Result<Material> {
    let wanted = Wanted {
        hosts,
        validity: Duration::from_secs(365 * 24 * 3600),
        ca_validity: Duration::from_secs(365 * 24 * 3600),
    };
    Ok(issue(None, &wanted)?.material())
}

/// A new serving pair, from the stored CA while it has a pair's validity left, else from
/// a new CA (the old one kept in the bundle).
fn issue(stored: Option<&Stored>, wanted: &Wanted<'_>) -> Result<Stored> {
    let now = SystemTime::now();
    let reusable = stored.filter(|s| {
        s.ca_not_after.duration_since(now).unwrap_or_default() >= wanted.validity
            && KeyPair::from_pem(&s.ca_key).is_ok()
    });
    let (ca_cert, ca_key, ca_not_after, previous_ca) = match reusable {
        Some(s) => (
            s.ca_cert.clone(),
            s.ca_key.clone(),
            s.ca_not_after,
            s.previous_ca.clone(),
        ),
        None => {
            let (cert, key, not_after) = new_ca(now + wanted.ca_validity)?;
            (cert, key, not_after, stored.map(|s| s.ca_cert.clone()))
        }
    };
    let ca_pair = KeyPair::from_pem(&ca_key).map_err(issue_error)?;
    let issuer = Issuer::new(ca_params(), &ca_pair);
    let not_after = (now + wanted.validity).min(ca_not_after);
    let key = KeyPair::generate().map_err(issue_error)?;
    let cert = server_params(wanted.hosts, now, not_after)?
        .signed_by(&key, &issuer)
        .map_err(issue_error)?;
    Ok(Stored {
        ca_cert,
        ca_key,
        previous_ca,
        cert: cert.pem(),
        key: key.serialize_pem(),
        not_after,
        ca_not_after,
        hosts: wanted.hosts.to_vec(),
    })
}

/// A new self-signed CA valid until `not_after`: its certificate and key (PEM).
fn new_ca(not_after: SystemTime) -> Result<(String, String, SystemTime)> {
    let key = KeyPair::generate().map_err(issue_error)?;
    let mut params = ca_params();
    params.not_before = (SystemTime::now() - CLOCK_SKEW).into();
    params.not_after = not_after.into();
    let cert = params.self_signed(&key).map_err(issue_error)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// How far back a certificate's validity starts, for callers whose clock is behind.
const CLOCK_SKEW: Duration = Duration::from_secs(300);

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn server_params(
    hosts: &[String],
    now: SystemTime,
    not_after: SystemTime,
) -> Result<CertificateParams> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "windlass webhook");
    params.distinguished_name = name;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    for host in hosts {
        params.subject_alt_names.push(match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.clone().try_into().map_err(|e: rcgen::Error| {
                Error::config(format!(
                    "webhook.certificate.hosts: `{host}` is not a DNS name or an IP address: {e}"
                ))
            })?),
        });
    }
    params.not_before = (now - CLOCK_SKEW).into();
    params.not_after = not_after.into();
    Ok(params)
}

fn issue_error(e: rcgen::Error) -> Error {
    Error::with_source("cannot issue the webhook certificate", e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(hosts: &[String]) -> Wanted<'_> {
        Wanted {
            hosts,
            validity: Duration::from_secs(90 * 86400),
            ca_validity: Duration::from_secs(365 * 86400),
        }
    }

    #[test]
    fn a_fresh_pair_is_not_due_and_survives_the_secret() {
        let hosts = vec!["svc.ns.svc".to_string(), "127.0.0.1".to_string()];
        let issued = issue(None, &wanted(&hosts)).unwrap();
        let read = Stored::read(&issued.to_secret("s")).expect("readable");
        assert!(!read.due(&wanted(&hosts), SystemTime::now()));
        assert_eq!(read.material(), issued.material());
        assert!(read.due(&wanted(&["other".to_string()]), SystemTime::now()));
    }

    #[test]
    fn a_pair_is_renewed_from_the_same_ca_with_a_third_left() {
        let hosts = vec!["svc.ns.svc".to_string()];
        let w = wanted(&hosts);
        let issued = issue(None, &w).unwrap();
        let later = SystemTime::now() + Duration::from_secs(61 * 86400);
        assert!(issued.due(&w, later), "61 of 90 days gone");
        let renewed = issue(Some(&issued), &w).unwrap();
        assert_eq!(renewed.ca_cert, issued.ca_cert, "the CA stays");
        assert_ne!(renewed.cert, issued.cert);
        assert!(renewed.previous_ca.is_none());
    }

    #[test]
    fn a_ca_near_its_end_is_replaced_and_kept_in_the_bundle() {
        let hosts = vec!["svc.ns.svc".to_string()];
        let short = Wanted {
            hosts: &hosts,
            validity: Duration::from_secs(3600),
            ca_validity: Duration::from_secs(3600),
        };
        let old = issue(None, &short).unwrap();
        assert!(old.due(&short, SystemTime::now() + Duration::from_secs(1)));
        let renewed = issue(Some(&old), &wanted(&hosts)).unwrap();
        assert_ne!(renewed.ca_cert, old.ca_cert);
        let bundle = renewed.material().ca_bundle.unwrap();
        assert!(bundle.contains(&renewed.ca_cert) && bundle.contains(&old.ca_cert));
    }

    #[test]
    fn a_damaged_secret_is_not_used() {
        let hosts = vec!["svc.ns.svc".to_string()];
        let mut secret = issue(None, &wanted(&hosts)).unwrap().to_secret("s");
        if let Some(data) = secret.data.as_mut() {
            data.insert(TLS_KEY.to_string(), ByteString(b"not a key".to_vec()));
        }
        assert!(Stored::read(&secret).is_none());
        assert!(
            format!("{:?}", issue(None, &wanted(&hosts)).unwrap().material()).contains("<secret>")
        );
    }
}
