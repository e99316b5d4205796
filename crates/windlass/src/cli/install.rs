//! What runs an operator in a cluster: the `manifests` subcommand of [`crate::cli`].
//!
//! [`manifests`] prints, in the order `kubectl apply -f` needs them:
//!
//! 1. the CRD of the controller's kind;
//! 2. the operator's Namespace (unless it is `default`, which always exists);
//! 3. its ServiceAccount and the least-privilege RBAC [`crate::cli::rbac`] derives from a dry
//!    run of the given CRs, plus what the chosen leader-election lock needs
//!    ([`rbac::lock_rules`]): a ClusterRole and ClusterRoleBinding, or, when
//!    `runtime.watch-namespaces` names namespaces, a Role and RoleBinding in each of them
//!    (and a Role for the lock in the operator's namespace if it is not watched);
//! 4. when a CRD has several versions, the conversion webhook's Service and the access to
//!    its certificate's Secret and to the CRDs it injects its CA into
//!    ([`webhook`](super::webhook));
//! 5. a Deployment running the image's entrypoint with `run`, probed on `/healthz`
//!    (liveness) and `/readyz` (readiness) at the port of
//!    `server.health-probe-bind-address` (declared as the `health` port) or, when that is
//!    not set, of `server.metrics-bind-address` (the `metrics` port).
//!
//! The configuration given to `manifests` (flags, environment, `--config`) is the one the
//! Deployment runs with: every key that differs from its default becomes a `WINDLASS_*`
//! environment variable of the container. With `--replicas` above 1 and no election
//! configured, the Deployment elects a leader with a Lease, so that only one replica
//! writes; with one replica and no election it is replaced with the `Recreate` strategy, so
//! a rollout never runs two unelected operators at once.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::cli::rbac::{self, Access, Grant, RbacError};
use crate::config::layers::{LeafKind, env_name};
use crate::config::{Endpoints, Layers, LockKind, LockStrategy, OperatorConfig};

/// The name of the container port of `/metrics` (and of the probes when they share it).
pub const PORT_NAME: &str = "metrics";

/// The name of the container port of `/healthz` and `/readyz` when they have their own.
pub const HEALTH_PORT_NAME: &str = "health";

/// Where and how the operator runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOptions {
    /// The name of the Deployment, ServiceAccount, roles and bindings.
    pub name: String,
    /// The operator's namespace.
    pub namespace: String,
    /// The operator's image; its entrypoint must be the operator binary.
    pub image: String,
    /// How many replicas run.
    pub replicas: i32,
    /// Serve `/metrics` only to callers the API server authenticates and allows
    /// (`server.secure-metrics`, the probes on a port of their own); `manifests` turns it
    /// off with `--insecure-metrics`.
    pub secure_metrics: bool,
}

/// Where the probes are served when secure metrics need them apart and nothing says where.
const DEFAULT_PROBE_ADDRESS: &str = "0.0.0.0:8081";

/// Why the manifests could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The RBAC could not be derived or built.
    #[error(transparent)]
    Rbac(#[from] RbacError),
    /// The probes would have nothing to reach.
    #[error("server.health-probe-bind-address or server.metrics-bind-address: {0}")]
    Address(String),
    /// The options are unusable.
    #[error("{0}")]
    Options(String),
    /// The output could not be serialized.
    #[error("cannot write the manifests as YAML: {0}")]
    Yaml(String),
}

/// The configuration the Deployment runs with: `config` made live (no dry run, no
/// `leader-election.identity`: each Pod is its own), its lock named after the Deployment
/// unless `leader-election.id` names it, with Lease election when more than one replica
/// runs and election is off.
pub fn operator_config(config: &OperatorConfig, options: &InstallOptions) -> OperatorConfig {
    let mut deployed = config.clone();
    deployed.dry_run = false;
    let election = &mut deployed.leader_election;
    election.identity = String::new();
    if election.id.trim().is_empty() {
        election.id = options.name.clone();
    }
    if options.replicas > 1 && !election.enabled {
        election.enabled = true;
        election.lock = LockStrategy::Lease;
    }
    // Nothing to secure when the metrics server is off.
    if options.secure_metrics && deployed.endpoints().metrics.is_some() {
        deployed.server.secure_metrics = true;
        if deployed.endpoints().probes.is_none() {
            deployed.server.health_probe_bind_address = DEFAULT_PROBE_ADDRESS.to_string();
        }
    }
    deployed
}

/// The environment variables that give a process `config`: one per key that differs from
/// its default, named as the environment layer reads them
/// (`WINDLASS_LEADER_ELECTION_ENABLED`), sorted by name. Keys that cannot be written as one
/// variable (a map, a key reset to no value) are left out with a warning.
pub fn config_env(config: &OperatorConfig) -> Vec<(String, String)> {
    let (Ok(ours), Ok(defaults)) = (
        serde_json::to_value(config),
        serde_json::to_value(OperatorConfig::default()),
    ) else {
        return Vec::new();
    };
    let leaf = |tree: &Value, path: &str| -> Value {
        path.split('.')
            .try_fold(tree, |v, segment| v.get(segment))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut env = BTreeMap::new();
    for (path, kind) in Layers::leaves() {
        let value = leaf(&ours, &path);
        if value == leaf(&defaults, &path) {
            continue;
        }
        let text = match (&value, kind) {
            (Value::String(s), _) => s.clone(),
            (Value::Bool(b), _) => b.to_string(),
            (Value::Number(n), _) => n.to_string(),
            (Value::Array(items), LeafKind::List) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            _ => {
                tracing::warn!(key = %path, "cannot pass this key as an environment variable");
                continue;
            }
        };
        env.insert(env_name(&path), text);
    }
    env.into_iter().collect()
}

/// The ServiceAccount, roles and bindings of the operator (see the [module docs](self)):
/// what it reconciles, cluster-wide or in each watched namespace, and its leader-election
/// lock in its own namespace only.
///
/// # Errors
/// [`RbacError::ClusterScoped`] when `runtime.watch-namespaces` restricts the operator to
/// namespaces but a kind it uses is cluster-scoped.
pub fn rbac_objects(
    access: &Access,
    options: &InstallOptions,
    config: &OperatorConfig,
) -> Result<Vec<Value>, InstallError> {
    let (name, namespace) = (options.name.as_str(), options.namespace.as_str());
    let watched = config.watch_namespaces();
    let base = rbac::Options {
        name: name.to_string(),
        namespace: namespace.to_string(),
        namespaced: !watched.is_empty(),
    };
    let manifests = rbac::manifests(access, &base)?;
    let json = |r: serde_json::Result<Value>| r.map_err(|e| InstallError::Yaml(e.to_string()));
    let mut objects = vec![json(serde_json::to_value(&manifests.service_account))?];
    match &manifests.grant {
        Grant::Cluster(role, binding) => {
            objects.push(json(serde_json::to_value(role))?);
            objects.push(json(serde_json::to_value(binding))?);
        }
        Grant::Namespaced(role, binding) => {
            // The same Role in every watched namespace, bound to the one ServiceAccount.
            for watched_namespace in &watched {
                for object in [serde_json::to_value(role), serde_json::to_value(binding)] {
                    let mut object = json(object)?;
                    object["metadata"]["namespace"] = Value::String(watched_namespace.clone());
                    objects.push(object);
                }
            }
        }
    }
    objects.extend(lock_role(name, namespace, config)?);
    if config.server.secure_metrics {
        objects.extend(metrics_roles(name, namespace));
    }
    Ok(objects)
}

/// With secure metrics: the operator may ask the API server who a caller is and what it
/// may do; and a ClusterRole `<name>-metrics-reader` to bind a scraper's ServiceAccount to.
fn metrics_roles(name: &str, namespace: &str) -> Vec<Value> {
    let auth = format!("{name}-metrics-auth");
    vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": auth},
            "rules": [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": auth},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": auth},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": format!("{name}-metrics-reader")},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        }),
    ]
}

/// The Role and RoleBinding of the leader-election lock, in the lock's namespace (the
/// operator's own unless `leader-election.namespace` names another), by the lock's name;
/// none when the lock needs no object.
pub(crate) fn lock_role(
    name: &str,
    namespace: &str,
    config: &OperatorConfig,
) -> Result<Vec<Value>, InstallError> {
    let lock_name = match config.leader_election.id.trim() {
        "" => name,
        id => id,
    };
    let rules = match config.lock_kind() {
        crate::config::LockKind::Sharded => {
            rbac::shard_lock_rules(lock_name, config.sharding.shards)
        }
        kind => rbac::lock_rules(kind, lock_name),
    };
    if rules.is_empty() {
        return Ok(Vec::new());
    }
    let lock_namespace = match config.leader_election.namespace.trim() {
        "" => namespace,
        other => other,
    };
    let role = format!("{name}-leader-election");
    let rules = serde_json::to_value(rules).map_err(|e| InstallError::Yaml(e.to_string()))?;
    Ok(vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role, "namespace": lock_namespace},
            "rules": rules,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": lock_namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }),
    ])
}

/// The Deployment running `config` (as [`operator_config`] made it) with `options`.
///
/// # Errors
/// [`InstallError::Address`] if neither server address is set, or the probes' is on
/// loopback: the kubelet's probes could not reach the server.
pub fn deployment(
    options: &InstallOptions,
    config: &OperatorConfig,
) -> Result<Value, InstallError> {
    check_probe_address(config)?;
    let endpoints = config.endpoints();
    let labels = json!({
        "app.kubernetes.io/name": options.name,
        "app.kubernetes.io/component": "operator",
    });
    let (mounts, volumes) = writable_directories(config);
    let container = operator_container(options, config, &endpoints, mounts);
    Ok(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": options.name, "namespace": options.namespace, "labels": labels},
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": labels},
            "strategy": rollout_strategy(config),
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": scrape_annotations(&endpoints, config.server.secure_metrics),
                },
                "spec": {
                    "serviceAccountName": options.name,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }))
}

/// The kubelet's probes need a server they can reach: one of the two addresses set, and not
/// on loopback.
fn check_probe_address(config: &OperatorConfig) -> Result<(), InstallError> {
    let address = config.probe_address().ok_or_else(|| {
        InstallError::Address(
            "neither is host:port, and the Deployment's probes need a server".to_string(),
        )
    })?;
    if address.ip().is_loopback() {
        return Err(InstallError::Address(format!(
            "{address} is a loopback address, which the kubelet's probes cannot reach: bind \
             0.0.0.0 (or [::])"
        )));
    }
    Ok(())
}

/// The operator's container: the image run with `run` and the configuration as environment
/// variables, its ports probed, locked down, with `mounts` its only writable directories.
fn operator_container(
    options: &InstallOptions,
    config: &OperatorConfig,
    endpoints: &Endpoints,
    mounts: Vec<Value>,
) -> Value {
    let (ports, probe_port) = container_ports(endpoints);
    let probe = |path: &str, period: u32| {
        json!({
            "httpGet": {"path": path, "port": probe_port},
            "periodSeconds": period,
            "failureThreshold": 3,
        })
    };
    json!({
        "name": "operator",
        "image": options.image,
        "args": ["run"],
        "env": container_env(config),
        "ports": ports,
        "livenessProbe": probe("/healthz", 10),
        "readinessProbe": probe("/readyz", 5),
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    })
}

/// The container's ports, `metrics` and `health` when each server is on, and the name of the
/// one the probes use.
fn container_ports(endpoints: &Endpoints) -> (Vec<Value>, &'static str) {
    let mut ports = Vec::new();
    if let Some(metrics) = endpoints.metrics {
        ports.push(json!({"name": PORT_NAME, "containerPort": metrics.port(), "protocol": "TCP"}));
    }
    let probe_port = match endpoints.probes {
        Some(probes) => {
            ports.push(
                json!({"name": HEALTH_PORT_NAME, "containerPort": probes.port(), "protocol": "TCP"}),
            );
            HEALTH_PORT_NAME
        }
        None => PORT_NAME,
    };
    (ports, probe_port)
}

/// The Pod's `prometheus.io/*` annotations, so that a scraper finds `/metrics`; none when
/// the metrics server is off.
fn scrape_annotations(endpoints: &Endpoints, secure: bool) -> Value {
    let scrape = endpoints.metrics.map(|metrics| {
        json!({
            "prometheus.io/scrape": "true",
            "prometheus.io/port": metrics.port().to_string(),
            "prometheus.io/path": "/metrics",
            "prometheus.io/scheme": if secure { "https" } else { "http" },
        })
    });
    scrape.unwrap_or_else(|| json!({}))
}

/// The container's environment: its Pod's name (its identity in an election), then the
/// configuration that differs from the defaults ([`config_env`]).
fn container_env(config: &OperatorConfig) -> Vec<Value> {
    let mut env = vec![json!({
        "name": "POD_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
    })];
    env.extend(
        config_env(config)
            .into_iter()
            .map(|(name, value)| json!({"name": name, "value": value})),
    );
    env
}

/// The container's volume mounts and the Pod's volumes: `/tmp`, and the heartbeat's
/// directory when it is elsewhere.
fn writable_directories(config: &OperatorConfig) -> (Vec<Value>, Vec<Value>) {
    let mut mounts = vec![json!({"name": "tmp", "mountPath": "/tmp"})];
    let mut volumes = vec![json!({"name": "tmp", "emptyDir": {}})];
    // The root filesystem is read-only: the heartbeat needs a writable directory.
    if let Some(dir) = config
        .heartbeat
        .file
        .as_deref()
        .and_then(std::path::Path::parent)
        .filter(|dir| *dir != std::path::Path::new("/tmp") && dir.parent().is_some())
    {
        mounts.push(json!({"name": "heartbeat", "mountPath": dir.display().to_string()}));
        volumes.push(json!({"name": "heartbeat", "emptyDir": {}}));
    }
    (mounts, volumes)
}

/// How the Deployment replaces its Pods: rolling when a leader is elected, else `Recreate`.
fn rollout_strategy(config: &OperatorConfig) -> Value {
    let elected = config.lock_kind() != LockKind::Dryrun;
    // Without election two replicas must never overlap, not even during a rollout.
    if elected {
        json!({"type": "RollingUpdate"})
    } else {
        json!({"type": "Recreate"})
    }
}

/// The manifests that install an operator whose controllers' CRDs are `crds` and whose
/// rollouts need `access` (see the [module docs](self)), in `kubectl apply` order.
///
/// # Errors
/// [`InstallError`] if the options or the address are unusable, or the RBAC cannot be built.
pub fn objects(
    served: &super::webhook::Served<'_>,
    access: &Access,
    config: &OperatorConfig,
    options: &InstallOptions,
) -> Result<Vec<Value>, InstallError> {
    check_options(options)?;
    let deployed = operator_config(config, options);
    let mut deployment = deployment(options, &deployed)?;
    if let (Some(port), Some(ports)) = (
        super::webhook::container_port(served, &deployed),
        deployment
            .pointer_mut("/spec/template/spec/containers/0/ports")
            .and_then(Value::as_array_mut),
    ) {
        ports.push(port);
    }
    let labels = deployment["spec"]["selector"]["matchLabels"].clone();
    let mut objects = Vec::new();
    for crd in served.crds {
        objects.push(serde_json::to_value(crd).map_err(|e| InstallError::Yaml(e.to_string()))?);
    }
    if options.namespace != "default" {
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": options.namespace}}));
    }
    objects.extend(rbac_objects(access, options, &deployed)?);
    objects.extend(super::webhook::objects(
        served,
        (&options.name, &options.namespace),
        &deployed,
        &labels,
    ));
    objects.push(deployment);
    Ok(objects)
}

/// Whether `options` and `config` make a Deployment that can run (an image, a replica
/// count, an address the probes reach), without the RBAC: what to find out before a dry run.
///
/// # Errors
/// As [`objects`], but for the RBAC.
pub fn check(config: &OperatorConfig, options: &InstallOptions) -> Result<(), InstallError> {
    check_options(options)?;
    deployment(options, &operator_config(config, options)).map(|_| ())
}

/// An image and a replica count the Deployment can run with.
fn check_options(options: &InstallOptions) -> Result<(), InstallError> {
    if options.image.trim().is_empty() {
        return Err(InstallError::Options("--image must not be empty".into()));
    }
    if options.replicas < 0 {
        return Err(InstallError::Options(format!(
            "--replicas must be 0 or more, got {}",
            options.replicas
        )));
    }
    Ok(())
}

/// `objects` as multi-document YAML, each document starting with `---`.
///
/// # Errors
/// [`InstallError::Yaml`] if an object cannot be written.
pub fn to_yaml(objects: &[Value]) -> Result<String, InstallError> {
    let mut text = String::new();
    for object in objects {
        let yaml =
            serde_saphyr::to_string(object).map_err(|e| InstallError::Yaml(e.to_string()))?;
        text.push_str("---\n");
        text.push_str(yaml.trim_end());
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::api::apps::v1::Deployment;

    use super::*;
    use crate::cli::rbac::KindAccess;
    use crate::cluster::Scope;
    use crate::testing::DummyController;

    fn options(replicas: i32) -> InstallOptions {
        InstallOptions {
            secure_metrics: false,
            name: "widget-op".into(),
            namespace: "ops".into(),
            image: "example.com/widget-operator:1.0".into(),
            replicas,
        }
    }

    fn env_of(deployment: &Value) -> BTreeMap<String, Value> {
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let value = e.get("value").cloned().unwrap_or(e["valueFrom"].clone());
                (e["name"].as_str().unwrap().to_string(), value)
            })
            .collect()
    }

    #[test]
    fn the_deployment_probes_and_exposes_the_metrics_port_and_is_a_valid_deployment() {
        let mut config = OperatorConfig::default();
        config.server.metrics_bind_address = "0.0.0.0:9090".into();
        let options = options(1);
        let deployment = deployment(&options, &operator_config(&config, &options)).unwrap();
        let typed: Deployment = serde_json::from_value(deployment.clone()).unwrap();
        let pod = typed.spec.template.spec.unwrap();
        let container = &pod.containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some("example.com/widget-operator:1.0")
        );
        assert_eq!(container.args.as_deref(), Some(&["run".to_string()][..]));
        let port = &container.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.container_port),
            (Some("metrics"), 9090)
        );
        let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
            let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
            (get.path.clone().unwrap(), get.port.clone())
        };
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        assert_eq!(
            probe_path(&container.liveness_probe),
            (
                "/healthz".to_string(),
                IntOrString::String("metrics".into())
            )
        );
        assert_eq!(
            probe_path(&container.readiness_probe),
            ("/readyz".to_string(), IntOrString::String("metrics".into()))
        );
        assert_eq!(pod.service_account_name.as_deref(), Some("widget-op"));
        // The address is not the default, so the container gets it.
        let env = env_of(&deployment);
        assert_eq!(env["WINDLASS_SERVER_METRICS_BIND_ADDRESS"], "0.0.0.0:9090");
        assert_eq!(
            env["POD_NAME"],
            json!({"fieldRef": {"fieldPath": "metadata.name"}})
        );
    }

    #[test]
    fn more_than_one_replica_elects_a_leader_with_a_lease_and_rolls_while_one_replica_recreates() {
        let config = OperatorConfig::default();
        let one = deployment(&options(1), &operator_config(&config, &options(1))).unwrap();
        assert_eq!(one["spec"]["strategy"]["type"], "Recreate");
        assert!(!env_of(&one).contains_key("WINDLASS_LEADER_ELECTION_ENABLED"));

        let three = deployment(&options(3), &operator_config(&config, &options(3))).unwrap();
        assert_eq!(three["spec"]["replicas"], 3);
        assert_eq!(three["spec"]["strategy"]["type"], "RollingUpdate");
        let env = env_of(&three);
        assert_eq!(env["WINDLASS_LEADER_ELECTION_ENABLED"], "true");
        assert!(
            !env.contains_key("WINDLASS_LEADER_ELECTION_LOCK"),
            "a Lease: the default"
        );
        // The Lease is named after the operator.
        assert_eq!(env["WINDLASS_LEADER_ELECTION_ID"], "widget-op");

        // A lock chosen in the configuration is kept.
        let mut config = OperatorConfig::default();
        config.leader_election.enabled = true;
        config.leader_election.lock = LockStrategy::PerCrAnnotation;
        let env = env_of(&deployment(&options(3), &operator_config(&config, &options(3))).unwrap());
        assert_eq!(env["WINDLASS_LEADER_ELECTION_LOCK"], "per-cr-annotation");
    }

    #[test]
    fn sharded_replicas_get_their_leases_by_name_in_the_operators_namespace() {
        let mut config = OperatorConfig::default();
        config.sharding.shards = 2;
        let deployed = operator_config(&config, &options(3));
        let env = env_of(&deployment(&options(3), &deployed).unwrap());
        assert_eq!(env["WINDLASS_SHARDING_SHARDS"], "2");
        let role = &lock_role("widget-op", "ops", &deployed).unwrap()[0];
        assert_eq!(role["metadata"]["namespace"], "ops");
        let named: Vec<&Value> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r.get("resourceNames"))
            .collect();
        assert_eq!(
            named,
            [
                &json!([
                    "widget-op-members",
                    "widget-op-shard-0",
                    "widget-op-shard-1"
                ]),
                &json!(["widget-op-members"])
            ]
        );
    }

    #[test]
    fn the_configuration_travels_as_environment_variables_that_load_back() {
        let mut config = OperatorConfig {
            dry_run: true,
            ..OperatorConfig::default()
        };
        config.runtime.watch_namespaces = vec!["a".into(), "b".into()];
        config.versions.supported = vec!["1.0".into(), "2.0".into()];
        config.status.manage = false;
        config.rollout.conflict_retries = 7;
        config.runtime.max_concurrent_reconciles = 4;
        config.runtime.sync_period = "90s".parse().unwrap();
        config.status.operator_version = Some("1.2.3".into());
        config.leader_election.identity = "mine".into();
        let deployed = operator_config(&config, &options(1));
        assert!(!deployed.dry_run);
        let env = config_env(&deployed);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            !names.contains(&"WINDLASS_LEADER_ELECTION_IDENTITY"),
            "each Pod is its own: {names:?}"
        );
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");
        // The environment layer reads them back into the same configuration.
        let loaded = Layers::new().env(env).build().unwrap();
        assert_eq!(loaded, deployed);
        assert_eq!(loaded.runtime.max_concurrent_reconciles, 4);
        assert!(config_env(&OperatorConfig::default()).is_empty());
    }

    #[test]
    fn the_heartbeat_directory_is_writable_on_the_read_only_root() {
        let mut config = OperatorConfig::default();
        config.heartbeat.file = Some("/var/run/operator/heartbeat".into());
        let made = deployment(&options(1), &config).unwrap();
        let mounts = &made["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
        assert_eq!(
            mounts,
            &json!([{"name": "tmp", "mountPath": "/tmp"},
                    {"name": "heartbeat", "mountPath": "/var/run/operator"}])
        );
        config.heartbeat.file = Some("/tmp/heartbeat".into());
        let made = deployment(&options(1), &config).unwrap();
        let mounts = &made["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
        assert_eq!(mounts.as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_server_the_probes_cannot_reach_is_an_error() {
        let mut config = OperatorConfig::default();
        for address in ["", "127.0.0.1:8080", "[::1]:8080"] {
            config.server.metrics_bind_address = address.into();
            let err = deployment(&options(1), &config).unwrap_err();
            assert!(matches!(err, InstallError::Address(_)), "{address}: {err}");
        }
    }

    fn access() -> Access {
        let mut access = Access::of_primary::<DummyController>();
        access.kinds = vec![KindAccess {
            type_ref: crate::object::TypeRef::new("v1", "ConfigMap"),
            plural: "configmaps".into(),
            scope: Scope::Namespaced,
            writes: true,
        }];
        access
    }

    fn kinds_and_namespaces(objects: &[Value]) -> Vec<(String, String)> {
        objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_string(),
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn cluster_wide_rbac_is_one_cluster_role_and_the_lease_only_in_the_operators_namespace() {
        let config = operator_config(&OperatorConfig::default(), &options(2));
        let objects = rbac_objects(&access(), &options(2), &config).unwrap();
        assert_eq!(
            kinds_and_namespaces(&objects),
            [
                ("ServiceAccount".into(), "ops".into()),
                ("ClusterRole".into(), "".into()),
                ("ClusterRoleBinding".into(), "".into()),
                ("Role".into(), "ops".into()),
                ("RoleBinding".into(), "ops".into()),
            ]
        );
        let rules = serde_json::to_string(&objects[1]["rules"]).unwrap();
        assert!(!rules.contains("leases"), "no Lease cluster-wide: {rules}");
        assert!(rules.contains("events"), "{rules}");
        // The Lease, by its name (the Deployment's), in the operator's namespace.
        assert_eq!(
            objects[3]["rules"],
            json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["widget-op"], "verbs": ["get", "update"]},
            ])
        );
    }

    #[test]
    fn watched_namespaces_get_a_role_each_and_the_lock_one_in_the_operators_namespace() {
        let mut config = OperatorConfig::default();
        config.runtime.watch_namespaces = vec!["shop".into(), "blog".into()];
        config.leader_election.enabled = true;
        config.leader_election.lock = LockStrategy::ForLife;
        let config = operator_config(&config, &options(2));
        let objects = rbac_objects(&access(), &options(2), &config).unwrap();
        assert_eq!(
            kinds_and_namespaces(&objects),
            [
                ("ServiceAccount".into(), "ops".into()),
                ("Role".into(), "shop".into()),
                ("RoleBinding".into(), "shop".into()),
                ("Role".into(), "blog".into()),
                ("RoleBinding".into(), "blog".into()),
                ("Role".into(), "ops".into()),
                ("RoleBinding".into(), "ops".into()),
            ]
        );
        // Every binding names the one ServiceAccount in the operator's namespace.
        for binding in objects.iter().filter(|o| o["kind"] == "RoleBinding") {
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": "widget-op", "namespace": "ops"}])
            );
        }
        let lock_role = serde_json::to_string(&objects[5]["rules"]).unwrap();
        assert_eq!(objects[5]["metadata"]["name"], "widget-op-leader-election");
        assert!(
            lock_role.contains("configmaps") && lock_role.contains("pods"),
            "{lock_role}"
        );
        assert!(
            lock_role.contains("\"resourceNames\":[\"widget-op\"]"),
            "{lock_role}"
        );
        assert!(!lock_role.contains("widgets"), "only the lock: {lock_role}");

        // One replica, no election: no lock Role.
        let mut config = OperatorConfig::default();
        config.runtime.watch_namespaces = vec!["ops".into()];
        let objects = rbac_objects(&access(), &options(1), &config).unwrap();
        assert_eq!(objects.len(), 3);
    }
}
