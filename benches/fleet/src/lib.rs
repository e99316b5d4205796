//! # The fleet benchmark's operator
//!
//! A `Fleet` custom resource owns five plain objects in a three-level graph:
//!
//! ```text
//! config (ConfigMap)      secret (Secret)
//!      │        └─────┐       │
//!      ▼              ▼       ▼
//! service (Service)   settings (ConfigMap)
//!      └───────┬──────────────┘
//!              ▼
//!      summary (ConfigMap)
//! ```
//!
//! Every object is ready as soon as it exists, so a CR is Ready after one rollout: five
//! server-side applies and one status write. The runner in `src/bin/fleet/` creates
//! hundreds of these at once against a real control plane and measures what it costs;
//! `src/bin/write-costs.rs` measures what each kind of write the fleet makes costs the API
//! server. Both account CPU time by process with [`cpu::Cpu`].

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use windlass::prelude::*;

pub mod cpu;

/// The API group of [`Fleet`].
pub const GROUP: &str = "bench.windlass.dev";

/// How many objects one [`Fleet`] owns; a rollout writes each once, plus the status.
pub const OBJECTS: usize = 5;

/// One member of the benchmark's fleet. Its spec only feeds the rendered objects.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "bench.windlass.dev",
    version = "v1alpha1",
    kind = "Fleet",
    namespaced,
    status = "windlass::status::Status"
)]
#[serde(rename_all = "camelCase")]
pub struct FleetSpec {
    /// A value copied into every object, so a spec change rolls out everywhere.
    pub message: String,
}

impl Fleet {
    /// Ready=True for the CR's current generation.
    pub fn is_ready(&self) -> bool {
        let generation = self.metadata.generation;
        self.status
            .as_ref()
            .and_then(|s| s.condition("Ready"))
            .is_some_and(|c| c.status == "True" && c.observed_generation == generation)
    }
}

/// The controller of [`Fleet`]: five components, three levels deep.
pub struct FleetController;

#[async_trait]
impl Controller for FleetController {
    type Resource = Fleet;
    type Config = windlass::controller::NoConfig;
    type Status = windlass::status::Status;

    fn components(&self, _: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let config = graph.add(Part::new("config", Kind::ConfigMap))?;
        let secret = graph.add(Part::new("secret", Kind::Secret))?;
        let service = graph.add(Part::new("service", Kind::Service))?;
        let settings = graph.add(Part::new("settings", Kind::ConfigMap))?;
        let summary = graph.add(Part::new("summary", Kind::ConfigMap))?;
        graph.depends_on(service, config)?;
        graph.depends_on(settings, config)?;
        graph.depends_on(settings, secret)?;
        graph.depends_on(summary, service)?;
        graph.depends_on(summary, settings)?;
        Ok(graph)
    }
}

/// What kind of object a [`Part`] renders.
#[derive(Clone, Copy, Debug)]
enum Kind {
    ConfigMap,
    Secret,
    Service,
}

/// A component of one plain object named `<cr>-<component>`.
struct Part {
    name: &'static str,
    kind: Kind,
}

impl Part {
    fn new(name: &'static str, kind: Kind) -> Self {
        Part { name, kind }
    }
}

#[async_trait]
impl<C: windlass::controller::Controller<Resource = Fleet>> windlass::component::Component<C>
    for Part
{
    fn name(&self) -> &str {
        self.name
    }

    async fn render(&self, session: &Session<C>, out: &mut Resources) -> Result<()> {
        let message = session.cr().spec.message.clone();
        let metadata = ObjectMeta {
            name: Some(session.scoped_name(self.name)),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/name".into(), "fleet".into()),
                ("app.kubernetes.io/instance".into(), session.name().into()),
                ("app.kubernetes.io/component".into(), self.name.into()),
            ])),
            ..Default::default()
        };
        match self.kind {
            Kind::ConfigMap => out.add(
                "configmap",
                &ConfigMap {
                    metadata,
                    data: Some(BTreeMap::from([("message".into(), message)])),
                    ..Default::default()
                },
            )?,
            // `data`, not `stringData`: the server turns stringData into data.
            Kind::Secret => out.add(
                "secret",
                &Secret {
                    metadata,
                    data: Some(BTreeMap::from([(
                        "message".into(),
                        ByteString(message.into_bytes()),
                    )])),
                    ..Default::default()
                },
            )?,
            Kind::Service => out.add(
                "service",
                &Service {
                    metadata,
                    spec: Some(ServiceSpec {
                        ports: Some(vec![ServicePort {
                            port: 80,
                            target_port: Some(IntOrString::Int(8080)),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )?,
        };
        Ok(())
    }
}

/// Applies the [`Fleet`] CRD and waits until the API server serves it (at most
/// [`windlass_testenv::EVENTUALLY`]).
///
/// # Panics
/// If the CRD cannot be applied or is not served in that time: a benchmark cannot go on
/// without it.
pub async fn install_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = <Fleet as kube::CustomResourceExt>::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    if let Err(e) = crds
        .patch(
            &name,
            &PatchParams::apply("fleet-bench").force(),
            &Patch::Apply(&crd),
        )
        .await
    {
        panic!("applying the CRD {name}: {e}");
    }
    let fleets: Api<Fleet> = Api::all(client.clone());
    windlass_testenv::eventually("the Fleet CRD is served", || async {
        fleets.list(&Default::default()).await.is_ok()
    })
    .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_crd_is_namespaced_in_the_bench_group() {
        let crd = <Fleet as kube::CustomResourceExt>::crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
    }
}
