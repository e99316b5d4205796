//! The objects last found to be as windlass would apply them, each by the resourceVersion
//! it was found at and the fingerprint of the manifest it was checked against ([`Settled`]).
//!
//! A drift check compares the applied hash of the desired manifest with the live object's
//! annotation, then walks the desired manifest against windlass's `managedFields` entry of
//! the live object (see [`crate::rollout::drift`]). Both answers depend on nothing but the
//! desired manifest and the live object, and a Kubernetes API server gives an object a new
//! resourceVersion for any change to it, a field taken by another writer included. So
//! once an object was found in sync at a version against a manifest, the same manifest
//! over the same version is in sync: the check needs neither the hash (a SHA-256 of the
//! whole manifest) nor the walk. The manifest is told apart by a keyed fingerprint
//! ([`crate::values::Fingerprint`]), which costs a fraction of the hash. A reconcile that
//! finds nothing to do (the periodic resync of every CR) would otherwise hash and walk
//! every object it renders, every time; it now fingerprints each and asks this memo once.
//!
//! It lives with the session, which carries it into each reconcile, because the rollout
//! that asks it already depends on the session.
//!
//! A reconcile that finds an object unchanged need not even read it: it asks the cluster
//! only for the version it holds the object at ([`crate::cluster::Cluster::own_version`]),
//! which a watch cache answers without parsing its copy, and the memo whether the object
//! was in sync at that version, with the uid the CR's inventory records for it. The uid is
//! part of what is remembered so that a yes also vouches for the inventory, which the
//! reconcile then leaves as it is: an inventory read back from a status write that failed
//! may name an object's earlier incarnation.
//!
//! The memo is the reconciler's, shared by its reconciles, and keeps 16 bytes an object: a
//! digest of the object's reference, and one of the resourceVersion (which a Kubernetes API
//! server gives as an integer; a version that is not one is not remembered) with the uid
//! and the manifest's fingerprint. The second is what an answer rests on: the fingerprint
//! covers the manifest's kind and name, and the version is that of one write, so two
//! objects whose references happened to share a digest would still not share it. The reference's digest
//! can therefore be a fast one (foldhash), where the second is keyed SipHash. It forgets
//! everything when it reaches [`LIMIT`] objects, so deleted objects cannot make it grow
//! without bound; each object then costs one full check again.

use std::hash::{BuildHasher, RandomState};

use parking_lot::Mutex;
use serde_json::Value;

use crate::object::{ManifestExt, ObjectRef};
use crate::values::Fingerprints;

/// How many objects the memo holds before it starts afresh: 4 MiB of entries at most.
const LIMIT: usize = 1 << 18;

/// The objects found in sync, each by the resourceVersion and the manifest it was found in
/// sync at (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// The digest of an object's reference → the digest of its resourceVersion and of the
    /// desired manifest's fingerprint when last found in sync. The keys are digests
    /// already; the map hashes them with foldhash, the cheapest hasher in the tree.
    versions: Mutex<foldhash::HashMap<u64, u64>>,
    /// Digests references for `versions` (see the module docs).
    references: foldhash::quality::RandomState,
    /// Digests versions with fingerprints for `versions`: SipHash with a random key, so
    /// that no two can be made to share a digest.
    states: RandomState,
    /// Fingerprints desired manifests.
    fingerprints: Fingerprints,
}

impl Settled {
    /// What fingerprints the desired manifests this memo is asked about.
    pub(crate) fn fingerprints(&self) -> &Fingerprints {
        &self.fingerprints
    }
}

/// The memo and the object a drift check asks it about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memo<'a> {
    pub(crate) settled: &'a Settled,
    pub(crate) object: &'a ObjectRef,
}

impl<'a> Memo<'a> {
    /// The question for the desired manifest whose fingerprint (by
    /// [`Settled::fingerprints`]) is `desired`.
    pub(crate) fn desired(self, desired: u64) -> Recall<'a> {
        Recall {
            memo: self,
            desired,
        }
    }
}

/// The memo, the object and the manifest it is to be in sync with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recall<'a> {
    memo: Memo<'a>,
    /// The desired manifest's fingerprint.
    desired: u64,
}

impl Recall<'_> {
    /// Whether the object was found in sync with this manifest at `live`'s resourceVersion.
    pub(crate) fn holds(&self, live: &Value) -> bool {
        self.holds_state(self.state(live.resource_version(), live.uid()))
    }

    /// Whether the object was found in sync with this manifest at resourceVersion
    /// `version`, with the uid `uid`: asked of an object not read, by the version its
    /// cluster holds it at ([`crate::cluster::Cluster::own_version`]) and the uid the CR's
    /// inventory records for it. A yes also says the inventory's uid is the object's.
    pub(crate) fn holds_at(&self, version: &str, uid: &str) -> bool {
        self.holds_state(self.state(Some(version), Some(uid)))
    }

    fn holds_state(&self, state: Option<u64>) -> bool {
        let Some(state) = state else {
            return false;
        };
        let key = self.memo.settled.references.hash_one(self.memo.object);
        self.memo.settled.versions.lock().get(&key) == Some(&state)
    }

    /// The object is in sync with this manifest at `live`'s resourceVersion.
    pub(crate) fn record(&self, live: &Value) {
        let Some(state) = self.state(live.resource_version(), live.uid()) else {
            return;
        };
        let settled = self.memo.settled;
        let key = settled.references.hash_one(self.memo.object);
        let mut versions = settled.versions.lock();
        if versions.len() >= LIMIT && !versions.contains_key(&key) {
            versions.clear();
        }
        versions.insert(key, state);
    }

    /// The digest of an object's resourceVersion and uid and the manifest's fingerprint,
    /// if the version is an integer.
    fn state(&self, version: Option<&str>, uid: Option<&str>) -> Option<u64> {
        let version: u64 = version?.parse().ok()?;
        let uid = uid.unwrap_or_default();
        Some(
            self.memo
                .settled
                .states
                .hash_one((version, uid, self.desired)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(version: &str) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": version}})
    }

    #[test]
    fn an_object_holds_only_at_the_version_and_manifest_it_was_recorded_at() {
        let settled = Settled::default();
        let a = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let b = ObjectRef::new("v1", "ConfigMap", Some("ns"), "b");
        let manifest = settled.fingerprints().of(&json!({"data": {"k": "1"}}));
        let changed = settled.fingerprints().of(&json!({"data": {"k": "2"}}));
        assert_ne!(manifest, changed);
        let memo = Memo {
            settled: &settled,
            object: &a,
        }
        .desired(manifest);
        assert!(!memo.holds(&at("7")), "nothing recorded yet");
        memo.record(&at("7"));
        assert!(memo.holds(&at("7")));
        assert!(!memo.holds(&at("8")), "a later version was not checked");
        let other_manifest = Memo {
            settled: &settled,
            object: &a,
        }
        .desired(changed);
        assert!(
            !other_manifest.holds(&at("7")),
            "another manifest was not checked"
        );
        let other = Memo {
            settled: &settled,
            object: &b,
        }
        .desired(manifest);
        assert!(!other.holds(&at("7")), "another object at the same version");
        memo.record(&at("8"));
        assert!(!memo.holds(&at("7")) && memo.holds(&at("8")));
    }

    #[test]
    fn an_object_not_read_holds_only_with_the_uid_it_was_recorded_with() {
        let settled = Settled::default();
        let a = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let memo = Memo {
            settled: &settled,
            object: &a,
        }
        .desired(5);
        let live = json!({"metadata": {"name": "a", "resourceVersion": "7", "uid": "u1"}});
        assert!(!memo.holds_at("7", "u1"), "nothing recorded yet");
        memo.record(&live);
        assert!(memo.holds_at("7", "u1") && memo.holds(&live));
        assert!(!memo.holds_at("7", "u0"), "an earlier incarnation's uid");
        assert!(!memo.holds_at("8", "u1"), "a later version");
        assert!(!memo.holds(&at("7")), "a copy without the uid");
    }

    #[test]
    fn versions_that_are_not_integers_are_never_remembered() {
        let settled = Settled::default();
        let a = ObjectRef::new("v1", "ConfigMap", Some("ns"), "a");
        let memo = Memo {
            settled: &settled,
            object: &a,
        }
        .desired(1);
        memo.record(&at("abc"));
        assert!(!memo.holds(&at("abc")));
        memo.record(&json!({"metadata": {"name": "a"}}));
        assert!(!memo.holds(&json!({"metadata": {"name": "a"}})));
        assert!(settled.versions.lock().is_empty());
    }

    /// A reconcile that writes an object remembers it in sync at the version its write
    /// returned: the next reconcile, the first steady one, computes no applied hash and
    /// walks no fields; one after another writer changed the object checks it in full.
    #[cfg(feature = "testing")]
    #[tokio::test]
    async fn an_object_written_by_a_reconcile_is_in_sync_at_the_version_written() {
        use crate::rollout::HASHED;
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
        let hashed = || HASHED.with(std::cell::Cell::take);
        env.reconcile(&cr).await;
        assert_eq!(hashed(), 1, "the write hashed its manifest");
        let written = env.get(&settings).await.expect("the reconcile wrote it");
        env.reconcile(&cr).await;
        assert_eq!(hashed(), 0, "the steady reconcile recalled it");
        assert_eq!(env.get(&settings).await, Some(written), "and wrote nothing");
        env.annotate(&settings, "someone", "else").await;
        env.reconcile(&cr).await;
        assert_eq!(hashed(), 1, "a new version is checked in full");
    }

    /// A steady reconcile reads none of the objects the memo vouches for by their version
    /// and the uid the inventory records, and still finds the CR Ready; an object changed
    /// since, or one the inventory records with another uid, is read again and checked.
    #[cfg(feature = "testing")]
    #[tokio::test]
    async fn a_steady_reconcile_reads_no_object_it_remembers_in_sync() {
        use crate::session::ledger::READ;
        use crate::testing::{DummyComponent, DummyController, Harness, TEST_NAMESPACE};

        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "{cr}-settings"}, "data": {"mode": "fast"}});
        let env = Harness::new(DummyController::new().component(
            DummyComponent::new("app").with_object("settings", config),
            &[],
        ))
        .await;
        // The ConfigMaps the reconciles since the last call read from the cluster.
        let reads = || {
            READ.with(|read| read.take())
                .iter()
                .filter(|object| object.kind == "ConfigMap")
                .count()
        };
        let cr = env.apply_cr("a", json!({})).await;
        let settings = ObjectRef::new("v1", "ConfigMap", Some(TEST_NAMESPACE), "a-settings");
        env.reconcile(&cr).await;
        let written = env
            .get(&settings)
            .await
            .expect("the first reconcile wrote it");
        reads();

        env.reconcile(&cr).await;
        assert_eq!(reads(), 0, "the steady reconcile read no ConfigMap");
        env.assert_ready(&cr).await;
        assert_eq!(env.get(&settings).await, Some(written), "and wrote nothing");

        env.annotate(&settings, "someone", "else").await;
        env.reconcile(&cr).await;
        assert_eq!(reads(), 1, "a new version is read");
        env.reconcile(&cr).await;
        assert_eq!(reads(), 0, "and remembered at that version");

        // An inventory read back from a status write that failed names an earlier uid.
        let mut status = env.status(&cr).await;
        status["inventory"][0]["uid"] = json!("an-earlier-incarnation");
        env.set_status(&cr, status).await;
        env.reconcile(&cr).await;
        assert_eq!(reads(), 1, "a uid the memo does not vouch for is read");
        let uid = env
            .get(&settings)
            .await
            .and_then(|s| s.uid().map(str::to_string));
        assert_eq!(
            env.status(&cr).await["inventory"][0]["uid"].as_str(),
            uid.as_deref(),
            "and the inventory records the object's own"
        );
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
        }
        .desired(3);
        memo.record(&at("3"));
        assert_eq!(settled.versions.lock().len(), 1);
        assert!(memo.holds(&at("3")));
    }
}
