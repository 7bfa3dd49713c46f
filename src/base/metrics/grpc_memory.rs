//! What the gRPC port's memory budget sees, beyond its total: held bytes by kind and by
//! caller, and streams refused at a caller's share.

use prometheus::{IntCounterVec, IntGaugeVec, Registry, Result};

use super::{counter, gauges};

/// Callers shown in `msgw_grpc_caller_held_bytes` at most (those holding the most).
pub const TOP_CALLERS: usize = 10;

/// The gRPC port's memory series by kind and caller.
pub struct GrpcMemoryMetrics {
    /// Held bytes by kind (`stream`, `request`, `answer`, `replay`, `waiter`).
    pub by_kind: IntGaugeVec,
    /// Held bytes of the callers holding the most (at most [`TOP_CALLERS`] labels).
    pub by_caller: IntGaugeVec,
    /// Streams refused because their caller held its share, by caller.
    pub refused_by_caller: IntCounterVec,
}

impl GrpcMemoryMetrics {
    pub(super) fn new(registry: &Registry) -> Result<Self> {
        Ok(Self {
            by_kind: gauges(
                registry,
                "msgw_grpc_held_bytes_by_kind",
                "What the gRPC port's streams hold now, bytes, by kind: stream (fixed cost and request headers), request (bodies received), answer (not yet read by the client), replay (events loaded for an event stream or a waiter and not yet encoded), waiter (wait_for_final subscriptions).",
                &["kind"],
            )?,
            by_caller: gauges(
                registry,
                "msgw_grpc_caller_held_bytes",
                "What the gRPC port's streams hold now for each of the callers holding the most (at most 10; \"anonymous\": no caller authentication or open paths), bytes.",
                &["caller"],
            )?,
            refused_by_caller: counter(
                registry,
                "msgw_grpc_caller_share_refused_total",
                "gRPC streams refused with RESOURCE_EXHAUSTED because their caller held its share of the memory budget (MSGW_GRPC_CALLER_SHARE, or memory_share in the callers file), by caller.",
                &["caller"],
            )?,
        })
    }
}
