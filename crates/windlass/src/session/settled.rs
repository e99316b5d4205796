//! The objects whose field set was last found to cover what windlass applies, by the
//! resourceVersion they were found at ([`Settled`]).
//!
//! A drift check that finds the applied hash unchanged walks the desired manifest against
//! windlass's `managedFields` entry of the live object (see [`crate::rollout::drift`]).
//! The answer depends on nothing but the desired manifest and the live object; with the
//! hash equal to the live object's annotation, the desired manifest is the one that hash
//! stands for, so the live object's resourceVersion decides it alone: any change to the
//! object, a field taken by another writer included, gives it a new one. A reconcile that
//! finds nothing to do (the periodic resync of every CR) would otherwise walk every field
//! of every object it renders, every time; it now asks this memo once per object.
//!
//! It lives with the session, which carries it into each reconcile, because the rollout
//! that asks it already depends on the session.
//!
//! The memo is the reconciler's, shared by its reconciles, and keeps 16 bytes an object: a
//! digest of the object's reference and the resourceVersion, which a Kubernetes API server
//! gives as an integer (a version that is not one is not remembered). It forgets
//! everything when it reaches [`LIMIT`] objects, so deleted objects cannot make it grow
//! without bound; each object then costs one walk again.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use parking_lot::Mutex;
use serde_json::Value;

use crate::object::{ManifestExt, ObjectRef};

/// How many objects the memo holds before it starts afresh: 4 MiB of entries at most.
const LIMIT: usize = 1 << 18;

/// The objects found in sync, each by the resourceVersion it was found in sync at (see the
/// module docs).
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// The digest of an object's reference → its resourceVersion when last found in sync.
    versions: Mutex<HashMap<u64, u64>>,
    /// Digests references for `versions`.
    keys: RandomState,
}

/// The memo and the object a drift check asks it about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memo<'a> {
    pub(crate) settled: &'a Settled,
    pub(crate) object: &'a ObjectRef,
}

impl Memo<'_> {
    /// Whether the object was found in sync at `live`'s resourceVersion.
    pub(crate) fn holds(&self, live: &Value) -> bool {
        let Some(version) = version_of(live) else {
            return false;
        };
        let key = self.settled.keys.hash_one(self.object);
        self.settled.versions.lock().get(&key) == Some(&version)
    }

    /// The object is in sync at `live`'s resourceVersion.
    pub(crate) fn record(&self, live: &Value) {
        let Some(version) = version_of(live) else {
            return;
        };
        let key = self.settled.keys.hash_one(self.object);
        let mut versions = self.settled.versions.lock();
        if versions.len() >= LIMIT && !versions.contains_key(&key) {
            versions.clear();
        }
        versions.insert(key, version);
    }
}

/// `live`'s resourceVersion, if it is an integer.
fn version_of(live: &Value) -> Option<u64> {
    live.resource_version()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(version: &str) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": version}})
    }

    #[test]
    fn an_object_holds_only_at_the_version_it_was_recorded_at() {
        let settled = Settled::default();
        let a = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let b = ObjectRef::new("v1", "ConfigMap", Some("ns"), "b");
        let memo = Memo {
            settled: &settled,
            object: &a,
        };
        assert!(!memo.holds(&at("7")), "nothing recorded yet");
        memo.record(&at("7"));
        assert!(memo.holds(&at("7")));
        assert!(!memo.holds(&at("8")), "a later version was not checked");
        let other = Memo {
            settled: &settled,
            object: &b,
        };
        assert!(!other.holds(&at("7")), "another object at the same version");
        memo.record(&at("8"));
        assert!(!memo.holds(&at("7")) && memo.holds(&at("8")));
    }

    #[test]
    fn versions_that_are_not_integers_are_never_remembered() {
        let settled = Settled::default();
        let a = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let memo = Memo {
            settled: &settled,
            object: &a,
        };
        memo.record(&at("abc"));
        assert!(!memo.holds(&at("abc")));
        memo.record(&json!({"metadata": {"name": "a"}}));
        assert!(!memo.holds(&json!({"metadata": {"name": "a"}})));
        assert!(settled.versions.lock().is_empty());
    }

    /// A reconcile that writes an object remembers it in sync at the version its write
    /// returned: the next reconcile, the first steady one, does not walk its fields.
    #[cfg(feature = "testing")]
    #[tokio::test]
    async fn an_object_written_by_a_reconcile_is_in_sync_at_the_version_written() {
        use crate::testing::{DummyComponent, DummyController, Harness, TEST_NAMESPACE};
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "{cr}-settings"}, "data": {"mode": "fast"}});
        let env = Harness::new(DummyController::new().component(
            DummyComponent::new("app").with_object("settings", config),
            &[],
        ))
        .await;
        let cr = env.apply_cr("a", json!({})).await;
        let settings = ObjectRef::new("v1", "ConfigMap", Some(TEST_NAMESPACE), "a-settings");
        let memo = Memo {
            settled: env.reconciler.settled(),
            object: &settings,
        };
        env.reconcile(&cr).await;
        let written = env.get(&settings).await.expect("the reconcile wrote it");
        assert!(memo.holds(&written), "{written}");
    }

    #[test]
    fn a_full_memo_starts_afresh_instead_of_growing() {
        let settled = Settled::default();
        settled
            .versions
            .lock()
            .extend((0..LIMIT as u64).map(|k| (k, 1)));
        let a = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let memo = Memo {
            settled: &settled,
            object: &a,
        };
        memo.record(&at("3"));
        assert_eq!(settled.versions.lock().len(), 1);
        assert!(memo.holds(&at("3")));
    }
}
