//! Earlier outcomes that are unknown: before an envelope sends an id whose last
//! request was cut off, one `status` query for all such ids decides. Known → the send
//! happened (answered as a replay); not known inside the settle window → not yet
//! (nothing sent, retry later); not known after it → never arrived (sent now);
//! no answer → still unknown. A lookup that leaves the outcome unknown records when the
//! next may run (its backoff): until then retries are answered without asking. An id
//! sent now is first checked against the suppression list, as every send is.

use chrono::Utc;

use super::acquire::{Entry, Slot};
use super::answers;
use super::coalescer::{Call, Runner, latest};
use super::exactly_once::{self, Owned};
use super::lookups::{self, Resolving};
use super::optout::{opted_out, recipients, refuse_opted_out};
use super::{Tracking, settlement, upstream_error};
use crate::base::metrics::Metrics;
use crate::core::domain::{Error, Operation, Output};
use crate::core::ports::gateway::{Gateway, ItemOutcome, UpstreamError};
use crate::core::ports::store::{AcceptedOutcome, Lookups, Settlement};

/// What resolving takes of the envelope's engine: the gateway to ask, the delivery
/// tracking (whether a recovered send is tracked, the suppression list of one sent
/// now) and the metrics.
pub(super) struct Resolver<'a> {
    pub(super) gateway: &'a dyn Gateway,
    pub(super) tracking: Option<&'a Tracking>,
    pub(super) metrics: &'a Metrics,
}

/// Asks the gateway's `status` for every id whose earlier outcome is unknown, in one
/// request, and settles each: known → accepted (answered as a replay); not known →
/// sent now (or not yet, inside the settle window); no answer → still unknown.
pub(super) async fn resolve_unknown<R: Runner>(
    engine: Resolver<'_>,
    entries: &mut [Entry],
    calls: &[&Call<R>],
    settlements: &mut Vec<(Owned, Settlement)>,
) {
    let resolving: Vec<(usize, Owned, Resolving)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e.slot {
            Slot::Resolve(owned, resolving) => Some((i, owned, resolving)),
            Slot::Send(_) | Slot::Wait(_) | Slot::Done(_) => None,
        })
        .collect();
    if resolving.is_empty() {
        return;
    }
    let queries: Vec<Operation> = resolving
        .iter()
        .map(|(_, owned, _)| Operation::GetMessageStatus(owned.id))
        .collect();
    // Only queries: the request may end with the last caller waiting for it.
    let deadline = latest(resolving.iter().map(|(i, ..)| calls[entries[*i].call]));
    let answers = engine
        .gateway
        .call(
            &queries.iter().collect::<Vec<_>>(),
            &vec![None; queries.len()],
            deadline,
        )
        .await;
    let mut resolution = Resolution {
        engine: &engine,
        settlements,
        sending_now: Vec::new(),
    };
    for (n, (i, owned, resolving)) in resolving.into_iter().enumerate() {
        let answer = answers.as_ref().map(|items| items.get(n));
        let claimed_at = calls[entries[i].call].claimed_at();
        entries[i].slot = resolution.slot(i, &entries[i].op, claimed_at, owned, resolving, answer);
    }
    let Resolution {
        sending_now,
        settlements,
        ..
    } = resolution;
    if !sending_now.is_empty() {
        let phones = recipients(sending_now.iter().map(|&i| &entries[i]));
        let opted_out = opted_out(engine.tracking, phones).await;
        for i in sending_now {
            refuse_opted_out(
                engine.metrics,
                std::slice::from_mut(&mut entries[i]),
                &opted_out,
                settlements,
            );
        }
    }
}

/// The settlements of one `status` request, and the entries it found to send now.
struct Resolution<'a> {
    engine: &'a Resolver<'a>,
    settlements: &'a mut Vec<(Owned, Settlement)>,
    sending_now: Vec<usize>,
}

impl Resolution<'_> {
    /// The slot of entry `i` (operation `op`, claimed at `claimed_at`) once the
    /// gateway's `answer` about its earlier request is known, its claim's settlement
    /// recorded.
    fn slot(
        &mut self,
        i: usize,
        op: &Operation,
        claimed_at: Option<tokio::time::Instant>,
        owned: Owned,
        resolving: Resolving,
        answer: Result<Option<&ItemOutcome>, &UpstreamError>,
    ) -> Slot {
        let settle_until = resolving.settle_until;
        match answer {
            Ok(Some(ItemOutcome::Done(Output::Status(report)))) => {
                let outcome = AcceptedOutcome::recovered(report);
                let track = report.msg_id.as_ref().and_then(|msg_id| {
                    settlement::tracked(self.engine.tracking.is_some(), op, msg_id)
                });
                self.settlements
                    .push((owned, Settlement::Accepted(outcome.clone(), track)));
                tracing::info!(
                    client_id = owned.id.get(),
                    msg_id = report.msg_id.as_deref().unwrap_or_default(),
                    "unknown outcome resolved: the gateway has the message"
                );
                Slot::Done(answers::replay(self.engine.gateway, op, owned.id, outcome))
            }
            // The gateway does not know the id, but the earlier request may still be on
            // its way or in its queue: nothing proves it lost yet.
            Ok(Some(ItemOutcome::NotFound { .. })) if Utc::now() < settle_until => {
                self.unresolved(owned, resolving, true);
                tracing::info!(
                    client_id = owned.id.get(),
                    %settle_until,
                    "unknown outcome: the gateway does not know the message yet; not sending inside the settle window"
                );
                Slot::Done(Err(answers::settling(owned.id, settle_until)))
            }
            // The gateway does not know the id after the window: the earlier request
            // never arrived, so sending now is the first send, but only inside the
            // claim's time (the status request took some of it): past that, the claim
            // goes back and the call claims anew.
            Ok(Some(ItemOutcome::NotFound { .. })) => {
                if claimed_at.is_some_and(|at| at.elapsed() > exactly_once::HELD_FOR) {
                    self.settlements.push((
                        owned,
                        Settlement::Released(
                            "the gateway never received the earlier request".into(),
                        ),
                    ));
                    Slot::Wait(Utc::now())
                } else {
                    self.sending_now.push(i);
                    Slot::Send(Some(owned))
                }
            }
            // Refused for another reason (an outage, a limit): that proves nothing about
            // the earlier request; ask again after the backoff.
            Ok(Some(ItemOutcome::Rejected(text))) => {
                let lookups = self.unresolved(owned, resolving, false);
                let failed = format!("it refused: {text}");
                Slot::Done(Err(lookups::lookup_later(owned.id, lookups, Some(&failed))))
            }
            // An answer that is not a status, or none for this item: nothing learnt.
            Ok(Some(ItemOutcome::Done(_) | ItemOutcome::BadPayload(_)) | None) => {
                let lookups = self.unresolved(owned, resolving, false);
                let failed = "its answer is unreadable";
                Slot::Done(Err(lookups::lookup_later(owned.id, lookups, Some(failed))))
            }
            Err(e) => {
                let lookups = self.unresolved(owned, resolving, false);
                Slot::Done(Err(still_unknown(owned, lookups, e)))
            }
        }
    }

    /// The lookup told nothing: the outcome stays unknown, and the next lookup waits
    /// for the backoff (`not_yet`: the gateway does not know the message).
    fn unresolved(&mut self, owned: Owned, resolving: Resolving, not_yet: bool) -> Lookups {
        let settle_until = resolving.settle_until;
        let lookups = lookups::looked_up(resolving, not_yet);
        self.settlements.push((
            owned,
            Settlement::Unresolved {
                settle_until,
                lookups,
            },
        ));
        lookups
    }
}

/// The error of a call whose earlier outcome is unknown and whose `status` query failed
/// (the lookups of its claim now at `lookups`).
fn still_unknown(owned: Owned, lookups: Lookups, e: &UpstreamError) -> Error {
    match upstream_error(e, true) {
        Error::Unavailable { detail, .. } => {
            let failed = format!("it could not be asked: {detail}");
            lookups::lookup_later(owned.id, lookups, Some(&failed))
        }
        Error::DeadlineExceeded { .. } => Error::DeadlineExceeded {
            outcome_unknown: true,
        },
        other => other,
    }
}
