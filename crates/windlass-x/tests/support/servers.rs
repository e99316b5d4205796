//! Real datastore servers for tests: PostgreSQL, Redis and moto's S3, each started from the
//! binaries `scripts/provision-datastores.sh` put in the cache, on a free loopback port, in a
//! temporary directory of its own, and stopped when dropped.
//!
//! Readiness is polled with a deadline (never a fixed sleep), on evidence from the server
//! process itself, never on a port alone (another process may be there): Postgres's
//! `postmaster.pid` in its own data directory says `ready`; Redis's log says it is ready to
//! accept connections, and it answers a `PING`; moto's log says where it listens, and it
//! answers HTTP there. A server that exits or misses the deadline fails the test with the
//! end of its log. A server that is not provisioned fails the test naming the script to
//! run: these tests never skip.
//!
//! Ports: moto takes port 0 and says in its log which port it got. PostgreSQL and Redis
//! cannot (port 0 means "any" to Postgres's socket but it reports 0; to Redis it means no TCP
//! at all), so they get a port that was free a moment before; when another process takes it
//! first, the server exits saying the address is in use, and it is started again on a fresh
//! port, up to [`PORT_ATTEMPTS`] times, then the test fails saying so.
//!
//! PostgreSQL refuses to run as root, and CI runs the tests as root. Run as root, the
//! harness starts `initdb` and `postgres` in a user namespace (`unshare --user
//! --map-user=65534`) where they are `nobody`, while the kernel still sees the files they
//! touch as root's: the data directory is theirs, and a cache under `/root` stays readable,
//! with no chown and no second copy of the binaries. Where the kernel allows no user
//! namespace, they run as the real `nobody` (`setpriv`) in a directory given to it; then the
//! cache must be readable by `nobody` (not under a `/root` of mode 0700: set
//! `WINDLASS_CACHE_DIR`). `WINDLASS_TEST_POSTGRES_USER=nobody` picks that way on purpose.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a server may take to become ready (a loaded 2-core machine included).
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How long a server may take to stop after its stop signal before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);
/// How many times a server is started on fresh ports when another process took one of its
/// ports between our picking it and the server binding it.
const PORT_ATTEMPTS: u32 = 5;

/// The script that provisions the servers, named in every "not provisioned" failure.
pub const PROVISION: &str = "./scripts/provision-datastores.sh";

/// `${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}/datastores`, as the
/// provisioning script computes it.
pub fn datastores_dir() -> PathBuf {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let root = if let Some(dir) = env("WINDLASS_CACHE_DIR") {
        PathBuf::from(dir)
    } else if let Some(dir) = env("XDG_CACHE_HOME") {
        PathBuf::from(dir).join("windlass")
    } else if let Some(home) = env("HOME") {
        PathBuf::from(home).join(".cache").join("windlass")
    } else {
        panic!(
            "neither WINDLASS_CACHE_DIR, XDG_CACHE_HOME nor HOME is set: cannot find the datastore servers"
        );
    };
    root.join("datastores")
}

/// The provisioned directory `name` under [`datastores_dir`], or a failure saying what to run.
fn provisioned(name: &str, what: &str) -> PathBuf {
    let dir = datastores_dir().join(name);
    assert!(
        dir.join(".windlass-complete").is_file(),
        "{what} is not provisioned in {}: run {PROVISION} (from the repository root) once; \
         it unpacks the servers into the cache",
        dir.display()
    );
    dir
}

thread_local! {
    /// Ports [`free_port`] hands out before it looks for free ones: see [`pick_next_ports`].
    static NEXT_PORTS: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Make this thread's next starts of a server pick `ports`, in order, before free ones: a
/// test of what happens when another process took the port picked.
pub fn pick_next_ports(ports: &[u16]) {
    NEXT_PORTS.with(|next| next.borrow_mut().extend(ports.iter().rev()));
}

/// A port on 127.0.0.1 that nothing listened on a moment ago. Another process may take it
/// before our server binds it: start servers through [`on_free_ports`], which retries then.
fn free_port() -> u16 {
    if let Some(port) = NEXT_PORTS.with(|next| next.borrow_mut().pop()) {
        return port;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    listener
        .local_addr()
        .expect("a bound socket has an address")
        .port()
}

/// The PEM files of a server's TLS identity.
#[derive(Clone)]
pub struct ServerTls {
    /// The server's certificate.
    pub cert_pem: String,
    /// The server's private key.
    pub key_pem: String,
    /// The CA that issued it (Redis wants one configured even when clients bring no cert).
    pub ca_pem: String,
}

/// A running server process, stopped (signal, then kill after a deadline) when dropped.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
    stop: rustix::process::Signal,
}

impl Process {
    fn spawn(name: &'static str, mut command: Command, log: PathBuf) -> Process {
        let out = fs::File::create(&log).expect("create the server log");
        let err = out.try_clone().expect("clone the log handle");
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Process {
            name,
            child,
            log,
            stop: rustix::process::Signal::TERM,
        }
    }

    fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Poll `ready` until it holds ([`Started::Ready`]). When the server exits first because
    /// a port was in use, [`Started::PortTaken`]; when it exits otherwise or the deadline
    /// passes, fail with the log.
    fn wait_ready(&mut self, what: &str, mut ready: impl FnMut() -> bool) -> Started {
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            if ready() {
                return Started::Ready;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = self.log_tail();
                if log.to_ascii_lowercase().contains("address already in use") {
                    return Started::PortTaken;
                }
                panic!(
                    "{} exited ({status}) before {what}; its log:\n{log}",
                    self.name,
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready ({what}) within {READY_DEADLINE:?}; its log:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(POLL);
        }
    }
}

/// How a start of a server ended (a failure of any other kind fails the test at once).
#[derive(Debug, PartialEq, Eq)]
enum Started {
    /// It is up.
    Ready,
    /// It exited because another process had taken one of its ports.
    PortTaken,
}

/// Run `start` (which picks its ports with [`free_port`] and starts the server on them)
/// until a start does not fail for a port taken by another process in the meantime: at
/// most [`PORT_ATTEMPTS`] times, then fail the test saying so.
fn on_free_ports<T>(name: &str, mut start: impl FnMut() -> Option<T>) -> T {
    for attempt in 1..=PORT_ATTEMPTS {
        if let Some(started) = start() {
            return started;
        }
        eprintln!(
            "{name}: another process took a port before {name} could bind it \
             (attempt {attempt} of {PORT_ATTEMPTS}); starting it on fresh ports"
        );
    }
    panic!(
        "{name}: another process took its port {PORT_ATTEMPTS} times in a row before it could \
         bind it; is something grabbing ephemeral ports on 127.0.0.1?"
    )
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, self.stop);
        }
        let deadline = Instant::now() + STOP_DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn write_private(path: &Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, contents).expect("write a server file");
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

/// How PostgreSQL's programs run (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunAs {
    /// We are not root: as ourselves.
    Me,
    /// As `nobody` in a user namespace.
    UserNamespace,
    /// As the real `nobody`.
    Nobody,
}

/// `nobody`'s uid and gid on Debian.
const NOBODY: u32 = 65534;

fn run_as() -> RunAs {
    static CHOICE: std::sync::OnceLock<RunAs> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| {
        if !rustix::process::geteuid().is_root() {
            return RunAs::Me;
        }
        if std::env::var("WINDLASS_TEST_POSTGRES_USER").as_deref() == Ok("nobody") {
            return RunAs::Nobody;
        }
        let namespaces = Command::new("unshare")
            .args(["--user", "--map-user=65534", "--map-group=65534", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if namespaces {
            RunAs::UserNamespace
        } else {
            RunAs::Nobody
        }
    })
}

/// `program`, run as an unprivileged user when we are root (see the module docs).
fn unprivileged(program: &Path) -> Command {
    match run_as() {
        RunAs::Me => Command::new(program),
        RunAs::UserNamespace => {
            let mut command = Command::new("unshare");
            command
                .args(["--user", "--map-user=65534", "--map-group=65534", "--"])
                .arg(program);
            command
        }
        RunAs::Nobody => {
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(program);
            command
        }
    }
}

/// Hand `path` to the user PostgreSQL runs as, when that is the real `nobody`.
fn give_to_postgres(path: &Path) {
    if run_as() == RunAs::Nobody {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY))
            .unwrap_or_else(|e| panic!("chown {} to nobody: {e}", path.display()));
    }
}

/// A PostgreSQL server with one superuser, listening on 127.0.0.1.
pub struct Postgres {
    process: Process,
    port: u16,
    _dir: TempDir,
}

impl Postgres {
    /// Start a fresh cluster whose superuser `user` has `password` (SCRAM); with `tls`, the
    /// server takes TLS connections only (`hostssl` in pg_hba.conf).
    pub fn start(user: &str, password: &str, tls: Option<&ServerTls>) -> Postgres {
        let home = provisioned("postgres-15", "PostgreSQL 15");
        let dir = tempfile::Builder::new()
            .prefix("windlass-postgres-")
            .tempdir()
            .expect("a temporary directory");
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pwfile");
        write_private(&pwfile, password);
        give_to_postgres(dir.path());
        give_to_postgres(&pwfile);

        let init_log = dir.path().join("initdb.log");
        let output = unprivileged(&home.join("bin/initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                user,
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb: {e}"));
        fs::write(&init_log, [&output.stdout[..], &output.stderr[..]].concat()).ok();
        assert!(
            output.status.success(),
            "initdb failed ({}), run {:?} (see tests/support/servers.rs: as root, PostgreSQL runs \
             as nobody, in a user namespace if the kernel allows one, else with setpriv, which \
             needs the cache readable by nobody):\n{}",
            output.status,
            run_as(),
            log_tail(&init_log)
        );

        let method = if tls.is_some() { "hostssl" } else { "host" };
        fs::write(
            data.join("pg_hba.conf"),
            format!("{method} all all 127.0.0.1/32 scram-sha-256\n"),
        )
        .expect("write pg_hba.conf");

        if let Some(tls) = tls {
            for (name, pem) in [("server.crt", &tls.cert_pem), ("server.key", &tls.key_pem)] {
                let path = dir.path().join(name);
                write_private(&path, pem);
                give_to_postgres(&path);
            }
        }
        let (process, port) = on_free_ports("postgres", || {
            let port = free_port();
            let mut command = unprivileged(&home.join("bin/postgres"));
            command
                .arg("-D")
                .arg(&data)
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .arg("-k")
                .arg(dir.path())
                .args(["-c", "fsync=off", "-c", "max_connections=20"]);
            if tls.is_some() {
                command
                    .args(["-c", "ssl=on"])
                    .arg("-c")
                    .arg(format!(
                        "ssl_cert_file={}",
                        dir.path().join("server.crt").display()
                    ))
                    .arg("-c")
                    .arg(format!(
                        "ssl_key_file={}",
                        dir.path().join("server.key").display()
                    ));
            }
            let mut process = Process::spawn("postgres", command, dir.path().join("postgres.log"));
            // SIGINT: "fast" shutdown, which ends the backends too.
            process.stop = rustix::process::Signal::INT;
            // The pid file of this server's own data directory: no other server's readiness.
            let pid_file = data.join("postmaster.pid");
            let started = process.wait_ready("postmaster.pid says ready", || {
                fs::read_to_string(&pid_file)
                    .map(|pid| pid.lines().nth(7).map(str::trim) == Some("ready"))
                    .unwrap_or(false)
            });
            (started == Started::Ready).then_some((process, port))
        });
        Postgres {
            process,
            port,
            _dir: dir,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The end of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// A Redis server with one ACL user (the default user is off), on 127.0.0.1.
pub struct Redis {
    process: Process,
    port: u16,
    tls_port: Option<u16>,
    _dir: TempDir,
}

impl Redis {
    /// Start a server whose only user is `user` with `password`; with `tls`, it also takes
    /// TLS connections on [`Redis::tls_port`] (the plain port stays, for the readiness check).
    pub fn start(user: &str, password: &str, tls: Option<&ServerTls>) -> Redis {
        let home = provisioned("redis", "Redis");
        let dir = tempfile::Builder::new()
            .prefix("windlass-redis-")
            .tempdir()
            .expect("a temporary directory");
        if let Some(tls) = tls {
            let files = [
                ("server.crt", &tls.cert_pem),
                ("server.key", &tls.key_pem),
                ("ca.crt", &tls.ca_pem),
            ];
            for (name, contents) in files {
                write_private(&dir.path().join(name), contents);
            }
        }
        let log = dir.path().join("redis.log");
        let (process, port, tls_port) = on_free_ports("redis-server", || {
            let port = free_port();
            let mut config = format!(
                "bind 127.0.0.1\nport {port}\ndir {}\nsave \"\"\nappendonly no\n\
                 user default off\nuser {user} on >{password} ~* &* +@all\n",
                dir.path().display()
            );
            let mut tls_port = None;
            if tls.is_some() {
                let port = free_port();
                tls_port = Some(port);
                config.push_str(&format!(
                    "tls-port {port}\ntls-cert-file {0}/server.crt\ntls-key-file {0}/server.key\n\
                     tls-ca-cert-file {0}/ca.crt\ntls-auth-clients no\n",
                    dir.path().display()
                ));
            }
            let config_file = dir.path().join("redis.conf");
            write_private(&config_file, &config);
            let mut command = Command::new(home.join("bin/redis-server"));
            command.arg(&config_file);
            let mut process = Process::spawn("redis-server", command, log.clone());
            let started = process.wait_ready("it is ready and answers PING", || {
                // Its own log says it has bound every port; then the PING is answered by it.
                // Unauthenticated, a PING is refused with -NOAUTH: an answer all the same.
                fs::read_to_string(&log).is_ok_and(|l| l.contains("Ready to accept connections"))
                    && request(port, b"PING\r\n").is_some_and(|reply| reply.starts_with(['+', '-']))
            });
            (started == Started::Ready).then_some((process, port, tls_port))
        });
        Redis {
            process,
            port,
            tls_port,
            _dir: dir,
        }
    }

    /// The plain port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port, when started with TLS.
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("the server was started without TLS")
    }

    /// The end of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// moto's S3 server on 127.0.0.1, checking SigV4 signatures against one IAM user's key.
pub struct S3 {
    _process: Process,
    port: u16,
    access_key: String,
    secret_key: String,
    _dir: TempDir,
}

impl S3 {
    /// Start moto, create an IAM user allowed everything with an access key, then switch
    /// authentication on: from then on every request must be signed with that key.
    pub fn start() -> S3 {
        let home = provisioned("moto", "moto (the S3 server)");
        let dir = tempfile::Builder::new()
            .prefix("windlass-moto-")
            .tempdir()
            .expect("a temporary directory");
        // Port 0: the server binds a port the system picks, and its log says which.
        let mut command = Command::new(home.join("bin/python"));
        command
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
            .current_dir(dir.path());
        let log = dir.path().join("moto.log");
        let mut process = Process::spawn("moto", command, log.clone());
        let port = std::cell::Cell::new(None);
        let started = process.wait_ready("it says where it listens and answers HTTP there", || {
            if port.get().is_none() {
                port.set(
                    fs::read_to_string(&log)
                        .ok()
                        .and_then(|l| listening_port(&l)),
                );
            }
            port.get()
                .is_some_and(|port| http(port, "GET", "/moto-api/", &[], "").is_some())
        });
        assert_eq!(
            started,
            Started::Ready,
            "moto picked its own port, yet says a port was in use:\n{}",
            process.log_tail()
        );
        let port = port.get().expect("ready, so its port is known");

        // Until authentication is switched on, moto takes any request; it routes by the
        // service named in the Authorization header's credential scope, so IAM calls carry a
        // placeholder one.
        let iam = |form: &str| -> String {
            let header = (
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=setup/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=none",
            );
            let content = ("Content-Type", "application/x-www-form-urlencoded");
            let reply = http(port, "POST", "/", &[header, content], form)
                .unwrap_or_else(|| panic!("moto did not answer the IAM call {form}"));
            assert!(
                reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200"),
                "IAM call {form} failed: {reply}"
            );
            reply
        };
        iam("Action=CreateUser&UserName=windlass&Version=2010-05-08");
        let created = iam("Action=CreateAccessKey&UserName=windlass&Version=2010-05-08");
        let policy = "%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%7B%22Effect%22%3A%22Allow%22%2C%22Action%22%3A%22%2A%22%2C%22Resource%22%3A%22%2A%22%7D%5D%7D";
        iam(&format!(
            "Action=PutUserPolicy&UserName=windlass&PolicyName=all&PolicyDocument={policy}&Version=2010-05-08"
        ));
        let between = |open: &str, close: &str| -> String {
            let start = created.find(open).map(|i| i + open.len());
            let end = created.find(close);
            match (start, end) {
                (Some(start), Some(end)) if start <= end => created[start..end].to_string(),
                _ => panic!("no {open} in moto's CreateAccessKey answer: {created}"),
            }
        };
        let access_key = between("<AccessKeyId>", "</AccessKeyId>");
        let secret_key = between("<SecretAccessKey>", "</SecretAccessKey>");
        let reply = http(
            port,
            "POST",
            "/moto-api/reset-auth",
            &[("Content-Type", "text/plain")],
            "0",
        )
        .unwrap_or_default();
        assert!(
            reply.contains("\"status\": \"ok\""),
            "moto did not switch authentication on: {reply}"
        );
        S3 {
            _process: process,
            port,
            access_key,
            secret_key,
            _dir: dir,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The access key every request must be signed with.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// Its secret key.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }
}

/// The port werkzeug (moto's HTTP server) says it listens on: ` * Running on
/// http://127.0.0.1:40123`.
fn listening_port(log: &str) -> Option<u16> {
    const RUNNING: &str = "Running on http://127.0.0.1:";
    let start = log.find(RUNNING)? + RUNNING.len();
    let digits: String = log[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Send `payload` to 127.0.0.1:`port` and read the first answer, if any arrives within a
/// second.
fn request(port: u16, payload: &[u8]) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(payload).ok()?;
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A one-shot HTTP/1.0 exchange (the server closes the connection after answering), for the
/// harness's own setup calls; the tests' S3 client is hyper.
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut text = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply.starts_with("HTTP/").then_some(reply)
}
