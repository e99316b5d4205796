//! The annotations, labels and finalizer windlass reads and writes, all under windlass's
//! own domain, `windlass.dev/`.

/// The finalizer windlass puts on a namespaced CR that owns objects outside its
/// namespace, so that they are deleted with it.
pub const CLEANUP_FINALIZER: &str = "windlass.dev/cleanup";

/// `"true"` (any case) pauses reconciliation of the CR, finalizers included.
pub const PAUSE_EXECUTION: &str = "windlass.dev/pause-execution";
/// Name of a ConfigMap in the CR's namespace whose `data` are backend config defaults;
/// only the part before the first `/` is used.
pub const CONFIG_DEFAULTS: &str = "windlass.dev/config-defaults";
/// JSON index of temporary patches: `{name: {timestamp, api_version, kind?}}`.
pub const TEMPORARY_PATCHES: &str = "windlass.dev/temporary-patches";
/// Stamped on every rendered object: `<component>.<resource>`.
pub(crate) const INTERNAL_NAME: &str = "windlass.dev/internal-name";
/// SHA-256 of the manifest windlass last applied to an object. An object is written again
/// when its desired manifest hashes differently (so fields the operator stopped setting are
/// removed by server-side apply) or when another writer took a field windlass owns (see
/// `rollout::drift`).
pub const APPLIED_HASH: &str = "windlass.dev/applied-hash";

/// On the pod template of a workload rendered with
/// [`ResourceOptions::restart_on_dependency_change`](crate::component::ResourceOptions::restart_on_dependency_change):
/// SHA-256 of the Secrets and ConfigMaps its pods read, so that a change of their data rolls
/// the pods (see `rollout::dependency_hash`).
pub const DEPENDENCY_HASH: &str = "windlass.dev/dependency-hash";

/// The annotation lock: the identity (pod name) of the replica that holds the lock
/// on this CR.
pub const LEASE_NAME: &str = "windlass.dev/lease-name";
/// The annotation lock: when the holder last took or renewed the lock, RFC 3339 in
/// UTC; the lock expires `leader-election.lease-duration` later.
pub const LEASE_TIME: &str = "windlass.dev/lease-time";

/// Label on every object windlass applies: the uid of the CR it was rendered for. Lets
/// watches be label-scoped to windlass's objects, finds a CR's objects in every namespace,
/// and tells a second CR that renders the same object that it is taken.
pub const OWNER_UID: &str = "windlass.dev/owner-uid";
/// Label on every object windlass applies: the component that rendered it.
pub const COMPONENT: &str = "windlass.dev/component";
/// Label on a CR and on every object windlass applies for it when the CRs are sharded
/// (`sharding.shards`): the CR's shard, a number below the shard count. A replica watches
/// only the objects of the shards it holds. Windlass's own: a hand-made change is not
/// followed.
pub const SHARD: &str = "windlass.dev/shard";
/// Per-CR log level override.
pub const LOG_DEFAULT_LEVEL: &str = "windlass.dev/log-default-level";
/// Per-CR log filters.
pub const LOG_FILTERS: &str = "windlass.dev/log-filters";

/// Annotations a parent CR passes on to the child CRs it renders: config defaults,
/// the log switches and pause. Temporary patches are deliberately not passed on.
pub const PASSTHROUGH: [&str; 4] = [
    CONFIG_DEFAULTS,
    LOG_DEFAULT_LEVEL,
    LOG_FILTERS,
    PAUSE_EXECUTION,
];

/// The annotations of `manifest` that a parent passes on to the CRs it renders:
/// put them on a child CR's metadata so that pausing or configuring the parent reaches it.
///
/// ```
/// use serde_json::json;
/// let parent = json!({"metadata": {"annotations": {
///     "windlass.dev/pause-execution": "true", "windlass.dev/temporary-patches": "{}", "team": "a"}}});
/// let passed = windlass::annotations::passthrough(&parent);
/// assert_eq!(passed.len(), 1);
/// assert_eq!(passed["windlass.dev/pause-execution"], "true");
/// ```
pub fn passthrough(manifest: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    manifest["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| PASSTHROUGH.contains(&k.as_str()))
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// Whether an annotation value means "true": `true` in any case, nothing else.
pub(crate) fn is_true(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The recommended labels (`app.kubernetes.io/…`) windlass puts on every object it applies,
/// next to its own [`OWNER_UID`] and [`COMPONENT`]. A label the component set itself is
/// kept.
pub mod labels {
    use std::collections::BTreeMap;

    /// The application: the primary kind in lower case (`webapp`).
    pub const NAME: &str = "app.kubernetes.io/name";
    /// The CR's name.
    pub const INSTANCE: &str = "app.kubernetes.io/instance";
    /// The component that rendered the object.
    pub const COMPONENT: &str = "app.kubernetes.io/component";
    /// `windlass`.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// The value of [`MANAGED_BY`].
    pub const MANAGER: &str = "windlass";

    /// The labels that select the pods of one component of the CR `instance` of kind
    /// `kind`: name (the kind in lower case), instance and component. Stable for the life
    /// of the CR, so fit for a Deployment's immutable selector.
    pub(crate) fn selector(
        kind: &str,
        instance: &str,
        component: &str,
    ) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                NAME.to_string(),
                crate::object::label_value(&kind.to_ascii_lowercase()),
            ),
            (INSTANCE.to_string(), crate::object::label_value(instance)),
            (COMPONENT.to_string(), crate::object::label_value(component)),
        ])
    }

    /// [`selector`] plus `managed-by`: what windlass stamps on every object it applies.
    pub(crate) fn standard(
        kind: &str,
        instance: &str,
        component: &str,
    ) -> BTreeMap<String, String> {
        let mut labels = selector(kind, instance, component);
        labels.insert(MANAGED_BY.to_string(), MANAGER.to_string());
        labels
    }
}
