//! The `leader-with-lease` lock: a `coordination.k8s.io/v1` Lease naming its holder,
//! renewed by the holder and taken over by another replica once it expired.
//!
//! The rules are one pure function, [`next_lease`]; [`LeaseLock`] reads the Lease, applies
//! them, and writes the result guarded by the resourceVersion it read (a create when there
//! is no Lease yet), so of two replicas that saw the same expired Lease only one can take
//! it: the other's write fails with HTTP 409, and it looks again.

use std::time::Duration;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;

use super::{Attempt, LockError, RenewedLock};

/// What a replica does with the Lease it read ([`next_lease`]).
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseChoice {
    /// Take the lease: there is none, it has no holder, or its holder's lease expired.
    Take {
        /// The lease to write.
        spec: LeaseSpec,
        /// The holder whose lease expired, if there was one.
        from: Option<String>,
    },
    /// Renew this replica's own lease.
    Renew(LeaseSpec),
    /// Another replica holds a valid lease.
    Wait {
        /// Its identity.
        holder: String,
        /// When its lease expires unless renewed (`renewTime + leaseDurationSeconds`).
        until: Timestamp,
    },
}

/// The lease rules, for `identity` at `now` with a lease of `duration_seconds`:
///
/// 1. No Lease (or no spec, or no holder): take it. `acquireTime = renewTime = now`,
///    `leaseTransitions` = the previous count + 1, or 1 on a new Lease.
/// 2. Held by `identity`: renew. `renewTime = now`; `acquireTime` and `leaseTransitions`
///    are kept.
/// 3. Held by another, with `renewTime + leaseDurationSeconds > now` (its own duration;
///    `acquireTime` if it never renewed): wait.
/// 4. Held by another whose lease expired (`renewTime + leaseDurationSeconds <= now`, or
///    no time at all): take it over; `leaseTransitions` = previous (default 1) + 1.
///
/// `leaseDurationSeconds` is always written as this replica's duration.
///
/// Tested by `a_lease_is_waited_for_until_it_expires_then_taken_over`.
pub fn next_lease(
    current: Option<&LeaseSpec>,
    identity: &str,
    duration_seconds: i32,
    now: Timestamp,
) -> LeaseChoice {
    let mut spec = LeaseSpec {
        holder_identity: Some(identity.to_string()),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(duration_seconds),
        lease_transitions: Some(1),
        ..LeaseSpec::default()
    };
    let Some(current) = current else {
        return LeaseChoice::Take { spec, from: None };
    };
    let transitions = current.lease_transitions;
    match current.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        None => {
            spec.lease_transitions = Some(transitions.map_or(1, |t| t.saturating_add(1)));
            LeaseChoice::Take { spec, from: None }
        }
        Some(holder) if holder == identity => {
            spec.acquire_time = current.acquire_time.clone().or(spec.acquire_time);
            spec.lease_transitions = transitions.or(spec.lease_transitions);
            LeaseChoice::Renew(spec)
        }
        Some(holder) => {
            let renewed = current
                .renew_time
                .as_ref()
                .or(current.acquire_time.as_ref());
            let seconds = current.lease_duration_seconds.unwrap_or(duration_seconds);
            let until = renewed.map(|MicroTime(renewed)| {
                renewed
                    .checked_add(SignedDuration::from_secs(i64::from(seconds.max(0))))
                    .unwrap_or(Timestamp::MAX)
            });
            match until {
                Some(until) if until > now => LeaseChoice::Wait {
                    holder: holder.to_string(),
                    until,
                },
                _ => {
                    spec.lease_transitions = Some(transitions.unwrap_or(1).saturating_add(1));
                    LeaseChoice::Take {
                        spec,
                        from: Some(holder.to_string()),
                    }
                }
            }
        }
    }
}

/// The spec that hands a lease over on shutdown, if `identity` holds it: no holder, so the
/// next replica takes it at once ([`next_lease`] rule 1); a one-second duration for
/// elections that only look at the times (as client-go's do); the transition count kept.
pub fn released_lease(current: &LeaseSpec, identity: &str, now: Timestamp) -> Option<LeaseSpec> {
    if current.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    Some(LeaseSpec {
        holder_identity: None,
        acquire_time: current.acquire_time.clone(),
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(1),
        lease_transitions: current.lease_transitions,
        ..current.clone()
    })
}

/// The `leader-with-lease` lock on one Lease, for the renew loop.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    namespace: String,
    identity: String,
    duration_seconds: i32,
}

impl LeaseLock {
    /// The Lease `namespace/name`, held as `identity` for `duration` (whole seconds,
    /// at least one).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> LeaseLock {
        let seconds = duration
            .as_secs_f64()
            .round()
            .clamp(1.0, f64::from(i32::MAX));
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            // In range after the clamp above.
            #[allow(clippy::cast_possible_truncation)]
            duration_seconds: seconds as i32,
        }
    }

    fn what(&self, doing: &str) -> String {
        format!("{doing} Lease {}/{}", self.namespace, self.name)
    }

    /// Write `spec` onto the Lease as read: a create if there was none, else a replace at
    /// the read resourceVersion. `Ok(false)`: another writer came first (HTTP 409).
    async fn write(&self, read: Option<Lease>, spec: LeaseSpec) -> Result<bool, LockError> {
        let result = match read {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(LockError::api(self.what("writing"), e)),
        }
    }

    async fn read(&self) -> Result<Option<Lease>, LockError> {
        self.api
            .get_opt(&self.name)
            .await
            .map_err(|e| LockError::api(self.what("reading"), e))
    }
}

#[async_trait]
impl RenewedLock for LeaseLock {
    async fn try_acquire(&mut self) -> Result<Attempt, LockError> {
        // A conflict means someone wrote the Lease since it was read: read it again, once
        // (an unrelated edit must not cost leadership; a lost race shows as another holder).
        for _ in 0..2 {
            let read = self.read().await?;
            let current = read.as_ref().and_then(|l| l.spec.as_ref());
            let spec = match next_lease(
                current,
                &self.identity,
                self.duration_seconds,
                Timestamp::now(),
            ) {
                LeaseChoice::Wait { holder, .. } => {
                    return Ok(Attempt::Taken {
                        holder: Some(holder),
                    });
                }
                LeaseChoice::Renew(spec) => spec,
                LeaseChoice::Take { spec, from } => {
                    if let Some(from) = from {
                        tracing::info!(lease = %self.name, %from, "taking over an expired lease");
                    }
                    spec
                }
            };
            if self.write(read, spec).await? {
                return Ok(Attempt::Held);
            }
        }
        Ok(Attempt::Taken { holder: None })
    }

    async fn release(&mut self) -> Result<(), LockError> {
        for _ in 0..2 {
            let Some(read) = self.read().await? else {
                return Ok(());
            };
            let Some(spec) = read
                .spec
                .as_ref()
                .and_then(|s| released_lease(s, &self.identity, Timestamp::now()))
            else {
                return Ok(());
            };
            if self.write(Some(read), spec).await? {
                tracing::info!(lease = %self.name, "released the lease");
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, renewed: i64, duration: i32, transitions: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            acquire_time: Some(MicroTime(at(-100))),
            renew_time: Some(MicroTime(at(renewed))),
            lease_duration_seconds: Some(duration),
            lease_transitions: transitions,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_missing_lease_is_taken_with_one_transition() {
        let LeaseChoice::Take { spec, from } = next_lease(None, "me", 15, at(0)) else {
            panic!()
        };
        assert_eq!(from, None);
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(0))));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(1));
        // An empty spec (a Lease created by hand) is the same.
        assert!(matches!(
            next_lease(Some(&LeaseSpec::default()), "me", 15, at(0)),
            LeaseChoice::Take { spec, .. } if spec.lease_transitions == Some(1)
        ));
    }

    #[test]
    fn the_own_lease_is_renewed_keeping_acquire_time_and_transitions() {
        let current = held_by("me", -5, 15, Some(7));
        let LeaseChoice::Renew(spec) = next_lease(Some(&current), "me", 20, at(0)) else {
            panic!()
        };
        assert_eq!(spec.acquire_time, Some(MicroTime(at(-100))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(0))));
        assert_eq!(spec.lease_transitions, Some(7));
        assert_eq!(spec.lease_duration_seconds, Some(20));
        // Even after it expired, as long as nobody else took it.
        let stale = held_by("me", -500, 15, Some(7));
        assert!(matches!(
            next_lease(Some(&stale), "me", 15, at(0)),
            LeaseChoice::Renew(_)
        ));
    }

    #[test]
    fn another_holder_is_waited_for_until_renew_time_plus_its_duration() {
        let current = held_by("other", 0, 10, Some(2));
        for now in [0, 5, 9] {
            assert_eq!(
                next_lease(Some(&current), "me", 15, at(now)),
                LeaseChoice::Wait {
                    holder: "other".into(),
                    until: at(10)
                },
                "at +{now}s"
            );
        }
        // Expired exactly at renewTime + leaseDurationSeconds (the holder's 10 s, not ours).
        for now in [10, 11, 1000] {
            let LeaseChoice::Take { spec, from } = next_lease(Some(&current), "me", 15, at(now))
            else {
                panic!("at +{now}s")
            };
            assert_eq!(from.as_deref(), Some("other"));
            assert_eq!(spec.holder_identity.as_deref(), Some("me"));
            assert_eq!(spec.acquire_time, Some(MicroTime(at(now))));
            assert_eq!(spec.lease_transitions, Some(3));
        }
    }

    #[test]
    fn missing_fields_of_another_holder_are_read_safely() {
        // No transitions: counted as 1, so the takeover writes 2.
        let no_count = held_by("other", 0, 10, None);
        assert!(matches!(
            next_lease(Some(&no_count), "me", 15, at(10)),
            LeaseChoice::Take { spec, .. } if spec.lease_transitions == Some(2)
        ));
        // No duration: ours is assumed.
        let mut no_duration = held_by("other", 0, 10, Some(1));
        no_duration.lease_duration_seconds = None;
        assert!(matches!(
            next_lease(Some(&no_duration), "me", 15, at(12)),
            LeaseChoice::Wait { .. }
        ));
        // Never renewed: the acquire time counts.
        let mut never_renewed = held_by("other", 0, 10, Some(1));
        never_renewed.renew_time = None;
        assert!(matches!(
            next_lease(Some(&never_renewed), "me", 15, at(0)),
            LeaseChoice::Take { .. }
        ));
        // No time at all: nothing shows the holder is alive.
        never_renewed.acquire_time = None;
        assert!(matches!(
            next_lease(Some(&never_renewed), "me", 15, at(0)),
            LeaseChoice::Take { .. }
        ));
        // A negative duration is an expired lease.
        let negative = held_by("other", 0, -5, Some(1));
        assert!(matches!(
            next_lease(Some(&negative), "me", 15, at(0)),
            LeaseChoice::Take { .. }
        ));
    }

    #[test]
    fn a_released_lease_is_free_at_once_and_counts_the_transition() {
        let mine = held_by("me", 0, 15, Some(4));
        assert_eq!(released_lease(&mine, "other", at(1)), None);
        let released = released_lease(&mine, "me", at(1)).unwrap();
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_transitions, Some(4));
        let LeaseChoice::Take { spec, from } = next_lease(Some(&released), "other", 15, at(1))
        else {
            panic!()
        };
        assert_eq!(from, None);
        assert_eq!(spec.lease_transitions, Some(5));
    }

    #[test]
    fn a_lease_is_waited_for_until_it_expires_then_taken_over() {
        use jiff::Timestamp;
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        let held = LeaseSpec {
            holder_identity: Some("pod-a".into()),
            renew_time: Some(MicroTime(t("2024-05-01T10:00:00Z"))),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(3),
            ..Default::default()
        };
        // 14 s later pod-a's lease still holds...
        assert!(matches!(
            next_lease(Some(&held), "pod-b", 15, t("2024-05-01T10:00:14Z")),
            LeaseChoice::Wait { .. }
        ));
        // ...15 s later it expired, and pod-b takes it over.
        let LeaseChoice::Take { spec, from } =
            next_lease(Some(&held), "pod-b", 15, t("2024-05-01T10:00:15Z"))
        else {
            panic!()
        };
        assert_eq!(from.as_deref(), Some("pod-a"));
        assert_eq!(spec.lease_transitions, Some(4));
    }
}
