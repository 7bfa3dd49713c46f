//! Webhooks, the event log, its streams and the suppression list the replies change.

use super::{counter, gauge};
use prometheus::{IntCounterVec, IntGauge, Registry, Result};

/// Webhooks, the event log, its streams and the suppression list the replies change.
pub struct EventMetrics {
    /// Webhooks by endpoint and result.
    pub webhooks_total: IntCounterVec,
    /// Events appended to the log, by source (`webhook`, `poll`) and result (`stored`, `duplicate`).
    pub events_total: IntCounterVec,
    /// Sends refused because their number opted out, by operation.
    pub opt_out_refusals_total: IntCounterVec,
    /// Changes of the suppression list, by source (`reply`, `api`) and direction
    /// (`opt_out`, `opt_in`).
    pub suppression_changes_total: IntCounterVec,
    /// Keyword replies whose time was given and could not be read, by direction.
    pub reply_times_unreadable_total: IntCounterVec,
    /// Open StreamStatusEvents streams.
    pub open_streams: IntGauge,
}

impl EventMetrics {
    /// The metrics, registered in `registry`.
    pub fn new(registry: &Registry) -> Result<Self> {
        Ok(Self {
            webhooks_total: counter(
                registry,
                "msgw_webhooks_total",
                "Delivery webhooks received, by endpoint and result.",
                &["endpoint", "result"],
            )?,
            events_total: counter(
                registry,
                "msgw_events_total",
                "Status events appended to the log, by source and result.",
                &["source", "result"],
            )?,
            opt_out_refusals_total: counter(
                registry,
                "msgw_opt_out_refusals_total",
                "Sends (and verification codes) refused with RECIPIENT_OPTED_OUT before reaching the gateway, by operation.",
                &["operation"],
            )?,
            suppression_changes_total: counter(
                registry,
                "msgw_suppression_changes_total",
                "Changes of the suppression list, by source (reply: a keyword reply; api: SuppressionService) and direction (opt_out, opt_in).",
                &["source", "direction"],
            )?,
            reply_times_unreadable_total: counter(
                registry,
                "msgw_reply_times_unreadable_total",
                "Keyword replies in reports whose time (the reply's datetime, or the report's updated) could not be read, by direction (opt_out: applied as of arrival; opt_in: not applied), each time a report brings one.",
                &["direction"],
            )?,
            open_streams: gauge(
                registry,
                "msgw_event_streams_open",
                "Open StreamStatusEvents streams.",
            )?,
        })
    }
}
