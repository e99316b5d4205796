//! The guide in `docs/`, compiled: every Rust code block of every chapter is a doctest of
//! one of these modules, so `cargo test -p windlass --doc` builds and runs the guide's
//! code as it builds and runs the crate's own examples. A chapter whose code no longer
//! compiles, or whose assertions no longer hold, fails the test suite instead of rotting.
//!
//! Only for doctests: nothing here is part of the crate's API.

#[doc = include_str!("../../../docs/README.md")]
mod contents {}

#[doc = include_str!("../../../docs/01-first-operator.md")]
mod first_operator {}

#[doc = include_str!("../../../docs/02-dag.md")]
mod dag {}

#[doc = include_str!("../../../docs/03-status.md")]
mod status {}

#[doc = include_str!("../../../docs/04-dry-run.md")]
mod dry_run {}

#[doc = include_str!("../../../docs/05-testing.md")]
mod testing {}

#[doc = include_str!("../../../docs/06-running.md")]
mod running {}

#[doc = include_str!("../../../docs/07-from-oper8.md")]
mod from_oper8 {}

// Chapter 08 (datastores and TLS) is windlass-x's: it is compiled as that crate's doctests,
// so windlass needs no dev-dependency on the crate that depends on it.

#[doc = include_str!("../../../docs/09-versions.md")]
mod versions {}
