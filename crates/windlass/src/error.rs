//! The error taxonomy: one enum, split into *fatal* errors that fail a rollout and
//! *expected* errors that only mean "not yet".
//!
//! The split drives behaviour in three places:
//! - in a rollout, a fatal error marks its component **failed**, an expected one leaves it
//!   **unverified** (see `rollout`);
//! - in the CR's status, the variant picks the `Ready` / `Updating` reasons
//!   (see the status module);
//! - in a [`crate::dag::CompletionState`], any recorded error that is fatal makes the state
//!   failed.
//!
//! ```
//! use windlass::Error;
//!
//! let not_yet = Error::precondition("the database has no endpoint yet");
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

    /// Any other error raised by operator code (for example an `anyhow::Error` or an
    /// `io::Error`, converted with [`Error::with_source`] or [`Error::other`]). Fatal.
    #[error("{message}")]
    Other {
        /// What failed, including the source's own text (this becomes the status message).
        message: String,
        /// The error behind it, kept whole for code that inspects or downcasts it.
        #[source]
        source: Option<SharedSource>,
    },
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
    /// The server rejected the object as invalid (HTTP 422), or as not decoding as its kind
    /// (HTTP 400, or a server-side apply's 500 saying so). Fix the manifest.
    #[error("invalid {object}: {message}")]
    Invalid {
        /// The object, as `apiVersion/kind/namespace/name`.
        object: String,
        /// The server's explanation, naming the bad field.
        message: String,
        /// The fields the server named, as its status details list them (empty when it
        /// gave none, or the refusal came from windlass's own checks).
        causes: Vec<FieldCause>,
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
        source: Option<SharedSource>,
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

    /// A [`ClusterError::Invalid`] about `object` with windlass's own `message` and no
    /// causes from a server.
    pub fn invalid(object: impl Into<String>, message: impl Into<String>) -> Self {
        ClusterError::Invalid {
            object: object.into(),
            message: message.into(),
            causes: Vec::new(),
        }
    }

    /// Whether the server refused a change to a field that cannot change after creation
    /// (a Job's template, a StatefulSet's volumeClaimTemplates, a Service's clusterIP):
    /// one of the causes it listed is such a field (see [`FieldCause::is_immutable`]).
    pub fn is_immutable_field(&self) -> bool {
        matches!(self, ClusterError::Invalid { causes, .. } if causes.iter().any(FieldCause::is_immutable))
    }
}

/// One field an API server named when it refused an object: a `causes` entry of the
/// `details` of its `422 Invalid` status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// The field's path, e.g. `spec.template`.
    pub field: String,
    /// The machine-readable kind of refusal, e.g. `FieldValueInvalid`, `FieldValueForbidden`.
    pub reason: String,
    /// The server's words about this field.
    pub message: String,
}

impl FieldCause {
    /// Whether this cause refuses a change of a field that is fixed once the object
    /// exists. Kubernetes has no cause type of its own for that: its validation reports
    /// an immutable field as `FieldValueInvalid` with the fixed text `field is immutable`
    /// (apimachinery's `ValidateImmutableField`), and a StatefulSet's spec as
    /// `FieldValueForbidden` with `updates to statefulset spec for fields other than …`.
    pub fn is_immutable(&self) -> bool {
        match self.reason.as_str() {
            "FieldValueInvalid" => self.message.ends_with("field is immutable"),
            "FieldValueForbidden" => self.message.starts_with("updates to "),
            _ => false,
        }
    }
}

/// An error kept as the [`std::error::Error::source`] of an [`Error::Other`] or a
/// [`ClusterError::Api`] (there, the kube-rs error: downcast it to `kube::Error`), so the
/// whole chain (HTTP, TLS, I/O) stays inspectable. Shared, so errors stay cheap to clone;
/// two are equal when they print the same.
#[derive(Debug, Clone)]
pub struct SharedSource(pub Arc<dyn std::error::Error + Send + Sync>);

impl fmt::Display for SharedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for SharedSource {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for SharedSource {}

impl Error {
    /// A [`Error::Config`] with the given message.
    pub fn config(message: impl Into<String>) -> Self {
        Error::Config(message.into())
    }
    /// A [`Error::Rollout`] with the given message.
    pub fn rollout(message: impl Into<String>) -> Self {
        Error::Rollout(message.into())
    }
    /// A [`Error::Precondition`]: this step cannot proceed yet, for `reason`, which becomes
    /// the status message. The rollout is incomplete, not failed, and the CR is requeued
    /// (`Updating=PreconditionWait`). A render returns it when something outside the CR is
    /// missing; checks say "not yet" with a [`Readiness`](crate::verify::Readiness) instead,
    /// and treat a precondition error propagated with `?` the same way.
    ///
    /// ```
    /// let e = windlass::Error::precondition("the database has no endpoint yet");
    /// assert!(!e.is_fatal());
    /// assert!(e.to_string().contains("the database has no endpoint yet"));
    /// ```
    pub fn precondition(reason: impl Into<String>) -> Self {
        Error::Precondition(reason.into())
    }
    /// A [`Error::Verification`]: a check that has not passed, as the rollout records it.
    pub(crate) fn verification(message: impl Into<String>) -> Self {
        Error::Verification(message.into())
    }
    /// An [`Error::Other`] with this message and no source. For a foreign error, prefer
    /// [`Error::with_source`], which keeps it.
    pub fn other(message: impl fmt::Display) -> Self {
        Error::Other {
            message: message.to_string(),
            source: None,
        }
    }
    /// An [`Error::Other`] saying `context: <the source's text>`, keeping `source` whole
    /// (any `std::error::Error`, an `anyhow::Error`).
    ///
    /// ```
    /// let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "read-only");
    /// let e = windlass::Error::with_source("writing the dump", io);
    /// assert_eq!(e.to_string(), "writing the dump: read-only");
    /// let source = std::error::Error::source(&e).unwrap();
    /// assert_eq!(source.to_string(), "read-only");
    /// ```
    pub fn with_source(
        context: impl fmt::Display,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        let source: Arc<dyn std::error::Error + Send + Sync> = Arc::from(source.into());
        Error::Other {
            message: format!("{context}: {source}"),
            source: Some(SharedSource(source)),
        }
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
    fn immutable_fields_are_read_from_the_servers_causes_not_its_message() {
        let cause = |reason: &str, message: &str| FieldCause {
            field: "spec.template".into(),
            reason: reason.into(),
            message: message.into(),
        };
        let refused = |causes| ClusterError::Invalid {
            object: "batch/v1/Job/ns/migrate".into(),
            message: "Job.batch \"migrate\" is invalid".into(),
            causes,
        };
        let job = cause(
            "FieldValueInvalid",
            "Invalid value: {…}: field is immutable",
        );
        assert!(refused(vec![job]).is_immutable_field());
        let statefulset = cause(
            "FieldValueForbidden",
            "updates to statefulset spec for fields other than 'replicas' are forbidden",
        );
        assert!(refused(vec![statefulset]).is_immutable_field());
        // An invalid value is not an immutable one, and a message alone says nothing.
        let replicas = cause("FieldValueInvalid", "Invalid value: -1: must be >= 0");
        assert!(!refused(vec![replicas]).is_immutable_field());
        let worded =
            ClusterError::invalid("v1/Service/ns/web", "spec.clusterIP: field is immutable");
        assert!(!worded.is_immutable_field());
    }

    #[test]
    fn a_foreign_error_stays_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Error::with_source("reading the dump", io);
        let source = std::error::Error::source(&e).expect("kept");
        let shared = source.downcast_ref::<SharedSource>().expect("shared");
        assert!(shared.0.downcast_ref::<std::io::Error>().is_some());
        assert!(e.is_fatal());
        assert_eq!(e.to_string(), "reading the dump: no such file");
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
