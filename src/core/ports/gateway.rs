//! The gateway as core sees it: [`Gateway`] carries operations to the gateway and
//! back, and says what its answers mean ([`ItemOutcome`], [`UpstreamError`]); how they
//! travel (the JSON envelope, HTTP) is `adapters/upstream`'s.

use std::time::Duration;

use tokio::time::Instant;

use crate::core::domain::{ClientId, DeliveryReport, Operation, Output};

/// A failure of the whole upstream request.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection could be made; the request did not leave msgw.
    #[error("cannot connect to the gateway: {0}")]
    Unreachable(String),
    /// The connection failed after the request may have been sent.
    #[error("the gateway connection failed: {0}")]
    Transport(String),
    /// The configured upstream timeout passed.
    #[error("the gateway did not answer within {0:?}")]
    Timeout(Duration),
    /// The caller's deadline passed.
    #[error("the caller's deadline passed before the gateway answered")]
    Deadline,
    /// The gateway answered with an HTTP error status.
    #[error("the gateway answered HTTP {0}")]
    HttpStatus(u16),
    /// The body is not the gateway's envelope (docs/gateway.md#envelope).
    #[error("the gateway's answer is not a valid envelope: {0}")]
    BadEnvelope(String),
    /// The gateway refused the key (`Access denied`).
    #[error("Access denied")]
    AccessDenied,
    /// The gateway refused the whole envelope with another text.
    #[error("the gateway refused the request: {0}")]
    EnvelopeRejected(String),
    /// The gateway refused the whole envelope for its rate (HTTP 429): nothing of it
    /// was done. `retry_after`: when the gateway said to retry, if it said.
    #[error("the gateway refused the request as over its rate (HTTP 429); nothing was done")]
    RateLimited {
        /// The gateway's `Retry-After`.
        retry_after: Option<Duration>,
    },
}

impl UpstreamError {
    /// Whether the gateway may have carried the request out: false only when it
    /// never left msgw or the gateway refused the whole envelope.
    pub fn may_have_arrived(&self) -> bool {
        !matches!(
            self,
            Self::Unreachable(_)
                | Self::AccessDenied
                | Self::EnvelopeRejected(_)
                | Self::RateLimited { .. }
        )
    }
}

/// The result of one operation inside an accepted envelope.
#[derive(Debug)]
// Outcomes live only between parsing and dispatch; boxing would cost an allocation per item.
#[allow(clippy::large_enum_variant)]
pub enum ItemOutcome {
    /// Accepted, with its parsed output.
    Done(Output),
    /// Refused by the gateway with its text.
    Rejected(String),
    /// A `status` item refused because the gateway has no message with client id `id`
    /// ("Message not found"), with its text. Any other refusal of a `status` item (an
    /// outage, a limit) is [`ItemOutcome::Rejected`]: it proves nothing about whether a
    /// send arrived.
    NotFound {
        /// The id the `status` item asked for.
        id: ClientId,
        /// The gateway's text.
        text: String,
    },
    /// Accepted, but the payload could not be read.
    BadPayload(PayloadError),
}

/// A payload that does not have the shape its operation answers with.
#[derive(Debug, thiserror::Error)]
#[error("unexpected {operation} payload: {reason}")]
pub struct PayloadError {
    operation: &'static str,
    reason: String,
}

impl PayloadError {
    /// The payload of `operation` (the gateway's name of it) is unreadable for `reason`.
    pub fn new(operation: &'static str, reason: String) -> Self {
        Self { operation, reason }
    }
}

/// The gateway: carries operations there and back, and reads its answers as when they
/// arrived.
#[tonic::async_trait]
pub trait Gateway: std::fmt::Debug + Send + Sync + 'static {
    /// Sends `ops` as one request and returns one outcome per operation, in order.
    /// `hooks[i]` is the status callback of `ops[i]` (ignored for operations without one).
    /// The request ends at the configured timeout or at `deadline`, whichever is first.
    async fn call(
        &self,
        ops: &[&Operation],
        hooks: &[Option<String>],
        deadline: Option<Instant>,
    ) -> Result<Vec<ItemOutcome>, UpstreamError>;

    /// The upper bound of one request.
    fn timeout(&self) -> Duration;

    /// The operation as the gateway receives it, without its hook: the same request
    /// always gives the same bytes (what a claim's fingerprint hashes).
    fn canonical(&self, op: &Operation) -> Vec<u8>;

    /// Reads a payload the gateway gave for `op` (kept from an earlier answer) exactly as
    /// when it arrived.
    fn parse_output(
        &self,
        op: &Operation,
        payload: serde_json::Value,
    ) -> Result<Output, PayloadError>;
}

/// A delivery webhook body that is not the gateway's status report.
#[derive(Debug, thiserror::Error)]
#[error("not a status webhook: {0}")]
pub struct WebhookError(pub String);

/// Reads the gateway's delivery webhook body into a report (the upstream adapter's
/// parser, handed to core's webhook intake at start).
pub type ReadReport = fn(&[u8]) -> Result<DeliveryReport, WebhookError>;
