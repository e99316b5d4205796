//! The Greeting contract against the windlass operator (`src/lib.rs`), run in-process
//! under windlass's runtime on a real control plane — the same tests as the kube-rs one.

#[macro_use]
mod support;

use greeting_operator::{Greeting, GreetingController};
use kube::CustomResourceExt as _;
use windlass::config::OperatorConfig;
use windlass::runtime::Manager;
use windlass_testenv::TestEnv;

/// Runs the windlass operator for `namespace` until the test ends.
fn start(_env: &'static TestEnv, client: kube::Client, namespace: &str) -> support::Task {
    let mut library = OperatorConfig::default();
    library.runtime.watch_namespaces = vec![namespace.to_string()];
    let manager = Manager::new(client, library).controller(GreetingController);
    support::Task::spawn(async move {
        if let Err(e) = manager.run(std::future::pending::<()>()).await {
            panic!("the operator stopped: {e}");
        }
    })
}

behaviour_tests!(Greeting::crd(), start);
