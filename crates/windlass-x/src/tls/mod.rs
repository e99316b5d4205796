//! TLS material for the servers an operator deploys: keys and certificates from a CA the
//! operator keeps, behind a trait so another source can be plugged in.
//!
//! - [`pki`]: the primitives — keys (ECDSA P-256 by default, RSA-2048 with `tls-rsa`), a
//!   CA, server and intermediate certificates, PEM in and out, verification;
//! - [`TlsContext`] and the [`Tls`] handle: what a controller asks of a TLS source;
//! - [`TlsRegistry`]: which context `tls.type` in the backend config selects;
//! - [`InternalTls`] (`tls.type: internal`): a per-CR CA in a Secret and a Secret per
//!   server pair, reused across reconciles and operator restarts, so a steady-state
//!   reconcile writes nothing.
//!
//! The controller owns a registry; [`Controller::components`] makes the reconcile's
//! context, adds the server components and requests their pairs; a component reads its pair
//! or the CA while it renders, or mounts the Secret the context keeps the pair in.
//!
//! [`Controller::components`]: windlass::controller::Controller::components
//!
//! ```
//! use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
//! use k8s_openapi::api::core::v1::{
//!     ConfigMap, Container, PodSpec, SecretVolumeSource, Volume, VolumeMount,
//! };
//! use serde::{Deserialize, Serialize};
//! use windlass::prelude::*;
//! use windlass_x::tls::{CertRequest, Tls, TlsConfig, TlsRegistry};
//! # #[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, schemars::JsonSchema)]
//! # #[kube(group = "example.com", version = "v1", kind = "Shop", namespaced, status = "Status")]
//! # pub struct ShopSpec {}
//!
//! /// The backend config: the `tls` section selects the context.
//! #[derive(Serialize, Deserialize, schemars::JsonSchema)]
//! struct ShopConfig {
//!     tls: TlsConfig,
//! }
//!
//! impl Default for ShopConfig {
//!     fn default() -> Self {
//!         ShopConfig { tls: TlsConfig::internal() }
//!     }
//! }
//!
//! struct ShopController {
//!     tls: TlsRegistry<Self>,
//! }
//!
//! #[async_trait]
//! impl Controller for ShopController {
//!     type Resource = Shop;
//!     type Config = ShopConfig;
//!     type Status = Status;
//!
//!     fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
//!         let mut graph = Components::new();
//!         // Adds the `internal-tls` component, which owns the CA and the pairs.
//!         let tls = self.tls.context(session, &mut graph)?;
//!         let db = graph.add(Database { tls: tls.clone() })?;
//!         let host = format!("{}.{}.svc", session.scoped_name("db"), session.namespace());
//!         // The database now waits for the CA component.
//!         tls.request(&mut graph, db, None, CertRequest::new().dns_names([host]))?;
//!         Ok(graph)
//!     }
//! }
//!
//! struct Database {
//!     tls: Tls<ShopController>,
//! }
//!
//! #[async_trait]
//! impl Component<ShopController> for Database {
//!     fn name(&self) -> &str {
//!         "db"
//!     }
//!
//!     async fn render(&self, session: &Session<ShopController>, out: &mut Resources) -> Result<()> {
//!         // Pods mount the Secret the context keeps the pair in ...
//!         let secret = self.tls.pair_secret(session, self.name(), None)
//!             .ok_or_else(|| Error::config("no TLS pair was requested for db"))?;
//!         out.add("deployment", &Deployment {
//!             metadata: session.meta(Ref::<Deployment>::new("db")),
//!             spec: DeploymentSpec {
//!                 selector: out.selector(),
//!                 template: out.pod_template(PodSpec {
//!                     containers: vec![Container {
//!                         name: "postgres".into(),
//!                         volume_mounts: Some(vec![VolumeMount {
//!                             name: "tls".into(),
//!                             mount_path: "/tls".into(),
//!                             ..Default::default()
//!                         }]),
//!                         ..Default::default()
//!                     }],
//!                     volumes: Some(vec![Volume {
//!                         name: "tls".into(),
//!                         secret: Some(SecretVolumeSource {
//!                             secret_name: Some(secret.name),
//!                             ..Default::default()
//!                         }),
//!                         ..Default::default()
//!                     }]),
//!                     ..Default::default()
//!                 }),
//!                 ..Default::default()
//!             },
//!             ..Default::default()
//!         })?;
//!         // ... and clients get the CA certificate (never the key) in PEM.
//!         let ca = self.tls.ca_pem(session).await?;
//!         out.add("client-ca", &ConfigMap {
//!             metadata: session.meta(Ref::<ConfigMap>::new("db-ca")),
//!             data: Some([("ca.crt".to_string(), ca)].into()),
//!             ..Default::default()
//!         })?;
//!         // A component that needs the PEM itself: `self.tls.server_pair(session, "db", None)`.
//!         Ok(())
//!     }
//! }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use serde_json::json;
//! use windlass::object::ObjectRef;
//! use windlass::testing::Harness;
//!
//! let env = Harness::dry_run(ShopController { tls: TlsRegistry::new() }).await;
//! let cr = env.apply_cr("shop", json!({})).await;
//! env.reconcile(&cr).await;
//! let secret = |name: &str| ObjectRef::new("v1", "Secret", Some("test"), name);
//! let ca = env.get(&secret("shop-infra-tls-ca")).await.expect("the CA Secret");
//! let pair = env.get(&secret("shop-db-tls")).await.expect("the pair Secret");
//! assert_eq!(pair["type"], "kubernetes.io/tls");
//!
//! // Nothing changed, nothing is written: the same CA and pair stay.
//! env.log.clear();
//! env.reconcile(&cr).await;
//! assert!(env.log.applied().is_empty());
//! assert_eq!(env.get(&secret("shop-infra-tls-ca")).await.unwrap()["data"], ca["data"]);
//! assert_eq!(env.get(&secret("shop-db-tls")).await.unwrap()["data"], pair["data"]);
//! # });
//! ```

pub mod config;
pub mod context;
pub mod internal;
pub mod pki;
pub mod registry;

pub use config::TlsConfig;
pub use context::{PairKey, PairSecret, Tls, TlsContext};
pub use internal::InternalTls;
pub use pki::{
    CertRequest, CertificateAuthority, KeyAlgorithm, KeyCertPair, PrivateKey, TlsError,
    certificate_public_key_pem,
};
pub use registry::{TlsFactory, TlsRegistry};
