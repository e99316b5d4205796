//! Child processes that cannot outlive the process that started them, and a watchdog that
//! removes the control plane's directory even when that process is killed with SIGKILL.
//!
//! Why hand-written: no crate ties a child's life to its parent's on Linux, and the pieces are
//! small. `prctl(PR_SET_PDEATHSIG)` makes the kernel signal a child when the *thread* that forked
//! it exits, not the process; so every child is forked by one dedicated thread that lives as
//! long as the process (tests run on short-lived threads). Destructors of statics never run and
//! SIGKILL runs no code at all, so directory cleanup is delegated to a tiny `sh` watchdog that
//! outlives us by a moment: it is signalled (SIGTERM) when we die, kills whatever is left and
//! removes the directory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;

use crate::error::{Error, Result};

struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<std::io::Result<Child>>,
}

/// Sender to the spawner thread. Never dropped, so the thread (and with it every child's
/// parent-death signal) lasts until the process ends.
static SPAWNER: OnceLock<std::io::Result<mpsc::Sender<SpawnRequest>>> = OnceLock::new();

fn spawner() -> std::io::Result<&'static mpsc::Sender<SpawnRequest>> {
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("windlass-testenv-spawner".into())
            .spawn(move || {
                for request in rx {
                    let mut command = request.command;
                    // If the requester is gone, nobody would ever kill this child (dropping
                    // a `Child` does not), so do it here.
                    if let Err(std::sync::mpsc::SendError(Ok(mut child))) =
                        request.reply.send(command.spawn())
                    {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                }
            })?;
        Ok(tx)
    });
    spawner
        .as_ref()
        .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
}

/// Spawns `command` from the spawner thread so that the kernel sends it `death_signal` when
/// this process ends, however it ends. Each child also gets its own process group, so a
/// terminal's Ctrl-C reaches only us and we shut the control plane down in order.
fn spawn_tied(mut command: Command, death_signal: libc::c_int) -> std::io::Result<Child> {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, raise); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            #[cfg(target_os = "linux")]
            {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    death_signal as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl; then no signal would come.
                if libc::getppid() as u32 != parent {
                    libc::raise(death_signal);
                }
            }
            #[cfg(not(target_os = "linux"))]
            let _ = (parent, death_signal);
            Ok(())
        });
    }
    command.process_group(0);
    let (reply, response) = mpsc::channel();
    let sender = spawner()?;
    sender
        .send(SpawnRequest { command, reply })
        .map_err(|_| std::io::Error::other("the windlass-testenv spawner thread is gone"))?;
    response
        .recv()
        .map_err(|_| std::io::Error::other("the windlass-testenv spawner thread did not answer"))?
}

/// One process of the control plane: killed and reaped on drop. It remembers how it was
/// started, so it can be stopped and started again with the same arguments (ports, data
/// directory, certificates) to simulate an outage.
pub(crate) struct ManagedProcess {
    name: &'static str,
    child: Child,
    log_path: PathBuf,
    binary: PathBuf,
    args: Vec<String>,
    pid_file: PathBuf,
    /// Stopped on purpose ([`Self::stop`]): not running is not a failure.
    stopped: bool,
}

impl ManagedProcess {
    /// Starts `binary` with `args`, stdout and stderr going to `log_path`, and records its pid in
    /// `pid_file` for the watchdog.
    pub(crate) fn start(
        name: &'static str,
        binary: &Path,
        args: &[String],
        log_path: PathBuf,
        pid_file: &Path,
    ) -> Result<Self> {
        let child = spawn_logged(name, binary, args, &log_path, pid_file, false)?;
        let mut process = ManagedProcess {
            name,
            child,
            log_path,
            binary: binary.to_path_buf(),
            args: args.to_vec(),
            pid_file: pid_file.to_path_buf(),
            stopped: false,
        };
        // A binary that cannot run at all (wrong architecture, bad flags) fails right here,
        // with its log, instead of at the first readiness probe.
        process.check_running()?;
        Ok(process)
    }

    /// Stops the process (SIGKILL, as a crash would) and reaps it; [`Self::check_running`]
    /// accepts that until [`Self::start_again`].
    pub(crate) fn stop(&mut self) {
        self.kill();
        self.stopped = true;
    }

    /// Starts the process again with the arguments it was first started with, its output
    /// appended to the same log. Stops it first if it still runs.
    pub(crate) fn start_again(&mut self) -> Result<()> {
        self.kill();
        self.child = spawn_logged(
            self.name,
            &self.binary,
            &self.args,
            &self.log_path,
            &self.pid_file,
            true,
        )?;
        self.stopped = false;
        self.check_running()
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// `Err(ProcessExited)` with the tail of its log if the process has exited.
    pub(crate) fn check_running(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.exited(status)),
            Err(e) => Err(Error::io(format!("checking on {}", self.name), e)),
        }
    }

    fn exited(&self, status: ExitStatus) -> Error {
        Error::ProcessExited {
            name: self.name,
            status: status.to_string(),
            log: self.log_path.clone(),
            log_tail: self.log_tail(30),
            log_removed: false,
        }
    }

    /// The last `lines` lines of the process's log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// Kills the process (SIGKILL: its data is thrown away anyway) and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Spawns `binary` tied to this process (see [`spawn_tied`]), its output going to `log_path`
/// (appended to if `append`), and records its pid in `pid_file` for the watchdog.
fn spawn_logged(
    name: &'static str,
    binary: &Path,
    args: &[String],
    log_path: &Path,
    pid_file: &Path,
    append: bool,
) -> Result<Child> {
    let log = OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(log_path)
        .map_err(|e| Error::io(format!("creating {}", log_path.display()), e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| Error::io(format!("duplicating {}", log_path.display()), e))?;
    let mut command = Command::new(binary);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let mut child = spawn_tied(command, libc::SIGKILL).map_err(|source| Error::Spawn {
        name,
        path: binary.to_path_buf(),
        source,
    })?;
    let recorded = OpenOptions::new()
        .create(true)
        .append(true)
        .open(pid_file)
        .map_err(|e| Error::io(format!("opening {}", pid_file.display()), e))
        .and_then(|mut pids| {
            writeln!(pids, "{}", child.id())
                .map_err(|e| Error::io(format!("writing {}", pid_file.display()), e))
        });
    if let Err(e) = recorded {
        // Nobody else knows about this child: do not leave it behind.
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    Ok(child)
}

/// The last `lines` lines of a log file, or a note why there are none.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    // Logs can be large; the tail is in the last few KiB.
    const WINDOW: u64 = 16 * 1024;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Shell watchdog: when our process disappears (it gets SIGTERM through the parent-death
/// signal, and polls as a fallback), it SIGKILLs every pid listed in `$2/pids`, waits briefly for
/// them to go, and removes `$2`. SIGINT/SIGHUP are ignored so a terminal's Ctrl-C cannot skip the
/// cleanup.
const WATCHDOG_SCRIPT: &str = r#"
parent=$1
dir=$2
sleeper=
cleanup() {
    trap '' TERM
    [ -n "$sleeper" ] && kill "$sleeper" 2>/dev/null
    if [ -f "$dir/pids" ]; then
        pids=$(cat "$dir/pids")
        for p in $pids; do kill -KILL "$p" 2>/dev/null; done
        n=0
        for p in $pids; do
            while kill -0 "$p" 2>/dev/null && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
        done
    fi
    rm -rf "$dir"
    exit 0
}
trap '' INT HUP
trap cleanup TERM
while kill -0 "$parent" 2>/dev/null; do
    sleep 2 &
    sleeper=$!
    wait "$sleeper"
    sleeper=
done
cleanup
"#;

/// Removes the control plane's directory if this process dies without dropping its
/// `ControlPlane`.
pub(crate) struct Watchdog {
    child: Child,
}

impl Watchdog {
    pub(crate) fn start(dir: &Path) -> Result<Self> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("windlass-testenv-watchdog")
            .arg(std::process::id().to_string())
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = spawn_tied(command, libc::SIGTERM).map_err(|source| Error::Spawn {
            name: "watchdog",
            path: PathBuf::from("sh"),
            source,
        })?;
        Ok(Watchdog { child })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Our own cleanup already ran; the watchdog must not do it again later (the directory
        // name could be reused by then), so SIGKILL rather than SIGTERM.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
