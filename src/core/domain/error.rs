//! The domain's error, and the collector of field violations used at the border.

use super::ValueError;

/// One broken rule of a request, named by its proto field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Proto field path, e.g. `carousel.slides[1].url2`.
    pub field: String,
    /// What is wrong.
    pub description: String,
}

/// Why the gateway could not be asked, or did not answer usably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnavailableCause {
    /// No connection could be made: the request never left msgw.
    Unreachable,
    /// The gateway did not answer within the configured upstream timeout.
    Timeout,
    /// The gateway answered with an HTTP error status.
    HttpStatus(u16),
    /// The gateway's answer was not its JSON envelope (docs/gateway.md#envelope).
    BadResponse,
    /// The gateway refused the request as over its rate (HTTP 429): nothing was sent.
    RateLimited {
        /// When the gateway said to retry, if it said.
        retry_after: Option<std::time::Duration>,
    },
    /// msgw's own store failed.
    Store,
    /// msgw is shutting down.
    ShuttingDown,
    /// An earlier request with the id may still be in the gateway's hands (its settle
    /// window is open): nothing was sent; retry after `retry_after`.
    Settling {
        /// When the window closes.
        retry_after: std::time::Duration,
    },
    /// The outcome of an earlier request with the id is unknown and a `status` lookup
    /// of it just failed or did not find it out, so msgw asks the gateway again only
    /// after `retry_after`: nothing was sent.
    LookupBackoff {
        /// When the next lookup may run.
        retry_after: std::time::Duration,
    },
}

/// Everything that can go wrong with an operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The request breaks the gateway's rules (docs/gateway.md#validation-rules);
    /// nothing was sent.
    #[error("invalid request: {}", summary(.0))]
    InvalidArgument(Vec<FieldViolation>),
    /// An SMS takes more parts than the request's `max_parts` allows (with every other
    /// violation of the request); nothing was sent.
    #[error("invalid request: {}", summary(.violations))]
    TooManyParts {
        /// The violations, the parts' among them.
        violations: Vec<FieldViolation>,
        /// What the text was counted as.
        estimate: super::SmsEstimate,
        /// The most parts allowed.
        max_parts: u32,
    },
    /// The gateway refused msgw's API key.
    #[error("the gateway refused msgw's API key (Access denied); check MSGW_API_KEY")]
    AccessDenied,
    /// The gateway refused the operation, with its own text.
    #[error("the gateway rejected the operation: {0}")]
    Rejected(String),
    /// The gateway could not be asked or answered unusably, or msgw's own store failed,
    /// or msgw is shutting down (`cause` says which).
    #[error("{}", unavailable_text(*cause, detail))]
    Unavailable {
        /// What happened.
        cause: UnavailableCause,
        /// Whether the operation may have been carried out anyway.
        outcome_unknown: bool,
        /// Developer-facing detail (never contains the API key).
        detail: String,
    },
    /// The caller's deadline passed before its answer was ready: with nothing sent or
    /// changed (the request had not left msgw, or only asked), or while the gateway or
    /// msgw's store was still at work on a change (its outcome is unknown to this caller).
    #[error("{}", if *outcome_unknown {
        "the deadline passed before the outcome was known and recorded (the gateway or msgw's store was still at work on it): retry with the same id to learn it"
    } else {
        "the deadline passed before the answer came; nothing was sent or changed"
    })]
    DeadlineExceeded {
        /// Whether the operation may have been carried out anyway.
        outcome_unknown: bool,
    },
    /// The gateway does not know the message a status query asked for.
    #[error(
        "the gateway has no message with id {id} ({upstream_error}); a send msgw refused itself (to an opted-out number, say) never reached it, and its id stays free"
    )]
    MessageNotFound {
        /// The client id asked for.
        id: u64,
        /// The gateway's text.
        upstream_error: String,
    },
    /// The id is claimed by a different request (same id, other content).
    #[error("id {id} is already used by a different request; use a new id for a new message")]
    IdConflict {
        /// The id.
        id: u64,
        /// The gateway's id of the existing message, when known.
        msg_id: Option<String>,
    },
    /// The scheduled message of this id was cancelled: the id is spent.
    #[error("the scheduled message with id {id} was cancelled; send a new message with a new id")]
    MessageCanceled {
        /// The id.
        id: u64,
    },
    /// The message of this id has left msgw for the gateway (or was never scheduled):
    /// it cannot be cancelled.
    #[error(
        "the message with id {id} has left msgw's schedule (sent to the gateway, refused as it left, or sent at once: its status says which); only a scheduled message that has not left can be cancelled"
    )]
    AlreadySent {
        /// The id.
        id: u64,
    },
    /// msgw holds no scheduled or sent message of this id for the caller.
    #[error("msgw holds no message with id {id} of this caller")]
    NoSuchMessage {
        /// The id.
        id: u64,
    },
    /// Another call with this id is waiting for the gateway, and the caller's
    /// deadline came first.
    #[error("a send with id {id} is in progress; retry with the same id to get its outcome")]
    SendInProgress {
        /// The id.
        id: u64,
        /// When a retry is likely to find the outcome.
        retry_after: std::time::Duration,
    },
    /// The operation happened, but its answer was lost and cannot be recovered.
    #[error("{0}")]
    ResultLost(String),
    /// More operations wait for the gateway than msgw queues; nothing was sent.
    #[error("msgw's queue to the gateway is full; nothing was sent, retry shortly")]
    Overloaded {
        /// When a retry is likely to find room.
        retry_after: std::time::Duration,
    },
    /// A stream cursor outside the retained event log.
    #[error("{detail}")]
    CursorOutOfRange {
        /// The oldest cursor a stream can resume after.
        oldest_available: u64,
        /// What is wrong with the cursor.
        detail: String,
    },
    /// The caller may not do this (its entry in the callers file does not grant it).
    #[error("{0}")]
    PermissionDenied(String),
    /// The caller sends faster than its entry in the callers file allows; nothing was
    /// sent. `retry_after`: when the sends would fit, `None` if they never do (more
    /// than the caller's burst in one call).
    #[error("{}", rate_text(.caller, .sends, .retry_after.is_none()))]
    RateLimited {
        /// The caller.
        caller: String,
        /// Sends the call asked for.
        sends: u32,
        /// When a retry is likely to fit.
        retry_after: Option<std::time::Duration>,
    },
    /// The caller makes calls that send nothing (queries, streams, lists, changes)
    /// faster than its entry in the callers file allows (`queries_per_second`); the
    /// call did nothing.
    #[error("{caller} makes queries faster than allowed; nothing was done, retry after the delay")]
    QueryRateLimited {
        /// The caller.
        caller: String,
        /// When a retry is likely to fit.
        retry_after: std::time::Duration,
    },
    /// The caller has no pending verification of the number (never started, or
    /// approved, expired, failed or canceled).
    #[error("no pending verification of this number from this caller")]
    VerificationNotFound,
    /// Too many new verifications of one number in the last hour (`MSGW_VERIFY_PHONE_LIMIT`).
    #[error("too many verifications of this number in the last hour; nothing was sent")]
    PhoneRateLimited {
        /// When the oldest of them leaves the hour.
        retry_after: std::time::Duration,
    },
    /// The number's country prefix is not among `MSGW_VERIFY_ALLOWED_PREFIXES`.
    #[error("verifications may not go to this number's country prefix; nothing was sent")]
    DestinationNotAllowed,
    /// A resend sooner than `MSGW_VERIFY_RESEND_INTERVAL` after the last send.
    #[error(
        "the code was sent less than the resend interval ago; nothing was sent, retry after the delay"
    )]
    ResendTooSoon {
        /// When a resend is allowed.
        retry_after: std::time::Duration,
    },
    /// The verification has had all its sends.
    #[error("this verification has had all its sends; nothing was sent")]
    SendsExhausted,
    /// The fraud guard holds the number's range: its verifications are started and
    /// not approved (SMS pumping).
    #[error(
        "the fraud guard holds this number's range: too many of its codes were never entered; nothing was sent"
    )]
    SuspectedFraud {
        /// The range's digits.
        range: String,
        /// When the hold ends.
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The fraud guard holds no such range (ReleaseRange).
    #[error("the fraud guard holds no range {range}")]
    RangeNotHeld {
        /// The range asked for.
        range: String,
    },
    /// A caller-supplied rate-limit key had its limit (`MSGW_VERIFY_KEY_LIMITS`).
    #[error("too many verifications for this {name} in its window; nothing was sent")]
    KeyRateLimited {
        /// The key's name.
        name: String,
        /// When the oldest of them leaves the window.
        retry_after: std::time::Duration,
    },
    /// The calling code had its budget (`MSGW_VERIFY_COUNTRY_LIMITS`).
    #[error(
        "too many verifications to calling code +{calling_code} in its window; nothing was sent"
    )]
    CountryRateLimited {
        /// The calling code (or `unassigned`).
        calling_code: String,
        /// When the oldest of them leaves the window.
        retry_after: std::time::Duration,
    },
    /// The recipient opted out (a STOP reply, or SuppressionService): nothing was sent,
    /// and the id is not spent (a send after the number opts back in goes out).
    #[error("{phone} opted out of messages (it is on msgw's suppression list); nothing was sent")]
    RecipientOptedOut {
        /// The number.
        phone: super::Phone,
    },
    /// The number is not on the suppression list (RemoveSuppression, GetSuppression).
    #[error("{phone} is not on msgw's suppression list")]
    PhoneNotSuppressed {
        /// The number.
        phone: super::Phone,
    },
    /// A caller's change of the suppression list older than the number's newest
    /// decision the other way (a reply written later): the list is unchanged.
    #[error(
        "{phone} was {} by a later decision (at {}); the list is unchanged",
        if *opted_out { "opted out" } else { "opted back in" },
        decided_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )]
    NewerDecision {
        /// The number.
        phone: super::Phone,
        /// The newer decision opted the number out (else back in).
        opted_out: bool,
        /// Its time.
        decided_at: chrono::DateTime<chrono::Utc>,
    },
    /// A verification to a number of a type the operator does not send codes to
    /// (`MSGW_VERIFY_NUMBER_TYPES`).
    #[error(
        "verification codes do not go to {} numbers{}; nothing was sent",
        number_type.as_str(),
        if *voice_only { " except by a voice call (list the voice channel)" } else { "" }
    )]
    NumberTypeNotAllowed {
        /// The number's type, as libphonenumber's metadata tells it.
        number_type: super::NumberType,
        /// A verification with a voice channel may reach it.
        voice_only: bool,
    },
    /// A bug in msgw.
    #[error("internal error: {0}")]
    Internal(String),
}

fn rate_text(caller: &str, sends: &u32, never: bool) -> String {
    if never {
        format!("{sends} sends in one call exceed the burst allowed to {caller}; split the call")
    } else {
        format!("{caller} sends faster than allowed; nothing was sent, retry after the delay")
    }
}

/// The text of an `Unavailable` error: only a gateway problem is called one, and a
/// refusal for the gateway's rate is not an outage (its detail says what it is).
fn unavailable_text(cause: UnavailableCause, detail: &str) -> String {
    match cause {
        UnavailableCause::Store
        | UnavailableCause::ShuttingDown
        | UnavailableCause::Settling { .. }
        | UnavailableCause::LookupBackoff { .. }
        | UnavailableCause::RateLimited { .. } => detail.to_owned(),
        _ => format!("the gateway is unavailable: {detail}"),
    }
}

/// Violations named in an error's message; the details list more (see the gRPC border).
const SUMMARIZED: usize = 3;

fn summary(violations: &[FieldViolation]) -> String {
    let mut text = violations
        .iter()
        .take(SUMMARIZED)
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ");
    if violations.len() > SUMMARIZED {
        text.push_str(&format!(
            "; and {} more (see the BadRequest details)",
            violations.len() - SUMMARIZED
        ));
    }
    text
}

/// Collects every violation of a request instead of stopping at the first,
/// so a caller fixes all of them in one round.
#[derive(Debug, Default)]
pub struct Violations {
    list: Vec<FieldViolation>,
    /// An SMS over its `max_parts`: the refusal says so in its reason.
    parts: Option<(super::SmsEstimate, u32)>,
}

impl Violations {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// A scope whose field paths start with `prefix` (empty for the top level).
    pub fn scope(&mut self, prefix: impl Into<String>) -> Scope<'_> {
        Scope {
            violations: self,
            prefix: prefix.into(),
        }
    }

    /// `Ok(value)` when nothing was collected, otherwise the collected violations.
    pub fn finish<T>(self, value: Option<T>) -> Result<T, Error> {
        match value {
            Some(value) if self.list.is_empty() => Ok(value),
            _ if self.list.is_empty() => Err(Error::Internal(
                "validation failed without a violation".into(),
            )),
            _ => Err(match self.parts {
                Some((estimate, max_parts)) => Error::TooManyParts {
                    violations: self.list,
                    estimate,
                    max_parts,
                },
                None => Error::InvalidArgument(self.list),
            }),
        }
    }

    /// Whether nothing was collected so far.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// A field path prefix inside a [`Violations`] collector.
pub struct Scope<'a> {
    violations: &'a mut Violations,
    prefix: String,
}

impl Scope<'_> {
    fn path(&self, field: &str) -> String {
        match (self.prefix.is_empty(), field.is_empty()) {
            (true, _) => field.to_owned(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}.{field}", self.prefix),
        }
    }

    /// Records a violation of `field`.
    pub fn add(&mut self, field: &str, description: impl Into<String>) {
        let field = self.path(field);
        self.violations.list.push(FieldViolation {
            field,
            description: description.into(),
        });
    }

    /// Keeps the value, or records why `field` was refused.
    pub fn check<T>(&mut self, field: &str, result: Result<T, ValueError>) -> Option<T> {
        result.map_err(|e| self.add(field, e.0)).ok()
    }

    /// Records that the SMS text of `field` takes more parts than `max_parts`.
    pub fn too_many_parts(&mut self, field: &str, estimate: super::SmsEstimate, max_parts: u32) {
        let encoding = match estimate.encoding {
            super::SmsEncoding::Gsm7 => "GSM-7",
            super::SmsEncoding::Ucs2 => "UCS-2",
        };
        self.add(
            field,
            format!(
                "takes {} parts ({} units in {encoding}), more than max_parts {max_parts}",
                estimate.parts, estimate.units
            ),
        );
        self.violations.parts.get_or_insert((estimate, max_parts));
    }

    /// A nested scope for a sub-message field (`field` may carry an index, `slides[2]`).
    pub fn child(&mut self, field: &str) -> Scope<'_> {
        let prefix = self.path(field);
        Scope {
            violations: self.violations,
            prefix,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_nest_with_dots() {
        let mut v = Violations::new();
        let mut top = v.scope("items[2].send_viber");
        top.add("phone", "bad");
        top.child("carousel")
            .child("slides[1]")
            .add("url2", "missing");
        let Err(Error::InvalidArgument(list)) = v.finish::<()>(None) else {
            panic!("expected violations")
        };
        let fields: Vec<_> = list.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "items[2].send_viber.phone",
                "items[2].send_viber.carousel.slides[1].url2"
            ]
        );
    }
}
