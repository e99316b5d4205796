//! Shared by the test binaries of windlass-x: real datastore servers, test TLS material, a
//! SigV4 signer for S3 requests and a test operator. Each binary uses a part of it.

#![allow(dead_code)]

pub mod pki;
pub mod probe;
pub mod servers;
pub mod sigv4;
