//! Dry-run reconciling of CRs that rollouts create and delete: child CRs are reconciled,
//! deleting runs finalizers, and an operator that keeps changing its own spec cannot loop
//! forever.

use serde_json::json;

use super::{DryRun, MAX_RECONCILES_PER_CR};
use crate::object::{ManifestExt, ObjectRef};
use crate::prelude::*;
use crate::testing::{Harness, TEST_NAMESPACE, Widget, assert_condition};

fn cm_ref(name: &str) -> ObjectRef {
    ObjectRef::new("v1", "ConfigMap", Some(TEST_NAMESPACE), name)
}

/// A Widget with `spec.children: n` renders n child Widgets (which have none), and a
/// ConfigMap of its own; it holds a finalizer.
struct Family;

struct Children;

#[async_trait]
impl<C: crate::controller::Controller<Resource = Widget>> crate::component::Component<C>
    for Children
{
    fn name(&self) -> &str {
        "children"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        out.add_value("config", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": session.scoped_name("cfg")}}))?;
        let n = session
            .cr()
            .spec
            .extra
            .get("children")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        for i in 0..n {
            out.add_value(
                &format!("child-{i}"),
                json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
                "metadata": {"name": session.scoped_name(&format!("child-{i}"))}, "spec": {}}),
            )?;
        }
        Ok(())
    }
}

#[async_trait]
impl Controller for Family {
    type Resource = Widget;
    type Config = crate::controller::NoConfig;
    type Status = crate::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut g = Components::new();
        g.add(Children)?;
        Ok(g)
    }
    fn finalizer(&self) -> Option<&dyn crate::controller::Finalize<Self>> {
        Some(self)
    }
}

impl crate::controller::Finalize<Family> for Family {
    fn name(&self) -> String {
        "test.windlass.dev/family".into()
    }
}

fn widget(name: &str) -> ObjectRef {
    ObjectRef::new("test.windlass.dev/v1", "Widget", Some(TEST_NAMESPACE), name)
}

#[tokio::test]
async fn child_crs_are_reconciled_and_deletion_runs_their_finalizers() {
    let env = Harness::dry_run(Family).await;
    let parent = env.apply_cr("p", json!({"children": 2})).await;
    let dry = DryRun::new(env.reconciler.clone(), env.memory.clone());
    let reports = dry.run([parent.clone()], |_| {}).await;
    let order: Vec<&str> = reports.iter().map(|r| r.cr.name.as_str()).collect();
    assert_eq!(
        order,
        ["p", "p-child-0", "p-child-1"],
        "each CR once: status writes ask for nothing"
    );
    for name in ["p", "p-child-0", "p-child-1"] {
        assert_condition(&env.status(&widget(name)).await, "Ready", true, "Stable");
        assert!(env.get(&cm_ref(&format!("{name}-cfg"))).await.is_some());
        assert_eq!(
            env.get(&widget(name)).await.unwrap().finalizers(),
            ["test.windlass.dev/family"]
        );
    }

    // Deleting the parent: its finalizer rollout runs, the garbage collector takes the
    // children, whose own finalizers are then run in turn.
    env.delete(&parent).await;
    let reports = dry.run([parent.clone()], |_| {}).await;
    assert_eq!(reports.len(), 3, "{reports:?}");
    for name in ["p", "p-child-0", "p-child-1"] {
        assert!(env.get(&widget(name)).await.is_none(), "{name} is gone");
        assert!(env.get(&cm_ref(&format!("{name}-cfg"))).await.is_none());
    }
}

/// A controller that bumps its own CR's spec on every reconcile.
struct Restless;

struct Bump;

#[async_trait]
impl<C: crate::controller::Controller<Resource = Widget>> crate::component::Component<C> for Bump {
    fn name(&self) -> &str {
        "bump"
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        let n = session
            .cr()
            .spec
            .extra
            .get("n")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        out.add_value("self", json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": format!("{}-next", session.name().trim_end_matches("-next"))}, "spec": {"n": n + 1}}))?;
        Ok(())
    }
}

#[async_trait]
impl Controller for Restless {
    type Resource = Widget;
    type Config = crate::controller::NoConfig;
    type Status = crate::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut g = Components::new();
        g.add(Bump)?;
        Ok(g)
    }
}

#[tokio::test]
async fn a_reconcile_loop_is_bounded() {
    let env = Harness::dry_run(Restless).await;
    let cr = env.apply_cr("r", json!({})).await;
    let reports = DryRun::new(env.reconciler.clone(), env.memory.clone())
        .run([cr], |_| {})
        .await;
    let next = reports.iter().filter(|r| r.cr.name == "r-next").count();
    assert_eq!(
        next, MAX_RECONCILES_PER_CR,
        "r-next rewrites its own spec forever; the run stops it"
    );
}
