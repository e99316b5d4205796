//! The minimal windlass example operator (issue 9): a `Greeting` custom resource owning three
//! ConfigMaps applied in order.
//!
//! The windlass version lives here; `tests/fixtures/kube_rs.rs` is the same operator written by
//! hand with kube-rs, and `tests/support/behaviour.rs` the behaviour both are held to on a real
//! control plane.
