//! From the configuration to one lock: its kind, object name, namespace, identity and timing,
//! with a clear error for what cannot work.

use std::time::Duration;

use crate::config::{LockKind, OperatorConfig};
use crate::error::Error;

/// The share of the lease duration a holder keeps in reserve: it stops leading at
/// `duration − duration / SAFETY_DIVISOR` after its last successful renewal.
const SAFETY_DIVISOR: u32 = 5;

/// The timing of a lock kept by the renew loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a renewal keeps the lock at the other replicas' end (the Lease's
    /// `leaseDurationSeconds`; for the annotation lock, the validity of `lease-time`).
    pub lease_duration: Duration,
    /// How long after the start of its last successful attempt this replica still
    /// considers itself leader; `None` for locks that stay held until released or
    /// garbage-collected (leader-for-life). Shorter than `lease_duration`.
    pub renew_deadline: Option<Duration>,
    /// Pause between attempts while all is well, leader or not (`leader-election.retry-period`).
    pub poll: Duration,
    /// Pause after a failed attempt.
    pub retry_after_error: Duration,
}

impl Timing {
    /// The timing of an expiring lock (the Lease) renewed every `poll`. The lease duration
    /// is rounded to whole seconds, as `leaseDurationSeconds` holds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use windlass::runtime::leader::Timing;
    ///
    /// let timing = Timing::for_lease(Duration::from_secs(15), Duration::from_secs(10)).unwrap();
    /// assert_eq!(timing.renew_deadline, Some(Duration::from_secs(12)));
    /// assert_eq!(timing.retry_after_error, Duration::from_secs(3));
    /// // Renewing no more often than the deadline would lose leadership between renewals.
    /// assert!(Timing::for_lease(Duration::from_secs(15), Duration::from_secs(12)).is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] if the duration rounds to less than a second, `poll` is zero, or
    /// `poll` is not shorter than the renew deadline.
    pub fn for_lease(lease_duration: Duration, poll: Duration) -> Result<Timing, Error> {
        let seconds = lease_duration.as_secs_f64().round();
        if !(1.0..=f64::from(i32::MAX)).contains(&seconds) {
            return Err(Error::config(format!(
                "leader-election.lease-duration: {lease_duration:?} must be at least 1s (a \
                 Lease counts whole seconds)"
            )));
        }
        let lease_duration = Duration::from_secs_f64(seconds);
        let renew_deadline = lease_duration - lease_duration / SAFETY_DIVISOR;
        if poll.is_zero() || poll >= renew_deadline {
            return Err(Error::config(format!(
                "leader-election.retry-period: {poll:?} must be more than zero and less \
                 than {renew_deadline:?} (the lock duration {lease_duration:?} minus a fifth), or \
                 the leader loses its lease between renewals"
            )));
        }
        Ok(Timing {
            lease_duration,
            renew_deadline: Some(renew_deadline),
            poll,
            retry_after_error: poll.min(renew_deadline / 4),
        })
    }

    /// The timing of a lock held until released or garbage-collected (leader-for-life),
    /// checked every `poll`.
    ///
    /// # Errors
    /// [`Error::Config`] if `poll` is zero.
    pub fn until_released(poll: Duration) -> Result<Timing, Error> {
        if poll.is_zero() {
            return Err(Error::config(
                "leader-election.retry-period: must be more than zero",
            ));
        }
        Ok(Timing {
            lease_duration: Duration::MAX,
            renew_deadline: None,
            poll,
            retry_after_error: poll.min(Duration::from_secs(1)),
        })
    }

    /// How long one attempt may take before it is abandoned as failed: past the renew
    /// deadline a renewal is worth nothing.
    pub(super) fn attempt_timeout(&self) -> Duration {
        self.renew_deadline
            .unwrap_or(self.poll)
            .max(Duration::from_secs(1))
    }
}

/// One lock, resolved from the configuration: what [`super::Leadership::start`] starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockSettings {
    /// The lock kind; [`LockKind::Dryrun`] without election or in a dry run.
    pub kind: LockKind,
    /// Name of the Lease or ConfigMap: `leader-election.id`. Empty for the kinds that have
    /// no lock object.
    pub name: String,
    /// Namespace of the lock object: the service account's namespace when running in a
    /// Pod, else `leader-election.namespace`, else `default`.
    pub namespace: String,
    /// This replica's identity: `leader-election.identity`, else `POD_NAME`, else the
    /// hostname; for the `for-life` lock the name of the operator's own Pod.
    pub identity: String,
    /// When to renew and when to give up.
    pub timing: Timing,
}

impl LockSettings {
    /// Resolve the lock the configuration asks for.
    ///
    /// ```
    /// use windlass::config::{LockStrategy, OperatorConfig};
    /// use windlass::runtime::leader::LockSettings;
    ///
    /// let mut config = OperatorConfig::default();
    /// config.leader_election.enabled = true;
    /// config.leader_election.lock = LockStrategy::ForLife;
    /// config.leader_election.id = "webapp-operator".into();
    /// # if std::env::var_os("POD_NAME").is_none() {
    /// let err = LockSettings::from_config(&config).unwrap_err();
    /// assert!(err.to_string().contains("POD_NAME"), "{err}");
    /// # }
    /// config.leader_election.identity = "webapp-operator-7d9f-x2x4q".into();
    /// let settings = LockSettings::from_config(&config).unwrap();
    /// assert_eq!(settings.name, "webapp-operator");
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] naming what is missing or impossible: a lock name for the Lease and
    /// the `for-life` lock, the Pod's name for `for-life` (the lock is owned by that Pod),
    /// an identity when there is no Pod name nor a hostname, durations the lock cannot work
    /// with (see [`Timing::for_lease`]).
    pub fn from_config(config: &OperatorConfig) -> Result<LockSettings, Error> {
        let mounted = crate::config::pod_namespace();
        let pod_name = std::env::var("POD_NAME").ok();
        resolve(
            config,
            mounted.as_deref(),
            pod_name.as_deref(),
            hostname().as_deref(),
        )
    }
}

/// [`LockSettings::from_config`] with what it reads from the Pod and the host passed in,
/// so the rules can be tested without either.
fn resolve(
    config: &OperatorConfig,
    mounted_namespace: Option<&str>,
    pod_name_env: Option<&str>,
    hostname: Option<&str>,
) -> Result<LockSettings, Error> {
    let election = &config.leader_election;
    let kind = config.lock_kind();
    let namespace = mounted_namespace
        .and_then(non_empty)
        .or_else(|| non_empty(&election.namespace))
        .unwrap_or_else(|| "default".to_string());
    let name = non_empty(&election.id).unwrap_or_default();
    let pod_name = non_empty(&election.identity).or_else(|| pod_name_env.and_then(non_empty));
    let identity = pod_name
        .clone()
        .or_else(|| hostname.and_then(|h| non_empty(h.split('.').next().unwrap_or(h))))
        .unwrap_or_default();
    let timing = timing_of(kind, election.lease_duration.0, election.retry_period.0)?;
    check_required_settings(kind, &name, pod_name.is_some(), &identity)?;
    Ok(LockSettings {
        kind,
        name,
        namespace,
        identity,
        timing,
    })
}

/// `s` trimmed, or `None` if nothing is left: a blank setting counts as unset.
fn non_empty(s: &str) -> Option<String> {
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The timing of a lock of `kind` with the configured lease `duration` and retry period
/// (`poll`). Each kind has its own rule for which durations can work, so this is where an
/// impossible pair is refused.
fn timing_of(kind: LockKind, duration: Duration, poll: Duration) -> Result<Timing, Error> {
    match kind {
        LockKind::Dryrun => Ok(Timing {
            lease_duration: duration,
            renew_deadline: None,
            poll,
            retry_after_error: poll,
        }),
        LockKind::LeaderWithLease | LockKind::Sharded => Timing::for_lease(duration, poll),
        LockKind::LeaderForLife => Timing::until_released(poll),
        LockKind::Annotation => {
            if duration.is_zero() {
                return Err(Error::config(
                    "leader-election.lease-duration: the per-cr-annotation lock needs a \
                     duration above zero",
                ));
            }
            Ok(Timing {
                lease_duration: duration,
                renew_deadline: None,
                poll,
                retry_after_error: poll,
            })
        }
    }
}

/// Refuse a lock of `kind` that lacks what it cannot work without: an object `name`, the
/// operator's own Pod name (`has_pod_name`), an `identity`. The error says what to set.
fn check_required_settings(
    kind: LockKind,
    name: &str,
    has_pod_name: bool,
    identity: &str,
) -> Result<(), Error> {
    let needs = |what: &str, how: &str| {
        Error::config(format!(
            "the {} lock (leader-election.lock) needs {what}: set {how}",
            kind_name(kind)
        ))
    };
    if matches!(
        kind,
        LockKind::LeaderWithLease | LockKind::LeaderForLife | LockKind::Sharded
    ) && name.is_empty()
    {
        return Err(needs(
            "a lock object name",
            "leader-election.id (--leader-election-id)",
        ));
    }
    if kind == LockKind::LeaderForLife && !has_pod_name {
        return Err(needs(
            "the name of the operator's own Pod, which owns the lock ConfigMap",
            "POD_NAME (e.g. from the downward API's metadata.name) or leader-election.identity",
        ));
    }
    if matches!(
        kind,
        LockKind::LeaderWithLease | LockKind::Annotation | LockKind::Sharded
    ) && identity.is_empty()
    {
        return Err(needs(
            "an identity unique among the replicas",
            "POD_NAME or leader-election.identity; there is no hostname to fall back on",
        ));
    }
    Ok(())
}

/// The lock kind as `leader-election.lock` spells it, for error messages.
fn kind_name(kind: LockKind) -> &'static str {
    match kind {
        LockKind::LeaderForLife => "for-life",
        LockKind::LeaderWithLease => "lease",
        LockKind::Annotation => "per-cr-annotation",
        LockKind::Sharded => "sharded (sharding.shards)",
        LockKind::Dryrun => "no",
    }
}

/// The host's name: `HOSTNAME`, else the kernel's (Linux). In a Pod both are the Pod's name.
fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::{ConfigDuration, LockStrategy};

    fn config(kind: LockKind) -> OperatorConfig {
        let mut config = OperatorConfig::default();
        config.leader_election.enabled = kind != LockKind::Dryrun;
        config.leader_election.lock = match kind {
            LockKind::LeaderForLife => LockStrategy::ForLife,
            LockKind::Annotation => LockStrategy::PerCrAnnotation,
            LockKind::LeaderWithLease | LockKind::Dryrun | LockKind::Sharded => LockStrategy::Lease,
        };
        if kind == LockKind::Sharded {
            config.sharding.shards = 4;
        }
        config
    }

    fn secs(s: f64) -> ConfigDuration {
        ConfigDuration(Duration::from_secs_f64(s))
    }

    #[test]
    fn dry_run_overrides_the_lock_kind() {
        let mut c = config(LockKind::LeaderWithLease);
        c.dry_run = true;
        assert_eq!(
            resolve(&c, None, None, None).unwrap().kind,
            LockKind::Dryrun
        );
    }

    #[test]
    fn the_mounted_namespace_wins_over_the_configured_and_the_identity_over_pod_name() {
        let mut c = config(LockKind::LeaderWithLease);
        c.leader_election.id = "op".into();
        c.leader_election.namespace = "configured".into();
        let s = resolve(&c, Some("mounted\n"), None, Some("host-1.example.com")).unwrap();
        assert_eq!(
            (s.name.as_str(), s.namespace.as_str(), s.identity.as_str()),
            ("op", "mounted", "host-1")
        );
        let s = resolve(&c, None, Some("pod-1"), Some("host-1")).unwrap();
        assert_eq!(
            (s.namespace.as_str(), s.identity.as_str()),
            ("configured", "pod-1")
        );
        c.leader_election.identity = "chosen".into();
        c.leader_election.namespace = String::new();
        let s = resolve(&c, None, Some("pod-1"), Some("host-1")).unwrap();
        assert_eq!(
            (s.namespace.as_str(), s.identity.as_str()),
            ("default", "chosen")
        );
    }

    #[test]
    fn impossible_combinations_are_config_errors_that_say_what_to_set() {
        let lease = config(LockKind::LeaderWithLease);
        let err = resolve(&lease, None, None, Some("h")).unwrap_err();
        assert!(err.to_string().contains("leader-election.id"), "{err}");

        let mut life = config(LockKind::LeaderForLife);
        life.leader_election.id = "op".into();
        let err = resolve(&life, None, None, Some("host-is-not-enough")).unwrap_err();
        assert!(matches!(err, Error::Config(_)));
        assert!(err.to_string().contains("POD_NAME"), "{err}");

        let mut anonymous = config(LockKind::Annotation);
        anonymous.leader_election.id = "op".into();
        let err = resolve(&anonymous, None, None, None).unwrap_err();
        assert!(err.to_string().contains("identity"), "{err}");

        // Shards are Leases named after the lock, held by a replica of its own name.
        let sharded = config(LockKind::Sharded);
        let err = resolve(&sharded, None, Some("pod-1"), None).unwrap_err();
        assert!(err.to_string().contains("leader-election.id"), "{err}");
        let mut sharded = sharded;
        sharded.leader_election.id = "op".into();
        let err = resolve(&sharded, None, None, None).unwrap_err();
        assert!(err.to_string().contains("identity"), "{err}");
        let s = resolve(&sharded, None, Some("pod-1"), None).unwrap();
        assert_eq!(
            (s.kind, s.timing.renew_deadline),
            (LockKind::Sharded, Some(Duration::from_secs(12)))
        );
    }

    #[test]
    fn lease_durations_are_whole_seconds_and_leave_room_for_renewals() {
        let mut c = config(LockKind::LeaderWithLease);
        c.leader_election.id = "op".into();
        c.leader_election.lease_duration = secs(2.4);
        c.leader_election.retry_period = secs(0.5);
        let t = resolve(&c, None, None, Some("h")).unwrap().timing;
        assert_eq!(t.lease_duration, Duration::from_secs(2));
        assert_eq!(t.renew_deadline, Some(Duration::from_millis(1600)));
        assert_eq!(t.retry_after_error, Duration::from_millis(400));

        c.leader_election.lease_duration = secs(0.4);
        assert!(resolve(&c, None, None, Some("h")).is_err());
        c.leader_election.lease_duration = secs(2.0);
        c.leader_election.retry_period = secs(1.6);
        assert!(resolve(&c, None, None, Some("h")).is_err());
        c.leader_election.retry_period = secs(0.0);
        assert!(resolve(&c, None, None, Some("h")).is_err());
    }

    #[test]
    fn the_defaults_work_for_every_kind() {
        for kind in [
            LockKind::LeaderWithLease,
            LockKind::LeaderForLife,
            LockKind::Annotation,
            LockKind::Sharded,
            LockKind::Dryrun,
        ] {
            let mut c = config(kind);
            c.leader_election.id = "op".into();
            let s = resolve(&c, None, Some("pod"), None).unwrap();
            assert_eq!(s.kind, kind);
        }
    }
}
