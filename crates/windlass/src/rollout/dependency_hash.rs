//! Restart pods when the Secrets and ConfigMaps they read change, with one
//! option: [`ResourceOptions::restart_on_dependency_change`](crate::component::ResourceOptions::restart_on_dependency_change).
//!
//! Kubernetes does not restart a pod when a Secret or ConfigMap it reads changes: an
//! environment variable keeps its old value until the pod is replaced, and most programs
//! read their mounted files once. The usual cure (Helm's `checksum/config`, Stakater's
//! Reloader) is a hash of the data in the pod template's annotations: new data, new
//! template, a rolling update. windlass computes it for every object rendered with the
//! option:
//!
//! - **Targets**: a `Pod`, and the pod template of a `Deployment`, `ReplicaSet`,
//!   `StatefulSet` or `DaemonSet`. DaemonSets are included: their template rolls like a
//!   Deployment's, and a node agent reading a rotated certificate needs the restart as much.
//!   A `Job`'s template cannot change after creation and a `CronJob`'s only shapes later
//!   runs (which read the data afresh anyway), so both are left alone, as is every other
//!   kind. A bare `Pod` gets the annotation on its own metadata, but Kubernetes does not
//!   restart a pod whose annotations change: use a workload to get the restart.
//! - **Dependencies**: `secret` and `configMap` volumes and their `projected` sources,
//!   `env[].valueFrom.secretKeyRef` / `configMapKeyRef`, and `envFrom` Secrets and
//!   ConfigMaps, of the `containers` **and** the `initContainers`. An init container that
//!   renders a config file from a Secret runs only when the pod starts, so it sees a change
//!   only through a restart: it needs the hash most of all.
//! - **Values**: a dependency this component renders, or an enabled component it
//!   [`depends_on`](crate::controller::Components::depends_on) (directly or through
//!   others) renders, is hashed as rendered, so a change of the CR's spec rolls the pods
//!   in the same reconcile that writes the new Secret. Only those: the runner renders them
//!   before the consumer every time, whereas another component may or may not have
//!   rendered by then, which would make the hash flip between passes whenever its
//!   rendered copy and the cluster's differ (another writer added a key). A `create_only`
//!   object is read from the cluster instead: what it holds is what was created, not what
//!   is rendered afresh. Everything else is read from the cluster through the session
//!   (from the runtime's watch caches, at most once per reconcile). A dependency that does
//!   not exist is left out of the hash (debug log when every reference to it is
//!   `optional`, a warning otherwise): the pod cannot start without a required one, and
//!   the hash changes when it appears, so the pods are restarted as soon as it does. A
//!   failed read fails the component.
//! - **Written later in the same rollout**: when a component that is not upstream of the
//!   consumer writes a dependency after the consumer's hash was computed from the
//!   cluster's copy, that hash is stale, and the echo of windlass's own write does not
//!   reconcile the CR that wrote it. The reconcile then ends with
//!   [`Action::RequeueAfter`](crate::Action::RequeueAfter)
//!   [`STALE_DEPENDENCY_HASH_REQUEUE`](crate::reconcile::STALE_DEPENDENCY_HASH_REQUEUE),
//!   whatever `should_requeue` says, and the next one rolls the pods: one reconcile
//!   later, not in the reconcile that writes the Secret. Declaring the dependency
//!   (`depends_on`) avoids the second pass.
//! - **Hash**: SHA-256 over the canonical JSON (sorted keys) of the list of dependencies,
//!   sorted by kind and name, each as `{kind, name, digest}`, where `digest` is the
//!   SHA-256 of the canonical JSON of its `{data, binaryData}` (a Secret's `stringData`
//!   folded into `data` as the server does), stamped as
//!   [`DEPENDENCY_HASH`](crate::annotations::DEPENDENCY_HASH) on the pod template's
//!   metadata. The same data gives the same hash, so a steady state writes nothing. A
//!   digest per dependency, not its data, goes into the hash so that the runtime's watch
//!   of a kind CRs read can keep each object's digest instead of its data (see
//!   [`data_digest`]). Only names and digests leave this module: no data is logged.
//! - **Exposure**: the digest is unsalted and readable by anyone who can read the
//!   workload (and its pods), a wider audience than the Secret's readers. This is the
//!   trade-off Helm's `checksum/config` annotations and Stakater's Reloader make: a
//!   digest of high-entropy data (keys, certificates, generated passwords) reveals
//!   nothing usable, but a low-entropy value (a short password, a yes/no setting) can be
//!   confirmed by hashing guesses, and anyone can see *when* the data changes. A keyed
//!   hash would need a key that every replica shares and that survives restarts (a new
//!   key rolls every pod), that is a Secret of its own to manage; keep such values out
//!   of the dependencies of workloads whose readers should not test guesses of them.
//!
//! The runtime reconciles a CR when a dependency it read from the cluster changes,
//! including when another CR's reconcile wrote it (the echo of windlass's own write still
//! concerns the other CRs that read it; see [`crate::runtime::route`]): the rollout
//! reports them with [`Event::Dependencies`](crate::progress::Event::Dependencies),
//! and from the first such report of a kind on, the runtime watches every object of that
//! kind in its namespaces (see [`crate::runtime::dependencies`]), keeping of each what a
//! rollout reads and the digest of its data, so those reads are served from memory too
//! ([`Cluster::get_dependency`]). The operator needs `list` and `watch` on Secrets (and
//! ConfigMaps) for that; `windlass rbac` grants them, as it does for every kind a rollout
//! reads. A controller that watches the kind itself with a label selector
//! ([`Controller::watches`](crate::controller::Controller::watches)) keeps its own watch:
//! a dependency outside that selector is then read, but its changes are not seen.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::annotations;
use crate::cluster::{Cluster, DATA_DIGEST};
use crate::error::Result;
use crate::object::{ManifestExt, ObjectRef, api_group};

/// The kinds a pod can read data from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DependencyKind {
    /// A `v1` ConfigMap.
    ConfigMap,
    /// A `v1` Secret.
    Secret,
}

impl DependencyKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyKind::ConfigMap => "ConfigMap",
            DependencyKind::Secret => "Secret",
        }
    }
}

/// A Secret or ConfigMap a pod reads, by name, in the pod's namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dependency {
    /// Its kind.
    pub kind: DependencyKind,
    /// Its name.
    pub name: String,
    /// Whether every reference to it is `optional: true` (the pod starts without it).
    pub optional: bool,
}

impl Dependency {
    /// The object, in `namespace`.
    pub fn object_ref(&self, namespace: Option<&str>) -> ObjectRef {
        ObjectRef::new("v1", self.kind.as_str(), namespace, &self.name)
    }
}

/// The pod spec of a target object: a Pod's `spec`, or the `spec.template.spec` of a
/// Deployment, ReplicaSet, StatefulSet or DaemonSet (`apps`). `None` for any other kind.
pub fn pod_spec(manifest: &Value) -> Option<&Value> {
    match target(manifest)? {
        Target::Pod => manifest.get("spec"),
        Target::Template => manifest.get("spec")?.get("template")?.get("spec"),
    }
}

enum Target {
    Pod,
    Template,
}

fn target(manifest: &Value) -> Option<Target> {
    let group = api_group(manifest.api_version()?);
    match (group, manifest.kind()?) {
        ("", "Pod") => Some(Target::Pod),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
            Some(Target::Template)
        }
        _ => None,
    }
}

/// The Secrets and ConfigMaps the pods of `manifest` read, sorted by kind and name, each
/// once; empty for a kind that is not a target. Shapes that are not what the pod API says
/// are skipped: the API server rejects them with a better message than this could give.
pub fn dependencies(manifest: &Value) -> Vec<Dependency> {
    let mut found: BTreeMap<(DependencyKind, String), bool> = BTreeMap::new();
    let mut note = |kind: DependencyKind, reference: &Value, name_field: &str| {
        let Some(name) = reference.get(name_field).and_then(Value::as_str) else {
            return;
        };
        let optional = reference.get("optional").and_then(Value::as_bool) == Some(true);
        // Optional only if every reference is.
        found
            .entry((kind, name.to_string()))
            .and_modify(|o| *o &= optional)
            .or_insert(optional);
    };
    let Some(spec) = pod_spec(manifest) else {
        return Vec::new();
    };
    for volume in items(spec, "volumes") {
        if let Some(secret) = volume.get("secret") {
            note(DependencyKind::Secret, secret, "secretName");
        }
        if let Some(config_map) = volume.get("configMap") {
            note(DependencyKind::ConfigMap, config_map, "name");
        }
        if let Some(projected) = volume.get("projected") {
            for source in items(projected, "sources") {
                if let Some(secret) = source.get("secret") {
                    note(DependencyKind::Secret, secret, "name");
                }
                if let Some(config_map) = source.get("configMap") {
                    note(DependencyKind::ConfigMap, config_map, "name");
                }
            }
        }
    }
    for container in items(spec, "initContainers").chain(items(spec, "containers")) {
        for env in items(container, "env") {
            let Some(from) = env.get("valueFrom") else {
                continue;
            };
            if let Some(secret) = from.get("secretKeyRef") {
                note(DependencyKind::Secret, secret, "name");
            }
            if let Some(config_map) = from.get("configMapKeyRef") {
                note(DependencyKind::ConfigMap, config_map, "name");
            }
        }
        for source in items(container, "envFrom") {
            if let Some(secret) = source.get("secretRef") {
                note(DependencyKind::Secret, secret, "name");
            }
            if let Some(config_map) = source.get("configMapRef") {
                note(DependencyKind::ConfigMap, config_map, "name");
            }
        }
    }
    found
        .into_iter()
        .map(|((kind, name), optional)| Dependency {
            kind,
            name,
            optional,
        })
        .collect()
}

fn items<'a>(value: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    value
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The hash of resolved dependencies: each with the object it names (`None`: absent, left
/// out), whole or as a copy carrying its [`data_digest`]. Order does not matter; the result
/// is the lowercase hex SHA-256 of the canonical JSON of the present ones as `{kind, name,
/// digest}`, sorted by kind and name.
pub fn hash<'a>(resolved: impl IntoIterator<Item = (&'a Dependency, Option<&'a Value>)>) -> String {
    let mut entries: Vec<(DependencyKind, &str, String)> = resolved
        .into_iter()
        .filter_map(|(dependency, object)| {
            Some((
                dependency.kind,
                dependency.name.as_str(),
                data_digest(object?),
            ))
        })
        .collect();
    entries.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let list: Vec<Value> = entries
        .into_iter()
        .map(|(kind, name, digest)| json!({"kind": kind.as_str(), "name": name, "digest": digest}))
        .collect();
    crate::values::canonical_hash(&Value::Array(list))
}

/// The digest of what the pods see of a Secret or ConfigMap: the lowercase hex SHA-256 of
/// the canonical JSON of its `{data, binaryData}` (see [`content`]); for a copy that
/// carries it already ([`DATA_DIGEST`]), that one.
pub(crate) fn data_digest(object: &Value) -> String {
    match object.get(DATA_DIGEST).and_then(Value::as_str) {
        Some(digest) => digest.to_string(),
        None => crate::values::canonical_hash(&Value::Object(content(object))),
    }
}

/// What of a Secret or ConfigMap the pods see: `data` and `binaryData`, empty when absent
/// (the server drops empty maps); a Secret's `stringData` is folded into `data` as the
/// server folds it (base64, overriding `data`), so a rendered Secret hashes as its stored
/// copy does.
fn content(object: &Value) -> Map<String, Value> {
    let map = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut data = map("data");
    for (key, value) in map("stringData") {
        if let Some(text) = value.as_str() {
            let encoded = serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec()))
                .unwrap_or(Value::Null);
            data.insert(key, encoded);
        }
    }
    let mut content = Map::new();
    content.insert("data".into(), Value::Object(data));
    content.insert("binaryData".into(), Value::Object(map("binaryData")));
    content
}

/// Put `hash` in the annotations of the pods of `manifest` (the template's metadata,
/// created if missing; a Pod's own metadata). Nothing else changes; no-op for a kind that
/// is not a target.
pub fn stamp(manifest: &mut Value, hash: &str) {
    let metadata = match target(manifest) {
        Some(Target::Pod) => manifest.metadata_mut(),
        Some(Target::Template) => {
            let Some(template) = manifest
                .get_mut("spec")
                .and_then(|s| s.get_mut("template"))
                .and_then(Value::as_object_mut)
            else {
                return;
            };
            let metadata = template.entry("metadata").or_insert_with(|| json!({}));
            match metadata.as_object_mut() {
                Some(m) => m,
                None => return,
            }
        }
        None => return,
    };
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if let Some(map) = annotations.as_object_mut() {
        map.insert(annotations::DEPENDENCY_HASH.into(), json!(hash));
    }
}

/// The annotation [`stamp`] put on the pods of `manifest`, if any.
#[cfg(test)]
fn stamped(manifest: &Value) -> Option<&str> {
    let metadata = match target(manifest)? {
        Target::Pod => manifest.get("metadata")?,
        Target::Template => manifest.get("spec")?.get("template")?.get("metadata")?,
    };
    metadata
        .get("annotations")?
        .get(annotations::DEPENDENCY_HASH)?
        .as_str()
}

/// An object the rollout rendered, as a source of a dependency's value.
pub(crate) struct Rendered<'a> {
    pub(crate) reference: &'a ObjectRef,
    pub(crate) manifest: &'a Value,
    pub(crate) create_only: bool,
}

/// Compute and stamp the dependency hash of `manifest` (a no-op for a kind that is not a
/// target). Dependencies are looked up in `rendered` first, then read through `cluster`.
/// Returns the dependencies read from the cluster (present or not) with what was found:
/// the ones a change outside the rollout can change.
pub(crate) async fn annotate(
    cluster: &dyn Cluster,
    manifest: &mut Value,
    rendered: &[Rendered<'_>],
) -> Result<Vec<(ObjectRef, Option<Value>)>> {
    let dependencies = dependencies(manifest);
    if target(manifest).is_none() {
        return Ok(Vec::new());
    }
    let namespace = manifest.namespace().map(str::to_string);
    let object = ObjectRef::from_manifest(manifest)
        .map(|r| r.to_string())
        .unwrap_or_default();
    let mut read = Vec::new();
    let mut values: Vec<Option<Value>> = Vec::with_capacity(dependencies.len());
    for dependency in &dependencies {
        let reference = dependency.object_ref(namespace.as_deref());
        let own = rendered
            .iter()
            .find(|r| *r.reference == reference && !r.create_only);
        let value = match own {
            Some(own) => Some(own.manifest.clone()),
            None => {
                let found = cluster.get_dependency(&reference).await?;
                read.push((reference.clone(), found.clone()));
                // A create-only object not created yet will be created as rendered.
                found.or_else(|| {
                    rendered
                        .iter()
                        .find(|r| *r.reference == reference)
                        .map(|r| r.manifest.clone())
                })
            }
        };
        if value.is_none() {
            if dependency.optional {
                tracing::debug!(%object, dependency = %reference, "optional dependency absent: left out of the hash");
            } else {
                tracing::warn!(%object, dependency = %reference, "dependency does not exist (yet): left out of the hash; the pods cannot start without it");
            }
        }
        values.push(value);
    }
    let digest = hash(dependencies.iter().zip(values.iter().map(Option::as_ref)));
    stamp(manifest, &digest);
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{MemoryCluster, WriteMethod};

    fn deployment(kind: &str, api_version: &str, pod: Value) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "web", "namespace": "ns"},
               "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": pod}}})
    }

    /// A pod spec reading every kind of reference.
    fn pod_reading_everything() -> Value {
        json!({
            "volumes": [
                {"name": "a", "secret": {"secretName": "tls"}},
                {"name": "b", "configMap": {"name": "settings", "optional": true}},
                {"name": "c", "projected": {"sources": [
                    {"secret": {"name": "projected-secret"}},
                    {"configMap": {"name": "projected-map"}},
                    {"serviceAccountToken": {"path": "token"}}]}},
                {"name": "d", "emptyDir": {}}],
            "initContainers": [{"name": "init", "env": [
                {"name": "P", "valueFrom": {"secretKeyRef": {"name": "init-secret", "key": "p"}}}]}],
            "containers": [{"name": "main",
                "env": [
                    {"name": "A", "value": "plain"},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "b"}}},
                    {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "envFrom": [{"secretRef": {"name": "env-secret", "optional": true}},
                            {"configMapRef": {"name": "env-map"}}]}]
        })
    }

    fn names(manifest: &Value) -> Vec<(&'static str, String, bool)> {
        dependencies(manifest)
            .into_iter()
            .map(|d| (d.kind.as_str(), d.name, d.optional))
            .collect()
    }

    #[test]
    fn every_reference_of_containers_and_init_containers_is_collected_sorted_once() {
        let expected = vec![
            ("ConfigMap", "env-map".to_string(), false),
            ("ConfigMap", "projected-map".to_string(), false),
            // Optional in the volume, required by the env var: required.
            ("ConfigMap", "settings".to_string(), false),
            ("Secret", "env-secret".to_string(), true),
            ("Secret", "init-secret".to_string(), false),
            ("Secret", "projected-secret".to_string(), false),
            ("Secret", "tls".to_string(), false),
        ];
        for (kind, api_version) in [
            ("Deployment", "apps/v1"),
            ("StatefulSet", "apps/v1"),
            ("ReplicaSet", "apps/v1"),
            ("DaemonSet", "apps/v1"),
        ] {
            let manifest = deployment(kind, api_version, pod_reading_everything());
            assert_eq!(names(&manifest), expected, "{kind}");
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": pod_reading_everything()});
        assert_eq!(names(&pod), expected, "Pod");
    }

    #[test]
    fn other_kinds_are_ignored() {
        for (kind, api_version) in [
            ("Job", "batch/v1"),
            ("CronJob", "batch/v1"),
            ("Deployment", "example.com/v1"),
            ("ConfigMap", "v1"),
        ] {
            let mut manifest = deployment(kind, api_version, pod_reading_everything());
            assert!(dependencies(&manifest).is_empty(), "{kind}");
            let before = manifest.clone();
            stamp(&mut manifest, "h");
            assert_eq!(manifest, before, "{kind} is not touched");
        }
    }

    #[test]
    fn the_hash_is_deterministic_and_covers_kind_name_and_data_only() {
        let secret = Dependency {
            kind: DependencyKind::Secret,
            name: "s".into(),
            optional: false,
        };
        let map = Dependency {
            kind: DependencyKind::ConfigMap,
            name: "m".into(),
            optional: false,
        };
        let s1 = json!({"kind": "Secret", "metadata": {"name": "s", "resourceVersion": "1"},
            "data": {"a": "YQ==", "b": "Yg=="}});
        let s1_reordered = json!({"data": {"b": "Yg==", "a": "YQ=="},
            "metadata": {"name": "s", "resourceVersion": "9", "labels": {"x": "y"}}, "kind": "Secret"});
        let m = json!({"data": {"k": "v"}});
        let h = hash([(&secret, Some(&s1)), (&map, Some(&m))]);
        assert_eq!(h.len(), 64);
        assert_eq!(h, hash([(&map, Some(&m)), (&secret, Some(&s1_reordered))]));
        // stringData is what the server turns into data.
        let as_string_data = json!({"stringData": {"a": "a", "b": "b"}});
        assert_eq!(
            h,
            hash([(&secret, Some(&as_string_data)), (&map, Some(&m))])
        );
        let changed = json!({"data": {"a": "YQ==", "b": "Yw=="}});
        assert_ne!(h, hash([(&secret, Some(&changed)), (&map, Some(&m))]));
        // The same data under another name is another dependency.
        let renamed = Dependency {
            name: "t".into(),
            ..secret.clone()
        };
        assert_ne!(h, hash([(&renamed, Some(&s1)), (&map, Some(&m))]));
        // Absent ones are left out; binaryData counts.
        assert_eq!(
            hash([(&secret, None), (&map, Some(&m))]),
            hash([(&map, Some(&m))])
        );
        let binary = json!({"data": {"k": "v"}, "binaryData": {"b": "AA=="}});
        assert_ne!(hash([(&map, Some(&m))]), hash([(&map, Some(&binary))]));
        // Empty and absent data are the same (the server drops empty maps).
        assert_eq!(
            hash([(&map, Some(&json!({"data": {}})))]),
            hash([(&map, Some(&json!({})))])
        );
    }

    #[test]
    fn stamp_goes_on_the_pod_template_and_nothing_else_changes() {
        let mut manifest = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "annotations": {"keep": "me"}},
            "spec": {"template": {"spec": {"containers": []}}}});
        stamp(&mut manifest, "abc");
        assert_eq!(
            manifest,
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "annotations": {"keep": "me"}},
                "spec": {"template": {"metadata": {"annotations": {annotations::DEPENDENCY_HASH: "abc"}},
                                      "spec": {"containers": []}}}})
        );
        assert_eq!(stamped(&manifest), Some("abc"));
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}});
        stamp(&mut pod, "def");
        assert_eq!(
            pod["metadata"]["annotations"][annotations::DEPENDENCY_HASH],
            "def"
        );
    }

    #[tokio::test]
    async fn rendered_objects_are_preferred_to_the_cluster_and_absent_ones_are_left_out() {
        let cluster = MemoryCluster::new();
        cluster
            .apply(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
                WriteMethod::Apply,
            )
            .await
            .unwrap();
        let secret = |name: &str, value: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "ns"},
                   "stringData": {"v": value}})
        };
        for object in [secret("own", "live"), secret("external", "x")] {
            cluster.apply(&object, WriteMethod::Apply).await.unwrap();
        }
        let pod = json!({"containers": [{"name": "main", "envFrom": [
            {"secretRef": {"name": "own"}}, {"secretRef": {"name": "external"}},
            {"secretRef": {"name": "missing"}}]}]});
        let mut manifest = deployment("Deployment", "apps/v1", pod);
        let own = secret("own", "rendered");
        let own_ref = ObjectRef::from_manifest(&own).unwrap();
        let rendered = [Rendered {
            reference: &own_ref,
            manifest: &own,
            create_only: false,
        }];
        let read = annotate(&cluster, &mut manifest, &rendered).await.unwrap();
        let read: Vec<(String, bool)> = read
            .into_iter()
            .map(|(r, found)| (r.name, found.is_some()))
            .collect();
        assert_eq!(
            read,
            [
                ("external".to_string(), true),
                ("missing".to_string(), false)
            ],
            "only what is not rendered is read"
        );
        let deps = dependencies(&manifest);
        let external = cluster
            .get(&ObjectRef::new("v1", "Secret", Some("ns"), "external"))
            .await
            .unwrap()
            .unwrap();
        let expected = hash([
            (&deps[0], Some(&external)),
            (&deps[1], None),
            (&deps[2], Some(&own)),
        ]);
        assert_eq!(stamped(&manifest), Some(expected.as_str()));

        // A create-only object holds what was created: read from the cluster.
        let rendered = [Rendered {
            reference: &own_ref,
            manifest: &own,
            create_only: true,
        }];
        let mut again = manifest.clone();
        annotate(&cluster, &mut again, &rendered).await.unwrap();
        assert_ne!(stamped(&again), stamped(&manifest));
        let live_own = cluster.get(&own_ref).await.unwrap().unwrap();
        let expected = hash([(&deps[0], Some(&external)), (&deps[2], Some(&live_own))]);
        assert_eq!(stamped(&again), Some(expected.as_str()));
    }
}
