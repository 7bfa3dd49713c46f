//! How verifications behave: `msgw serve`'s `--verify-*` options, each declared and
//! bounded here (the secret is read by `config/`, never kept in settings).

use std::time::Duration;

use super::{guard, numbers};
use crate::base::parse;

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
    /// Number types (libphonenumber's) verification codes go to, comma-separated:
    /// mobile, fixed_line, fixed_line_or_mobile, toll_free, premium_rate, shared_cost,
    /// voip, personal_number, pager, uan, voicemail, unknown (invalid numbers); `:voice`
    /// after a type: only by a voice call; `any` alone: every type. Others get
    /// FAILED_PRECONDITION (NUMBER_TYPE_NOT_ALLOWED).
    #[arg(long = "verify-number-types", env = "MSGW_VERIFY_NUMBER_TYPES", default_value = numbers::DEFAULT_NUMBER_TYPES, value_parser = |s: &str| s.parse::<numbers::NumberTypes>())]
    pub number_types: numbers::NumberTypes,
    /// The upstream is the built-in sandbox: answers show the code. Not an option: the
    /// application sets it from the upstream it runs against.
    #[arg(skip)]
    pub sandbox: bool,
    /// The sandbox's magic numbers, whose type is not checked (they are made-up numbers
    /// only it answers). Not an option: set with `sandbox`.
    #[arg(skip)]
    pub sandbox_numbers: ::std::vec::Vec<u64>,
    /// The fraud guard's settings.
    #[command(flatten)]
    pub guard: guard::Settings,
}

impl Default for Settings {
    fn default() -> Self {
        parse::defaults()
    }
}

impl Settings {
    /// The number-type rule these settings make.
    pub fn number_rule(&self) -> numbers::NumberRule {
        numbers::NumberRule {
            types: self.number_types.clone(),
            safe_prefixes: self.guard.safe_prefixes.clone(),
            sandbox_numbers: self.sandbox_numbers.clone(),
        }
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
