//! What a component renders: an object together with how it is written and how its
//! readiness is judged. The rollout writes [`ManagedObject`]s and verify reads them; both
//! need nothing else of the component that rendered them.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::cluster::WriteMethod;
use crate::object::ObjectRef;

/// A check of one live object's readiness, replacing the per-kind default.
pub type VerifyFn = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// How one resource is written and verified.
#[derive(Clone, Default)]
pub struct ResourceOptions {
    pub(crate) verify: Option<VerifyFn>,
    pub(crate) method: WriteMethod,
    pub(crate) recreate: bool,
    pub(crate) create_only: bool,
    pub(crate) restart_on_dependency_change: bool,
}

impl ResourceOptions {
    /// Server-side apply, per-kind verification.
    pub fn new() -> Self {
        Self::default()
    }
    /// Verify the live object with `check` instead of the per-kind rule.
    pub fn verify(mut self, check: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        self.verify = Some(Arc::new(check));
        self
    }
    /// Write with `method` instead of server-side apply.
    pub fn method(mut self, method: WriteMethod) -> Self {
        self.method = method;
        self
    }
    /// Create the object when it does not exist, and never write it again: what it holds
    /// once created stays, whatever later renders say. For what is generated once — a
    /// Secret with a random password — render it with a fresh value every time; only the
    /// first is kept, and other components refer to it by name without reading it back.
    pub fn create_only(mut self) -> Self {
        self.create_only = true;
        self
    }
    /// Roll the pods of this object when a Secret or ConfigMap they read changes: its pod
    /// template (a Pod: its metadata) gets the annotation
    /// [`DEPENDENCY_HASH`](crate::annotations::DEPENDENCY_HASH), a hash of their data, so new
    /// data makes a new template. For a Deployment, ReplicaSet, StatefulSet, DaemonSet or
    /// Pod; other kinds are left alone. Under the runtime, a change of a Secret or
    /// ConfigMap the CR does not render (credentials a user provides, a certificate
    /// cert-manager renews) reconciles the CR too. See `rollout::dependency_hash`.
    pub fn restart_on_dependency_change(mut self) -> Self {
        self.restart_on_dependency_change = true;
        self
    }
    /// When the server refuses a change because a field cannot change after creation (a
    /// Job's pod template, a StatefulSet's volumeClaimTemplates or selector, a Service's
    /// clusterIP), delete the object and create it anew instead of failing. Only for
    /// objects whose loss is harmless: a recreated StatefulSet keeps its volumes, a
    /// recreated Job runs again.
    pub fn recreate_when_immutable(mut self) -> Self {
        self.recreate = true;
        self
    }
}

impl fmt::Debug for ResourceOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceOptions")
            .field("verify", &self.verify.as_ref().map(|_| "fn"))
            .field("method", &self.method)
            .field("recreate", &self.recreate)
            .field("create_only", &self.create_only)
            .field(
                "restart_on_dependency_change",
                &self.restart_on_dependency_change,
            )
            .finish()
    }
}

/// A rendered object, ready to apply.
#[derive(Clone)]
pub struct ManagedObject {
    /// `<component>.<resource>`.
    pub internal_name: String,
    /// The object's reference, its namespace resolved by its kind's scope.
    pub reference: ObjectRef,
    /// The manifest after patches and annotations.
    pub manifest: Value,
    /// Replaces the per-kind readiness rule, when set.
    pub verify: Option<VerifyFn>,
    /// How the object is written.
    pub method: WriteMethod,
    /// Whether a refused change of an immutable field deletes and recreates the object.
    pub recreate: bool,
    /// Whether the object is only created, never updated.
    pub create_only: bool,
}

impl ManagedObject {
    /// The object's reference.
    pub fn object_ref(&self) -> ObjectRef {
        self.reference.clone()
    }
}

impl fmt::Debug for ManagedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedObject")
            .field("internal_name", &self.internal_name)
            .field("object", &self.object_ref().to_string())
            .field("method", &self.method)
            .field("recreate", &self.recreate)
            .finish()
    }
}

impl fmt::Display for ManagedObject {
    /// `apiVersion/kind/name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.object_ref();
        write!(f, "{}/{}/{}", r.api_version, r.kind, r.name)
    }
}
