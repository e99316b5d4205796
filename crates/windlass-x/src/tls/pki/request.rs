//! The certificate request: the names a server or intermediate certificate is for, and
//! the canonical form that decides whether two requests ask for the same certificate.

use std::net::IpAddr;

use rustls_pki_types::ServerName;

use super::{KeyAlgorithm, TlsError};

/// What a server (or intermediate CA) certificate is for: its names, and whether it may
/// sign certificates itself.
///
/// ```
/// use windlass_x::tls::CertRequest;
///
/// let request = CertRequest::new()
///     .dns_names(["db", "db.shop.svc", "db.shop.svc.cluster.local"])
///     .ip_addresses(["127.0.0.1".parse().unwrap()]);
/// assert_eq!(request.names().count(), 4);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CertRequest {
    dns_names: Vec<String>,
    ip_addresses: Vec<IpAddr>,
    intermediate_ca: bool,
}

impl CertRequest {
    /// A request with no names yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Add DNS SANs (e.g. a Service's `name`, `name.namespace.svc`).
    pub fn dns_names<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.dns_names.extend(names.into_iter().map(Into::into));
        self
    }
    /// Add IP SANs, written as IP entries.
    pub fn ip_addresses(mut self, ips: impl IntoIterator<Item = IpAddr>) -> Self {
        self.ip_addresses.extend(ips);
        self
    }
    /// Make the certificate an intermediate CA (CA:true, keyCertSign): a server that signs
    /// certificates of its own, e.g. for its clients.
    pub fn intermediate_ca(mut self) -> Self {
        self.intermediate_ca = true;
        self
    }
    /// The DNS SANs, as given (certificates carry them without a trailing dot).
    pub fn dns(&self) -> &[String] {
        &self.dns_names
    }
    /// The IP SANs, as given.
    pub fn ips(&self) -> &[IpAddr] {
        &self.ip_addresses
    }
    /// Whether this is an intermediate CA.
    pub fn is_intermediate_ca(&self) -> bool {
        self.intermediate_ca
    }
    /// Every SAN as text, DNS names first.
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        self.dns_names
            .iter()
            .cloned()
            .chain(self.ip_addresses.iter().map(IpAddr::to_string))
    }

    /// The SANs in a canonical order without repeats: requests that differ only in order
    /// ask for the same certificate.
    /// DNS names are written without the trailing dot of an absolute name (`db.shop.svc.`
    /// becomes `db.shop.svc`): webpki, like most verifiers, refuses a certificate whose
    /// SAN ends in a dot, while a client connecting to the absolute name still matches
    /// the relative one.
    pub(super) fn canonical(&self) -> (Vec<String>, Vec<IpAddr>) {
        let mut dns: Vec<String> = self
            .dns_names
            .iter()
            .map(|name| relative(name).to_string())
            .collect();
        dns.sort();
        dns.dedup();
        let mut ips = self.ip_addresses.clone();
        ips.sort();
        ips.dedup();
        (dns, ips)
    }

    /// A stable digest of what this request asks for, with the key algorithm: equal
    /// digests ask for interchangeable certificates. Order, repeats and a DNS name's
    /// trailing dot do not count: `db.shop.svc.` asks for the same SAN as `db.shop.svc`.
    pub fn fingerprint(&self, algorithm: KeyAlgorithm) -> String {
        use sha2::{Digest, Sha256};
        let (dns, ips) = self.canonical();
        let mut hash = Sha256::new();
        // Length-prefixed fields, so no two requests serialise alike.
        let mut field = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        field(algorithm.to_string().as_bytes());
        field(if self.intermediate_ca { b"ca" } else { b"leaf" });
        for name in &dns {
            field(b"dns");
            field(name.as_bytes());
        }
        for ip in &ips {
            field(b"ip");
            field(ip.to_string().as_bytes());
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether the request names something, and every DNS SAN is a valid DNS name (and not
    /// an IP address written as one).
    /// One trailing dot is allowed and left out of the certificate (see
    /// [`CertRequest::fingerprint`]).
    pub fn validate(&self) -> Result<(), TlsError> {
        if self.dns_names.is_empty() && self.ip_addresses.is_empty() {
            return Err(TlsError::NoNames);
        }
        for name in &self.dns_names {
            let presented = relative(name);
            if presented.ends_with('.') {
                return Err(TlsError::BadName {
                    name: name.clone(),
                    reason: "it ends with more than one dot".into(),
                });
            }
            ServerName::try_from(presented)
                .map_err(|e| TlsError::BadName {
                    name: name.clone(),
                    reason: e.to_string(),
                })
                .and_then(|parsed| match parsed {
                    ServerName::DnsName(_) => Ok(()),
                    // An IP given as a DNS name would never match: refuse it rather than hide it.
                    _ => Err(TlsError::BadName {
                        name: name.clone(),
                        reason: "it is an IP address: give it as an IP SAN".into(),
                    }),
                })?;
        }
        Ok(())
    }
}

/// `name` without the trailing dot of an absolute DNS name.
fn relative(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}
