//! Redis connections: the same fields as Postgres (host, port, the Secret with the username
//! and password, optionally the CA certificate's Secret), handed to clients as a `redis://`
//! URL, or `rediss://` with TLS.
//!
//! The URL is `<scheme>://<user>:<password>@<host>:<port>`, with the username and password
//! percent-encoded: a password with `@`, `:` or `/` in it would otherwise change where the
//! client connects. A client verifies a `rediss://` server against
//! [`RedisConnection::tls_cert`].

use async_trait::async_trait;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use windlass::prelude::*;

use super::Connection;
use super::spec::{
    ConnectionSpec, CredentialSecret, Endpoint, SecretReader, SecretString, TlsSecret, host_port,
};

/// The spec keys naming the auth Secret's username and password fields.
const USERNAME_KEY: &str = "authSecretUsernameField";
const PASSWORD_KEY: &str = "authSecretPasswordField";

/// What must be escaped in a URL's userinfo: everything but RFC 3986's unreserved characters.
const USERINFO: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// How to reach one Redis instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConnection {
    endpoint: Endpoint,
    credentials: Option<(String, SecretString)>,
}

impl RedisConnection {
    /// A connection to `hostname:port` whose username and password are in `auth`, with TLS
    /// when `tls` names the CA certificate's Secret.
    pub fn new(
        hostname: impl Into<String>,
        port: u16,
        auth: CredentialSecret,
        tls: Option<TlsSecret>,
    ) -> Self {
        RedisConnection {
            endpoint: Endpoint::new(hostname.into(), port, auth, tls),
            credentials: None,
        }
    }

    /// The username and password, when the component that deployed Redis knows them.
    pub fn with_credentials(mut self, username: impl Into<String>, password: SecretString) -> Self {
        self.credentials = Some((username.into(), password));
        self
    }

    /// The PEM CA certificate, when the component that deployed Redis knows it. A config
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
    /// The Secret with the username and password.
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
    /// `rediss` with TLS, else `redis`.
    pub fn scheme(&self) -> &'static str {
        if self.tls_enabled() {
            "rediss"
        } else {
            "redis"
        }
    }

    /// The PEM CA certificate when TLS is on; [`Error::precondition`] when its Secret or field is
    /// missing.
    pub async fn tls_cert(&self, secrets: &dyn SecretReader) -> Result<Option<String>> {
        self.endpoint.tls.cert(secrets).await
    }

    /// `<scheme>://<user>:<password>@<host>:<port>`; [`Error::precondition`] naming the Secret or
    /// field when the credentials are missing.
    pub async fn url(&self, secrets: &dyn SecretReader) -> Result<SecretString> {
        let (username, password) = match &self.credentials {
            Some((username, password)) => (username.clone(), password.clone()),
            None => {
                let (username, password) = self
                    .endpoint
                    .auth
                    .read(secrets, "Redis credentials")
                    .await?;
                (username.expose().to_string(), password)
            }
        };
        Ok(SecretString::new(format!(
            "{}://{}:{}@{}",
            self.scheme(),
            utf8_percent_encode(&username, USERINFO),
            utf8_percent_encode(password.expose(), USERINFO),
            host_port(&self.endpoint.hostname, self.endpoint.port)
        )))
    }
}

#[async_trait]
impl Connection for RedisConnection {
    const TYPE: &'static str = "redis";

    async fn from_spec(spec: &ConnectionSpec<'_>, secrets: &dyn SecretReader) -> Result<Self> {
        let (endpoint, _) = Endpoint::read(spec, secrets, USERNAME_KEY, PASSWORD_KEY, None).await?;
        Ok(RedisConnection {
            endpoint,
            credentials: None,
        })
    }

    fn to_spec(&self) -> Value {
        self.endpoint.to_spec(USERNAME_KEY, PASSWORD_KEY, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::spec::NoSecrets;

    fn connection(host: &str, tls: bool) -> RedisConnection {
        RedisConnection::new(
            host,
            6379,
            CredentialSecret {
                secret_name: "cache-auth".into(),
                first_field: "user".into(),
                second_field: "pass".into(),
            },
            tls.then(|| TlsSecret {
                secret_name: "cache-ca".into(),
                cert_field: "ca.crt".into(),
            }),
        )
    }

    #[tokio::test]
    async fn the_url_escapes_credentials_and_picks_the_scheme() {
        let url = connection("cache", true)
            .with_credentials("app", SecretString::new("p@ss:w/rd"))
            .url(&NoSecrets)
            .await
            .unwrap();
        assert_eq!(url.expose(), "rediss://app:p%40ss%3Aw%2Frd@cache:6379");
        let url = connection("::1", false)
            .with_credentials("app", SecretString::new("pw"))
            .url(&NoSecrets)
            .await
            .unwrap();
        assert_eq!(url.expose(), "redis://app:pw@[::1]:6379");
    }

    #[tokio::test]
    async fn missing_credentials_are_not_yet() {
        let err = connection("cache", false)
            .url(&NoSecrets)
            .await
            .unwrap_err();
        assert!(!err.is_fatal(), "{err}");
        assert!(err.to_string().contains("Secret cache-auth"), "{err}");
    }
}
