//! Status queries inside a `Batch` reach the gateway once too: each item is answered
//! as a lone `GetMessageStatus` is (from the store, a fresh answer, a lookup in
//! flight), items of one id share one answer, and the ids that need the gateway are
//! looked up together in one request. The batch's other items go their own way.

use std::collections::HashMap;

use futures_util::FutureExt;
use tokio::time::Instant;

use super::{Queries, status_answer};
use crate::core::dispatch::Executed;
use crate::core::domain::{AnswerSource, ClientId, Error, Operation, Output, Priority};

/// One result per operation of a call, or an error of the call as a whole.
pub type Results = Result<Vec<Result<Executed, Error>>, Error>;

impl Queries {
    /// Runs a Batch's items (each with what `rest` needs of it, e.g. its timing):
    /// its status queries are answered here ([`Queries::statuses`]), the other items
    /// by `rest`, both at once; one result per item, in their order. An error of
    /// `rest` as a whole is the batch's.
    pub async fn execute_batch<T, Run>(
        &self,
        items: Vec<(Operation, T)>,
        deadline: Option<Instant>,
        rest: impl FnOnce(Vec<(Operation, T)>) -> Run,
    ) -> Results
    where
        Run: Future<Output = Results>,
    {
        let count = items.len();
        let (mut status_at, mut ids, mut rest_at, mut others) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, (op, extra)) in items.into_iter().enumerate() {
            match op {
                Operation::GetMessageStatus(id) => {
                    status_at.push(i);
                    ids.push(id);
                }
                op => {
                    rest_at.push(i);
                    others.push((op, extra));
                }
            }
        }
        let rest = async {
            if others.is_empty() {
                Ok(Vec::new())
            } else {
                rest(others).await
            }
        };
        let (statuses, rest) = tokio::join!(self.statuses(&ids, deadline), rest);
        let mut results: Vec<Option<Result<Executed, Error>>> = (0..count).map(|_| None).collect();
        for (i, result) in status_at.into_iter().zip(statuses) {
            results[i] = Some(result);
        }
        for (i, result) in rest_at.into_iter().zip(rest?) {
            results[i] = Some(result);
        }
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::Internal("a batch item left unanswered".into())))
            })
            .collect())
    }

    /// The statuses of messages `ids` (one per id given, an id may repeat), each
    /// counted and saying where it came from: what msgw holds, else a fresh answer or
    /// a lookup in flight, else one gateway request for all the ids that need one.
    /// Items of one id share its answer: the first says where it came from, the
    /// others `shared-lookup` when that was a lookup.
    pub async fn statuses(
        &self,
        ids: &[ClientId],
        deadline: Option<Instant>,
    ) -> Vec<Result<Executed, Error>> {
        let mut answers: HashMap<ClientId, Result<(Output, AnswerSource), Error>> = HashMap::new();
        let mut to_look_up = Vec::new();
        for id in ids {
            if answers.contains_key(id) || to_look_up.contains(id) {
                continue;
            }
            match self.held_status(*id).await {
                Ok(Some(output)) => {
                    answers.insert(*id, Ok((output, AnswerSource::Store)));
                }
                Ok(None) => to_look_up.push(*id),
                Err(e) => {
                    answers.insert(*id, Err(e));
                }
            }
        }
        let looked_up = self.look_up_statuses(to_look_up.clone(), deadline).await;
        for (id, answer) in to_look_up.into_iter().zip(looked_up) {
            answers.insert(id, answer.map(|(r, source)| (Output::Status(r), source)));
        }
        let mut answered = std::collections::HashSet::new();
        ids.iter()
            .map(|id| {
                let answer = answers.get(id).cloned().unwrap_or_else(|| {
                    Err(Error::Internal(format!("no status answer for id {id}")))
                });
                let (output, mut source) = answer?;
                if !answered.insert(*id) && source == AnswerSource::Lookup {
                    source = AnswerSource::SharedLookup;
                }
                self.count_status(source);
                Ok(Executed {
                    output,
                    replayed: false,
                    source: Some(source),
                })
            })
            .collect()
    }

    /// The gateway's statuses of messages `ids` (distinct), as
    /// [`Queries::look_up_status`] gives each, those neither fresh nor in flight
    /// looked up in one gateway request.
    async fn look_up_statuses(
        &self,
        ids: Vec<ClientId>,
        deadline: Option<Instant>,
    ) -> Vec<Result<(crate::core::domain::StatusReport, AnswerSource), Error>> {
        if ids.is_empty() {
            return Vec::new();
        }
        let dispatcher = self.dispatcher.clone();
        let answers = self
            .statuses
            .get_many(ids, deadline, move |missing| {
                async move {
                    let ops = missing
                        .into_iter()
                        .map(Operation::GetMessageStatus)
                        .collect();
                    let results = dispatcher
                        .execute_all(ops, Priority::Normal.into(), None, None)
                        .await?;
                    Ok(results.into_iter().map(status_answer).collect())
                }
                .boxed()
            })
            .await;
        answers
            .into_iter()
            .map(|answer| {
                let (answer, source) = answer?;
                answer.map(|report| (report, source))
            })
            .collect()
    }
}
