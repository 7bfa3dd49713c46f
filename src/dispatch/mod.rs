//! The one place where domain operations become gateway requests and gateway
//! answers become domain results and errors. Later work (coalescing concurrent
//! RPCs into one envelope, idempotency by client id) belongs here.

use tokio::time::Instant;

use crate::domain::{Error, Operation, Output, UnavailableCause};
use crate::upstream::{Gateway, ItemOutcome, UpstreamError};

/// Runs operations against the gateway.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    gateway: Gateway,
}

impl Dispatcher {
    /// A dispatcher over `gateway`.
    pub fn new(gateway: Gateway) -> Self {
        Self { gateway }
    }

    /// Runs one operation.
    pub async fn execute(&self, op: Operation, deadline: Option<Instant>) -> Result<Output, Error> {
        let mut results = self.execute_all(vec![op], deadline).await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("no result for the operation".into())))
    }

    /// Runs several operations in one envelope: an error of the whole request, or
    /// one result per operation in order.
    pub async fn execute_all(
        &self,
        ops: Vec<Operation>,
        deadline: Option<Instant>,
    ) -> Result<Vec<Result<Output, Error>>, Error> {
        let hooks = vec![None; ops.len()];
        let changes_state = ops.iter().any(Operation::changes_state);
        let outcomes = self
            .gateway
            .call(&ops, &hooks, deadline)
            .await
            .map_err(|e| upstream_error(e, changes_state))?;
        Ok(ops
            .iter()
            .zip(outcomes)
            .map(|(op, outcome)| match outcome {
                ItemOutcome::Done(output) => Ok(output),
                ItemOutcome::Rejected(text) => Err(Error::Rejected(text)),
                ItemOutcome::BadPayload(e) => Err(Error::Unavailable {
                    cause: UnavailableCause::BadResponse,
                    // The gateway said it succeeded; only its answer is unreadable.
                    outcome_unknown: op.changes_state(),
                    detail: e.to_string(),
                }),
            })
            .collect())
    }
}

/// Maps a failed upstream request; `changes_state` says whether any operation in it
/// could have done something that a blind retry would do twice.
fn upstream_error(e: UpstreamError, changes_state: bool) -> Error {
    let detail = e.to_string();
    let (cause, may_have_arrived) = match e {
        UpstreamError::AccessDenied => return Error::AccessDenied,
        UpstreamError::EnvelopeRejected(text) => return Error::Rejected(text),
        UpstreamError::Deadline => {
            return Error::DeadlineExceeded {
                outcome_unknown: changes_state,
            };
        }
        UpstreamError::Unreachable(_) => (UnavailableCause::Unreachable, false),
        UpstreamError::Transport(_) => (UnavailableCause::Unreachable, true),
        UpstreamError::Timeout(_) => (UnavailableCause::Timeout, true),
        UpstreamError::HttpStatus(code) => (UnavailableCause::HttpStatus(code), true),
        UpstreamError::BadEnvelope(_) => (UnavailableCause::BadResponse, true),
    };
    Error::Unavailable {
        cause,
        outcome_unknown: changes_state && may_have_arrived,
        detail,
    }
}
