//! The one place where domain operations become gateway requests and gateway
//! answers become domain results and errors. Later work (coalescing concurrent
//! RPCs into one envelope, idempotency by client id) belongs here.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use tokio::time::Instant;

use crate::domain::{Channel, ClientId, Error, Operation, Output, SendReceipt, UnavailableCause};
use crate::metrics::METRICS;
use crate::store::{SentMessage, Store};
use crate::upstream::{Gateway, ItemOutcome, UpstreamError};
use crate::webhook::HookUrls;

/// Delivery tracking: hook URLs injected into sends, and sent messages recorded
/// for reconcile.
#[derive(Debug, Clone)]
pub struct Tracking {
    /// Builds each message's hook URL.
    pub hooks: HookUrls,
    /// Where sent messages are recorded.
    pub store: Arc<dyn Store>,
}

/// Runs operations against the gateway.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    gateway: Gateway,
    tracking: Option<Tracking>,
}

impl Dispatcher {
    /// A dispatcher over `gateway`, without delivery tracking.
    pub fn new(gateway: Gateway) -> Self {
        Self {
            gateway,
            tracking: None,
        }
    }

    /// The same dispatcher, injecting hooks into sends and recording them.
    pub fn with_tracking(self, tracking: Tracking) -> Self {
        Self {
            tracking: Some(tracking),
            ..self
        }
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
        let hooks: Vec<Option<String>> = ops
            .iter()
            .map(|op| {
                let tracking = self.tracking.as_ref().filter(|_| op.takes_hook())?;
                Some(tracking.hooks.status_url(op.client_id()?.get()))
            })
            .collect();
        let changes_state = ops.iter().any(Operation::changes_state);
        let outcomes = self
            .gateway
            .call(&ops, &hooks, deadline)
            .await
            .map_err(|e| upstream_error(e, changes_state))?;
        let results: Vec<Result<Output, Error>> = ops
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
            .collect();
        for (op, result) in ops.iter().zip(&results) {
            if let (Some(delivery), Ok(Output::Sent(receipt))) = (op.delivery(), result) {
                self.accepted(delivery, receipt).await;
            }
        }
        Ok(results)
    }

    /// Bills an accepted send in the metrics and remembers it so reconcile can poll it.
    /// A store failure is logged, not returned: the message is sent, and its webhook
    /// still arrives.
    async fn accepted(
        &self,
        (id, channel, lifetime): (ClientId, Channel, Duration),
        receipt: &SendReceipt,
    ) {
        METRICS
            .billed_parts_total
            .with_label_values(&[channel.as_str()])
            .inc_by(u64::from(receipt.parts));
        let Some(tracking) = &self.tracking else {
            return;
        };
        let message = SentMessage {
            client_id: id.get(),
            msg_id: receipt.msg_id.clone(),
            channel: channel.as_str().to_owned(),
            sent_at: Utc::now(),
            lifetime,
        };
        if let Err(e) = tracking.store.record_sent(&message).await {
            tracing::error!(client_id = id.get(), error = %e, "cannot record the sent message; only its webhook will report it");
        }
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
