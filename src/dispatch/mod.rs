//! The one place where domain operations become gateway requests and gateway
//! answers become domain results and errors. Keyed operations (every send, the
//! voice OTP call) go through their idempotency claim first (`claims`), so each
//! client id reaches the gateway at most once however often it is retried.

mod claims;

use std::sync::Arc;

use chrono::Utc;
use tokio::time::Instant;

use crate::domain::{Error, Operation, Output, UnavailableCause};
use crate::metrics::METRICS;
use crate::store::{AcceptedOutcome, SentMessage, Settlement, Store};
use crate::upstream::{Gateway, ItemOutcome, UpstreamError};
use crate::webhook::HookUrls;

use claims::{Acquired, Owned};
pub use claims::{Claims, STALE_MARGIN, fingerprint};

/// Delivery tracking: hook URLs injected into sends, and sent messages recorded
/// for reconcile.
#[derive(Debug, Clone)]
pub struct Tracking {
    /// Builds each message's hook URL.
    pub hooks: HookUrls,
    /// Where claims and sent messages are recorded.
    pub store: Arc<dyn Store>,
}

/// The answer to one operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    /// What the gateway answered.
    pub output: Output,
    /// The stored answer of an earlier call with the same id: nothing was sent now.
    pub replayed: bool,
}

/// Runs operations against the gateway.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    gateway: Gateway,
    tracking: Option<Tracking>,
    claims: Option<Claims>,
}

/// What happens to one operation of a call.
// Lives only during one call; boxing the answer would cost an allocation per operation.
#[allow(clippy::large_enum_variant)]
enum Slot {
    /// Goes into the envelope; a keyed one with the claim it owns.
    Send(Option<Owned>),
    /// Its earlier outcome is unknown: a `status` query decides.
    Resolve(Owned),
    /// Answered.
    Done(Result<Executed, Error>),
}

impl Dispatcher {
    /// A dispatcher over `gateway`, without delivery tracking or idempotency.
    pub fn new(gateway: Gateway) -> Self {
        Self {
            gateway,
            tracking: None,
            claims: None,
        }
    }

    /// The same dispatcher, injecting hooks into sends, claiming keyed operations'
    /// ids in the store and recording sent messages.
    pub fn with_tracking(self, tracking: Tracking) -> Self {
        let stale_after = self.gateway.timeout() + STALE_MARGIN;
        Self {
            claims: Some(Claims::new(tracking.store.clone(), stale_after)),
            tracking: Some(tracking),
            ..self
        }
    }

    /// Runs one operation.
    pub async fn execute(
        &self,
        op: Operation,
        deadline: Option<Instant>,
    ) -> Result<Executed, Error> {
        let mut results = self.execute_all(vec![op], deadline).await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("no result for the operation".into())))
    }

    /// Runs several operations in one envelope: an error of the whole request, or
    /// one result per operation in order. Keyed operations are claimed first; only
    /// those this call owns are sent. Their ids must be distinct.
    pub async fn execute_all(
        &self,
        ops: Vec<Operation>,
        deadline: Option<Instant>,
    ) -> Result<Vec<Result<Executed, Error>>, Error> {
        let mut slots = self.acquire_all(&ops, deadline).await;
        self.resolve_unknown(&ops, &mut slots, deadline).await;
        let sending: Vec<usize> = (0..ops.len())
            .filter(|&i| matches!(slots[i], Slot::Send(_)))
            .collect();
        if !sending.is_empty() {
            self.send(&ops, &mut slots, &sending, deadline).await?;
        }
        Ok(slots
            .into_iter()
            .map(|slot| match slot {
                Slot::Done(result) => result,
                _ => Err(Error::Internal("operation left unanswered".into())),
            })
            .collect())
    }

    /// Claims every keyed operation's id (concurrently, so they share a group commit).
    async fn acquire_all(&self, ops: &[Operation], deadline: Option<Instant>) -> Vec<Slot> {
        let Some(claims) = &self.claims else {
            return ops.iter().map(|_| Slot::Send(None)).collect();
        };
        futures_util::future::join_all(ops.iter().map(|op| async move {
            let Some(id) = op.idempotency_key() else {
                return Slot::Send(None);
            };
            match claims.acquire(op, id, deadline).await {
                Acquired::Send(owned) => Slot::Send(Some(owned)),
                Acquired::Resolve(owned) => Slot::Resolve(owned),
                Acquired::Answer(answer) => Slot::Done(answer),
            }
        }))
        .await
    }

    /// Asks the gateway's `status` for every id whose earlier outcome is unknown, in
    /// one envelope: known → accepted (answered as a replay); not known → sent now;
    /// no answer → still unknown.
    async fn resolve_unknown(
        &self,
        ops: &[Operation],
        slots: &mut [Slot],
        deadline: Option<Instant>,
    ) {
        let resolving: Vec<(usize, Owned)> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Slot::Resolve(owned) => Some((i, *owned)),
                _ => None,
            })
            .collect();
        let Some(claims) = self.claims.as_ref().filter(|_| !resolving.is_empty()) else {
            return;
        };
        let queries: Vec<Operation> = resolving
            .iter()
            .map(|(_, owned)| Operation::GetMessageStatus(owned.id))
            .collect();
        let answers = self
            .gateway
            .call(
                &queries.iter().collect::<Vec<_>>(),
                &vec![None; queries.len()],
                deadline,
            )
            .await;
        let mut settlements = Vec::new();
        for (n, (i, owned)) in resolving.into_iter().enumerate() {
            let answer = match &answers {
                Ok(items) => match items.get(n) {
                    Some(ItemOutcome::Done(Output::Status(report))) => {
                        let outcome = AcceptedOutcome {
                            msg_id: report.msg_id.clone(),
                            parts: 0,
                            payload: report.raw.clone(),
                            recovered: true,
                        };
                        let track = report
                            .msg_id
                            .as_ref()
                            .and_then(|msg_id| self.sent_message(&ops[i], msg_id));
                        settlements.push((owned, Settlement::Accepted(outcome.clone(), track)));
                        tracing::info!(
                            client_id = owned.id.get(),
                            msg_id = report.msg_id.as_deref().unwrap_or_default(),
                            "unknown outcome resolved: the gateway has the message"
                        );
                        Slot::Done(claims::replay(&ops[i], owned.id, outcome))
                    }
                    // The gateway does not know the id: the earlier request never
                    // arrived, so sending now is the first send.
                    Some(ItemOutcome::Rejected(_)) => Slot::Send(Some(owned)),
                    _ => {
                        settlements.push((owned, Settlement::Unknown));
                        Slot::Done(Err(Error::Unavailable {
                            cause: UnavailableCause::BadResponse,
                            outcome_unknown: true,
                            detail: "the outcome of an earlier send with this id is unknown, and the gateway's status answer is unreadable".into(),
                        }))
                    }
                },
                Err(e) => {
                    settlements.push((owned, Settlement::Unknown));
                    Slot::Done(Err(still_unknown(e)))
                }
            };
            slots[i] = answer;
        }
        claims.settle(settlements).await;
    }

    /// Sends the operations at `sending` in one envelope and settles their claims.
    async fn send(
        &self,
        ops: &[Operation],
        slots: &mut [Slot],
        sending: &[usize],
        deadline: Option<Instant>,
    ) -> Result<(), Error> {
        let batch: Vec<&Operation> = sending.iter().map(|&i| &ops[i]).collect();
        let hooks: Vec<Option<String>> = batch
            .iter()
            .map(|op| {
                let tracking = self.tracking.as_ref().filter(|_| op.takes_hook())?;
                Some(tracking.hooks.status_url(op.client_id()?.get()))
            })
            .collect();
        let owned: Vec<Option<Owned>> = sending
            .iter()
            .map(|&i| match slots[i] {
                Slot::Send(owned) => owned,
                _ => None,
            })
            .collect();
        let changes_state = batch.iter().any(|op| op.changes_state());
        let outcomes = match self.gateway.call(&batch, &hooks, deadline).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                let settlement = if e.may_have_arrived() {
                    Settlement::Unknown
                } else {
                    Settlement::Released(e.to_string())
                };
                if let Some(claims) = &self.claims {
                    claims
                        .settle(
                            owned
                                .iter()
                                .flatten()
                                .map(|o| (*o, settlement.clone()))
                                .collect(),
                        )
                        .await;
                }
                return Err(upstream_error(&e, changes_state));
            }
        };
        let mut settlements = Vec::new();
        for (((&i, op), outcome), owned) in sending.iter().zip(&batch).zip(outcomes).zip(owned) {
            let result = match outcome {
                ItemOutcome::Done(output) => Ok(output),
                ItemOutcome::Rejected(text) => Err(Error::Rejected(text)),
                ItemOutcome::BadPayload(e) => Err(Error::Unavailable {
                    cause: UnavailableCause::BadResponse,
                    // The gateway said it succeeded; only its answer is unreadable.
                    outcome_unknown: op.changes_state(),
                    detail: e.to_string(),
                }),
            };
            if let Ok(Output::Sent(receipt)) = &result
                && let Some((_, channel, _)) = op.delivery()
            {
                METRICS
                    .billed_parts_total
                    .with_label_values(&[channel.as_str()])
                    .inc_by(u64::from(receipt.parts));
            }
            if let Some(owned) = owned {
                settlements.push((owned, self.settlement(op, &result)));
            }
            slots[i] = Slot::Done(result.map(|output| Executed {
                output,
                replayed: false,
            }));
        }
        if let Some(claims) = &self.claims {
            claims.settle(settlements).await;
        }
        Ok(())
    }

    /// How a keyed operation's claim ends, given the gateway's answer.
    fn settlement(&self, op: &Operation, result: &Result<Output, Error>) -> Settlement {
        match result {
            Ok(Output::Sent(receipt)) => Settlement::Accepted(
                AcceptedOutcome {
                    msg_id: Some(receipt.msg_id.clone()),
                    parts: receipt.parts,
                    payload: receipt.raw.clone(),
                    recovered: false,
                },
                self.sent_message(op, &receipt.msg_id),
            ),
            Ok(Output::VoiceOtp(call)) => Settlement::Accepted(
                AcceptedOutcome {
                    msg_id: None,
                    parts: 0,
                    payload: call.raw.clone(),
                    recovered: false,
                },
                None,
            ),
            Err(Error::Rejected(text)) => Settlement::Released(text.clone()),
            _ => Settlement::Unknown,
        }
    }

    /// The message reconcile tracks for an accepted send, when msgw tracks deliveries.
    fn sent_message(&self, op: &Operation, msg_id: &str) -> Option<SentMessage> {
        self.tracking.as_ref()?;
        let (client_id, channel, lifetime) = op.delivery()?;
        Some(SentMessage {
            client_id,
            msg_id: msg_id.to_owned(),
            channel,
            sent_at: Utc::now(),
            lifetime,
        })
    }
}

/// The error of a call whose earlier outcome is unknown and whose `status` query failed.
fn still_unknown(e: &UpstreamError) -> Error {
    match upstream_error(e, true) {
        Error::Unavailable { cause, detail, .. } => Error::Unavailable {
            cause,
            outcome_unknown: true,
            detail: format!(
                "the outcome of an earlier send with this id is unknown, and the gateway's status could not be asked: {detail}"
            ),
        },
        Error::DeadlineExceeded { .. } => Error::DeadlineExceeded {
            outcome_unknown: true,
        },
        other => other,
    }
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
    };
    Error::Unavailable {
        cause,
        outcome_unknown: changes_state && e.may_have_arrived(),
        detail: e.to_string(),
    }
}
