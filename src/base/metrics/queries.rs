//! The metrics of queries: where status answers came from, and calls refused by a
//! caller's rates.

use prometheus::{IntCounterVec, Registry, Result};

/// The sources a status answer can come from, as core's `AnswerSource` names them (a
/// test there keeps the two lists equal): each counted from zero.
pub const STATUS_SOURCES: [&str; 4] = ["store", "lookup", "shared-lookup", "cache"];

/// Metrics of queries and callers' rates.
pub struct QueryMetrics {
    /// Status answers (GetMessageStatus, with or without `wait_for_final`) by source.
    pub status_answers: IntCounterVec,
    /// Calls refused by a caller's rate, by caller (the callers file bounds the names)
    /// and rate (`sends`, `queries`).
    pub rate_refusals: IntCounterVec,
}

impl QueryMetrics {
    /// The metrics, registered in `registry`, every status source at zero.
    pub fn new(registry: &Registry) -> Result<Self> {
        let status_answers = super::counter(
            registry,
            "msgw_status_answers_total",
            "GetMessageStatus answers by where they came from: store (a final status msgw holds, or its own: scheduled, cancelled), lookup (a gateway status request this call made), shared-lookup (one made for another call at the same time), cache (the last lookup's, within MSGW_STATUS_FRESHNESS).",
            &["source"],
        )?;
        for source in STATUS_SOURCES {
            status_answers.with_label_values(&[source]);
        }
        let rate_refusals = super::counter(
            registry,
            "msgw_rate_refusals_total",
            "Calls refused with RESOURCE_EXHAUSTED by a caller's rate in the callers file, by caller and rate: sends (sends_per_second) or queries (queries_per_second: every call that sends nothing, streams included).",
            &["caller", "rate"],
        )?;
        Ok(Self {
            status_answers,
            rate_refusals,
        })
    }
}
