//! Logging and tracing: text or JSON log lines on stderr, and spans exported over
//! OTLP when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_subscriber::{EnvFilter, Layer, fmt, prelude::*};

use crate::process::cli::{LogArgs, LogFormat};

/// Keeps the trace exporter alive; dropping it flushes the spans not sent yet.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported over OTLP.
    pub fn exports_traces(&self) -> bool {
        self.tracer.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.tracer.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("msgw: flushing traces failed: {e}");
        }
    }
}

/// Whether text logs are coloured: only on a terminal, and not when `NO_COLOR` is set
/// to anything but the empty string (<https://no-color.org>). Logs written to a file or
/// a pipe stay plain.
fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// Installs the global subscriber: log lines filtered by `--log-level`, plus the
/// OTLP exporter when configured.
pub fn init(args: &LogArgs) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|e| anyhow::anyhow!("invalid --log-level {:?}: {e}", args.log_level))?;
    let logs = match args.log_format {
        LogFormat::Text => fmt::layer()
            .with_ansi(colour(
                std::io::IsTerminal::is_terminal(&std::io::stderr()),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let tracer = otlp_tracer()?;
    let traces = tracer
        .as_ref()
        .map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer("msgw")));
    tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))?;
    Ok(Telemetry { tracer })
}

/// An OTLP/HTTP trace exporter configured by the standard `OTEL_*` variables, or
/// `None` when `OTEL_EXPORTER_OTLP_ENDPOINT` is not set.
fn otlp_tracer() -> anyhow::Result<Option<SdkTracerProvider>> {
    let configured = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !configured("OTEL_EXPORTER_OTLP_ENDPOINT")
        && !configured("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build the OTLP exporter: {e}"))?;
    let mut resource = Resource::builder();
    if !configured("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name("msgw");
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_resource(resource.build())
            .with_batch_exporter(exporter)
            .build(),
    ))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::colour;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(
            colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None), "a file or a pipe gets plain lines");
        assert!(!colour(false, Some(OsStr::new("1"))));
    }
}
