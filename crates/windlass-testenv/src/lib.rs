//! A real Kubernetes control plane on loopback for integration tests — the envtest of the Rust
//! world, with the controllers envtest lacks.
//!
//! [`TestEnv`] starts etcd, kube-apiserver and kube-controller-manager on free loopback ports
//! (TLS, token authentication, RBAC — as in a real cluster), plus a [`NodeSimulator`] that
//! registers Nodes, schedules Pods onto them and drives their status, so Deployments,
//! StatefulSets, DaemonSets and Jobs really become ready or complete, garbage collection runs
//! and namespaces can be deleted.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//! use windlass_testenv::TestEnv;
//!
//! #[tokio::test]
//! async fn creates_a_config_map() -> anyhow::Result<()> {
//!     let env = TestEnv::shared().await?;          // one control plane per test binary
//!     let ns = env.namespace("creates-cm").await?;  // a fresh namespace, deleted on drop
//!     let client = env.client()?;                   // a client for this test's runtime
//!     let cms: Api<ConfigMap> = ns.api(client);
//!     let mut cm = ConfigMap::default();
//!     cm.metadata.name = Some("demo".into());
//!     cms.create(&PostParams::default(), &cm).await?;
//!     Ok(())
//! }
//! ```
//!
//! # Binaries
//!
//! `scripts/provision-control-plane.sh` builds a current Kubernetes
//! ([`PROVISIONED_KUBERNETES_VERSION`], or the release `WINDLASS_K8S_VERSION` names) with the
//! Go toolchain from the Go module proxy once, and caches it in
//! `~/.cache/windlass/k8s-<version>/`; `WINDLASS_K8S_ASSETS` or `KUBEBUILDER_ASSETS` may point
//! at other binaries (see [`Assets::locate`]). Missing binaries are an error that names the
//! script — a test never silently skips.
//!
//! # Lifetimes and clean-up
//!
//! Every process is started with a parent-death signal (Linux), so it dies with the test
//! process — on drop, on panic, on exit and on SIGKILL; a small watchdog removes the
//! environment's temporary directory in the cases where no destructor runs. See the `process`
//! module for why this is hand-written. A start that fails cleans up too; set
//! [`KEEP_ENV`] (`WINDLASS_TESTENV_KEEP=1`) to keep its directory and logs for inspection.
//!
//! # When something breaks
//!
//! An environment notices within a second when one of its processes exits or a node simulator
//! task stops; from then on its operations fail at once with [`Error::Broken`] (see
//! [`TestEnv::check_health`]) rather than letting every later test time out.
//!
//! # Limits worth knowing
//!
//! * kube-controller-manager's garbage collector re-reads discovery every 30 s: dependents of
//!   objects whose kind was registered (CRD) after it started may take that long to be
//!   collected. Built-in kinds are collected within a second or two.
//! * The node simulator is not a kubelet: no containers run, no probes, no resource fit (see
//!   [`simulator`] for its rules and the annotations that steer it).

mod assets;
mod control_plane;
mod env;
mod error;
mod process;
pub mod proxy;
pub mod simulator;
mod wait;

pub use assets::{
    ASSETS_ENV, Assets, CACHE_DIR_ENV, KUBEBUILDER_ASSETS_ENV, KUBERNETES_VERSION_ENV,
    PROVISIONED_KUBERNETES_VERSION, default_cache_dir, provisioned_version,
};
pub use control_plane::{ControlPlaneProcess, ProcessInfo};

/// Environment variable: `1` (or `true`) keeps the directory of a control plane that failed to
/// start — logs, certificates, etcd data — and prints where it is, instead of removing it.
pub const KEEP_ENV: &str = "WINDLASS_TESTENV_KEEP";
pub use env::{
    ENFORCED_POD_SECURITY, POD_SECURITY_ENFORCE_LABEL, TEST_NAMESPACE_LABEL, TestEnv,
    TestEnvBuilder, TestNamespace, restricted_container_security, restricted_pod_security,
};
pub use error::{Error, Result};
pub use simulator::{
    FAIL_ANNOTATION, KEEP_RUNNING_ANNOTATION, NodeSimulator, READY_AFTER_ANNOTATION,
    SIMULATED_NODE_LABEL, SimulatorConfig,
};
pub use wait::{EVENTUALLY, eventually, eventually_within, quiet_window, wait_for};
