use super::files::create_dir;
use super::launch::accepts_flag;
use super::*;

/// The last line of etcd 3.7's log (zap JSON) when its client port is taken.
const ETCD_PORT_TAKEN: &str = r#"{"level":"fatal","ts":"2026-11-26T22:30:10.261553Z","caller":"etcdmain/etcd.go:157","msg":"discovery failed","error":"listen tcp 127.0.0.1:52281: bind: address already in use","stacktrace":"go.etcd.io/etcd/server/v3/etcdmain.startEtcdOrProxyV2\n\tgo.etcd.io/etcd/server/v3@v3.7.0/etcdmain/etcd.go:157\ngo.etcd.io/etcd/server/v3/etcdmain.Main\n\tgo.etcd.io/etcd/server/v3@v3.7.0/etcdmain/main.go:40\nmain.main\n\tgo.etcd.io/etcd/server/v3@v3.7.0/main.go:31\nruntime.main\n\truntime/proc.go:290"}"#;

/// The last lines of kube-apiserver 1.37's log when its secure port is taken.
const APISERVER_PORT_TAKEN: &str = r#"I1126 22:30:14.303586   31520 server.go:151] Version: v1.37.2
I1126 22:30:14.303609   31520 server.go:153] "Golang settings" GOGC="" GOMAXPROCS="" GOTRACEBACK=""
E1126 22:30:14.303891   31520 run.go:72] "command failed" err="failed to create listener: failed to listen on 127.0.0.1:59529: listen tcp 127.0.0.1:59529: bind: address already in use""#;

fn exited(name: &'static str, log_tail: &str) -> Error {
    Error::ProcessExited {
        name,
        status: "exit status: 1".to_string(),
        log: PathBuf::from("/tmp/x.log"),
        log_tail: log_tail.to_string(),
        log_removed: false,
    }
}

#[test]
fn port_conflicts_are_recognised_in_real_logs() {
    assert!(is_port_conflict(&exited("etcd", ETCD_PORT_TAKEN)));
    assert!(is_port_conflict(&exited(
        "kube-apiserver",
        APISERVER_PORT_TAKEN
    )));
    assert!(!is_port_conflict(&exited(
        "kube-apiserver",
        "Error: unknown flag: --insecure-port"
    )));
    assert!(!is_port_conflict(&Error::Timeout {
        what: "etcd".to_string(),
        after: STAGE_TIMEOUT,
        details: String::new(),
    }));
}

/// Waits until no process mentions `path`. Not at once: a process killed just as it
/// forked (the watchdog's `sleep 2 &`) leaves a child that carries its command line
/// until that child execs, a moment later.
async fn no_process_mentions(path: &Path) {
    let what = format!("no process mentions {}", path.display());
    crate::eventually_within(&what, Duration::from_secs(10), || async {
        processes_mentioning(path).is_empty()
    })
    .await;
}

/// Processes whose command line mentions `path` (the watchdog has the directory in its).
fn processes_mentioning(path: &Path) -> Vec<String> {
    let needle = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&needle).then_some(cmdline)
        })
        .collect()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("windlass-testenv-unit-")
        .tempdir()
        .expect("a scratch directory")
}

/// Stand-ins for the three binaries that print a line and exit 3.
fn failing_assets(dir: &Path) -> Assets {
    use std::os::unix::fs::PermissionsExt as _;
    let script = dir.join("fails");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"fake control plane binary: the disk is on fire\" >&2\nexit 3\n",
    )
    .expect("write script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    Assets {
        etcd: script.clone(),
        kube_apiserver: script.clone(),
        kube_controller_manager: script,
        kubectl: None,
    }
}

#[tokio::test]
async fn an_error_before_any_process_starts_removes_the_directory_and_watchdog() {
    let base = scratch();
    let assets = failing_assets(base.path());
    let tmp = base.path().join("tmp");
    create_dir(&tmp).expect("tmp");
    let result = ControlPlane::start_with(&assets, &[], &tmp, false, || {
        Err(Error::io(
            "binding a free port on 127.0.0.1",
            std::io::Error::other("no ports in this test"),
        ))
    })
    .await;
    assert!(
        matches!(&result, Err(Error::Io { what, .. }) if what.contains("free port")),
        "{:?}",
        result.err()
    );
    assert_eq!(
        entries(&tmp),
        Vec::<PathBuf>::new(),
        "directory left behind"
    );
    no_process_mentions(&tmp).await;
}

#[tokio::test]
async fn a_process_exiting_at_start_is_reported_with_its_log_and_cleaned_up() {
    let base = scratch();
    let assets = failing_assets(base.path());
    let tmp = base.path().join("tmp");
    create_dir(&tmp).expect("tmp");
    let ports = || free_ports::<3>();

    let error = ControlPlane::start_with(&assets, &[], &tmp, false, ports)
        .await
        .err()
        .expect("the start fails");
    let Error::ProcessExited {
        name,
        log,
        log_tail,
        log_removed,
        ..
    } = &error
    else {
        panic!("expected ProcessExited, got {error:?}");
    };
    assert_eq!(*name, "etcd");
    assert!(log_tail.contains("the disk is on fire"), "{log_tail}");
    assert!(*log_removed && !log.exists());
    let text = error.to_string();
    assert!(
        text.contains("removed since") && text.contains("WINDLASS_TESTENV_KEEP=1"),
        "{text}"
    );
    assert!(text.contains("the disk is on fire"), "{text}");
    assert_eq!(
        entries(&tmp),
        Vec::<PathBuf>::new(),
        "directory left behind"
    );
    no_process_mentions(&tmp).await;

    // Asked to keep it: the directory and the log stay, and the error points at them.
    let error = ControlPlane::start_with(&assets, &[], &tmp, true, ports)
        .await
        .err()
        .expect("the start fails");
    let Error::ProcessExited {
        log, log_removed, ..
    } = &error
    else {
        panic!("expected ProcessExited, got {error:?}");
    };
    assert!(!*log_removed);
    let kept = std::fs::read_to_string(log).expect("the log is kept");
    assert!(kept.contains("the disk is on fire"), "{kept}");
    assert!(!error.to_string().contains("removed since"), "{error}");
    assert_eq!(entries(&tmp).len(), 1);
    assert!(log.starts_with(&tmp));
    // Nothing is left that would remove it later.
    no_process_mentions(&tmp).await;
}

#[test]
fn the_insecure_port_flag_is_found_although_help_hides_it() {
    let assets = Assets::locate().expect("control plane binaries (see the README)");
    let version = std::process::Command::new(&assets.kube_apiserver)
        .arg("--version")
        .output()
        .expect("kube-apiserver --version");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let minor: u32 = version
        .trim()
        .strip_prefix("Kubernetes v1.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("unexpected version {version:?}"));
    assert_eq!(
        accepts_flag(&assets.kube_apiserver, "--insecure-port=0"),
        minor < 24,
        "{version}"
    );
    assert!(!accepts_flag(
        &assets.kube_apiserver,
        "--windlass-no-such-flag=0"
    ));
    assert!(!accepts_flag(
        Path::new("/nonexistent/kube-apiserver"),
        "--x"
    ));
}

#[tokio::test]
async fn a_start_that_loses_a_port_race_is_retried_with_fresh_ports() {
    let assets = Assets::locate().expect("control plane binaries (see the README)");
    let base = scratch();
    // Another process "took" the port chosen for etcd between choosing and binding.
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let taken_port = taken.local_addr().expect("addr").port();
    let mut calls = 0;
    let cp = ControlPlane::start_with(&assets, &[], base.path(), false, || {
        calls += 1;
        if calls == 1 {
            let [peer, secure] = free_ports::<2>()?;
            Ok([taken_port, peer, secure])
        } else {
            free_ports::<3>()
        }
    })
    .await;
    let mut cp = cp.expect("the second attempt starts");
    assert_eq!(calls, 2, "one retry");
    cp.check_running().expect("all processes run");
    assert_eq!(entries(base.path()), vec![cp.dir().to_path_buf()]);
    let apiserver = cp
        .processes()
        .into_iter()
        .find(|p| p.name == "kube-apiserver")
        .expect("an apiserver");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", apiserver.pid)).expect("cmdline");
    assert_eq!(
        String::from_utf8_lossy(&cmdline).contains("--insecure-port=0"),
        accepts_flag(&assets.kube_apiserver, "--insecure-port=0")
    );
    drop(cp);
    assert_eq!(entries(base.path()), Vec::<PathBuf>::new());
    drop(taken);
}

#[tokio::test]
async fn ports_that_stay_taken_exhaust_the_attempts() {
    let assets = Assets::locate().expect("control plane binaries (see the README)");
    let base = scratch();
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let taken_port = taken.local_addr().expect("addr").port();
    let mut calls = 0;
    let result = ControlPlane::start_with(&assets, &[], base.path(), false, || {
        calls += 1;
        let [peer, secure] = free_ports::<2>()?;
        Ok([taken_port, peer, secure])
    })
    .await;
    match result {
        Err(Error::PortsExhausted { attempts, last }) => {
            assert_eq!(attempts, PORT_ATTEMPTS);
            assert!(
                matches!(*last, Error::ProcessExited { name: "etcd", .. }),
                "{last:?}"
            );
        }
        Err(other) => panic!("expected PortsExhausted, got {other:?}"),
        Ok(_) => panic!("started on a taken port"),
    }
    assert_eq!(calls, PORT_ATTEMPTS);
    assert_eq!(entries(base.path()), Vec::<PathBuf>::new());
    no_process_mentions(base.path()).await;
    drop(taken);
}
