//! The gateway's JSON endpoint: builds the request envelope, posts it with reqwest,
//! and parses the answer; [`GatewayClient`] is core's [`Gateway`] port on it, and
//! [`parse_webhook`] the intake's reader of delivery webhooks. The serde DTOs are
//! private to this module.

mod flex;
mod iso8601;
mod request;
mod response;
mod retry_after;
mod webhook;

use std::{sync::Arc, time::Duration};

use secrecy::{ExposeSecret, SecretString};
use tokio::time::Instant;

use crate::base::metrics::Metrics;
use crate::core::domain::{Operation, Output};
use crate::core::ports::gateway::{Gateway, ItemOutcome, PayloadError, UpstreamError};

pub use request::type_name;
pub use webhook::parse_webhook;

/// Where and how to reach the gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The gateway's `{base_url}`; requests go to `{base_url}/api/json.php`.
    pub base_url: url::Url,
    /// The API key sent as `auth`.
    pub api_key: SecretString,
    /// Upper bound of one upstream request.
    pub timeout: Duration,
    /// Keep-alive connections kept open: the dispatcher never has more requests in
    /// flight.
    pub connections: usize,
}

/// A client of the gateway's JSON endpoint over a pool of keep-alive connections.
#[derive(Debug, Clone)]
pub struct GatewayClient {
    http: reqwest::Client,
    endpoint: url::Url,
    api_key: SecretString,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

/// Envelope bodies above this size are refused rather than buffered without bound.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

impl GatewayClient {
    /// Builds the client; fails only on a base URL that cannot take the path.
    pub fn new(config: GatewayConfig, metrics: Arc<Metrics>) -> Result<Self, String> {
        let mut base = config.base_url;
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let endpoint = base
            .join("api/json.php")
            .map_err(|e| format!("invalid gateway URL: {e}"))?;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(config.connections)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .connect_timeout(config.timeout)
            .user_agent(concat!("msgw/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            http,
            endpoint,
            api_key: config.api_key,
            timeout: config.timeout,
            metrics,
        })
    }

    /// The URL msgw posts to.
    pub fn endpoint(&self) -> &url::Url {
        &self.endpoint
    }

    async fn exchange(
        &self,
        ops: &[&Operation],
        hooks: &[Option<String>],
        deadline: Option<Instant>,
    ) -> Result<Vec<ItemOutcome>, UpstreamError> {
        let envelope = request::Envelope {
            auth: self.api_key.expose_secret(),
            data: ops
                .iter()
                .enumerate()
                .map(|(i, op)| request::Item::new(op, hooks.get(i).and_then(Option::as_deref)))
                .collect(),
        };
        let body = serde_json::to_vec(&envelope)
            .map_err(|e| UpstreamError::BadEnvelope(format!("cannot encode request: {e}")))?;
        let timeout_at = Instant::now() + self.timeout;
        let (limit, by_deadline) = match deadline {
            Some(d) if d < timeout_at => (d, true),
            _ => (timeout_at, false),
        };
        let answer = tokio::time::timeout_at(limit, self.post(body)).await;
        let bytes = match answer {
            Ok(result) => result?,
            Err(_) if by_deadline => return Err(UpstreamError::Deadline),
            Err(_) => return Err(UpstreamError::Timeout(self.timeout)),
        };
        let envelope: response::Envelope = serde_json::from_slice(&bytes)
            .map_err(|e| UpstreamError::BadEnvelope(e.to_string()))?;
        interpret(ops, envelope)
    }

    async fn post(&self, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
        let mut response = self
            .http
            .post(self.endpoint.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body)
            .send()
            .await
            .map_err(transport_error)?;
        let status = response.status();
        // A refusal for the gateway's rate is the one HTTP error that says nothing was
        // done, so its sends are released for a retry rather than left unknown.
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let retry_after =
                retry_after::parse(response.headers().get(reqwest::header::RETRY_AFTER));
            return Err(UpstreamError::RateLimited { retry_after });
        }
        if !status.is_success() {
            return Err(UpstreamError::HttpStatus(status.as_u16()));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(UpstreamError::BadEnvelope(format!(
                    "body larger than {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

#[tonic::async_trait]
impl Gateway for GatewayClient {
    async fn call(
        &self,
        ops: &[&Operation],
        hooks: &[Option<String>],
        deadline: Option<Instant>,
    ) -> Result<Vec<ItemOutcome>, UpstreamError> {
        let started = Instant::now();
        let result = self.exchange(ops, hooks, deadline).await;
        let operation = match ops {
            [op] => type_name(op),
            _ => "batch",
        };
        let outcome = outcome(&result);
        self.metrics
            .dispatch
            .upstream_seconds
            .with_label_values(&[operation, outcome])
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .dispatch
            .upstream_total
            .with_label_values(&[operation, outcome])
            .inc();
        result
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn canonical(&self, op: &Operation) -> Vec<u8> {
        canonical(op)
    }

    fn parse_output(
        &self,
        op: &Operation,
        payload: serde_json::Value,
    ) -> Result<Output, PayloadError> {
        parse_output(op, payload)
    }
}

/// The operation as the gateway receives it, without its hook: the same request
/// always gives the same bytes (fields in a fixed order, `+` stripped from phones).
pub fn canonical(op: &Operation) -> Vec<u8> {
    // Serializing these DTOs cannot fail: plain strings, numbers and booleans.
    serde_json::to_vec(&request::Item::new(op, None)).unwrap_or_default()
}

/// Reads a payload the gateway gave for `op` (kept from an earlier answer) exactly as
/// when it arrived.
pub fn parse_output(op: &Operation, payload: serde_json::Value) -> Result<Output, PayloadError> {
    response::parse_payload(op, payload)
}

/// The outcome label of an upstream request.
fn outcome(result: &Result<Vec<ItemOutcome>, UpstreamError>) -> &'static str {
    match result {
        Ok(items)
            if items
                .iter()
                .any(|i| matches!(i, ItemOutcome::Rejected(_) | ItemOutcome::NotFound { .. })) =>
        {
            "rejected"
        }
        Ok(items)
            if items
                .iter()
                .any(|i| matches!(i, ItemOutcome::BadPayload(_))) =>
        {
            "bad_response"
        }
        Ok(_) => "ok",
        Err(UpstreamError::Unreachable(_)) => "unreachable",
        Err(UpstreamError::Transport(_)) => "transport",
        Err(UpstreamError::Timeout(_)) => "timeout",
        Err(UpstreamError::Deadline) => "deadline",
        Err(UpstreamError::HttpStatus(_)) => "http_error",
        Err(UpstreamError::BadEnvelope(_)) => "bad_response",
        Err(UpstreamError::AccessDenied) => "access_denied",
        Err(UpstreamError::EnvelopeRejected(_)) => "envelope_rejected",
        Err(UpstreamError::RateLimited { .. }) => "rate_limited",
    }
}

fn transport_error(e: reqwest::Error) -> UpstreamError {
    // Callers get the cause; the gateway's address is internal and goes to the log only.
    tracing::warn!(error = %error_chain(&e), "gateway request failed");
    let e = e.without_url();
    let text = error_chain(&e);
    if e.is_connect() {
        UpstreamError::Unreachable(text)
    } else {
        UpstreamError::Transport(text)
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn interpret(
    ops: &[&Operation],
    envelope: response::Envelope,
) -> Result<Vec<ItemOutcome>, UpstreamError> {
    if !envelope.success {
        return Err(match envelope.error.as_deref() {
            Some("Access denied") => UpstreamError::AccessDenied,
            Some(text) => UpstreamError::EnvelopeRejected(text.to_owned()),
            None => UpstreamError::EnvelopeRejected("no error text".into()),
        });
    }
    let items = envelope.data.unwrap_or_default();
    if items.len() != ops.len() {
        return Err(UpstreamError::BadEnvelope(format!(
            "{} results for {} operations",
            items.len(),
            ops.len()
        )));
    }
    Ok(ops
        .iter()
        .zip(items)
        .map(|(op, item)| {
            if item.success {
                match response::parse_payload(op, item.data) {
                    Ok(output) => ItemOutcome::Done(output),
                    Err(e) => ItemOutcome::BadPayload(e),
                }
            } else {
                let text = item.error.unwrap_or_else(|| "no error text".into());
                match op {
                    Operation::GetMessageStatus(id) if says_not_found(&text) => {
                        ItemOutcome::NotFound { id: *id, text }
                    }
                    _ => ItemOutcome::Rejected(text),
                }
            }
        })
        .collect())
}

/// Whether the gateway's refusal of a `status` item says it does not know the message
/// ("Message not found"). Any other refusal (an outage, a limit) proves nothing about
/// whether a send arrived.
fn says_not_found(error: &str) -> bool {
    error.to_ascii_lowercase().contains("not found")
}
