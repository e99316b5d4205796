//! Sharded replicas: the CRs split into `sharding.shards` shards, each held by one replica
//! at a time, each replica watching, caching and reconciling only the shards it holds.
//!
//! So far the assignment (`assign`): which replica should hold which shard.

pub mod assign;
