//! Scheduling keys merged into pod templates, checked against hand-written pod specs.

#![cfg(feature = "scheduling")]

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Value, json};
use windlass::cluster::LabelError;
use windlass_x::scheduling::{
    FORCED_DOWNSCALE_LABEL, SchedulingError, SchedulingKey, SchedulingKeys, apply_forced_downscale,
    validate_node_labels,
};

fn template(spec: Value) -> PodTemplateSpec {
    match serde_json::from_value(json!({ "spec": spec })) {
        Ok(t) => t,
        Err(e) => panic!("bad test template: {e}"),
    }
}

fn spec_json(t: &PodTemplateSpec) -> Value {
    match serde_json::to_value(t) {
        Ok(v) => v["spec"].clone(),
        Err(e) => panic!("{e}"),
    }
}

fn keys(k: &[&str]) -> SchedulingKeys {
    match SchedulingKeys::new(k) {
        Ok(k) => k,
        Err(e) => panic!("{e}"),
    }
}

fn tolerate(key: &str) -> [Value; 2] {
    [
        json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": key, "operator": "Exists", "effect": "NoExecute"}),
    ]
}

#[test]
fn nova_api_runs_on_its_key_or_the_api_group() {
    let mut t = template(json!({"containers": [{"name": "nova-api", "image": "nova:zed"}]}));
    SchedulingKeys::for_component(SchedulingKey::ComputeApi).apply_to_template(&mut t);
    assert_eq!(
        spec_json(&t),
        json!({
            "containers": [{"name": "nova-api", "image": "nova:zed"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "compute.yaook.cloud/api", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "any.yaook.cloud/api", "operator": "Exists"}]}
                ]
            }}},
            "tolerations": [
                {"key": "compute.yaook.cloud/api", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "compute.yaook.cloud/api", "operator": "Exists", "effect": "NoExecute"},
                {"key": "any.yaook.cloud/api", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "any.yaook.cloud/api", "operator": "Exists", "effect": "NoExecute"}
            ]
        })
    );
}

#[test]
fn cinder_volume_keeps_the_templates_own_constraints() {
    // The author already requires amd64 or arm64-with-fast-disks, tolerates a GPU taint, has a
    // nodeSelector, a preferred affinity and a pod anti-affinity: all of it must survive.
    let mut t = template(json!({
        "containers": [{"name": "cinder-volume"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [
            {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
            {"key": "block-storage.yaook.cloud/cinder-volume", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
                    {"matchExpressions": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                        {"key": "disk", "operator": "In", "values": ["fast"]}
                    ]}
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
                ]
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "cinder-volume"}}}
            ]}
        }
    }));
    let keys = SchedulingKeys::for_component(SchedulingKey::BlockStorageCinderVolume);
    keys.apply_to_template(&mut t);
    let volume = json!({"key": "block-storage.yaook.cloud/cinder-volume", "operator": "Exists"});
    let any = json!({"key": "block-storage.yaook.cloud/cinder-any-service", "operator": "Exists"});
    let amd64 = json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]});
    let arm64 = json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]});
    let fast = json!({"key": "disk", "operator": "In", "values": ["fast"]});
    let [vol_ns, vol_ne] = tolerate("block-storage.yaook.cloud/cinder-volume");
    let [any_ns, any_ne] = tolerate("block-storage.yaook.cloud/cinder-any-service");
    assert_eq!(
        spec_json(&t),
        json!({
            "containers": [{"name": "cinder-volume"}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
                vol_ns, vol_ne, any_ns, any_ne
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [amd64, volume]},
                        {"matchExpressions": [amd64, any]},
                        {"matchExpressions": [arm64, fast, volume]},
                        {"matchExpressions": [arm64, fast, any]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
                    ]
                },
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "cinder-volume"}}}
                ]}
            }
        })
    );
    // Applying again changes nothing.
    let once = spec_json(&t);
    keys.apply_to_template(&mut t);
    assert_eq!(spec_json(&t), once);
}

#[test]
fn neutron_l2_agent_runs_wherever_a_dependent_service_runs() {
    let mut t = template(json!({"containers": [{"name": "l2"}]}));
    let bgp = keys(&["network.yaook.cloud/neutron-bgp-dragent"]);
    let l2 = SchedulingKeys::union(&SchedulingKeys::neutron_l2_agent(), [&bgp]);
    l2.apply_to_template(&mut t);
    let all = [
        "network.yaook.cloud/neutron-l2-agent",
        "network.yaook.cloud/neutron-l3-agent",
        "network.yaook.cloud/neutron-dhcp-agent",
        "compute.yaook.cloud/hypervisor",
        "network.yaook.cloud/neutron-bgp-dragent",
    ];
    let terms: Vec<Value> = all
        .iter()
        .map(|k| json!({"matchExpressions": [{"key": k, "operator": "Exists"}]}))
        .collect();
    let tolerations: Vec<Value> = all.iter().flat_map(|k| tolerate(k)).collect();
    assert_eq!(
        spec_json(&t),
        json!({
            "containers": [{"name": "l2"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms
            }}},
            "tolerations": tolerations
        })
    );
}

#[test]
fn union_merges_shared_keys_once() {
    let own = keys(&["a.example/agent"]);
    let x = keys(&["a.example/x", "a.example/any"]);
    let y = keys(&["a.example/y", "a.example/any", "a.example/agent"]);
    let u = SchedulingKeys::union(&own, [&x, &y]);
    assert_eq!(
        u.keys().collect::<Vec<_>>(),
        [
            "a.example/agent",
            "a.example/x",
            "a.example/any",
            "a.example/y"
        ]
    );
}

#[test]
fn keystone_operator_job_and_a_template_without_spec() {
    let mut t = PodTemplateSpec::default();
    SchedulingKeys::for_component(SchedulingKey::OperatorKeystone).apply_to_template(&mut t);
    let [k_ns, k_ne] = tolerate("operator.yaook.cloud/keystone");
    let [a_ns, a_ne] = tolerate("operator.yaook.cloud/any");
    assert_eq!(
        spec_json(&t),
        json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "operator.yaook.cloud/keystone", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "operator.yaook.cloud/any", "operator": "Exists"}]}
                ]
            }}},
            "tolerations": [k_ns, k_ne, a_ns, a_ne]
        })
    );
}

#[test]
fn hypervisor_daemonset_forced_down_selects_no_node() {
    let mut t = template(json!({"containers": [{"name": "libvirt"}]}));
    SchedulingKeys::for_component(SchedulingKey::ComputeHypervisor).apply_to_template(&mut t);
    if let Some(spec) = t.spec.as_mut() {
        apply_forced_downscale(spec);
    }
    let [h_ns, h_ne] = tolerate("compute.yaook.cloud/hypervisor");
    assert_eq!(
        spec_json(&t),
        json!({
            "containers": [{"name": "libvirt"}],
            "nodeSelector": {"state.yaook.cloud/forced-downscale": "true"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "compute.yaook.cloud/hypervisor", "operator": "Exists"}]}
                ]
            }}},
            "tolerations": [h_ns, h_ne]
        })
    );
}

#[test]
fn bad_keys_give_clear_errors() {
    let err = |k: &[&str]| match SchedulingKeys::new(k) {
        Ok(k) => panic!("accepted {k:?}"),
        Err(e) => e,
    };
    assert_eq!(err(&[]), SchedulingError::NoKeys);
    assert_eq!(
        err(&["compute.yaook.cloud/api", ""]),
        SchedulingError::EmptyKey { index: 1 }
    );
    assert_eq!(
        err(&["compute.yaook.cloud/api", "compute.yaook.cloud/api"]),
        SchedulingError::DuplicateKey("compute.yaook.cloud/api".to_string())
    );
    assert!(matches!(
        err(&["Compute.yaook.cloud/api"]),
        SchedulingError::InvalidKey(LabelError::InvalidPrefix { .. })
    ));
    assert!(matches!(
        err(&["compute.yaook.cloud/api/extra"]),
        SchedulingError::InvalidKey(LabelError::TooManySlashes(_))
    ));
    assert!(matches!(
        err(&["compute.yaook.cloud/"]),
        SchedulingError::InvalidKey(LabelError::InvalidName { .. })
    ));
    assert_eq!(
        err(&[FORCED_DOWNSCALE_LABEL]),
        SchedulingError::ReservedLabel
    );
    let dup = SchedulingKeys::for_component(SchedulingKey::ComputeApi)
        .with_group_keys([SchedulingKey::AnyApi]);
    assert_eq!(
        dup.err(),
        Some(SchedulingError::DuplicateKey(
            "any.yaook.cloud/api".to_string()
        ))
    );
    let msg = err(&["bad key!"]).to_string();
    assert!(
        msg.contains("bad key!") && msg.contains("63 characters"),
        "{msg}"
    );
}

#[test]
fn the_guard_refuses_the_downscale_label_on_nodes() {
    let labels = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    };
    assert_eq!(
        validate_node_labels(&labels(&[
            ("compute.yaook.cloud/hypervisor", "true"),
            ("any.yaook.cloud/api", "")
        ])),
        Ok(())
    );
    assert_eq!(
        validate_node_labels(&labels(&[
            ("compute.yaook.cloud/hypervisor", "true"),
            (FORCED_DOWNSCALE_LABEL, "true")
        ])),
        Err(SchedulingError::ReservedLabel)
    );
    assert!(matches!(
        validate_node_labels(&labels(&[("ok.example/key", "not ok")])),
        Err(SchedulingError::InvalidValue { .. })
    ));
    assert!(matches!(
        validate_node_labels(&labels(&[("-bad", "x")])),
        Err(SchedulingError::InvalidKey(_))
    ));
}
