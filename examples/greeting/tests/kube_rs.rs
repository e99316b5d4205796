//! The Greeting contract against the operator hand-written with kube-rs
//! (`fixtures/kube_rs.rs`), run in-process on a real control plane.

#[macro_use]
mod support;

#[path = "fixtures/kube_rs.rs"]
mod kube_rs_operator;

use kube::CustomResourceExt as _;
use windlass_testenv::TestEnv;

/// Runs the kube-rs operator for `namespace` until the test ends.
fn start(_env: &'static TestEnv, client: kube::Client, namespace: &str) -> support::Task {
    let namespace = namespace.to_string();
    support::Task::spawn(async move { kube_rs_operator::run(client, &namespace).await })
}

behaviour_tests!(kube_rs_operator::Greeting::crd(), start);
