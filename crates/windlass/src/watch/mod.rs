//! What a controller watches besides its own kind and the kinds it renders
//! ([`ExtraWatch`]), and which watch events start a reconcile ([`filter`]). Declarations
//! only: the controller names them, and the runtime's watches and router act on them.

use std::sync::Arc;

use serde_json::Value;

use crate::cluster::Selector;
use crate::object::{ObjectRef, TypeRef};

pub mod filter;

/// A watch a controller asks for besides its own kind and the kinds it renders: objects of
/// another kind whose changes concern some of its CRs — a Secret the CR names, a Node a CR
/// places pods on.
///
/// ```
/// use std::sync::Arc;
/// use windlass::object::{ObjectRef, TypeRef};
/// use windlass::cluster::parse_labels;
/// use windlass::watch::ExtraWatch;
///
/// // A change of the Secret `<name>-tls` reconciles the WebApp `<name>` of its namespace.
/// let watch = ExtraWatch::new(TypeRef::new("v1", "Secret"), |secret| {
///     let name = secret["metadata"]["name"].as_str()?.strip_suffix("-tls")?;
///     let namespace = secret["metadata"]["namespace"].as_str();
///     Some(vec![ObjectRef::new("example.windlass.dev/v1alpha1", "WebApp", namespace, name)])
/// })
/// .labels(parse_labels("app.kubernetes.io/part-of=shop").unwrap());
/// ```
#[derive(Clone)]
pub struct ExtraWatch {
    /// The kind.
    pub type_ref: TypeRef,
    /// A label selector narrowing the watch, or `None` for every object.
    pub labels: Option<Selector>,
    /// The CRs an object concerns (`None` or empty: none).
    pub map: MapFn,
}

/// Names the CRs a watched object concerns.
pub type MapFn = Arc<dyn Fn(&Value) -> Option<Vec<ObjectRef>> + Send + Sync>;

impl ExtraWatch {
    /// Watch every object of `type_ref`; `map` names the CRs each one concerns.
    pub fn new(
        type_ref: TypeRef,
        map: impl Fn(&Value) -> Option<Vec<ObjectRef>> + Send + Sync + 'static,
    ) -> Self {
        ExtraWatch {
            type_ref,
            labels: None,
            map: Arc::new(map),
        }
    }

    /// Only objects matching the label `selector`.
    pub fn labels(mut self, selector: Selector) -> Self {
        self.labels = Some(selector);
        self
    }
}

impl std::fmt::Debug for ExtraWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraWatch")
            .field("type_ref", &self.type_ref)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}
