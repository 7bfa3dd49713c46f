//! How verifications behave: `msgw serve`'s `--verify-*` options, each declared and
//! bounded here (the secret is read by `config/`, never kept in settings).

use std::time::Duration;

use super::guard;
use crate::process::parse;

/// How verifications behave.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[group(id = "verify")]
pub struct Settings {
    /// Least time between two sends of one verification's code (at most 1h); a resend
    /// sooner gets RESOURCE_EXHAUSTED with RetryInfo.
    #[arg(long = "verify-resend-interval", env = "MSGW_VERIFY_RESEND_INTERVAL", default_value = "30s", value_parser = parse::duration_between(Duration::ZERO, Duration::from_secs(3600)))]
    pub resend_interval: Duration,
    /// New verifications of one phone number per hour, across callers (SMS-pumping
    /// guard).
    #[arg(long = "verify-phone-limit", env = "MSGW_VERIFY_PHONE_LIMIT", default_value = "5", value_parser = parse::at_least(1u32))]
    pub phone_limit: u32,
    /// Country prefixes verifications may go to, comma-separated (e.g. `380,48,1`;
    /// a leading `+` is ignored). Default: any.
    #[arg(long = "verify-allowed-prefixes", env = "MSGW_VERIFY_ALLOWED_PREFIXES", default_value = "", value_parser = country_prefixes)]
    pub allowed_prefixes: ::std::vec::Vec<String>,
    /// The upstream is the built-in sandbox: answers show the code. Not an option: the
    /// application sets it from the upstream it runs against.
    #[arg(skip)]
    pub sandbox: bool,
    /// The fraud guard's settings.
    #[command(flatten)]
    pub guard: guard::Settings,
}

impl Default for Settings {
    fn default() -> Self {
        parse::defaults()
    }
}

/// Country prefixes, comma-separated: each 1 to 6 digits, not starting with 0, a
/// leading `+` dropped; blanks between commas are skipped.
fn country_prefixes(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let digits = p.strip_prefix('+').unwrap_or(p);
            if digits.is_empty()
                || digits.len() > 6
                || !digits.bytes().all(|b| b.is_ascii_digit())
                || digits.starts_with('0')
            {
                return Err(format!(
                    "{p:?} is not a country prefix (1 to 6 digits, not starting with 0)"
                ));
            }
            Ok(digits.to_owned())
        })
        .collect()
}
