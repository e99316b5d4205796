//! Postgres connections: host and port, the Secret with the username and
//! password, and optionally the Secret with the CA certificate for TLS.
//!
//! The CR section (`spec.datastores.postgres[.<name>].connection`):
//!
//! ```yaml
//! hostname: db.example.com          # or uriSecret + uriSecretHostnameField + uriSecretPortField
//! port: 5432
//! authSecretName: db-credentials
//! authSecretUsernameField: username
//! authSecretPasswordField: password
//! tlsSecretName: db-ca               # optional, with tlsSecretCertField
//! tlsSecretCertField: ca.crt
//! ```
//!
//! **SSL mode.** With TLS, windlass asks libpq for `verify-full`, not `require`: `require`
//! encrypts but accepts any server certificate, so anyone on the path could pose as the
//! database. A TLS connection here always comes with the CA certificate (the TLS Secret
//! holds it), so the client can verify it: the server's chain must lead to that CA and its
//! certificate must name the `hostname` the client dials. Without TLS the mode is
//! `disable`. A server whose certificate does not carry its hostname is therefore refused,
//! which is the point.
//!
//! **Using it.** A controller adds the database's component unless the CR names a database;
//! its application component asks the [`Datastores`](super::Datastores) registry for the
//! connection, whichever way it came:
//!
//! ```
//! use std::sync::Arc;
//! use windlass::prelude::*;
//! use windlass_x::datastore::{Datastores, postgres::PostgresConnection};
//! # #[derive(kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema)]
//! # #[kube(group = "example.com", version = "v1", kind = "App", namespaced)]
//! # struct AppSpec {}
//!
//! struct Web {
//!     datastores: Datastores<AppController>,
//! }
//!
//! #[async_trait]
//! impl Component<AppController> for Web {
//!     fn name(&self) -> &str {
//!         "web"
//!     }
//!     async fn render(&self, session: &Session<AppController>, out: &mut Resources) -> Result<()> {
//!         // The CR's spec.datastores.postgres.connection, or the deployed database's.
//!         let db: Arc<PostgresConnection> = self.datastores.connection(session, None).await?;
//!         let ca = db.tls_cert_path().unwrap_or_default();
//!         let env = db.env(&ca);
//!         // ... a Deployment whose container gets `env`, `db.tls_volume_mounts()` and
//!         // whose pod gets `db.tls_volumes()`.
//!         # let _ = (env, out);
//!         Ok(())
//!     }
//! }
//!
//! struct AppController {
//!     datastores: Datastores<AppController>,
//! }
//!
//! #[async_trait]
//! impl Controller for AppController {
//!     type Resource = App;
//!     type Config = NoConfig;
//!     type Status = Status;
//!     fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
//!         let mut graph = Components::new();
//!         // Deploys the database unless the CR names one (then: None).
//!         let db = self.datastores.add_component::<PostgresConnection>(session, &mut graph, None)?;
//!         let web = graph.add(Web { datastores: self.datastores.clone() })?;
//!         if let Some(db) = db {
//!             graph.depends_on_ready(web, db)?;
//!         }
//!         Ok(graph)
//!     }
//! }
//! ```

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, KeyToPath, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use serde_json::Value;
use windlass::prelude::*;

use super::Connection;
use super::spec::{
    ConnectionSpec, CredentialSecret, Endpoint, SecretReader, SecretString, TlsSecret,
};

/// The volume name [`PostgresConnection::tls_volumes`] and
/// [`PostgresConnection::tls_volume_mounts`] use by default.
pub const TLS_VOLUME_NAME: &str = "postgres-tls";
/// Where [`PostgresConnection::tls_volume_mounts`] mounts the CA certificate by default.
pub const TLS_MOUNT_PATH: &str = "/tls";
/// The file mode of the mounted CA certificate: read for the owner and group (octal 440).
pub const TLS_FILE_MODE: i32 = 0o440;

/// The spec keys naming the auth Secret's username and password fields.
const USERNAME_KEY: &str = "authSecretUsernameField";
const PASSWORD_KEY: &str = "authSecretPasswordField";

/// libpq's `sslmode`, as windlass chooses it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS; the server's certificate must chain to the CA and name the host.
    VerifyFull,
}

impl SslMode {
    /// The libpq spelling: `disable` or `verify-full`.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// A username and password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The username.
    pub username: String,
    /// The password.
    pub password: SecretString,
}

/// How to reach one Postgres instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresConnection {
    endpoint: Endpoint,
    credentials: Option<Credentials>,
}

impl PostgresConnection {
    /// A connection to `hostname:port` whose credentials are in `auth` (username first,
    /// password second), with TLS when `tls` names the CA certificate's Secret.
    pub fn new(
        hostname: impl Into<String>,
        port: u16,
        auth: CredentialSecret,
        tls: Option<TlsSecret>,
    ) -> Self {
        PostgresConnection {
            endpoint: Endpoint::new(hostname.into(), port, auth, tls),
            credentials: None,
        }
    }

    /// The credentials, when the component that deployed the database knows them (then the
    /// auth Secret is not read).
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The PEM CA certificate, when the component that deployed the database knows it. A
    /// config error when the connection has no TLS.
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
    /// `verify-full` with TLS, else `disable` (see the module docs for why not `require`).
    pub fn ssl_mode(&self) -> SslMode {
        if self.tls_enabled() {
            SslMode::VerifyFull
        } else {
            SslMode::Disable
        }
    }

    /// The username and password; [`Error::precondition`] naming the Secret or field that is
    /// missing.
    pub async fn credentials(&self, secrets: &dyn SecretReader) -> Result<Credentials> {
        if let Some(credentials) = &self.credentials {
            return Ok(credentials.clone());
        }
        let (username, password) = self
            .endpoint
            .auth
            .read(secrets, "Postgres credentials")
            .await?;
        Ok(Credentials {
            username: username.expose().to_string(),
            password,
        })
    }

    /// The PEM CA certificate when TLS is on; [`Error::precondition`] when its Secret or field is
    /// missing.
    pub async fn tls_cert(&self, secrets: &dyn SecretReader) -> Result<Option<String>> {
        self.endpoint.tls.cert(secrets).await
    }

    /// Everything a client needs, credentials and CA certificate read.
    pub async fn params(&self, secrets: &dyn SecretReader) -> Result<PostgresParams> {
        let credentials = self.credentials(secrets).await?;
        Ok(PostgresParams {
            host: self.endpoint.hostname.clone(),
            port: self.endpoint.port,
            user: credentials.username,
            password: credentials.password,
            ssl_mode: self.ssl_mode(),
            ca_cert: self.tls_cert(secrets).await?,
        })
    }

    /// The libpq environment for a container: `PGHOST`, `PGPORT`, `PGSSLMODE`, `PGUSER` and
    /// `PGPASSWORD` (the last two by reference to the auth Secret, so the password never enters
    /// a manifest) and, with TLS, `PGSSLROOTCERT=<ca_path>` (where
    /// [`PostgresConnection::tls_volume_mounts`] puts the certificate:
    /// `/tls/<cert field>` by default).
    pub fn env(&self, ca_path: &str) -> Vec<EnvVar> {
        let plain = |name: &str, value: String| EnvVar {
            name: name.to_string(),
            value: Some(value),
            value_from: None,
        };
        let from_secret = |name: &str, key: &str| EnvVar {
            name: name.to_string(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: self.endpoint.auth.secret_name.clone(),
                    key: key.to_string(),
                    optional: None,
                }),
                ..Default::default()
            }),
        };
        let mut env = vec![
            plain("PGHOST", self.endpoint.hostname.clone()),
            plain("PGPORT", self.endpoint.port.to_string()),
            from_secret("PGUSER", &self.endpoint.auth.first_field),
            from_secret("PGPASSWORD", &self.endpoint.auth.second_field),
            plain("PGSSLMODE", self.ssl_mode().as_str().to_string()),
        ];
        if self.tls_enabled() {
            env.push(plain("PGSSLROOTCERT", ca_path.to_string()));
        }
        env
    }

    /// Where [`PostgresConnection::tls_volume_mounts`] puts the CA certificate by default,
    /// `/tls/<cert field>`, for `PGSSLROOTCERT` or `sslrootcert` (`None` without TLS).
    pub fn tls_cert_path(&self) -> Option<String> {
        self.tls_secret()
            .map(|tls| format!("{TLS_MOUNT_PATH}/{}", tls.cert_field))
    }

    /// The pod volume with the CA certificate (empty without TLS): the TLS Secret's cert field
    /// as the file of the same name, mode 0440, in the volume [`TLS_VOLUME_NAME`].
    pub fn tls_volumes(&self) -> Vec<Volume> {
        self.tls_volumes_as(TLS_VOLUME_NAME, None)
    }

    /// [`PostgresConnection::tls_volumes`] with another volume name and, optionally, another
    /// file name for the certificate.
    pub fn tls_volumes_as(&self, volume_name: &str, file_name: Option<&str>) -> Vec<Volume> {
        let Some(tls) = self.tls_secret() else {
            return Vec::new();
        };
        vec![Volume {
            name: volume_name.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(tls.secret_name.clone()),
                default_mode: Some(TLS_FILE_MODE),
                items: Some(vec![KeyToPath {
                    key: tls.cert_field.clone(),
                    path: file_name.unwrap_or(&tls.cert_field).to_string(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }]
    }

    /// The container's mount of [`PostgresConnection::tls_volumes`] at [`TLS_MOUNT_PATH`]
    /// (empty without TLS).
    pub fn tls_volume_mounts(&self) -> Vec<VolumeMount> {
        self.tls_volume_mounts_as(TLS_VOLUME_NAME, TLS_MOUNT_PATH)
    }

    /// [`PostgresConnection::tls_volume_mounts`] with another volume name and mount path.
    pub fn tls_volume_mounts_as(&self, volume_name: &str, mount_path: &str) -> Vec<VolumeMount> {
        if !self.tls_enabled() {
            return Vec::new();
        }
        vec![VolumeMount {
            name: volume_name.to_string(),
            mount_path: mount_path.to_string(),
            read_only: Some(true),
            ..Default::default()
        }]
    }
}

#[async_trait]
impl Connection for PostgresConnection {
    const TYPE: &'static str = "postgres";

    async fn from_spec(spec: &ConnectionSpec<'_>, secrets: &dyn SecretReader) -> Result<Self> {
        let (endpoint, _) = Endpoint::read(spec, secrets, USERNAME_KEY, PASSWORD_KEY, None).await?;
        Ok(PostgresConnection {
            endpoint,
            credentials: None,
        })
    }

    fn to_spec(&self) -> Value {
        self.endpoint.to_spec(USERNAME_KEY, PASSWORD_KEY, None)
    }
}

/// A Postgres connection with its secrets read: what a client needs. Its `Debug` redacts the
/// password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresParams {
    /// The hostname.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The username.
    pub user: String,
    /// The password.
    pub password: SecretString,
    /// The SSL mode.
    pub ssl_mode: SslMode,
    /// The PEM CA certificate, with TLS.
    pub ca_cert: Option<String>,
}

impl PostgresParams {
    /// A libpq connection string (`host=… port=… user=… password=… sslmode=…`), with
    /// `sslrootcert=<ca_path>` when TLS is on and a path is given. It holds the password, so
    /// it is a [`SecretString`].
    pub fn conninfo(&self, dbname: Option<&str>, ca_path: Option<&str>) -> SecretString {
        let port = self.port.to_string();
        let mut parts = vec![
            ("host", self.host.as_str()),
            ("port", port.as_str()),
            ("user", self.user.as_str()),
            ("password", self.password.expose()),
            ("sslmode", self.ssl_mode.as_str()),
        ];
        if let Some(dbname) = dbname {
            parts.push(("dbname", dbname));
        }
        if let (SslMode::VerifyFull, Some(path)) = (self.ssl_mode, ca_path) {
            parts.push(("sslrootcert", path));
        }
        let text = parts
            .iter()
            .map(|(key, value)| format!("{key}={}", conninfo_value(value)))
            .collect::<Vec<_>>()
            .join(" ");
        SecretString::new(text)
    }
}

/// A value as libpq's key=value syntax wants it: quoted when empty or holding spaces, quotes
/// or backslashes, which are escaped.
fn conninfo_value(value: &str) -> String {
    if !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\')
    {
        return value.to_string();
    }
    let escaped = value.replace('\\', "\\\\").replace('\'', "\\'");
    format!("'{escaped}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(tls: bool) -> PostgresConnection {
        PostgresConnection::new(
            "db.example",
            5432,
            CredentialSecret {
                secret_name: "db-auth".into(),
                first_field: "user".into(),
                second_field: "pass".into(),
            },
            tls.then(|| TlsSecret {
                secret_name: "db-ca".into(),
                cert_field: "ca.crt".into(),
            }),
        )
    }

    #[test]
    fn tls_decides_the_ssl_mode_volumes_and_mounts() {
        let plain = connection(false);
        assert_eq!(plain.ssl_mode(), SslMode::Disable);
        assert!(plain.tls_volumes().is_empty() && plain.tls_volume_mounts().is_empty());
        assert!(matches!(
            plain.clone().with_tls_cert("pem"),
            Err(Error::Config(_))
        ));

        let tls = connection(true);
        assert_eq!(tls.ssl_mode().as_str(), "verify-full");
        let volume = serde_json::to_value(&tls.tls_volumes()[0]).unwrap();
        assert_eq!(
            volume,
            serde_json::json!({"name": "postgres-tls", "secret": {
                "secretName": "db-ca", "defaultMode": 288,
                "items": [{"key": "ca.crt", "path": "ca.crt"}]}})
        );
        assert_eq!(tls.tls_cert_path().as_deref(), Some("/tls/ca.crt"));
        assert_eq!(plain.tls_cert_path(), None);
        let mount = &tls.tls_volume_mounts()[0];
        assert_eq!(
            (mount.name.as_str(), mount.mount_path.as_str()),
            ("postgres-tls", "/tls")
        );
        let renamed = tls.tls_volumes_as("ca", Some("root.pem"));
        let items = renamed[0].secret.as_ref().unwrap().items.as_ref().unwrap();
        assert_eq!(
            (renamed[0].name.as_str(), items[0].path.as_str()),
            ("ca", "root.pem")
        );
    }

    #[test]
    fn env_takes_credentials_from_the_secret_by_reference() {
        let env = connection(true).env("/tls/ca.crt");
        let find = |n: &str| env.iter().find(|e| e.name == n).unwrap().clone();
        assert_eq!(find("PGHOST").value.as_deref(), Some("db.example"));
        assert_eq!(find("PGSSLMODE").value.as_deref(), Some("verify-full"));
        assert_eq!(find("PGSSLROOTCERT").value.as_deref(), Some("/tls/ca.crt"));
        let password = find("PGPASSWORD");
        assert_eq!(password.value, None);
        let key = password.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!((key.name.as_str(), key.key.as_str()), ("db-auth", "pass"));
        assert!(
            connection(false)
                .env("x")
                .iter()
                .all(|e| e.name != "PGSSLROOTCERT")
        );
    }

    #[test]
    fn conninfo_quotes_and_redacts() {
        let params = PostgresParams {
            host: "db".into(),
            port: 5432,
            user: "app".into(),
            password: SecretString::new("it's a \\secret"),
            ssl_mode: SslMode::VerifyFull,
            ca_cert: Some("pem".into()),
        };
        let info = params.conninfo(Some("app"), Some("/tls/ca.crt"));
        assert_eq!(
            info.expose(),
            "host=db port=5432 user=app password='it\\'s a \\\\secret' sslmode=verify-full \
             dbname=app sslrootcert=/tls/ca.crt"
        );
        let printed = format!("{params:?} {info:?}");
        assert!(!printed.contains("secret"), "{printed}");
    }

    #[test]
    fn to_spec_reads_back() {
        let spec = connection(true).to_spec();
        assert_eq!(spec["authSecretPasswordField"], "pass");
        assert_eq!(spec["tlsSecretCertField"], "ca.crt");
        assert!(connection(false).to_spec().get("tlsSecretName").is_none());
    }
}
