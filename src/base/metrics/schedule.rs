//! Scheduled messages.

use super::{LATENCY_BUCKETS, counter, gauge, plain_histogram};
use prometheus::{Histogram, IntCounterVec, IntGauge, Registry, Result};

/// Scheduled messages.
pub struct ScheduleMetrics {
    /// Scheduled messages kept that have not left (as the store has them).
    pub scheduled_pending: IntGauge,
    /// Seconds between a scheduled message's `send_at` and its request leaving.
    pub scheduled_lateness: Histogram,
    /// Scheduled messages by outcome (`scheduled`, `left`, `canceled`, `failed`).
    pub scheduled_total: IntCounterVec,
}

impl ScheduleMetrics {
    /// The metrics, registered in `registry`.
    pub fn new(registry: &Registry) -> Result<Self> {
        Ok(Self {
            scheduled_pending: gauge(
                registry,
                "msgw_scheduled_pending",
                "Scheduled messages kept that have not left, as the store has them (every replica reports the same figure).",
            )?,
            scheduled_lateness: plain_histogram(
                registry,
                "msgw_scheduled_lateness_seconds",
                "Seconds between a scheduled message's send_at and its request leaving for the gateway.",
                LATENCY_BUCKETS,
            )?,
            scheduled_total: counter(
                registry,
                "msgw_scheduled_total",
                "Scheduled messages by outcome: scheduled, left (sent to the gateway), canceled, failed (refused as it left).",
                &["outcome"],
            )?,
        })
    }
}
