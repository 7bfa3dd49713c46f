//! "Send, then wait for the outcome" (`GetMessageStatus` with `wait_for_final`): a
//! message's status as soon as it is final, from what msgw holds or learns (delivery
//! webhooks in the event log, reconcile polls), with one gateway status query at most
//! (shared with other queries of the id, or fresh from one, see [`Queries`]); at the
//! deadline, the newest status known. It joins the event log and the queries, so it
//! belongs to neither.

use std::{collections::HashSet, sync::Arc, time::Duration};

use tokio::time::Instant;

use crate::core::domain::{AnswerSource, ClientId, Error, Waited};
use crate::core::events::{EventLog, Filter, Start};
use crate::core::held::{CallAccount, Held, HeldKind};
use crate::core::queries::Queries;

/// Longest wait when the caller set no deadline.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// What a waiter holds while it waits, beyond its stream: its subscription's task,
/// channel and place on the live fan-out.
pub const WAITER_COST: usize = 4 * 1024;

/// The status of message `id` once final, or the newest known at `until`, counted by
/// where it came from; what the wait holds is counted on `account`.
pub async fn final_status(
    log: &Arc<EventLog>,
    queries: &Queries,
    id: ClientId,
    until: Instant,
    account: CallAccount,
) -> Result<(Waited, AnswerSource), Error> {
    let _waiting = Held::new(&account, HeldKind::Waiter, WAITER_COST);
    let answered = wait(log, queries, id, until, account).await;
    if let Ok((_, source)) = &answered {
        queries.count_status(*source);
    }
    answered
}

async fn wait(
    log: &Arc<EventLog>,
    queries: &Queries,
    id: ClientId,
    until: Instant,
    account: CallAccount,
) -> Result<(Waited, AnswerSource), Error> {
    // Subscribed first: an event appended from now on arrives here; one appended
    // before is in the store.
    let filter = Filter {
        ids: HashSet::from([id]),
        ..Filter::default()
    };
    let mut live = log.subscribe(Start::Live, filter, account).await?;
    let mut newest: Option<(Waited, AnswerSource)> = None;
    if let Some(held) = log.last_event_of(id).await? {
        let held = Waited::from(held);
        if held.is_final {
            return Ok((held, AnswerSource::Store));
        }
        newest = Some((held, AnswerSource::Store));
    }
    let mut failure = None;
    match queries.look_up_status(id, Some(until)).await {
        Ok((report, source)) => {
            let answer = Waited {
                is_final: report.is_final(),
                report,
            };
            if answer.is_final {
                return Ok((answer, source));
            }
            newest = Some((answer, source));
        }
        // The gateway does not know the message, and msgw holds nothing of it.
        Err(e @ Error::MessageNotFound { .. }) if newest.is_none() => return Err(e),
        // The gateway is away: what arrives meanwhile can still answer.
        Err(e) => failure = Some(e),
    }
    loop {
        match tokio::time::timeout_at(until, live.recv()).await {
            Ok(Some(Ok(event))) => {
                // The filter asks for no list changes: only statuses come.
                let Some(event) = event.into_status() else {
                    continue;
                };
                let seen = Waited::from(event);
                if seen.is_final {
                    return Ok((seen, AnswerSource::Store));
                }
                newest = Some((seen, AnswerSource::Store));
            }
            // The log is closing (shutdown) or cannot be read: answer with what is known.
            Ok(Some(Err(e))) => {
                failure.get_or_insert(e);
                break;
            }
            Ok(None) | Err(_) => break,
        }
    }
    match (newest, failure) {
        (Some(newest), _) => Ok(newest),
        (None, Some(e)) => Err(e),
        (None, None) => Err(Error::Internal("no status and no error".into())),
    }
}
