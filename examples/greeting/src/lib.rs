//! # The Greeting operator: the smallest useful windlass operator
//!
//! A `Greeting` custom resource becomes three ConfigMaps, applied in order, and a `Ready`
//! condition once all three are there:
//!
//! ```text
//! <greeting>-message  ──▶  <greeting>-shout  ──▶  <greeting>-index
//! ```
//!
//! The same operator, written by hand with kube-rs, is `tests/fixtures/kube_rs.rs`; both
//! pass the same tests on a real control plane (`tests/support/behaviour.rs`). windlass
//! carries what the hand-written one spells out: the watches, server-side apply in
//! dependency order, owner references and labels, the status with its conditions, writing
//! only what changed, and bad input as a status condition.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use windlass::prelude::*;

/// A greeting, published in three ConfigMaps.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.windlass.dev",
    version = "v1alpha1",
    kind = "Greeting",
    namespaced,
    status = "Status"
)]
pub struct GreetingSpec {
    /// What to say.
    pub message: String,
}

const MESSAGE: Ref<ConfigMap> = Ref::new("message");
const SHOUT: Ref<ConfigMap> = Ref::new("shout");
const INDEX: Ref<ConfigMap> = Ref::new("index");

/// The Greeting controller.
pub struct GreetingController;

#[async_trait]
impl Controller for GreetingController {
    type Resource = Greeting;
    type Config = NoConfig;
    type Status = Status;

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        if session.cr().spec.message.trim().is_empty() {
            return Err(Error::config("spec.message must not be empty"));
        }
        let mut graph = Components::new();
        let message = graph.add_fn("message", |s, out| {
            publish(s, out, MESSAGE, "message", s.cr().spec.message.clone())
        })?;
        let shout = graph.add_fn("shout", |s, out| {
            publish(s, out, SHOUT, "message", s.cr().spec.message.to_uppercase())
        })?;
        let index = graph.add_fn("index", |s, out| {
            let names = format!("{},{}", s.name_of(MESSAGE), s.name_of(SHOUT));
            publish(s, out, INDEX, "configmaps", names)
        })?;
        graph.depends_on(shout, message)?;
        graph.depends_on(index, shout)?;
        Ok(graph)
    }
}

/// The ConfigMap `name`, holding `value` under `key`.
fn publish(
    session: &Session<GreetingController>,
    out: &mut Resources,
    name: Ref<ConfigMap>,
    key: &str,
    value: String,
) -> Result<()> {
    let data = [(key.to_string(), value)].into();
    out.add(
        "configmap",
        &ConfigMap {
            metadata: session.meta(name),
            data: Some(data),
            ..Default::default()
        },
    )?;
    Ok(())
}
