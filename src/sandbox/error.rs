//! Error texts the sandbox answers with, at envelope and operation level.

/// Why a whole request was refused (`{"success":false,"error":...}`).
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The gateway refuses anything but `Content-Type: application/json`
    /// (docs/gateway.md#errors, rule 5).
    #[error("Content-Type must be application/json")]
    ContentType,
    #[error("Request body is larger than 1 MiB")]
    TooLarge,
    #[error("Request body is not valid JSON")]
    NotJson,
    #[error("Request body must be a JSON object with auth and data")]
    NotObject,
    #[error("Missing auth")]
    MissingAuth,
    #[error("auth must be a string")]
    AuthNotString,
    /// Exact gateway text (docs/gateway.md#authentication, rule 2).
    #[error("Access denied")]
    AccessDenied,
    #[error("Missing data")]
    MissingData,
    #[error("data must be a non-empty array")]
    DataNotArray,
    /// Over the contracted rate (`MSGW_SANDBOX_RATE`): answered with HTTP 429.
    #[error("Too many requests")]
    TooManyRequests,
}

/// Why one operation of an envelope failed (its item has `success:false`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpError {
    #[error("Invalid operation: expected an object")]
    NotObject,
    /// Exact gateway text for `whatsapp` and unknown types (docs/gateway.md#errors, rule 4).
    #[error("Invalid message type")]
    InvalidType,
    /// A required field is absent, `null` or an empty string.
    #[error("Missing {0}")]
    Missing(String),
    /// A field has the wrong JSON type or a value outside its rule.
    #[error("Invalid {0}")]
    Invalid(String),
    #[error("viber_carousel must have 2 to 5 slides")]
    SlideCount,
    #[error("Unknown pipeline channel: {0}")]
    UnknownChannel(String),
    #[error("Repeated pipeline channel: {0}")]
    RepeatedChannel(String),
    #[error("Missing id or template")]
    MissingIdOrTemplate,
    /// Exact gateway text (docs/gateway.md#errors, rule 3).
    #[error("Error in Sender-name")]
    SenderName,
    #[error("Phone number is blocked")]
    Blocked,
    #[error("Insufficient balance")]
    InsufficientBalance,
    #[error("Message not found")]
    NotFound,
}

impl OpError {
    /// `Missing <field>`.
    pub fn missing(field: impl Into<String>) -> Self {
        Self::Missing(field.into())
    }

    /// `Invalid <field>`.
    pub fn invalid(field: impl Into<String>) -> Self {
        Self::Invalid(field.into())
    }
}
