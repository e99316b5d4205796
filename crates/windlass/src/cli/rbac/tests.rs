//! Tests of the RBAC derivation: discovery through a dry run, rules, manifests.

use serde_json::json;

use super::*;
use crate::config::OperatorConfig;
use crate::object::ManifestExt;
use crate::testing::{DummyComponent, DummyController};

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
fn config_defaults_configmaps_are_read_by_name_and_no_other_configmap_is() {
    let none = rules(&widget_access(Vec::new()));
    assert!(
        !none.iter().any(|r| r
            .resources
            .as_ref()
            .is_some_and(|r| r.contains(&"configmaps".to_string()))),
        "no CR names a config-defaults ConfigMap: no ConfigMap at all: {none:?}"
    );
    let mut access = widget_access(Vec::new());
    access.config_defaults = ["shop-defaults".to_string()].into();
    let named = rules(&access);
    let rule = named
        .iter()
        .find(|r| {
            r.resources
                .as_ref()
                .is_some_and(|r| r.contains(&"configmaps".to_string()))
        })
        .expect("a ConfigMap rule");
    assert_eq!(rule.verbs, ["get"]);
    assert_eq!(
        rule.resource_names.as_deref(),
        Some(&["shop-defaults".to_string()][..])
    );
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
async fn discovery_notes_the_config_defaults_configmaps_the_crs_name() {
    let mut named = shop("a", false);
    named["metadata"]["annotations"] = json!({"windlass.dev/config-defaults": "shop-defaults"});
    let defaults = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shop-defaults", "namespace": "shop"}, "data": {}});
    let access = discover(
        controller(),
        OperatorConfig::default(),
        [defaults, named, shop("b", false)],
    )
    .await
    .unwrap();
    assert_eq!(access.config_defaults, ["shop-defaults".to_string()].into());
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
    let controller =
        DummyController::new().component(DummyComponent::new("u").with_object("u", unknown), &[]);
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
fn the_locks_are_granted_by_name_and_the_annotation_lock_needs_nothing() {
    use crate::config::LockKind;
    let named = |rules: &[PolicyRule]| -> Vec<(String, Vec<String>, Option<Vec<String>>)> {
        rules
            .iter()
            .map(|r| {
                (
                    r.resources.clone().unwrap().join(","),
                    r.verbs.clone(),
                    r.resource_names.clone(),
                )
            })
            .collect()
    };
    let op = || Some(strings(&["op"]));
    assert_eq!(
        named(&lock_rules(LockKind::LeaderWithLease, "op")),
        [
            ("leases".into(), strings(&["create"]), None),
            ("leases".into(), strings(&["get", "update"]), op()),
        ]
    );
    assert_eq!(
        named(&lock_rules(LockKind::LeaderForLife, "op")),
        [
            ("configmaps".into(), strings(&["create"]), None),
            ("configmaps".into(), strings(&["delete", "get"]), op()),
            ("pods".into(), strings(&["get"]), None),
        ]
    );
    // No name known: the kind, unnamed.
    assert_eq!(
        lock_rules(LockKind::LeaderWithLease, "")[1].resource_names,
        None
    );
    for kind in [LockKind::Annotation, LockKind::Dryrun] {
        assert!(lock_rules(kind, "op").is_empty(), "{kind:?}");
    }
    // The rules of what is reconciled grant no Lease at all.
    let rules = rules(&widget_access(Vec::new()));
    assert!(
        !table(&rules)
            .iter()
            .any(|(group, _, _)| group == "coordination.k8s.io"),
        "{rules:?}"
    );
}

#[test]
fn shards_are_granted_their_leases_by_name_and_nothing_else() {
    let rules = shard_lock_rules("op", 3);
    let table: Vec<(Vec<String>, Option<Vec<String>>)> = rules
        .iter()
        .map(|r| (r.verbs.clone(), r.resource_names.clone()))
        .collect();
    assert_eq!(
        table,
        [
            (strings(&["create"]), None),
            (
                strings(&["get", "update"]),
                Some(strings(&[
                    "op-members",
                    "op-shard-0",
                    "op-shard-1",
                    "op-shard-2"
                ]))
            ),
            (strings(&["list"]), Some(strings(&["op-members"]))),
        ]
    );
    assert!(
        rules
            .iter()
            .all(|r| r.resources == Some(strings(&["leases"])))
    );
    // No name known: the kind, unnamed.
    assert!(shard_lock_rules("", 3)[1].resource_names.is_none());
    assert!(lock_rules(crate::config::LockKind::Sharded, "op").is_empty());
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

#[tokio::test]
async fn one_dry_run_needs_a_cr_of_every_controllers_kind() {
    use super::Discovery;
    use crate::config::OperatorConfig;
    use crate::testing::{DummyController, Gadget, Widget};
    use kube::CustomResourceExt;

    let widget = serde_json::json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {}});
    let access = Discovery::new(OperatorConfig::default())
        .controller(DummyController::new(), Some(Widget::crd()))
        .controller(DummyController::<Gadget>::of_kind(), Some(Gadget::crd()))
        .run([widget])
        .await;
    // No Gadget among the files, and no Widget renders one: nothing shows what the
    // Gadget controller needs.
    assert!(access.unwrap_err().to_string().contains("Gadget"));
}
