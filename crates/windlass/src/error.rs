//! The error taxonomy: one enum, split into *fatal* errors that fail a rollout and
//! *expected* errors that only mean "not yet".
//!
//! The split drives behaviour in three places:
//! - in a rollout, a fatal error marks its component **failed**, an expected one leaves it
//!   **unverified** (see [`crate::rollout`]);
//! - in the CR's status, the variant picks the `Ready` / `Updating` reasons
//!   (see [`crate::status::reasons_for_error`]);
//! - in a [`crate::dag::CompletionState`], any recorded error that is fatal makes the state
//!   failed.
//!
//! ```
//! use windlass::Error;
//!
//! let not_yet = Error::not_yet("the database has no endpoint yet");
//! assert!(!not_yet.is_fatal());
//! let broken = Error::config("spec.replicas must be at least 1");
//! assert!(broken.is_fatal());
//! ```

use std::fmt;
use std::sync::Arc;

/// Everything that can stop or delay a reconcile.
///
/// Each variant says what the operator author (or the user of the CR) should do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API could not be read or written. Usually transient: the reconcile is
    /// retried with back-off. Fatal for the rollout that hit it.
    #[error("cluster error: {0}")]
    Cluster(#[from] ClusterError),

    /// The CR, its config overrides or the operator's configuration is invalid. Nothing will
    /// change until someone fixes the input, so the message must name what is wrong.
    #[error("config error: {0}")]
    Config(String),

    /// The rollout itself went wrong (a component failed to deploy, a graph was reconciled
    /// twice, an annotation could not be parsed). Fatal.
    #[error("rollout error: {0}")]
    Rollout(String),

    /// Something this reconcile depends on is not there yet (a secret another operator writes,
    /// an endpoint). Expected: the component stays unverified and the CR is requeued.
    #[error("precondition not met: {0}")]
    Precondition(String),

    /// A component or hook did not verify yet. Expected: the CR is requeued.
    #[error("verification incomplete: {0}")]
    Verification(String),

    /// Operator code panicked. The panic is caught, the component fails, and the operator
    /// keeps serving every other CR. Fix the operator code.
    #[error("{context} panicked: {message}")]
    Panic {
        /// Where the panic happened, e.g. `component "database" while rendering`.
        context: String,
        /// The panic payload, when it was a string.
        message: String,
    },

    /// Any other error raised by operator code (for example an `anyhow::Error` converted with
    /// [`Error::other`]). Treated as fatal.
    #[error("{0}")]
    Other(String),
}

/// A failed call to the cluster, typed by what the caller can do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The API server does not serve this apiVersion/kind. Install the CRD, or fix the
    /// manifest's `apiVersion`/`kind`.
    #[error("unknown kind {kind} in {api_version}: is its CRD installed?")]
    UnknownKind {
        /// The apiVersion that was asked for.
        api_version: String,
        /// The kind that was asked for.
        kind: String,
    },
    /// The object does not exist (HTTP 404) where it had to.
    #[error("{0} not found")]
    NotFound(String),
    /// Optimistic concurrency failed (HTTP 409): re-read and retry.
    #[error("conflict on {object}: {message}")]
    Conflict {
        /// The object, as `apiVersion/kind/namespace/name`.
        object: String,
        /// The server's explanation.
        message: String,
    },
    /// The server rejected the object as invalid (HTTP 422). Fix the manifest.
    #[error("invalid {object}: {message}")]
    Invalid {
        /// The object, as `apiVersion/kind/namespace/name`.
        object: String,
        /// The server's explanation, naming the bad field.
        message: String,
    },
    /// The operator's service account may not do this (HTTP 403). The message names the
    /// refused verb and resource; fix the operator's RBAC (the `rbac` command prints what
    /// it needs).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Any other API or transport failure (5xx, timeouts, connection errors); usually
    /// transient: the reconcile is retried with back-off.
    #[error("{message}")]
    Api {
        /// What failed, naming the object or kind.
        message: String,
        /// The kube-rs error behind it, when there is one.
        #[source]
        source: Option<KubeSource>,
    },
}

impl ClusterError {
    /// A [`ClusterError::Api`] with `message` and no source.
    pub fn api(message: impl Into<String>) -> Self {
        ClusterError::Api {
            message: message.into(),
            source: None,
        }
    }

    /// Whether trying again later may succeed without anyone changing anything:
    /// conflicts, server errors, timeouts and transport failures. Invalid objects,
    /// forbidden requests and unknown kinds need a fix first.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClusterError::Conflict { .. } | ClusterError::Api { .. }
        )
    }

    /// Whether the server refused a change to a field that cannot change after creation
    /// (a Job's template, a StatefulSet's volumeClaimTemplates, a Service's clusterIP).
    pub fn is_immutable_field(&self) -> bool {
        matches!(self, ClusterError::Invalid { message, .. }
            if message.contains("field is immutable") || message.contains("Forbidden: updates to"))
    }
}

/// A kube-rs error kept as the [`std::error::Error::source`] of a [`ClusterError`], so the
/// whole chain (HTTP, TLS, I/O) stays inspectable. Shared, so errors stay cheap to clone;
/// two are equal when they print the same.
#[derive(Debug, Clone)]
pub struct KubeSource(pub Arc<kube::Error>);

impl fmt::Display for KubeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for KubeSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for KubeSource {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for KubeSource {}

impl Error {
    /// A [`Error::Config`] with the given message.
    pub fn config(message: impl Into<String>) -> Self {
        Error::Config(message.into())
    }
    /// A [`Error::Rollout`] with the given message.
    pub fn rollout(message: impl Into<String>) -> Self {
        Error::Rollout(message.into())
    }
    /// "Not yet": the one way render, verify, the hooks and edge conditions say that
    /// something is not ready, with the reason, which becomes the status message. The
    /// rollout is incomplete, not failed, and the CR is requeued. Raised while verifying it
    /// reads as [`Error::Verification`] (`Updating=VerifyWait`), elsewhere as
    /// [`Error::Precondition`] (`Updating=PreconditionWait`).
    ///
    /// ```
    /// let e = windlass::Error::not_yet("the database has no endpoint yet");
    /// assert!(!e.is_fatal());
    /// assert!(e.to_string().contains("the database has no endpoint yet"));
    /// ```
    pub fn not_yet(reason: impl Into<String>) -> Self {
        Error::Precondition(reason.into())
    }
    /// This error as seen from the verify phase: a "not yet" there is a verification that
    /// has not passed.
    pub(crate) fn in_verify(self) -> Self {
        match self {
            Error::Precondition(reason) => Error::Verification(reason),
            other => other,
        }
    }
    /// A [`Error::Precondition`] with the given message. Prefer [`Error::not_yet`], which
    /// picks the variant by where it is raised; this and [`Error::verification`] remain
    /// for code that picks the variant itself.
    pub fn precondition(message: impl Into<String>) -> Self {
        Error::Precondition(message.into())
    }
    /// A [`Error::Verification`] with the given message.
    pub fn verification(message: impl Into<String>) -> Self {
        Error::Verification(message.into())
    }
    /// Wrap any foreign error (an `anyhow::Error`, an `io::Error`, …) as [`Error::Other`].
    pub fn other(err: impl fmt::Display) -> Self {
        Error::Other(err.to_string())
    }
    /// A [`Error::Cluster`] of kind [`ClusterError::Api`] with the given message.
    pub fn cluster(message: impl Into<String>) -> Self {
        Error::Cluster(ClusterError::api(message))
    }

    /// Whether this error fails a rollout (true) or only leaves it incomplete (false).
    ///
    /// Only [`Error::Precondition`] and [`Error::Verification`] are expected; everything
    /// else, including panics and foreign errors, is fatal.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, Error::Precondition(_) | Error::Verification(_))
    }

    /// Build a [`Error::Panic`] from a caught panic payload.
    pub fn from_panic(context: impl Into<String>, payload: &(dyn std::any::Any + Send)) -> Self {
        let message = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "a non-string panic payload".to_string()
        };
        Error::Panic {
            context: context.into(),
            message,
        }
    }
}

/// Return a [`Error::Config`] unless `condition` holds.
pub fn ensure_config(condition: bool, message: impl FnOnce() -> String) -> Result<(), Error> {
    ensure(condition, || Error::Config(message()))
}

/// Return a [`Error::Precondition`] unless `condition` holds.
pub fn ensure_precondition(condition: bool, message: impl FnOnce() -> String) -> Result<(), Error> {
    ensure(condition, || Error::Precondition(message()))
}

/// Return a [`Error::Verification`] unless `condition` holds.
pub fn ensure_verified(condition: bool, message: impl FnOnce() -> String) -> Result<(), Error> {
    ensure(condition, || Error::Verification(message()))
}

/// Return a [`ClusterError::Api`] unless `condition` holds.
pub fn ensure_cluster(condition: bool, message: impl FnOnce() -> String) -> Result<(), Error> {
    ensure(condition, || Error::cluster(message()))
}

fn ensure(condition: bool, error: impl FnOnce() -> Error) -> Result<(), Error> {
    if condition { Ok(()) } else { Err(error()) }
}

/// The result type of everything operator code implements.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_precondition_and_verification_are_expected() {
        let expected = [Error::precondition("p"), Error::verification("v")];
        let fatal = [
            Error::config("c"),
            Error::rollout("r"),
            Error::cluster("x"),
            Error::other("o"),
            Error::Panic {
                context: "c".into(),
                message: "m".into(),
            },
        ];
        assert!(expected.iter().all(|e| !e.is_fatal()));
        assert!(fatal.iter().all(Error::is_fatal));
    }

    #[test]
    fn ensure_helpers_pick_their_variant() {
        assert_eq!(
            ensure_config(false, || "bad".into()),
            Err(Error::config("bad"))
        );
        assert_eq!(
            ensure_precondition(false, || "later".into()),
            Err(Error::precondition("later"))
        );
        assert!(ensure_verified(true, || unreachable!()).is_ok());
        assert!(matches!(
            ensure_cluster(false, || "down".into()),
            Err(Error::Cluster(ClusterError::Api { .. }))
        ));
    }

    #[test]
    fn panic_payloads_become_messages() {
        let caught = std::panic::catch_unwind(|| panic!("boom {}", 7)).expect_err("panics");
        let err = Error::from_panic("component \"db\" while rendering", caught.as_ref());
        assert_eq!(
            err.to_string(),
            "component \"db\" while rendering panicked: boom 7"
        );
    }
}
