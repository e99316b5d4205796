//! The live replicas of a sharded operator: one Lease, `<leader-election.id>-members`,
//! whose annotation [`MEMBERS`] maps each replica's identity to the time it last renewed
//! its membership (RFC 3339, UTC).
//!
//! Each replica renews its own entry every poll, dropping entries that expired on the way
//! (a replica that died); a replica whose entry is older than the lease duration is gone.
//! The write is guarded by the resourceVersion read, so replicas renewing at once do not
//! drop each other's entries: the loser of a race reads again. One object of a known name
//! rather than a Lease per replica, because RBAC can then grant it by name, and a replica
//! reads every member with one GET.
//!
//! Membership only says which shards a replica should hold; what it may reconcile is what
//! it holds a shard Lease for. So a replica whose view of the members lags behind another's
//! wants a shard another one holds, and waits for it, but never reconciles it at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use crate::runtime::leader::LockError;

/// The annotation of the members Lease: `{"<identity>": "<last renewal>", …}`.
pub(crate) const MEMBERS: &str = "windlass.dev/members";

/// How often a renewal reads and writes again after a conflict before it gives up until
/// the next poll. With three replicas renewing every poll, under load (10 000 CRs) a
/// renewal met a conflict every few polls and, retried once, failed 7 to 15 times in 25
/// minutes; a failed renewal leaves the replica's entry and its view of the members as they
/// were for a poll.
const CONFLICT_RETRIES: u32 = 3;

/// The entries of `text` (the annotation's value) that are still live at `now` with a
/// membership of `duration`; an entry or a text that does not parse counts as gone.
pub(crate) fn live_entries(
    text: Option<&str>,
    now: Timestamp,
    duration: Duration,
) -> BTreeMap<String, Timestamp> {
    let duration = SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX);
    let entries: BTreeMap<String, String> = text
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    entries
        .into_iter()
        .filter_map(|(member, renewed)| Some((member, renewed.parse::<Timestamp>().ok()?)))
        .filter(|(_, renewed)| renewed.checked_add(duration).is_ok_and(|until| until > now))
        .collect()
}

/// The annotation's value after `me` renewed at `now` (or left, when `leaving`): the live
/// entries of `current`, `me`'s set to `now` or removed.
pub(crate) fn renewed(
    current: Option<&str>,
    me: &str,
    now: Timestamp,
    duration: Duration,
    leaving: bool,
) -> BTreeMap<String, Timestamp> {
    let mut entries = live_entries(current, now, duration);
    if leaving {
        entries.remove(me);
    } else {
        entries.insert(me.to_string(), now);
    }
    entries
}

fn text_of(entries: &BTreeMap<String, Timestamp>) -> String {
    let as_text: BTreeMap<&str, String> = entries
        .iter()
        .map(|(member, at)| (member.as_str(), at.to_string()))
        .collect();
    serde_json::to_string(&as_text).unwrap_or_default()
}

/// This replica's membership, kept in the members Lease.
pub(crate) struct Membership {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl Membership {
    /// The membership of `identity` in the Lease `namespace/name`, valid for `duration`
    /// after each renewal.
    pub(crate) fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Membership {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    /// Renew this replica's entry; returns the live members, this replica among them.
    ///
    /// # Errors
    /// [`LockError::Api`] if the Lease could not be read, or not written after
    /// [`CONFLICT_RETRIES`] conflicts in a row.
    pub(crate) async fn renew(&self) -> Result<BTreeSet<String>, LockError> {
        let entries = self.write(false).await?;
        Ok(entries.into_keys().collect())
    }

    /// Remove this replica's entry, at shutdown: the others take its shards at their next
    /// poll instead of after the membership expired.
    ///
    /// # Errors
    /// [`LockError::Api`] if the Lease could not be read or written.
    pub(crate) async fn leave(&self) -> Result<(), LockError> {
        self.write(true).await.map(|_| ())
    }

    async fn write(&self, leaving: bool) -> Result<BTreeMap<String, Timestamp>, LockError> {
        let what = |doing: &str| format!("{doing} the members Lease {}", self.name);
        // A conflict is another replica renewing at the same moment: read again.
        let mut conflicts = 0;
        loop {
            let read = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(|e| LockError::api(what("reading"), e))?;
            let now = Timestamp::now();
            let current = read.as_ref().and_then(|lease| {
                lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(MEMBERS))
                    .map(String::as_str)
            });
            let entries = renewed(current, &self.identity, now, self.duration, leaving);
            let text = text_of(&entries);
            let result = match read {
                None if leaving => return Ok(entries),
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.name.clone()),
                            annotations: Some([(MEMBERS.to_string(), text)].into()),
                            ..ObjectMeta::default()
                        },
                        spec: None,
                    };
                    self.api.create(&PostParams::default(), &lease).await
                }
                Some(mut lease) => {
                    lease
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(MEMBERS.to_string(), text);
                    self.api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await
                }
            };
            match result {
                Ok(_) => return Ok(entries),
                Err(kube::Error::Api(status))
                    if status.code == 409 && conflicts < CONFLICT_RETRIES =>
                {
                    conflicts += 1;
                }
                Err(e) => return Err(LockError::api(what("writing"), e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn text(entries: &[(&str, i64)]) -> String {
        text_of(
            &entries
                .iter()
                .map(|(m, s)| (m.to_string(), at(*s)))
                .collect(),
        )
    }

    #[test]
    fn a_replica_renews_itself_and_drops_the_expired() {
        let current = text(&[("a", 0), ("b", -20), ("c", -14)]);
        let after = renewed(Some(&current), "me", at(1), LEASE, false);
        // b renewed 21 s ago: gone; c 15 s ago, exactly the lease: gone too.
        assert_eq!(
            after.keys().map(String::as_str).collect::<Vec<_>>(),
            ["a", "me"]
        );
        assert_eq!(after["me"], at(1));
        let left = renewed(Some(&text_of(&after)), "me", at(2), LEASE, true);
        assert_eq!(left.keys().map(String::as_str).collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn what_does_not_parse_is_not_a_member() {
        for mangled in ["", "[]", "not json", r#"{"a": "yesterday"}"#, r#"{"a": 5}"#] {
            assert!(
                live_entries(Some(mangled), at(0), LEASE).is_empty(),
                "{mangled}"
            );
        }
        assert!(live_entries(None, at(0), LEASE).is_empty());
        let first = renewed(None, "me", at(0), LEASE, false);
        assert_eq!(first.keys().collect::<Vec<_>>(), ["me"]);
    }
}
