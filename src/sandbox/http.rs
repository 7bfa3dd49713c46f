//! The HTTP face: `POST /api/json.php`, the envelope, Content-Type and auth.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::Inner;
use super::error::EnvelopeError;
use super::magic::Magic;
use super::ops;

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Router with the gateway's single endpoint.
pub(super) fn router(inner: Arc<Inner>) -> Router {
    Router::new()
        .route("/api/json.php", post(handle))
        .with_state(inner)
}

/// Always HTTP 200: the gateway reports every failure inside the envelope
/// (docs/gateway.md#errors, rule 1).
/// Except for the magic number whose answer is lost: every operation is carried out,
/// then the request is answered with HTTP 502. And over the contracted rate: nothing
/// is carried out, HTTP 429, as a gateway enforcing a contract would answer.
async fn handle(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Body) -> Response {
    let reply = match envelope(&inner, &headers, body).await {
        Ok(items) => {
            tracing::debug!(operations = items.len(), "sandbox request");
            if let Err(retry_after) = inner.admit(items.len()) {
                tracing::debug!(
                    operations = items.len(),
                    retry_after,
                    "sandbox: over its rate: HTTP 429"
                );
                return too_many_requests(retry_after);
            }
            let results: Vec<Value> = items.iter().map(|item| ops::run(&inner, item)).collect();
            // What the answer shows (a msg_id, a balance, a status) is saved before it goes
            // out, so a crash right after it takes nothing back. If it cannot be saved, the
            // outcome is unknown, as when a gateway's answer is lost: a retry asks again.
            if let Err(e) = inner.durable().await {
                tracing::warn!(error = %e, "sandbox: cannot save its state: HTTP 503");
                return (StatusCode::SERVICE_UNAVAILABLE, "503 Service Unavailable")
                    .into_response();
            }
            if items.iter().any(answer_lost) {
                tracing::info!(
                    "sandbox: answer lost on purpose (magic number 380000000010): HTTP 502"
                );
                return (StatusCode::BAD_GATEWAY, "502 Bad Gateway").into_response();
            }
            json!({"success": true, "data": results})
        }
        Err(err) => {
            tracing::debug!(error = %err, "sandbox refused request");
            json!({"success": false, "error": err.to_string()})
        }
    };
    Json(reply).into_response()
}

/// The refusal of a whole envelope over the rate: the envelope-level error body, and
/// when to retry in whole seconds.
fn too_many_requests(retry_after: u64) -> Response {
    let body = json!({"success": false, "error": EnvelopeError::TooManyRequests.to_string()});
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, retry_after.to_string())],
        Json(body),
    )
        .into_response()
}

/// Whether an operation is for the number whose answer the sandbox loses.
fn answer_lost(item: &Value) -> bool {
    item.get("phone")
        .and_then(Value::as_u64)
        .is_some_and(|phone| Magic::of(phone) == Magic::LostAnswer)
}

/// Checks everything above the operations and returns them.
async fn envelope(
    inner: &Inner,
    headers: &HeaderMap,
    body: Body,
) -> Result<Vec<Value>, EnvelopeError> {
    if !is_json_content_type(headers) {
        return Err(EnvelopeError::ContentType);
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| EnvelopeError::TooLarge)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| EnvelopeError::NotJson)?;
    let Value::Object(mut envelope) = value else {
        return Err(EnvelopeError::NotObject);
    };
    // Auth comes before the shape of `data` so an unauthenticated caller learns nothing more.
    match envelope.get("auth") {
        None | Some(Value::Null) => return Err(EnvelopeError::MissingAuth),
        Some(Value::String(key)) if *key == inner.config.api_key => {}
        Some(Value::String(_)) => return Err(EnvelopeError::AccessDenied),
        Some(_) => return Err(EnvelopeError::AuthNotString),
    }
    match envelope.remove("data") {
        None | Some(Value::Null) => Err(EnvelopeError::MissingData),
        Some(Value::Array(items)) if !items.is_empty() => Ok(items),
        Some(_) => Err(EnvelopeError::DataNotArray),
    }
}

/// `application/json`, parameters such as `; charset=utf-8` allowed.
fn is_json_content_type(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}
