//! Property tests for the back-off bounds, jitter range and reset.

use std::time::Duration;

use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use windlass_tasks::backoff::{BackOffPolicy, ExponentialBackOff};

/// Up to one day in nanoseconds, start <= max, base in [1, 10], jitter in [0, 1).
fn policies() -> impl Strategy<Value = BackOffPolicy> {
    (
        1u64..86_400_000_000_000,
        1.0f64..10.0,
        0u64..86_400_000_000_000,
        0.0f64..0.999,
    )
        .prop_map(|(start, base, extra, jitter)| {
            let start = Duration::from_nanos(start);
            let max = start + Duration::from_nanos(extra);
            match BackOffPolicy::new(start, base, max).and_then(|p| p.with_jitter(jitter)) {
                Ok(p) => p,
                Err(e) => panic!("generated an invalid policy: {e}"),
            }
        })
}

proptest! {
    #[test]
    fn delays_start_at_start_grow_monotonically_and_never_exceed_max(
        policy in policies(),
        n in 1usize..200,
    ) {
        let mut backoff = ExponentialBackOff::new(policy);
        let delays: Vec<Duration> = backoff.by_ref().take(n).collect();
        prop_assert_eq!(delays[0], policy.start());
        for pair in delays.windows(2) {
            prop_assert!(pair[1] >= pair[0], "{:?} then {:?}", pair[0], pair[1]);
        }
        for d in &delays {
            prop_assert!(*d >= policy.start() && *d <= policy.max());
        }
        prop_assert_eq!(backoff.attempts() as usize, n);
    }

    #[test]
    fn growth_is_by_base_until_the_cap(policy in policies(), n in 1usize..60) {
        let mut backoff = ExponentialBackOff::new(policy);
        let delays: Vec<Duration> = backoff.by_ref().take(n).collect();
        for pair in delays.windows(2) {
            let expected = (pair[0].as_secs_f64() * policy.base()).min(policy.max().as_secs_f64());
            let got = pair[1].as_secs_f64();
            prop_assert!(
                (got - expected).abs() <= expected * 1e-9 + 1e-9,
                "after {:?} expected {expected}s, got {got}s", pair[0]
            );
        }
    }

    #[test]
    fn the_cap_is_reached_and_kept(policy in policies()) {
        prop_assume!(policy.base() >= 1.1);
        let mut backoff = ExponentialBackOff::new(policy);
        // With base >= 1.1 any start reaches any max within a few hundred steps.
        let mut reached = false;
        for _ in 0..1000 {
            if backoff.next_delay() == policy.max() {
                reached = true;
                break;
            }
        }
        prop_assert!(reached);
        for _ in 0..10 {
            prop_assert_eq!(backoff.next_delay(), policy.max());
        }
    }

    #[test]
    fn jitter_stays_in_its_band_and_under_max(policy in policies(), seed in any::<u64>(), n in 1usize..40) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut backoff = ExponentialBackOff::new(policy);
        for _ in 0..n {
            let d = backoff.next_delay();
            let j = policy.jittered(d, &mut rng);
            let lo = d.as_secs_f64() * (1.0 - policy.jitter());
            let hi = (d.as_secs_f64() * (1.0 + policy.jitter())).min(policy.max().as_secs_f64());
            let got = j.as_secs_f64();
            prop_assert!(got >= lo - 1e-9 * lo.max(1.0) && got <= hi + 1e-9 * hi.max(1.0),
                "jittered {got}s outside [{lo}, {hi}] for {d:?}");
            prop_assert!(j <= policy.max());
        }
    }

    #[test]
    fn jitter_at_covers_the_band_edges(policy in policies(), unit in -1.0f64..=1.0) {
        let d = policy.start();
        let j = policy.jitter_at(d, unit).as_secs_f64();
        let expected = (d.as_secs_f64() * (1.0 + policy.jitter() * unit)).min(policy.max().as_secs_f64());
        prop_assert!((j - expected).abs() <= expected * 1e-9 + 1e-9);
    }

    #[test]
    fn reset_restores_the_initial_state(policy in policies(), n in 0usize..100) {
        let fresh = ExponentialBackOff::new(policy);
        let mut used = fresh.clone();
        for _ in 0..n {
            used.next_delay();
        }
        prop_assert_eq!(used.is_failing(), n > 0);
        used.reset();
        prop_assert_eq!(&used, &fresh);
        prop_assert!(!used.is_failing());
        prop_assert_eq!(used.next_delay(), policy.start());
    }
}

#[test]
fn jitter_spreads_both_ways() {
    let policy = match BackOffPolicy::new(Duration::from_secs(10), 2.0, Duration::from_secs(100))
        .and_then(|p| p.with_jitter(0.1))
    {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let mut rng = SmallRng::seed_from_u64(7);
    let samples: Vec<f64> = (0..1000)
        .map(|_| {
            policy
                .jittered(Duration::from_secs(10), &mut rng)
                .as_secs_f64()
        })
        .collect();
    let below = samples.iter().filter(|s| **s < 9.5).count();
    let above = samples.iter().filter(|s| **s > 10.5).count();
    assert!(
        below > 100 && above > 100,
        "jitter is one-sided: {below} below, {above} above"
    );
}
