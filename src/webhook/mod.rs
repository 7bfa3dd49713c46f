//! The HTTP listener for the gateway's delivery webhooks:
//! `POST /v1/webhooks/status/{token}` per message and
//! `POST /v1/webhooks/account/{account_token}` for pipeline statuses.
//! A webhook is answered 200 only once its event is committed to the store.

mod token;

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use chrono::Utc;
use secrecy::SecretString;

use crate::domain::{DeliveryReport, EventSource, NewEvent};
use crate::events::EventLog;
use crate::store::Store;
use crate::upstream::parse_webhook;

pub use token::{HookSigner, HookUrls, same_token};

/// Largest webhook body accepted; the gateway's reports are a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What the webhook handlers need.
#[derive(Clone)]
pub struct WebhookState {
    /// Verifies per-message tokens.
    pub signer: HookSigner,
    /// The account-level token.
    pub account_token: SecretString,
    /// Where events go.
    pub events: Arc<EventLog>,
    /// Sent messages, to find a client id by gateway id.
    pub store: Arc<dyn Store>,
}

/// Routes of the webhook listener.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/v1/webhooks/status/{token}", post(status_webhook))
        .route("/v1/webhooks/account/{token}", post(account_webhook))
        .route("/v1/webhooks/status/", post(missing_token))
        .route("/v1/webhooks/account/", post(missing_token))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn missing_token() -> Response {
    reject(StatusCode::UNAUTHORIZED, "missing token")
}

fn reject(code: StatusCode, why: &str) -> Response {
    tracing::warn!(status = code.as_u16(), why, "webhook refused");
    (code, why.to_owned()).into_response()
}

async fn status_webhook(
    State(state): State<WebhookState>,
    Path(token): Path<String>,
    body: Bytes,
) -> Response {
    let mut report = match parse_webhook(&body) {
        Ok(report) => report,
        Err(e) => return reject(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    if let Err(response) = resolve_client_id(&state, &mut report).await {
        return response;
    }
    if report.client_id == 0 || !state.signer.verify(report.client_id, &token) {
        return reject(StatusCode::UNAUTHORIZED, "bad token");
    }
    record(&state, report).await
}

async fn account_webhook(
    State(state): State<WebhookState>,
    Path(token): Path<String>,
    body: Bytes,
) -> Response {
    if !same_token(&token, &state.account_token) {
        return reject(StatusCode::UNAUTHORIZED, "bad token");
    }
    let mut report = match parse_webhook(&body) {
        Ok(report) => report,
        Err(e) => return reject(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    if let Err(response) = resolve_client_id(&state, &mut report).await {
        return response;
    }
    if report.client_id == 0 && report.msg_id.is_none() {
        return reject(
            StatusCode::BAD_REQUEST,
            "neither id nor msg_id: the status names no message",
        );
    }
    record(&state, report).await
}

/// Fills in the client id from msgw's records when the body carries only `msg_id`.
async fn resolve_client_id(
    state: &WebhookState,
    report: &mut DeliveryReport,
) -> Result<(), Response> {
    if report.client_id != 0 {
        return Ok(());
    }
    let Some(msg_id) = report.msg_id.as_deref() else {
        return Ok(());
    };
    match state.store.client_id_of(msg_id).await {
        Ok(Some(id)) => {
            report.client_id = id;
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => {
            tracing::error!(error = %e, "webhook: store lookup failed");
            Err(reject(
                StatusCode::SERVICE_UNAVAILABLE,
                "store unavailable, retry later",
            ))
        }
    }
}

async fn record(state: &WebhookState, report: DeliveryReport) -> Response {
    let client_id = report.client_id;
    let event = NewEvent {
        report,
        received_at: Utc::now(),
        source: EventSource::Webhook,
    };
    match state.events.append(event).await {
        Ok(Some(stored)) => {
            tracing::info!(client_id, cursor = stored.cursor, "webhook stored");
            (StatusCode::OK, "stored").into_response()
        }
        Ok(None) => {
            tracing::debug!(client_id, "webhook duplicate");
            (StatusCode::OK, "duplicate").into_response()
        }
        Err(e) => {
            // Not acknowledged, so the gateway sends it again.
            tracing::error!(client_id, error = %e, "webhook: store append failed");
            reject(
                StatusCode::SERVICE_UNAVAILABLE,
                "store unavailable, retry later",
            )
        }
    }
}
