//! Settings of the sandbox emulator.

use std::time::Duration;

/// API key the sandbox accepts when none is configured.
pub const DEFAULT_API_KEY: &str = "sandbox-api-key";

/// Settings of the sandbox emulator.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The only `auth` value accepted.
    pub api_key: String,
    /// Registered sender names (signatures) a send may use.
    pub senders: Vec<String>,
    /// Starting account balance.
    pub balance: f64,
    /// Currency reported by the `balance` operation.
    pub currency: String,
    /// Delay between two status transitions of a message.
    pub step_delay: Duration,
    /// Account-level notification address that receives pipeline statuses.
    pub account_webhook_url: Option<String>,
    /// Total number of attempts to deliver one webhook.
    pub webhook_attempts: u32,
    /// Delay before the first webhook retry; doubles on each further retry.
    pub webhook_backoff: Duration,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            api_key: DEFAULT_API_KEY.to_owned(),
            senders: vec!["msgw".to_owned(), "SMSTest".to_owned()],
            balance: 1000.0,
            currency: "UAH".to_owned(),
            step_delay: Duration::from_secs(1),
            account_webhook_url: None,
            webhook_attempts: 5,
            webhook_backoff: Duration::from_millis(500),
        }
    }
}
