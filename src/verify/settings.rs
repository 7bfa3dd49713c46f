//! How verifications behave: what `msgw serve`'s verification options set.

use std::time::Duration;

use super::guard;

/// How verifications behave.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Least time between two sends of one verification.
    pub resend_interval: Duration,
    /// New verifications per number per [`super::PHONE_WINDOW`].
    pub phone_limit: u32,
    /// Country prefixes (digits) allowed; empty: any.
    pub allowed_prefixes: Vec<String>,
    /// The upstream is the built-in sandbox: answers show the code.
    pub sandbox: bool,
    /// The fraud guard's settings.
    pub guard: guard::Settings,
}
