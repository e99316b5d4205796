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
