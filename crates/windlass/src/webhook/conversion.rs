//! `POST /convert`: the API server's ConversionReview, answered by the conversions of the
//! CRD each object belongs to.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::Value;

use crate::crd::ApiVersions;

/// The conversions of every multi-version CRD this operator serves.
pub(crate) type Conversions = Arc<Vec<ApiVersions<()>>>;

/// Answer one ConversionReview. A body that is not one is a 400; an object that cannot be
/// converted fails the whole review (the API server wants all or nothing) with the
/// reason in its message.
pub(crate) async fn handle(State(conversions): State<Conversions>, body: Bytes) -> Response {
    let review: ConversionReview = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("not a ConversionReview: {e}"),
            )
                .into_response();
        }
    };
    let request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(_) => {
            return (
                StatusCode::BAD_REQUEST,
                "a ConversionReview without a request",
            )
                .into_response();
        }
    };
    let review = answer(&conversions, request).into_review();
    super::json_response(&review)
}

/// The response to `request`: every object converted, or the first failure.
fn answer(conversions: &[ApiVersions<()>], request: ConversionRequest) -> ConversionResponse {
    let desired = request.desired_api_version.clone();
    let objects = request.objects.clone();
    let response = ConversionResponse::for_request(request);
    let mut converted = Vec::with_capacity(objects.len());
    for object in objects {
        match convert_one(conversions, object, &desired) {
            Ok(object) => converted.push(object),
            Err(message) => {
                tracing::warn!(%message, "conversion refused");
                return response.failure(Status::failure(&message, "ConversionFailed"));
            }
        }
    }
    response.success(converted)
}

fn convert_one(
    conversions: &[ApiVersions<()>],
    object: Value,
    desired: &str,
) -> Result<Value, String> {
    let field = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let versions = conversions
        .iter()
        .find(|v| v.serves(&api_version, &kind))
        .ok_or_else(|| format!("this operator converts no {kind} of {api_version}"))?;
    versions
        .convert(object, desired)
        .map_err(|e| format!("{kind} {name}: {e}"))
}
