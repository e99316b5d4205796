//! Launching a control plane: the configuration written, then etcd, kube-apiserver and
//! kube-controller-manager started in turn, each waited for; optional flags are passed only
//! where the binary takes them.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

use super::files::{
    create_dir, kubeconfig_yaml, random_token, service_account_key_pems, write_file,
};
use super::{Launched, Parts, apiserver_ready};
use crate::assets::Assets;
use crate::error::{Error, Result};
use crate::process::ManagedProcess;

/// Writes the configuration into `parts`' directory, starts the three processes and waits for
/// each to be ready. Whatever fails, `parts` still owns everything started so far.
pub(super) async fn launch(
    parts: &mut Parts,
    assets: &Assets,
    apiserver_flags: &[String],
    ports: [u16; 3],
) -> Result<Launched> {
    let layout = Layout::new(&parts.dir, ports);
    write_configuration(&layout)?;

    // Asking the binaries which flags they take costs a few hundred ms: do it while etcd starts.
    let flags = {
        let (apiserver, kcm) = (
            assets.kube_apiserver.clone(),
            assets.kube_controller_manager.clone(),
        );
        tokio::task::spawn_blocking(move || {
            (
                accepts_flag(&apiserver, "--insecure-port=0"),
                help_text(&kcm),
            )
        })
    };

    start_etcd(parts, assets, &layout).await?;
    let (apiserver_has_insecure_port, kcm_help) = flags.await.map_err(|e| {
        Error::io(
            "asking the control plane binaries for their flags",
            std::io::Error::other(e),
        )
    })?;
    let apiserver_args = apiserver_args(&layout, apiserver_has_insecure_port, apiserver_flags);
    start_apiserver(parts, assets, &layout, &apiserver_args).await?;
    let (config, client) = connect_when_ready(parts, &layout).await?;
    start_controller_manager(parts, assets, &layout, &kcm_help, client).await?;
    Ok(Launched {
        kubeconfig_path: layout.kubeconfig,
        config,
        apiserver_url: layout.apiserver_url,
    })
}

/// Where the files of one control plane are, and the ports it serves on.
struct Layout {
    /// The control plane's directory.
    dir: PathBuf,
    /// Keys and certificates: the service account key pair, the apiserver's serving cert.
    pki: PathBuf,
    etcd_client: u16,
    etcd_peer: u16,
    secure_port: u16,
    apiserver_url: String,
    /// The admin's kubeconfig, handed to the tests.
    kubeconfig: PathBuf,
    /// The controller manager's kubeconfig.
    kcm_kubeconfig: PathBuf,
    /// The bearer tokens kube-apiserver accepts.
    tokens: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
    /// kube-apiserver's serving certificate, which it generates; clients trust exactly it.
    ca_file: PathBuf,
    /// Where the processes' ids are recorded, for the watchdog.
    pid_file: PathBuf,
}

impl Layout {
    /// The layout in `dir`, with `ports` as `[etcd client, etcd peer, apiserver]`.
    fn new(dir: &Path, ports: [u16; 3]) -> Self {
        let pki = dir.join("pki");
        let secure_port = ports[2];
        Layout {
            dir: dir.to_path_buf(),
            etcd_client: ports[0],
            etcd_peer: ports[1],
            secure_port,
            apiserver_url: format!("https://127.0.0.1:{secure_port}"),
            kubeconfig: dir.join("kubeconfig"),
            kcm_kubeconfig: dir.join("kube-controller-manager.kubeconfig"),
            tokens: dir.join("tokens.csv"),
            sa_key: pki.join("sa.key"),
            sa_pub: pki.join("sa.pub"),
            ca_file: pki.join("apiserver.crt"),
            pid_file: dir.join("pids"),
            pki,
        }
    }
}

/// Writes what the processes are configured with: the bearer tokens of the admin and of
/// the controller manager, the service account key pair, and a kubeconfig for each user.
fn write_configuration(layout: &Layout) -> Result<()> {
    create_dir(&layout.pki)?;
    let admin_token = random_token()?;
    let kcm_token = random_token()?;
    // Both are cluster admins; separate users keep audit trails and logs readable.
    write_file(
        &layout.tokens,
        &format!(
            "{admin_token},admin,windlass-testenv-admin,system:masters\n\
             {kcm_token},system:kube-controller-manager,windlass-testenv-kcm,system:masters\n"
        ),
    )?;
    let (private_pem, public_pem) = service_account_key_pems()?;
    write_file(&layout.sa_key, &private_pem)?;
    write_file(&layout.sa_pub, &public_pem)?;
    write_file(
        &layout.kubeconfig,
        &kubeconfig_yaml(
            &layout.apiserver_url,
            &layout.ca_file,
            "admin",
            &admin_token,
        ),
    )?;
    write_file(
        &layout.kcm_kubeconfig,
        &kubeconfig_yaml(
            &layout.apiserver_url,
            &layout.ca_file,
            "system:kube-controller-manager",
            &kcm_token,
        ),
    )
}

/// Starts etcd and waits until it accepts connections.
async fn start_etcd(parts: &mut Parts, assets: &Assets, layout: &Layout) -> Result<()> {
    let (dir, etcd_client, etcd_peer) = (&layout.dir, layout.etcd_client, layout.etcd_peer);
    let etcd_help = help_text(&assets.etcd);
    let mut etcd_args = vec![
        "--name=default".to_string(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
        format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
        format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
        format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer}"),
        "--initial-cluster-state=new".to_string(),
        "--logger=zap".to_string(),
        "--log-level=warn".to_string(),
    ];
    // Data is thrown away at the end; fsync only costs time (etcd ≥ 3.5 can skip it).
    if etcd_help.contains("--unsafe-no-fsync") {
        etcd_args.push("--unsafe-no-fsync".to_string());
    }
    parts.processes.push(ManagedProcess::start(
        "etcd",
        &assets.etcd,
        &etcd_args,
        dir.join("etcd.log"),
        &layout.pid_file,
    )?);
    let etcd_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, etcd_client));
    parts
        .wait_for("etcd to accept connections", || async move {
            tokio::net::TcpStream::connect(etcd_addr).await.is_ok()
        })
        .await
}

/// kube-apiserver's flags: etcd, loopback, TLS with token authentication and RBAC, service
/// accounts; then `extra`, the caller's.
fn apiserver_args(layout: &Layout, has_insecure_port: bool, extra: &[String]) -> Vec<String> {
    let mut apiserver_args = vec![
        format!("--etcd-servers=http://127.0.0.1:{}", layout.etcd_client),
        "--bind-address=127.0.0.1".to_string(),
        "--advertise-address=127.0.0.1".to_string(),
        format!("--secure-port={}", layout.secure_port),
        format!("--cert-dir={}", layout.pki.display()),
        format!("--token-auth-file={}", layout.tokens.display()),
        "--authorization-mode=RBAC".to_string(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
        format!("--service-account-key-file={}", layout.sa_pub.display()),
        format!(
            "--service-account-signing-key-file={}",
            layout.sa_key.display()
        ),
        "--service-cluster-ip-range=10.96.0.0/16".to_string(),
        "--allow-privileged=true".to_string(),
        // The `kubernetes` Service's endpoints would name the advertise address, and current
        // servers refuse a loopback one for them; nothing here reaches the API server through
        // that Service, so it keeps no endpoints (as envtest does).
        "--endpoint-reconciler-type=none".to_string(),
        "--profiling=false".to_string(),
        "--v=1".to_string(),
    ];
    // Up to 1.19 kube-apiserver also serves unauthenticated HTTP on 127.0.0.1:8080 unless
    // --insecure-port=0 (1.20-1.23 accept the flag, deprecated, and ignore it; 1.24 removed it
    // and rejects it). The flag is hidden from --help, hence the trial run.
    if has_insecure_port {
        apiserver_args.push("--insecure-port=0".to_string());
    }
    apiserver_args.extend(extra.iter().cloned());
    apiserver_args
}

/// Starts kube-apiserver with `args` and waits until it has written its serving certificate
/// and listens.
async fn start_apiserver(
    parts: &mut Parts,
    assets: &Assets,
    layout: &Layout,
    args: &[String],
) -> Result<()> {
    parts.processes.push(ManagedProcess::start(
        "kube-apiserver",
        &assets.kube_apiserver,
        args,
        layout.dir.join("kube-apiserver.log"),
        &layout.pid_file,
    )?);
    let apiserver_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, layout.secure_port));
    let key_file = layout.pki.join("apiserver.key");
    parts
        .wait_for("kube-apiserver to listen", || {
            let (ca_file, key_file) = (layout.ca_file.clone(), key_file.clone());
            async move {
                ca_file.exists()
                    && key_file.exists()
                    && tokio::net::TcpStream::connect(apiserver_addr).await.is_ok()
            }
        })
        .await
}

/// The client configuration of the admin kubeconfig, and a client of it, once
/// kube-apiserver's `/readyz` answers `ok`.
async fn connect_when_ready(parts: &mut Parts, layout: &Layout) -> Result<(kube::Config, Client)> {
    let kubeconfig_path = &layout.kubeconfig;
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path).map_err(|e| Error::Kubeconfig {
        path: kubeconfig_path.clone(),
        reason: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig {
            path: kubeconfig_path.clone(),
            reason: e.to_string(),
        })?;
    let client =
        Client::try_from(config.clone()).map_err(|e| Error::kube("building a client", e))?;
    parts
        .wait_for("kube-apiserver /readyz", || {
            let client = client.clone();
            async move { apiserver_ready(&client).await }
        })
        .await?;
    Ok((config, client))
}

/// Starts kube-controller-manager and waits until it works: it has created the `default`
/// service account, which `client` reads.
async fn start_controller_manager(
    parts: &mut Parts,
    assets: &Assets,
    layout: &Layout,
    kcm_help: &str,
    client: Client,
) -> Result<()> {
    let mut kcm_args = vec![
        format!("--kubeconfig={}", layout.kcm_kubeconfig.display()),
        "--leader-elect=false".to_string(),
        "--controllers=*".to_string(),
        format!(
            "--service-account-private-key-file={}",
            layout.sa_key.display()
        ),
        format!("--root-ca-file={}", layout.ca_file.display()),
        "--use-service-account-credentials=false".to_string(),
        "--secure-port=0".to_string(),
        // Tests create objects in bursts; the default 20 QPS makes controllers lag behind.
        "--kube-api-qps=200".to_string(),
        "--kube-api-burst=400".to_string(),
        "--v=1".to_string(),
    ];
    // Before 1.24 an unauthenticated HTTP port was open on 10252 by default, which would
    // collide between two control planes. (Unlike the apiserver's, this deprecated flag is
    // listed by --help.)
    if kcm_help.contains("--port int") {
        kcm_args.push("--port=0".to_string());
    }
    parts.processes.push(ManagedProcess::start(
        "kube-controller-manager",
        &assets.kube_controller_manager,
        &kcm_args,
        layout.dir.join("kube-controller-manager.log"),
        &layout.pid_file,
    )?);
    // The service account controller creating `default/default` shows the controller
    // manager is connected, has synced its informers and runs its controllers.
    let service_accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
    parts
        .wait_for(
            "kube-controller-manager to create the default service account",
            || {
                let service_accounts = service_accounts.clone();
                async move { matches!(service_accounts.get_opt("default").await, Ok(Some(_))) }
            },
        )
        .await
}

/// Whether `binary` takes `flag` (e.g. `--insecure-port=0`): `binary <flag> --version` exits 0
/// where the flag exists and fails as an unknown flag where it does not. Unlike reading
/// `--help`, this sees deprecated flags too, which the Kubernetes binaries hide from `--help`.
/// Cached per binary and flag; `false` if the binary cannot be run.
pub(super) fn accepts_flag(binary: &Path, flag: &str) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<(PathBuf, String), bool>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (binary.to_path_buf(), flag.to_string());
    if let Some(known) = cache.lock().ok().and_then(|c| c.get(&key).copied()) {
        return known;
    }
    let accepted = std::process::Command::new(binary)
        .args([flag, "--version"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if let Ok(mut c) = cache.lock() {
        c.insert(key, accepted);
    }
    accepted
}

/// Output of `binary --help`, cached per binary; empty if it cannot be run (then no optional
/// flag is passed and a real problem shows when the binary is started).
fn help_text(binary: &Path) -> String {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(text) = cache.lock().ok().and_then(|c| c.get(binary).cloned()) {
        return text;
    }
    let text = std::process::Command::new(binary)
        .arg("--help")
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default();
    if let Ok(mut c) = cache.lock() {
        c.insert(binary.to_path_buf(), text.clone());
    }
    text
}
