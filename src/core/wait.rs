//! "Send, then wait for the outcome" (`GetMessageStatus` with `wait_for_final`): a
//! message's status as soon as it is final, from what msgw holds or learns (delivery
//! webhooks in the event log, reconcile polls), with one gateway status query at most;
//! at the deadline, the newest status known. It joins the event log and dispatch, so
//! it belongs to neither.

use std::{collections::HashSet, sync::Arc, time::Duration};

use tokio::time::Instant;

use crate::core::dispatch::Dispatcher;
use crate::core::domain::{ClientId, Error, Operation, Output, Waited};
use crate::core::events::{EventLog, Filter, Start};
use crate::core::held::{CallAccount, Held, HeldKind};

/// Longest wait when the caller set no deadline.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// What a waiter holds while it waits, beyond its stream: its subscription's task,
/// channel and place on the live fan-out.
pub const WAITER_COST: usize = 4 * 1024;

/// The status of message `id` once final, or the newest known at `until`; what the
/// wait holds is counted on `account`.
pub async fn final_status(
    log: &Arc<EventLog>,
    dispatcher: &Dispatcher,
    id: ClientId,
    until: Instant,
    account: CallAccount,
) -> Result<Waited, Error> {
    let _waiting = Held::new(&account, HeldKind::Waiter, WAITER_COST);
    // Subscribed first: an event appended from now on arrives here; one appended
    // before is in the store.
    let filter = Filter {
        ids: HashSet::from([id]),
        ..Filter::default()
    };
    let mut live = log.subscribe(Start::Live, filter, account).await?;
    let mut newest: Option<Waited> = None;
    if let Some(held) = log.last_event_of(id).await? {
        let held = Waited::from(held);
        if held.is_final {
            return Ok(held);
        }
        newest = Some(held);
    }
    let mut failure = None;
    match dispatcher
        .execute(Operation::GetMessageStatus(id), Some(until))
        .await
        .map(|executed| executed.output)
    {
        Ok(Output::Status(report)) => {
            let answer = Waited {
                is_final: report.is_final(),
                report,
            };
            if answer.is_final {
                return Ok(answer);
            }
            newest = Some(answer);
        }
        Ok(other) => {
            return Err(Error::Internal(format!(
                "a status query answered {other:?}"
            )));
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
                    return Ok(seen);
                }
                newest = Some(seen);
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
