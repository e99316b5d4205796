//! What CRDs with several versions add to the install manifests: the Service the API server
//! calls the conversion webhook through, the container's `webhook` port, and the access
//! the operator needs to keep its certificate (its Secret) and inject its CA (the CRDs,
//! by name).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::install::InstallOptions;
use crate::config::OperatorConfig;

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

/// The webhook's Service, Role and ClusterRole (with their bindings) when some CRD of
/// `crds` is converted; none otherwise. `labels` select the operator's Pods.
pub(super) fn objects(
    crds: &[CustomResourceDefinition],
    options: &InstallOptions,
    config: &OperatorConfig,
    labels: &Value,
) -> Vec<Value> {
    let names = converted(crds);
    if names.is_empty() {
        return Vec::new();
    }
    let webhook = &config.webhook;
    let namespace = match webhook.namespace.trim() {
        "" => options.namespace.as_str(),
        other => other,
    };
    let role = format!("{}-webhook", options.name);
    let subject =
        json!([{"kind": "ServiceAccount", "name": options.name, "namespace": options.namespace}]);
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
                "rules": [{"apiGroups": ["apiextensions.k8s.io"],
                           "resources": ["customresourcedefinitions"],
                           "verbs": ["get", "patch"], "resourceNames": names}],
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

/// The container port of the webhook server, when some CRD of `crds` is converted.
pub(super) fn container_port(
    crds: &[CustomResourceDefinition],
    config: &OperatorConfig,
) -> Option<Value> {
    if converted(crds).is_empty() {
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
