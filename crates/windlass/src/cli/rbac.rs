//! Least-privilege RBAC for an operator, derived from what its controller really does
//! with a set of CRs: the `rbac` subcommand of [`crate::cli`].
//!
//! [`discover`] reconciles the CRs on the in-memory cluster (dry run) through a
//! recording [`Cluster`], so every kind a rollout applies, deletes or reads is seen,
//! whichever code path touched it: enabled components (applied), disabled components
//! (what they render, from the [`Rendered`](crate::progress::Event::Rendered) progress
//! events: they delete it once it exists), [`Controller::finalize_components`] (each CR is
//! deleted afterwards, so its finalizer rollout runs too), and reads such as
//! [`Session::get`](crate::session::Session::get).
//! [`rules`] turns that [`Access`] into policy rules, and [`manifests`] into a
//! ServiceAccount, a ClusterRole (or Role) and its binding:
//!
//! | resource                                  | verbs                                           |
//! |-------------------------------------------|-------------------------------------------------|
//! | every kind applied or deleted             | get, list, watch, create, update, patch, delete |
//! | every kind only read                      | get, list, watch                                |
//! | the CR kind                               | get, list, watch, update, patch                 |
//! | `<plural>/status` of the CR kind          | get, update, patch                              |
//! | `<plural>/finalizers` of the CR kind      | update                                          |
//! | `events` (`""` and `events.k8s.io`)       | create, patch, update                           |
//! | `leases` (`coordination.k8s.io`)          | get, list, watch, create, update, patch         |
//! | `configmaps` (the config-defaults one)    | get                                             |
//!
//! The `leader-for-life` lock needs more ([`lock_rules`]): `configmaps` create, get,
//! delete (its lock ConfigMap) and `pods` get (the ConfigMap is owned by the operator's
//! own Pod). The Lease and the annotation lock need nothing beyond the table.
//!
//! Rules are grouped by API group, resources with the same verbs share a rule, and
//! everything is sorted, so the output is the same for the same input. Resource names
//! are the plurals the API serves: k8s-openapi's `URL_PATH_SEGMENT` for built-in kinds,
//! the CRD for the CR kind and for other custom kinds whose CRD is among the manifests.
//!
//! The rules cover what the given CRs make the controller render. A component switched
//! on by the spec is covered when it is disabled too (its kinds are deleted), but a kind
//! that only some spec value makes a component render needs a CR with that value among
//! the manifests.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::cluster::validation::builtin_plural;
use crate::cluster::{Cluster, Deletion, ListQuery, MemoryCluster, Scope, WriteMethod};
use crate::config::OperatorConfig;
use crate::controller::Controller;
use crate::dryrun::DryRun;
use crate::error::ClusterError;
use crate::object::{ManifestExt, ObjectRef, TypeRef, api_group};
use crate::reconcile::Reconciler;

/// Verbs on a kind the operator creates, changes or deletes.
pub const WRITE_VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// Verbs on a kind the operator only reads.
pub const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// Why no RBAC could be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RbacError {
    /// A manifest could not be stored in the in-memory cluster.
    #[error("cannot store {source_name}: {message}")]
    Manifest {
        /// The manifest, as `kind/name` or its position.
        source_name: String,
        /// What was wrong with it.
        message: String,
    },
    /// None of the manifests is a CR of the controller's kind.
    #[error("no {0} among the manifests: give at least one CR to derive the rules from")]
    NoCr(String),
    /// A reconcile failed, so the kinds it would have rendered are unknown.
    #[error("the dry-run reconcile of {cr} failed, so the rules would be incomplete: {message}")]
    Reconcile {
        /// The CR.
        cr: String,
        /// The reconcile's error.
        message: String,
    },
    /// A kind whose resource name (plural) is unknown: neither built in nor defined by a
    /// CRD among the manifests.
    #[error(
        "the resource name of {0} is unknown: add its CustomResourceDefinition to the manifests"
    )]
    UnknownPlural(TypeRef),
    /// `--namespaced` asked for a Role, but a kind needs a ClusterRole.
    #[error(
        "a namespaced Role cannot grant access to {0}, which is cluster-scoped: drop --namespaced to get a ClusterRole"
    )]
    ClusterScoped(String),
    /// The output could not be serialized.
    #[error("cannot write the RBAC objects as YAML: {0}")]
    Yaml(String),
}

/// How the operator uses one kind, besides its own CR kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindAccess {
    /// The kind's apiVersion and kind.
    pub type_ref: TypeRef,
    /// The resource name the API serves it under, e.g. `deployments`.
    pub plural: String,
    /// Namespaced or cluster-wide.
    pub scope: Scope,
    /// Whether the operator applies or deletes objects of the kind (else it only reads).
    pub writes: bool,
}

impl KindAccess {
    /// The kind's API group (`""` for the core group).
    pub fn group(&self) -> &str {
        api_group(&self.type_ref.api_version)
    }
}

/// Everything one operator touches: the CR kinds of its controllers and the kinds their
/// rollouts use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// The CR kind of each controller. `writes` is true when rollouts also apply or delete
    /// CRs of it.
    pub primaries: Vec<KindAccess>,
    /// Every other kind, ordered by apiVersion and kind.
    pub kinds: Vec<KindAccess>,
}

impl Access {
    /// The access of controller `C` to its CR kind alone, before anything is discovered.
    pub fn of_primary<C: Controller>() -> Self {
        use kube::Resource as _;
        let scope = if crate::resource::is_namespaced::<C::Resource>() {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        Access {
            primaries: vec![KindAccess {
                type_ref: TypeRef::new(C::Resource::api_version(&()), C::Resource::kind(&())),
                plural: C::Resource::plural(&()).into_owned(),
                scope,
                writes: false,
            }],
            kinds: Vec::new(),
        }
    }

    /// The access of two controllers in one operator: both primaries, every kind either
    /// uses (writing if either writes). A kind one controller renders and another
    /// reconciles (a child CR) is that one's primary, with `writes` set.
    pub fn merge(mut self, other: Access) -> Access {
        for primary in other.primaries {
            match self
                .primaries
                .iter_mut()
                .find(|p| p.type_ref == primary.type_ref)
            {
                Some(known) => known.writes |= primary.writes,
                None => self.primaries.push(primary),
            }
        }
        for kind in other.kinds {
            match self.kinds.iter_mut().find(|k| k.type_ref == kind.type_ref) {
                Some(known) => known.writes |= kind.writes,
                None => self.kinds.push(kind),
            }
        }
        let primaries = &mut self.primaries;
        self.kinds.retain(|kind| {
            match primaries.iter_mut().find(|p| p.type_ref == kind.type_ref) {
                Some(primary) => {
                    primary.writes |= kind.writes;
                    false
                }
                None => true,
            }
        });
        self.kinds.sort_by(|a, b| {
            (&a.type_ref.api_version, &a.type_ref.kind)
                .cmp(&(&b.type_ref.api_version, &b.type_ref.kind))
        });
        self
    }

    /// The other kinds' access, by kind name (e.g. `Deployment`), if the operator uses it.
    pub fn kind(&self, kind: &str) -> Option<&KindAccess> {
        self.kinds.iter().find(|k| k.type_ref.kind == kind)
    }
}

/// Reconcile `manifests` in a dry run of `controller` and record every kind it touches.
///
/// Every manifest is stored in a fresh in-memory cluster as `run --dry-run` stores it
/// (namespaced objects default to `default`); those of the controller's kind are
/// reconciled, with every CR their rollouts create, and then deleted so that the
/// finalizer rollout runs too. CRDs among the manifests teach the plurals of other
/// custom kinds.
pub async fn discover<C>(
    controller: C,
    operator: OperatorConfig,
    manifests: impl IntoIterator<Item = Value>,
) -> Result<Access, RbacError>
where
    C: Controller,
    C::Resource: CustomResourceExt,
{
    discover_with(controller, Some(C::Resource::crd()), operator, manifests).await
}

/// [`discover`] for a primary kind given its CRD, or none for a kind the cluster already
/// serves (a built-in kind).
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
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use kube::CustomResourceExt;
/// use windlass::config::OperatorConfig;
/// use windlass::cli::rbac::Discovery;
/// use windlass::testing::{DummyController, Gadget, Widget};
///
/// let widget = serde_json::json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
///     "metadata": {"name": "w"}, "spec": {}});
/// let access = Discovery::new(OperatorConfig::default())
///     .controller(DummyController::new(), Some(Widget::crd()))
///     .controller(DummyController::<Gadget>::of_kind(), Some(Gadget::crd()))
///     .run([widget])
///     .await;
/// // No Gadget among the files, and no Widget renders one: nothing shows what the
/// // Gadget controller needs.
/// assert!(access.unwrap_err().to_string().contains("Gadget"));
/// # }
/// ```
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
        let reports = dry.run(crs.clone(), |_| {}).await;
        check_reports(&reports)?;
        for primary in &primaries {
            let reconciled = reports
                .iter()
                .any(|r| r.cr.kind == primary.kind && r.cr.api_version == primary.api_version);
            if !reconciled {
                return Err(RbacError::NoCr(primary.to_string()));
            }
        }

        // Deleting the CRs runs the finalizer rollout of a controller that has one.
        let mut reconciled: Vec<ObjectRef> = Vec::new();
        for report in &reports {
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
        access.kinds = kinds;
        Ok(access)
    }
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

/// The policy rules for `access`: grouped by API group, resources with the same verbs in
/// one rule, everything sorted (see the [module docs](self) for the verbs).
pub fn rules(access: &Access) -> Vec<PolicyRule> {
    // group → resource → verbs
    let mut grants: BTreeMap<String, BTreeMap<String, BTreeSet<&'static str>>> = BTreeMap::new();
    let mut grant = |group: &str, resource: &str, verbs: &[&'static str]| {
        grants
            .entry(group.to_string())
            .or_default()
            .entry(resource.to_string())
            .or_default()
            .extend(verbs.iter().copied());
    };
    for kind in &access.kinds {
        let verbs: &[&str] = if kind.writes {
            &WRITE_VERBS
        } else {
            &READ_VERBS
        };
        grant(kind.group(), &kind.plural, verbs);
    }
    for primary in &access.primaries {
        let group = primary.group();
        grant(
            group,
            &primary.plural,
            &["get", "list", "patch", "update", "watch"],
        );
        if primary.writes {
            grant(group, &primary.plural, &WRITE_VERBS);
        }
        grant(
            group,
            &format!("{}/status", primary.plural),
            &["get", "patch", "update"],
        );
        grant(
            group,
            &format!("{}/finalizers", primary.plural),
            &["update"],
        );
    }
    for events_group in ["", "events.k8s.io"] {
        grant(events_group, "events", &["create", "patch", "update"]);
    }
    grant(
        "coordination.k8s.io",
        "leases",
        &["create", "get", "list", "patch", "update", "watch"],
    );
    // The ConfigMap named by the config-defaults annotation.
    grant("", "configmaps", &["get"]);

    let mut rules = Vec::new();
    for (group, resources) in grants {
        // verbs → resources, so resources with the same verbs share a rule.
        let mut by_verbs: BTreeMap<Vec<&str>, Vec<String>> = BTreeMap::new();
        for (resource, verbs) in resources {
            by_verbs
                .entry(verbs.into_iter().collect())
                .or_default()
                .push(resource);
        }
        let mut group_rules: Vec<PolicyRule> = by_verbs
            .into_iter()
            .map(|(verbs, resources)| PolicyRule {
                api_groups: Some(vec![group.clone()]),
                resources: Some(resources),
                verbs: verbs.into_iter().map(str::to_string).collect(),
                ..Default::default()
            })
            .collect();
        group_rules.sort_by(|a, b| a.resources.cmp(&b.resources));
        rules.extend(group_rules);
    }
    rules
}

/// The rules a leader-election lock needs beyond [`rules`]: for `leader-for-life`,
/// creating, reading and deleting its ConfigMap and reading the operator's own Pod (the
/// ConfigMap's owner); nothing for the other kinds (the Lease is always granted, the
/// annotation lock patches the CR).
pub fn lock_rules(kind: crate::config::LockKind) -> Vec<PolicyRule> {
    let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    match kind {
        crate::config::LockKind::LeaderForLife => vec![
            rule(&["configmaps"], &["create", "delete", "get"]),
            rule(&["pods"], &["get"]),
        ],
        _ => Vec::new(),
    }
}

/// Names and placement of the RBAC objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The name of the ServiceAccount, the (Cluster)Role and the binding.
    pub name: String,
    /// The namespace of the ServiceAccount (and of the Role, when `namespaced`).
    pub namespace: String,
    /// A Role and RoleBinding in `namespace` instead of cluster-wide ones.
    pub namespaced: bool,
}

impl Options {
    /// `<kind lowercase>-operator` in `default`, cluster-wide.
    pub fn for_controller<C: Controller>() -> Self {
        use kube::Resource as _;
        Options {
            name: format!("{}-operator", C::Resource::kind(&()).to_lowercase()),
            namespace: "default".to_string(),
            namespaced: false,
        }
    }
}

/// The role and its binding, cluster-wide or in one namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum Grant {
    /// A ClusterRole bound with a ClusterRoleBinding.
    Cluster(ClusterRole, ClusterRoleBinding),
    /// A Role bound with a RoleBinding, both in the ServiceAccount's namespace.
    Namespaced(Role, RoleBinding),
}

/// The objects that give an operator exactly the access it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifests {
    /// The operator's identity.
    pub service_account: ServiceAccount,
    /// What it may do.
    pub grant: Grant,
}

impl Manifests {
    /// The rules of the role.
    pub fn rules(&self) -> &[PolicyRule] {
        let rules = match &self.grant {
            Grant::Cluster(role, _) => &role.rules,
            Grant::Namespaced(role, _) => &role.rules,
        };
        rules.as_deref().unwrap_or_default()
    }

    /// The role's rules, mutable, e.g. to take a permission away in a test.
    pub fn rules_mut(&mut self) -> &mut Vec<PolicyRule> {
        let rules = match &mut self.grant {
            Grant::Cluster(role, _) => &mut role.rules,
            Grant::Namespaced(role, _) => &mut role.rules,
        };
        rules.get_or_insert_with(Vec::new)
    }

    /// The objects as JSON manifests: ServiceAccount, role, binding.
    pub fn to_values(&self) -> Result<Vec<Value>, RbacError> {
        let json = |r: serde_json::Result<Value>| r.map_err(|e| RbacError::Yaml(e.to_string()));
        let mut values = vec![json(serde_json::to_value(&self.service_account))?];
        match &self.grant {
            Grant::Cluster(role, binding) => {
                values.push(json(serde_json::to_value(role))?);
                values.push(json(serde_json::to_value(binding))?);
            }
            Grant::Namespaced(role, binding) => {
                values.push(json(serde_json::to_value(role))?);
                values.push(json(serde_json::to_value(binding))?);
            }
        }
        Ok(values)
    }

    /// The objects as multi-document YAML, each document starting with `---`.
    pub fn to_yaml(&self) -> Result<String, RbacError> {
        let mut text = String::new();
        for value in self.to_values()? {
            let yaml =
                serde_saphyr::to_string(&value).map_err(|e| RbacError::Yaml(e.to_string()))?;
            text.push_str("---\n");
            text.push_str(yaml.trim_end());
            text.push('\n');
        }
        Ok(text)
    }
}

/// The ServiceAccount, role and binding for `access`. With `options.namespaced`, every
/// kind (and the CR kind) must be namespaced.
pub fn manifests(access: &Access, options: &Options) -> Result<Manifests, RbacError> {
    let metadata = |namespace: Option<&str>| ObjectMeta {
        name: Some(options.name.clone()),
        namespace: namespace.map(str::to_string),
        ..Default::default()
    };
    let service_account = ServiceAccount {
        metadata: metadata(Some(&options.namespace)),
        ..Default::default()
    };
    let subject = Subject {
        kind: "ServiceAccount".to_string(),
        name: options.name.clone(),
        namespace: Some(options.namespace.clone()),
        ..Default::default()
    };
    let rules = Some(rules(access));
    let grant = if options.namespaced {
        let cluster_scoped = access
            .primaries
            .iter()
            .chain(&access.kinds)
            .find(|k| k.scope == Scope::Cluster);
        if let Some(kind) = cluster_scoped {
            return Err(RbacError::ClusterScoped(format!(
                "{} ({})",
                kind.type_ref, kind.plural
            )));
        }
        Grant::Namespaced(
            Role {
                metadata: metadata(Some(&options.namespace)),
                rules,
            },
            RoleBinding {
                metadata: metadata(Some(&options.namespace)),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".to_string()),
                    kind: "Role".to_string(),
                    name: options.name.clone(),
                },
                subjects: Some(vec![subject]),
            },
        )
    } else {
        Grant::Cluster(
            ClusterRole {
                metadata: metadata(None),
                rules,
                ..Default::default()
            },
            ClusterRoleBinding {
                metadata: metadata(None),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".to_string()),
                    kind: "ClusterRole".to_string(),
                    name: options.name.clone(),
                },
                subjects: Some(vec![subject]),
            },
        )
    };
    Ok(Manifests {
        service_account,
        grant,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::testing::{DummyComponent, DummyController};
    use serde_json::json;

    fn kind(api_version: &str, kind: &str, plural: &str, scope: Scope, writes: bool) -> KindAccess {
        KindAccess {
            type_ref: TypeRef::new(api_version, kind),
            plural: plural.to_string(),
            scope,
            writes,
        }
    }

    fn widget_access(kinds: Vec<KindAccess>) -> Access {
        let mut access = Access::of_primary::<DummyController>();
        access.kinds = kinds;
        access
    }

    /// `(group, resources, verbs)` of each rule, in order.
    fn table(rules: &[PolicyRule]) -> Vec<(String, Vec<String>, Vec<String>)> {
        rules
            .iter()
            .map(|r| {
                (
                    r.api_groups.clone().unwrap().join(","),
                    r.resources.clone().unwrap(),
                    r.verbs.clone(),
                )
            })
            .collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rules_are_grouped_by_api_group_and_verbs_and_sorted() {
        let access = widget_access(vec![
            kind("v1", "Service", "services", Scope::Namespaced, true),
            kind(
                "apps/v1",
                "StatefulSet",
                "statefulsets",
                Scope::Namespaced,
                true,
            ),
            kind(
                "apps/v1",
                "Deployment",
                "deployments",
                Scope::Namespaced,
                true,
            ),
            kind("v1", "Secret", "secrets", Scope::Namespaced, false),
            kind("v1", "ConfigMap", "configmaps", Scope::Namespaced, true),
            kind(
                "networking.k8s.io/v1",
                "NetworkPolicy",
                "networkpolicies",
                Scope::Namespaced,
                true,
            ),
        ]);
        let all = strings(&WRITE_VERBS);
        let expected = vec![
            ("".into(), strings(&["configmaps", "services"]), all.clone()),
            (
                "".into(),
                strings(&["events"]),
                strings(&["create", "patch", "update"]),
            ),
            (
                "".into(),
                strings(&["secrets"]),
                strings(&["get", "list", "watch"]),
            ),
            (
                "apps".into(),
                strings(&["deployments", "statefulsets"]),
                all.clone(),
            ),
            (
                "coordination.k8s.io".into(),
                strings(&["leases"]),
                strings(&["create", "get", "list", "patch", "update", "watch"]),
            ),
            (
                "events.k8s.io".into(),
                strings(&["events"]),
                strings(&["create", "patch", "update"]),
            ),
            (
                "networking.k8s.io".into(),
                strings(&["networkpolicies"]),
                all,
            ),
            (
                "test.windlass.dev".into(),
                strings(&["widgets"]),
                strings(&["get", "list", "patch", "update", "watch"]),
            ),
            (
                "test.windlass.dev".into(),
                strings(&["widgets/finalizers"]),
                strings(&["update"]),
            ),
            (
                "test.windlass.dev".into(),
                strings(&["widgets/status"]),
                strings(&["get", "patch", "update"]),
            ),
        ];
        assert_eq!(table(&rules(&access)), expected);
        // The same access in another order gives the same rules.
        let mut reversed = access.clone();
        reversed.kinds.reverse();
        assert_eq!(rules(&reversed), rules(&access));
    }

    #[test]
    fn the_config_defaults_configmap_gets_a_read_rule_of_its_own_without_rendered_configmaps() {
        let rules = table(&rules(&widget_access(Vec::new())));
        assert!(
            rules.contains(&("".into(), strings(&["configmaps"]), strings(&["get"]))),
            "{rules:?}"
        );
        // Read-only access and the config-defaults read fold into one rule.
        let rules = table(&rules_for(vec![kind(
            "v1",
            "ConfigMap",
            "configmaps",
            Scope::Namespaced,
            false,
        )]));
        assert!(
            rules.contains(&(
                "".into(),
                strings(&["configmaps"]),
                strings(&["get", "list", "watch"])
            )),
            "{rules:?}"
        );
    }

    fn rules_for(kinds: Vec<KindAccess>) -> Vec<PolicyRule> {
        rules(&widget_access(kinds))
    }

    #[test]
    fn a_primary_kind_the_rollouts_create_gets_every_verb() {
        let mut access = widget_access(Vec::new());
        access.primaries[0].writes = true;
        let rules = table(&rules(&access));
        assert!(
            rules.contains(&(
                "test.windlass.dev".into(),
                strings(&["widgets"]),
                strings(&WRITE_VERBS)
            )),
            "{rules:?}"
        );
    }

    #[test]
    fn merged_access_grants_both_primaries_and_a_child_cr_kind_as_a_primary() {
        use crate::testing::Gadget;
        let mut widgets = widget_access(vec![
            kind("v1", "ConfigMap", "configmaps", Scope::Namespaced, false),
            // The Widget controller renders Gadgets.
            kind(
                "test.windlass.dev/v1",
                "Gadget",
                "gadgets",
                Scope::Namespaced,
                true,
            ),
        ]);
        widgets.primaries[0].writes = false;
        let mut gadgets = Access::of_primary::<DummyController<Gadget>>();
        gadgets.kinds = vec![kind(
            "v1",
            "ConfigMap",
            "configmaps",
            Scope::Namespaced,
            true,
        )];
        let merged = widgets.merge(gadgets);
        let primaries: Vec<(&str, bool)> = merged
            .primaries
            .iter()
            .map(|p| (p.type_ref.kind.as_str(), p.writes))
            .collect();
        assert_eq!(primaries, [("Widget", false), ("Gadget", true)]);
        assert_eq!(
            merged.kinds,
            [kind(
                "v1",
                "ConfigMap",
                "configmaps",
                Scope::Namespaced,
                true
            )]
        );
        let rules = table(&rules(&merged));
        for resource in ["gadgets/status", "widgets/status"] {
            assert!(
                rules
                    .iter()
                    .any(|(_, resources, _)| resources.contains(&resource.to_string())),
                "{resource}: {rules:?}"
            );
        }
    }

    fn shop(name: &str, cache: bool) -> Value {
        json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "shop"}, "spec": {"cache": cache}})
    }

    fn controller() -> DummyController {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "{cr}-web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web"}]}}}});
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "{cr}-cache"},
            "spec": {"ports": [{"port": 6379}]}});
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "{cr}-cleanup"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "c"}]}}}});
        DummyController::new()
            .component(
                DummyComponent::new("web").with_object("deployment", deployment),
                &[],
            )
            .optional_component(
                DummyComponent::new("cache").with_object("service", service),
                "cache",
            )
            .finalizer(
                "test.windlass.dev/finalizer",
                vec![DummyComponent::new("cleanup").with_object("job", job)],
            )
    }

    #[tokio::test]
    async fn discovery_finds_enabled_disabled_and_finalizer_kinds() {
        // The cache is off: its Service is only ever deleted, and still needs a rule.
        let access = discover(controller(), OperatorConfig::default(), [shop("a", false)])
            .await
            .unwrap();
        let names: Vec<(&str, &str, bool)> = access
            .kinds
            .iter()
            .map(|k| (k.type_ref.kind.as_str(), k.plural.as_str(), k.writes))
            .collect();
        assert_eq!(
            names,
            [
                ("Deployment", "deployments", true),
                ("Job", "jobs", true),
                ("Service", "services", true)
            ]
        );
        assert_eq!(access.primaries[0].plural, "widgets");
        assert!(
            !access.primaries[0].writes,
            "status and finalizer writes are not creates"
        );
    }

    #[tokio::test]
    async fn the_plural_of_another_custom_kind_comes_from_its_crd() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgetries.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                     "names": {"kind": "Gadget", "plural": "gadgetries", "singular": "gadget", "listKind": "GadgetList"},
                     "versions": [{"name": "v2", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
        let gadget = json!({"apiVersion": "example.com/v2", "kind": "Gadget", "metadata": {"name": "{cr}-gadget"}});
        let controller = DummyController::new()
            .component(DummyComponent::new("g").with_object("gadget", gadget), &[]);
        let access = discover(
            controller,
            OperatorConfig::default(),
            [crd, shop("a", false)],
        )
        .await
        .unwrap();
        let gadget = access.kind("Gadget").unwrap();
        assert_eq!(gadget.plural, "gadgetries");
        assert_eq!(gadget.scope, Scope::Cluster);
        let rules = table(&rules(&access));
        assert!(
            rules.contains(&(
                "example.com".into(),
                strings(&["gadgetries"]),
                strings(&WRITE_VERBS)
            )),
            "{rules:?}"
        );

        // A cluster-scoped kind cannot be granted by a Role.
        let options = Options {
            namespaced: true,
            ..Options::for_controller::<DummyController>()
        };
        let err = manifests(&access, &options).unwrap_err();
        assert!(matches!(err, RbacError::ClusterScoped(_)), "{err}");
        assert!(
            err.to_string()
                .contains("example.com/v2/Gadget (gadgetries)"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn no_cr_and_failed_reconciles_are_errors() {
        let err = discover(controller(), OperatorConfig::default(), Vec::new())
            .await
            .unwrap_err();
        assert_eq!(err, RbacError::NoCr("test.windlass.dev/v1/Widget".into()));

        // A kind the cluster does not serve fails the reconcile: the rules would miss it.
        let unknown =
            json!({"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}});
        let controller = DummyController::new()
            .component(DummyComponent::new("u").with_object("u", unknown), &[]);
        let err = discover(controller, OperatorConfig::default(), [shop("a", false)])
            .await
            .unwrap_err();
        assert!(matches!(err, RbacError::Reconcile { .. }), "{err}");
    }

    #[test]
    fn manifests_bind_the_role_to_the_service_account_cluster_wide_or_in_a_namespace() {
        let access = widget_access(vec![kind(
            "apps/v1",
            "Deployment",
            "deployments",
            Scope::Namespaced,
            true,
        )]);
        let options = Options {
            name: "widget-op".into(),
            namespace: "ops".into(),
            namespaced: false,
        };
        let cluster = manifests(&access, &options).unwrap();
        let values = cluster.to_values().unwrap();
        let kinds: Vec<&str> = values.iter().filter_map(|v| v.kind()).collect();
        assert_eq!(
            kinds,
            ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
        );
        assert_eq!(
            values[0]["metadata"],
            json!({"name": "widget-op", "namespace": "ops"})
        );
        assert_eq!(values[1]["metadata"], json!({"name": "widget-op"}));
        assert_eq!(
            values[2]["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "widget-op"})
        );
        assert_eq!(
            values[2]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "widget-op", "namespace": "ops"}])
        );
        assert_eq!(cluster.rules(), rules(&access).as_slice());

        let namespaced = manifests(
            &access,
            &Options {
                namespaced: true,
                ..options
            },
        )
        .unwrap();
        let values = namespaced.to_values().unwrap();
        let kinds: Vec<&str> = values.iter().filter_map(|v| v.kind()).collect();
        assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding"]);
        assert_eq!(values[1]["metadata"]["namespace"], "ops");
        assert_eq!(values[2]["roleRef"]["kind"], "Role");
    }

    #[test]
    fn only_leader_for_life_needs_rules_of_its_own() {
        use crate::config::LockKind;
        assert_eq!(
            table(&lock_rules(LockKind::LeaderForLife)),
            [
                (
                    "".into(),
                    strings(&["configmaps"]),
                    strings(&["create", "delete", "get"])
                ),
                ("".into(), strings(&["pods"]), strings(&["get"])),
            ]
        );
        for kind in [
            LockKind::LeaderWithLease,
            LockKind::Annotation,
            LockKind::Dryrun,
        ] {
            assert!(lock_rules(kind).is_empty(), "{kind:?}");
        }
    }

    #[test]
    fn the_yaml_is_multi_document_and_parses_back() {
        let access = widget_access(vec![kind(
            "apps/v1",
            "Deployment",
            "deployments",
            Scope::Namespaced,
            true,
        )]);
        let manifests = manifests(&access, &Options::for_controller::<DummyController>()).unwrap();
        let yaml = manifests.to_yaml().unwrap();
        assert!(yaml.starts_with("---\n"), "{yaml}");
        assert_eq!(yaml.matches("---\n").count(), 3, "{yaml}");
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(parsed, manifests.to_values().unwrap());
        assert_eq!(parsed[0]["metadata"]["name"], "widget-operator");
        assert_eq!(parsed[0]["metadata"]["namespace"], "default");
        assert_eq!(yaml, manifests.to_yaml().unwrap(), "deterministic");
    }
}
