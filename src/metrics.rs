//! Prometheus metrics, served at `GET /metrics` on the HTTP listener.

use std::{sync::LazyLock, time::Duration};

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Latency buckets from 1 ms to 30 s, seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Every metric msgw exports.
pub struct Metrics {
    registry: Registry,
    /// gRPC calls by method and status code.
    pub rpc_total: IntCounterVec,
    /// gRPC call latency by method.
    pub rpc_seconds: HistogramVec,
    /// Gateway requests by operation type and outcome.
    pub upstream_total: IntCounterVec,
    /// Gateway request latency by operation type.
    pub upstream_seconds: HistogramVec,
    /// Message parts the gateway billed, by channel.
    pub billed_parts_total: IntCounterVec,
    /// Webhooks by endpoint and result.
    pub webhooks_total: IntCounterVec,
    /// Events appended to the log, by source (`webhook`, `poll`) and result (`stored`, `duplicate`).
    pub events_total: IntCounterVec,
    /// Open StreamStatusEvents streams.
    pub open_streams: IntGauge,
    /// The account balance, by currency.
    pub balance: GaugeVec,
    /// Unix time of the last successful balance refresh.
    pub balance_refreshed: Gauge,
}

/// The process-wide metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let metric = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    register(registry, metric)
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
    let metric =
        HistogramVec::new(opts, labels).unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    register(registry, metric)
}

fn register<M: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: M) -> M {
    // Names are fixed and distinct, so registration cannot fail.
    registry
        .register(Box::new(metric.clone()))
        .unwrap_or_else(|e| unreachable!("registering a metric: {e}"));
    metric
}

impl Metrics {
    fn new() -> Self {
        let registry = Registry::new();
        Self {
            rpc_total: counter(
                &registry,
                "msgw_rpc_requests_total",
                "gRPC calls by method and status code.",
                &["method", "code"],
            ),
            rpc_seconds: histogram(
                &registry,
                "msgw_rpc_duration_seconds",
                "gRPC call latency.",
                &["method"],
            ),
            upstream_total: counter(
                &registry,
                "msgw_upstream_requests_total",
                "Gateway requests by operation type (`batch` for several) and outcome.",
                &["operation", "outcome"],
            ),
            upstream_seconds: histogram(
                &registry,
                "msgw_upstream_duration_seconds",
                "Gateway request latency.",
                &["operation"],
            ),
            billed_parts_total: counter(
                &registry,
                "msgw_billed_parts_total",
                "Message parts billed by the gateway.",
                &["channel"],
            ),
            webhooks_total: counter(
                &registry,
                "msgw_webhooks_total",
                "Delivery webhooks received, by endpoint and result.",
                &["endpoint", "result"],
            ),
            events_total: counter(
                &registry,
                "msgw_events_total",
                "Status events appended to the log, by source and result.",
                &["source", "result"],
            ),
            open_streams: register(
                &registry,
                IntGauge::new(
                    "msgw_event_streams_open",
                    "Open StreamStatusEvents streams.",
                )
                .unwrap_or_else(|e| unreachable!("metric: {e}")),
            ),
            balance: register(
                &registry,
                GaugeVec::new(
                    Opts::new("msgw_balance", "Account balance at the gateway."),
                    &["currency"],
                )
                .unwrap_or_else(|e| unreachable!("metric: {e}")),
            ),
            balance_refreshed: register(
                &registry,
                Gauge::new(
                    "msgw_balance_refreshed_timestamp_seconds",
                    "When the balance was last read.",
                )
                .unwrap_or_else(|e| unreachable!("metric: {e}")),
            ),
            registry,
        }
    }

    /// Counts a finished gRPC call.
    pub fn rpc(&self, method: &str, code: tonic::Code, latency: Duration) {
        self.rpc_total
            .with_label_values(&[method, code_name(code)])
            .inc();
        self.rpc_seconds
            .with_label_values(&[method])
            .observe(latency.as_secs_f64());
    }

    /// The text exposition format of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The canonical upper-case name of a gRPC code, as Prometheus labels show it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// `GET /metrics`.
pub async fn handler() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        METRICS.render(),
    )
}

/// Reads the balance every `every` into the `msgw_balance` gauge until `stop`
/// turns true; a zero period turns it off.
pub async fn refresh_balance(
    dispatcher: crate::dispatch::Dispatcher,
    every: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    if every.is_zero() {
        return;
    }
    let mut ticks = crate::periodic::Periodic::new(every, stop);
    while ticks.next().await {
        match dispatcher
            .execute(crate::domain::Operation::GetBalance, None)
            .await
            .map(|executed| executed.output)
        {
            Ok(crate::domain::Output::Balance(b)) => {
                METRICS
                    .balance
                    .with_label_values(&[&b.currency])
                    .set(b.amount);
                METRICS
                    .balance_refreshed
                    .set(chrono::Utc::now().timestamp() as f64);
            }
            Ok(other) => tracing::warn!(?other, "balance refresh: unexpected answer"),
            Err(e) => tracing::warn!(error = %e, "balance refresh failed"),
        }
    }
}
