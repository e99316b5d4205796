//! Admission webhooks from plain Rust functions: checks that CEL rules cannot express (a rule
//! that reads other objects, say) and defaults computed in code, for the CRs of one kind.
//!
//! Validation rules and defaults that need nothing but the object belong in the CRD itself
//! (CEL rules and schema defaults, which the in-memory cluster enforces too); an admission
//! webhook is for the rest. The operator serves it from the same HTTPS server as its
//! conversions (the `webhook.*` configuration), registers it with the API server at start-up
//! (a ValidatingWebhookConfiguration and a MutatingWebhookConfiguration named after its
//! webhook Service, its CA injected), and `manifests` prints them.
//!
//! ```
//! use windlass::admission::{Admission, Invalid};
//! use windlass::testing::Widget;
//!
//! let admission = Admission::<Widget>::new()
//!     // Defaults: whatever the function changes becomes a JSON patch of the request.
//!     .defaults(|widget| {
//!         widget.spec.version.get_or_insert_with(|| "1.0".to_string());
//!     })
//!     // Checks, with the path of each field in their messages; they may read the cluster.
//!     .validate(|review| async move {
//!         let mut invalid = Invalid::new();
//!         if review.object.spec.version.as_deref() == Some("0.9") {
//!             invalid.field("spec.version", "0.9 is no longer supported");
//!         }
//!         invalid.into_result()
//!     });
//! # let _ = admission;
//! ```
//!
//! The API server calls the webhook for creations and updates of the CRs, converted to the
//! controller's version first; a webhook that cannot be reached refuses the write
//! (`failurePolicy: Fail`), as a check that can be skipped is not one.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::resource::PrimaryResource;

/// One admission request as a check sees it.
#[derive(Clone)]
pub struct Review<K> {
    /// The object as it would be stored (with the defaults applied).
    pub object: K,
    /// The object before an update; `None` on creation.
    pub old: Option<K>,
    /// A client of the cluster, as the operator: to read what the check depends on.
    pub client: kube::Client,
    /// Who makes the request.
    pub user: String,
}

/// What is wrong with an object: each problem at the path of its field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invalid {
    problems: Vec<(String, String)>,
}

impl Invalid {
    /// Nothing wrong yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `message` about the field at `path` (dotted, such as `spec.replicas`).
    pub fn field(&mut self, path: impl Into<String>, message: impl Into<String>) -> &mut Self {
        self.problems.push((path.into(), message.into()));
        self
    }

    /// `Ok` when nothing was found wrong, else `Err(self)`.
    pub fn into_result(self) -> Result<(), Invalid> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// The problems, as `(path, message)`.
    pub fn problems(&self) -> &[(String, String)] {
        &self.problems
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self
            .problems
            .iter()
            .map(|(path, message)| format!("{path}: {message}"))
            .collect();
        f.write_str(&lines.join("; "))
    }
}

impl std::error::Error for Invalid {}

/// A check of a [`Review`], boxed.
type Check<K> = Arc<
    dyn Fn(Review<K>) -> Pin<Box<dyn Future<Output = Result<(), Invalid>> + Send>> + Send + Sync,
>;

/// Defaults applied to an object.
type Fill<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// The admission webhooks of one kind `K`: its checks and its defaults.
pub struct Admission<K> {
    pub(crate) checks: Vec<Check<K>>,
    pub(crate) fills: Vec<Fill<K>>,
}

impl<K> Clone for Admission<K> {
    fn clone(&self) -> Self {
        Admission {
            checks: self.checks.clone(),
            fills: self.fills.clone(),
        }
    }
}

impl<K: PrimaryResource> Default for Admission<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PrimaryResource> Admission<K> {
    /// No checks, no defaults.
    pub fn new() -> Self {
        Admission {
            checks: Vec::new(),
            fills: Vec::new(),
        }
    }

    /// Refuse creations and updates `check` finds invalid, with its messages. Checks run in
    /// the order they were added, after the defaults; every problem of every check is
    /// reported.
    pub fn validate<F, Fut>(mut self, check: F) -> Self
    where
        F: Fn(Review<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Invalid>> + Send + 'static,
    {
        self.checks
            .push(Arc::new(move |review| Box::pin(check(review))));
        self
    }

    /// Set defaults on every object created or updated: what `fill` changes is sent back
    /// to the API server as a JSON patch.
    pub fn defaults(mut self, fill: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        self.fills.push(Arc::new(fill));
        self
    }

    /// Whether there is a check (a validating webhook to register).
    pub fn validates(&self) -> bool {
        !self.checks.is_empty()
    }

    /// Whether there are defaults (a mutating webhook to register).
    pub fn mutates(&self) -> bool {
        !self.fills.is_empty()
    }
}
