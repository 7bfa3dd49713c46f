//! The one mapping of the domain error to gRPC statuses (architecture.md, Errors).

use std::collections::HashMap;

use prost::Message;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use crate::domain::{Error, UnavailableCause};

/// `ErrorInfo.domain` of every msgw error.
pub const ERROR_DOMAIN: &str = "msgw";

/// The gRPC code of an error (what the status carries, without building it).
pub fn code(e: &Error) -> Code {
    match e {
        Error::InvalidArgument(_) => Code::InvalidArgument,
        Error::AccessDenied => Code::Unauthenticated,
        Error::Rejected(_) => Code::FailedPrecondition,
        Error::Unavailable { .. } => Code::Unavailable,
        Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
        Error::CursorOutOfRange { .. } => Code::OutOfRange,
        Error::IdConflict { .. } => Code::AlreadyExists,
        Error::SendInProgress { .. } => Code::Aborted,
        Error::ResultLost(_) => Code::FailedPrecondition,
        Error::Overloaded { .. } => Code::ResourceExhausted,
        Error::MessageNotFound { .. } => Code::NotFound,
        Error::PermissionDenied(_) => Code::PermissionDenied,
        Error::RateLimited { .. } => Code::ResourceExhausted,
        Error::Internal(_) => Code::Internal,
    }
}

/// The `ErrorInfo.reason` of an error ("" when its status carries none).
pub fn reason(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument(_) | Error::Internal(_) | Error::PermissionDenied(_) => "",
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
            // Always with `outcome_unknown` (above); here only for completeness.
            UnavailableCause::Settling { .. } => "OUTCOME_UNKNOWN",
        },
        Error::DeadlineExceeded { .. } => "UPSTREAM_DEADLINE",
        Error::CursorOutOfRange { .. } => "CURSOR_OUT_OF_RANGE",
        Error::IdConflict { .. } => "ID_CONFLICT",
        Error::SendInProgress { .. } => "SEND_IN_PROGRESS",
        Error::ResultLost(_) => "RESULT_LOST",
        Error::Overloaded { .. } => "QUEUE_FULL",
        Error::MessageNotFound { .. } => "MESSAGE_NOT_FOUND",
        Error::RateLimited { .. } => "RATE_LIMITED",
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let message = e.to_string();
        match e {
            Error::InvalidArgument(violations) => Status::with_error_details(
                Code::InvalidArgument,
                message,
                ErrorDetails::with_bad_request(bounded(violations)),
            ),
            Error::AccessDenied => {
                with_info(Code::Unauthenticated, message, "UPSTREAM_ACCESS_DENIED", [])
            }
            Error::Rejected(text) => with_info(
                Code::FailedPrecondition,
                message,
                "UPSTREAM_REJECTED",
                [("upstream_error", text)],
            ),
            Error::Unavailable { ref cause, .. } => {
                let reason = reason(&e);
                let cause = match cause {
                    UnavailableCause::Unreachable => "unreachable".to_owned(),
                    UnavailableCause::Timeout => "timeout".to_owned(),
                    UnavailableCause::HttpStatus(code) => format!("http_{code}"),
                    UnavailableCause::BadResponse => "bad_response".to_owned(),
                    UnavailableCause::Store => "store".to_owned(),
                    UnavailableCause::ShuttingDown => "shutting_down".to_owned(),
                    UnavailableCause::Settling { retry_after } => {
                        let mut details = ErrorDetails::with_retry_info(Some(*retry_after));
                        details.set_error_info(
                            reason,
                            ERROR_DOMAIN,
                            HashMap::from([("cause".to_owned(), "settling".to_owned())]),
                        );
                        return Status::with_error_details(Code::Unavailable, message, details);
                    }
                };
                with_info(Code::Unavailable, message, reason, [("cause", cause)])
            }
            Error::DeadlineExceeded { .. } => with_info(
                Code::DeadlineExceeded,
                message,
                reason(&e),
                [("cause", "deadline".to_owned())],
            ),
            Error::CursorOutOfRange {
                oldest_available, ..
            } => with_info(
                Code::OutOfRange,
                message,
                "CURSOR_OUT_OF_RANGE",
                [("oldest_available_cursor", oldest_available.to_string())],
            ),
            Error::IdConflict { msg_id, .. } => {
                let mut metadata = HashMap::new();
                if let Some(msg_id) = msg_id {
                    metadata.insert("msg_id".to_owned(), msg_id);
                }
                Status::with_error_details(
                    Code::AlreadyExists,
                    message,
                    ErrorDetails::with_error_info("ID_CONFLICT", ERROR_DOMAIN, metadata),
                )
            }
            Error::SendInProgress { retry_after, .. } => {
                let mut details = ErrorDetails::with_retry_info(Some(retry_after));
                details.set_error_info("SEND_IN_PROGRESS", ERROR_DOMAIN, HashMap::new());
                Status::with_error_details(Code::Aborted, message, details)
            }
            Error::ResultLost(_) => with_info(Code::FailedPrecondition, message, "RESULT_LOST", []),
            Error::MessageNotFound { upstream_error, .. } => with_info(
                Code::NotFound,
                message,
                "MESSAGE_NOT_FOUND",
                [("upstream_error", upstream_error)],
            ),
            Error::Overloaded { retry_after } => {
                let mut details = ErrorDetails::with_retry_info(Some(retry_after));
                details.set_error_info("QUEUE_FULL", ERROR_DOMAIN, HashMap::new());
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            Error::PermissionDenied(_) => Status::permission_denied(message),
            Error::RateLimited {
                caller,
                retry_after,
                ..
            } => {
                let mut details = ErrorDetails::new();
                if let Some(after) = retry_after {
                    details.set_retry_info(Some(after));
                }
                details.set_error_info(
                    "RATE_LIMITED",
                    ERROR_DOMAIN,
                    HashMap::from([("caller".to_owned(), caller)]),
                );
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            Error::Internal(_) => Status::internal(message),
        }
    }
}

/// Field violations listed in one status at most.
const MAX_VIOLATIONS: usize = 50;
/// Bytes of field paths and descriptions in one status at most: with the message
/// and framing, the status stays under 8 KiB, below every common client's metadata
/// limit (grpcio's is 16 KiB), so the details always reach the caller.
const MAX_VIOLATION_BYTES: usize = 6 * 1024;

/// The first violations that fit the bounds, then one saying how many more there are.
fn bounded(violations: Vec<crate::domain::FieldViolation>) -> Vec<FieldViolation> {
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

fn with_info<const N: usize>(
    code: Code,
    message: String,
    reason: &str,
    metadata: [(&str, String); N],
) -> Status {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, ERROR_DOMAIN, metadata),
    )
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
