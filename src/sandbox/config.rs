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
    /// Operations a second the sandbox accepts, like a gateway's contracted rate;
    /// `None`: no limit.
    pub rate: Option<u32>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        crate::base::parse::defaults::<Tuning>().config(DEFAULT_API_KEY.to_owned())
    }
}

/// Speeds of the sandbox's simulated delivery and the rate it accepts: options of
/// `msgw sandbox`, and of `msgw serve` for its built-in sandbox.
#[derive(Debug, Clone, clap::Args)]
pub struct Tuning {
    /// Sandbox: delay between two status changes of a message (e.g. `1s`, `20ms`).
    #[arg(long, env = "MSGW_SANDBOX_STEP_DELAY", default_value = "1s", value_parser = crate::base::parse::duration)]
    pub sandbox_step_delay: Duration,
    /// Sandbox: attempts to deliver one webhook.
    #[arg(long, env = "MSGW_SANDBOX_WEBHOOK_ATTEMPTS", default_value = "5", value_parser = crate::base::parse::between(1u32, 100))]
    pub sandbox_webhook_attempts: u32,
    /// Sandbox: delay before the first webhook retry; doubles on each retry.
    #[arg(long, env = "MSGW_SANDBOX_WEBHOOK_BACKOFF", default_value = "500ms", value_parser = crate::base::parse::duration)]
    pub sandbox_webhook_backoff: Duration,
    /// Sandbox: operations a second it accepts, as a gateway's contracted rate; an
    /// envelope over it is refused whole with HTTP 429. Unset: no limit.
    #[arg(long, env = "MSGW_SANDBOX_RATE", value_parser = crate::base::parse::between(1u32, 100_000))]
    pub sandbox_rate: Option<u32>,
}

impl Tuning {
    /// A sandbox configuration with these speeds and `api_key`.
    pub fn config(&self, api_key: String) -> SandboxConfig {
        SandboxConfig {
            api_key,
            senders: vec!["msgw".to_owned(), "SMSTest".to_owned()],
            balance: 1000.0,
            currency: "UAH".to_owned(),
            step_delay: self.sandbox_step_delay,
            account_webhook_url: None,
            webhook_attempts: self.sandbox_webhook_attempts,
            webhook_backoff: self.sandbox_webhook_backoff,
            rate: self.sandbox_rate,
        }
    }
}
