//! Processes of the control plane can be stopped and started again (an outage, a crash and a
//! restart): on the same ports, with the same data and certificates, so clients carry on with
//! the same kubeconfig and nothing stored is lost; the supervisor does not call a deliberate
//! stop a breakage.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use windlass_testenv::{ControlPlaneProcess, TestEnv};

fn pid_of(env: &TestEnv, process: ControlPlaneProcess) -> Option<u32> {
    env.processes()
        .iter()
        .find(|p| p.name == process.name())
        .map(|p| p.pid)
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {"key": name},
    }))
    .expect("a valid ConfigMap")
}

#[tokio::test]
async fn apiserver_and_etcd_restart_on_the_same_ports_with_the_same_data() -> anyhow::Result<()> {
    let env = TestEnv::builder().without_simulator().start().await?;
    let ns = env.namespace("restart").await?;
    let client = env.client()?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let before = config_maps
        .create(&PostParams::default(), &config_map("before"))
        .await?;

    // kube-apiserver: while it is stopped, connections are refused; the client made before
    // the outage works again afterwards, and what was stored is still there.
    let apiserver = pid_of(&env, ControlPlaneProcess::KubeApiserver).context("no apiserver")?;
    env.stop_process(ControlPlaneProcess::KubeApiserver).await?;
    let refused = tokio::time::timeout(Duration::from_secs(10), config_maps.get("before")).await;
    ensure!(
        matches!(refused, Ok(Err(_))),
        "a request while the apiserver is stopped must fail: {refused:?}"
    );
    env.check_health()
        .context("a deliberate stop is not a breakage")?;
    env.start_process(ControlPlaneProcess::KubeApiserver)
        .await?;
    ensure!(pid_of(&env, ControlPlaneProcess::KubeApiserver) != Some(apiserver));
    let again = config_maps.get("before").await?;
    ensure!(again.metadata.uid == before.metadata.uid);
    config_maps
        .create(&PostParams::default(), &config_map("after-apiserver"))
        .await?;

    // etcd: a crash and a restart keep the data; the apiserver serves writes again.
    let etcd = pid_of(&env, ControlPlaneProcess::Etcd).context("no etcd")?;
    env.restart_process(ControlPlaneProcess::Etcd).await?;
    ensure!(pid_of(&env, ControlPlaneProcess::Etcd) != Some(etcd));
    for name in ["before", "after-apiserver"] {
        config_maps.get(name).await.context(name)?;
    }
    config_maps
        .create(&PostParams::default(), &config_map("after-etcd"))
        .await?;

    // Every process runs (kube-controller-manager rode the outages out), and the
    // supervisor agrees.
    for process in env.processes() {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", process.pid));
        ensure!(
            stat.is_ok_and(|s| !s.contains(") Z ")),
            "{} (pid {}) is not running",
            process.name,
            process.pid
        );
    }
    env.check_health()?;
    Ok(())
}
