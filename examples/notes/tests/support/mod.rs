//! windlass-x's real-server test harness, included rather than copied: PostgreSQL started
//! from the binaries `scripts/provision-datastores.sh` put in the cache, and test TLS
//! material from windlass-x's internal TLS context.

#![allow(dead_code, clippy::unwrap_used)]

#[path = "../../../../crates/windlass-x/tests/support/servers.rs"]
pub mod servers;

#[path = "../../../../crates/windlass-x/tests/support/pki.rs"]
pub mod pki;
