//! The rollout bench's controller, shared with `examples/rollout_profile.rs`: a binary tree
//! of components, one ConfigMap each, reconciled as a dry run on the in-memory cluster.

use std::sync::Arc;

use serde_json::json;
use windlass::cluster::MemoryCluster;
use windlass::config::OperatorConfig;
use windlass::object::ObjectRef;
use windlass::prelude::*;
use windlass::reconcile::Reconciler;
use windlass::testing::{TEST_NAMESPACE, Widget, cr_manifest};

/// One ConfigMap per component.
struct Leaf(String);

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Widget>> windlass::component::Component<C>
    for Leaf
{
    fn name(&self) -> &str {
        &self.0
    }
    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        out.add_value(
            "config",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": session.scoped_name(&self.0)},
                    "data": {"component": self.0, "version": session.version()}}),
        )?;
        Ok(())
    }
}

/// `n` components; component `i > 0` waits for component `(i - 1) / 2`.
pub struct Tree(pub usize);

#[async_trait]
impl Controller for Tree {
    type Resource = Widget;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;
    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let ids: Vec<_> = (0..self.0)
            .map(|i| graph.add(Leaf(format!("c{i:03}"))))
            .collect::<Result<_>>()?;
        for i in 1..self.0 {
            graph.depends_on(ids[i], ids[(i - 1) / 2])?;
        }
        Ok(graph)
    }
}

/// A reconciler of `Tree(components)` over a fresh in-memory cluster holding one CR, and
/// that CR.
pub fn setup(components: usize) -> (Reconciler<Tree>, ObjectRef) {
    let memory = Arc::new(MemoryCluster::new());
    memory.register_crd(&<Widget as kube::CustomResourceExt>::crd());
    memory.create_namespace(TEST_NAMESPACE).expect("namespace");
    let cr = cr_manifest::<Widget>("bench", json!({"version": "1.0"}));
    memory.load([cr.clone()]).expect("cr");
    let config = OperatorConfig {
        dry_run: true,
        ..OperatorConfig::default()
    };
    let reconciler = Reconciler::new(Tree(components), memory, config);
    (reconciler, ObjectRef::from_manifest(&cr).expect("named"))
}
