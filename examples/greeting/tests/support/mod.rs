//! What the Greeting tests share: a real control plane with the operator's CRD installed, a
//! namespace per test with an operator running for it, and the behaviour every operator of the
//! contract must show ([`behaviour`]).
//!
//! A test binary runs the whole contract against one operator with
//! `behaviour_tests!(crd, start)`: `crd` is the operator's `CustomResourceDefinition`, `start`
//! a `fn(&'static TestEnv, kube::Client, &str) -> G` that starts the operator for a namespace
//! and returns a guard `G` that stops it when dropped.

#![allow(dead_code)] // Not every test binary uses every helper.

pub mod behaviour;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::conditions;
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use windlass_testenv::{TestEnv, TestNamespace, wait_for};

/// A test's world: a client, its namespace and the operator running for it.
pub struct Running<G> {
    /// Stops the operator when dropped — before the namespace goes.
    operator: G,
    /// An admin client of the control plane.
    pub client: Client,
    /// The test's namespace, deleted when dropped.
    pub namespace: TestNamespace,
}

impl<G> Running<G> {
    /// The namespace's name.
    pub fn namespace(&self) -> &str {
        self.namespace.name()
    }
}

/// On the shared control plane: installs `crd`, makes a namespace `<prefix>-<random>` and
/// starts the operator in it with `start`.
pub async fn start<G>(
    prefix: &str,
    crd: CustomResourceDefinition,
    start: impl FnOnce(&'static TestEnv, Client, &str) -> G,
) -> anyhow::Result<Running<G>> {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .try_init();
    let env = TestEnv::shared().await?;
    let client = env.client()?;
    install_crd(&client, crd).await?;
    let namespace = env.namespace(prefix).await?;
    let operator = start(env, client.clone(), namespace.name());
    Ok(Running {
        operator,
        client,
        namespace,
    })
}

/// Applies `crd` and waits until it is established and its kind is served.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply("greeting-tests").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    wait_for(
        &crds,
        &name,
        Duration::from_secs(30),
        conditions::is_crd_established(),
    )
    .await?;
    // Serving the kind may lag establishment by a moment.
    let greetings = Api::<behaviour::Greeting>::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match greetings
            .list_metadata(&ListParams::default().limit(1))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                anyhow::bail!(
                    "the Greeting kind is not served 30 s after its CRD is established: {e}"
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A task of the test's runtime, aborted when dropped: an operator run in-process.
pub struct Task(JoinHandle<()>);

impl Task {
    /// Spawns `future` on the test's runtime.
    pub fn spawn(future: impl Future<Output = ()> + Send + 'static) -> Task {
        Task(tokio::spawn(future))
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One `#[tokio::test]` per behaviour of the contract, each in a namespace of its own with its
/// own operator: `behaviour_tests!(crd_expression, start_function)`.
macro_rules! behaviour_tests {
    ($crd:expr, $start:expr) => {
        behaviour_tests!(@each $crd, $start;
            applies_children_in_order_then_ready "order",
            bad_input_is_reported_and_others_keep_being_served "bad-input",
            spec_change_updates_children "spec-change",
            deleted_child_is_recreated "recreate",
            deleting_the_greeting_collects_children "collect",
            steady_state_writes_nothing "steady",
        );
    };
    (@each $crd:expr, $start:expr; $($behaviour:ident $prefix:literal,)*) => {
        $(
            #[tokio::test]
            async fn $behaviour() -> anyhow::Result<()> {
                let running = support::start($prefix, $crd, $start).await?;
                support::behaviour::$behaviour(&running.client, running.namespace()).await
            }
        )*
    };
}
