//! The gRPC port and the HTTP listeners: connections, streams and what they hold.

use super::GrpcMemoryMetrics;
use super::{counter, gauge, gauges, register};
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry, Result};

/// The gRPC port and the HTTP listeners: connections, streams and what they hold.
pub struct PortMetrics {
    /// Connections to the gRPC port, open now.
    pub grpc_connections_open: IntGauge,
    /// Connections the gRPC port holds at most.
    pub grpc_connections_max: IntGauge,
    /// Connections to the gRPC port closed, by reason.
    pub grpc_connections_closed: IntCounterVec,
    /// Connections refused at the cap (every open one had a stream open).
    pub grpc_connections_refused: IntCounter,
    /// What the gRPC port's streams hold now (counted against its memory budget).
    pub grpc_held_bytes: IntGauge,
    /// The gRPC port's memory budget.
    pub grpc_memory_budget: IntGauge,
    /// Streams whose client leaves its flow-control window shut, now.
    pub grpc_streams_stalled: IntGauge,
    /// Streams refused, by reason.
    pub grpc_streams_refused: IntCounterVec,
    /// What the gRPC port holds by kind and by caller.
    pub grpc_memory: GrpcMemoryMetrics,
    /// Streams reset by msgw, by reason.
    pub grpc_streams_reset: IntCounterVec,
    /// Connections to the HTTP listeners (`webhook`, `admin`), open now.
    pub http_connections_open: IntGaugeVec,
    /// Connections each HTTP listener holds at most.
    pub http_connections_max: IntGaugeVec,
    /// Connections to the HTTP listeners closed, by listener and reason.
    pub http_connections_closed: IntCounterVec,
}

impl PortMetrics {
    /// The metrics, registered in `registry`.
    pub fn new(registry: &Registry) -> Result<Self> {
        Ok(Self {
            grpc_connections_open: gauge(
                registry,
                "msgw_grpc_connections_open",
                "Connections to the gRPC port open now (with or without a stream).",
            )?,
            grpc_connections_max: gauge(
                registry,
                "msgw_grpc_connections_max",
                "Connections the gRPC port holds at most (MSGW_GRPC_MAX_CONNECTIONS).",
            )?,
            grpc_connections_closed: counter(
                registry,
                "msgw_grpc_connections_closed_total",
                "Connections to the gRPC port closed, by reason: client (the client closed it or it failed), handshake_timeout (no TLS handshake and HTTP/2 preface in time), idle (no open stream for MSGW_GRPC_IDLE_TIMEOUT), evicted (the longest idle, closed to make room at the cap), memory_budget (it held the most when the port reached MSGW_GRPC_MEMORY_BUDGET), send_timeout (its socket took nothing for MSGW_GRPC_SEND_TIMEOUT), keepalive_timeout (no answer to a ping), shutdown.",
                &["reason"],
            )?,
            grpc_connections_refused: register(
                registry,
                IntCounter::new(
                    "msgw_grpc_connections_refused_total",
                    "Connections to the gRPC port refused at the cap because every open one had a stream open.",
                )?,
            )?,
            grpc_held_bytes: gauge(
                registry,
                "msgw_grpc_held_bytes",
                "What the gRPC port's open streams hold now, bytes: a fixed cost per stream, request headers and bodies, answers not yet sent (counted against MSGW_GRPC_MEMORY_BUDGET).",
            )?,
            grpc_memory_budget: gauge(
                registry,
                "msgw_grpc_memory_budget_bytes",
                "What the gRPC port's streams may hold in all (MSGW_GRPC_MEMORY_BUDGET).",
            )?,
            grpc_streams_stalled: gauge(
                registry,
                "msgw_grpc_streams_stalled",
                "gRPC streams whose client has left its flow-control window shut for a second or more, now.",
            )?,
            grpc_streams_refused: counter(
                registry,
                "msgw_grpc_streams_refused_total",
                "gRPC streams refused with RESOURCE_EXHAUSTED, by reason: memory_budget (the port held MSGW_GRPC_MEMORY_BUDGET), open_path_streams (the connection had its share of health and reflection streams open).",
                &["reason"],
            )?,
            grpc_memory: GrpcMemoryMetrics::new(registry)?,
            grpc_streams_reset: counter(
                registry,
                "msgw_grpc_streams_reset_total",
                "gRPC streams reset by msgw, by reason: send_timeout (the client read nothing of the answer for MSGW_GRPC_SEND_TIMEOUT).",
                &["reason"],
            )?,
            http_connections_open: gauges(
                registry,
                "msgw_http_connections_open",
                "Connections to the HTTP listeners open now, by listener (webhook, admin).",
                &["listener"],
            )?,
            http_connections_max: gauges(
                registry,
                "msgw_http_connections_max",
                "Connections each HTTP listener holds at most (webhook: MSGW_WEBHOOK_MAX_CONNECTIONS, or less under a low file limit; admin: 64).",
                &["listener"],
            )?,
            http_connections_closed: counter(
                registry,
                "msgw_http_connections_closed_total",
                "Connections to the HTTP listeners closed, by listener (webhook, admin) and reason: client (the client closed it or it failed), header_timeout (no complete request headers within the header timeout, on a new connection or between requests), evicted (waiting for a request longest, closed to make room at the cap), shutdown.",
                &["listener", "reason"],
            )?,
        })
    }
}
