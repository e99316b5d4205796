//! The render pipeline: patches → internal-name annotation → the component's own hook,
//! patches oldest first.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use windlass::cluster::Scope;
use windlass::object::{ManifestExt, ObjectRef};
use windlass::prelude::*;
use windlass::testing::{Harness, Widget, make_patch, patch_kind};

use crate::support::cm_ref;

/// A component that records what its update hook receives and stamps the result.
struct Recording(Arc<Mutex<Vec<Value>>>);

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Widget>> windlass::component::Component<C>
    for Recording
{
    fn name(&self) -> &str {
        "web"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        out.add_value(
            "config",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": session.scoped_name("web"), "labels": null},
            "data": {"value": "rendered"}}),
        )?;
        Ok(())
    }
    fn update_object_definition(
        &self,
        _: &Session<C>,
        internal_name: &str,
        mut manifest: Value,
    ) -> Result<Value> {
        assert_eq!(internal_name, "web.config");
        self.0.lock().unwrap().push(manifest.clone());
        manifest["data"]["hooked"] = json!("yes");
        Ok(manifest)
    }
}

struct One(Arc<Mutex<Vec<Value>>>);

#[async_trait]
impl Controller for One {
    type Resource = Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut g = Components::new();
        g.add(Recording(self.0.clone()))?;
        Ok(g)
    }
}

#[tokio::test]
async fn patches_then_annotation_then_the_component_hook_oldest_patch_first() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let env = Harness::dry_run(One(seen.clone())).await;
    env.memory.register_kind(patch_kind(), Scope::Namespaced);
    env.apply(&make_patch(
        "older",
        "patchStrategicMerge",
        json!({"web": {"config": {"data": {"value": "older", "older": "1"}}}}),
    ))
    .await;
    env.apply(&make_patch(
        "newer",
        "patchJson6902",
        json!({"web": {"config": [{"op": "replace", "path": "/data/value", "value": "newer"}]}}),
    ))
    .await;
    let cr = env.apply_cr("a", json!({})).await;
    // Listed newest first: order comes from the timestamps, not the annotation.
    let index = json!({
        "newer": {"timestamp": "2026-02-01T00:00:00Z", "api_version": "test.windlass.dev/v1"},
        "older": {"timestamp": "2026-01-01T00:00:00Z", "api_version": "test.windlass.dev/v1"},
    });
    env.annotate(&cr, "windlass.dev/temporary-patches", &index.to_string())
        .await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);

    let hooked = seen.lock().unwrap()[0].clone();
    assert_eq!(
        hooked["data"],
        json!({"value": "newer", "older": "1"}),
        "both patches, oldest first, before the hook"
    );
    assert_eq!(
        hooked["metadata"]["annotations"]["windlass.dev/internal-name"], "web.config",
        "annotated before the hook"
    );
    assert!(
        hooked["metadata"].get("labels").is_none(),
        "null fields are dropped when added"
    );
    let stored = env.get(&cm_ref("a-web")).await.unwrap();
    assert_eq!(
        stored["data"],
        json!({"value": "newer", "older": "1", "hooked": "yes"})
    );
}

#[tokio::test]
async fn a_missing_patch_object_is_a_config_error() {
    let env = Harness::dry_run(One(Arc::default())).await;
    env.memory.register_kind(patch_kind(), Scope::Namespaced);
    let cr = env.apply_cr("a", json!({})).await;
    env.annotate(&cr, "windlass.dev/temporary-patches", &json!({"gone": {"timestamp": "2026-01-01T00:00:00Z", "api_version": "test.windlass.dev/v1"}}).to_string()).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    windlass::testing::assert_condition(&status, "Ready", false, "ConfigError");
    assert!(
        env.get(&cm_ref("a-web")).await.is_none(),
        "nothing rendered with a patch missing"
    );
}

/// A component with a cluster-scoped object and a patch that breaks its manifest.
struct Mixed;

struct Rbac;

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Widget>> windlass::component::Component<C>
    for Rbac
{
    fn name(&self) -> &str {
        "rbac"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        out.add_value(
            "role",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": session.scoped_name("reader")}, "rules": []}),
        )?;
        out.add_value("config", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": session.scoped_name("cfg")}}))?;
        Ok(())
    }
}

#[async_trait]
impl Controller for Mixed {
    type Resource = Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut g = Components::new();
        g.add(Rbac)?;
        Ok(g)
    }
}

#[tokio::test]
async fn cluster_scoped_objects_lose_the_namespace_and_the_owner_reference() {
    let env = Harness::dry_run(Mixed).await;
    let cr = env.apply_cr("a", json!({})).await;
    let report = env.reconcile(&cr).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let role = ObjectRef::new(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "a-reader",
    );
    let role = env.get(&role).await.expect("created cluster-wide");
    assert_eq!(role.namespace(), None);
    assert!(
        role["metadata"].get("ownerReferences").is_none(),
        "no owner across scopes"
    );
    assert!(env.get(&cm_ref("a-cfg")).await.unwrap()["metadata"]["ownerReferences"].is_array());
}

#[tokio::test]
async fn a_patch_that_breaks_a_manifest_is_a_config_error_naming_it() {
    let env = Harness::dry_run(Mixed).await;
    env.memory.register_kind(patch_kind(), Scope::Namespaced);
    env.apply(&make_patch(
        "bad",
        "patchJson6902",
        json!({"rbac": {"config": [{"op": "remove", "path": "/kind"}]}}),
    ))
    .await;
    let cr = env.apply_cr("a", json!({})).await;
    env.annotate(&cr, "windlass.dev/temporary-patches", &json!({"bad": {"timestamp": "2026-01-01T00:00:00Z", "api_version": "test.windlass.dev/v1"}}).to_string()).await;
    env.reconcile(&cr).await;
    let status = env.status(&cr).await;
    windlass::testing::assert_condition(&status, "Ready", false, "ConfigError");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("rbac.config after temporary patches") && message.contains("no kind"),
        "{message}"
    );
}
