//! One envelope, start to end: the calls the coalescer took are claimed together (one
//! store call, beside one read of the suppression list), unknown earlier outcomes are
//! resolved by one `status` request, what this envelope now owns goes to the gateway
//! in one request, and every outcome, with the messages reconcile tracks, is recorded
//! in one transaction.
//!
//! A request with a send in it runs to its answer or the upstream timeout, whatever
//! its callers' deadlines: once it has left, only its recorded outcome keeps a retry
//! from sending the same id again.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::SemaphorePermit;

use super::acquire::{Entry, Slot, acquire, release_unwanted, unsent};
use super::coalescer::{Call, Runner, Slot as InFlight, latest};
use super::exactly_once::{self, Claims, Owned};
use super::optout::{recipients, refuse_opted_out};
use super::resolve::{Resolver, resolve_unknown};
use super::settlement;
use super::{Executed, Tracking, upstream_error};
use crate::base::metrics::Metrics;
use crate::core::domain::{AnswerSource, Error, Operation, Output, UnavailableCause};
use crate::core::ports::gateway::{Gateway, ItemOutcome};
use crate::core::ports::store::{SentMessage, Settlement};

/// The answer to one operation of a call.
#[derive(Debug)]
// Lives only between an envelope and its caller; boxing would cost an allocation per operation.
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    /// Answered.
    Done(Result<Executed, Error>),
    /// Another call owns the id's claim: wait for its outcome (at most until
    /// `stale_at`), then call again with `op`.
    Wait {
        /// The operation, handed back.
        op: Operation,
        /// When the other call's claim counts as unknown.
        stale_at: DateTime<Utc>,
    },
}

/// Runs envelopes against the gateway, with claims and delivery tracking when set.
#[derive(Debug)]
pub struct Engine {
    pub(super) gateway: Arc<dyn Gateway>,
    pub(super) tracking: Option<Tracking>,
    pub(super) claims: Option<Claims>,
    pub(super) metrics: Arc<Metrics>,
    /// Envelopes recording their outcomes after their gateway request, at most as many
    /// as requests in flight: a slow store holds the slots, so the queue fills and
    /// refuses instead of outcomes piling up in memory.
    pub(super) recording: tokio::sync::Semaphore,
}

/// One call of the envelope: where its answer goes, and whether it failed as a whole.
pub(super) struct Caller {
    pub(super) call: Call<Engine>,
    failed: Option<Error>,
}

/// What a prepared call holds until its envelope runs: the slot of each of its
/// operations, with the claims it owns (empty when it needed no preparation).
#[derive(Default)]
pub struct Held(Vec<Slot>);

impl Engine {
    /// Takes the operations out of `call` (number `index` of its group) as entries.
    fn entries(&self, index: usize, call: &mut Call<Engine>) -> Vec<Entry> {
        let held = std::mem::take(&mut call.held).0;
        // Keys are only needed to claim: a call that holds its slots was claimed.
        let claiming = self.claims.is_some() && held.is_empty();
        let mut held = held.into_iter();
        std::mem::take(&mut call.ops)
            .into_iter()
            .map(|op| {
                let key = op.idempotency_key().filter(|_| claiming).map(|id| {
                    match (&call.confidential, call.scheduled) {
                        (Some(confidential), _) => {
                            (id, confidential.fingerprint(&*self.gateway, &op))
                        }
                        (None, Some(scheduled)) => (
                            id,
                            super::scheduled_fingerprint(&*self.gateway, &op, scheduled.send_at),
                        ),
                        (None, None) => (id, exactly_once::fingerprint(&*self.gateway, &op)),
                    }
                });
                Entry {
                    call: index,
                    op,
                    caller: call.caller.clone(),
                    key,
                    confidential: call.confidential.clone(),
                    leaving: call.scheduled.is_some_and(|s| s.leaving),
                    slot: held.next().unwrap_or(Slot::Send(None)),
                }
            })
            .collect()
    }
}

impl Runner for Engine {
    type Answer = Answer;
    type Held = Held;

    fn preparations(&self) -> usize {
        self.claims.as_ref().map_or(1, Claims::writers)
    }

    fn prepares(&self, call: &Call<Self>) -> bool {
        self.claims.is_some() && call.ops.iter().any(|op| op.idempotency_key().is_some())
    }

    /// Claims the ids of a group of calls in one store write (a second one only for
    /// take-overs), answers the calls left with nothing to send (replays, conflicts,
    /// waits) and returns the rest, holding their claims.
    async fn prepare(&self, mut calls: Vec<Call<Self>>) -> Vec<Call<Self>> {
        let Some(claims) = &self.claims else {
            return calls;
        };
        let mut entries = Vec::new();
        for (i, call) in calls.iter_mut().enumerate() {
            entries.extend(self.entries(i, call));
        }
        // The suppression list is read by the claims' write: one store call for the
        // group. Without delivery tracking msgw keeps no list.
        let phones = match self.tracking {
            Some(_) => recipients(&entries),
            None => Vec::new(),
        };
        let opted_out = acquire(claims, &mut entries, &phones).await;
        let mut settlements = Vec::new();
        refuse_opted_out(&self.metrics, &mut entries, &opted_out, &mut settlements);
        release_unwanted(
            &mut entries,
            &calls.iter().collect::<Vec<_>>(),
            &mut settlements,
        );
        claims.settle_later(settlements);
        let mut slots: Vec<Vec<Slot>> = calls.iter().map(|_| Vec::new()).collect();
        for entry in entries {
            calls[entry.call].ops.push(entry.op);
            slots[entry.call].push(entry.slot);
        }
        let mut ready = Vec::with_capacity(calls.len());
        for (mut call, slots) in calls.into_iter().zip(slots) {
            if slots
                .iter()
                .any(|s| matches!(s, Slot::Send(_) | Slot::Resolve(..)))
            {
                call.held = Held(slots);
                ready.push(call);
                continue;
            }
            let answers = std::mem::take(&mut call.ops)
                .into_iter()
                .zip(slots)
                .map(|(op, slot)| answer_of(op, slot))
                .collect();
            let _ = call.reply.send(Ok(answers));
        }
        ready
    }

    /// A claim counts as abandoned `STALE_MARGIN` past the upstream timeout after it
    /// was made: then another call may take it over and, once `status` says the gateway
    /// never saw the id, send it. So a claimed call leaves well inside that margin, or
    /// not with that claim: its request, however long, ends before anyone may take over.
    fn held_for(&self) -> Option<std::time::Duration> {
        self.claims.as_ref().map(|_| exactly_once::HELD_FOR)
    }

    fn expires(&self, call: &Call<Self>) -> bool {
        call.held.0.iter().any(|slot| slot.owned().is_some())
    }

    /// Gives back the claims of calls that waited for a slot too long and sends their
    /// callers round again: to claim anew, behind what queued meanwhile.
    fn expire(&self, calls: Vec<Call<Self>>) {
        let mut settlements = Vec::new();
        for mut call in calls {
            let slots = std::mem::take(&mut call.held).0;
            let answers = std::mem::take(&mut call.ops)
                .into_iter()
                .zip(slots)
                .map(|(op, slot)| {
                    settlements.extend(slot.given_back());
                    match slot {
                        Slot::Done(result) => Answer::Done(result),
                        Slot::Wait(stale_at) => Answer::Wait { op, stale_at },
                        Slot::Send(_) | Slot::Resolve(..) => Answer::Wait {
                            op,
                            stale_at: Utc::now(),
                        },
                    }
                })
                .collect();
            let _ = call.reply.send(Ok(answers));
        }
        if let Some(claims) = &self.claims {
            claims.settle_later(settlements);
        }
    }

    fn release(&self, held: Vec<Held>) {
        let Some(claims) = &self.claims else {
            return;
        };
        let settlements = held
            .into_iter()
            .flat_map(|held| held.0)
            .filter_map(|slot| slot.given_back())
            .collect();
        claims.settle_later(settlements);
    }

    async fn run(&self, calls: Vec<Call<Self>>, in_flight: InFlight<Self>) {
        let mut callers = Vec::with_capacity(calls.len());
        let mut entries = Vec::new();
        for (i, mut call) in calls.into_iter().enumerate() {
            entries.extend(self.entries(i, &mut call));
            callers.push(Caller { call, failed: None });
        }
        let mut settlements = Vec::new();
        if self.claims.is_some() {
            let calls: Vec<&Call<Engine>> = callers.iter().map(|c| &c.call).collect();
            release_unwanted(&mut entries, &calls, &mut settlements);
            let parts = Resolver {
                gateway: &*self.gateway,
                tracking: self.tracking.as_ref(),
                metrics: &self.metrics,
            };
            resolve_unknown(parts, &mut entries, &calls, &mut settlements).await;
        }
        // Held while the outcomes are recorded.
        let _recording = self
            .send(&mut entries, &mut callers, &mut settlements, in_flight)
            .await;
        if let Some(claims) = &self.claims
            && let Err(unrecorded) = claims.settle(settlements).await
        {
            outcome_unrecorded(&mut entries, &unrecorded);
        }
        answer(entries, callers);
    }
}

impl Engine {
    /// Sends every operation still to send in one request; an envelope failure fails
    /// each call that had an operation in it.
    async fn send(
        &self,
        entries: &mut [Entry],
        callers: &mut [Caller],
        settlements: &mut Vec<(Owned, Settlement)>,
        in_flight: InFlight<Engine>,
    ) -> Option<SemaphorePermit<'_>> {
        // Decided once per call, atomically against the caller giving up at its deadline.
        let leaving: Vec<bool> = callers.iter().map(|c| c.call.begin_send()).collect();
        let mut sending = Vec::new();
        for (i, entry) in entries.iter_mut().enumerate() {
            let Slot::Send(owned) = entry.slot else {
                continue;
            };
            if leaving[entry.call] {
                sending.push(i);
                continue;
            }
            if let Some(owned) = owned {
                settlements.push((owned, unsent()));
            }
            entry.slot = Slot::Done(Err(Error::DeadlineExceeded {
                outcome_unknown: false,
            }));
        }
        if sending.is_empty() {
            return None;
        }
        let batch: Vec<&Operation> = sending.iter().map(|&i| &entries[i].op).collect();
        let hooks: Vec<Option<String>> = batch
            .iter()
            .map(|op| {
                let tracking = self.tracking.as_ref().filter(|_| op.takes_hook())?;
                Some(tracking.hooks.status_url(op.client_id()?))
            })
            .collect();
        // A request that changes state is never cut for a caller's deadline: it runs to
        // its answer or the upstream timeout, and its outcome is recorded. Queries end
        // with the last caller waiting for them.
        let deadline = if batch.iter().any(|op| op.changes_state()) {
            None
        } else {
            latest(sending.iter().map(|&i| &callers[entries[i].call].call))
        };
        let answered = self.gateway.call(&batch, &hooks, deadline).await;
        // The gateway request is over: the next envelope may go while this one records.
        let recording = self.recording.acquire().await.ok();
        drop(in_flight);
        let outcomes = match answered {
            Ok(outcomes) => outcomes,
            Err(e) => {
                let settlement = if e.may_have_arrived() {
                    Settlement::Unknown {
                        settle_until: self.settle_until(),
                    }
                } else {
                    Settlement::Released(e.to_string())
                };
                let mut changes_state = vec![false; callers.len()];
                for &i in &sending {
                    changes_state[entries[i].call] |= entries[i].op.changes_state();
                    if let Slot::Send(Some(owned)) = entries[i].slot {
                        settlements.push((owned, settlement.clone()));
                    }
                }
                for (c, caller) in callers.iter_mut().enumerate() {
                    if sending.iter().any(|&i| entries[i].call == c) {
                        caller.failed = Some(upstream_error(&e, changes_state[c]));
                    }
                }
                return recording;
            }
        };
        for (&i, outcome) in sending.iter().zip(outcomes) {
            let entry = &mut entries[i];
            let result = match outcome {
                ItemOutcome::Done(output) => Ok(output),
                // A status query the gateway refuses as "not found" asks for an id it
                // does not know (the gateway adapter tells); any other refusal is only a
                // refusal.
                ItemOutcome::Rejected(text) => Err(Error::Rejected(text)),
                ItemOutcome::NotFound { id, text } => Err(Error::MessageNotFound {
                    id: id.get(),
                    upstream_error: text,
                }),
                ItemOutcome::BadPayload(e) => Err(Error::Unavailable {
                    cause: UnavailableCause::BadResponse,
                    // The gateway said it succeeded; only its answer is unreadable.
                    outcome_unknown: entry.op.changes_state(),
                    detail: e.to_string(),
                }),
            };
            if let Ok(Output::Sent(receipt)) = &result
                && let Some((_, channel, _)) = entry.op.delivery()
            {
                self.metrics
                    .dispatch
                    .billed_parts_total
                    .with_label_values(&[channel.as_str()])
                    .inc_by(u64::from(receipt.parts));
            }
            if let Slot::Send(Some(owned)) = entry.slot {
                let settlement = settlement::of(
                    &result,
                    || self.settle_until(),
                    |msg_id| self.sent_message(&entry.op, msg_id),
                );
                let settlement = match &entry.confidential {
                    Some(confidential) => confidential.at_rest(settlement),
                    None => settlement,
                };
                settlements.push((owned, settlement));
            }
            let source = (!entry.op.changes_state()).then_some(AnswerSource::Lookup);
            entry.slot = Slot::Done(result.map(|output| Executed {
                output,
                replayed: false,
                source,
            }));
        }
        recording
    }

    /// The end of the settle window of a request cut now.
    fn settle_until(&self) -> DateTime<Utc> {
        self.claims
            .as_ref()
            .map_or_else(Utc::now, Claims::settle_until)
    }

    /// The message reconcile tracks for an accepted send, when msgw tracks deliveries.
    fn sent_message(&self, op: &Operation, msg_id: &str) -> Option<SentMessage> {
        settlement::tracked(self.tracking.is_some(), op, msg_id)
    }
}

/// The answer to one operation, from where it stands.
fn answer_of(op: Operation, slot: Slot) -> Answer {
    match slot {
        Slot::Done(result) => Answer::Done(result),
        Slot::Wait(stale_at) => Answer::Wait { op, stale_at },
        Slot::Send(_) | Slot::Resolve(..) => {
            Answer::Done(Err(Error::Internal("operation left unanswered".into())))
        }
    }
}

/// Turns the successes of `unrecorded` claims into "outcome unknown": the gateway
/// carried them out, but the store does not hold their outcome, so a retry must go
/// through the claim (which asks the gateway's `status`), not trust this answer.
fn outcome_unrecorded(entries: &mut [Entry], unrecorded: &[Owned]) {
    for entry in entries {
        let owned = entry
            .op
            .idempotency_key()
            .is_some_and(|id| unrecorded.iter().any(|o| o.id == id));
        if owned && matches!(entry.slot, Slot::Done(Ok(_))) {
            entry.slot = Slot::Done(Err(Error::Unavailable {
                cause: UnavailableCause::Store,
                outcome_unknown: true,
                detail: "the gateway took the request, but msgw could not record its outcome: retry with the same id".into(),
            }));
        }
    }
}

/// Sends each call its answers: one per operation in order, or its failure.
fn answer(entries: Vec<Entry>, callers: Vec<Caller>) {
    let mut answers: Vec<Vec<Answer>> = callers.iter().map(|_| Vec::new()).collect();
    for entry in entries {
        answers[entry.call].push(answer_of(entry.op, entry.slot));
    }
    for (caller, answers) in callers.into_iter().zip(answers) {
        let reply = match caller.failed {
            Some(e) => Err(e),
            None => Ok(answers),
        };
        let _ = caller.call.reply.send(reply);
    }
}
