//! The one mapping of the domain error to gRPC statuses (docs/api.md#errors).

use std::collections::HashMap;

use prost::Message;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use crate::core::domain::{Error, UnavailableCause};

/// `ErrorInfo.domain` of every msgw error.
pub const ERROR_DOMAIN: &str = "msgw";

/// The gRPC code of an error (what the status carries, without building it).
pub fn code(e: &Error) -> Code {
    match e {
        Error::InvalidArgument(_) | Error::TooManyParts { .. } => Code::InvalidArgument,
        Error::AccessDenied => Code::Unauthenticated,
        Error::Rejected(_)
        | Error::RecipientOptedOut { .. }
        | Error::NewerDecision { .. }
        | Error::NumberTypeNotAllowed { .. } => Code::FailedPrecondition,
        Error::Unavailable { .. } => Code::Unavailable,
        Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
        Error::CursorOutOfRange { .. } => Code::OutOfRange,
        Error::IdConflict { .. } => Code::AlreadyExists,
        Error::SendInProgress { .. } => Code::Aborted,
        Error::ResultLost(_) => Code::FailedPrecondition,
        Error::Overloaded { .. } => Code::ResourceExhausted,
        Error::MessageNotFound { .. } | Error::NoSuchMessage { .. } => Code::NotFound,
        Error::MessageCanceled { .. } | Error::AlreadySent { .. } => Code::FailedPrecondition,
        Error::PermissionDenied(_) => Code::PermissionDenied,
        Error::RateLimited { .. } | Error::QueryRateLimited { .. } => Code::ResourceExhausted,
        Error::VerificationNotFound
        | Error::RangeNotHeld { .. }
        | Error::PhoneNotSuppressed { .. } => Code::NotFound,
        Error::PhoneRateLimited { .. }
        | Error::ResendTooSoon { .. }
        | Error::SendsExhausted
        | Error::KeyRateLimited { .. }
        | Error::CountryRateLimited { .. } => Code::ResourceExhausted,
        Error::DestinationNotAllowed | Error::SuspectedFraud { .. } => Code::PermissionDenied,
        Error::Internal(_) => Code::Internal,
    }
}

/// The `ErrorInfo.reason` of an error ("" when its status carries none).
pub fn reason(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument(_) | Error::Internal(_) | Error::PermissionDenied(_) => "",
        Error::TooManyParts { .. } => "TOO_MANY_PARTS",
        Error::AccessDenied => "UPSTREAM_ACCESS_DENIED",
        Error::Rejected(_) => "UPSTREAM_REJECTED",
        Error::Unavailable {
            outcome_unknown: true,
            ..
        }
        | Error::DeadlineExceeded {
            outcome_unknown: true,
        } => "OUTCOME_UNKNOWN",
        Error::Unavailable { cause, .. } => match cause {
            UnavailableCause::Store => "STORE_UNAVAILABLE",
            UnavailableCause::ShuttingDown => "SHUTTING_DOWN",
            UnavailableCause::Unreachable
            | UnavailableCause::Timeout
            | UnavailableCause::HttpStatus(_)
            | UnavailableCause::BadResponse => "UPSTREAM_UNAVAILABLE",
            UnavailableCause::RateLimited { .. } => "UPSTREAM_RATE_LIMITED",
            // Always with `outcome_unknown` (above); here only for completeness.
            UnavailableCause::Settling { .. } | UnavailableCause::LookupBackoff { .. } => {
                "OUTCOME_UNKNOWN"
            }
        },
        Error::DeadlineExceeded { .. } => "UPSTREAM_DEADLINE",
        Error::CursorOutOfRange { .. } => "CURSOR_OUT_OF_RANGE",
        Error::IdConflict { .. } => "ID_CONFLICT",
        Error::SendInProgress { .. } => "SEND_IN_PROGRESS",
        Error::ResultLost(_) => "RESULT_LOST",
        Error::Overloaded { .. } => "QUEUE_FULL",
        Error::MessageNotFound { .. } | Error::NoSuchMessage { .. } => "MESSAGE_NOT_FOUND",
        Error::MessageCanceled { .. } => "MESSAGE_CANCELED",
        Error::AlreadySent { .. } => "ALREADY_SENT",
        Error::RateLimited { .. } => "RATE_LIMITED",
        Error::QueryRateLimited { .. } => "QUERY_RATE_LIMITED",
        Error::VerificationNotFound => "VERIFICATION_NOT_FOUND",
        Error::PhoneRateLimited { .. } => "PHONE_RATE_LIMITED",
        Error::DestinationNotAllowed => "DESTINATION_NOT_ALLOWED",
        Error::ResendTooSoon { .. } => "RESEND_TOO_SOON",
        Error::SendsExhausted => "VERIFICATION_SENDS_EXHAUSTED",
        Error::SuspectedFraud { .. } => "SUSPECTED_FRAUD",
        Error::RangeNotHeld { .. } => "RANGE_NOT_HELD",
        Error::KeyRateLimited { .. } => "KEY_RATE_LIMITED",
        Error::CountryRateLimited { .. } => "COUNTRY_RATE_LIMITED",
        Error::RecipientOptedOut { .. } => "RECIPIENT_OPTED_OUT",
        Error::PhoneNotSuppressed { .. } => "PHONE_NOT_SUPPRESSED",
        Error::NewerDecision { .. } => "NEWER_DECISION",
        Error::NumberTypeNotAllowed { .. } => "NUMBER_TYPE_NOT_ALLOWED",
    }
}

/// The gRPC outcome of an error as one word for spans and logs: its reason in lower
/// case, or its code's name when its status carries no reason.
pub fn outcome(e: &Error) -> String {
    match reason(e) {
        "" => crate::base::metrics::code_name(code(e)).to_owned(),
        reason => reason.to_ascii_lowercase(),
    }
}

/// Whether the error refuses the caller's request (its call was wrong, or asked too
/// much too soon), rather than a failure of msgw or the gateway.
pub fn is_refusal(e: &Error) -> bool {
    matches!(
        code(e),
        Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::AlreadyExists
            | Code::Aborted
            | Code::ResourceExhausted
            | Code::PermissionDenied
            | Code::NotFound
            | Code::OutOfRange
    )
}

/// What a status carries besides its code, message and reason: `ErrorInfo` metadata,
/// `RetryInfo`, and field violations.
#[derive(Default)]
struct Details {
    metadata: Vec<(&'static str, String)>,
    retry_after: Option<std::time::Duration>,
    violations: Vec<crate::core::domain::FieldViolation>,
}

/// The details of each error: the one place a variant's extra fields become status details.
fn details(e: Error) -> Details {
    let metadata = |pairs: Vec<(&'static str, String)>| Details {
        metadata: pairs,
        ..Details::default()
    };
    match e {
        Error::InvalidArgument(violations) => Details {
            violations,
            ..Details::default()
        },
        Error::TooManyParts {
            violations,
            estimate,
            max_parts,
        } => Details {
            metadata: vec![
                ("parts", estimate.parts.to_string()),
                ("max_parts", max_parts.to_string()),
                ("units", estimate.units.to_string()),
                (
                    "encoding",
                    match estimate.encoding {
                        crate::core::domain::SmsEncoding::Gsm7 => "GSM7",
                        crate::core::domain::SmsEncoding::Ucs2 => "UCS2",
                    }
                    .to_owned(),
                ),
            ],
            violations,
            ..Details::default()
        },
        Error::Rejected(text) => metadata(vec![("upstream_error", text)]),
        Error::Unavailable { cause, .. } => Details {
            metadata: vec![("cause", cause_name(cause))],
            retry_after: match cause {
                UnavailableCause::Settling { retry_after }
                | UnavailableCause::LookupBackoff { retry_after } => Some(retry_after),
                // A caller always learns when to come back, a second when the gateway
                // did not say.
                UnavailableCause::RateLimited { retry_after } => {
                    Some(retry_after.unwrap_or(std::time::Duration::from_secs(1)))
                }
                _ => None,
            },
            ..Details::default()
        },
        Error::DeadlineExceeded { .. } => metadata(vec![("cause", "deadline".to_owned())]),
        Error::CursorOutOfRange {
            oldest_available, ..
        } => metadata(vec![(
            "oldest_available_cursor",
            oldest_available.to_string(),
        )]),
        Error::IdConflict { msg_id, .. } => {
            metadata(msg_id.map(|m| ("msg_id", m)).into_iter().collect())
        }
        Error::SendInProgress { retry_after, .. }
        | Error::Overloaded { retry_after }
        | Error::PhoneRateLimited { retry_after }
        | Error::ResendTooSoon { retry_after } => Details {
            retry_after: Some(retry_after),
            ..Details::default()
        },
        Error::MessageNotFound { upstream_error, .. } => {
            metadata(vec![("upstream_error", upstream_error)])
        }
        Error::RangeNotHeld { range } => metadata(vec![("range", range)]),
        Error::RecipientOptedOut { phone } | Error::PhoneNotSuppressed { phone } => {
            metadata(vec![("phone", phone.to_string())])
        }
        Error::NewerDecision {
            phone,
            opted_out,
            decided_at,
        } => metadata(vec![
            ("phone", phone.to_string()),
            ("opted_out", opted_out.to_string()),
            (
                "decided_at",
                decided_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ),
        ]),
        Error::NumberTypeNotAllowed {
            number_type,
            voice_only,
        } => metadata(vec![
            ("number_type", number_type.as_str().to_owned()),
            ("voice_only", voice_only.to_string()),
        ]),
        Error::SuspectedFraud { range, until } => metadata(vec![
            ("range", range),
            (
                "held_until",
                until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ),
        ]),
        Error::KeyRateLimited { name, retry_after } => Details {
            metadata: vec![("key", name)],
            retry_after: Some(retry_after),
            ..Details::default()
        },
        Error::CountryRateLimited {
            calling_code,
            retry_after,
        } => Details {
            metadata: vec![("calling_code", calling_code)],
            retry_after: Some(retry_after),
            ..Details::default()
        },
        Error::RateLimited {
            caller,
            retry_after,
            ..
        } => Details {
            metadata: vec![("caller", caller)],
            retry_after,
            ..Details::default()
        },
        Error::QueryRateLimited {
            caller,
            retry_after,
        } => Details {
            metadata: vec![("caller", caller)],
            retry_after: Some(retry_after),
            ..Details::default()
        },
        Error::MessageCanceled { id } | Error::AlreadySent { id } | Error::NoSuchMessage { id } => {
            metadata(vec![("id", id.to_string())])
        }
        Error::AccessDenied
        | Error::ResultLost(_)
        | Error::PermissionDenied(_)
        | Error::VerificationNotFound
        | Error::DestinationNotAllowed
        | Error::SendsExhausted
        | Error::Internal(_) => Details::default(),
    }
}

/// The `cause` of an `UNAVAILABLE`.
fn cause_name(cause: UnavailableCause) -> String {
    match cause {
        UnavailableCause::Unreachable => "unreachable".to_owned(),
        UnavailableCause::Timeout => "timeout".to_owned(),
        UnavailableCause::HttpStatus(code) => format!("http_{code}"),
        UnavailableCause::BadResponse => "bad_response".to_owned(),
        UnavailableCause::RateLimited { .. } => "rate_limited".to_owned(),
        UnavailableCause::Store => "store".to_owned(),
        UnavailableCause::ShuttingDown => "shutting_down".to_owned(),
        UnavailableCause::Settling { .. } => "settling".to_owned(),
        UnavailableCause::LookupBackoff { .. } => "lookup_backoff".to_owned(),
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let (code, reason, message) = (code(&e), reason(&e), e.to_string());
        let details = details(e);
        if reason.is_empty() && details.violations.is_empty() && details.retry_after.is_none() {
            return Status::new(code, message);
        }
        let mut rich = ErrorDetails::new();
        if !details.violations.is_empty() {
            rich.set_bad_request(bounded(details.violations));
        }
        if let Some(after) = details.retry_after {
            rich.set_retry_info(Some(after));
        }
        if !reason.is_empty() {
            let metadata: HashMap<String, String> = details
                .metadata
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            rich.set_error_info(reason, ERROR_DOMAIN, metadata);
        }
        Status::with_error_details(code, message, rich)
    }
}

/// Field violations listed in one status at most.
const MAX_VIOLATIONS: usize = 50;
/// Bytes of field paths and descriptions in one status at most: with the message
/// and framing, the status stays under 8 KiB, below every common client's metadata
/// limit (grpcio's is 16 KiB), so the details always reach the caller.
const MAX_VIOLATION_BYTES: usize = 6 * 1024;

/// The first violations that fit the bounds, then one saying how many more there are.
fn bounded(violations: Vec<crate::core::domain::FieldViolation>) -> Vec<FieldViolation> {
    let total = violations.len();
    let mut bytes = 0;
    let mut listed: Vec<FieldViolation> = Vec::new();
    for v in violations {
        let size = v.field.len() + v.description.len();
        if listed.len() == MAX_VIOLATIONS || bytes + size > MAX_VIOLATION_BYTES {
            break;
        }
        bytes += size;
        listed.push(FieldViolation::new(v.field, v.description));
    }
    if listed.len() < total {
        let more = total - listed.len();
        listed.push(FieldViolation::new(
            "",
            format!("and {more} more violations not listed; fix these and send again"),
        ));
    }
    listed
}

/// A status as the `google.rpc.Status` message of a batch result, details included.
pub fn to_rpc_status(status: &Status) -> tonic_types::pb::Status {
    // tonic keeps the details of a rich status as an encoded google.rpc.Status.
    tonic_types::pb::Status::decode(status.details())
        .ok()
        .filter(|s| s.code == status.code() as i32)
        .unwrap_or_else(|| tonic_types::pb::Status {
            code: status.code() as i32,
            message: status.message().to_owned(),
            details: Vec::new(),
        })
}

#[cfg(test)]
mod tests;
