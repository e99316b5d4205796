//! The one error type of the harness. Every variant says what went wrong and what to do.

use std::path::PathBuf;
use std::time::Duration;

/// Why the control plane, the simulator or a test namespace could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A binary of the control plane was found nowhere.
    #[error(
        "{binary} not found (looked in: {searched}). Run ./scripts/provision-control-plane.sh to build and cache \
         the control plane binaries, or point WINDLASS_K8S_ASSETS (or KUBEBUILDER_ASSETS) at a directory \
         with etcd, kube-apiserver, kube-controller-manager and kubectl"
    )]
    BinaryNotFound {
        /// The binary that is missing, e.g. `kube-apiserver`.
        binary: &'static str,
        /// Where it was looked for, human readable.
        searched: String,
    },

    /// A file or directory operation of the harness failed.
    #[error("{what}: {source}")]
    Io {
        /// What the harness was doing, with the path involved.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A control plane process could not be started.
    #[error("could not start {name} ({path}): {source}")]
    Spawn {
        /// Which process, e.g. `etcd`.
        name: &'static str,
        /// The binary that was executed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A control plane process exited while it was expected to run.
    #[error(
        "{name} exited unexpectedly ({status}); last lines of its log {}:\n{log_tail}",
        log_location(.log, *.log_removed)
    )]
    ProcessExited {
        /// Which process, e.g. `kube-apiserver`.
        name: &'static str,
        /// Its exit status, human readable.
        status: String,
        /// Path of its log file, inside the control plane's directory.
        log: PathBuf,
        /// The last lines of that log.
        log_tail: String,
        /// Whether the log is gone: a failed start removes the control plane's directory
        /// unless `WINDLASS_TESTENV_KEEP=1` is set.
        log_removed: bool,
    },

    /// Something did not become ready in time.
    #[error("{what} was not ready after {after:?}{details}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the harness waited.
        after: Duration,
        /// Extra context, e.g. the tail of a log; empty or starting with a newline.
        details: String,
    },

    /// The ports of the control plane stayed taken by other processes.
    #[error(
        "could not find free loopback ports after {attempts} attempts; something else keeps taking them: {last}"
    )]
    PortsExhausted {
        /// How many times the control plane was started with fresh ports.
        attempts: u32,
        /// The last failure.
        last: Box<Error>,
    },

    /// A call to the API server failed.
    #[error("{what}: {source}")]
    Kube {
        /// What the harness was doing.
        what: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },

    /// Watching an object failed (see [`wait_for`](crate::wait_for)).
    #[error("watching {what} failed: {source}")]
    Watch {
        /// The object, e.g. `Deployment web`.
        what: String,
        /// The watch error; its source is the client error.
        #[source]
        source: kube::runtime::wait::Error,
    },

    /// The kubeconfig the harness wrote could not be turned into a client configuration.
    #[error("the kubeconfig at {path} is unusable: {reason}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// Why it is unusable.
        reason: String,
    },

    /// Key material could not be generated.
    #[error(
        "could not generate {what}: the system random number generator or key generation failed"
    )]
    Crypto {
        /// What was being generated.
        what: &'static str,
    },

    /// The process-wide shared control plane failed to start; every test using it sees this.
    #[error("the shared control plane of this test binary failed to start: {0}")]
    SharedStartFailed(String),

    /// A client was asked for outside a tokio runtime.
    #[error("TestEnv::client must be called inside a tokio runtime (e.g. in a #[tokio::test])")]
    NoRuntime,

    /// A background task of the node simulator stopped (it panicked): Pods are no longer
    /// scheduled or driven.
    #[error(
        "the node simulator's {task} task stopped ({reason}); Pods are no longer scheduled or driven. \
         This is a bug in windlass-testenv: please report it with this message"
    )]
    SimulatorStopped {
        /// Which task: `Node watch`, `Lease renewal` or `Pod controller`.
        task: &'static str,
        /// How it ended, with the panic message.
        reason: String,
    },

    /// A process of the control plane exited, or a task of the node simulator stopped, after
    /// the environment was ready. The environment notices within a second, prints the cause to
    /// stderr, and from then on its operations fail at once with this error instead of letting
    /// tests time out.
    #[error(
        "the windlass-testenv control plane at {apiserver_url} is broken, so this fails at once \
         instead of timing out: {reason}"
    )]
    Broken {
        /// The broken control plane's apiserver URL.
        apiserver_url: String,
        /// What broke (the first failure seen), with its details.
        reason: String,
    },

    /// The control plane was shut down (or its thread died) while it was being used.
    #[error("the control plane has shut down")]
    ShutDown,
}

fn log_location(log: &std::path::Path, removed: bool) -> String {
    if removed {
        format!(
            "{} (removed since, with the control plane's directory; set {}=1 to keep it)",
            log.display(),
            crate::KEEP_ENV
        )
    } else {
        log.display().to_string()
    }
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn kube(what: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            what: what.into(),
            source,
        }
    }
}

/// `Result` with the harness's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
