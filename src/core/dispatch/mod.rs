//! The one place where domain operations become gateway requests and gateway
//! answers become domain results and errors. Calls queue in the coalescer, which
//! sends what queued together in one envelope over a bounded number of gateway
//! requests in flight (`coalescer`); each envelope claims its keyed operations (every
//! send, the voice OTP call) first, so each client id reaches the gateway at most
//! once however often it is retried (`claims`, `envelope`), and refuses what goes to a
//! number that opted out (`optout`).

mod acquire;
mod answers;
mod coalescer;
mod confidential;
mod envelope;
mod exactly_once;
#[cfg(test)]
mod future_size_tests;
mod lanes;
mod lookups;
mod optout;
mod pace;
mod resolve;
mod scheduled;
mod settlement;

use std::sync::Arc;

use tokio::time::Instant;

use crate::base::metrics::Metrics;
use crate::core::domain::{
    AnswerSource, CallerName, ClientId, Error, Operation, Output, Priority, UnavailableCause,
};
use crate::core::hooks::HookUrls;
use crate::core::ports::gateway::{Gateway, UpstreamError};
use crate::core::ports::store::Store;

pub use coalescer::Limits;
use coalescer::{CallReply, Coalescer};
pub use confidential::Confidential;
use envelope::{Answer, Engine};
pub use exactly_once::{Claims, Owned, STALE_MARGIN, fingerprint};
pub use lanes::Lanes;
pub use lookups::{LOOKUP_BACKOFF_FIRST, LOOKUP_BACKOFF_MAX};
use pace::Pace;
pub use scheduled::{ScheduledKey, scheduled_fingerprint, scheduled_receipt};

/// Delivery tracking: hook URLs injected into sends, and sent messages recorded
/// for reconcile.
#[derive(Debug, Clone)]
pub struct Tracking {
    /// Builds each message's hook URL.
    pub hooks: HookUrls,
    /// Where claims and sent messages are recorded.
    pub store: Arc<dyn Store>,
    /// After a request is cut while the gateway may hold it, how long "not found" from
    /// `status` still means "not yet" (`MSGW_UPSTREAM_SETTLE`).
    pub settle: std::time::Duration,
}

/// The answer to one operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    /// What the gateway answered.
    pub output: Output,
    /// The stored answer of an earlier call with the same id: nothing was sent now.
    pub replayed: bool,
    /// Where the answer of a query came from; `None` for operations that change
    /// state (sends, template changes).
    pub source: Option<AnswerSource>,
}

/// Runs operations against the gateway.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    engine: Arc<Engine>,
    coalescer: Arc<Coalescer<Engine>>,
}

impl Dispatcher {
    /// A dispatcher over `gateway` within `limits`, without delivery tracking or
    /// idempotency.
    pub fn new(gateway: Arc<dyn Gateway>, limits: Limits, metrics: Arc<Metrics>) -> Self {
        Self::build(
            Engine {
                gateway,
                tracking: None,
                claims: None,
                metrics,
                recording: tokio::sync::Semaphore::new(limits.connections),
            },
            limits,
        )
    }

    /// The same dispatcher, injecting hooks into sends, claiming keyed operations'
    /// ids in the store and recording sent messages.
    pub fn with_tracking(self, tracking: Tracking) -> Self {
        let stale_after = self.engine.gateway.timeout() + STALE_MARGIN;
        Self::build(
            Engine {
                gateway: self.engine.gateway.clone(),
                claims: Some(Claims::new(
                    self.engine.gateway.clone(),
                    tracking.store.clone(),
                    stale_after,
                    tracking.settle,
                    &self.engine.metrics,
                )),
                tracking: Some(tracking),
                metrics: self.engine.metrics.clone(),
                recording: tokio::sync::Semaphore::new(self.coalescer.limits().connections),
            },
            self.coalescer.limits(),
        )
    }

    fn build(engine: Engine, limits: Limits) -> Self {
        let engine = Arc::new(engine);
        let pace = limits.rate_limit().map(|limit| {
            Arc::new(match &engine.tracking {
                Some(tracking) => Pace::shared(limit, tracking.store.clone()),
                None => Pace::local(limit),
            })
        });
        let coalescer = Coalescer::paced(engine.clone(), limits, engine.metrics.clone(), pace);
        Self { engine, coalescer }
    }

    /// Operations one call may hold at most: they share one envelope (under a rate, a
    /// larger call leaves in parts of a tenth of a second's worth, in order).
    pub fn batch_max(&self) -> usize {
        self.coalescer.limits().batch_max
    }

    /// The gateway operations go to.
    pub fn gateway(&self) -> &dyn Gateway {
        &*self.engine.gateway
    }

    /// The claims of keyed operations, when msgw tracks them.
    pub fn claims(&self) -> Option<&Claims> {
        self.engine.claims.as_ref()
    }

    /// The metrics this dispatcher records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.engine.metrics
    }

    /// Who sent message `id` through msgw: `None` when msgw holds no claim of it (never
    /// sent through msgw, or its claim is past retention), `Some(None)` when it was
    /// sent without caller authentication.
    pub async fn sender_of(&self, id: ClientId) -> Result<Option<Option<CallerName>>, Error> {
        let Some(claims) = &self.engine.claims else {
            return Ok(None);
        };
        claims
            .record(id)
            .await
            .map(|record| record.map(|r| r.caller))
            .map_err(|e| e.unavailable("msgw's store is unavailable"))
    }

    /// Runs one operation of msgw's own (a poll, a refresh) in the normal lane.
    pub async fn execute(
        &self,
        op: Operation,
        deadline: Option<Instant>,
    ) -> Result<Executed, Error> {
        let mut results = self
            .execute_all(vec![op], Priority::Normal.into(), deadline, None)
            .await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("no result for the operation".into())))
    }

    /// Runs several operations of `caller`, each in its lane, in one envelope per lane:
    /// an error of the whole call, or one result per operation in order. Keyed
    /// operations' ids must be distinct. An operation whose id another call is sending
    /// waits for that call's outcome (up to `deadline`) and is then answered from it.
    pub async fn execute_all(
        &self,
        ops: Vec<Operation>,
        lanes: Lanes,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
    ) -> Result<Vec<Result<Executed, Error>>, Error> {
        self.execute_all_kept(ops, lanes, deadline, caller, None, None)
            .await
    }

    /// Runs one operation of `caller` whose text carries a secret (a one-time code,
    /// always urgent): the same send, with the same exactly-once rules, but its claim
    /// keeps no copy of the secret (see [`Confidential`]).
    pub async fn execute_confidential(
        &self,
        op: Operation,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
        confidential: &Confidential,
    ) -> Result<Executed, Error> {
        let lanes = Priority::Urgent.into();
        let mut results = self
            .execute_all_kept(vec![op], lanes, deadline, caller, Some(confidential), None)
            .await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("no result for the operation".into())))
    }

    /// Runs one send of `caller` that has a `send_at` (past, or its time has come):
    /// keyed by its time (see [`scheduled_fingerprint`]), with the same exactly-once
    /// rules as any send; `leaving` when it is the scheduled message itself leaving,
    /// which takes its scheduled claim over.
    pub async fn execute_scheduled(
        &self,
        op: Operation,
        lane: Priority,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
        scheduled: ScheduledKey,
    ) -> Result<Executed, Error> {
        let mut results = self
            .execute_all_kept(
                vec![op],
                lane.into(),
                deadline,
                caller,
                None,
                Some(scheduled),
            )
            .await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("no result for the operation".into())))
    }

    /// [`Dispatcher::execute_all`], with the claims kept as `confidential` says when set.
    async fn execute_all_kept(
        &self,
        ops: Vec<Operation>,
        lanes: Lanes,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
        confidential: Option<&Confidential>,
        scheduled: Option<ScheduledKey>,
    ) -> Result<Vec<Result<Executed, Error>>, Error> {
        let mut results: Vec<Option<Result<Executed, Error>>> = ops.iter().map(|_| None).collect();
        let mut pending: Vec<(usize, Operation)> = ops.into_iter().enumerate().collect();
        while !pending.is_empty() {
            let mut settled = self.engine.claims.as_ref().map(Claims::subscribe);
            let chunk_max = self.coalescer.limits().chunk_max();
            // One part (the usual call: one lane, within an envelope) awaits its
            // coalescer call in place: that future is most of every send's state, which
            // tonic moves into a box whole, so it must not be held twice. Several parts
            // wait side by side (on the heap).
            let lanes_answered: Vec<(Vec<usize>, CallReply<Answer>)> = if let Some(lane) =
                lanes.one(pending.len(), chunk_max)
            {
                let (indices, batch) = pending.into_iter().unzip();
                let answers = self
                    .call_in(lane, batch, deadline, caller, confidential, scheduled)
                    .await;
                vec![(indices, answers)]
            } else {
                let (indices, calls): (Vec<_>, Vec<_>) = parts(&lanes, pending, chunk_max)
                    .map(|(lane, indices, batch)| {
                        let call =
                            self.call_in(lane, batch, deadline, caller, confidential, scheduled);
                        (indices, call)
                    })
                    .unzip();
                let answers = futures_util::future::join_all(calls).await;
                indices.into_iter().zip(answers).collect()
            };
            let single = lanes_answered.len() == 1;
            let mut answered = Vec::new();
            for (indices, answers) in lanes_answered {
                match answers {
                    Ok(answers) if answers.len() == indices.len() => {
                        answered.extend(indices.into_iter().zip(answers));
                    }
                    Ok(answers) => {
                        return Err(Error::Internal(format!(
                            "{} answers for {} operations",
                            answers.len(),
                            indices.len()
                        )));
                    }
                    // One lane's call: the error of the call as a whole.
                    Err(e) if single => return Err(e),
                    // Calls in several lanes: each operation of the failed one answers
                    // the error, the others their own results.
                    Err(e) => {
                        for i in indices {
                            results[i] = Some(Err(e.clone()));
                        }
                    }
                }
            }
            pending = Vec::new();
            let mut stale_at: Option<chrono::DateTime<chrono::Utc>> = None;
            for (i, answer) in answered {
                match answer {
                    Answer::Done(result) => results[i] = Some(result),
                    Answer::Wait { op, stale_at: s } => {
                        stale_at = Some(stale_at.map_or(s, |t| t.min(s)));
                        pending.push((i, op));
                    }
                }
            }
            let (Some(stale_at), Some(claims), Some(settled)) =
                (stale_at, &self.engine.claims, settled.as_mut())
            else {
                continue;
            };
            if !claims.wait(settled, stale_at, deadline).await {
                for (i, op) in pending.drain(..) {
                    results[i] = Some(Err(match op.idempotency_key() {
                        Some(id) => answers::in_progress(id, stale_at),
                        // Sent round again (its call waited too long for a slot):
                        // nothing of it left msgw.
                        None => Error::DeadlineExceeded {
                            outcome_unknown: false,
                        },
                    }));
                }
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Internal("operation left unanswered".into()))))
            .collect())
    }

    /// The coalescer's call of `batch` in `lane`, to be awaited by the caller (a plain
    /// function: the future it answers is the coalescer's own, with nothing around it).
    fn call_in(
        &self,
        lane: Priority,
        batch: Vec<Operation>,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
        confidential: Option<&Confidential>,
        scheduled: Option<ScheduledKey>,
    ) -> impl Future<Output = CallReply<Answer>> + '_ {
        self.coalescer.call_kept(
            batch,
            lane,
            deadline,
            caller.cloned(),
            confidential.cloned(),
            scheduled,
        )
    }
}

/// `pending` (operations by their index in the call) by lane, most urgent first, in
/// parts of at most `max` operations: each part's lane, indices and operations.
fn parts(
    lanes: &Lanes,
    pending: Vec<(usize, Operation)>,
    max: usize,
) -> impl Iterator<Item = (Priority, Vec<usize>, Vec<Operation>)> {
    lanes
        .split(pending)
        .into_iter()
        .flat_map(move |(lane, indexed)| {
            let mut indexed = indexed.into_iter().peekable();
            std::iter::from_fn(move || {
                indexed.peek()?;
                let (indices, batch) = indexed.by_ref().take(max.max(1)).unzip();
                Some((lane, indices, batch))
            })
        })
}

/// A std duration as chrono's (saturating).
fn duration(d: std::time::Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Maps a failed upstream request; `changes_state` says whether any operation in it
/// could have done something that a blind retry would do twice.
fn upstream_error(e: &UpstreamError, changes_state: bool) -> Error {
    let cause = match e {
        UpstreamError::AccessDenied => return Error::AccessDenied,
        UpstreamError::EnvelopeRejected(text) => return Error::Rejected(text.clone()),
        UpstreamError::Deadline => {
            return Error::DeadlineExceeded {
                outcome_unknown: changes_state,
            };
        }
        UpstreamError::Unreachable(_) | UpstreamError::Transport(_) => {
            UnavailableCause::Unreachable
        }
        UpstreamError::Timeout(_) => UnavailableCause::Timeout,
        UpstreamError::HttpStatus(code) => UnavailableCause::HttpStatus(*code),
        UpstreamError::BadEnvelope(_) => UnavailableCause::BadResponse,
        UpstreamError::RateLimited { retry_after } => UnavailableCause::RateLimited {
            retry_after: *retry_after,
        },
    };
    Error::Unavailable {
        cause,
        outcome_unknown: changes_state && e.may_have_arrived(),
        detail: e.to_string(),
    }
}
