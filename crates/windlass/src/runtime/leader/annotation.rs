//! The `annotation` lock: active-active replicas, each CR locked by the replica that
//! reconciles it, with two annotations on the CR itself ([`LEASE_NAME`], [`LEASE_TIME`]).
//! There is no global leader; a replica that stops renewing a CR's lock loses it
//! `lock.duration` after its last renewal.
//!
//! Two details keep the lock safe:
//!
//! - the write that takes a lock is a JSON patch guarded by the resourceVersion that was
//!   read, so two replicas that saw the same free lock cannot both take it (writing the
//!   whole object would let the last writer win); and the release is guarded by the
//!   holder's name;
//! - `lease-time` is RFC 3339 in UTC, not the host's local time, so replicas in different
//!   time zones agree; a value that does not parse counts as expired, so a mangled
//!   annotation cannot lock a CR forever.
//!
//! The runtime takes a CR's lock when a reconcile of it starts and gives it up when the
//! reconcile ends (and every lock left at shutdown), as oper8 does: the lock says who is
//! reconciling the CR now, not who owns it, so a change of the CR is taken up at once by
//! whichever replica sees it next instead of waiting for the holder's lock to expire. That
//! costs two writes to the CR per reconcile; sharding (`sharding.shards`) shares the CRs
//! without any. A lock held with more than half its duration left is not rewritten, so a
//! replica that keeps a lock (a caller of [`AnnotationLock::acquire`] that does not
//! release) renews it at most every half duration.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::LockError;
use crate::annotations::{LEASE_NAME, LEASE_TIME};
use crate::cluster::Cluster;
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef};

/// What a replica does with one CR's lock annotations ([`annotation_choice`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnnotationChoice {
    /// Take the lock: nobody holds it, or the holder's lock expired.
    Take {
        /// The holder whose lock expired, if there was one.
        from: Option<String>,
    },
    /// Renew this replica's own lock (it has less than half its duration left).
    Renew,
    /// This replica holds the lock with more than half its duration left: no write needed.
    Keep,
    /// Another replica holds a valid lock.
    Wait {
        /// Its identity.
        holder: String,
        /// When its lock expires unless renewed.
        until: Timestamp,
    },
}

/// When a lock taken at `lease_time` expires, `None` if the time does not parse.
fn expiry(lease_time: Option<&str>, duration: Duration) -> Option<Timestamp> {
    let taken: Timestamp = lease_time?.trim().parse().ok()?;
    let duration = SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX);
    Some(taken.checked_add(duration).unwrap_or(Timestamp::MAX))
}

/// The annotation-lock rules for `identity` at `now`, given the CR's
/// `lease-name` (`holder`) and `lease-time`:
///
/// 1. No holder: take the lock.
/// 2. Held by `identity`: renew it, but only once less than half of `duration` is left;
///    until then keep it as it is.
/// 3. Held by another whose lock expired (`now >= lease-time + duration`, or `lease-time`
///    missing or unreadable): take it over.
/// 4. Otherwise: wait.
pub fn annotation_choice(
    holder: Option<&str>,
    lease_time: Option<&str>,
    identity: &str,
    duration: Duration,
    now: Timestamp,
) -> AnnotationChoice {
    let until = expiry(lease_time, duration);
    match holder.filter(|h| !h.is_empty()) {
        None => AnnotationChoice::Take { from: None },
        Some(holder) if holder == identity => {
            let half = SignedDuration::try_from(duration / 2).unwrap_or(SignedDuration::MAX);
            match until {
                Some(until) if now.checked_add(half).is_ok_and(|t| t <= until) => {
                    AnnotationChoice::Keep
                }
                _ => AnnotationChoice::Renew,
            }
        }
        Some(holder) => match until {
            Some(until) if now < until => AnnotationChoice::Wait {
                holder: holder.to_string(),
                until,
            },
            _ => AnnotationChoice::Take {
                from: Some(holder.to_string()),
            },
        },
    }
}

/// The per-CR annotation lock over a [`Cluster`]: the live cluster under the
/// runtime, the in-memory one in tests.
pub struct AnnotationLock {
    cluster: Arc<dyn Cluster>,
    identity: String,
    duration: Duration,
    /// The objects this replica took or renewed a lock on, to give them up at shutdown.
    held: parking_lot::Mutex<BTreeSet<ObjectRef>>,
}

impl AnnotationLock {
    /// Locks held as `identity` (the pod name), valid for `duration` after each renewal.
    pub fn new(cluster: Arc<dyn Cluster>, identity: &str, duration: Duration) -> AnnotationLock {
        AnnotationLock {
            cluster,
            identity: identity.to_string(),
            duration,
            held: parking_lot::Mutex::default(),
        }
    }

    /// Take or renew the lock on `object`: read it, apply
    /// `annotation_choice`, and write the annotations if needed.
    ///
    /// `Ok(true)`: this replica holds the lock. `Ok(false)`: another replica does, the
    /// object does not exist, or another writer changed it between the read and the write
    /// (try again later).
    ///
    /// # Errors
    /// [`LockError::Cluster`] if the read or the write failed otherwise.
    pub async fn acquire(&self, object: &ObjectRef) -> Result<bool, LockError> {
        let Some(current) = self.cluster.get(object).await? else {
            return Ok(false);
        };
        let (holder, time) = lease_annotations(&current);
        let now = Timestamp::now();
        match annotation_choice(holder, time, &self.identity, self.duration, now) {
            AnnotationChoice::Keep => {
                self.held.lock().insert(object.clone());
                return Ok(true);
            }
            AnnotationChoice::Wait { .. } => return Ok(false),
            AnnotationChoice::Take { from: Some(from) } => {
                tracing::info!(%object, %from, "taking over an expired annotation lock");
            }
            AnnotationChoice::Take { from: None } | AnnotationChoice::Renew => {}
        }
        let mut ops = Vec::new();
        if let Some(version) = current.resource_version() {
            ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": version}));
        }
        if !current["metadata"]["annotations"].is_object() {
            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
        }
        ops.push(json!({"op": "add", "path": pointer(LEASE_NAME), "value": self.identity}));
        ops.push(json!({"op": "add", "path": pointer(LEASE_TIME), "value": now.to_string()}));
        let taken = self.patch(object, ops).await?;
        if taken {
            self.held.lock().insert(object.clone());
        }
        Ok(taken)
    }

    /// Give up the lock on `object` if this replica holds it: both annotations are removed,
    /// guarded by the holder's name, so a lock another replica took meanwhile stays.
    ///
    /// # Errors
    /// [`LockError::Cluster`] if the read or the write failed.
    pub async fn release(&self, object: &ObjectRef) -> Result<(), LockError> {
        self.held.lock().remove(object);
        let Some(current) = self.cluster.get(object).await? else {
            return Ok(());
        };
        let (holder, time) = lease_annotations(&current);
        if holder != Some(self.identity.as_str()) {
            return Ok(());
        }
        let mut ops = vec![
            json!({"op": "test", "path": pointer(LEASE_NAME), "value": self.identity}),
            json!({"op": "remove", "path": pointer(LEASE_NAME)}),
        ];
        if time.is_some() {
            ops.push(json!({"op": "remove", "path": pointer(LEASE_TIME)}));
        }
        self.patch(object, ops).await.map(|_| ())
    }

    /// Give up every lock this replica took, as it shuts down: the other replicas take its
    /// CRs over at once instead of after the locks expire. Every object is tried; the first
    /// error is returned.
    ///
    /// # Errors
    /// [`LockError::Cluster`] if a read or a write failed (that lock then expires on its
    /// own).
    pub async fn release_all(&self) -> Result<(), LockError> {
        let held: Vec<ObjectRef> = self.held.lock().iter().cloned().collect();
        let mut first_error = None;
        for object in held {
            if let Err(e) = self.release(&object).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether this replica holds a valid lock on `object`, a manifest as the runtime has
    /// it.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn holds(&self, object: &Value) -> bool {
        let (holder, time) = lease_annotations(object);
        holder == Some(self.identity.as_str())
            && expiry(time, self.duration).is_some_and(|until| Timestamp::now() < until)
    }

    /// Apply `ops`; `Ok(false)` if a guard failed or the object went away.
    async fn patch(&self, object: &ObjectRef, ops: Vec<Value>) -> Result<bool, LockError> {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
            .map_err(|e| ClusterError::api(format!("building the lock patch of {object}: {e}")))?;
        match self.cluster.patch(object, &patch).await {
            Ok(_) => Ok(true),
            Err(
                ClusterError::Conflict { .. }
                | ClusterError::Invalid { .. }
                | ClusterError::NotFound(_),
            ) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

fn lease_annotations(object: &Value) -> (Option<&str>, Option<&str>) {
    let annotations = &object["metadata"]["annotations"];
    (
        annotations[LEASE_NAME].as_str(),
        annotations[LEASE_TIME].as_str(),
    )
}

/// The JSON pointer of an annotation (`/` in the key escaped as `~1`).
fn pointer(annotation: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        annotation.replace('~', "~0").replace('/', "~1")
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::cluster::{MemoryCluster, WriteMethod};

    const MINUTE: Duration = Duration::from_secs(60);

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn choice(holder: Option<&str>, taken: Option<i64>, now: i64) -> AnnotationChoice {
        let time = taken.map(|t| at(t).to_string());
        annotation_choice(holder, time.as_deref(), "me", MINUTE, at(now))
    }

    #[test]
    fn the_rules_of_f182() {
        assert_eq!(choice(None, None, 0), AnnotationChoice::Take { from: None });
        assert_eq!(
            choice(Some(""), Some(0), 0),
            AnnotationChoice::Take { from: None }
        );
        // Own lock: kept while more than half is left, renewed after, even once expired.
        assert_eq!(choice(Some("me"), Some(0), 30), AnnotationChoice::Keep);
        assert_eq!(choice(Some("me"), Some(0), 31), AnnotationChoice::Renew);
        assert_eq!(choice(Some("me"), Some(0), 600), AnnotationChoice::Renew);
        assert_eq!(choice(Some("me"), None, 0), AnnotationChoice::Renew);
        // Another holder: valid until lease-time + duration, expired from then on.
        assert_eq!(
            choice(Some("other"), Some(0), 59),
            AnnotationChoice::Wait {
                holder: "other".into(),
                until: at(60)
            }
        );
        let taken = AnnotationChoice::Take {
            from: Some("other".into()),
        };
        assert_eq!(choice(Some("other"), Some(0), 60), taken);
        assert_eq!(choice(Some("other"), None, 0), taken);
        assert_eq!(
            annotation_choice(Some("other"), Some("yesterday"), "me", MINUTE, at(0)),
            taken
        );
        // A naive local time has no offset: it does not parse, so it is expired.
        assert_eq!(
            annotation_choice(
                Some("other"),
                Some("2099-01-01T00:00:00.000000"),
                "me",
                MINUTE,
                at(0)
            ),
            taken
        );
    }

    fn widget() -> (Arc<MemoryCluster>, ObjectRef) {
        let cluster = Arc::new(MemoryCluster::new());
        let object = ObjectRef::new("v1", "ConfigMap", Some("default"), "locked");
        (cluster, object)
    }

    async fn annotations(cluster: &MemoryCluster, object: &ObjectRef) -> Value {
        cluster.get(object).await.unwrap().unwrap()["metadata"]["annotations"].clone()
    }

    #[tokio::test]
    async fn acquire_renew_release_on_an_object() {
        let (cluster, object) = widget();
        let a = AnnotationLock::new(cluster.clone(), "pod-a", MINUTE);
        let b = AnnotationLock::new(cluster.clone(), "pod-b", MINUTE);
        // A missing object cannot be locked.
        assert!(!a.acquire(&object).await.unwrap());
        cluster
            .apply(
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "locked", "namespace": "default"}}),
                WriteMethod::Apply,
            )
            .await
            .unwrap();

        assert!(a.acquire(&object).await.unwrap());
        let stored = cluster.get(&object).await.unwrap().unwrap();
        assert_eq!(stored["metadata"]["annotations"][LEASE_NAME], "pod-a");
        assert!(a.holds(&stored));
        assert!(!b.holds(&stored));
        assert!(!b.acquire(&object).await.unwrap());
        // B's release does not touch A's lock.
        b.release(&object).await.unwrap();
        assert_eq!(annotations(&cluster, &object).await[LEASE_NAME], "pod-a");
        // A fresh lock is not rewritten.
        let version = stored.resource_version().map(str::to_string);
        assert!(a.acquire(&object).await.unwrap());
        let again = cluster.get(&object).await.unwrap().unwrap();
        assert_eq!(again.resource_version().map(str::to_string), version);

        a.release(&object).await.unwrap();
        let released = annotations(&cluster, &object).await;
        assert!(released.get(LEASE_NAME).is_none(), "{released}");
        assert!(released.get(LEASE_TIME).is_none(), "{released}");
        assert!(b.acquire(&object).await.unwrap());
    }

    #[tokio::test]
    async fn an_expired_lock_is_taken_over_and_a_stale_read_loses() {
        let (cluster, object) = widget();
        let long_ago = Timestamp::now()
            .checked_sub(SignedDuration::from_secs(120))
            .unwrap();
        cluster
            .apply(
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "locked", "namespace": "default", "annotations": {
                        LEASE_NAME: "pod-a", LEASE_TIME: long_ago.to_string()}}}),
                WriteMethod::Apply,
            )
            .await
            .unwrap();
        let a = AnnotationLock::new(cluster.clone(), "pod-a", MINUTE);
        let b = AnnotationLock::new(cluster.clone(), "pod-b", MINUTE);
        assert!(!a.holds(&cluster.get(&object).await.unwrap().unwrap()));
        assert!(b.acquire(&object).await.unwrap());
        assert_eq!(annotations(&cluster, &object).await[LEASE_NAME], "pod-b");

        // A write computed from an older read is refused by the resourceVersion guard.
        let stale = cluster.get(&object).await.unwrap().unwrap();
        cluster
            .patch(
                &object,
                &serde_json::from_value(json!([
                    {"op": "add", "path": "/metadata/labels", "value": {"touched": "yes"}}
                ]))
                .unwrap(),
            )
            .await
            .unwrap();
        let ops = vec![
            json!({"op": "test", "path": "/metadata/resourceVersion",
                "value": stale.resource_version().unwrap()}),
            json!({"op": "add", "path": pointer(LEASE_NAME), "value": "pod-c"}),
        ];
        let c = AnnotationLock::new(cluster.clone(), "pod-c", MINUTE);
        assert!(!c.patch(&object, ops).await.unwrap());
        assert_eq!(annotations(&cluster, &object).await[LEASE_NAME], "pod-b");
    }
}
