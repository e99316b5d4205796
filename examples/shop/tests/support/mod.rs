//! What the example's live tests share: the operator run as a separate process, the CRDs,
//! waiting with a deadline (`examples/support/operator.rs`, shared with the other examples).

#![allow(dead_code, clippy::unwrap_used)]

#[path = "../../../support/operator.rs"]
mod operator;

pub use operator::*;

/// The operator binary the tests run.
const BINARY: &str = env!("CARGO_BIN_EXE_shop-operator");
