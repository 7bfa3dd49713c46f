//! The mapping of every domain error to its status, and the details statuses carry.

use std::time::Duration;

use tonic_types::StatusExt;

use super::*;
use crate::core::domain::FieldViolation as Violation;

/// One error of each kind; the match below stops compiling when a variant is added
/// without being listed here.
fn every_error() -> Vec<Error> {
    let second = Duration::from_secs(1);
    let all = vec![
        Error::InvalidArgument(vec![Violation {
            field: "phone".into(),
            description: "bad".into(),
        }]),
        Error::TooManyParts {
            violations: vec![Violation {
                field: "message".into(),
                description: "takes 3 parts".into(),
            }],
            estimate: crate::core::domain::estimate_sms(&"é".repeat(400)),
            max_parts: 2,
        },
        Error::AccessDenied,
        Error::Rejected("Error in Sender-name".into()),
        Error::Unavailable {
            cause: UnavailableCause::Timeout,
            outcome_unknown: true,
            detail: "cut".into(),
        },
        Error::Unavailable {
            cause: UnavailableCause::Settling {
                retry_after: second,
            },
            outcome_unknown: true,
            detail: "settling".into(),
        },
        Error::Unavailable {
            cause: UnavailableCause::Store,
            outcome_unknown: false,
            detail: "store".into(),
        },
        Error::Unavailable {
            cause: UnavailableCause::RateLimited { retry_after: None },
            outcome_unknown: false,
            detail: "429".into(),
        },
        Error::DeadlineExceeded {
            outcome_unknown: false,
        },
        Error::DeadlineExceeded {
            outcome_unknown: true,
        },
        Error::MessageNotFound {
            id: 1,
            upstream_error: "Message not found".into(),
        },
        Error::IdConflict {
            id: 1,
            msg_id: Some("m".into()),
        },
        Error::SendInProgress {
            id: 1,
            retry_after: second,
        },
        Error::ResultLost("lost".into()),
        Error::MessageCanceled { id: 1 },
        Error::AlreadySent { id: 1 },
        Error::NoSuchMessage { id: 1 },
        Error::Overloaded {
            retry_after: second,
        },
        Error::CursorOutOfRange {
            oldest_available: 5,
            detail: "old".into(),
        },
        Error::PermissionDenied("no".into()),
        Error::RateLimited {
            caller: "billing".into(),
            sends: 1,
            retry_after: Some(second),
        },
        Error::QueryRateLimited {
            caller: "billing".into(),
            retry_after: second,
        },
        Error::VerificationNotFound,
        Error::PhoneRateLimited {
            retry_after: second,
        },
        Error::DestinationNotAllowed,
        Error::ResendTooSoon {
            retry_after: second,
        },
        Error::SendsExhausted,
        Error::SuspectedFraud {
            range: "881234".into(),
            until: chrono::DateTime::UNIX_EPOCH,
        },
        Error::RangeNotHeld {
            range: "881234".into(),
        },
        Error::KeyRateLimited {
            name: "ip".into(),
            retry_after: second,
        },
        Error::CountryRateLimited {
            calling_code: "380".into(),
            retry_after: second,
        },
        Error::RecipientOptedOut {
            phone: crate::core::domain::Phone::parse("380971234567").unwrap(),
        },
        Error::PhoneNotSuppressed {
            phone: crate::core::domain::Phone::parse("380971234567").unwrap(),
        },
        Error::NewerDecision {
            phone: crate::core::domain::Phone::parse("380971234567").unwrap(),
            opted_out: true,
            decided_at: chrono::DateTime::UNIX_EPOCH,
        },
        Error::NumberTypeNotAllowed {
            number_type: crate::core::domain::NumberType::PremiumRate,
            voice_only: false,
        },
        Error::Internal("bug".into()),
    ];
    for e in &all {
        match e {
            Error::InvalidArgument(_)
            | Error::TooManyParts { .. }
            | Error::AccessDenied
            | Error::Rejected(_)
            | Error::Unavailable { .. }
            | Error::DeadlineExceeded { .. }
            | Error::MessageNotFound { .. }
            | Error::IdConflict { .. }
            | Error::SendInProgress { .. }
            | Error::ResultLost(_)
            | Error::MessageCanceled { .. }
            | Error::AlreadySent { .. }
            | Error::NoSuchMessage { .. }
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
            | Error::Internal(_) => {}
        }
    }
    all
}

#[test]
fn every_error_becomes_the_status_its_code_and_reason_say() {
    for e in every_error() {
        let (code, reason, outcome) = (code(&e), reason(&e), outcome(&e));
        let text = format!("{e:?}");
        let status = Status::from(e);
        assert_eq!(status.code(), code, "{text}");
        let info = status.get_details_error_info();
        match reason {
            "" => assert!(info.is_none(), "{text}: no ErrorInfo expected"),
            reason => {
                let info = info.unwrap_or_else(|| panic!("{text}: no ErrorInfo"));
                assert_eq!(
                    (info.reason.as_str(), info.domain.as_str()),
                    (reason, ERROR_DOMAIN)
                );
                assert_eq!(outcome, reason.to_ascii_lowercase(), "{text}");
            }
        }
        assert!(
            !outcome.is_empty() && !outcome.contains(' '),
            "{text}: {outcome}"
        );
    }
}

#[test]
fn retry_advice_and_violations_reach_the_status() {
    let retry = |e: Error| {
        Status::from(e)
            .get_details_retry_info()
            .and_then(|r| r.retry_delay)
    };
    let second = Some(Duration::from_secs(1));
    assert_eq!(
        retry(Error::Overloaded {
            retry_after: Duration::from_secs(1)
        }),
        second
    );
    assert_eq!(
        retry(Error::Unavailable {
            cause: UnavailableCause::Settling {
                retry_after: Duration::from_secs(1)
            },
            outcome_unknown: true,
            detail: String::new(),
        }),
        second
    );
    let rate_limited = |retry_after| Error::Unavailable {
        cause: UnavailableCause::RateLimited { retry_after },
        outcome_unknown: false,
        detail: String::new(),
    };
    assert_eq!(
        retry(rate_limited(Some(Duration::from_secs(7)))),
        Some(Duration::from_secs(7))
    );
    assert_eq!(retry(rate_limited(None)), second);
    let bad = Status::from(Error::InvalidArgument(vec![Violation {
        field: "phone".into(),
        description: "bad".into(),
    }]));
    let violations = bad.get_details_bad_request().unwrap().field_violations;
    assert_eq!(violations[0].field, "phone");
    let premium = Status::from(Error::NumberTypeNotAllowed {
        number_type: crate::core::domain::NumberType::PremiumRate,
        voice_only: false,
    });
    let info = premium.get_details_error_info().unwrap();
    assert_eq!(
        (info.reason.as_str(), info.metadata["number_type"].as_str()),
        ("NUMBER_TYPE_NOT_ALLOWED", "premium_rate")
    );
    let conflict = Status::from(Error::IdConflict {
        id: 1,
        msg_id: Some("m7".into()),
    });
    assert_eq!(
        conflict.get_details_error_info().unwrap().metadata["msg_id"],
        "m7"
    );
}
