//! A controller of two application versions, shared by the in-memory (`behaviour`) and the
//! real-server (`live`) tests of version dispatch: 1.x and 2.x differ in their API
//! component (`api-v1`, `api-v2`); the `web` component, after the API, is the same.

use windlass::prelude::*;
use windlass::testing::{DummyComponent, Widget};
use windlass::version::Versions;

/// Declares `^1` and `^2`, and builds each version's graph.
pub struct Shop;

#[async_trait]
impl Controller for Shop {
    type Resource = Widget;
    type Config = NoConfig;
    type Status = Status;

    fn versions(&self) -> Versions {
        Versions::new()
            .range("^1")
            .and_then(|v| v.range("^2"))
            .expect("valid ranges")
    }

    fn components(&self, session: &Session<Self>) -> Result<Components<Self>> {
        let mut graph = Components::new();
        let api = match session.version_matches("^2")? {
            true => DummyComponent::new("api-v2").with_configmap("api-v2"),
            false => DummyComponent::new("api-v1").with_configmap("api-v1"),
        };
        let api = graph.add(api)?;
        let web = graph.add(DummyComponent::new("web").with_configmap("web"))?;
        graph.depends_on(web, api)?;
        Ok(graph)
    }
}
