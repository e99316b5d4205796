//! Bad input never panics the operator: it ends in the CR's status, and every other CR
//! and every object already applied stay as they were.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::json;
use windlass::Action;
use windlass::prelude::*;
use windlass::testing::{Harness, assert_condition};

use crate::support::{Shop, cm_ref};

const NORMAL: u8 = 0;
const CYCLE: u8 = 1;
const PANIC_IN_COMPONENTS: u8 = 2;
const PANIC_IN_RENDER: u8 = 3;

/// A Shop controller whose misbehaviour is switched at run time.
#[derive(Clone, Default)]
struct ShopController(Arc<AtomicU8>);

struct Front(Arc<AtomicU8>);

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Shop, Config = ShopConfig>>
    windlass::component::Component<C> for Front
{
    fn name(&self) -> &str {
        "front"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        if self.0.load(Ordering::SeqCst) == PANIC_IN_RENDER {
            panic!("index out of bounds: the len is 0 but the index is 3");
        }
        out.add_value("config", json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": session.scoped_name("front")},
            "data": {"title": session.cr().spec.title, "replicas": session.cr().spec.replicas.to_string(),
                     "maxItems": session.config().max_items.to_string()}}))?;
        Ok(())
    }
}

struct Back;

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Shop>> windlass::component::Component<C>
    for Back
{
    fn name(&self) -> &str {
        "back"
    }
    async fn render(&self, _: &Session<C>, _: &mut Resources) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl Controller for ShopController {
    type Resource = Shop;
    type Config = ShopConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mode = self.0.load(Ordering::SeqCst);
        if mode == PANIC_IN_COMPONENTS {
            panic!("components() is buggy");
        }
        let mut g = Components::new();
        let front = g.add(Front(self.0.clone()))?;
        let back = g.add(Back)?;
        g.depends_on(front, back)?;
        if mode == CYCLE {
            g.depends_on(back, front)?;
        }
        Ok(g)
    }
}

/// The shop's backend config: `spec.configOverrides` may change it per CR.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
struct ShopConfig {
    max_items: u32,
}

impl Default for ShopConfig {
    fn default() -> Self {
        ShopConfig { max_items: 100 }
    }
}

async fn env() -> (Harness<ShopController>, Arc<AtomicU8>) {
    let controller = ShopController::default();
    let mode = controller.0.clone();
    (Harness::dry_run(controller).await, mode)
}

#[tokio::test]
async fn a_wrong_type_in_the_spec_is_a_config_error_naming_the_field() {
    let (env, _) = env().await;
    let bad = env
        .apply_cr("bad", json!({"replicas": "three", "title": "t"}))
        .await;
    let good = env
        .apply_cr("good", json!({"replicas": 2, "title": "t"}))
        .await;
    let report = env.reconcile(&bad).await;
    // Retrying cannot help: the reconcile waits for the spec to change.
    assert_eq!(report.outcome, Action::Done);
    let status = env.status(&bad).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.replicas") && message.contains("invalid type"),
        "{message}"
    );
    assert!(env.get(&cm_ref("bad-front")).await.is_none());

    env.reconcile(&good).await;
    assert_condition(&env.status(&good).await, "Ready", true, "Stable");
}

#[tokio::test]
async fn a_missing_field_is_a_config_error_naming_it() {
    let (env, _) = env().await;
    let cr = env.apply_cr("shop", json!({"replicas": 1})).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("missing field `title`"),
        "{status:#}"
    );
}

#[tokio::test]
async fn a_cyclic_component_graph_is_a_config_error() {
    let (env, mode) = env().await;
    mode.store(CYCLE, Ordering::SeqCst);
    let cr = env
        .apply_cr("shop", json!({"replicas": 1, "title": "t"}))
        .await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("cyclic dependency"),
        "{status:#}"
    );
}

#[tokio::test]
async fn a_panic_while_rendering_fails_the_cr_and_keeps_applied_objects() {
    let (env, mode) = env().await;
    let cr = env
        .apply_cr("shop", json!({"replicas": 1, "title": "before"}))
        .await;
    env.reconcile(&cr).await;
    let applied = env
        .get(&cm_ref("shop-front"))
        .await
        .expect("rendered while healthy");

    mode.store(PANIC_IN_RENDER, Ordering::SeqCst);
    let cr = env
        .apply_cr("shop", json!({"replicas": 1, "title": "after"}))
        .await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Retry);
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "Errored");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("component \"front\" during deploy panicked: index out of bounds"),
        "{message}"
    );
    assert_eq!(
        status["componentStatus"]["failedComponents"],
        json!(["front"])
    );
    assert_eq!(
        env.get(&cm_ref("shop-front")).await.unwrap(),
        applied,
        "already-applied object untouched"
    );
}

#[tokio::test]
async fn a_panic_while_building_the_graph_is_caught() {
    let (env, mode) = env().await;
    mode.store(PANIC_IN_COMPONENTS, Ordering::SeqCst);
    let cr = env
        .apply_cr("shop", json!({"replicas": 1, "title": "t"}))
        .await;
    let report = env.reconcile(&cr).await;
    assert_eq!(report.outcome, Action::Retry);
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "Errored");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("components() is buggy")
    );
    mode.store(NORMAL, Ordering::SeqCst);
    env.reconcile(&cr).await;
    assert_condition(&env.status(&cr).await, "Ready", true, "Stable");
}

#[tokio::test]
async fn malformed_annotations_and_overrides_are_reported() {
    let (env, _) = env().await;
    let cr = env
        .apply_cr(
            "shop",
            json!({"replicas": 1, "title": "t", "configOverrides": "not a map"}),
        )
        .await;
    env.reconcile(&cr).await;
    assert!(
        env.status(&cr).await["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("spec.configOverrides must be a map")
    );

    let cr = env
        .apply_cr("patched", json!({"replicas": 1, "title": "t"}))
        .await;
    env.annotate(&cr, "windlass.dev/temporary-patches", "{not json")
        .await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    assert_condition(&status, "Ready", false, "Errored");
    assert!(
        status["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("windlass.dev/temporary-patches: not JSON"),
        "{status:#}"
    );
}

/// Reconcile the CR `bad` with `overrides`: a config error that nothing but a spec change
/// can mend, before anything is applied. Its message.
async fn refused_overrides(env: &Harness<ShopController>, overrides: serde_json::Value) -> String {
    let bad = env
        .apply_cr(
            "bad",
            json!({"replicas": 1, "title": "t", "configOverrides": overrides}),
        )
        .await;
    let report = env.reconcile(&bad).await;
    assert_eq!(report.outcome, Action::Done, "only a spec change can help");
    let status = env.status(&bad).await;
    assert_condition(&status, "Ready", false, "ConfigError");
    assert!(env.get(&cm_ref("bad-front")).await.is_none());
    status["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_misspelled_config_override_is_a_config_error_naming_the_key() {
    let (env, _) = env().await;
    let message = refused_overrides(&env, json!({"maxItem": 7})).await;
    assert!(message.contains("no such key: maxItem"), "{message}");
}

#[tokio::test]
async fn a_config_override_of_the_wrong_type_is_a_config_error_naming_the_key() {
    let (env, _) = env().await;
    let good = env
        .apply_cr(
            "good",
            json!({"replicas": 1, "title": "t", "configOverrides": {"maxItems": 7}}),
        )
        .await;
    let message = refused_overrides(&env, json!({"maxItems": "lots"})).await;
    assert!(
        message.contains("maxItems") && message.contains("invalid type"),
        "{message}"
    );

    env.reconcile(&good).await;
    assert_condition(&env.status(&good).await, "Ready", true, "Stable");
    let front = env.get(&cm_ref("good-front")).await.unwrap();
    assert_eq!(
        front["data"]["maxItems"], "7",
        "the override is layered on the default"
    );
}

#[tokio::test]
async fn the_cli_prints_the_schema_of_the_backend_config() {
    let (out, buffer) = windlass::cli::Output::buffer();
    let code = windlass::cli::run(
        ShopController::default(),
        ["shop-operator", "config-schema"],
        out,
    )
    .await;
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let yaml = buffer.text();
    let schema: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(
        schema["properties"]["maxItems"]["type"], "integer",
        "{yaml}"
    );
    assert_eq!(schema["properties"]["maxItems"]["default"], 100, "{yaml}");
}
