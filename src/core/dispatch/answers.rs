//! What a call is answered from its claim, or when the claims cannot be had: a replay
//! of the stored answer, a send still in flight, a settle window still open, the store
//! or the suppression list unavailable.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Executed;
use crate::core::domain::{
    ClientId, Error, Idempotency, Operation, Output, SendReceipt, UnavailableCause,
};
use crate::core::ports::gateway::Gateway;
use crate::core::ports::store::{AcceptedOutcome, StoreError};

/// The stored answer of an accepted operation, as its first call got it.
pub fn replay(
    gateway: &dyn Gateway,
    op: &Operation,
    id: ClientId,
    outcome: AcceptedOutcome,
) -> Result<Executed, Error> {
    let output = if !outcome.recovered {
        gateway.parse_output(op, outcome.payload).map_err(|e| {
            Error::Internal(format!("the stored answer of id {id} is unreadable: {e}"))
        })?
    } else if op.facts().idempotency == Idempotency::ClientIdAnswerOnce {
        return Err(Error::ResultLost(format!(
            "the voice OTP call with id {id} was placed, but the gateway's answer with its code was lost; place a new call with a new id"
        )));
    } else {
        Output::Sent(SendReceipt {
            id: id.get(),
            msg_id: outcome.msg_id.unwrap_or_default(),
            parts: outcome.parts,
            raw: outcome.payload,
            scheduled_for: None,
        })
    };
    Ok(Executed {
        output,
        replayed: true,
        source: None,
    })
}

/// The answer when another call's send with `id` is still in flight at the caller's deadline.
pub fn in_progress(id: ClientId, stale_at: DateTime<Utc>) -> Error {
    let left = (stale_at - Utc::now()).to_std().unwrap_or_default();
    Error::SendInProgress {
        id: id.get(),
        retry_after: left.clamp(Duration::from_millis(100), Duration::from_secs(1)),
    }
}

/// The answer when the gateway does not know `id` yet but an earlier request with it may
/// still be in its hands (inside the settle window ending `until`): nothing was sent.
pub fn settling(id: ClientId, until: DateTime<Utc>) -> Error {
    let left = (until - Utc::now()).to_std().unwrap_or_default();
    Error::Unavailable {
        cause: UnavailableCause::Settling {
            retry_after: left.max(Duration::from_millis(100)),
        },
        outcome_unknown: true,
        detail: format!(
            "an earlier request with id {id} was cut off while the gateway may still be carrying it out; the gateway does not know the message yet, which proves nothing for another {}s: nothing was sent now, retry with the same id",
            left.as_secs().max(1)
        ),
    }
}

/// The answer when the claims cannot be read or written: nothing was sent.
pub fn store_error(e: StoreError) -> Error {
    e.unavailable("msgw's store is unavailable; nothing was sent")
}

/// What a send is answered when the suppression list could not be read (its read rides
/// in the claims' store call): nothing of it may leave.
pub(super) fn list_unread(e: StoreError) -> Error {
    e.unavailable(
        "msgw's store is unavailable: the suppression list could not be read, nothing was sent",
    )
}
