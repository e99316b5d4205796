//! Discovery: a dry run of the controllers over the given CRs through a recording
//! cluster, so that every kind a rollout applies, deletes or reads is seen (see the
//! [module docs](super)).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::cluster::validation::builtin_plural;
use crate::cluster::{Cluster, Deletion, ListQuery, MemoryCluster, Scope, WriteMethod};
use crate::config::OperatorConfig;
use crate::controller::Controller;
use crate::dryrun::DryRun;
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef};
use crate::reconcile::Reconciler;

use super::{Access, KindAccess, RbacError};

/// Reconcile `manifests` in a dry run of `controller` and record every kind it touches.
///
/// Every manifest is stored in a fresh in-memory cluster as `run --dry-run` stores it
/// (namespaced objects default to `default`); those of the controller's kind are
/// reconciled, with every CR their rollouts create, and then deleted so that the
/// finalizer rollout runs too. CRDs among the manifests teach the plurals of other
/// custom kinds.
#[cfg(test)]
pub async fn discover<C>(
    controller: C,
    operator: OperatorConfig,
    manifests: impl IntoIterator<Item = Value>,
) -> Result<Access, RbacError>
where
    C: Controller,
    C::Resource: kube::CustomResourceExt,
{
    discover_with(
        controller,
        Some(<C::Resource as kube::CustomResourceExt>::crd()),
        operator,
        manifests,
    )
    .await
}

/// [`discover`] for a primary kind given its CRD, or none for a kind the cluster already
/// serves (a built-in kind).
#[cfg(test)]
pub async fn discover_with<C: Controller>(
    controller: C,
    crd: crate::resource::Crd,
    operator: OperatorConfig,
    manifests: impl IntoIterator<Item = Value>,
) -> Result<Access, RbacError> {
    Discovery::new(operator)
        .controller(controller, crd)
        .run(manifests)
        .await
}

/// [`discover`] for an operator of several controllers, in one dry run: each CR goes to
/// the controller of its kind, so the CRs a parent renders for another controller are
/// reconciled by it and need no file of their own.
///
/// Tested by `one_dry_run_needs_a_cr_of_every_controllers_kind`.
pub struct Discovery {
    operator: OperatorConfig,
    memory: Arc<MemoryCluster>,
    recording: Arc<Recording>,
    dry: DryRun,
    access: Access,
    problem: Option<RbacError>,
}

impl Discovery {
    /// A discovery with no controller yet, reconciling with `operator` (in dry-run mode).
    pub fn new(operator: OperatorConfig) -> Self {
        let memory = Arc::new(MemoryCluster::new());
        Discovery {
            operator: OperatorConfig {
                dry_run: true,
                ..operator
            },
            recording: Arc::new(Recording::new(memory.clone())),
            dry: DryRun::on(memory.clone()),
            memory,
            access: Access::default(),
            problem: None,
        }
    }

    /// Also discover what `controller` needs; its CR kind's CRD, if the operator installs
    /// one, is served by the dry run's cluster.
    pub fn controller<C: Controller>(mut self, controller: C, crd: crate::resource::Crd) -> Self {
        let mine = Access::of_primary::<C>();
        let primary = mine.primaries[0].type_ref.clone();
        if let Some(crd) = crd {
            self.memory.register_crd(&crd);
            let stored = serde_json::to_value(&crd)
                .map_err(|e| e.to_string())
                .and_then(|crd| self.memory.load([crd]).map_err(|e| e.to_string()));
            if let Err(message) = stored {
                self.problem.get_or_insert(RbacError::Manifest {
                    source_name: format!("the CRD of {primary}"),
                    message,
                });
            }
        }
        self.recording.add_primary(primary);
        self.access = std::mem::take(&mut self.access).merge(mine);
        let reconciler = Reconciler::new(controller, self.recording.clone(), self.operator.clone())
            .with_observer(RenderedKinds(self.recording.clone()));
        self.dry = self.dry.with(reconciler);
        self
    }

    /// Reconcile the CRs among `manifests` (stored as `run --dry-run` stores them), then
    /// delete them so that finalizer rollouts run too, and return what was touched.
    ///
    /// # Errors
    /// [`RbacError::NoCr`] naming a controller whose kind no CR had, in the files or
    /// rendered by another; a manifest that cannot be stored; a reconcile that failed; a
    /// kind whose plural is unknown.
    pub async fn run(
        self,
        manifests: impl IntoIterator<Item = Value>,
    ) -> Result<Access, RbacError> {
        let Discovery {
            memory,
            recording,
            dry,
            mut access,
            problem,
            ..
        } = self;
        if let Some(problem) = problem {
            return Err(problem);
        }
        let primaries: Vec<TypeRef> = access
            .primaries
            .iter()
            .map(|p| p.type_ref.clone())
            .collect();
        let manifests: Vec<Value> = manifests.into_iter().collect();
        access.config_defaults = manifests
            .iter()
            .filter_map(|m| m.annotation(crate::annotations::CONFIG_DEFAULTS))
            .map(str::to_string)
            .collect();
        let crs = store_manifests(&memory, manifests, &primaries).await?;
        let reports = dry.run(crs.clone(), |_| {}).await;
        check_reports(&reports)?;
        check_every_primary_reconciled(&primaries, &reports)?;
        finalize(&memory, &dry, &reports).await?;
        access.kinds = touched_kinds(&mut access, &recording, &memory).await?;
        Ok(access)
    }
}

/// Store `manifests` in `memory` as `run --dry-run` stores them, and return the CRs of the
/// `primaries` kinds among them, to reconcile.
async fn store_manifests(
    memory: &MemoryCluster,
    manifests: impl IntoIterator<Item = Value>,
    primaries: &[TypeRef],
) -> Result<Vec<ObjectRef>, RbacError> {
    let is_primary = |object: &Value| {
        primaries.iter().any(|p| {
            object.kind() == Some(p.kind.as_str())
                && object.api_version() == Some(p.api_version.as_str())
        })
    };
    let mut crs = Vec::new();
    for (i, doc) in manifests.into_iter().enumerate() {
        let source_name = match (doc.kind(), doc.name()) {
            (Some(kind), Some(name)) => format!("{kind}/{name}"),
            _ => format!("manifest #{}", i + 1),
        };
        let stored = memory.store(doc).await.map_err(|e| RbacError::Manifest {
            source_name: source_name.clone(),
            message: e.to_string(),
        })?;
        if is_primary(&stored) {
            let cr = ObjectRef::from_manifest(&stored).map_err(|e| RbacError::Manifest {
                source_name,
                message: e.to_string(),
            })?;
            crs.push(cr);
        }
    }
    Ok(crs)
}

/// Fail naming the first of `primaries` of which no CR was reconciled: nothing shows what
/// its controller needs.
fn check_every_primary_reconciled(
    primaries: &[TypeRef],
    reports: &[crate::reconcile::Report],
) -> Result<(), RbacError> {
    for primary in primaries {
        let reconciled = reports
            .iter()
            .any(|r| r.cr.kind == primary.kind && r.cr.api_version == primary.api_version);
        if !reconciled {
            return Err(RbacError::NoCr(primary.to_string()));
        }
    }
    Ok(())
}

/// Delete every CR `reports` name and reconcile those left terminating, so that the
/// finalizer rollouts are discovered too.
async fn finalize(
    memory: &MemoryCluster,
    dry: &DryRun,
    reports: &[crate::reconcile::Report],
) -> Result<(), RbacError> {
    // Deleting the CRs runs the finalizer rollout of a controller that has one.
    let mut reconciled: Vec<ObjectRef> = Vec::new();
    for report in reports {
        if !reconciled.contains(&report.cr) {
            reconciled.push(report.cr.clone());
        }
    }
    let mut terminating = Vec::new();
    for cr in &reconciled {
        if let Ok(Deletion::Terminating) = memory.delete(cr, None).await {
            terminating.push(cr.clone());
        }
    }
    if !terminating.is_empty() {
        let reports = dry.run(terminating, |_| {}).await;
        check_reports(&reports)?;
    }
    Ok(())
}

/// The kinds other than the primaries that the rollouts touched, each with its plural and
/// scope; what the rollouts wrote of a primary kind is marked on `access` instead.
async fn touched_kinds(
    access: &mut Access,
    recording: &Recording,
    memory: &MemoryCluster,
) -> Result<Vec<KindAccess>, RbacError> {
    let crds: Vec<Value> = memory
        .objects()
        .into_iter()
        .filter(|o| o.kind() == Some("CustomResourceDefinition"))
        .collect();
    let mut kinds = Vec::new();
    for (type_ref, writes) in recording.touched() {
        if let Some(primary) = access.primaries.iter_mut().find(|p| p.type_ref == type_ref) {
            primary.writes |= writes;
            continue;
        }
        let plural = plural_of(&type_ref, &crds)
            .ok_or_else(|| RbacError::UnknownPlural(type_ref.clone()))?;
        let scope = memory
            .scope(&type_ref)
            .await
            .map_err(|_| RbacError::UnknownPlural(type_ref.clone()))?;
        kinds.push(KindAccess {
            type_ref,
            plural,
            scope,
            writes,
        });
    }
    Ok(kinds)
}

/// Fail on the last reconcile of any CR that ended in an error.
fn check_reports(reports: &[crate::reconcile::Report]) -> Result<(), RbacError> {
    let mut last: BTreeMap<&ObjectRef, &crate::reconcile::Report> = BTreeMap::new();
    for report in reports {
        last.insert(&report.cr, report);
    }
    match last
        .into_values()
        .find_map(|r| r.error.as_ref().map(|e| (r, e)))
    {
        Some((report, error)) => Err(RbacError::Reconcile {
            cr: report.cr.to_string(),
            message: error.to_string(),
        }),
        None => Ok(()),
    }
}

/// The resource name of a kind: built in, or from a CRD among `crds`.
fn plural_of(type_ref: &TypeRef, crds: &[Value]) -> Option<String> {
    if let Some(plural) = builtin_plural(&type_ref.api_version, &type_ref.kind) {
        return Some(plural.to_string());
    }
    let (group, version) = type_ref.api_version.split_once('/')?;
    crds.iter().find_map(|crd| {
        let spec = crd.get("spec")?;
        let serves = spec.get("group")?.as_str()? == group
            && spec.get("names")?.get("kind")?.as_str()? == type_ref.kind
            && spec
                .get("versions")?
                .as_array()?
                .iter()
                .any(|v| v.get("name").and_then(Value::as_str) == Some(version));
        serves
            .then(|| {
                spec.get("names")?
                    .get("plural")?
                    .as_str()
                    .map(str::to_string)
            })
            .flatten()
    })
}

/// A [`Cluster`] that forwards to the in-memory cluster and records which kinds were
/// read and which were written.
struct Recording {
    inner: Arc<MemoryCluster>,
    /// The CR kinds: their status writes and finalizer patches have rules of their own.
    primaries: Mutex<Vec<TypeRef>>,
    /// kind → whether it was written (applied, patched or deleted).
    touched: Mutex<BTreeMap<TypeRef, bool>>,
}

impl Recording {
    fn new(inner: Arc<MemoryCluster>) -> Self {
        Recording {
            inner,
            primaries: Mutex::new(Vec::new()),
            touched: Mutex::new(BTreeMap::new()),
        }
    }

    fn add_primary(&self, primary: TypeRef) {
        self.primaries.lock().push(primary);
    }

    /// A status write or a patch is a write of the kind, except on a CR kind.
    fn is_primary(&self, type_ref: &TypeRef) -> bool {
        self.primaries.lock().contains(type_ref)
    }

    /// Note a call on `type_ref`, unless the kind is not served (nothing can be granted
    /// on it, and the call changed nothing).
    fn record<T>(&self, type_ref: TypeRef, write: bool, result: &Result<T, ClusterError>) {
        if matches!(result, Err(ClusterError::UnknownKind { .. })) {
            return;
        }
        let mut touched = self.touched.lock();
        *touched.entry(type_ref).or_default() |= write;
    }

    fn touched(&self) -> BTreeMap<TypeRef, bool> {
        self.touched.lock().clone()
    }
}

/// Records the kinds every component renders as written: an enabled component applies
/// them, a disabled one deletes them once they exist (which a dry run from an empty
/// cluster never shows as a call).
struct RenderedKinds(Arc<Recording>);

impl crate::progress::Observer for RenderedKinds {
    fn event(&self, event: &crate::progress::Event) {
        if let crate::progress::Event::Rendered { objects, .. } = event {
            for object in objects {
                self.0
                    .record(object.type_ref(), true, &Ok::<(), ClusterError>(()));
            }
        }
    }
}

#[async_trait]
impl Cluster for Recording {
    async fn scope(&self, type_ref: &TypeRef) -> Result<Scope, ClusterError> {
        self.inner.scope(type_ref).await
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, ClusterError> {
        let result = self.inner.get(object).await;
        self.record(object.type_ref(), false, &result);
        result
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Value>, ClusterError> {
        let result = self.inner.list(query).await;
        self.record(query.type_ref.clone(), false, &result);
        result
    }

    async fn apply(&self, manifest: &Value, method: WriteMethod) -> Result<Value, ClusterError> {
        let result = self.inner.apply(manifest, method).await;
        let type_ref = TypeRef::new(
            manifest.api_version().unwrap_or_default(),
            manifest.kind().unwrap_or_default(),
        );
        self.record(type_ref, true, &result);
        result
    }

    async fn delete(
        &self,
        object: &ObjectRef,
        uid: Option<&str>,
    ) -> Result<Deletion, ClusterError> {
        let result = self.inner.delete(object, uid).await;
        self.record(object.type_ref(), true, &result);
        result
    }

    async fn write_status(
        &self,
        object: &ObjectRef,
        status: &Value,
        resource_version: Option<&str>,
    ) -> Result<Option<Value>, ClusterError> {
        let result = self
            .inner
            .write_status(object, status, resource_version)
            .await;
        let type_ref = object.type_ref();
        let write = !self.is_primary(&type_ref);
        self.record(type_ref, write, &result);
        result
    }

    async fn patch(
        &self,
        object: &ObjectRef,
        patch: &json_patch::Patch,
    ) -> Result<Value, ClusterError> {
        let result = self.inner.patch(object, patch).await;
        let type_ref = object.type_ref();
        let write = !self.is_primary(&type_ref);
        self.record(type_ref, write, &result);
        result
    }
}
