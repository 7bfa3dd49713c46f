//! Verifications, their checks and the fraud guard.

use super::{counter, gauges};
use prometheus::{IntCounterVec, IntGaugeVec, Registry, Result};

/// Verifications, their checks and the fraud guard.
pub struct VerifyMetrics {
    /// Verifications by event (`started`, `approved`, `failed`, `expired`, `canceled`)
    /// and first channel.
    pub verifications_total: IntCounterVec,
    /// Verification checks by outcome (`approved`, `wrong`, `failed`, `not_found`).
    pub verification_checks_total: IntCounterVec,
    /// Starts the fraud guard refused (`mode` on) or would have (`shadow`), by reason.
    pub guard_refusals_total: IntCounterVec,
    /// Ranges the fraud guard held, by mode.
    pub guard_holds_total: IntCounterVec,
    /// Ranges held now, by mode (as the store has them, refreshed every few seconds).
    pub guard_ranges_held: IntGaugeVec,
    /// Verifications started and approved, by calling code: the conversion by country.
    pub verifications_by_country_total: IntCounterVec,
    /// Codes sent (a start's, a resend's, a voice call's) or refused by the fraud guard,
    /// by calling code.
    pub verify_codes_total: IntCounterVec,
}

impl VerifyMetrics {
    /// The metrics, registered in `registry`.
    pub fn new(registry: &Registry) -> Result<Self> {
        Ok(Self {
            verifications_total: counter(
                registry,
                "msgw_verifications_total",
                "Verifications by event (started, approved, failed, expired, canceled) and first channel.",
                &["event", "channel"],
            )?,
            verification_checks_total: counter(
                registry,
                "msgw_verification_checks_total",
                "Verification checks by outcome (approved, wrong, failed: the last wrong one, not_found).",
                &["outcome"],
            )?,
            guard_refusals_total: counter(
                registry,
                "msgw_verify_guard_refusals_total",
                "Verification starts and resends the fraud guard refused (mode on) or would have refused (mode shadow), by reason (suspected_fraud, key_rate_limited, country_rate_limited).",
                &["reason", "mode"],
            )?,
            guard_holds_total: counter(
                registry,
                "msgw_verify_guard_holds_total",
                "Number ranges the fraud guard held (mode shadow: held only in its figures).",
                &["mode"],
            )?,
            guard_ranges_held: gauges(
                registry,
                "msgw_verify_guard_ranges_held",
                "Number ranges held now, by mode, as the store has them (every replica reports the same figure).",
                &["mode"],
            )?,
            verifications_by_country_total: counter(
                registry,
                "msgw_verifications_by_country_total",
                "Verifications started and approved, by calling code (ITU E.164; unassigned): approved over started is the conversion by country.",
                &["calling_code", "event"],
            )?,
            verify_codes_total: counter(
                registry,
                "msgw_verify_codes_total",
                "One-time codes sent (every send: a start's, a resend's, a voice call's) or refused by the fraud guard, by calling code (ITU E.164; unassigned) and outcome (sent, refused).",
                &["calling_code", "outcome"],
            )?,
        })
    }
}
