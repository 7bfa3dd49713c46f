//! The one pipeline of every RPC of every service ([`pipeline`]): the caller the
//! authentication layer found; admitted by what the RPC asks (permission, rates) before
//! its request is read; the request parsed; the work run; the answer or error mapped,
//! traced, timed and counted. RPCs that ask the gateway ([`unary`], [`unary_with`])
//! differ only in their operations and in how their results become the response (one
//! operation, or a `Batch` of them).

use std::sync::Arc;

use futures_util::FutureExt;
use tokio::time::Instant;
use tonic::{Request, Response, Status, metadata::MetadataValue};
use tracing::{Instrument, field};

use super::convert::{FromOutput, IntoOperation, counted_parts};
use crate::base::metrics::Metrics;
use crate::core::dispatch::{Dispatcher, Executed, Lanes};
use crate::core::domain::{AnswerSource, Error, Operation, Permission, SmsEstimate, Violations};
use crate::core::held::CallAccount;
use crate::transport::auth::{self, Asks, Caller};

/// Response metadata of an answer replayed from an earlier call with the same id.
pub const REPLAYED: &str = "msgw-replayed";

/// Response metadata saying where a query's answer came from: `store`, `lookup`,
/// `shared-lookup` or `cache` ([`AnswerSource`]; unary query RPCs only: a Batch's
/// status items say it in their results' `answer_source`).
pub const ANSWER_SOURCE: &str = "msgw-answer-source";

/// What an answer's response metadata says of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Provenance {
    /// Replayed from an earlier call with the same id (`msgw-replayed: true`).
    pub replayed: bool,
    /// Where a query's answer came from (`msgw-answer-source`).
    pub source: Option<AnswerSource>,
}

impl From<&Executed> for Provenance {
    fn from(executed: &Executed) -> Self {
        Self {
            replayed: executed.replayed,
            source: executed.source,
        }
    }
}

/// A request msgw answers by running operations.
pub trait Rpc<Resp>: Sized {
    /// Whether its operations are the items of a `Batch` (errors name them).
    const BATCH: bool = false;

    /// What the response needs besides the results (e.g. each Batch item's kind).
    type Shape;

    /// What it asks of the caller's permissions and rates, read before it is parsed.
    fn asks(&self) -> Asks;

    /// Parses the request into its operations (at most `batch_max`), collecting every
    /// violation.
    fn plan(self, batch_max: usize) -> Result<(Vec<Operation>, Self::Shape), Error>;

    /// The response from the operations' results, and what its metadata says of it.
    fn respond(
        shape: Self::Shape,
        results: Vec<Result<Executed, Error>>,
    ) -> Result<(Resp, Provenance), Error>;
}

/// A request of one operation: its result is the RPC's.
impl<Req: IntoOperation, Resp: FromOutput> Rpc<Resp> for Req {
    /// The parts msgw counted for an SMS text.
    type Shape = Option<SmsEstimate>;

    fn asks(&self) -> Asks {
        Asks::Operation(Req::KIND, self.asked_priority())
    }

    fn plan(self, _batch_max: usize) -> Result<(Vec<Operation>, Self::Shape), Error> {
        let op = parse(self)?;
        let counted = counted_parts(&op);
        Ok((vec![op], counted))
    }

    fn respond(
        counted: Self::Shape,
        results: Vec<Result<Executed, Error>>,
    ) -> Result<(Resp, Provenance), Error> {
        let executed = results
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(Error::Internal("no result for the operation".into())))?;
        let provenance = Provenance::from(&executed);
        let response = Resp::from_output(executed.output)?.counted(counted);
        Ok((response, provenance))
    }
}

/// Parses a request into its operation, collecting every violation.
fn parse<R: IntoOperation>(request: R) -> Result<Operation, Error> {
    let mut violations = Violations::new();
    let op = request.into_operation(&mut violations.scope(""));
    violations.finish(op)
}

/// Runs one unary RPC: its operations go to the gateway through `dispatcher`.
pub async fn unary<Req, Resp>(
    dispatcher: &Dispatcher,
    request: Request<Req>,
) -> Result<Response<Resp>, Status>
where
    Req: Rpc<Resp>,
{
    unary_with(
        dispatcher,
        request,
        |ops, lanes, deadline, caller| async move {
            dispatcher
                .execute_all(ops, lanes, deadline, caller.name.as_ref())
                .await
        },
    )
    .await
}

/// Runs one unary RPC whose operations `execute` carries out (the gateway's answer by
/// default, see [`unary`]) through the [`pipeline`]: its operations are then checked
/// against the own-messages rule, counted and traced alike for every RPC.
pub async fn unary_with<Req, Resp, Run>(
    dispatcher: &Dispatcher,
    request: Request<Req>,
    execute: impl FnOnce(Vec<Operation>, Lanes, Option<Instant>, Arc<Caller>) -> Run,
) -> Result<Response<Resp>, Status>
where
    Req: Rpc<Resp>,
    Run: Future<Output = Result<Vec<Result<Executed, Error>>, Error>>,
{
    let batch_max = dispatcher.batch_max();
    pipeline(
        dispatcher.metrics(),
        request,
        Req::asks,
        |request| request.plan(batch_max),
        |(ops, shape), call| async move {
            record_operations(&ops);
            own_messages_only(dispatcher, &call.caller, &ops, Req::BATCH).await?;
            let names: Vec<&'static str> = ops.iter().map(Operation::rpc_name).collect();
            let results = execute(ops, call.lanes, call.deadline, call.caller).await;
            count_operations(dispatcher.metrics(), &names, &results);
            Req::respond(shape, results?)
        },
    )
    .await
}

/// What the pipeline knows of a call besides its request.
pub struct Call {
    /// The caller the authentication layer found.
    pub caller: Arc<Caller>,
    /// The caller's deadline, if it set one.
    pub deadline: Option<Instant>,
    /// The account of the call's stream on the gRPC port (see [`account_of`]).
    pub account: CallAccount,
    /// The lane of each of its operations, as admitted.
    pub lanes: Lanes,
}

/// Runs one RPC of any service, every one in the same order: the caller (authenticated
/// by the layer under tonic); admitted by what `asks` reads of the request (permission,
/// then the send or query rate) before anything else of it is looked at, so a caller
/// without the permission learns nothing of its request's validity; the request parsed
/// by `parse`; `run` answers it; the answer or error mapped to gRPC, traced, timed and
/// counted ([`observed`]).
pub async fn pipeline<Req, Parsed, Resp, Fut>(
    metrics: &Metrics,
    request: Request<Req>,
    asks: impl FnOnce(&Req) -> Asks,
    parse: impl FnOnce(Req) -> Result<Parsed, Error>,
    run: impl FnOnce(Parsed, Call) -> Fut,
) -> Result<Response<Resp>, Status>
where
    Fut: Future<Output = Result<(Resp, Provenance), Error>>,
{
    let caller = auth::caller_of(&request)?;
    let method = auth::method_of(&request);
    observed(metrics, method, &caller, async {
        let lanes = auth::admit(&caller, method, &asks(request.get_ref()), metrics)?;
        let call = Call {
            caller: caller.clone(),
            deadline: super::deadline::deadline(&request),
            account: account_of(&request),
            lanes,
        };
        let parsed = parse(request.into_inner())?;
        run(parsed, call).await
    })
    .await
}

/// A [`pipeline`] for an RPC that needs `permission`, sends nothing (one query of the
/// caller's rate), reads its request field by field with `check` and answers with what
/// `work` gives the caller: the suppression list's and the fraud guard's RPCs.
pub async fn checked_query<Req, Parsed, Resp, Fut>(
    metrics: &Metrics,
    request: Request<Req>,
    permission: Permission,
    check: impl FnOnce(Req, &mut crate::core::domain::Scope<'_>) -> Option<Parsed>,
    work: impl FnOnce(Arc<Caller>, Parsed) -> Fut,
) -> Result<Response<Resp>, Status>
where
    Fut: Future<Output = Result<Resp, Error>>,
{
    pipeline(
        metrics,
        request,
        |_| Asks::Rpc {
            permission,
            sends: 0,
        },
        checked(check),
        |parsed, call| async move {
            let response = work(call.caller, parsed).await?;
            Ok((response, Provenance::default()))
        },
    )
    .await
}

/// Parses a request of fields checked into `Parsed` by `check`, collecting every
/// violation (the `parse` of a [`pipeline`] whose request is no gateway operation).
pub fn checked<Req, Parsed>(
    check: impl FnOnce(Req, &mut crate::core::domain::Scope<'_>) -> Option<Parsed>,
) -> impl FnOnce(Req) -> Result<Parsed, Error> {
    move |request| {
        let mut violations = Violations::new();
        let parsed = check(request, &mut violations.scope(""));
        violations.finish(parsed)
    }
}

/// Refuses the status of a message another caller sent to a caller that sees only
/// its own messages (`events = "own"`): a status carries the recipient's replies. The
/// answer is the same whether the id exists or not, so it reveals nothing.
async fn own_messages_only(
    dispatcher: &Dispatcher,
    caller: &Caller,
    ops: &[Operation],
    batch: bool,
) -> Result<(), Error> {
    if caller.events != auth::EventScope::Own {
        return Ok(());
    }
    for (i, op) in ops.iter().enumerate() {
        let Operation::GetMessageStatus(id) = op else {
            continue;
        };
        if dispatcher.sender_of(*id).await?.flatten().as_ref() != caller.name.as_ref() {
            let item = if batch {
                format!("items[{i}]: ")
            } else {
                String::new()
            };
            return Err(Error::PermissionDenied(format!(
                "{item}caller {} sees only the statuses of messages it sent through msgw, and id {id} is not one of them",
                caller.label()
            )));
        }
    }
    Ok(())
}

/// Runs the work of one RPC of `method` for `caller` (the response, and what its
/// metadata says of it): traced, timed and counted like every other RPC.
///
/// A plain function wrapping `work` in place: every RPC's future is moved whole into
/// a box, and an `async fn` here would hold `work` three times (its argument, the block
/// around it, the span's wrapper).
fn observed<Resp>(
    metrics: &Metrics,
    method: &'static str,
    caller: &Caller,
    work: impl Future<Output = Result<(Resp, Provenance), Error>>,
) -> impl Future<Output = Result<Response<Resp>, Status>> {
    let span = tracing::info_span!(
        "rpc",
        method,
        caller = caller.label(),
        client_id = field::Empty,
        operations = field::Empty,
        latency_ms = field::Empty,
        outcome = field::Empty,
    );
    let started = Instant::now();
    work.map(move |result| {
        finish(metrics, method, caller, started, result.as_ref().err());
        let (response, provenance) = result.map_err(Status::from)?;
        let mut response = Response::new(response);
        if provenance.replayed {
            response
                .metadata_mut()
                .insert(REPLAYED, MetadataValue::from_static("true"));
        }
        if let Some(source) = provenance.source {
            response
                .metadata_mut()
                .insert(ANSWER_SOURCE, MetadataValue::from_static(source.as_str()));
        }
        Ok(response)
    })
    .instrument(span)
}

/// Counts a call `caller` made that one of its rates refused
/// (`msgw_rate_refusals_total`); any other error is not counted here.
fn count_refusal(metrics: &Metrics, caller: &Caller, error: &Error) {
    let rate = match error {
        Error::RateLimited { .. } => "sends",
        Error::QueryRateLimited { .. } => "queries",
        _ => return,
    };
    metrics
        .queries
        .rate_refusals
        .with_label_values(&[caller.label(), rate])
        .inc();
}

/// Counts each operation's outcome: a Batch's items one by one, so one rejected item
/// of four shows as one rejection and three successes.
fn count_operations(
    metrics: &Metrics,
    names: &[&'static str],
    results: &Result<Vec<Result<Executed, Error>>, Error>,
) {
    for (i, name) in names.iter().enumerate() {
        let error = match results {
            Ok(each) => each.get(i).and_then(|r| r.as_ref().err()),
            Err(e) => Some(e),
        };
        count_operation(metrics, name, error);
    }
}

/// Counts one operation's outcome (`None`: it succeeded).
fn count_operation(metrics: &Metrics, name: &str, error: Option<&Error>) {
    match error {
        None => metrics.operation(name, tonic::Code::Ok, ""),
        Some(e) => metrics.operation(name, super::status::code(e), super::status::reason(e)),
    }
}

/// Puts the call's size, and the client id of a lone operation, on the current RPC span.
fn record_operations(ops: &[Operation]) {
    let span = tracing::Span::current();
    span.record("operations", ops.len());
    if let [op] = ops
        && let Some(id) = op.client_id()
    {
        span.record("client_id", id.get());
    }
}

/// Records latency and outcome on the current RPC span and logs the end of the call.
fn finish(
    metrics: &Metrics,
    method: &str,
    caller: &Caller,
    started: Instant,
    error: Option<&Error>,
) {
    let span = tracing::Span::current();
    let latency = started.elapsed();
    span.record("latency_ms", latency.as_secs_f64() * 1000.0);
    metrics.rpc(
        method,
        caller.label(),
        error.map_or(tonic::Code::Ok, super::status::code),
        latency,
    );
    match error {
        None => {
            span.record("outcome", "ok");
            tracing::info!("rpc done");
        }
        Some(e) => {
            count_refusal(metrics, caller, e);
            span.record("outcome", super::status::outcome(e));
            if super::status::is_refusal(e) {
                tracing::info!(error = %e, "rpc refused");
            } else {
                tracing::warn!(error = %e, "rpc failed");
            }
        }
    }
}

/// The account of the call's stream on the gRPC port, on which core counts what it
/// loads for the call (`None` for a call that did not come through the port).
pub fn account_of<T>(request: &Request<T>) -> CallAccount {
    request
        .extensions()
        .get::<crate::transport::conn_table::StreamGuard>()
        .map(crate::transport::conn_table::StreamGuard::account)
}
