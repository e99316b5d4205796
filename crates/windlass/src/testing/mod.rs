//! Test helpers for operator authors, on the in-memory cluster.
//!
//! Behind the `testing` feature, off by default so operator binaries do not carry it;
//! enable it for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! windlass = { version = "0.1", features = ["testing"] }
//! ```
//!
//! - [`Harness`]: an in-memory cluster with the controller's CRD installed, a reconciler,
//!   the progress events, and shortcuts to apply CRs, reconcile them and read them back.
//! - [`FaultyCluster`]: wraps any cluster and makes chosen calls fail, always or a given
//!   number of times.
//! - [`DummyComponent`] and [`DummyController`]: components and controllers built from
//!   data, with switches to fail, panic or stay unverified, for testing rollout logic.
//! - [`Widget`]: a ready-made CR type for tests that need any CR; [`Gadget`], the same
//!   cluster-scoped.
//! - [`make_patch`]: a temporary-patch object.
//! - assertions on conditions and objects.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use serde_json::json;
//! use windlass::testing::{DummyComponent, DummyController, Harness, assert_condition};
//!
//! let controller = DummyController::new()
//!     .component(DummyComponent::new("db").with_configmap("db"), &[])
//!     .component(DummyComponent::new("web").with_configmap("web"), &["db"]);
//! let env = Harness::new(controller).await;
//! let cr = env.apply_cr("shop", json!({"version": "1.0"})).await;
//! let report = env.reconcile(&cr).await;
//! assert!(report.error.is_none());
//! assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
//! # });
//! ```

mod assertions;
mod dummy;
mod faulty;
mod harness;
mod kinds;

pub use assertions::assert_condition;
pub use dummy::{Behaviour, DummyComponent, DummyController, Hooks};
pub use faulty::{FaultyCluster, Op};
pub use harness::{EventLog, Harness};
pub use kinds::{
    Gadget, GadgetSpec, TEST_INSTANCE_NAME, TEST_NAMESPACE, Widget, WidgetSpec, cr_manifest,
    make_patch, patch_kind,
};
