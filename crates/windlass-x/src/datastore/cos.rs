//! S3-compatible object storage ("COS") connections: an endpoint, a bucket, the Secret with
//! the access key and secret key, and optionally the CA certificate's Secret.
//!
//! The CR section (`spec.datastores.cos[.<name>].connection`):
//!
//! ```yaml
//! hostname: s3.example.com     # or uriSecret + uriSecretHostnameField + uriSecretPortField
//! port: 443                    #    + uriSecretBucketnameField
//! bucketName: reports
//! authSecretName: s3-keys
//! authSecretAccessKeyField: accessKey
//! authSecretSecretKeyField: secretKey
//! tlsSecretName: s3-ca         # optional, with tlsSecretCertField; makes the endpoint https
//! tlsSecretCertField: ca.crt
//! ```
//!
//! Besides the parts, [`CosConnection::connection_string`] gives the one-line form
//! `s3,endpoint=<endpoint>,accesskey=<key>,secretkey=<secret>,bucketsuffix=<bucket>` for
//! applications that take it.

use async_trait::async_trait;
use serde_json::Value;
use windlass::prelude::*;

use super::Connection;
use super::spec::{
    ConnectionSpec, CredentialSecret, Endpoint, SecretReader, SecretString, TlsSecret, host_port,
};

/// The spec keys naming the auth Secret's access key and secret key fields.
const ACCESS_KEY_KEY: &str = "authSecretAccessKeyField";
const SECRET_KEY_KEY: &str = "authSecretSecretKeyField";
/// The spec key of the bucket, and the one naming the URI Secret's bucket field.
const BUCKET_KEYS: (&str, &str) = ("bucketName", "uriSecretBucketnameField");

/// An access key and its secret key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// The access key id (it names the key; it is not itself secret, like a username).
    pub access_key: String,
    /// The secret key.
    pub secret_key: SecretString,
}

/// How to reach one bucket of an S3-compatible object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CosConnection {
    endpoint: Endpoint,
    bucket: String,
    keys: Option<Keys>,
}

impl CosConnection {
    /// A connection to `bucket` at `hostname:port` whose keys are in `auth` (access key first,
    /// secret key second), over https when `tls` names the CA certificate's Secret.
    pub fn new(
        hostname: impl Into<String>,
        port: u16,
        bucket: impl Into<String>,
        auth: CredentialSecret,
        tls: Option<TlsSecret>,
    ) -> Self {
        CosConnection {
            endpoint: Endpoint::new(hostname.into(), port, auth, tls),
            bucket: bucket.into(),
            keys: None,
        }
    }

    /// The keys, when the component that deployed the store knows them.
    pub fn with_keys(mut self, keys: Keys) -> Self {
        self.keys = Some(keys);
        self
    }

    /// The PEM CA certificate, when the component that deployed the store knows it. A config
    /// error when the connection has no TLS.
    pub fn with_tls_cert(mut self, pem: impl Into<String>) -> Result<Self> {
        self.endpoint.tls.set_cert(pem.into())?;
        Ok(self)
    }

    /// The hostname.
    pub fn hostname(&self) -> &str {
        &self.endpoint.hostname
    }
    /// The port.
    pub fn port(&self) -> u16 {
        self.endpoint.port
    }
    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
    /// The Secret with the access key and secret key.
    pub fn auth_secret(&self) -> &CredentialSecret {
        &self.endpoint.auth
    }
    /// The Secret with the CA certificate, when TLS is on.
    pub fn tls_secret(&self) -> Option<&TlsSecret> {
        self.endpoint.tls_secret()
    }
    /// Whether the connection uses TLS.
    pub fn tls_enabled(&self) -> bool {
        self.endpoint.tls_enabled()
    }
    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls_enabled() { "https" } else { "http" }
    }
    /// `<scheme>://<host>:<port>`.
    pub fn endpoint(&self) -> String {
        format!(
            "{}://{}",
            self.scheme(),
            host_port(&self.endpoint.hostname, self.endpoint.port)
        )
    }

    /// The PEM CA certificate when TLS is on; [`Error::precondition`] when its Secret or field is
    /// missing.
    pub async fn tls_cert(&self, secrets: &dyn SecretReader) -> Result<Option<String>> {
        self.endpoint.tls.cert(secrets).await
    }

    /// The access key and secret key; [`Error::precondition`] naming the Secret or field that is
    /// missing.
    pub async fn keys(&self, secrets: &dyn SecretReader) -> Result<Keys> {
        if let Some(keys) = &self.keys {
            return Ok(keys.clone());
        }
        let (access_key, secret_key) = self
            .endpoint
            .auth
            .read(secrets, "object storage keys")
            .await?;
        Ok(Keys {
            access_key: access_key.expose().to_string(),
            secret_key,
        })
    }

    /// The one-line form `s3,endpoint=…,accesskey=…,secretkey=…,bucketsuffix=…`; it holds the
    /// secret key, so it is a [`SecretString`]. [`Error::precondition`] when the keys are missing.
    pub async fn connection_string(&self, secrets: &dyn SecretReader) -> Result<SecretString> {
        let keys = self.keys(secrets).await?;
        Ok(SecretString::new(format!(
            "s3,endpoint={},accesskey={},secretkey={},bucketsuffix={}",
            self.endpoint(),
            keys.access_key,
            keys.secret_key.expose(),
            self.bucket
        )))
    }
}

#[async_trait]
impl Connection for CosConnection {
    const TYPE: &'static str = "cos";

    async fn from_spec(spec: &ConnectionSpec<'_>, secrets: &dyn SecretReader) -> Result<Self> {
        let (endpoint, bucket) = Endpoint::read(
            spec,
            secrets,
            ACCESS_KEY_KEY,
            SECRET_KEY_KEY,
            Some(BUCKET_KEYS),
        )
        .await?;
        Ok(CosConnection {
            endpoint,
            bucket: bucket.unwrap_or_default(),
            keys: None,
        })
    }

    fn to_spec(&self) -> Value {
        self.endpoint.to_spec(
            ACCESS_KEY_KEY,
            SECRET_KEY_KEY,
            Some((BUCKET_KEYS.0, &self.bucket)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::spec::NoSecrets;

    fn connection(tls: bool) -> CosConnection {
        CosConnection::new(
            "s3.local",
            9000,
            "reports",
            CredentialSecret {
                secret_name: "s3-keys".into(),
                first_field: "ak".into(),
                second_field: "sk".into(),
            },
            tls.then(|| TlsSecret {
                secret_name: "s3-ca".into(),
                cert_field: "ca.crt".into(),
            }),
        )
    }

    #[tokio::test]
    async fn endpoint_and_connection_string() {
        assert_eq!(connection(false).endpoint(), "http://s3.local:9000");
        let tls = connection(true).with_keys(Keys {
            access_key: "AK".into(),
            secret_key: SecretString::new("SK"),
        });
        assert_eq!(tls.endpoint(), "https://s3.local:9000");
        let line = tls.connection_string(&NoSecrets).await.unwrap();
        assert_eq!(
            line.expose(),
            "s3,endpoint=https://s3.local:9000,accesskey=AK,secretkey=SK,bucketsuffix=reports"
        );
        assert!(!format!("{tls:?} {line:?}").contains("SK"));
        let err = connection(false)
            .connection_string(&NoSecrets)
            .await
            .unwrap_err();
        assert!(
            !err.is_fatal() && err.to_string().contains("Secret s3-keys"),
            "{err}"
        );
    }

    #[test]
    fn to_spec_names_the_bucket() {
        let spec = connection(true).to_spec();
        assert_eq!(spec["bucketName"], "reports");
        assert_eq!(spec["authSecretSecretKeyField"], "sk");
        assert_eq!(spec["tlsSecretName"], "s3-ca");
    }
}
