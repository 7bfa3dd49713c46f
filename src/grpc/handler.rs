//! What every unary RPC does alike: parse, run through dispatch, answer, and
//! trace it. Handlers differ only in their operation.

use tokio::time::Instant;
use tonic::{Request, Response, Status, metadata::MetadataValue};
use tracing::{Instrument, field};

use super::convert::{FromOutput, IntoOperation};
use crate::dispatch::Dispatcher;
use crate::domain::{Error, Operation, Violations};
use crate::metrics::METRICS;
use crate::upstream;

/// Response metadata of an answer replayed from an earlier call with the same id.
pub const REPLAYED: &str = "msgw-replayed";

/// Parses a request into its operation, collecting every violation.
pub fn parse<R: IntoOperation>(request: R) -> Result<Operation, Error> {
    let mut violations = Violations::new();
    let op = request.into_operation(&mut violations.scope(""));
    violations.finish(op)
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
        let deadline = super::deadline::deadline(&request);
        let result = match parse(request.into_inner()) {
            Ok(op) => {
                record_operation(&op);
                dispatcher.execute(op, deadline).await.and_then(|executed| {
                    Ok((Resp::from_output(executed.output)?, executed.replayed))
                })
            }
            Err(e) => Err(e),
        };
        finish(method, started, result.as_ref().err());
        let (response, replayed) = result.map_err(Status::from)?;
        let mut response = Response::new(response);
        if replayed {
            response
                .metadata_mut()
                .insert(REPLAYED, MetadataValue::from_static("true"));
        }
        Ok(response)
    }
    .instrument(span)
    .await
}

/// Puts the operation's client id and gateway type on the current RPC span.
fn record_operation(op: &Operation) {
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
                Error::InvalidArgument(_)
                | Error::Rejected(_)
                | Error::IdConflict { .. }
                | Error::SendInProgress { .. } => {
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
        Error::IdConflict { .. } => "id_conflict",
        Error::SendInProgress { .. } => "send_in_progress",
        Error::ResultLost(_) => "result_lost",
        Error::Internal(_) => "internal",
    }
}
