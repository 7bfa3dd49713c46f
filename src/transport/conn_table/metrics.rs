//! Where a connection table counts: the gRPC port's series, or an HTTP listener's.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::Close;
use crate::base::metrics::Metrics;
use crate::core::held::HeldKind;

/// Where a port's table counts its connections.
#[derive(Clone)]
pub struct ConnMetrics {
    pub(super) open: IntGauge,
    pub(super) max: IntGauge,
    pub(super) closed: IntCounterVec,
    /// The `listener` label of an HTTP listener's series (the gRPC port's have none).
    pub(super) listener: Option<&'static str>,
    /// Connections refused at the cap; `None`: the port waits instead.
    pub(super) refused: Option<IntCounter>,
    /// The gRPC port's memory series.
    pub(super) memory: Option<MemoryMetrics>,
}

/// What the gRPC port's streams hold, may hold, and how many are stalled.
#[derive(Clone)]
pub(super) struct MemoryMetrics {
    pub(super) held: IntGauge,
    pub(super) budget: IntGauge,
    pub(super) stalled: IntGauge,
    /// Held bytes by kind, in [`HeldKind::ALL`]'s order.
    pub(super) by_kind: [IntGauge; HeldKind::ALL.len()],
    pub(super) by_caller: IntGaugeVec,
    pub(super) refused_by_caller: IntCounterVec,
    /// The callers `by_caller` has a series for.
    pub(super) shown_callers: Arc<Mutex<HashSet<Arc<str>>>>,
}

impl MemoryMetrics {
    /// The gauge of `kind`.
    pub(super) fn kind(&self, kind: HeldKind) -> &IntGauge {
        &self.by_kind[kind as usize]
    }
}

impl ConnMetrics {
    /// The gRPC port's series.
    pub fn grpc(metrics: &Metrics) -> Self {
        Self {
            open: metrics.ports.grpc_connections_open.clone(),
            max: metrics.ports.grpc_connections_max.clone(),
            closed: metrics.ports.grpc_connections_closed.clone(),
            listener: None,
            refused: Some(metrics.ports.grpc_connections_refused.clone()),
            memory: Some(MemoryMetrics {
                held: metrics.ports.grpc_held_bytes.clone(),
                budget: metrics.ports.grpc_memory_budget.clone(),
                stalled: metrics.ports.grpc_streams_stalled.clone(),
                by_kind: HeldKind::ALL.map(|kind| {
                    metrics
                        .ports
                        .grpc_memory
                        .by_kind
                        .with_label_values(&[kind.label()])
                }),
                by_caller: metrics.ports.grpc_memory.by_caller.clone(),
                refused_by_caller: metrics.ports.grpc_memory.refused_by_caller.clone(),
                shown_callers: Arc::default(),
            }),
        }
    }

    /// The series of the HTTP listener named `listener` (`webhook`, `admin`).
    pub fn http(metrics: &Metrics, listener: &'static str) -> Self {
        Self {
            open: metrics
                .ports
                .http_connections_open
                .with_label_values(&[listener]),
            max: metrics
                .ports
                .http_connections_max
                .with_label_values(&[listener]),
            closed: metrics.ports.http_connections_closed.clone(),
            listener: Some(listener),
            refused: None,
            memory: None,
        }
    }

    pub(super) fn closed(&self, reason: Close) {
        match self.listener {
            Some(listener) => self.closed.with_label_values(&[listener, reason.label()]),
            None => self.closed.with_label_values(&[reason.label()]),
        }
        .inc();
    }
}
