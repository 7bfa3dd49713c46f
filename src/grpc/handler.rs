//! What every unary RPC does alike: parse, run through dispatch, answer, and
//! trace it. Handlers differ only in their operation.

use std::time::Duration;

use tokio::time::Instant;
use tonic::{Request, Response, Status};
use tracing::{Instrument, field};

use super::convert::{FromOutput, IntoOperation};
use crate::dispatch::Dispatcher;
use crate::domain::{Error, Operation, Violations};
use crate::metrics::METRICS;
use crate::upstream;

/// Room left between msgw's own deadline and the caller's, so msgw answers
/// DEADLINE_EXCEEDED itself instead of being cut off without a reason.
const DEADLINE_MARGIN: Duration = Duration::from_millis(20);

/// Parses a request into its operation, collecting every violation.
pub fn parse<R: IntoOperation>(request: R) -> Result<Operation, Error> {
    let mut violations = Violations::new();
    let op = request.into_operation(&mut violations.scope(""));
    violations.finish(op)
}

/// The caller's deadline (`grpc-timeout`), slightly earlier so msgw can answer in time.
pub fn deadline<T>(request: &Request<T>) -> Option<Instant> {
    let value = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let timeout = parse_grpc_timeout(value)?;
    let margin = DEADLINE_MARGIN.min(timeout / 10);
    Some(Instant::now() + timeout.saturating_sub(margin))
}

/// `grpc-timeout` is at most 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Runs one unary RPC of `method`.
pub async fn unary<Req, Resp>(
    dispatcher: &Dispatcher,
    method: &'static str,
    request: Request<Req>,
) -> Result<Response<Resp>, Status>
where
    Req: IntoOperation,
    Resp: FromOutput,
{
    let span = tracing::info_span!(
        "rpc",
        method,
        client_id = field::Empty,
        upstream_type = field::Empty,
        latency_ms = field::Empty,
        outcome = field::Empty,
    );
    async move {
        let started = Instant::now();
        let deadline = deadline(&request);
        let result = match parse(request.into_inner()) {
            Ok(op) => {
                record_operation(&op);
                dispatcher
                    .execute(op, deadline)
                    .await
                    .and_then(Resp::from_output)
            }
            Err(e) => Err(e),
        };
        finish(method, started, result.as_ref().err());
        result.map(Response::new).map_err(Status::from)
    }
    .instrument(span)
    .await
}

/// Puts the operation's client id and gateway type on the current RPC span.
pub fn record_operation(op: &Operation) {
    let span = tracing::Span::current();
    if let Some(id) = op.client_id() {
        span.record("client_id", id.get());
    }
    span.record("upstream_type", upstream::type_name(op));
}

/// Records latency and outcome on the current RPC span and logs the end of the call.
pub fn finish(method: &str, started: Instant, error: Option<&Error>) {
    let span = tracing::Span::current();
    let latency = started.elapsed();
    span.record("latency_ms", latency.as_secs_f64() * 1000.0);
    METRICS.rpc(
        method,
        error.map_or(tonic::Code::Ok, super::status::code),
        latency,
    );
    match error {
        None => {
            span.record("outcome", "ok");
            tracing::info!("rpc done");
        }
        Some(e) => {
            let outcome = outcome(e);
            span.record("outcome", outcome);
            match e {
                Error::InvalidArgument(_) | Error::Rejected(_) => {
                    tracing::info!(error = %e, "rpc refused")
                }
                _ => tracing::warn!(error = %e, "rpc failed"),
            }
        }
    }
}

fn outcome(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument(_) => "invalid_argument",
        Error::AccessDenied => "access_denied",
        Error::Rejected(_) => "rejected",
        Error::Unavailable {
            outcome_unknown: true,
            ..
        }
        | Error::DeadlineExceeded {
            outcome_unknown: true,
        } => "outcome_unknown",
        Error::Unavailable { .. } => "unavailable",
        Error::DeadlineExceeded { .. } => "deadline_exceeded",
        Error::CursorOutOfRange { .. } => "out_of_range",
        Error::Internal(_) => "internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            parse_grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "S", "5", "5x", "123456789S", "-5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }
}
