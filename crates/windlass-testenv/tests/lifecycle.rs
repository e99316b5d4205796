//! Control planes are isolated from each other and leave nothing behind: two at once in one
//! process and in two processes, a process dying in one is reported by that one (and its
//! operations fail fast), and clean-up on drop, on panic and on SIGKILL.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use windlass_testenv::{Error, TestEnv, wait_for};

/// Alive means: exists and is not a zombie waiting to be reaped by whoever inherited it.
fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X") | None)
        }
        Err(_) => false,
    }
}

/// Waits up to `timeout` until none of `pids` is alive and `dir` is gone.
async fn assert_gone(pids: &[u32], dir: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|p| is_alive(*p)).collect();
        if alive.is_empty() && !dir.exists() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "after {timeout:?}: still alive {alive:?}, directory {} exists: {}",
                dir.display(),
                dir.exists()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pids_of(env: &TestEnv) -> Vec<u32> {
    env.processes()
        .iter()
        .map(|p| p.pid)
        .chain(env.watchdog_pid())
        .collect()
}

#[tokio::test]
async fn two_control_planes_are_isolated_breakage_is_reported_and_drop_cleans_up()
-> anyhow::Result<()> {
    let (first, second) = tokio::try_join!(TestEnv::start(), TestEnv::builder().nodes(1).start())?;
    ensure!(first.apiserver_url() != second.apiserver_url());
    ensure!(first.dir() != second.dir());

    // The same names in both, and each sees only its own object.
    for (env, value) in [(&first, "first"), (&second, "second")] {
        let cms: Api<ConfigMap> = Api::namespaced(env.client()?, "default");
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("which".into());
        cm.data = Some([("env".to_string(), value.to_string())].into());
        cms.create(&PostParams::default(), &cm).await?;
    }
    for (env, value) in [(&first, "first"), (&second, "second")] {
        let cms: Api<ConfigMap> = Api::namespaced(env.client()?, "default");
        let got = cms.get("which").await?;
        ensure!(got.data.unwrap_or_default().get("env").map(String::as_str) == Some(value));
    }
    ensure!(second.node_names().len() == 1 && first.node_names().len() == 2);

    let (pids, dir) = (pids_of(&second), second.dir().to_path_buf());
    ensure!(pids.iter().all(|p| is_alive(*p)));

    // A process of the second dying is noticed within seconds; from then on its operations fail
    // fast with the reason, waits on it say why they time out, and the first is unaffected.
    let early_client = second.client()?;
    ensure!(second.check_health().is_ok());
    let kcm = second
        .processes()
        .iter()
        .find(|p| p.name == "kube-controller-manager")
        .context("a kube-controller-manager process")?
        .pid;
    // SAFETY: plain kill(2) of a process this test's control plane started.
    ensure!(unsafe { libc::kill(kcm as libc::pid_t, libc::SIGKILL) } == 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let error = loop {
        match second.client() {
            Err(e) => break e,
            Ok(_) if tokio::time::Instant::now() > deadline => {
                bail!("a dead kube-controller-manager went unnoticed for 10 s")
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    ensure!(
        matches!(&error, Error::Broken { apiserver_url, .. } if apiserver_url == second.apiserver_url()),
        "{error:?}"
    );
    ensure!(
        error
            .to_string()
            .contains("kube-controller-manager exited unexpectedly"),
        "{error}"
    );
    ensure!(matches!(second.check_health(), Err(Error::Broken { .. })));
    let asked = std::time::Instant::now();
    let namespace = second.namespace("after-breakage").await;
    // "At once": not after the minute it would wait for a service account no controller
    // manager makes; 15 s leaves a loaded machine room.
    ensure!(
        matches!(namespace, Err(Error::Broken { .. })) && asked.elapsed() < Duration::from_secs(15),
        "namespace() fails at once: {namespace:?} after {:?}",
        asked.elapsed()
    );
    let waited = wait_for(
        &Api::<ConfigMap>::namespaced(early_client, "default"),
        "never-created",
        Duration::from_millis(500),
        |cm: Option<&ConfigMap>| cm.is_some(),
    )
    .await;
    match waited {
        Err(e @ Error::Timeout { .. }) => ensure!(
            e.to_string().contains(&format!(
                "the control plane at {} broke",
                second.apiserver_url()
            )),
            "the timeout names the broken control plane: {e}"
        ),
        other => bail!("expected a timeout, got {other:?}"),
    }
    ensure!(first.check_health().is_ok() && first.client().is_ok());

    drop(second);
    // Drop is synchronous: everything is gone when it returns.
    assert_gone(&pids, &dir, Duration::ZERO).await?;

    let namespaces: Api<Namespace> = Api::all(first.client()?);
    ensure!(
        namespaces.get_opt("default").await?.is_some(),
        "the other control plane is unaffected"
    );
    Ok(())
}

#[tokio::test]
async fn a_panicking_test_leaves_nothing_behind() -> anyhow::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<(Vec<u32>, PathBuf)>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let env = TestEnv::builder()
                .nodes(1)
                .start()
                .await
                .expect("control plane starts");
            tx.send((pids_of(&env), env.dir().to_path_buf()))
                .expect("report");
            panic!("a test failing while it holds a control plane");
        });
    });
    ensure!(thread.join().is_err(), "the thread panicked");
    let (pids, dir) = rx
        .recv_timeout(Duration::from_secs(1))
        .context("the thread started a control plane")?;
    ensure!(!pids.is_empty());
    assert_gone(&pids, &dir, Duration::ZERO).await
}

/// `testenv up` in a second process runs its own control plane next to this test binary's;
/// SIGKILLing that process takes its control plane and directory with it.
#[tokio::test]
async fn testenv_up_in_another_process_dies_completely_on_sigkill() -> anyhow::Result<()> {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_testenv"))
        .args(["up", "--nodes", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut stderr = BufReader::new(child.stderr.take().context("stderr")?).lines();

    let kubeconfig = tokio::time::timeout(Duration::from_secs(120), stdout.next_line())
        .await
        .context("testenv up did not become ready")??
        .context("testenv up exited before it was ready")?;
    let kubeconfig = kubeconfig
        .strip_prefix("export KUBECONFIG=")
        .context("first line is the KUBECONFIG")?
        .to_string();

    // stderr was written before the KUBECONFIG line: pids and the directory.
    let mut pids = Vec::new();
    let mut dir = None;
    while dir.is_none() {
        let line = tokio::time::timeout(Duration::from_secs(5), stderr.next_line())
            .await??
            .context("stderr")?;
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "pid") {
            pids.push(words.get(i + 1).context("pid value")?.parse::<u32>()?);
        }
        if let Some(rest) = line.strip_prefix("testenv:   directory: ") {
            dir = rest.split_whitespace().next().map(PathBuf::from);
        }
    }
    let dir = dir.context("directory")?;
    ensure!(
        pids.len() == 3,
        "etcd, kube-apiserver, kube-controller-manager: {pids:?}"
    );

    // The other process's control plane works and is not this binary's.
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(kube::Client::try_from(config)?);
    ensure!(nodes.list(&Default::default()).await?.items.len() == 1);

    let pid = child.id().context("child pid")?;
    // SAFETY: plain kill(2) of a child we own.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    ensure!(rc == 0, "kill failed");
    child.wait().await?;
    assert_gone(&pids, &dir, Duration::from_secs(15)).await
}
