//! The rules every datastore connection shares: how a connection is read from the CR, how
//! Secrets are read and decoded, and how secret values are kept out of logs.
//!
//! A connection section lives at `spec.datastores.<type>[.<name>].connection` with camelCase
//! keys. The rules, the same for Postgres, Redis and COS:
//!
//! - an empty string is the same as an absent key (a user who empties a field in an editor
//!   means to unset it), so a required key that is empty is missing;
//! - a missing required key is a [`Error::Config`] naming its full path, e.g.
//!   `missing required connection element spec.datastores.postgres.connection.hostname`;
//! - `port` is an integer, given as a number or a string of digits; anything else is a config
//!   error naming it;
//! - `tlsSecretName` and `tlsSecretCertField` come both or neither;
//! - `uriSecret` with `uriSecretHostnameField` and `uriSecretPortField` (COS adds
//!   `uriSecretBucketnameField`) read the hostname, port (and bucket) from a Secret instead;
//! - a Secret that does not exist yet is [`Error::precondition`] naming it (another operator or a
//!   user may still create it); a failed read is the cluster error the session returned.
//!
//! The TLS keys may be left out; they need not be present as empty strings.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Map, Value};
use windlass::prelude::*;

/// A value that must never be printed: a password, a secret key, or a connection string that
/// embeds one. Its `Debug` prints `<redacted>` and it has no `Display`; read it with
/// [`SecretString::expose`] where it is handed to a client.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        SecretString(value.into())
    }

    /// The secret value itself, for the client that needs it. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        SecretString(value)
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        SecretString(value.to_string())
    }
}

/// The decoded `data` of one Secret. Its `Debug` names the Secret and its keys, never the
/// values.
#[derive(Clone)]
pub struct SecretData {
    name: String,
    data: BTreeMap<String, Vec<u8>>,
}

impl SecretData {
    /// Decoded data of the Secret `name`.
    pub fn new(name: impl Into<String>, data: BTreeMap<String, Vec<u8>>) -> Self {
        SecretData {
            name: name.into(),
            data,
        }
    }

    /// The Secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value of `field` as text: `None` when the Secret has no such key (or it is
    /// empty); a config error when it is not UTF-8.
    pub fn text(&self, field: &str) -> Result<Option<SecretString>> {
        match self.data.get(field) {
            None => Ok(None),
            Some(bytes) if bytes.is_empty() => Ok(None),
            Some(bytes) => String::from_utf8(bytes.clone())
                .map(|text| Some(SecretString(text)))
                .map_err(|_| {
                    Error::config(format!(
                        "field {field} of Secret {} is not UTF-8 text",
                        self.name
                    ))
                }),
        }
    }

    /// The value of `field` as text; [`Error::precondition`] naming the Secret and the field when
    /// it is missing (whoever writes the Secret may not have filled it in yet).
    pub fn require(&self, field: &str) -> Result<SecretString> {
        self.text(field)?.ok_or_else(|| {
            Error::precondition(format!("Secret {} has no field {field} yet", self.name))
        })
    }
}

impl fmt::Debug for SecretData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretData")
            .field("name", &self.name)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Where connections read Secrets from: a [`Session`] (the CR's namespace, each Secret read
/// at most once per reconcile), or anything else that can answer, e.g. in a unit test.
#[async_trait]
pub trait SecretReader: Send + Sync {
    /// The decoded data of the Secret `name`, or `None` when it does not exist. A failed read
    /// is an error (for a session, [`Error::Cluster`]).
    async fn secret(&self, name: &str) -> Result<Option<SecretData>>;
}

#[async_trait]
impl<C: Controller> SecretReader for Session<C> {
    async fn secret(&self, name: &str) -> Result<Option<SecretData>> {
        let Some(secret) = self.get::<Secret>(name).await? else {
            return Ok(None);
        };
        // k8s-openapi's ByteString has already decoded the base64 of `data`.
        let data = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| (key, value.0))
            .collect();
        Ok(Some(SecretData::new(name, data)))
    }
}

/// Read the Secret `name`; [`Error::precondition`] naming it and what needs it when it does not
/// exist.
pub async fn read_secret(
    secrets: &dyn SecretReader,
    name: &str,
    needed_for: &str,
) -> Result<SecretData> {
    secrets.secret(name).await?.ok_or_else(|| {
        Error::precondition(format!("Secret {name} ({needed_for}) does not exist yet"))
    })
}

/// The `connection` section of one datastore in the CR, with its path for messages.
#[derive(Debug, Clone)]
pub struct ConnectionSpec<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> ConnectionSpec<'a> {
    /// The section at `spec.datastores.<datastore_type>[.<name>].connection` of a CR manifest,
    /// or `None` when the CR gives none (then the operator deploys the datastore). A section
    /// that is not a map is a config error naming it.
    pub fn find(
        manifest: &'a Value,
        datastore_type: &str,
        name: Option<&str>,
    ) -> Result<Option<ConnectionSpec<'a>>> {
        let mut path = String::from("spec.datastores");
        let mut node = manifest.get("spec").and_then(|s| s.get("datastores"));
        let mut steps = vec![datastore_type];
        steps.extend(name);
        steps.push("connection");
        for step in steps {
            let Some(current) = node else {
                return Ok(None);
            };
            match current {
                Value::Null => return Ok(None),
                Value::Object(map) => {
                    path.push('.');
                    path.push_str(step);
                    node = map.get(step);
                }
                _ => return Err(Error::config(format!("{path} must be a map"))),
            }
        }
        match node {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(ConnectionSpec { path, map })),
            Some(_) => Err(Error::config(format!("{path} must be a map"))),
        }
    }

    /// A section read from `map`, named `path` in messages.
    pub fn new(path: impl Into<String>, map: &'a Map<String, Value>) -> Self {
        ConnectionSpec {
            path: path.into(),
            map,
        }
    }

    /// The section's path, e.g. `spec.datastores.postgres.connection`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The full path of `key`, for messages.
    pub fn key_path(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// An optional text value: `None` when absent, `null` or empty; a config error naming it
    /// when it is not a string.
    pub fn string(&self, key: &str) -> Result<Option<String>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::config(format!(
                "{} must be a string, not {other}",
                self.key_path(key)
            ))),
        }
    }

    /// A required text value; a config error naming its path when it is missing or empty.
    pub fn required(&self, key: &str) -> Result<String> {
        self.string(key)?.ok_or_else(|| self.missing(key))
    }

    /// The config error for a missing required `key`.
    pub fn missing(&self, key: &str) -> Error {
        Error::config(format!(
            "missing required connection element {}",
            self.key_path(key)
        ))
    }

    /// An optional port: a number or a string of digits in 1..=65535.
    pub fn port(&self, key: &str) -> Result<Option<u16>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => parse_port(s, &self.key_path(key)).map(Some),
            Some(Value::Number(n)) => parse_port(&n.to_string(), &self.key_path(key)).map(Some),
            Some(other) => Err(Error::config(format!(
                "{} must be a port number, not {other}",
                self.key_path(key)
            ))),
        }
    }

    /// The TLS Secret, if TLS is on: `tlsSecretName` and `tlsSecretCertField` both, or
    /// neither.
    pub fn tls(&self) -> Result<Option<TlsSecret>> {
        let name = self.string("tlsSecretName")?;
        let field = self.string("tlsSecretCertField")?;
        TlsSecret::from_parts(name, field).map_err(|e| {
            Error::config(format!(
                "{} and {}: {e}",
                self.key_path("tlsSecretName"),
                self.key_path("tlsSecretCertField")
            ))
        })
    }
}

/// Parse a port number; a config error naming `what` unless it is an integer in 1..=65535.
pub fn parse_port(text: &str, what: &str) -> Result<u16> {
    match text.trim().parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(Error::config(format!(
            "{what} must be a port number (an integer from 1 to 65535), not {text:?}"
        ))),
    }
}

/// The Secret holding the CA certificate a client verifies the datastore's server
/// certificate with: TLS is on exactly when a connection has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSecret {
    /// The Secret's name.
    pub secret_name: String,
    /// Its key holding the PEM CA certificate.
    pub cert_field: String,
}

impl TlsSecret {
    /// TLS from an optional Secret name and field: both (TLS on), neither (off), or an error
    /// saying that one is missing.
    pub fn from_parts(
        secret_name: Option<String>,
        cert_field: Option<String>,
    ) -> std::result::Result<Option<TlsSecret>, &'static str> {
        match (secret_name, cert_field) {
            (Some(secret_name), Some(cert_field)) => Ok(Some(TlsSecret {
                secret_name,
                cert_field,
            })),
            (None, None) => Ok(None),
            _ => Err("give both (TLS on) or neither (TLS off)"),
        }
    }

    /// The PEM CA certificate; [`Error::precondition`] when the Secret or its field is missing.
    pub async fn read_cert(&self, secrets: &dyn SecretReader) -> Result<String> {
        let data = read_secret(secrets, &self.secret_name, "TLS certificate").await?;
        Ok(data.require(&self.cert_field)?.expose().to_string())
    }
}

/// The CA certificate a connection uses: known in memory (handed out by the component that
/// deploys the datastore), else read from its [`TlsSecret`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Tls {
    pub(crate) secret: Option<TlsSecret>,
    pub(crate) cert: Option<String>,
}

impl Tls {
    pub(crate) fn new(secret: Option<TlsSecret>) -> Self {
        Tls { secret, cert: None }
    }

    /// Remember the CA certificate; a config error when TLS is off.
    pub(crate) fn set_cert(&mut self, pem: String) -> Result<()> {
        if self.secret.is_none() {
            return Err(Error::config(
                "a TLS certificate was given for a connection without TLS (no TLS Secret)",
            ));
        }
        self.cert = Some(pem);
        Ok(())
    }

    pub(crate) async fn cert(&self, secrets: &dyn SecretReader) -> Result<Option<String>> {
        match (&self.secret, &self.cert) {
            (None, _) => Ok(None),
            (Some(_), Some(cert)) => Ok(Some(cert.clone())),
            (Some(secret), None) => secret.read_cert(secrets).await.map(Some),
        }
    }

    pub(crate) fn spec_into(&self, map: &mut Map<String, Value>) {
        if let Some(tls) = &self.secret {
            map.insert("tlsSecretName".into(), tls.secret_name.clone().into());
            map.insert("tlsSecretCertField".into(), tls.cert_field.clone().into());
        }
    }
}

/// A Secret holding a pair of credentials (a username and password, an access key and secret
/// key), by the Secret's name and the two keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialSecret {
    /// The Secret's name.
    pub secret_name: String,
    /// The key of the first value (the username, the access key).
    pub first_field: String,
    /// The key of the second value (the password, the secret key).
    pub second_field: String,
}

impl CredentialSecret {
    /// Read both values; [`Error::precondition`] naming the Secret or the field that is missing.
    pub async fn read(
        &self,
        secrets: &dyn SecretReader,
        needed_for: &str,
    ) -> Result<(SecretString, SecretString)> {
        let data = read_secret(secrets, &self.secret_name, needed_for).await?;
        Ok((
            data.require(&self.first_field)?,
            data.require(&self.second_field)?,
        ))
    }
}

/// What every connection type holds the same way: where the datastore listens, the Secret with
/// its pair of credentials, and its TLS. Each connection embeds one; the spec keys of the two
/// credential fields (and, for object storage, the bucket) are the connection type's own.
#[cfg(any(feature = "postgres", feature = "redis", feature = "cos"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) hostname: String,
    pub(crate) port: u16,
    pub(crate) auth: CredentialSecret,
    pub(crate) tls: Tls,
}

#[cfg(any(feature = "postgres", feature = "redis", feature = "cos"))]
impl Endpoint {
    pub(crate) fn new(
        hostname: String,
        port: u16,
        auth: CredentialSecret,
        tls: Option<TlsSecret>,
    ) -> Self {
        Endpoint {
            hostname,
            port,
            auth,
            tls: Tls::new(tls),
        }
    }

    /// Read from the spec: `authSecretName` with the credential keys `first_key` and
    /// `second_key`, the TLS Secret, then the location (with `bucket` as for [`locate`], whose
    /// bucket is returned too). Config errors come in this order, whichever the connection.
    pub(crate) async fn read(
        spec: &ConnectionSpec<'_>,
        secrets: &dyn SecretReader,
        first_key: &str,
        second_key: &str,
        bucket: Option<(&str, &str)>,
    ) -> Result<(Self, Option<String>)> {
        let auth = CredentialSecret {
            secret_name: spec.required("authSecretName")?,
            first_field: spec.required(first_key)?,
            second_field: spec.required(second_key)?,
        };
        let tls = spec.tls()?;
        let location = locate(spec, secrets, bucket).await?;
        Ok((
            Endpoint::new(location.hostname, location.port, auth, tls),
            location.bucket,
        ))
    }

    /// The spec [`Endpoint::read`] reads back: `hostname`, `port`, then `bucket` (its key
    /// and value) when given, the auth Secret under `authSecretName`, `first_key` and
    /// `second_key`, and the TLS keys when TLS is on.
    pub(crate) fn to_spec(
        &self,
        first_key: &str,
        second_key: &str,
        bucket: Option<(&str, &str)>,
    ) -> Value {
        let mut map = Map::new();
        map.insert("hostname".into(), self.hostname.clone().into());
        map.insert("port".into(), self.port.into());
        if let Some((key, value)) = bucket {
            map.insert(key.into(), value.into());
        }
        map.insert(
            "authSecretName".into(),
            self.auth.secret_name.clone().into(),
        );
        map.insert(first_key.into(), self.auth.first_field.clone().into());
        map.insert(second_key.into(), self.auth.second_field.clone().into());
        self.tls.spec_into(&mut map);
        Value::Object(map)
    }

    pub(crate) fn tls_secret(&self) -> Option<&TlsSecret> {
        self.tls.secret.as_ref()
    }

    pub(crate) fn tls_enabled(&self) -> bool {
        self.tls.secret.is_some()
    }
}

/// Where a datastore listens (and, for object storage, which bucket), read from the spec or
/// from its URI Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) hostname: String,
    pub(crate) port: u16,
    pub(crate) bucket: Option<String>,
}

/// The hostname and port (and with `bucket`, the bucket from `bucket.0`/`bucket.1`: the spec
/// key and the URI Secret's field key) of a connection: from the Secret `uriSecret` when it is
/// given, else from the spec's `hostname` and `port`.
pub(crate) async fn locate(
    spec: &ConnectionSpec<'_>,
    secrets: &dyn SecretReader,
    bucket: Option<(&str, &str)>,
) -> Result<Location> {
    let Some(uri_secret) = spec.string("uriSecret")? else {
        return Ok(Location {
            hostname: spec.required("hostname")?,
            port: spec.port("port")?.ok_or_else(|| spec.missing("port"))?,
            bucket: bucket.map(|(key, _)| spec.required(key)).transpose()?,
        });
    };
    // The field names are config: check them before looking for the Secret.
    let hostname_field = spec.required("uriSecretHostnameField")?;
    let port_field = spec.required("uriSecretPortField")?;
    let bucket_field = bucket.map(|(_, key)| spec.required(key)).transpose()?;
    let data = read_secret(
        secrets,
        &uri_secret,
        &format!("hostname and port of {}", spec.path()),
    )
    .await?;
    let field = |key: &str| -> Result<String> {
        data.text(key)?
            .map(|v| v.expose().to_string())
            .ok_or_else(|| {
                Error::config(format!(
                    "Secret {uri_secret} (named by {}) has no field {key}",
                    spec.key_path("uriSecret")
                ))
            })
    };
    let port_text = field(&port_field)?;
    Ok(Location {
        hostname: field(&hostname_field)?,
        port: parse_port(
            &port_text,
            &format!("field {port_field} of Secret {uri_secret}"),
        )?,
        bucket: bucket_field.as_deref().map(field).transpose()?,
    })
}

/// `host:port` as it goes into a URL: an IPv6 address gets its brackets.
#[cfg(any(feature = "redis", feature = "cos"))]
pub(crate) fn host_port(hostname: &str, port: u16) -> String {
    if hostname.contains(':') && !hostname.starts_with('[') {
        format!("[{hostname}]:{port}")
    } else {
        format!("{hostname}:{port}")
    }
}

/// A [`SecretReader`] that finds no Secret: for tests of connections that must not need one.
#[cfg(test)]
pub(crate) struct NoSecrets;

#[cfg(test)]
#[async_trait]
impl SecretReader for NoSecrets {
    async fn secret(&self, _: &str) -> Result<Option<SecretData>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixed(BTreeMap<String, SecretData>);

    #[async_trait]
    impl SecretReader for Fixed {
        async fn secret(&self, name: &str) -> Result<Option<SecretData>> {
            Ok(self.0.get(name).cloned())
        }
    }

    fn fixed(secrets: &[(&str, &[(&str, &str)])]) -> Fixed {
        Fixed(
            secrets
                .iter()
                .map(|(name, data)| {
                    let data = data
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                        .collect();
                    (name.to_string(), SecretData::new(*name, data))
                })
                .collect(),
        )
    }

    #[test]
    fn secrets_never_print() {
        let password = SecretString::new("hunter2");
        assert_eq!(format!("{password:?}"), "<redacted>");
        let data = SecretData::new("db", [("password".into(), b"hunter2".to_vec())].into());
        let printed = format!("{data:?}");
        assert!(
            printed.contains("password") && !printed.contains("hunter2"),
            "{printed}"
        );
    }

    #[test]
    fn the_section_is_found_by_type_and_name() {
        let cr = json!({"spec": {"datastores": {
            "postgres": {"connection": {"hostname": "a"}, "audit": {"connection": {"hostname": "b"}}},
            "redis": "nonsense",
        }}});
        let top = ConnectionSpec::find(&cr, "postgres", None)
            .unwrap()
            .unwrap();
        assert_eq!(top.path(), "spec.datastores.postgres.connection");
        assert_eq!(top.required("hostname").unwrap(), "a");
        let named = ConnectionSpec::find(&cr, "postgres", Some("audit"))
            .unwrap()
            .unwrap();
        assert_eq!(named.path(), "spec.datastores.postgres.audit.connection");
        assert!(
            ConnectionSpec::find(&cr, "postgres", Some("other"))
                .unwrap()
                .is_none()
        );
        assert!(ConnectionSpec::find(&cr, "cos", None).unwrap().is_none());
        assert!(
            ConnectionSpec::find(&json!({}), "cos", None)
                .unwrap()
                .is_none()
        );
        let err = ConnectionSpec::find(&cr, "redis", None).unwrap_err();
        assert_eq!(err, Error::config("spec.datastores.redis must be a map"));
    }

    #[test]
    fn empty_strings_are_null_and_missing_keys_are_named() {
        let map = json!({"hostname": "", "port": null, "authSecretName": 5})
            .as_object()
            .cloned()
            .unwrap();
        let spec = ConnectionSpec::new("spec.datastores.redis.connection", &map);
        assert_eq!(spec.string("hostname").unwrap(), None);
        assert_eq!(
            spec.required("hostname").unwrap_err(),
            Error::config(
                "missing required connection element spec.datastores.redis.connection.hostname"
            )
        );
        assert_eq!(spec.port("port").unwrap(), None);
        let err = spec.string("authSecretName").unwrap_err().to_string();
        assert!(
            err.contains("connection.authSecretName must be a string"),
            "{err}"
        );
    }

    #[test]
    fn ports_are_integers() {
        let map = json!({"a": 5432, "b": "6379", "c": "http", "d": 70000, "e": 1.5, "f": 0})
            .as_object()
            .cloned()
            .unwrap();
        let spec = ConnectionSpec::new("x", &map);
        assert_eq!(spec.port("a").unwrap(), Some(5432));
        assert_eq!(spec.port("b").unwrap(), Some(6379));
        for bad in ["c", "d", "e", "f"] {
            let err = spec.port(bad).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{bad}: {err}");
            assert!(
                err.to_string().contains(&format!("x.{bad} must be a port")),
                "{err}"
            );
        }
    }

    #[test]
    fn tls_takes_both_or_neither() {
        for (value, on) in [
            (
                json!({"tlsSecretName": "tls", "tlsSecretCertField": "ca.crt"}),
                true,
            ),
            (json!({}), false),
            (
                json!({"tlsSecretName": "", "tlsSecretCertField": null}),
                false,
            ),
        ] {
            let map = value.as_object().cloned().unwrap();
            assert_eq!(ConnectionSpec::new("x", &map).tls().unwrap().is_some(), on);
        }
        for value in [
            json!({"tlsSecretName": "tls"}),
            json!({"tlsSecretName": "", "tlsSecretCertField": "ca.crt"}),
        ] {
            let map = value.as_object().cloned().unwrap();
            let err = ConnectionSpec::new("x", &map)
                .tls()
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("x.tlsSecretName and x.tlsSecretCertField"),
                "{err}"
            );
        }
        let mut tls = Tls::new(None);
        assert!(matches!(tls.set_cert("pem".into()), Err(Error::Config(_))));
    }

    #[tokio::test]
    async fn the_uri_secret_gives_host_port_and_bucket() {
        let map = json!({
            "uriSecret": "where", "uriSecretHostnameField": "host",
            "uriSecretPortField": "port", "uriSecretBucketnameField": "bucket",
        })
        .as_object()
        .cloned()
        .unwrap();
        let spec = ConnectionSpec::new("spec.datastores.cos.connection", &map);
        let bucket = Some(("bucketName", "uriSecretBucketnameField"));

        let err = locate(&spec, &fixed(&[]), bucket).await.unwrap_err();
        assert!(!err.is_fatal(), "a missing Secret is not yet: {err}");
        assert!(err.to_string().contains("Secret where"), "{err}");

        let secrets = fixed(&[(
            "where",
            &[("host", "s3.local"), ("port", "9000"), ("bucket", "b")],
        )]);
        let found = locate(&spec, &secrets, bucket).await.unwrap();
        assert_eq!(
            found,
            Location {
                hostname: "s3.local".into(),
                port: 9000,
                bucket: Some("b".into())
            }
        );

        let secrets = fixed(&[(
            "where",
            &[("host", "s3.local"), ("port", "nine"), ("bucket", "b")],
        )]);
        let err = locate(&spec, &secrets, bucket).await.unwrap_err();
        assert!(matches!(err, Error::Config(_)));
        assert!(
            err.to_string().contains("field port of Secret where"),
            "{err}"
        );

        let secrets = fixed(&[("where", &[("port", "1")])]);
        let err = locate(&spec, &secrets, bucket).await.unwrap_err();
        assert!(err.to_string().contains("has no field"), "{err}");
    }

    #[cfg(any(feature = "redis", feature = "cos"))]
    #[test]
    fn ipv6_hosts_get_brackets() {
        assert_eq!(host_port("::1", 5), "[::1]:5");
        assert_eq!(host_port("db", 5), "db:5");
    }

    mod properties {
        use super::super::parse_port;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(10_000))]

            /// Every port, written plainly or with surrounding whitespace, reads back.
            #[test]
            fn every_port_reads_back(port in 1u16..=65535, pad in "[ \\t\\n]{0,2}") {
                prop_assert_eq!(parse_port(&format!("{pad}{port}{pad}"), "port").ok(), Some(port));
            }

            /// Any text: a port from 1 to 65535 or a config error naming the key, never a panic.
            #[test]
            fn any_text_is_a_port_or_a_config_error(text in prop_oneof![
                prop::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter),
                "[+-]?[0-9]{0,7}(\\.[0-9])?",
            ]) {
                match parse_port(&text, "spec.port") {
                    Ok(port) => prop_assert!(port >= 1),
                    Err(e) => prop_assert!(e.to_string().contains("spec.port"), "{}", e),
                }
            }
        }
    }
}
