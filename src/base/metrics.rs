//! Prometheus metrics, served at `GET /metrics` on the admin listener (never the
//! webhook listener). Each
//! `Application` owns its registry, so two msgw instances in one process (tests,
//! benchmarks) never count into each other.

use std::{sync::Arc, time::Duration};

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, Result, TextEncoder,
};

mod codes;
mod dispatch;
mod events;
mod grpc_memory;
mod ports;
mod schedule;
mod verify;

pub use codes::code_name;

pub use dispatch::DispatchMetrics;
pub use events::EventMetrics;
pub use grpc_memory::{GrpcMemoryMetrics, TOP_CALLERS};
pub use ports::PortMetrics;
pub use schedule::ScheduleMetrics;
pub use verify::VerifyMetrics;

/// Latency buckets from 1 ms to 30 s, seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Envelope size buckets, operations.
const ENVELOPE_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

mod queries;

pub use queries::{QueryMetrics, STATUS_SOURCES};

/// Every metric msgw exports.
pub struct Metrics {
    registry: Registry,
    /// Status answers by source; refusals by callers' rates.
    pub queries: QueryMetrics,
    /// gRPC calls by method and status code.
    pub rpc_total: IntCounterVec,
    /// gRPC call latency by method and code.
    pub rpc_seconds: HistogramVec,
    /// Operations (lone or Batch items) by kind and code.
    pub operations_total: IntCounterVec,
    /// The account balance, by currency.
    pub balance: GaugeVec,
    /// Unix time of the last successful balance refresh.
    pub balance_refreshed: Gauge,
    /// Reloads of watched files (callers, TLS certificates), by file and outcome.
    pub config_reloads: IntCounterVec,
    /// The send path: the queue, envelopes, gateway requests and the store writes around them.
    pub dispatch: DispatchMetrics,
    /// Verifications, their checks and the fraud guard.
    pub verify: VerifyMetrics,
    /// Webhooks, the event log, its streams, and the suppression list the replies change.
    pub events: EventMetrics,
    /// Scheduled messages.
    pub schedule: ScheduleMetrics,
    /// The gRPC port and the HTTP listeners: connections, streams and what they hold.
    pub ports: PortMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics(..)")
    }
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec> {
    let metric = IntCounterVec::new(Opts::new(name, help), labels)?;
    register(registry, metric)
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<HistogramVec> {
    let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
    let metric = HistogramVec::new(opts, labels)?;
    register(registry, metric)
}

fn gauges(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec> {
    let metric = IntGaugeVec::new(Opts::new(name, help), labels)?;
    register(registry, metric)
}

fn gauge(registry: &Registry, name: &str, help: &str) -> Result<IntGauge> {
    let metric = IntGauge::new(name, help)?;
    register(registry, metric)
}

fn plain_histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
) -> Result<Histogram> {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    register(registry, Histogram::with_opts(opts)?)
}

fn register<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: M,
) -> Result<M> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

impl Metrics {
    /// A fresh registry with every metric at zero. Fails only on a metric msgw defines wrongly (a bad or repeated name), which
    /// the tests would catch.
    pub fn new() -> Result<Arc<Self>> {
        let registry = Registry::new();
        let metrics = Arc::new(Self {
            rpc_total: counter(
                &registry,
                "msgw_rpc_requests_total",
                "gRPC calls by method, caller and status code (caller \"unknown\": refused before authentication, \"anonymous\": no caller authentication).",
                &["method", "caller", "code"],
            )?,
            rpc_seconds: histogram(
                &registry,
                "msgw_rpc_duration_seconds",
                "gRPC call latency, by method, caller and status code.",
                &["method", "caller", "code"],
            )?,
            config_reloads: counter(
                &registry,
                "msgw_config_reloads_total",
                "Reloads of files msgw watches (file: callers, grpc_tls) after they changed, by outcome: loaded, or failed (what was loaded before stays).",
                &["file", "outcome"],
            )?,
            operations_total: counter(
                &registry,
                "msgw_operations_total",
                "Operations by kind (the RPC that asks for it alone), status code and ErrorInfo reason: each item of a Batch counts on its own.",
                &["operation", "code", "reason"],
            )?,
            balance: register(
                &registry,
                GaugeVec::new(
                    Opts::new("msgw_balance", "Account balance at the gateway."),
                    &["currency"],
                )?,
            )?,
            balance_refreshed: register(
                &registry,
                Gauge::new(
                    "msgw_balance_refreshed_timestamp_seconds",
                    "When the balance was last read.",
                )?,
            )?,
            dispatch: DispatchMetrics::new(&registry)?,
            verify: VerifyMetrics::new(&registry)?,
            events: EventMetrics::new(&registry)?,
            schedule: ScheduleMetrics::new(&registry)?,
            ports: PortMetrics::new(&registry)?,
            queries: QueryMetrics::new(&registry)?,
            registry,
        });
        let build_info = GaugeVec::new(
            Opts::new(
                "msgw_build_info",
                "Always 1; the labels say which msgw build runs.",
            ),
            &["version", "revision"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), env!("MSGW_REVISION")])
            .set(1.0);
        register(&metrics.registry, build_info)?;
        // CPU, memory, open files, start time of this process (Linux).
        #[cfg(target_os = "linux")]
        if let Err(e) = metrics.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        )) {
            tracing::warn!(error = %e, "no process metrics");
        }
        Ok(metrics)
    }

    /// Counts a finished gRPC call of `caller`.
    pub fn rpc(&self, method: &str, caller: &str, code: tonic::Code, latency: Duration) {
        self.rpc_total
            .with_label_values(&[method, caller, code_name(code)])
            .inc();
        self.rpc_seconds
            .with_label_values(&[method, caller, code_name(code)])
            .observe(latency.as_secs_f64());
    }

    /// Counts the outcome of one operation (a lone RPC's, or a Batch item's): its
    /// status code and `ErrorInfo` reason ("" for none).
    pub fn operation(&self, operation: &str, code: tonic::Code, reason: &str) {
        self.operations_total
            .with_label_values(&[operation, code_name(code), reason])
            .inc();
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

/// `GET /metrics`.
pub async fn handler(
    axum::extract::State(metrics): axum::extract::State<Arc<Metrics>>,
) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.render(),
    )
}
