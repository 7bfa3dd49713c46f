//! "Send, then wait for the outcome": a message's status as soon as it is final, from
//! what msgw holds or learns (delivery webhooks, reconcile polls), with one gateway
//! status query at most; at the deadline, the newest status known.

use std::{collections::HashSet, sync::Arc, time::Duration};

use tokio::time::Instant;

use super::{EventLog, Filter, Start};
use crate::dispatch::Dispatcher;
use crate::domain::{ClientId, Error, Operation, Output, StatusEvent, StatusReport};

/// Longest wait when the caller set no deadline.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// A status, and whether it is final.
#[derive(Debug, Clone, PartialEq)]
pub struct Waited {
    /// The status.
    pub report: StatusReport,
    /// Whether it will not change any more.
    pub is_final: bool,
}

impl From<StatusEvent> for Waited {
    fn from(e: StatusEvent) -> Self {
        Self {
            is_final: e.event.is_final(),
            report: e.event.report.into(),
        }
    }
}

/// The status of message `id` once final, or the newest known at `until`.
pub async fn final_status(
    log: &Arc<EventLog>,
    dispatcher: &Dispatcher,
    id: ClientId,
    until: Instant,
) -> Result<Waited, Error> {
    // Subscribed first: an event appended from now on arrives here; one appended
    // before is in the store.
    let filter = Filter {
        ids: HashSet::from([id.get()]),
        ..Filter::default()
    };
    let mut live = log.subscribe(Start::Live, filter).await?;
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
