//! Earlier outcomes that are unknown: before an envelope sends an id whose last
//! request was cut off, one `status` query for all such ids decides. Known → the send
//! happened (answered as a replay); not known inside the settle window → not yet
//! (nothing sent, retry later); not known after it → never arrived (sent now);
//! no answer → still unknown. A lookup that leaves the outcome unknown records when the
//! next may run (its backoff): until then retries are answered without asking. An id
//! sent now is first checked against the suppression list, as every send is.

use chrono::Utc;

use super::acquire::{Entry, Slot};
use super::claims::{self, Owned};
use super::envelope::{Caller, Engine, latest};
use super::lookups::{self, Resolving};
use super::optout::{opted_out, recipients, refuse_opted_out};
use super::upstream_error;
use crate::core::domain::{Error, Operation, Output};
use crate::core::ports::gateway::{ItemOutcome, UpstreamError};
use crate::core::ports::store::{AcceptedOutcome, Lookups, Settlement};

impl Engine {
    /// Asks the gateway's `status` for every id whose earlier outcome is unknown, in
    /// one request: known → accepted (answered as a replay); not known → sent now;
    /// no answer → still unknown.
    pub(super) async fn resolve_unknown(
        &self,
        entries: &mut [Entry],
        callers: &[Caller],
        settlements: &mut Vec<(Owned, Settlement)>,
    ) {
        let resolving: Vec<(usize, Owned, Resolving)> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.slot {
                Slot::Resolve(owned, resolving) => Some((i, owned, resolving)),
                _ => None,
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
        let deadline = latest(resolving.iter().map(|(i, ..)| &callers[entries[*i].call]));
        let answers = self
            .gateway
            .call(
                &queries.iter().collect::<Vec<_>>(),
                &vec![None; queries.len()],
                deadline,
            )
            .await;
        let mut sending_now = Vec::new();
        for (n, (i, owned, resolving)) in resolving.into_iter().enumerate() {
            let op = &entries[i].op;
            let settle_until = resolving.settle_until;
            // The lookup told nothing: the outcome stays unknown, and the next lookup
            // waits for the backoff (`not_yet`: the gateway does not know the message).
            let mut unresolved = |not_yet: bool| {
                let lookups = lookups::looked_up(resolving, not_yet);
                settlements.push((
                    owned,
                    Settlement::Unresolved {
                        settle_until,
                        lookups,
                    },
                ));
                lookups
            };
            entries[i].slot = match &answers {
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
                            .and_then(|msg_id| self.sent_message(op, msg_id));
                        settlements.push((owned, Settlement::Accepted(outcome.clone(), track)));
                        tracing::info!(
                            client_id = owned.id.get(),
                            msg_id = report.msg_id.as_deref().unwrap_or_default(),
                            "unknown outcome resolved: the gateway has the message"
                        );
                        Slot::Done(claims::replay(&*self.gateway, op, owned.id, outcome))
                    }
                    // The gateway does not know the id, but the earlier request may
                    // still be on its way or in its queue: nothing proves it lost yet.
                    Some(ItemOutcome::NotFound(_)) if Utc::now() < settle_until => {
                        unresolved(true);
                        tracing::info!(
                            client_id = owned.id.get(),
                            %settle_until,
                            "unknown outcome: the gateway does not know the message yet; not sending inside the settle window"
                        );
                        Slot::Done(Err(claims::settling(owned.id, settle_until)))
                    }
                    // The gateway does not know the id after the window: the earlier
                    // request never arrived, so sending now is the first send, but
                    // only inside the claim's time (the status request took some of
                    // it): past that, the claim goes back and the call claims anew.
                    Some(ItemOutcome::NotFound(_)) => {
                        let claimed_at = callers[entries[i].call].call.claimed_at();
                        if claimed_at.is_some_and(|at| at.elapsed() > claims::HELD_FOR) {
                            settlements.push((
                                owned,
                                Settlement::Released(
                                    "the gateway never received the earlier request".into(),
                                ),
                            ));
                            Slot::Wait(Utc::now())
                        } else {
                            sending_now.push(i);
                            Slot::Send(Some(owned))
                        }
                    }
                    // Refused for another reason (an outage, a limit): that proves
                    // nothing about the earlier request; ask again after the backoff.
                    Some(ItemOutcome::Rejected(text)) => {
                        let lookups = unresolved(false);
                        let failed = format!("it refused: {text}");
                        Slot::Done(Err(lookups::lookup_later(owned.id, lookups, Some(&failed))))
                    }
                    _ => {
                        let lookups = unresolved(false);
                        let failed = "its answer is unreadable";
                        Slot::Done(Err(lookups::lookup_later(owned.id, lookups, Some(failed))))
                    }
                },
                Err(e) => {
                    let lookups = unresolved(false);
                    Slot::Done(Err(still_unknown(owned, lookups, e)))
                }
            };
        }
        if !sending_now.is_empty() {
            let phones = recipients(sending_now.iter().map(|&i| &entries[i]));
            let opted_out = opted_out(self.tracking.as_ref(), phones).await;
            for i in sending_now {
                refuse_opted_out(
                    &self.metrics,
                    std::slice::from_mut(&mut entries[i]),
                    &opted_out,
                    settlements,
                );
            }
        }
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
