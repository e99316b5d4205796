//! What the live test needs: the operator run as a separate process, the CRD, waiting with
//! a deadline (`examples/support/operator.rs`, shared with the other examples).

#![allow(dead_code, clippy::unwrap_used)]

#[path = "../../../support/operator.rs"]
mod operator;

pub use operator::*;
use windlass::cluster::LiveCluster;

/// The operator binary the test runs.
const BINARY: &str = env!("CARGO_BIN_EXE_notes-operator");

/// Install the Notes CRD and wait (up to 30 s) until the server serves the kind.
pub async fn install_crd(cluster: &LiveCluster) {
    install_crd_of::<notes_operator::Notes>(cluster).await;
}
