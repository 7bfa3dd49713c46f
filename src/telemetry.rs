//! Logging and tracing setup.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::{LogArgs, LogFormat};

/// Installs the global subscriber: text or JSON lines on stderr, filtered by `--log-level`.
pub fn init(args: &LogArgs) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|e| anyhow::anyhow!("invalid --log-level {:?}: {e}", args.log_level))?;
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match args.log_format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))
}
