//! `POST /validate/<crd>` and `POST /mutate/<crd>`: the API server's AdmissionReviews,
//! answered by the [`Admission`] of the CRD; and the webhook configurations that register
//! them, written at start-up when they differ from what this operator serves.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::admission::{Admission, Invalid, Review};
use crate::config::WebhookConfig;
use crate::error::{Error, Result};
use crate::resource::PrimaryResource;

/// What the API server's calls are routed by: the kind's CRD name, and where its CRs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `plural.group`: the path segment and the webhook's name.
    pub(crate) name: String,
    pub(crate) group: String,
    /// The version the API server converts the object to before calling.
    pub(crate) version: String,
    pub(crate) plural: String,
}

/// One kind's admission webhooks, their type erased.
#[async_trait]
pub(crate) trait Admits: Send + Sync {
    fn target(&self) -> Target;
    fn validates(&self) -> bool;
    fn mutates(&self) -> bool;
    /// The response to a validation request: allowed, or denied with every problem.
    async fn answer_validation(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        client: &kube::Client,
    ) -> AdmissionResponse;
    /// The response to a mutation request: allowed, with the defaults as a JSON patch.
    fn answer_mutation(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse;
}

fn typed<K: DeserializeOwned>(object: &DynamicObject) -> std::result::Result<K, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize(value).map_err(|e| e.to_string())
}

fn describe(request: &AdmissionRequest<DynamicObject>) -> String {
    format!("{} {}", request.kind.kind, request.name)
}

#[async_trait]
impl<K: PrimaryResource> Admits for Admission<K> {
    fn target(&self) -> Target {
        let (group, plural) = (K::group(&()).into_owned(), K::plural(&()).into_owned());
        Target {
            name: format!("{plural}.{group}"),
            group,
            version: K::version(&()).into_owned(),
            plural,
        }
    }

    fn validates(&self) -> bool {
        Admission::validates(self)
    }

    fn mutates(&self) -> bool {
        Admission::mutates(self)
    }

    async fn answer_validation(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        client: &kube::Client,
    ) -> AdmissionResponse {
        let response = AdmissionResponse::from(request);
        let Some(object) = &request.object else {
            return response;
        };
        let object: K = match typed(object) {
            Ok(object) => object,
            Err(e) => return response.deny(format!("{}: {e}", describe(request))),
        };
        let old = request.old_object.as_ref().and_then(|o| typed(o).ok());
        let mut found = Invalid::new();
        for check in &self.checks {
            let review = Review {
                object: object.clone(),
                old: old.clone(),
                client: client.clone(),
                user: request.user_info.username.clone().unwrap_or_default(),
            };
            if let Err(invalid) = check(review).await {
                for (path, message) in invalid.problems() {
                    found.field(path.clone(), message.clone());
                }
            }
        }
        match found.into_result() {
            Ok(()) => response,
            Err(invalid) => response.deny(format!("{} is invalid: {invalid}", describe(request))),
        }
    }

    fn answer_mutation(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let response = AdmissionResponse::from(request);
        let Some(object) = &request.object else {
            return response;
        };
        let mut object: K = match typed(object) {
            Ok(object) => object,
            Err(e) => return response.deny(format!("{}: {e}", describe(request))),
        };
        // The patch is what the defaults changed in the typed object, not the difference
        // between the request and its typed form (which may drop or spell fields otherwise).
        let before = serde_json::to_value(&object).unwrap_or_default();
        for fill in &self.fills {
            fill(&mut object);
        }
        let after = serde_json::to_value(&object).unwrap_or_default();
        let patch = json_patch::diff(&before, &after);
        if patch.0.is_empty() {
            return response;
        }
        response.with_patch(patch).unwrap_or_else(|e| {
            AdmissionResponse::from(request).deny(format!("cannot write the defaults: {e}"))
        })
    }
}

/// What the admission handlers share.
#[derive(Clone)]
pub(crate) struct Admissions {
    pub(crate) by_name: Arc<BTreeMap<String, Arc<dyn Admits>>>,
    pub(crate) client: kube::Client,
}

/// Which of the two webhooks a call is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Hook {
    Validate,
    Mutate,
}

impl Hook {
    fn path(self, target: &Target) -> String {
        match self {
            Hook::Validate => format!("/validate/{}", target.name),
            Hook::Mutate => format!("/mutate/{}", target.name),
        }
    }
}

/// `POST /validate/{crd}`.
pub(crate) async fn validate(
    State(admissions): State<Admissions>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    answer(&admissions, &name, Hook::Validate, &body).await
}

/// `POST /mutate/{crd}`.
pub(crate) async fn mutate(
    State(admissions): State<Admissions>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    answer(&admissions, &name, Hook::Mutate, &body).await
}

async fn answer(admissions: &Admissions, name: &str, hook: Hook, body: &[u8]) -> Response {
    let Some(admits) = admissions.by_name.get(name) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no admission webhook for {name}"),
        )
            .into_response();
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("not an AdmissionReview: {e}"),
            )
                .into_response();
        }
    };
    let request: std::result::Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
    let response = match request {
        Ok(request) => match hook {
            Hook::Validate => admits.answer_validation(&request, &admissions.client).await,
            Hook::Mutate => admits.answer_mutation(&request),
        },
        Err(e) => AdmissionResponse::invalid(e.to_string()),
    };
    super::json_response(&response.into_review())
}

/// The ValidatingWebhookConfiguration and MutatingWebhookConfiguration of `admits` (each
/// only when some kind has that hook), named `name`, calling the server as `config` says,
/// trusting `ca_bundle` when given. Every field the API server would default is set, so a
/// configuration read back compares equal when nothing changed.
pub(crate) fn configurations(
    admits: &[Arc<dyn Admits>],
    name: &str,
    config: &WebhookConfig,
    namespace: &str,
    ca_bundle: Option<&str>,
) -> Vec<Value> {
    let mut configurations = Vec::new();
    for (hook, kind) in [
        (Hook::Validate, "ValidatingWebhookConfiguration"),
        (Hook::Mutate, "MutatingWebhookConfiguration"),
    ] {
        let webhooks: Vec<Value> = admits
            .iter()
            .filter(|a| match hook {
                Hook::Validate => a.validates(),
                Hook::Mutate => a.mutates(),
            })
            .map(|a| {
                let target = a.target();
                let client = super::inject::client_config_at(
                    config,
                    namespace,
                    ca_bundle,
                    &hook.path(&target),
                );
                let mut webhook = json!({
                    "name": target.name,
                    "clientConfig": client,
                    "rules": [{
                        "apiGroups": [target.group],
                        "apiVersions": [target.version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [target.plural],
                        "scope": "*",
                    }],
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "matchPolicy": "Equivalent",
                    "namespaceSelector": {},
                    "objectSelector": {},
                    "timeoutSeconds": 10,
                });
                if hook == Hook::Mutate {
                    webhook["reinvocationPolicy"] = json!("Never");
                }
                webhook
            })
            .collect();
        if !webhooks.is_empty() {
            configurations.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": name},
                "webhooks": webhooks,
            }));
        }
    }
    configurations
}

/// Create each of `configurations`, or make its `webhooks` what it says when they differ.
pub(crate) async fn register(client: &kube::Client, configurations: &[Value]) -> Result<()> {
    for wanted in configurations {
        let kind = wanted["kind"].as_str().unwrap_or_default();
        let name = wanted["metadata"]["name"].as_str().unwrap_or_default();
        let resource = kube::api::ApiResource {
            group: "admissionregistration.k8s.io".to_string(),
            version: "v1".to_string(),
            api_version: "admissionregistration.k8s.io/v1".to_string(),
            kind: kind.to_string(),
            plural: format!("{}s", kind.to_lowercase()),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let fail =
            |e: kube::Error| Error::with_source(format!("cannot register the {kind} {name}"), e);
        match api.get_opt(name).await.map_err(fail)? {
            None => {
                let object: DynamicObject =
                    serde_json::from_value(wanted.clone()).map_err(Error::other)?;
                api.create(&PostParams::default(), &object)
                    .await
                    .map_err(fail)?;
            }
            Some(found) if found.data.get("webhooks") != wanted.get("webhooks") => {
                api.patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"webhooks": wanted["webhooks"]})),
                )
                .await
                .map_err(fail)?;
            }
            Some(_) => continue,
        }
        tracing::info!(kind, name, "admission webhooks registered");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Widget;

    fn request(object: Value) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "test.windlass.dev", "version": "v1", "kind": "Widget"},
                "resource": {"group": "test.windlass.dev", "version": "v1", "resource": "widgets"},
                "name": "w", "namespace": "n", "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": object, "dryRun": false,
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "test.windlass.dev/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "n"}, "spec": spec})
    }

    /// A client that is never called: the checks here read nothing.
    fn client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    fn admission() -> Admission<Widget> {
        Admission::new()
            .defaults(|w: &mut Widget| {
                w.spec.version.get_or_insert_with(|| "1.0".to_string());
            })
            .validate(|review| async move {
                let mut invalid = Invalid::new();
                if review.user != "alice" {
                    invalid.field("metadata", "only alice");
                }
                if review.object.spec.extra.contains_key("forbidden") {
                    invalid.field("spec.forbidden", "not allowed");
                }
                if review.object.spec.version.as_deref() == Some("0.9") {
                    invalid.field("spec.version", "0.9 is gone");
                }
                invalid.into_result()
            })
    }

    #[test]
    fn defaults_become_a_patch_of_what_they_changed_only() {
        let response = admission().answer_mutation(&request(widget(json!({"size": 3}))));
        assert!(response.allowed);
        let patch: Value = serde_json::from_slice(&response.patch.unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/version", "value": "1.0"}])
        );
        let untouched = admission().answer_mutation(&request(widget(json!({"version": "2.0"}))));
        assert!(untouched.allowed && untouched.patch.is_none());
    }

    #[tokio::test]
    async fn every_problem_is_reported_with_its_path() {
        let admission = admission();
        let ok = admission
            .answer_validation(&request(widget(json!({"version": "2.0"}))), &client())
            .await;
        assert!(ok.allowed);
        let refused = admission
            .answer_validation(
                &request(widget(json!({"version": "0.9", "forbidden": true}))),
                &client(),
            )
            .await;
        assert!(!refused.allowed);
        assert_eq!(
            refused.result.message,
            "Widget w is invalid: spec.forbidden: not allowed; spec.version: 0.9 is gone"
        );
    }

    #[tokio::test]
    async fn an_object_that_is_not_of_the_kind_is_refused_with_where_it_is_wrong() {
        let response = admission()
            .answer_validation(&request(widget(json!({"version": 7}))), &client())
            .await;
        assert!(!response.allowed);
        assert!(
            response.result.message.contains("spec.version"),
            "{}",
            response.result.message
        );
    }

    #[test]
    fn configurations_list_each_hook_once_with_the_hubs_version() {
        let admits: Vec<Arc<dyn Admits>> = vec![Arc::new(admission())];
        let mut config = WebhookConfig::default();
        config.named_after("op");
        let made = configurations(&admits, "op-webhook", &config, "ops", Some("PEM"));
        assert_eq!(made.len(), 2);
        let validating = &made[0]["webhooks"][0];
        assert_eq!(validating["name"], "widgets.test.windlass.dev");
        assert_eq!(validating["rules"][0]["apiVersions"], json!(["v1"]));
        assert_eq!(
            validating["clientConfig"]["caBundle"], "UEVN",
            "base64 of PEM"
        );
        let only_checks: Vec<Arc<dyn Admits>> = vec![Arc::new(
            Admission::<Widget>::new().validate(|_| async { Ok(()) }),
        )];
        let made = configurations(&only_checks, "op-webhook", &config, "ops", None);
        assert_eq!(made.len(), 1, "no mutating configuration without defaults");
    }
}
