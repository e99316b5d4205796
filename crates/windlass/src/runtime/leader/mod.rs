//! Which replica may start reconciles.
//!
//! Several replicas of an operator may run at once; leader election makes sure that only
//! one of them writes, or (with the annotation lock) only one per CR. The runtime asks a
//! [`Leadership`] before it **starts** each reconcile and watches it to stop taking work
//! the moment leadership is lost.
//!
//! # The locks
//!
//! Chosen by `leader-election.enabled` and `leader-election.lock` ([`LockKind`]), resolved by
//! [`LockSettings::from_config`] and started by [`Leadership::start`]:
//!
//! | kind | lock object | taken over when | module |
//! |------|-------------|-----------------|--------|
//! | `lease` | a `coordination.k8s.io/v1` Lease | the holder stops renewing for the lease duration | [`LeaseLock`] |
//! | `for-life` | a ConfigMap owned by the leader's Pod | the Pod is deleted (garbage collection removes the ConfigMap) | [`LifeLock`] |
//! | `per-cr-annotation` | two annotations on each CR | the holder's reconcile of the CR ends (it gives the lock up), or it stops renewing the lock for the lease duration | [`AnnotationLock`] |
//! | sharded (`sharding.shards`) | a Lease per shard | as `lease`, shard by shard | `runtime::shard` |
//! | election off | none | never: every replica leads | — |
//!
//! The two replica-wide locks are [`RenewedLock`]s driven by one renew loop
//! ([`Leadership::elect`]): an attempt every `leader-election.retry-period`, sooner after a failed
//! request.
//!
//! # Stepping down before the others take over
//!
//! A Lease holder that cannot renew must stop starting reconciles **before** the other
//! replicas consider its lease expired, or two replicas write at once. The renew loop
//! therefore counts the validity of a renewal from the moment the attempt *started* (the
//! `renewTime` it writes is no earlier) and gives up leadership at
//!
//! ```text
//! attempt start + renew deadline,   renew deadline = lease duration − lease duration / 5
//! ```
//!
//! the role of client-go's `RenewDeadline`; the fifth of the lease left over absorbs clock
//! skew between replicas and the time between the runtime's check and a reconcile's first
//! write. [`Leadership::is_leader`] compares that instant with the clock on every call, so
//! it is exact even if the renew task is late; the [`watch`](Leadership::watch) channel
//! turns false at the same instant. `lock.poll_time` must be shorter than the renew
//! deadline ([`Timing::for_lease`] refuses other values), and a failed attempt is retried
//! after a quarter of the deadline at most, so one lost request does not cost leadership.
//!
//! # Why the Lease logic is written here
//!
//! `kube-lease-manager` 0.13 does build on kube 5 and k8s-openapi 0.29, but it does not fit:
//! its watch channel stays `true` while renewals fail (it logs and backs off up to 30 s), so
//! a replica cut off from the API server keeps leading after its lease expired elsewhere;
//! and it takes an expired lease over with an unconditional patch (clear, then apply), so
//! a slow replica can clear a lease another replica has just taken. The lease rules fit
//! in one pure function (`next_lease`) and two requests guarded by the
//! resourceVersion, which is less code than adapting the crate around both problems.
//!
//! # Shutdown
//!
//! [`Leadership::shutdown`] steps down at once, stops the renew loop and hands the lock
//! over (clears the Lease's holder, deletes the leader-for-life ConfigMap), so another
//! replica takes over at its next attempt instead of after the lease duration. Call it
//! after the in-flight reconciles finished. Dropping every handle without it stops the
//! renewals but leaves the lock to expire.

mod annotation;
mod elector;
mod lease;
mod life;
mod settings;

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

pub use annotation::AnnotationLock;
pub use elector::{Attempt, RenewedLock};
pub use lease::LeaseLock;
pub use life::LifeLock;
pub use settings::{LockSettings, Timing};

use crate::cluster::Cluster;
pub use crate::config::LockKind;
use crate::error::{ClusterError, Error};
use crate::object::ObjectRef;

/// A lock operation that could not find out or change who holds the lock. The caller
/// treats it as "not now" and tries again; the renew loop logs it and retries.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done, naming the lock object.
        what: String,
        /// The kube-rs error.
        #[source]
        source: Box<kube::Error>,
    },
    /// A request through the [`Cluster`] failed (annotation lock).
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The API server did not answer in time.
    #[error("{what} did not finish within {after:?}")]
    Timeout {
        /// What was being done.
        what: String,
        /// How long it was given.
        after: std::time::Duration,
    },
    /// The renew task ended abnormally (it panicked or was cancelled).
    #[error("the leader-election task ended abnormally: {0}")]
    Task(String),
}

impl LockError {
    pub(crate) fn api(what: impl Into<String>, source: kube::Error) -> Self {
        LockError::Api {
            what: what.into(),
            source: Box::new(source),
        }
    }
}

/// This replica's leadership: whether it may start reconciles, globally and per CR.
///
/// Cheap to clone; every clone observes the same state. Created by [`Leadership::start`]
/// from the configuration, or directly by [`Leadership::always`], [`Leadership::elect`]
/// and [`Leadership::per_object`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use windlass::runtime::leader::Leadership;
///
/// let leadership = Leadership::always(); // --dry-run
/// assert!(leadership.is_leader());
/// let mut changes = leadership.watch();
/// assert!(*changes.borrow_and_update());
/// leadership.wait_until_leader().await;
/// leadership.shutdown().await.unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct Leadership {
    inner: Arc<Inner>,
}

enum Inner {
    /// Dry-run: every replica leads; nothing is requested.
    Always { leader: watch::Sender<bool> },
    /// A replica-wide lock kept by the renew loop.
    Elected(elector::Elector),
    /// Active-active: a lock per CR, none globally.
    PerObject {
        lock: AnnotationLock,
        leader: watch::Sender<bool>,
    },
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &*self.inner {
            Inner::Always { .. } => "always",
            Inner::Elected(_) => "elected",
            Inner::PerObject { .. } => "per-object",
        };
        f.debug_struct("Leadership")
            .field("kind", &kind)
            .field("is_leader", &self.is_leader())
            .finish()
    }
}

impl Leadership {
    /// Start the lock `settings` chose: the Lease or leader-for-life renew loop (spawned on
    /// the current tokio runtime), the annotation lock over `cluster`, or dry-run.
    ///
    /// # Errors
    /// [`Error::Config`] if leader-for-life cannot read the operator's own Pod (it must
    /// exist: the lock is owned by it); [`Error::Cluster`] if reading it failed otherwise
    /// (retry).
    pub async fn start(
        settings: &LockSettings,
        client: kube::Client,
        cluster: Arc<dyn Cluster>,
    ) -> Result<Leadership, Error> {
        Ok(match settings.kind {
            // Every replica runs; the shards' Leases are held by `runtime::shard`.
            LockKind::Dryrun | LockKind::Sharded => Leadership::always(),
            LockKind::LeaderWithLease => Leadership::elect(
                LeaseLock::new(
                    client,
                    &settings.namespace,
                    &settings.name,
                    &settings.identity,
                    settings.timing.lease_duration,
                ),
                settings.timing,
            ),
            LockKind::LeaderForLife => Leadership::elect(
                LifeLock::new(
                    client,
                    &settings.namespace,
                    &settings.name,
                    &settings.identity,
                )
                .await?,
                settings.timing,
            ),
            LockKind::Annotation => Leadership::per_object(AnnotationLock::new(
                cluster,
                &settings.identity,
                settings.timing.lease_duration,
            )),
        })
    }

    /// Dry-run leadership: always leader, globally and of every object; no requests.
    pub fn always() -> Leadership {
        Leadership {
            inner: Arc::new(Inner::Always {
                leader: watch::Sender::new(true),
            }),
        }
    }

    /// Keep `lock` with the renew loop, spawned on the current tokio runtime: an attempt
    /// every `timing.poll`, leadership given up at the renew deadline after the last
    /// successful attempt (see the module documentation).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn elect(lock: impl RenewedLock, timing: Timing) -> Leadership {
        Leadership {
            inner: Arc::new(Inner::Elected(elector::Elector::spawn(lock, timing))),
        }
    }

    /// Active-active replicas: no global leader (every replica may start reconciles), each
    /// CR locked with `lock` ([`Leadership::acquire`]).
    pub fn per_object(lock: AnnotationLock) -> Leadership {
        Leadership {
            inner: Arc::new(Inner::PerObject {
                lock,
                leader: watch::Sender::new(true),
            }),
        }
    }

    /// Whether this replica may start reconciles now. For the Lease,
    /// false from the renew deadline on, even if the renew task has not run since.
    pub fn is_leader(&self) -> bool {
        match &*self.inner {
            Inner::Always { .. } | Inner::PerObject { .. } => true,
            Inner::Elected(elector) => elector.is_leader(),
        }
    }

    /// Leadership changes: `true` while leader. The runtime stops starting reconciles when
    /// it turns `false`; [`Leadership::is_leader`] stays the authority at the moment of
    /// starting one.
    pub fn watch(&self) -> watch::Receiver<bool> {
        match &*self.inner {
            Inner::Always { leader } | Inner::PerObject { leader, .. } => leader.subscribe(),
            Inner::Elected(elector) => elector.watch(),
        }
    }

    /// Wait until this replica leads. Returns at once if it does; never returns on a
    /// replica that keeps losing, so race it with shutdown.
    pub async fn wait_until_leader(&self) {
        let mut changes = self.watch();
        loop {
            if *changes.borrow_and_update() && self.is_leader() {
                return;
            }
            if changes.changed().await.is_err() {
                // The renew loop is gone; leadership cannot come back.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Take or renew this replica's lock on one object before reconciling it. With the
    /// annotation lock this reads the object and writes its lock annotations; with the
    /// other locks it is [`Leadership::is_leader`].
    ///
    /// `Ok(false)`: another replica holds the object (or it does not exist); leave its
    /// request pending and try again later.
    ///
    /// # Errors
    /// [`LockError`] if the object could not be read or its lock written.
    pub async fn acquire(&self, object: &ObjectRef) -> Result<bool, LockError> {
        match &*self.inner {
            Inner::PerObject { lock, .. } => lock.acquire(object).await,
            _ => Ok(self.is_leader()),
        }
    }

    /// Give up this replica's lock on one object, if it holds it; a no-op for the other
    /// locks. The runtime does it when each reconcile ends, and for every lock still held
    /// at shutdown ([`Leadership::shutdown`]).
    ///
    /// # Errors
    /// [`LockError`] if the object could not be read or its annotations removed.
    pub async fn release(&self, object: &ObjectRef) -> Result<(), LockError> {
        match &*self.inner {
            Inner::PerObject { lock, .. } => lock.release(object).await,
            _ => Ok(()),
        }
    }

    /// Whether this replica holds the lock of `object` (a manifest as the runtime's cache
    /// has it) and the lock is still valid; for the other locks, [`Leadership::is_leader`].
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn holds(&self, object: &Value) -> bool {
        match &*self.inner {
            Inner::PerObject { lock, .. } => lock.holds(object),
            _ => self.is_leader(),
        }
    }

    /// Step down and hand the replica-wide lock over: leadership turns false at once, the
    /// renew loop stops and the lock is released, so another replica can take over without
    /// waiting for the lease to expire. Call it once the in-flight reconciles finished.
    /// Later calls (from any clone) do nothing. With per-object locks, every lock this
    /// replica took is given up, so the other replicas take its CRs over at once.
    ///
    /// # Errors
    /// [`LockError`] if the release request failed; the lock then expires on its own.
    pub async fn shutdown(&self) -> Result<(), LockError> {
        match &*self.inner {
            Inner::Elected(elector) => elector.shutdown().await,
            Inner::PerObject { lock, .. } => lock.release_all().await,
            Inner::Always { .. } => Ok(()),
        }
    }
}
