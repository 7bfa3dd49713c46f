//! The send path: the queue, envelopes, gateway requests and the store writes around them.

use super::{
    ENVELOPE_BUCKETS, LATENCY_BUCKETS, counter, gauge, histogram, plain_histogram, register,
};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, Result,
};

/// The send path: the queue, envelopes, gateway requests and the store writes around them.
pub struct DispatchMetrics {
    /// Gateway requests by operation type and outcome.
    pub upstream_total: IntCounterVec,
    /// Gateway request latency by operation type and outcome.
    pub upstream_seconds: HistogramVec,
    /// Message parts the gateway billed, by channel.
    pub billed_parts_total: IntCounterVec,
    /// Operations per gateway request.
    pub envelope_operations: Histogram,
    /// Rows per store write of the send path, by stage (`claims`, `settlements`).
    pub store_write_rows: HistogramVec,
    /// Operations waiting for an envelope.
    pub queue_depth: IntGauge,
    /// Gateway requests in flight.
    pub requests_in_flight: IntGauge,
    /// Time calls waited in the queue before their envelope formed.
    pub queue_seconds: Histogram,
    /// Calls refused because the queue was full.
    pub queue_rejected: IntCounter,
    /// Operations waiting, by lane.
    pub lane_queue_depth: IntGaugeVec,
    /// Time calls waited before their envelope left, by lane.
    pub lane_wait_seconds: HistogramVec,
    /// Operations sent to the gateway, by lane.
    pub operations_sent: IntCounterVec,
    /// The contracted rate (`MSGW_UPSTREAM_RATE`; 0: none).
    pub rate_limit: IntGauge,
    /// Calls refused, by lane and reason (`queue_full`, `deadline`, `priority`).
    pub refused: IntCounterVec,
}

impl DispatchMetrics {
    /// The metrics, registered in `registry`.
    pub fn new(registry: &Registry) -> Result<Self> {
        Ok(Self {
            upstream_total: counter(
                registry,
                "msgw_upstream_requests_total",
                "Gateway requests by operation type (`batch` for several) and outcome.",
                &["operation", "outcome"],
            )?,
            upstream_seconds: histogram(
                registry,
                "msgw_upstream_duration_seconds",
                "Gateway request latency, by operation type and outcome.",
                &["operation", "outcome"],
            )?,
            billed_parts_total: counter(
                registry,
                "msgw_billed_parts_total",
                "Message parts billed by the gateway.",
                &["channel"],
            )?,
            envelope_operations: plain_histogram(
                registry,
                "msgw_upstream_envelope_operations",
                "Operations per gateway request.",
                ENVELOPE_BUCKETS,
            )?,
            store_write_rows: {
                let metric = HistogramVec::new(
                    HistogramOpts::new(
                        "msgw_store_write_rows",
                        "Rows per store write of the send path, by stage: claims (before requests leave) and settlements (their outcomes); its count is the store writes.",
                    )
                    .buckets(ENVELOPE_BUCKETS.to_vec()),
                    &["stage"],
                )
                ?;
                register(registry, metric)?
            },
            queue_depth: gauge(
                registry,
                "msgw_upstream_queue_operations",
                "Operations waiting for an envelope.",
            )?,
            requests_in_flight: gauge(
                registry,
                "msgw_upstream_requests_in_flight",
                "Gateway requests in flight.",
            )?,
            queue_seconds: plain_histogram(
                registry,
                "msgw_upstream_queue_seconds",
                "Time a call waited for its envelope.",
                LATENCY_BUCKETS,
            )?,
            queue_rejected: register(
                registry,
                IntCounter::new(
                    "msgw_upstream_queue_rejected_total",
                    "Calls refused with RESOURCE_EXHAUSTED because the queue was full.",
                )?,
            )?,
            lane_queue_depth: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "msgw_upstream_lane_queue_operations",
                        "Operations waiting for an envelope, by priority lane.",
                    ),
                    &["lane"],
                )?,
            )?,
            lane_wait_seconds: {
                let metric = HistogramVec::new(
                    HistogramOpts::new(
                        "msgw_upstream_lane_wait_seconds",
                        "Time a call waited before its envelope left, by priority lane.",
                    )
                    .buckets(LATENCY_BUCKETS.to_vec()),
                    &["lane"],
                )?;
                register(registry, metric)?
            },
            operations_sent: counter(
                registry,
                "msgw_upstream_operations_sent_total",
                "Operations sent to the gateway, by priority lane (against msgw_upstream_rate_limit).",
                &["lane"],
            )?,
            rate_limit: gauge(
                registry,
                "msgw_upstream_rate_limit",
                "The contracted rate toward the gateway in operations per second for the whole deployment (MSGW_UPSTREAM_RATE); 0: no limit.",
            )?,
            refused: counter(
                registry,
                "msgw_upstream_refused_total",
                "Calls refused by priority lane and reason: queue_full (RESOURCE_EXHAUSTED), deadline (DEADLINE_EXCEEDED before leaving), priority (PERMISSION_DENIED).",
                &["lane", "reason"],
            )?,
        })
    }
}
