//! What the operator's webhook server (CRD conversions, admission webhooks) adds to the
//! install manifests: the Service the API server calls it through, the container's
//! `webhook` port, the admission webhook configurations, and the access the operator needs
//! to keep its certificate (its Secret) and inject its CA (the CRDs and the webhook
//! configurations, by name).

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::config::OperatorConfig;
use crate::webhook::admission::{Admits, configurations};

/// What the webhook server serves: the CRDs (those converted count) and the admissions.
pub(crate) struct Served<'a> {
    pub(crate) crds: &'a [CustomResourceDefinition],
    pub(crate) admissions: &'a [Arc<dyn Admits>],
}

impl Served<'_> {
    fn any(&self) -> bool {
        !converted(self.crds).is_empty() || !self.admissions.is_empty()
    }
}

/// cert-manager's CA injector's annotation: the Certificate whose CA it injects.
pub(crate) const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// The name of the container port of the webhook server.
pub(super) const WEBHOOK_PORT_NAME: &str = "webhook";

/// The names of the CRDs among `crds` that are converted by the webhook.
fn converted(crds: &[CustomResourceDefinition]) -> Vec<String> {
    crds.iter()
        .filter(|crd| {
            crd.spec
                .conversion
                .as_ref()
                .is_some_and(|c| c.strategy == "Webhook")
        })
        .filter_map(|crd| crd.metadata.name.clone())
        .collect()
}

/// The webhook's Service, its admission webhook configurations, and its Role and
/// ClusterRole (with their bindings) when it serves anything; none otherwise. `labels`
/// select the operator's Pods.
pub(crate) fn objects(
    served: &Served<'_>,
    (name, operator_namespace): (&str, &str),
    config: &OperatorConfig,
    labels: &Value,
) -> Vec<Value> {
    if !served.any() {
        return Vec::new();
    }
    let crds = converted(served.crds);
    let webhook = &config.webhook;
    let namespace = match webhook.namespace.trim() {
        "" => operator_namespace,
        other => other,
    };
    let role = format!("{name}-webhook");
    let subject =
        json!([{"kind": "ServiceAccount", "name": name, "namespace": operator_namespace}]);
    let mut objects = Vec::new();
    if webhook.url.is_none() {
        objects.push(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": webhook.service, "namespace": namespace},
            "spec": {
                "selector": labels,
                "ports": [{"name": "https", "port": 443, "targetPort": WEBHOOK_PORT_NAME}],
            },
        }));
    }
    let mut registered = configurations(
        served.admissions,
        &webhook.service,
        webhook,
        namespace,
        None,
    );
    if let Some(from) = &webhook.certificate.inject_ca_from {
        for configuration in &mut registered {
            configuration["metadata"]["annotations"] = json!({INJECT_CA_FROM: from});
        }
    }
    objects.extend(registered.iter().cloned());
    if webhook.certificate.dir.is_none() {
        objects.extend([
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": role, "namespace": namespace},
                // `create` cannot be limited to a name: the Secret does not exist yet.
                "rules": [
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"],
                     "resourceNames": [webhook.certificate.secret]},
                ],
            }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": role, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": subject,
            }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": cluster_rules(&crds, &registered, &webhook.service),
            }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role},
                "subjects": subject,
            }),
        ]);
    }
    objects
}

/// What the operator writes cluster-wide to keep its webhooks called: the converted CRDs
/// and its webhook configurations, each by name (`create` of a configuration cannot be
/// limited to a name: it does not exist yet).
fn cluster_rules(crds: &[String], registered: &[Value], name: &str) -> Vec<Value> {
    let mut rules = Vec::new();
    if !crds.is_empty() {
        rules.push(json!({"apiGroups": ["apiextensions.k8s.io"],
                          "resources": ["customresourcedefinitions"],
                          "verbs": ["get", "patch"], "resourceNames": crds}));
    }
    let kinds: Vec<String> = registered
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .map(|kind| format!("{}s", kind.to_lowercase()))
        .collect();
    if !kinds.is_empty() {
        rules.push(
            json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": kinds,
                          "verbs": ["create"]}),
        );
        rules.push(
            json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": kinds,
                          "verbs": ["get", "patch"], "resourceNames": [name]}),
        );
    }
    rules
}

/// The container port of the webhook server, when it serves anything.
pub(crate) fn container_port(served: &Served<'_>, config: &OperatorConfig) -> Option<Value> {
    if !served.any() {
        return None;
    }
    let port = config
        .webhook
        .bind_address
        .parse::<std::net::SocketAddr>()
        .map(|a| a.port())
        .unwrap_or(9443);
    Some(json!({"name": WEBHOOK_PORT_NAME, "containerPort": port, "protocol": "TCP"}))
}
