//! Queries reach the gateway once: a status msgw holds final is answered from the
//! store; callers asking for the same status, balance or sender list at once share one
//! gateway lookup; and a lookup's answer is given again for a short while
//! (`MSGW_STATUS_FRESHNESS` for statuses, `MSGW_ACCOUNT_CACHE` for the balance and the
//! sender names) instead of asking again. So callers cannot turn queries into gateway
//! requests one for one, which would spend the account's own rate limits and the
//! upstream queue that every caller shares. Every answer says where it came from
//! ([`AnswerSource`]). Each replica keeps its own answers: with N replicas, the gateway
//! sees at most N lookups of one thing per freshness time.

mod batch;
mod flight;

use std::{sync::Arc, time::Duration};

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::base::metrics::Metrics;
use crate::base::parse;
use crate::core::dispatch::{Dispatcher, Executed, Lanes};
use crate::core::domain::{
    AnswerSource, CallerName, ClientId, Error, OpKind, Operation, Output, StatusReport, Waited,
};
use crate::core::ports::store::Store;

use flight::Flights;

/// How long lookups' answers are given again: `msgw serve`'s options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct QuerySettings {
    /// A status that is not final, asked for again within this time, is answered from
    /// msgw's last gateway lookup of it (`msgw-answer-source: cache`); `0s` asks the
    /// gateway every time. Queries of one id at once share one lookup whatever it is,
    /// and a final status msgw holds is answered from its store.
    #[arg(long = "status-freshness", env = "MSGW_STATUS_FRESHNESS", default_value = "1s", value_parser = parse::duration_between(Duration::ZERO, Duration::from_secs(60)))]
    pub status_freshness: Duration,
    /// GetBalance and ListSenders answers are given again for this long after the
    /// gateway's (`msgw-answer-source: cache`); `0s` asks every time. Calls at once
    /// share one lookup whatever it is.
    #[arg(long = "account-cache", env = "MSGW_ACCOUNT_CACHE", default_value = "1s", value_parser = parse::duration_between(Duration::ZERO, Duration::from_secs(3600)))]
    pub account_cache: Duration,
}

impl Default for QuerySettings {
    fn default() -> Self {
        parse::defaults()
    }
}

/// Message ids whose last status lookup is kept at most: beyond, lookups of further
/// ids are each caller's own until kept ones go stale (bounds the memory to a few MB).
const STATUSES_KEPT: usize = 10_000;

/// Answers GetMessageStatus, GetBalance and ListSenders; everything else goes to
/// dispatch.
pub struct Queries {
    dispatcher: Dispatcher,
    store: Arc<dyn Store>,
    /// The gateway's answers: a status, or "not found" (kept as fresh as a status, so
    /// an id the gateway does not know cannot be asked for over and over either).
    statuses: Flights<ClientId, StatusAnswer>,
    account: Flights<OpKind, Output>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Queries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Queries(..)")
    }
}

impl Queries {
    /// Queries over `dispatcher`, reading what msgw holds from `store`.
    pub fn new(dispatcher: Dispatcher, store: Arc<dyn Store>, settings: QuerySettings) -> Self {
        Self {
            metrics: dispatcher.metrics().clone(),
            statuses: Flights::new(settings.status_freshness, STATUSES_KEPT),
            // Two keys: the balance and the sender names.
            account: Flights::new(settings.account_cache, 2),
            dispatcher,
            store,
        }
    }

    /// The dispatcher lookups go through.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// Runs the operations of one call of `caller`: a lone status, balance or sender
    /// query is answered here, anything else by the gateway through dispatch.
    pub async fn execute_all(
        &self,
        ops: Vec<Operation>,
        lanes: Lanes,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
    ) -> Result<Vec<Result<Executed, Error>>, Error> {
        match ops.as_slice() {
            [Operation::GetMessageStatus(id)] => Ok(vec![self.status(*id, deadline).await]),
            [op @ (Operation::GetBalance | Operation::ListSenders)] => {
                Ok(vec![self.account(op.clone(), deadline).await])
            }
            _ => {
                self.dispatcher
                    .execute_all(ops, lanes, deadline, caller)
                    .await
            }
        }
    }

    /// The status of message `id`: msgw's own (scheduled, cancelled, refused as it
    /// left) or a final one it holds from the store, else from a gateway lookup.
    pub async fn status(&self, id: ClientId, deadline: Option<Instant>) -> Result<Executed, Error> {
        let (output, source) = match self.held_status(id).await? {
            Some(output) => (output, AnswerSource::Store),
            None => {
                let (report, source) = self.look_up_status(id, deadline).await?;
                (Output::Status(report), source)
            }
        };
        self.count_status(source);
        Ok(Executed {
            output,
            replayed: false,
            source: Some(source),
        })
    }

    /// The status msgw holds of message `id` without asking the gateway: its own
    /// (scheduled, cancelled, refused as it left), or a final one (a delivery
    /// webhook's, a reconcile poll's).
    async fn held_status(&self, id: ClientId) -> Result<Option<Output>, Error> {
        if let Some(report) = crate::core::schedule::own_status(self.store.as_ref(), id).await? {
            return Ok(Some(Output::Status(report)));
        }
        Ok(self.final_status_held(id).await?.map(Output::Waited))
    }

    /// The final status msgw holds of message `id` (a delivery webhook's, a reconcile
    /// poll's, msgw's own), if it holds one.
    async fn final_status_held(&self, id: ClientId) -> Result<Option<Waited>, Error> {
        let last = self
            .store
            .last_event_of(id)
            .await
            .map_err(|e| e.unavailable("msgw's store is unavailable"))?;
        Ok(last.filter(|e| e.event.is_final()).map(Waited::from))
    }

    /// The gateway's status of message `id`: fresh from the last lookup, shared with
    /// a lookup in flight, or from a new one; waited for until `deadline`. Not counted
    /// (see [`Queries::count_status`]).
    pub async fn look_up_status(
        &self,
        id: ClientId,
        deadline: Option<Instant>,
    ) -> Result<(StatusReport, AnswerSource), Error> {
        let dispatcher = self.dispatcher.clone();
        let (answer, source) = self
            .statuses
            .get(id, deadline, move || {
                async move {
                    let executed = dispatcher
                        .execute(Operation::GetMessageStatus(id), None)
                        .await;
                    status_answer(executed)
                }
                .boxed()
            })
            .await?;
        answer.map(|report| (report, source))
    }

    /// The balance or the sender names (`op`), as [`Flights`] keeps them.
    async fn account(&self, op: Operation, deadline: Option<Instant>) -> Result<Executed, Error> {
        let dispatcher = self.dispatcher.clone();
        let (output, source) = self
            .account
            .get(op.kind(), deadline, move || {
                async move { Ok(dispatcher.execute(op, None).await?.output) }.boxed()
            })
            .await?;
        Ok(Executed {
            output,
            replayed: false,
            source: Some(source),
        })
    }

    /// Counts a status answer given from `source` (`msgw_status_answers_total`).
    pub fn count_status(&self, source: AnswerSource) {
        self.metrics
            .queries
            .status_answers
            .with_label_values(&[source.as_str()])
            .inc();
    }
}

/// What a gateway status lookup keeps: the status, or "not found" (kept as fresh as a
/// status); any other error is the lookup's, not kept.
type StatusAnswer = Result<StatusReport, Error>;

/// The answer a status lookup keeps, from the operation's result.
fn status_answer(executed: Result<Executed, Error>) -> Result<StatusAnswer, Error> {
    match executed.map(|executed| executed.output) {
        Ok(Output::Status(report)) => Ok(Ok(report)),
        Err(e @ Error::MessageNotFound { .. }) => Ok(Err(e)),
        Err(e) => Err(e),
        Ok(other) => Err(Error::Internal(format!(
            "a status query answered {other:?}"
        ))),
    }
}
