//! Exponential back-off with an optional jitter (yaook's `ExponentialBackOff`).
//!
//! A [`BackOffPolicy`] is the immutable shape of a back-off: where it starts, the factor it grows
//! by, where it stops, and how much jitter to add. An [`ExponentialBackOff`] is one running
//! sequence of delays drawn from a policy: it remembers how far it got, can be [reset], and says
//! whether it is [failing].
//!
//! ```
//! use std::time::Duration;
//! use windlass_tasks::backoff::{BackOffPolicy, ExponentialBackOff};
//!
//! let policy = BackOffPolicy::new(Duration::from_millis(500), 2.0, Duration::from_secs(2))?;
//! let mut backoff = ExponentialBackOff::new(policy);
//! assert!(!backoff.is_failing());
//! let delays: Vec<_> = backoff.by_ref().take(5).collect();
//! assert_eq!(delays, [500, 1000, 2000, 2000, 2000].map(Duration::from_millis));
//! assert!(backoff.is_failing());
//! backoff.reset();
//! assert!(!backoff.is_failing());
//! assert_eq!(backoff.next_delay(), Duration::from_millis(500));
//! # Ok::<(), windlass_tasks::backoff::BackOffError>(())
//! ```
//!
//! # Decisions where the seed is silent
//!
//! * **Is a new back-off "failing"?** The seed (yaook's `ExponentialBackOff` docs) says of the
//!   flag: *"Returns true if the iterator has been iterated since the last call to reset() or
//!   if the iterator was just created."* — so a new back-off would be failing. The same docs
//!   describe `reset()` as *"Reset the back-off to its initial state and clear failing"*, so
//!   the initial state would not be failing; the two sentences contradict each other. Here a new
//!   back-off is **not** failing: [`is_failing`] is true exactly when a delay was drawn since
//!   creation or the last [`reset`], and a new back-off equals a reset one. Why: a back-off
//!   that has never been used has seen no failure; the flag exists to tell "backing off after
//!   failures" apart from "fine all along" (the task queue's `failing` count and its
//!   back-off rule for failing keys rest on it), and true-on-creation would count every new
//!   key as failing. Pinned by the tests `fresh_backoff_is_not_failing_and_reset_clears_it`
//!   and `a_fresh_back_off_equals_a_reset_one`.
//! * **The first value above `max` is clamped to `max`** rather than returned once.
//! * **`max` is a hard upper bound, jitter included.** A jittered delay is
//!   `d · (1 + jitter · u)` with `u` uniform in `[-1, 1)`, then capped at `max`. So a caller that
//!   asked for "at most 120 s" never waits longer, and at the cap the jitter only shortens.
//!
//! # Why hand-written
//!
//! `backon` (which kube-runtime uses) produces retry delays for one operation, but the task
//! queue needs a back-off *state* per key that costs a few bytes, lives inside the queue's own
//! map, and resets when that key succeeds; the queue stores a [`BackOffPolicy`] once and an
//! [`ExponentialBackOff`]'s small state per key. Owning the arithmetic also lets the bounds
//! below be stated exactly and checked by property tests.
//!
//! [reset]: ExponentialBackOff::reset
//! [`reset`]: ExponentialBackOff::reset
//! [failing]: ExponentialBackOff::is_failing
//! [`is_failing`]: ExponentialBackOff::is_failing

use std::time::Duration;

use rand::{Rng, RngExt};

/// Why a [`BackOffPolicy`] could not be built. Each variant names the offending value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackOffError {
    /// `start` was zero.
    #[error(
        "back-off start must be greater than zero (got 0); use a positive duration such as 500ms"
    )]
    ZeroStart,
    /// `base` was below 1, infinite or NaN.
    #[error(
        "back-off base must be a finite factor >= 1.0 (got {0}); 2.0 doubles the delay after each failure"
    )]
    InvalidBase(f64),
    /// `max` was below `start`.
    #[error("back-off max ({max:?}) must not be smaller than start ({start:?})")]
    MaxBelowStart {
        /// The start value given.
        start: Duration,
        /// The max value given.
        max: Duration,
    },
    /// The jitter ratio was outside `[0, 1)` or NaN.
    #[error("jitter must be a ratio in [0, 1) (got {0}); 0.1 spreads delays by +/-10%")]
    InvalidJitter(f64),
}

/// The shape of an exponential back-off: `start`, growing by `base` per failure up to `max`,
/// optionally spread by a `jitter` ratio.
///
/// The [`Default`] is yaook's task-queue policy: start 0.5 s, base 2, max 120 s, jitter 0.1.
///
/// Bounds that hold for every policy (and are property-tested):
/// * `start <= delay(n) <= max`, and `delay(n + 1) >= delay(n)`;
/// * a jittered delay `j` of an un-jittered `d` satisfies `d·(1 − jitter) <= j <= min(d·(1 + jitter), max)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackOffPolicy {
    start: Duration,
    base: f64,
    max: Duration,
    jitter: f64,
}

impl Default for BackOffPolicy {
    fn default() -> Self {
        Self {
            start: Duration::from_millis(500),
            base: 2.0,
            max: Duration::from_secs(120),
            jitter: 0.1,
        }
    }
}

impl BackOffPolicy {
    /// A policy without jitter: delays `start`, `start·base`, `start·base²`, … capped at `max`.
    ///
    /// # Errors
    /// [`BackOffError`] if `start` is zero, `base` is not a finite number `>= 1`, or
    /// `max < start`.
    pub fn new(start: Duration, base: f64, max: Duration) -> Result<Self, BackOffError> {
        if start.is_zero() {
            return Err(BackOffError::ZeroStart);
        }
        if !base.is_finite() || base < 1.0 {
            return Err(BackOffError::InvalidBase(base));
        }
        if max < start {
            return Err(BackOffError::MaxBelowStart { start, max });
        }
        Ok(Self {
            start,
            base,
            max,
            jitter: 0.0,
        })
    }

    /// The same policy with a jitter ratio: each delay is spread uniformly by `± ratio`
    /// (0.1 means ±10 %) and then capped at `max`.
    ///
    /// # Errors
    /// [`BackOffError::InvalidJitter`] unless `0 <= ratio < 1`.
    pub fn with_jitter(mut self, ratio: f64) -> Result<Self, BackOffError> {
        if !(0.0..1.0).contains(&ratio) {
            return Err(BackOffError::InvalidJitter(ratio));
        }
        self.jitter = ratio;
        Ok(self)
    }

    /// The first delay.
    pub const fn start(&self) -> Duration {
        self.start
    }

    /// The factor by which the delay grows after each failure.
    pub const fn base(&self) -> f64 {
        self.base
    }

    /// The largest delay ever handed out, jitter included.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The jitter ratio (0 when there is none).
    pub const fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The delay that follows `previous` (or `start` when there is none), before jitter.
    ///
    /// Never smaller than `previous` or `start`, never larger than `max`.
    pub fn step(&self, previous: Option<Duration>) -> Duration {
        let Some(previous) = previous else {
            return self.start;
        };
        let grown =
            Duration::try_from_secs_f64(previous.as_secs_f64() * self.base).unwrap_or(self.max);
        grown.max(previous).clamp(self.start, self.max)
    }

    /// Applies the jitter for a given point `unit` of `[-1, 1]` (values outside are clamped):
    /// `delay · (1 + jitter · unit)`, capped at `max`. [`jittered`](Self::jittered) draws `unit`
    /// at random; this form exists so the arithmetic can be checked without randomness.
    pub fn jitter_at(&self, delay: Duration, unit: f64) -> Duration {
        if self.jitter == 0.0 {
            return delay.min(self.max);
        }
        let unit = if unit.is_nan() {
            0.0
        } else {
            unit.clamp(-1.0, 1.0)
        };
        let factor = 1.0 + self.jitter * unit;
        Duration::try_from_secs_f64(delay.as_secs_f64() * factor)
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// `delay` spread by a random jitter drawn from `rng` (see [`jitter_at`](Self::jitter_at)).
    pub fn jittered<R: Rng + ?Sized>(&self, delay: Duration, rng: &mut R) -> Duration {
        if self.jitter == 0.0 {
            return delay.min(self.max);
        }
        self.jitter_at(delay, rng.random_range(-1.0..1.0))
    }
}

/// One running exponential back-off drawn from a [`BackOffPolicy`].
///
/// It is an endless [`Iterator`] of un-jittered delays (yaook's iterable form);
/// [`next_jittered`](Self::next_jittered) draws the next delay with the policy's jitter applied.
/// See the [module docs](self) for an example and for the meaning of [`is_failing`](Self::is_failing).
#[derive(Debug, Clone, PartialEq)]
pub struct ExponentialBackOff {
    policy: BackOffPolicy,
    state: BackOffState,
}

impl ExponentialBackOff {
    /// A fresh back-off: not failing, its first delay is the policy's `start`.
    pub const fn new(policy: BackOffPolicy) -> Self {
        Self {
            policy,
            state: BackOffState::new(),
        }
    }

    /// The policy this back-off draws from.
    pub const fn policy(&self) -> &BackOffPolicy {
        &self.policy
    }

    /// The next delay without jitter; marks the back-off as failing.
    pub fn next_delay(&mut self) -> Duration {
        self.state.advance(&self.policy)
    }

    /// The next delay with the policy's jitter applied (thread-local random numbers).
    pub fn next_jittered(&mut self) -> Duration {
        let delay = self.next_delay();
        self.policy.jittered(delay, &mut rand::rng())
    }

    /// Back to the initial state: the next delay is `start` again and the back-off is not failing.
    pub fn reset(&mut self) {
        self.state = BackOffState::new();
    }

    /// Whether a delay was drawn since creation or the last [`reset`](Self::reset): `false`
    /// for a new back-off.
    ///
    /// The seed says this flag is also true "if the iterator was just created", yet that
    /// `reset()` restores the initial state and clears the flag; this crate follows the latter,
    /// so a new back-off and a reset one are the same. See the [module docs](self) for why.
    pub const fn is_failing(&self) -> bool {
        self.state.is_failing()
    }

    /// How many delays were drawn since creation or the last [`reset`](Self::reset).
    pub const fn attempts(&self) -> u32 {
        self.state.attempts
    }
}

impl Iterator for ExponentialBackOff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}

/// The mutable part of a back-off, kept apart from the policy so a queue can hold one per key
/// and the policy once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BackOffState {
    last: Option<Duration>,
    attempts: u32,
}

impl BackOffState {
    pub(crate) const fn new() -> Self {
        Self {
            last: None,
            attempts: 0,
        }
    }

    pub(crate) fn advance(&mut self, policy: &BackOffPolicy) -> Duration {
        let delay = policy.step(self.last);
        self.last = Some(delay);
        self.attempts = self.attempts.saturating_add(1);
        delay
    }

    pub(crate) const fn is_failing(&self) -> bool {
        self.last.is_some()
    }

    pub(crate) const fn attempts(&self) -> u32 {
        self.attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(start_ms: u64, base: f64, max_ms: u64) -> BackOffPolicy {
        match BackOffPolicy::new(
            Duration::from_millis(start_ms),
            base,
            Duration::from_millis(max_ms),
        ) {
            Ok(p) => p,
            Err(e) => panic!("test policy rejected: {e}"),
        }
    }

    #[test]
    fn yields_start_then_grows_then_sticks_at_max() {
        let mut b = ExponentialBackOff::new(policy(500, 2.0, 120_000));
        let got: Vec<u64> = b.by_ref().take(11).map(|d| d.as_millis() as u64).collect();
        assert_eq!(
            got,
            [
                500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 120_000, 120_000, 120_000
            ]
        );
        assert_eq!(b.attempts(), 11);
    }

    #[test]
    fn base_one_is_constant() {
        let mut b = ExponentialBackOff::new(policy(700, 1.0, 5000));
        assert!(b.by_ref().take(50).all(|d| d == Duration::from_millis(700)));
    }

    #[test]
    fn fresh_backoff_is_not_failing_and_reset_clears_it() {
        let mut b = ExponentialBackOff::new(BackOffPolicy::default());
        assert!(!b.is_failing());
        assert_eq!(b.attempts(), 0);
        b.next_delay();
        assert!(b.is_failing());
        b.next_delay();
        b.reset();
        assert!(!b.is_failing());
        assert_eq!(b.next_delay(), Duration::from_millis(500));
    }

    #[test]
    fn a_fresh_back_off_equals_a_reset_one() {
        let p = policy(500, 2.0, 120_000);
        let fresh = ExponentialBackOff::new(p);
        let mut used = ExponentialBackOff::new(p);
        used.by_ref().take(5).for_each(drop);
        assert!(used.is_failing());
        used.reset();
        assert_eq!(used, fresh);
        assert!(
            !fresh.is_failing(),
            "the seed's 'true if just created' is not followed"
        );
    }

    #[test]
    fn default_is_yaook_task_queue_policy() {
        let p = BackOffPolicy::default();
        assert_eq!(p.start(), Duration::from_millis(500));
        assert_eq!(p.base(), 2.0);
        assert_eq!(p.max(), Duration::from_secs(120));
        assert_eq!(p.jitter(), 0.1);
    }

    #[test]
    fn rejects_bad_input_with_clear_errors() {
        let s = Duration::from_secs(1);
        assert_eq!(
            BackOffPolicy::new(Duration::ZERO, 2.0, s),
            Err(BackOffError::ZeroStart)
        );
        assert!(matches!(
            BackOffPolicy::new(s, 0.5, s),
            Err(BackOffError::InvalidBase(_))
        ));
        assert!(matches!(
            BackOffPolicy::new(s, f64::NAN, s),
            Err(BackOffError::InvalidBase(_))
        ));
        assert!(matches!(
            BackOffPolicy::new(s, f64::INFINITY, s),
            Err(BackOffError::InvalidBase(_))
        ));
        assert_eq!(
            BackOffPolicy::new(s, 2.0, Duration::from_millis(10)),
            Err(BackOffError::MaxBelowStart {
                start: s,
                max: Duration::from_millis(10)
            })
        );
        let p = policy(1, 2.0, 10);
        assert!(matches!(
            p.with_jitter(1.0),
            Err(BackOffError::InvalidJitter(_))
        ));
        assert!(matches!(
            p.with_jitter(-0.1),
            Err(BackOffError::InvalidJitter(_))
        ));
        assert!(matches!(
            p.with_jitter(f64::NAN),
            Err(BackOffError::InvalidJitter(_))
        ));
        let msg = BackOffError::InvalidJitter(2.0).to_string();
        assert!(msg.contains("[0, 1)"), "{msg}");
    }

    #[test]
    fn huge_values_saturate_at_max_instead_of_panicking() {
        let p = match BackOffPolicy::new(Duration::from_secs(1), 1e300, Duration::MAX) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let mut b = ExponentialBackOff::new(p);
        assert_eq!(b.next_delay(), Duration::from_secs(1));
        assert_eq!(b.next_delay(), Duration::MAX);
        assert_eq!(b.next_delay(), Duration::MAX);
        let j = match p.with_jitter(0.5) {
            Ok(j) => j,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(j.jitter_at(Duration::MAX, 1.0), Duration::MAX);
    }

    #[test]
    fn jitter_at_the_cap_only_shortens() {
        let p = match policy(1000, 2.0, 4000).with_jitter(0.25) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            p.jitter_at(Duration::from_secs(4), 1.0),
            Duration::from_secs(4)
        );
        assert_eq!(
            p.jitter_at(Duration::from_secs(4), -1.0),
            Duration::from_secs(3)
        );
        assert_eq!(
            p.jitter_at(Duration::from_secs(2), 1.0),
            Duration::from_millis(2500)
        );
    }
}
