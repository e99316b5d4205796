//! Waiting for an object to reach a state, with a deadline and an error that shows what the
//! object looked like when time ran out.

use std::fmt::Debug;
use std::time::Duration;

use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Waits (watching, not polling) until the object `name` satisfies `condition`, for at most
/// `timeout`. Returns the object as it was when the condition held (`None` if the condition
/// accepted a missing object). Conditions from [`kube::runtime::conditions`] work, as does any
/// `Fn(Option<&K>) -> bool`.
///
/// # Errors
/// [`Error::Timeout`] with the object's last state (status included) if time runs out (and a
/// note if a [`TestEnv`](crate::TestEnv) of this process broke meanwhile);
/// [`Error::Watch`] at once if the watch fails — e.g. the kind is not served (a CRD that is not
/// registered), access is forbidden, or the API server is unreachable; nothing retries it.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    condition: impl Condition<K>,
) -> Result<Option<K>>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(object)) => Ok(object),
        Ok(Err(source)) => Err(Error::Watch {
            what: format!("{} {name}", K::kind(&K::DynamicType::default())),
            source,
        }),
        Err(_) => {
            let last = match api.get_opt(name).await {
                Ok(Some(mut object)) => {
                    object.meta_mut().managed_fields = None;
                    serde_json::to_string_pretty(&object)
                        .unwrap_or_else(|e| format!("(unprintable: {e})"))
                }
                Ok(None) => "(it does not exist)".to_string(),
                Err(e) => format!("(could not read it: {e})"),
            };
            let mut details = format!("; last seen:\n{last}");
            for note in crate::env::broken_environments() {
                details.push_str(&format!("\nnote: windlass-testenv: {note}"));
            }
            Err(Error::Timeout {
                what: format!("{} {name}", K::kind(&K::DynamicType::default())),
                after: timeout,
                details,
            })
        }
    }
}

/// How long [`eventually`] waits.
pub const EVENTUALLY: Duration = Duration::from_secs(60);

/// Polls `check` every 200 ms until it holds, for at most [`EVENTUALLY`]; panics naming
/// `what` when time runs out. For the conditions of a test that no single object's watch
/// can express (an operator's metrics, several objects, a store of the code under test).
///
/// # Panics
/// When `check` has not held within [`EVENTUALLY`]: this is a test helper.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_within(what, EVENTUALLY, check).await;
}

/// [`eventually`] with a deadline of `limit`.
///
/// # Panics
/// When `check` has not held within `limit`.
pub async fn eventually_within<F, Fut>(what: &str, limit: Duration, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks that `still` holds throughout `window` (polled every 100 ms, and once more at its
/// end); panics naming `what` the moment it does not.
///
/// For claims of absence ("no second reconcile", "the follower writes nothing"): no event
/// confirms that something did not happen, so absence can only be checked over a window,
/// and the check means something only if
///
/// - the caller has first awaited a positive event showing the system is live and past the
///   point where the unwanted thing would be set off (otherwise a stalled system passes),
///   and
/// - the window is longer than the unwanted thing would take to show; say at the call why.
///
/// # Panics
/// When `still` is false at some poll within the window: this is a test helper.
pub async fn quiet_window<F, Fut>(what: &str, window: Duration, still: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    let end = start + window;
    loop {
        assert!(
            still().await,
            "{what}: broken {:?} into the {window:?} window",
            start.elapsed()
        );
        let now = tokio::time::Instant::now();
        if now >= end {
            return;
        }
        tokio::time::sleep((end - now).min(Duration::from_millis(100))).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_quiet_window_checks_at_its_start_and_its_end() {
        let checks = AtomicUsize::new(0);
        quiet_window("nothing happens", Duration::from_millis(250), || async {
            checks.fetch_add(1, Ordering::SeqCst);
            true
        })
        .await;
        assert!(checks.load(Ordering::SeqCst) >= 2);
    }

    #[tokio::test]
    #[should_panic(expected = "no second reconcile: broken")]
    async fn a_quiet_window_fails_the_moment_its_condition_breaks() {
        let checks = AtomicUsize::new(0);
        // Breaks at the third check, long before the minute is up.
        quiet_window("no second reconcile", Duration::from_secs(60), || async {
            checks.fetch_add(1, Ordering::SeqCst) < 2
        })
        .await;
    }
}
