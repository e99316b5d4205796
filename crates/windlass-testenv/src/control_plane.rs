//! etcd + kube-apiserver + kube-controller-manager on loopback.
//!
//! Why hand-written: controller-runtime's envtest does this for Go; in Rust there is nothing
//! comparable, and envtest also stops short of kube-controller-manager, without which there is
//! no garbage collection, no Deployment → ReplicaSet → Pod and no namespace deletion.
//!
//! Security is on as in a real cluster: TLS only (the apiserver generates its serving cert in
//! `--cert-dir`; clients trust exactly that file), token authentication, RBAC. Flags are chosen
//! from what each binary's `--help` offers, so a newer control plane (via `WINDLASS_K8S_ASSETS`)
//! works too.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use ring::rand::SecureRandom as _;

use crate::assets::Assets;
use crate::error::{Error, Result};
use crate::process::{ManagedProcess, Watchdog};

/// How long each stage of the start may take before the harness gives up. Generous: a cold
/// page cache on a busy 2-core machine is slow, a warm start takes a few seconds.
const STAGE_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
const PORT_ATTEMPTS: u32 = 3;

/// A running process of the control plane, for diagnostics and measurements.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// `etcd`, `kube-apiserver` or `kube-controller-manager`.
    pub name: &'static str,
    /// Its process id.
    pub pid: u32,
    /// Its log file (inside the control plane's directory, removed with it).
    pub log: PathBuf,
}

/// The processes and files of one control plane. Dropping it kills the processes and removes
/// the directory.
pub(crate) struct ControlPlane {
    // Field order is drop order: processes first (reverse start order, see Drop), then the
    // directory, then the watchdog.
    processes: Vec<ManagedProcess>,
    dir: PathBuf,
    watchdog: Option<Watchdog>,
    pub(crate) kubeconfig_path: PathBuf,
    pub(crate) config: kube::Config,
    pub(crate) apiserver_url: String,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Controllers first so they do not log a storm of errors about the vanished apiserver.
        while let Some(mut process) = self.processes.pop() {
            process.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        drop(self.watchdog.take());
    }
}

impl ControlPlane {
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn processes(&self) -> Vec<ProcessInfo> {
        self.processes
            .iter()
            .map(|p| ProcessInfo {
                name: p.name(),
                pid: p.pid(),
                log: p.log_path().to_path_buf(),
            })
            .collect()
    }

    pub(crate) fn watchdog_pid(&self) -> Option<u32> {
        self.watchdog.as_ref().map(Watchdog::pid)
    }

    /// `Err` naming the first process that has exited.
    pub(crate) fn check_running(&mut self) -> Result<()> {
        self.processes
            .iter_mut()
            .try_for_each(ManagedProcess::check_running)
    }

    /// Starts a control plane and waits until the apiserver is ready and the controller manager
    /// works. Retries with fresh ports when another process took one in the meantime.
    pub(crate) async fn start(assets: &Assets) -> Result<ControlPlane> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(assets).await {
                Ok(cp) => return Ok(cp),
                Err(e) if is_port_conflict(&e) && attempt < PORT_ATTEMPTS => {
                    tracing::warn!("control plane port conflict, retrying with fresh ports: {e}");
                }
                Err(e) if is_port_conflict(&e) => {
                    return Err(Error::PortsExhausted {
                        attempts: attempt,
                        last: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_once(assets: &Assets) -> Result<ControlPlane> {
        let dir = tempfile::Builder::new()
            .prefix("windlass-testenv-")
            .tempdir()
            .map_err(|e| {
                Error::io(
                    format!("creating a directory in {}", std::env::temp_dir().display()),
                    e,
                )
            })?
            .keep();
        let watchdog = match Watchdog::start(&dir) {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let pki = dir.join("pki");
        let ports = free_ports::<3>()?;
        let (etcd_client, etcd_peer, secure_port) = (ports[0], ports[1], ports[2]);
        let apiserver_url = format!("https://127.0.0.1:{secure_port}");
        let kubeconfig_path = dir.join("kubeconfig");
        let mut cp = ControlPlane {
            processes: Vec::new(),
            dir: dir.clone(),
            watchdog: Some(watchdog),
            kubeconfig_path: kubeconfig_path.clone(),
            // Replaced below once the apiserver has written its certificate.
            config: kube::Config::new(apiserver_url.parse().map_err(|e| Error::Kubeconfig {
                path: kubeconfig_path.clone(),
                reason: format!("bad server url {apiserver_url}: {e}"),
            })?),
            apiserver_url: apiserver_url.clone(),
        };

        create_dir(&pki)?;
        let admin_token = random_token()?;
        let kcm_token = random_token()?;
        // Both are cluster admins; separate users keep audit trails and logs readable.
        write_file(
            &dir.join("tokens.csv"),
            &format!(
                "{admin_token},admin,windlass-testenv-admin,system:masters\n\
                 {kcm_token},system:kube-controller-manager,windlass-testenv-kcm,system:masters\n"
            ),
        )?;
        let sa_key = pki.join("sa.key");
        let sa_pub = pki.join("sa.pub");
        let (private_pem, public_pem) = service_account_key_pems()?;
        write_file(&sa_key, &private_pem)?;
        write_file(&sa_pub, &public_pem)?;
        let ca_file = pki.join("apiserver.crt");
        write_file(
            &kubeconfig_path,
            &kubeconfig_yaml(&apiserver_url, &ca_file, "admin", &admin_token),
        )?;
        let kcm_kubeconfig = dir.join("kube-controller-manager.kubeconfig");
        write_file(
            &kcm_kubeconfig,
            &kubeconfig_yaml(
                &apiserver_url,
                &ca_file,
                "system:kube-controller-manager",
                &kcm_token,
            ),
        )?;
        let pid_file = dir.join("pids");

        // Reading three --help texts costs a few hundred ms: do it while etcd starts.
        let help = {
            let bins = [
                assets.kube_apiserver.clone(),
                assets.kube_controller_manager.clone(),
            ];
            tokio::task::spawn_blocking(move || bins.map(|b| help_text(&b)))
        };

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
        cp.processes.push(ManagedProcess::start(
            "etcd",
            &assets.etcd,
            &etcd_args,
            dir.join("etcd.log"),
            &pid_file,
        )?);
        let etcd_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, etcd_client));
        cp.wait_for("etcd to accept connections", || async move {
            tokio::net::TcpStream::connect(etcd_addr).await.is_ok()
        })
        .await?;

        let [apiserver_help, kcm_help] = help.await.map_err(|e| {
            Error::io(
                "reading --help of the control plane binaries",
                std::io::Error::other(e),
            )
        })?;
        let mut apiserver_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={secure_port}"),
            format!("--cert-dir={}", pki.display()),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            "--authorization-mode=RBAC".to_string(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--service-cluster-ip-range=10.96.0.0/16".to_string(),
            "--allow-privileged=true".to_string(),
            "--profiling=false".to_string(),
            "--v=1".to_string(),
        ];
        // Before 1.24 an unauthenticated HTTP port could be open; make sure it is not.
        if apiserver_help.contains("--insecure-port ") {
            apiserver_args.push("--insecure-port=0".to_string());
        }
        cp.processes.push(ManagedProcess::start(
            "kube-apiserver",
            &assets.kube_apiserver,
            &apiserver_args,
            dir.join("kube-apiserver.log"),
            &pid_file,
        )?);
        let apiserver_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, secure_port));
        let key_file = pki.join("apiserver.key");
        cp.wait_for("kube-apiserver to listen", || {
            let (ca_file, key_file) = (ca_file.clone(), key_file.clone());
            async move {
                ca_file.exists()
                    && key_file.exists()
                    && tokio::net::TcpStream::connect(apiserver_addr).await.is_ok()
            }
        })
        .await?;

        let kubeconfig =
            Kubeconfig::read_from(&kubeconfig_path).map_err(|e| Error::Kubeconfig {
                path: kubeconfig_path.clone(),
                reason: e.to_string(),
            })?;
        cp.config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kubeconfig {
                path: kubeconfig_path.clone(),
                reason: e.to_string(),
            })?;
        let client =
            Client::try_from(cp.config.clone()).map_err(|e| Error::kube("building a client", e))?;
        cp.wait_for("kube-apiserver /readyz", || {
            let client = client.clone();
            async move {
                let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else { return false };
                matches!(
                    tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await,
                    Ok(Ok(body)) if body.trim() == "ok"
                )
            }
        })
        .await?;

        let mut kcm_args = vec![
            format!("--kubeconfig={}", kcm_kubeconfig.display()),
            "--leader-elect=false".to_string(),
            "--controllers=*".to_string(),
            format!("--service-account-private-key-file={}", sa_key.display()),
            format!("--root-ca-file={}", ca_file.display()),
            "--use-service-account-credentials=false".to_string(),
            "--secure-port=0".to_string(),
            // Tests create objects in bursts; the default 20 QPS makes controllers lag behind.
            "--kube-api-qps=200".to_string(),
            "--kube-api-burst=400".to_string(),
            "--v=1".to_string(),
        ];
        // Before 1.24 an unauthenticated HTTP port was open on 10252 by default, which would
        // collide between two control planes.
        if kcm_help.contains("--port int") {
            kcm_args.push("--port=0".to_string());
        }
        cp.processes.push(ManagedProcess::start(
            "kube-controller-manager",
            &assets.kube_controller_manager,
            &kcm_args,
            dir.join("kube-controller-manager.log"),
            &pid_file,
        )?);
        // The service account controller creating `default/default` shows the controller
        // manager is connected, has synced its informers and runs its controllers.
        let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        cp.wait_for(
            "kube-controller-manager to create the default service account",
            || {
                let service_accounts = service_accounts.clone();
                async move { matches!(service_accounts.get_opt("default").await, Ok(Some(_))) }
            },
        )
        .await?;
        Ok(cp)
    }

    /// Polls `probe` until it is true, failing early if a process exits and with the logs'
    /// tails after [`STAGE_TIMEOUT`].
    pub(crate) async fn wait_for<F, Fut>(&mut self, what: &str, mut probe: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        loop {
            self.check_running()?;
            if probe().await {
                tracing::debug!("{what}: ready after {:?}", start.elapsed());
                return Ok(());
            }
            if start.elapsed() > STAGE_TIMEOUT {
                let mut details = String::new();
                for p in &self.processes {
                    let _ = write!(
                        details,
                        "\n--- last lines of {} ---\n{}",
                        p.log_path().display(),
                        p.log_tail(15)
                    );
                }
                return Err(Error::Timeout {
                    what: what.to_string(),
                    after: STAGE_TIMEOUT,
                    details,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

fn is_port_conflict(e: &Error) -> bool {
    match e {
        Error::ProcessExited { log_tail, .. } => log_tail.contains("address already in use"),
        _ => false,
    }
}

/// `N` distinct free loopback ports. Holding all listeners until the end keeps them distinct;
/// another process may still take one before our child binds it, which `start` retries.
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for port in &mut ports {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| Error::io("binding a free port on 127.0.0.1", e))?;
        *port = listener
            .local_addr()
            .map_err(|e| Error::io("reading a bound port", e))?
            .port();
        listeners.push(listener);
    }
    Ok(ports)
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

pub(crate) fn random_bytes<const N: usize>(what: &'static str) -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Crypto { what })?;
    Ok(bytes)
}

fn random_token() -> Result<String> {
    let bytes = random_bytes::<24>("a bearer token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A fresh ECDSA P-256 key pair as (PKCS#8 private key PEM, SubjectPublicKeyInfo PEM): the
/// apiserver and the controller manager sign service account tokens with the private key, the
/// apiserver verifies them with the public one (its public-key reader does not take PKCS#8).
fn service_account_key_pems() -> Result<(String, String)> {
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};
    let failed = || Error::Crypto {
        what: "the service account signing key",
    };
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| failed())?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| failed())?;
    // DER header of a SubjectPublicKeyInfo for id-ecPublicKey on prime256v1 with a 65-byte
    // uncompressed point: SEQUENCE { SEQUENCE { OID, OID }, BIT STRING }.
    const P256_SPKI_PREFIX: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    let point = pair.public_key().as_ref();
    if point.len() != 65 {
        return Err(failed());
    }
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(point);
    Ok((pem("PRIVATE KEY", pkcs8.as_ref()), pem("PUBLIC KEY", &spki)))
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

/// A kubeconfig for one user. Written as text: the shape is fixed and tiny, and kubectl as
/// well as kube-rs read it back.
fn kubeconfig_yaml(server: &str, ca_file: &Path, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: windlass-testenv\n\
         \x20 cluster:\n\
         \x20   server: {server}\n\
         \x20   certificate-authority: {ca}\n\
         users:\n\
         - name: {user}\n\
         \x20 user:\n\
         \x20   token: {token}\n\
         contexts:\n\
         - name: windlass-testenv\n\
         \x20 context:\n\
         \x20   cluster: windlass-testenv\n\
         \x20   user: {user}\n\
         \x20   namespace: default\n\
         current-context: windlass-testenv\n",
        ca = ca_file.display(),
    )
}

fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| Error::io(format!("creating {}", path.display()), e))
}

fn write_file(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Tokens and keys: readable by us only.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    file.write_all(contents.as_bytes())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}
