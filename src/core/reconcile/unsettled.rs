//! Claims whose outcome nobody resolved: a send cut by the upstream timeout or a lost
//! connection whose caller never retried, or one left in flight by a replica that
//! stopped. Once the settle window is over (plus the reconcile delay), one `status`
//! query per group decides: the gateway has the message → accepted (tracked, its
//! status an event, so the caller still gets its delivery events); it does not →
//! released (nothing was sent; a retry sends). Nothing is ever sent from here.

use std::time::Duration;

use chrono::Utc;

use super::{Reconciler, delivery_report, store_error};
use crate::core::dispatch::Owned;
use crate::core::domain::{
    ClientId, Error, EventSource, NewEvent, Operation, Output, Priority, StatusReport,
};
use crate::core::ports::store::{
    AcceptedOutcome, ClaimChange, ClaimReply, SentMessage, Settlement,
};

/// How long a claim whose `status` query failed waits before reconcile asks again.
const RETRY: Duration = Duration::from_secs(30);

impl Reconciler {
    /// Resolves one group of claims left open past their settle window; returns how
    /// many were found.
    pub async fn resolve_unsettled(&self) -> Result<usize, Error> {
        let Some(claims) = self.dispatcher.claims() else {
            return Ok(0);
        };
        let now = Utc::now();
        let delay =
            chrono::Duration::from_std(self.config.first_after).unwrap_or(chrono::Duration::MAX);
        let open = self
            .store
            .unsettled_claims(
                now - delay,
                claims.in_flight_before(now) - delay,
                self.poll_batch(),
            )
            .await
            .map_err(store_error)?;
        if open.is_empty() {
            return Ok(0);
        }
        // Taking a claim over first: of several replicas, one resolves it, and a caller
        // retrying meanwhile waits for this outcome instead of asking too.
        let take_overs: Vec<ClaimChange> = open
            .iter()
            .map(|(id, record)| ClaimChange::TakeOver {
                id: *id,
                fingerprint: record.fingerprint,
                attempt: record.attempt,
                caller: record.caller.clone(),
                at: now,
            })
            .collect();
        let replies = claims.apply(&take_overs).await.map_err(store_error)?;
        let owned: Vec<Owned> = open
            .iter()
            .zip(replies)
            .filter_map(|((id, _), reply)| match reply {
                ClaimReply::Claimed { attempt } => Some(Owned { id: *id, attempt }),
                _ => None,
            })
            .collect();
        if owned.is_empty() {
            return Ok(open.len());
        }
        let queries = owned
            .iter()
            .map(|o| Operation::GetMessageStatus(o.id))
            .collect();
        let answers = match self
            .dispatcher
            .execute_all(queries, Priority::Bulk.into(), None, None)
            .await
        {
            Ok(answers) => answers,
            Err(e) => {
                let retry_at = Utc::now() + chrono::Duration::from_std(RETRY).unwrap_or_default();
                let still = owned
                    .iter()
                    .map(|o| {
                        let unknown = Settlement::Unknown {
                            settle_until: retry_at,
                        };
                        (*o, unknown)
                    })
                    .collect();
                // Logged when it fails; the next round finds these claims again.
                let _ = claims.settle(still).await;
                return Err(e);
            }
        };
        let mut settlements = Vec::with_capacity(owned.len());
        let mut found = Vec::new();
        for (o, answer) in owned.iter().zip(answers) {
            let settlement = match answer.map(|executed| executed.output) {
                Ok(Output::Status(report)) => {
                    tracing::info!(
                        client_id = o.id.get(),
                        msg_id = report.msg_id.as_deref().unwrap_or_default(),
                        "reconcile: unknown outcome resolved: the gateway has the message"
                    );
                    let settlement = accepted(o.id, &report);
                    found.push(report);
                    settlement
                }
                Err(Error::MessageNotFound { .. }) => {
                    tracing::info!(
                        client_id = o.id.get(),
                        "reconcile: unknown outcome resolved: the gateway never received the send; a retry with this id sends it"
                    );
                    Settlement::Released(
                        "the gateway did not know the message after the settle window: the request never arrived".into(),
                    )
                }
                other => {
                    tracing::warn!(
                        client_id = o.id.get(),
                        answer = ?other.err(),
                        "reconcile: the outcome of a cut send is still unknown; asking again later"
                    );
                    Settlement::Unknown {
                        settle_until: Utc::now()
                            + chrono::Duration::from_std(RETRY).unwrap_or_default(),
                    }
                }
            };
            settlements.push((*o, settlement));
        }
        // The tracked message exists before its status event, so the event marks it final.
        // A failure is logged; the next round finds these claims again.
        let _ = claims.settle(settlements).await;
        for report in found {
            let event = NewEvent {
                report: delivery_report(report),
                received_at: crate::core::domain::received_now(),
                source: EventSource::Poll,
            };
            if let Err(e) = self.events.append(event).await {
                tracing::error!(error = %e, "reconcile: cannot store the status of a resolved send");
            }
        }
        Ok(open.len())
    }
}

/// The settlement of a send the gateway turned out to have: its answer recovered from
/// `status`, and the message tracked until its status is final.
fn accepted(id: ClientId, report: &StatusReport) -> Settlement {
    let outcome = AcceptedOutcome::recovered(report);
    let track = report.msg_id.as_ref().and_then(|msg_id| {
        let channel = report.channel?;
        Some(SentMessage {
            client_id: id,
            msg_id: msg_id.clone(),
            channel,
            sent_at: Utc::now(),
            lifetime: channel.default_lifetime(),
            // Reconcile learns of the send without its request: its number is unknown,
            // so replies to it opt nobody out.
            phone: None,
        })
    });
    Settlement::Accepted(outcome, track)
}
