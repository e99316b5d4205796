//! `sharding.*`: replicas that share the CRs, each CR in one of a fixed number of shards.
//!
//! This file holds the key and the arithmetic every part of windlass agrees on (the shard
//! of a CR, the label that carries it, the selectors that pick a shard, the names of the
//! Leases); the runtime's `shard` module runs the replicas, see there for the design.
//!
//! # The shard of a CR
//!
//! A CR's shard is its uid hashed with 64-bit FNV-1a, the hash space cut into `shards`
//! equal ranges: shard `k` holds the hashes in `[⌈k·2⁶⁴/S⌉, ⌈(k+1)·2⁶⁴/S⌉)`. It is the
//! hash and the range arithmetic of the API server's shard selector (KEP-5866,
//! `shardRange(object.metadata.uid, start, end)`, alpha in Kubernetes 1.37 behind the
//! `ShardedListAndWatch` gate), so the server can pick a shard's CRs by itself where it
//! offers that; everywhere else the label [`SHARD`] carries the shard. The uid, not the
//! name: a CR deleted and created again under its name is a new CR, and the uid is known
//! to every replica without agreeing on anything.

use serde::{Deserialize, Serialize};

pub use crate::annotations::SHARD;

/// The most shards a configuration may ask for: each is a Lease renewed by its holder
/// and a watch per kind on the replica holding it, so thousands would cost more in
/// requests than they save in memory.
pub const MAX_SHARDS: u32 = 1024;

/// `sharding.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ShardingConfig {
    /// Split the CRs into this many shards, held by the replicas with one Lease each: each
    /// replica watches, caches and reconciles only the CRs of the shards it holds. `0`: off,
    /// every replica is a whole operator (and `leader-election.*` picks which one
    /// reconciles). On, it takes the place of leader election and uses its
    /// `id`, `namespace`, `identity`, `lease-duration` and `retry-period`. A few times the
    /// most replicas you run (16 for up to four replicas) spreads the CRs evenly; the
    /// number cannot change while replicas run.
    pub shards: u32,
    /// Have the API server select each shard's CRs (`shardSelector`, Kubernetes 1.37 with
    /// the `ShardedListAndWatch` feature gate) when it honours the selector, which the
    /// operator checks once at start; otherwise, and when off, the CRs are selected by their
    /// `windlass.dev/shard` label, which the replica holding a new CR's shard puts on it
    /// first.
    pub server_side_selector: bool,
}

impl Default for ShardingConfig {
    fn default() -> Self {
        ShardingConfig {
            shards: 0,
            server_side_selector: true,
        }
    }
}

impl ShardingConfig {
    /// Whether the CRs are sharded.
    pub fn enabled(&self) -> bool {
        self.shards > 0
    }

    /// The shard of the CR whose uid is `uid`; `None` when sharding is off.
    ///
    /// ```
    /// use windlass::config::ShardingConfig;
    /// let sharding = ShardingConfig { shards: 4, ..ShardingConfig::default() };
    /// let shard = sharding.shard_of("b2814afa-d280-41f7-9fb4-9a7e95767dab").unwrap();
    /// assert!(shard < 4);
    /// assert_eq!(ShardingConfig::default().shard_of("any"), None);
    /// ```
    pub fn shard_of(&self, uid: &str) -> Option<u32> {
        self.enabled()
            .then(|| shard_of_hash(fnv1a64(uid), self.shards))
    }

    /// Check what serde cannot; each problem starts with its key.
    pub(super) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.shards > MAX_SHARDS {
            problems.push(format!(
                "sharding.shards: {} is more than {MAX_SHARDS}; a few times the number of \
                 replicas is enough",
                self.shards
            ));
        }
        problems
    }
}

/// 64-bit FNV-1a of `text`'s bytes: the API server's hash of a shard selector's field.
pub fn fnv1a64(text: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    text.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The shard of `hash` among `shards` (at least one) equal ranges of the hash space.
pub fn shard_of_hash(hash: u64, shards: u32) -> u32 {
    let shards = u128::from(shards.max(1));
    // `hash · shards < 2⁶⁴ · shards`, so the quotient is below `shards`, a u32.
    u32::try_from((u128::from(hash) * shards) >> 64).unwrap_or(u32::MAX)
}

/// The hashes of shard `k` among `shards`: `[start, end)`, `end` at most 2⁶⁴.
pub fn shard_range(k: u32, shards: u32) -> (u128, u128) {
    let shards = u128::from(shards.max(1));
    let bound = |k: u128| (k << 64).div_ceil(shards);
    (bound(u128::from(k)), bound(u128::from(k) + 1))
}

/// The API server's shard selector of shard `k` among `shards` (KEP-5866): the CRs whose
/// uid hashes into the shard's range.
///
/// ```
/// use windlass::config::sharding::server_selector;
/// assert_eq!(
///     server_selector(1, 2),
///     "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
/// );
/// ```
pub fn server_selector(k: u32, shards: u32) -> String {
    let (start, end) = shard_range(k, shards);
    // The server wants 16 hex digits, and 2⁶⁴ as the one 17-digit end.
    format!("shardRange(object.metadata.uid, '0x{start:016x}', '0x{end:016x}')")
}

/// The label selector of shard `k`'s objects.
pub fn label_selector(k: u32) -> String {
    format!("{SHARD}={k}")
}

/// The name of the Lease that shard `k` is held by, for the operator whose
/// `leader-election.id` is `id`.
pub fn shard_lease_name(id: &str, k: u32) -> String {
    format!("{id}-shard-{k}")
}

/// The name of the Lease whose annotation lists the replicas of the operator whose
/// `leader-election.id` is `id`.
pub fn members_lease_name(id: &str) -> String {
    format!("{id}-members")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv1a64_is_the_reference_hash() {
        // The published FNV-1a test vectors, and a uid hashed by the API server: it put
        // this Thing in the first half of the space (its hash is below 2⁶³).
        assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64("foobar"), 0x8594_4171_f739_67e8);
        assert!(fnv1a64("b2814afa-d280-41f7-9fb4-9a7e95767dab") < 1 << 63);
    }

    #[test]
    fn selectors_and_names() {
        assert_eq!(
            server_selector(0, 4),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000')"
        );
        assert_eq!(
            server_selector(2, 3),
            "shardRange(object.metadata.uid, '0xaaaaaaaaaaaaaaab', '0x10000000000000000')"
        );
        assert_eq!(label_selector(3), "windlass.dev/shard=3");
        assert_eq!(shard_lease_name("op", 3), "op-shard-3");
        assert_eq!(members_lease_name("op"), "op-members");
        let off = ShardingConfig::default();
        assert!(!off.enabled() && off.problems().is_empty());
        let many = ShardingConfig {
            shards: MAX_SHARDS + 1,
            ..off
        };
        assert!(many.problems()[0].starts_with("sharding.shards: "));
    }

    proptest! {
        /// A hash is in shard k exactly when it is in shard k's range, the ranges tile the
        /// whole space without gaps, and the shards are within one hash of equal.
        #[test]
        fn the_ranges_are_the_shards(hash in any::<u64>(), shards in 1u32..=MAX_SHARDS) {
            let k = shard_of_hash(hash, shards);
            prop_assert!(k < shards);
            let (start, end) = shard_range(k, shards);
            prop_assert!(start <= u128::from(hash) && u128::from(hash) < end);
            prop_assert_eq!(shard_range(0, shards).0, 0);
            prop_assert_eq!(shard_range(shards - 1, shards).1, 1u128 << 64);
            if k + 1 < shards {
                prop_assert_eq!(shard_range(k + 1, shards).0, end);
            }
            let width = end - start;
            let even = (1u128 << 64) / u128::from(shards);
            prop_assert!(width == even || width == even + 1);
        }
    }
}
