//! Prometheus metrics, served at `GET /metrics` on the admin listener (never the
//! webhook listener). Each
//! `Application` owns its registry, so two msgw instances in one process (tests,
//! benchmarks) never count into each other.

use std::{sync::Arc, time::Duration};

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, Result, TextEncoder,
};

mod codes;
mod grpc_memory;

pub use codes::code_name;

pub use grpc_memory::{GrpcMemoryMetrics, TOP_CALLERS};

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
    /// Gateway requests by operation type and outcome.
    pub upstream_total: IntCounterVec,
    /// Gateway request latency by operation type and outcome.
    pub upstream_seconds: HistogramVec,
    /// Message parts the gateway billed, by channel.
    pub billed_parts_total: IntCounterVec,
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
    /// The account balance, by currency.
    pub balance: GaugeVec,
    /// Unix time of the last successful balance refresh.
    pub balance_refreshed: Gauge,
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
    /// Scheduled messages kept that have not left (as the store has them).
    pub scheduled_pending: IntGauge,
    /// Seconds between a scheduled message's `send_at` and its request leaving.
    pub scheduled_lateness: Histogram,
    /// Scheduled messages by outcome (`scheduled`, `left`, `canceled`, `failed`).
    pub scheduled_total: IntCounterVec,
    /// Reloads of watched files (callers, TLS certificates), by file and outcome.
    pub config_reloads: IntCounterVec,
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
        let plain_histogram = |name: &str, help: &str, buckets: &[f64]| {
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            register(&registry, Histogram::with_opts(opts)?)
        };
        let metrics = Arc::new(Self {
            envelope_operations: plain_histogram(
                "msgw_upstream_envelope_operations",
                "Operations per gateway request.",
                ENVELOPE_BUCKETS,
            )?,
            queue_seconds: plain_histogram(
                "msgw_upstream_queue_seconds",
                "Time a call waited for its envelope.",
                LATENCY_BUCKETS,
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
                register(&registry, metric)?
            },
            queue_depth: gauge(
                &registry,
                "msgw_upstream_queue_operations",
                "Operations waiting for an envelope.",
            )?,
            requests_in_flight: gauge(
                &registry,
                "msgw_upstream_requests_in_flight",
                "Gateway requests in flight.",
            )?,
            scheduled_pending: gauge(
                &registry,
                "msgw_scheduled_pending",
                "Scheduled messages kept that have not left, as the store has them (every replica reports the same figure).",
            )?,
            scheduled_lateness: plain_histogram(
                "msgw_scheduled_lateness_seconds",
                "Seconds between a scheduled message's send_at and its request leaving for the gateway.",
                LATENCY_BUCKETS,
            )?,
            scheduled_total: counter(
                &registry,
                "msgw_scheduled_total",
                "Scheduled messages by outcome: scheduled, left (sent to the gateway), canceled, failed (refused as it left).",
                &["outcome"],
            )?,
            queue_rejected: register(
                &registry,
                IntCounter::new(
                    "msgw_upstream_queue_rejected_total",
                    "Calls refused with RESOURCE_EXHAUSTED because the queue was full.",
                )?,
            )?,
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
            upstream_total: counter(
                &registry,
                "msgw_upstream_requests_total",
                "Gateway requests by operation type (`batch` for several) and outcome.",
                &["operation", "outcome"],
            )?,
            upstream_seconds: histogram(
                &registry,
                "msgw_upstream_duration_seconds",
                "Gateway request latency, by operation type and outcome.",
                &["operation", "outcome"],
            )?,
            verifications_total: counter(
                &registry,
                "msgw_verifications_total",
                "Verifications by event (started, approved, failed, expired, canceled) and first channel.",
                &["event", "channel"],
            )?,
            verification_checks_total: counter(
                &registry,
                "msgw_verification_checks_total",
                "Verification checks by outcome (approved, wrong, failed: the last wrong one, not_found).",
                &["outcome"],
            )?,
            guard_refusals_total: counter(
                &registry,
                "msgw_verify_guard_refusals_total",
                "Verification starts and resends the fraud guard refused (mode on) or would have refused (mode shadow), by reason (suspected_fraud, key_rate_limited, country_rate_limited).",
                &["reason", "mode"],
            )?,
            guard_holds_total: counter(
                &registry,
                "msgw_verify_guard_holds_total",
                "Number ranges the fraud guard held (mode shadow: held only in its figures).",
                &["mode"],
            )?,
            guard_ranges_held: gauges(
                &registry,
                "msgw_verify_guard_ranges_held",
                "Number ranges held now, by mode, as the store has them (every replica reports the same figure).",
                &["mode"],
            )?,
            verifications_by_country_total: counter(
                &registry,
                "msgw_verifications_by_country_total",
                "Verifications started and approved, by calling code (ITU E.164; unassigned): approved over started is the conversion by country.",
                &["calling_code", "event"],
            )?,
            verify_codes_total: counter(
                &registry,
                "msgw_verify_codes_total",
                "One-time codes sent (every send: a start's, a resend's, a voice call's) or refused by the fraud guard, by calling code (ITU E.164; unassigned) and outcome (sent, refused).",
                &["calling_code", "outcome"],
            )?,
            billed_parts_total: counter(
                &registry,
                "msgw_billed_parts_total",
                "Message parts billed by the gateway.",
                &["channel"],
            )?,
            webhooks_total: counter(
                &registry,
                "msgw_webhooks_total",
                "Delivery webhooks received, by endpoint and result.",
                &["endpoint", "result"],
            )?,
            events_total: counter(
                &registry,
                "msgw_events_total",
                "Status events appended to the log, by source and result.",
                &["source", "result"],
            )?,
            opt_out_refusals_total: counter(
                &registry,
                "msgw_opt_out_refusals_total",
                "Sends (and verification codes) refused with RECIPIENT_OPTED_OUT before reaching the gateway, by operation.",
                &["operation"],
            )?,
            suppression_changes_total: counter(
                &registry,
                "msgw_suppression_changes_total",
                "Changes of the suppression list, by source (reply: a keyword reply; api: SuppressionService) and direction (opt_out, opt_in).",
                &["source", "direction"],
            )?,
            reply_times_unreadable_total: counter(
                &registry,
                "msgw_reply_times_unreadable_total",
                "Keyword replies in reports whose time (the reply's datetime, or the report's updated) could not be read, by direction (opt_out: applied as of arrival; opt_in: not applied), each time a report brings one.",
                &["direction"],
            )?,
            grpc_connections_open: gauge(
                &registry,
                "msgw_grpc_connections_open",
                "Connections to the gRPC port open now (with or without a stream).",
            )?,
            grpc_connections_max: gauge(
                &registry,
                "msgw_grpc_connections_max",
                "Connections the gRPC port holds at most (MSGW_GRPC_MAX_CONNECTIONS).",
            )?,
            grpc_connections_closed: counter(
                &registry,
                "msgw_grpc_connections_closed_total",
                "Connections to the gRPC port closed, by reason: client (the client closed it or it failed), handshake_timeout (no TLS handshake and HTTP/2 preface in time), idle (no open stream for MSGW_GRPC_IDLE_TIMEOUT), evicted (the longest idle, closed to make room at the cap), memory_budget (it held the most when the port reached MSGW_GRPC_MEMORY_BUDGET), send_timeout (its socket took nothing for MSGW_GRPC_SEND_TIMEOUT), keepalive_timeout (no answer to a ping), shutdown.",
                &["reason"],
            )?,
            grpc_connections_refused: register(
                &registry,
                IntCounter::new(
                    "msgw_grpc_connections_refused_total",
                    "Connections to the gRPC port refused at the cap because every open one had a stream open.",
                )?,
            )?,
            grpc_held_bytes: gauge(
                &registry,
                "msgw_grpc_held_bytes",
                "What the gRPC port's open streams hold now, bytes: a fixed cost per stream, request headers and bodies, answers not yet sent (counted against MSGW_GRPC_MEMORY_BUDGET).",
            )?,
            grpc_memory: GrpcMemoryMetrics::new(&registry)?,
            grpc_memory_budget: gauge(
                &registry,
                "msgw_grpc_memory_budget_bytes",
                "What the gRPC port's streams may hold in all (MSGW_GRPC_MEMORY_BUDGET).",
            )?,
            grpc_streams_stalled: gauge(
                &registry,
                "msgw_grpc_streams_stalled",
                "gRPC streams whose client has left its flow-control window shut for a second or more, now.",
            )?,
            grpc_streams_refused: counter(
                &registry,
                "msgw_grpc_streams_refused_total",
                "gRPC streams refused with RESOURCE_EXHAUSTED, by reason: memory_budget (the port held MSGW_GRPC_MEMORY_BUDGET), open_path_streams (the connection had its share of health and reflection streams open).",
                &["reason"],
            )?,
            grpc_streams_reset: counter(
                &registry,
                "msgw_grpc_streams_reset_total",
                "gRPC streams reset by msgw, by reason: send_timeout (the client read nothing of the answer for MSGW_GRPC_SEND_TIMEOUT).",
                &["reason"],
            )?,
            http_connections_open: gauges(
                &registry,
                "msgw_http_connections_open",
                "Connections to the HTTP listeners open now, by listener (webhook, admin).",
                &["listener"],
            )?,
            http_connections_max: gauges(
                &registry,
                "msgw_http_connections_max",
                "Connections each HTTP listener holds at most (webhook: MSGW_WEBHOOK_MAX_CONNECTIONS, or less under a low file limit; admin: 64).",
                &["listener"],
            )?,
            http_connections_closed: counter(
                &registry,
                "msgw_http_connections_closed_total",
                "Connections to the HTTP listeners closed, by listener (webhook, admin) and reason: client (the client closed it or it failed), header_timeout (no complete request headers within the header timeout, on a new connection or between requests), evicted (waiting for a request longest, closed to make room at the cap), shutdown.",
                &["listener", "reason"],
            )?,
            open_streams: gauge(
                &registry,
                "msgw_event_streams_open",
                "Open StreamStatusEvents streams.",
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
