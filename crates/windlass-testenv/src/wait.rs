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
