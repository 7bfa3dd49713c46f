//! The fraud guard in front of every verification send (SMS pumping: a bot starts
//! verifications to ranges of premium numbers and never enters a code). It counts
//! codes (every send of one: a start's, a resend's, a voice call's), holds a range, or
//! a whole calling code, whose codes are sent and not entered, lets a key that entered
//! a code before pass such a hold, limits the codes per caller-supplied key of the end
//! user (IP, user) and per calling code, and in shadow mode decides and counts without
//! refusing. Its counters live in the store and are read and written in the
//! transaction that sends the code ([`crate::core::ports::store::GuardCheck`]), so replicas
//! share them.

pub(crate) mod countries;
pub(crate) mod holds;
pub(crate) mod settings;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};

pub use settings::{CountryLimits, KeyLimits, Mode, Rate, SafePrefixes, Settings};

use super::chrono;
use super::code::Codes;
use crate::base::metrics::Metrics;
use crate::core::domain::{Error, Phone};
use crate::core::ports::store::{
    BURST, GuardCheck, GuardFinding, KeyCheck, RangeHold, Store, Window,
};

/// Caller-supplied rate-limit keys of a start: key name → value (the end user behind
/// the call, which msgw cannot see).
pub type RateLimitKeys = BTreeMap<String, String>;

/// How often the gauge of ranges held is read from the store.
const HELD_GAUGE_EVERY: Duration = Duration::from_secs(15);

/// Keys a start may carry at most, and the longest value of one.
pub const MAX_KEYS: usize = 8;
/// See [`MAX_KEYS`].
pub const KEY_VALUE_MAX: usize = 256;

/// The fraud guard.
#[derive(Debug, Clone)]
pub struct Guard {
    settings: Arc<Settings>,
    codes: Codes,
    metrics: Arc<Metrics>,
}

/// Time until `oldest` leaves a window that began at `since` when it was counted (at
/// least a second): the window slides as far as `oldest` is past its start.
fn retry_after(oldest: DateTime<Utc>, since: DateTime<Utc>) -> Duration {
    (oldest - since)
        .to_std()
        .unwrap_or_default()
        .max(Duration::from_secs(1))
}

/// The calling code of a number, as metrics and budgets name it.
pub fn calling_code(phone: Phone) -> &'static str {
    countries::calling_code(&phone.get().to_string()).unwrap_or(countries::UNASSIGNED)
}

impl Guard {
    /// A guard set by `settings`, keeping keys as HMACs under `codes`' guard key.
    pub fn new(settings: Settings, codes: Codes, metrics: Arc<Metrics>) -> Self {
        for warning in settings.warnings() {
            tracing::warn!("fraud guard: {warning}");
        }
        Self {
            settings: Arc::new(settings),
            codes,
            metrics,
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The range of a number: its first digits.
    pub fn range_of(&self, phone: Phone) -> String {
        phone
            .get()
            .to_string()
            .chars()
            .take(self.settings.prefix_digits)
            .collect()
    }

    /// What the store checks before sending a code to `phone` (a start or a resend)
    /// for a call with `keys` (keys without a limit are not kept), and counts once it is
    /// sent; `None` when the guard is off. A safe prefix is not judged by conversion, but
    /// its codes count against key limits and budgets.
    pub fn check(
        &self,
        phone: Phone,
        keys: &RateLimitKeys,
        now: DateTime<Utc>,
    ) -> Option<GuardCheck> {
        let mut check = self.range_check(phone, now)?;
        let s = &self.settings;
        let window = |rate: Rate| Window {
            max: rate.max,
            since: now - chrono(rate.per),
        };
        check.keys = keys
            .iter()
            .filter_map(|(name, value)| {
                let rate = s.key_limits.of(name)?;
                Some(KeyCheck {
                    name: name.clone(),
                    mac: self.codes.rate_limit_key(name, value),
                    window: window(rate),
                })
            })
            .collect();
        check.key_limits = s
            .key_limits
            .0
            .iter()
            .map(|(name, rate)| (name.clone(), window(*rate)))
            .collect();
        check.country = s.country_limits.of(&check.calling_code).map(window);
        check.trusted_since =
            (!s.trusted_key_window.is_zero()).then(|| now - chrono(s.trusted_key_window));
        Some(check)
    }

    /// The conversion rule alone for `phone` (no keys, no budget); `None` when the guard
    /// is off.
    fn range_check(&self, phone: Phone, now: DateTime<Utc>) -> Option<GuardCheck> {
        let s = &self.settings;
        if s.mode == Mode::Off {
            return None;
        }
        let calling_code = calling_code(phone);
        // Only an assigned code is a prefix of digits a hold can name.
        let code_min_starts = (s.country_min_starts > 0 && calling_code != countries::UNASSIGNED)
            .then_some(s.country_min_starts);
        Some(GuardCheck {
            enforce: s.mode == Mode::On,
            range: self.range_of(phone),
            calling_code: calling_code.to_owned(),
            judged: !s.safe_prefixes.covers(&phone.get().to_string()),
            // A shared calling code's regions are judged like it.
            region: code_min_starts.and_then(|_| crate::core::numbers::shared_region(phone)),
            code_min_starts,
            since: now - chrono(s.window),
            decided_before: now - chrono(s.grace),
            min_starts: s.min_starts,
            min_conversion: s.min_conversion,
            hold_until: now + chrono(s.hold),
            country: None,
            keys: Vec::new(),
            key_limits: Vec::new(),
            trusted_since: None,
        })
    }

    /// Counts and logs what the store found against a code, and the error that
    /// refuses it when the guard is on (the first finding that refuses; shadow refuses
    /// nothing). A hold the code itself placed (it reached the cap), or that a trusted
    /// key passed, does not refuse it.
    pub fn judge(&self, findings: &[GuardFinding]) -> Result<(), Error> {
        let mode = self.settings.mode;
        for finding in findings {
            match finding {
                GuardFinding::Held { hold, new: true } | GuardFinding::Placed { hold } => {
                    self.held(hold, mode);
                }
                GuardFinding::Trusted { hold } => tracing::debug!(
                    range = %hold.range,
                    "fraud guard: a key that approved a code before passes the range's hold"
                ),
                _ => {}
            }
        }
        let findings: Vec<&GuardFinding> = findings
            .iter()
            .filter(|f| {
                !matches!(
                    f,
                    GuardFinding::Lifted { .. }
                        | GuardFinding::Placed { .. }
                        | GuardFinding::Trusted { .. }
                )
            })
            .collect();
        let counted = match mode {
            Mode::On => &findings[..findings.len().min(1)],
            Mode::Shadow | Mode::Off => &findings[..],
        };
        for finding in counted {
            self.count_refusal(reason(finding), mode);
        }
        match (mode, findings.first()) {
            (Mode::On, Some(finding)) => Err(refusal(finding)),
            _ => Ok(()),
        }
    }

    /// What the store judges after an approval of a verification of `phone`: a hold on
    /// its range ends at once if the range's figures no longer call for it (its real
    /// users entered their codes). `None` unless the guard is on and looks at `phone`.
    pub fn lift_check(&self, phone: Phone, now: DateTime<Utc>) -> Option<GuardCheck> {
        self.range_check(phone, now).filter(|c| c.enforce)
    }

    /// Logs what an approval's judgement of a held range found.
    pub fn lifted(&self, findings: &[GuardFinding]) {
        for finding in findings {
            if let GuardFinding::Lifted { hold } = finding {
                tracing::warn!(
                    range = %hold.range,
                    "fraud guard: range released early: its verifications are being approved"
                );
            }
        }
    }

    /// Counts a verification of `phone` started or approved, by calling code.
    pub fn count(&self, phone: Phone, event: &str) {
        self.metrics
            .verify
            .verifications_by_country_total
            .with_label_values(&[calling_code(phone), event])
            .inc();
    }

    /// Counts a code to `phone` sent, or refused by the guard, by calling code.
    pub fn count_code(&self, phone: Phone, outcome: CodeOutcome) {
        self.metrics
            .verify
            .verify_codes_total
            .with_label_values(&[calling_code(phone), outcome.as_str()])
            .inc();
    }

    fn count_refusal(&self, reason: &str, mode: Mode) {
        self.metrics
            .verify
            .guard_refusals_total
            .with_label_values(&[reason, mode.as_str()])
            .inc();
    }

    fn held(&self, hold: &RangeHold, mode: Mode) {
        self.metrics
            .verify
            .guard_holds_total
            .with_label_values(&[mode.as_str()])
            .inc();
        tracing::warn!(
            range = %hold.range,
            held_until = %hold.until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            unconverted = hold.unconverted,
            approved = hold.approved,
            mode = mode.as_str(),
            "fraud guard: range held: its codes are sent and not entered (SMS pumping?); `msgw guard release {}` releases it",
            hold.range
        );
    }

    /// Keeps the gauge of ranges held up to date until `stop`.
    pub async fn watch(self, store: Arc<dyn Store>, stop: tokio::sync::watch::Receiver<bool>) {
        if self.settings.mode == Mode::Off {
            return;
        }
        let mut every = crate::core::periodic::Periodic::new(HELD_GAUGE_EVERY, stop);
        while every.next().await {
            self.refresh_held(store.as_ref(), Utc::now()).await;
        }
    }

    /// Refreshes the gauge of ranges held from the store.
    pub async fn refresh_held(&self, store: &dyn Store, now: DateTime<Utc>) {
        let (mut on, mut shadow, mut after) = (0i64, 0i64, String::new());
        loop {
            let Ok(page) = store.held_ranges(now, &after, 1000).await else {
                return;
            };
            for hold in &page {
                *if hold.shadow { &mut shadow } else { &mut on } += 1;
            }
            match page.last() {
                Some(last) if page.len() == 1000 => after = last.range.clone(),
                _ => break,
            }
        }
        let gauge = &self.metrics.verify.guard_ranges_held;
        gauge.with_label_values(&["on"]).set(on);
        gauge.with_label_values(&["shadow"]).set(shadow);
    }
}

/// What became of a code, as `msgw_verify_codes_total` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeOutcome {
    /// The gateway accepted its send.
    Sent,
    /// The fraud guard refused it (nothing was sent).
    Refused,
}

impl CodeOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Refused => "refused",
        }
    }
}

/// The reason of a finding, as metrics name it.
fn reason(finding: &GuardFinding) -> &'static str {
    match finding {
        GuardFinding::Held { .. }
        | GuardFinding::Lifted { .. }
        | GuardFinding::Placed { .. }
        | GuardFinding::Trusted { .. } => "suspected_fraud",
        GuardFinding::KeyLimited { .. } => "key_rate_limited",
        GuardFinding::CountryLimited { .. } => "country_rate_limited",
    }
}

/// The error that refuses a start for `finding`.
fn refusal(finding: &GuardFinding) -> Error {
    match finding {
        GuardFinding::Held { hold, .. }
        | GuardFinding::Lifted { hold }
        | GuardFinding::Placed { hold }
        | GuardFinding::Trusted { hold } => Error::SuspectedFraud {
            range: hold.range.clone(),
            until: hold.until,
        },
        GuardFinding::KeyLimited {
            name,
            window,
            oldest,
        } => Error::KeyRateLimited {
            name: name.clone(),
            retry_after: retry_after(*oldest, window.since),
        },
        GuardFinding::CountryLimited {
            code,
            window,
            oldest,
        } => Error::CountryRateLimited {
            calling_code: code.clone(),
            retry_after: retry_after(*oldest, window.since),
        },
    }
}
