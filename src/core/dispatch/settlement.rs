//! How a keyed operation's claim ends, given the gateway's answer: the one decision
//! that keeps a send from going out twice. Only the gateway's refusal releases an id;
//! whatever else may have left with the request is unknown until a `status` lookup
//! says, and an accepted send is recorded with what reconcile tracks of it.

use chrono::{DateTime, Utc};

use crate::core::domain::{Error, Operation, Output};
use crate::core::ports::store::{AcceptedOutcome, SentMessage, Settlement};

/// How a keyed operation's claim ends, given the gateway's answer: an accepted send
/// with the message reconcile tracks (`sent`, from its gateway id), or a release, or an
/// unknown outcome whose settle window ends at `settle_until()`.
pub(super) fn of(
    result: &Result<Output, Error>,
    settle_until: impl FnOnce() -> DateTime<Utc>,
    sent: impl FnOnce(&str) -> Option<SentMessage>,
) -> Settlement {
    let unknown = || Settlement::Unknown {
        settle_until: settle_until(),
    };
    match result {
        Ok(Output::Sent(receipt)) => Settlement::Accepted(
            AcceptedOutcome {
                msg_id: Some(receipt.msg_id.clone()),
                parts: receipt.parts,
                payload: receipt.raw.clone(),
                recovered: false,
            },
            sent(&receipt.msg_id),
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
        // A keyed operation answered with what no send answers: what happened is
        // not known, so the claim is not released.
        Ok(
            Output::Status(_)
            | Output::Waited(_)
            | Output::Balance(_)
            | Output::Senders { .. }
            | Output::Hlr(_)
            | Output::SmsTemplate(_)
            | Output::SmsTemplates { .. }
            | Output::ViberTemplate(_)
            | Output::ViberTemplates { .. }
            | Output::Deleted { .. },
        ) => unknown(),
        // The gateway refused it: nothing was sent, the id may be used again.
        Err(Error::Rejected(text)) => Settlement::Released(text.clone()),
        // Anything else may have left with the request: released only by a
        // `status` lookup, never by a guess (a released claim may be sent twice).
        Err(
            Error::InvalidArgument(_)
            | Error::TooManyParts { .. }
            | Error::AccessDenied
            | Error::Unavailable { .. }
            | Error::DeadlineExceeded { .. }
            | Error::MessageNotFound { .. }
            | Error::IdConflict { .. }
            | Error::MessageCanceled { .. }
            | Error::AlreadySent { .. }
            | Error::NoSuchMessage { .. }
            | Error::SendInProgress { .. }
            | Error::ResultLost(_)
            | Error::Overloaded { .. }
            | Error::CursorOutOfRange { .. }
            | Error::PermissionDenied(_)
            | Error::RateLimited { .. }
            | Error::QueryRateLimited { .. }
            | Error::VerificationNotFound
            | Error::PhoneRateLimited { .. }
            | Error::DestinationNotAllowed
            | Error::ResendTooSoon { .. }
            | Error::SendsExhausted
            | Error::SuspectedFraud { .. }
            | Error::RangeNotHeld { .. }
            | Error::KeyRateLimited { .. }
            | Error::CountryRateLimited { .. }
            | Error::RecipientOptedOut { .. }
            | Error::PhoneNotSuppressed { .. }
            | Error::NewerDecision { .. }
            | Error::NumberTypeNotAllowed { .. }
            | Error::Internal(_),
        ) => unknown(),
    }
}

/// The message reconcile tracks for an accepted send of `op` (gateway id `msg_id`),
/// when msgw tracks deliveries (`tracking`) and `op` is a send that has them.
pub(super) fn tracked(tracking: bool, op: &Operation, msg_id: &str) -> Option<SentMessage> {
    if !tracking {
        return None;
    }
    let (client_id, channel, lifetime) = op.delivery()?;
    Some(SentMessage {
        client_id,
        msg_id: msg_id.to_owned(),
        channel,
        sent_at: Utc::now(),
        lifetime,
        phone: op.recipient(),
    })
}
