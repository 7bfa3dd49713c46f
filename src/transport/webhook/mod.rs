//! The HTTP listener for the gateway's delivery webhooks (nothing else: `/metrics` is on
//! the admin listener): `POST /v1/webhooks/status/{token}` per message and
//! `POST /v1/webhooks/account/{account_token}` for pipeline statuses.
//! A webhook is answered 200 only once its event is committed to the store.

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use secrecy::SecretString;

use crate::base::metrics::Metrics;
use crate::core::events::{Intake, Refused, Taken};
use crate::core::hooks::{HookSigner, Token, same_token};

/// Largest webhook body accepted; the gateway's reports are a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What the webhook handlers need.
#[derive(Clone)]
pub struct WebhookState {
    /// Verifies per-message tokens.
    pub signer: HookSigner,
    /// The account-level token.
    pub account_token: SecretString,
    /// Takes the bodies into the event log.
    pub intake: Intake,
    /// Where webhooks are counted.
    pub metrics: Arc<Metrics>,
    /// Time a client has to send a webhook's body.
    pub body_timeout: Duration,
}

/// Routes of the webhook listener.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/v1/webhooks/status/{token}", post(status_webhook))
        .route("/v1/webhooks/account/{token}", post(account_webhook))
        .route("/v1/webhooks/status/", post(missing_token))
        .route("/v1/webhooks/account/", post(missing_token))
        .with_state(state)
}

/// Why a webhook was not taken.
struct Refusal {
    code: StatusCode,
    why: String,
}

impl Refusal {
    fn new(code: StatusCode, why: impl Into<String>) -> Self {
        Self {
            code,
            why: why.into(),
        }
    }

    fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "bad token")
    }

    fn store_unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store unavailable, retry later",
        )
    }
}

impl From<Refused> for Refusal {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Unreadable(why) => Self::new(StatusCode::BAD_REQUEST, why),
            Refused::StoreUnavailable => Self::store_unavailable(),
        }
    }
}

/// The HTTP answer of a webhook, counted in `msgw_webhooks_total`.
fn answer(state: &WebhookState, endpoint: &str, outcome: Result<Taken, Refusal>) -> Response {
    let (result, response) = match outcome {
        Ok(Taken::Stored) => ("stored", (StatusCode::OK, "stored").into_response()),
        Ok(Taken::Duplicate) => ("duplicate", (StatusCode::OK, "duplicate").into_response()),
        Err(r) => {
            tracing::warn!(endpoint, status = r.code.as_u16(), why = %r.why, "webhook refused");
            let result = match r.code {
                StatusCode::UNAUTHORIZED => "unauthorized",
                StatusCode::PAYLOAD_TOO_LARGE => "too_large",
                StatusCode::NOT_FOUND => "unknown_message",
                StatusCode::REQUEST_TIMEOUT => "timeout",
                StatusCode::SERVICE_UNAVAILABLE => "store_error",
                _ => "bad_request",
            };
            (result, (r.code, r.why).into_response())
        }
    };
    state
        .metrics
        .events
        .webhooks_total
        .with_label_values(&[endpoint, result])
        .inc();
    response
}

async fn missing_token(State(state): State<WebhookState>) -> Response {
    answer(
        &state,
        "status",
        Err(Refusal::new(StatusCode::UNAUTHORIZED, "missing token")),
    )
}

/// Reads a body of at most [`MAX_BODY_BYTES`] within the body timeout.
async fn body_bytes(state: &WebhookState, body: Body) -> Result<Bytes, Refusal> {
    match tokio::time::timeout(
        state.body_timeout,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                Refusal::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("body larger than {MAX_BODY_BYTES} bytes"),
                )
            } else {
                Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the body: {e}"),
                )
            })
        }
        Err(_) => Err(Refusal::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("body not received within {:?}", state.body_timeout),
        )),
    }
}

async fn status_webhook(
    State(state): State<WebhookState>,
    Path(token): Path<String>,
    body: Body,
) -> Response {
    answer(&state, "status", take_status(&state, &token, body).await)
}

async fn take_status(state: &WebhookState, token: &str, body: Body) -> Result<Taken, Refusal> {
    // The token first: nothing of a forged request is parsed or looked up.
    let proven = match state.signer.open(token) {
        Token::Forged => return Err(Refusal::unauthorized()),
        Token::Message(id) => Some(id),
        Token::Legacy => None,
    };
    let body = body_bytes(state, body).await?;
    let mut report = state.intake.read(&body)?;
    match proven {
        // The token names the message; a body naming another one is not its report.
        Some(id) if report.client_id.is_some_and(|named| named != id) => {
            return Err(Refusal::unauthorized());
        }
        Some(id) => report.client_id = Some(id),
        None => {
            state.intake.resolve_client_id(&mut report).await?;
            let signed = report
                .client_id
                .is_some_and(|id| state.signer.verify_legacy(id, token));
            if !signed {
                return Err(Refusal::unauthorized());
            }
        }
    }
    state.intake.record(report).await.map_err(Refusal::from)
}

async fn account_webhook(
    State(state): State<WebhookState>,
    Path(token): Path<String>,
    body: Body,
) -> Response {
    answer(&state, "account", take_account(&state, &token, body).await)
}

async fn take_account(state: &WebhookState, token: &str, body: Body) -> Result<Taken, Refusal> {
    if !same_token(token, &state.account_token) {
        return Err(Refusal::unauthorized());
    }
    let body = body_bytes(state, body).await?;
    let mut report = state.intake.read(&body)?;
    state.intake.resolve_client_id(&mut report).await?;
    if report.client_id.is_none() {
        // Never stored under a made-up id. Not found rather than refused: a status can
        // arrive a moment before msgw has recorded the send, and the gateway retries.
        return Err(match report.msg_id {
            Some(msg_id) => Refusal::new(
                StatusCode::NOT_FOUND,
                format!("no message with msg_id {msg_id} was sent through msgw"),
            ),
            None => Refusal::new(
                StatusCode::BAD_REQUEST,
                "neither id nor msg_id: the status names no message",
            ),
        });
    }
    state.intake.record(report).await.map_err(Refusal::from)
}
