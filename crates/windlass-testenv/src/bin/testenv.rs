//! `testenv`: the windlass test control plane for people.
//!
//! `testenv up` starts etcd, kube-apiserver, kube-controller-manager and the node simulator,
//! prints the KUBECONFIG to use and stays up until Ctrl-C (or SIGTERM), then cleans up.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use windlass_testenv::TestEnv;

#[derive(Parser)]
#[command(
    name = "testenv",
    about = "A real Kubernetes control plane on loopback, with simulated nodes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the control plane and node simulator; stay up until Ctrl-C.
    Up {
        /// Number of simulated nodes.
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// Also copy the kubeconfig here (it stays valid while `testenv up` runs).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// After startup, print the resident memory of the control plane processes.
        #[arg(long)]
        report: bool,
    },
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // kube-client logs every non-2xx answer at ERROR; the readiness probes
                // expect a few while the apiserver starts.
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("testenv: cannot build a tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("testenv: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let Command::Up {
        nodes,
        kubeconfig,
        report,
    } = cli.command;
    eprintln!(
        "testenv: starting etcd, kube-apiserver, kube-controller-manager and {nodes} simulated node(s)..."
    );
    let env = TestEnv::builder().nodes(nodes).start().await?;
    let mut path = env.kubeconfig_path().to_path_buf();
    if let Some(target) = kubeconfig {
        std::fs::copy(&path, &target)
            .map_err(|e| anyhow::anyhow!("copying the kubeconfig to {}: {e}", target.display()))?;
        path = target;
    }
    eprintln!(
        "testenv: ready in {:.2}s; apiserver {}",
        env.startup_time().as_secs_f64(),
        env.apiserver_url()
    );
    for p in env.processes() {
        eprintln!(
            "testenv:   {:<24} pid {:<8} log {}",
            p.name,
            p.pid,
            p.log.display()
        );
    }
    eprintln!("testenv:   nodes: {}", env.node_names().join(", "));
    eprintln!(
        "testenv:   directory: {} (removed on exit)",
        env.dir().display()
    );
    if report {
        // Let the controllers settle before measuring.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut total = 0;
        for p in env.processes() {
            let kib = rss_kib(p.pid).unwrap_or(0);
            total += kib;
            eprintln!(
                "testenv:   RSS {:<24} {:>7.1} MiB",
                p.name,
                kib as f64 / 1024.0
            );
        }
        eprintln!(
            "testenv:   RSS total                    {:>7.1} MiB",
            total as f64 / 1024.0
        );
    }
    // stdout carries only the line a script needs: eval "$(testenv up)" is not possible (it
    // blocks), but `testenv up | head -n1` or reading the first line is.
    println!("export KUBECONFIG={}", path.display());
    eprintln!("testenv: press Ctrl-C to stop");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    eprintln!("testenv: stopping");
    drop(env);
    Ok(())
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
