//! Least-privilege RBAC for an operator, derived from what its controller really does
//! with a set of CRs: the `rbac` subcommand of [`crate::cli`].
//!
//! [`discover`] reconciles the CRs on the in-memory cluster (dry run) through a
//! recording [`Cluster`](crate::cluster::Cluster), so every kind a rollout applies, deletes or reads is seen,
//! whichever code path touched it: enabled components (applied), disabled components
//! (what they render, from the [`Rendered`](crate::progress::Event::Rendered) progress
//! events: they delete it once it exists), [`Finalize::finalize_components`](crate::controller::Finalize::finalize_components) (each CR is
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
//! | `configmaps` the CRs name in `windlass.dev/config-defaults` | get, by name                   |
//!
//! The leader-election lock is granted apart, in the operator's own namespace only
//! ([`lock_rules`], a Role beside the ClusterRole): a Lease may be created, and read and
//! updated only under its name; the `leader-for-life` ConfigMap likewise (created, read and
//! deleted by name), with `pods` get (the ConfigMap is owned by the operator's own Pod). The
//! annotation lock needs nothing beyond the table (it patches the CR). Sharded replicas
//! (`sharding.shards`, [`shard_lock_rules`]) may create Leases, and read and update only the
//! members Lease and the shard Leases, by name; list only the members Lease (the start-up
//! check whether the API server selects shards lists it by name).
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

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::cluster::Scope;
use crate::controller::Controller;
use crate::object::{TypeRef, api_group};

mod discovery;

pub use discovery::Discovery;
#[cfg(test)]
pub use discovery::discover;

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
    /// The ConfigMaps the CRs name in their `windlass.dev/config-defaults` annotation: read
    /// by name only.
    pub config_defaults: BTreeSet<String>,
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
            config_defaults: BTreeSet::new(),
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
    #[cfg(test)]
    pub fn kind(&self, kind: &str) -> Option<&KindAccess> {
        self.kinds.iter().find(|k| k.type_ref.kind == kind)
    }
}

/// The policy rules for `access`: grouped by API group, resources with the same verbs in
/// one rule, everything sorted (see the [module docs](self) for the verbs).
pub fn rules(access: &Access) -> Vec<PolicyRule> {
    let mut rules = rules_of(grants_of(access));
    // The config-defaults ConfigMaps, by name: a CR's author chooses the name, but the
    // operator needs no other ConfigMap of the cluster for it.
    if !access.config_defaults.is_empty() {
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_string()]),
            resource_names: Some(access.config_defaults.iter().cloned().collect()),
            verbs: vec!["get".to_string()],
            ..PolicyRule::default()
        });
    }
    rules
}

/// Verbs granted, by API group, then by resource.
type Grants = BTreeMap<String, BTreeMap<String, BTreeSet<&'static str>>>;

/// What `access` needs granted: its kinds (read or write), the primary kinds with their
/// status and finalizers, and Events.
fn grants_of(access: &Access) -> Grants {
    // group → resource → verbs
    let mut grants: Grants = BTreeMap::new();
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
    grants
}

/// `grants` as policy rules: one per API group and set of verbs, sorted.
fn rules_of(grants: Grants) -> Vec<PolicyRule> {
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

/// The rules the leader-election lock `kind` named `name` needs beyond [`rules`], for a
/// Role in the lock's namespace: creating the lock object, and reading and writing it by
/// name only (an empty `name` names none: any object of the kind), so the operator cannot
/// touch another Lease, kube-system's and the nodes' included. Nothing for the annotation
/// lock and for no election.
pub fn lock_rules(kind: crate::config::LockKind, name: &str) -> Vec<PolicyRule> {
    // `Some(name)` restricts a rule to that object; an empty name restricts nothing.
    let named = (!name.is_empty()).then_some(name);
    let rule = |group: &str, resource: &str, name: Option<&str>, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        resource_names: name.map(|name| vec![name.to_string()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    match kind {
        crate::config::LockKind::LeaderWithLease => vec![
            // A create names no object yet: RBAC cannot restrict it by name.
            rule("coordination.k8s.io", "leases", None, &["create"]),
            rule("coordination.k8s.io", "leases", named, &["get", "update"]),
        ],
        crate::config::LockKind::LeaderForLife => vec![
            rule("", "configmaps", None, &["create"]),
            rule("", "configmaps", named, &["delete", "get"]),
            rule("", "pods", None, &["get"]),
        ],
        _ => Vec::new(),
    }
}

/// The rules sharded replicas (`sharding.shards` = `shards`) need beyond [`rules`], for a
/// Role in the Leases' namespace, the operator named `name` (`leader-election.id`): creating
/// Leases, and reading and updating its members Lease and its `shards` shard Leases, by
/// name; listing the members Lease, by name. An empty `name` names none: any Lease.
pub fn shard_lock_rules(name: &str, shards: u32) -> Vec<PolicyRule> {
    let lease_rule = |names: Option<Vec<String>>, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".to_string()]),
        resources: Some(vec!["leases".to_string()]),
        resource_names: names,
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    let named = |names: Vec<String>| (!name.is_empty()).then_some(names);
    let members = crate::config::sharding::members_lease_name(name);
    let mut leases = vec![members.clone()];
    leases.extend((0..shards).map(|k| crate::config::sharding::shard_lease_name(name, k)));
    vec![
        // A create names no object yet: RBAC cannot restrict it by name.
        lease_rule(None, &["create"]),
        lease_rule(named(leases), &["get", "update"]),
        lease_rule(named(vec![members]), &["list"]),
    ]
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
    #[cfg(test)]
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
    #[cfg(test)]
    pub fn rules(&self) -> &[PolicyRule] {
        let rules = match &self.grant {
            Grant::Cluster(role, _) => &role.rules,
            Grant::Namespaced(role, _) => &role.rules,
        };
        rules.as_deref().unwrap_or_default()
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
    #[cfg(test)]
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
    let service_account = ServiceAccount {
        metadata: named(options, Some(&options.namespace)),
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
        check_namespaced(access)?;
        namespaced_grant(options, rules, subject)
    } else {
        cluster_grant(options, rules, subject)
    };
    Ok(Manifests {
        service_account,
        grant,
    })
}

/// Metadata naming an object as `options` say, in `namespace` if it is namespaced.
fn named(options: &Options, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(options.name.clone()),
        namespace: namespace.map(str::to_string),
        ..Default::default()
    }
}

/// A Role cannot grant a cluster-scoped kind: fail naming the first one `access` uses.
fn check_namespaced(access: &Access) -> Result<(), RbacError> {
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
    Ok(())
}

/// A Role of `rules` in the operator's namespace, bound to `subject`.
fn namespaced_grant(options: &Options, rules: Option<Vec<PolicyRule>>, subject: Subject) -> Grant {
    Grant::Namespaced(
        Role {
            metadata: named(options, Some(&options.namespace)),
            rules,
        },
        RoleBinding {
            metadata: named(options, Some(&options.namespace)),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_string()),
                kind: "Role".to_string(),
                name: options.name.clone(),
            },
            subjects: Some(vec![subject]),
        },
    )
}

/// A ClusterRole of `rules`, bound to `subject`.
fn cluster_grant(options: &Options, rules: Option<Vec<PolicyRule>>, subject: Subject) -> Grant {
    Grant::Cluster(
        ClusterRole {
            metadata: named(options, None),
            rules,
            ..Default::default()
        },
        ClusterRoleBinding {
            metadata: named(options, None),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_string()),
                kind: "ClusterRole".to_string(),
                name: options.name.clone(),
            },
            subjects: Some(vec![subject]),
        },
    )
}

#[cfg(test)]
mod tests;
