//! Verification: one-time codes as a service on top of the sends. A verification's
//! sends are ordinary sends through the dispatcher (the request's id is the send's
//! client id, exactly once, with events), whose claims keep no copy of the code
//! ([`crate::core::dispatch::Confidential`]); the code itself is kept only as an HMAC and
//! sealed under the verify secret ([`code`]). Each step (a start or resend, a check, a
//! cancel) is one store call that reads, decides and writes in one transaction, in
//! which calls about one number take turns, so steps are atomic across replicas; the
//! send, and the bookkeeping after it, follow outside it.

mod answers;
pub(crate) mod code;
pub mod guard;
pub mod numbers;
mod request;
mod settings;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::base::metrics::Metrics;
use crate::core::dispatch::{Confidential, Dispatcher};
use crate::core::domain::{CallerName, Error, Output, Phone, VerificationStatus};
use crate::core::ports::store::{
    NewVerification, PhoneLimit, Start, StartOutcome, Store, StoreError, VerificationChange,
    VerificationRecord,
};
pub use code::{Code, Codes};
use guard::CodeOutcome;
pub use guard::Guard;
pub use request::{
    DEFAULT_DIGITS, DEFAULT_TTL, DIGITS, StartVerification, TTL, Template, needs_signature,
};
pub use settings::Settings;

/// Wrong codes a verification accepts before it fails.
pub const CHECKS: u32 = 5;
/// Sends of one verification, the first included.
pub const SENDS: u32 = 5;
/// The window of the phone limit.
pub const PHONE_WINDOW: Duration = Duration::from_secs(3600);

/// A verification as a caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The stored verification.
    pub record: VerificationRecord,
    /// The code, only against the built-in sandbox and while pending.
    pub sandbox_code: Option<String>,
}

/// The verification service.
#[derive(Debug, Clone)]
pub struct Verifier {
    dispatcher: Dispatcher,
    store: Arc<dyn Store>,
    codes: Codes,
    confidential: Confidential,
    settings: Settings,
    guard: Guard,
    numbers: numbers::NumberRule,
}

fn store_error(e: StoreError) -> Error {
    e.unavailable("msgw's store is unavailable")
}

fn seconds_until(t: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (t - now)
        .to_std()
        .unwrap_or_default()
        .max(Duration::from_secs(1))
}

fn chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Which send of a verification a call makes.
#[derive(Debug, Clone, Copy)]
struct Send {
    /// This call started the verification (a refused send forgets it).
    fresh: bool,
    /// Its first send, not accepted before (an accepted one counts as started).
    first: bool,
    /// It carries a code not sent before (a start's, a resend's), not a replay.
    new_code: bool,
}

impl Send {
    const FRESH: Self = Self {
        fresh: true,
        first: true,
        new_code: true,
    };
    const RESEND: Self = Self {
        fresh: false,
        first: false,
        new_code: true,
    };

    /// A retry of an earlier call (the same request): a code sent again unless the
    /// gateway accepted it before (a send that never went out, or whose outcome is
    /// unknown, goes to the dispatcher, which sends it or finds it sent). A retry of a
    /// first send that never went out is the start of its verification.
    fn retried(first: bool, sent: bool) -> Self {
        Self {
            fresh: first,
            first,
            new_code: !sent,
        }
    }
}

/// Whether a failed send surely sent nothing (its claim was released or never made).
fn nothing_sent(e: &Error) -> bool {
    !matches!(
        e,
        Error::Unavailable {
            outcome_unknown: true,
            ..
        } | Error::DeadlineExceeded {
            outcome_unknown: true
        } | Error::SendInProgress { .. }
            | Error::ResultLost(_)
            | Error::Internal(_)
    )
}

impl Verifier {
    /// Verifications over `dispatcher` and `store`, codes kept under `codes`.
    pub fn new(
        dispatcher: Dispatcher,
        store: Arc<dyn Store>,
        codes: Codes,
        settings: Settings,
    ) -> Self {
        let guard = Guard::new(
            settings.guard.clone(),
            codes.clone(),
            dispatcher.metrics().clone(),
        );
        Self {
            dispatcher,
            store,
            confidential: codes.confidential(),
            codes,
            numbers: settings.number_rule(),
            settings,
            guard,
        }
    }

    /// The store verifications are kept in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Which numbers codes go to, by type.
    pub fn numbers(&self) -> &numbers::NumberRule {
        &self.numbers
    }

    /// The fraud guard in front of its sends.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Keeps the fraud guard's gauge of held ranges up to date until `stop`.
    pub fn watch_guard(
        &self,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + std::marker::Send + 'static {
        self.guard.clone().watch(self.store.clone(), stop)
    }

    /// The metrics verifications count into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        self.dispatcher.metrics()
    }

    /// Refuses a number on the suppression list (it opted out: codes too are messages
    /// to it), before anything about the verification is stored or sent.
    async fn not_opted_out(&self, phone: Phone) -> Result<(), Error> {
        let found = self.store.suppressed(&[phone]).await.map_err(store_error)?;
        if found.is_empty() {
            return Ok(());
        }
        self.metrics()
            .events
            .opt_out_refusals_total
            .with_label_values(&[crate::core::rpcs::verification_service::START_VERIFICATION])
            .inc();
        Err(Error::RecipientOptedOut { phone })
    }

    /// Refuses a number outside the allowed country prefixes.
    fn allowed(&self, phone: Phone) -> Result<(), Error> {
        let digits = phone.get().to_string();
        if self.settings.allowed_prefixes.is_empty()
            || self
                .settings
                .allowed_prefixes
                .iter()
                .any(|p| digits.starts_with(p.as_str()))
        {
            Ok(())
        } else {
            Err(Error::DestinationNotAllowed)
        }
    }

    fn view(&self, record: VerificationRecord) -> View {
        let sandbox_code = (self.settings.sandbox && record.status == VerificationStatus::Pending)
            .then_some(record.code.as_ref())
            .flatten()
            .and_then(|stored| self.codes.open(record.id, stored))
            .map(|code| code.as_str().to_owned());
        View {
            record,
            sandbox_code,
        }
    }

    /// Counts a verification reaching `status` (pending: started), by its first channel.
    fn count(&self, status: VerificationStatus, record: &VerificationRecord) {
        let event = match status {
            VerificationStatus::Pending => "started",
            other => other.as_str(),
        };
        let channel = record.channels.first().map_or("", |c| c.as_str());
        self.metrics()
            .verify
            .verifications_total
            .with_label_values(&[event, channel])
            .inc();
    }

    /// Counts the verifications a store call found past their time and marked expired.
    fn count_expired(&self, expired: &[VerificationRecord]) {
        for record in expired {
            self.count(VerificationStatus::Expired, record);
        }
    }

    /// Starts a verification of the request's number, or sends the pending one's code
    /// again; a retry of an earlier call with the same id sends nothing new. One store
    /// call decides which and records it ([`Store::start_verification`]); the send
    /// follows.
    pub async fn start(
        &self,
        caller: Option<&CallerName>,
        request: &StartVerification,
        deadline: Option<Instant>,
    ) -> Result<View, Error> {
        self.allowed(request.phone)?;
        // A fixed line takes codes only by voice: its sends (resends too) use only the
        // voice channel of the request's list.
        let channels = self.numbers.check(request.phone, &request.channels)?;
        let voiced;
        let request = if channels == request.channels {
            request
        } else {
            voiced = StartVerification {
                channels,
                ..request.clone()
            };
            &voiced
        };
        self.not_opted_out(request.phone).await?;
        let name = caller;
        let now = Utc::now();
        let interval = chrono(self.settings.resend_interval);
        let code = (!request.gateway_picks_code()).then(|| Code::generate(request.digits));
        let start = Start {
            new: NewVerification {
                id: request.id,
                caller: name.cloned(),
                phone: request.phone,
                channels: request.channels.clone(),
                code: code.as_ref().map(|c| self.codes.keep(request.id, c)),
                checks: CHECKS,
                sends_left: SENDS - 1,
                at: now,
                expires_at: now + chrono(request.ttl),
            },
            not_after: now - interval,
            limit: PhoneLimit {
                max: self.settings.phone_limit,
                since: now - chrono(PHONE_WINDOW),
            },
            guard: self
                .guard
                .check(request.phone, &request.rate_limit_keys, now),
            request_mac: self.codes.request_mac(&request.canonical()),
        };
        let decided = self
            .store
            .start_verification(&start)
            .await
            .map_err(store_error)?;
        self.count_expired(&decided.expired);
        // Refuses when the guard is on and found something; shadow mode counts it.
        if let Err(refused) = self.guard.judge(&decided.findings) {
            self.guard.count_code(request.phone, CodeOutcome::Refused);
            return Err(refused);
        }
        match decided.outcome {
            StartOutcome::Started(record) => {
                self.send(caller, request, record, Send::FRESH, deadline)
                    .await
            }
            StartOutcome::Resent(record) => {
                self.send(caller, request, record, Send::RESEND, deadline)
                    .await
            }
            StartOutcome::Replay { record, sent } => {
                // The store ties an id to its request: a retry is of the same number, by
                // the same caller, and never sends a code elsewhere.
                if record.caller.as_ref() != name || record.phone != request.phone {
                    return Err(Error::IdConflict {
                        id: request.id.get(),
                        msg_id: None,
                    });
                }
                // A voice call's answer is not kept with its claim (its code is the
                // secret): once sent, its retry answers from the verification. Any
                // other retry goes to the dispatcher, whose claim replays it, or
                // refuses a different request with the id.
                if sent && request.gateway_picks_code() {
                    return Ok(self.view(record));
                }
                let first = record.id == request.id && !sent;
                self.send(
                    caller,
                    request,
                    record,
                    Send::retried(first, sent),
                    deadline,
                )
                .await
            }
            // Its voice call has not told the code yet.
            StartOutcome::CodeAwaited(pending) => Err(Error::SendInProgress {
                id: pending.last_send.get(),
                retry_after: Duration::from_secs(1),
            }),
            StartOutcome::TooSoon { last_send_at } => Err(Error::ResendTooSoon {
                retry_after: seconds_until(last_send_at + interval, now),
            }),
            StartOutcome::Exhausted => Err(Error::SendsExhausted),
            StartOutcome::PhoneLimited { oldest } => Err(Error::PhoneRateLimited {
                retry_after: seconds_until(oldest + chrono(PHONE_WINDOW), now),
            }),
            StartOutcome::Refused => Err(Error::Internal(
                "the fraud guard refused a start without a reason".into(),
            )),
            StartOutcome::IdTaken => Err(Error::IdConflict {
                id: request.id.get(),
                msg_id: None,
            }),
        }
    }

    /// Sends `record`'s code with the request's id and channels, and records the outcome.
    async fn send(
        &self,
        caller: Option<&CallerName>,
        request: &StartVerification,
        record: VerificationRecord,
        kind: Send,
        deadline: Option<Instant>,
    ) -> Result<View, Error> {
        let code = match (&record.code, request.gateway_picks_code()) {
            (_, true) => None,
            (Some(stored), false) => Some(self.codes.open(record.id, stored).ok_or_else(|| {
                Error::Internal(
                    "a stored code does not open under MSGW_VERIFY_SECRET: was the secret changed?"
                        .into(),
                )
            })?),
            (None, false) => {
                return Err(Error::SendInProgress {
                    id: record.last_send.get(),
                    retry_after: Duration::from_secs(1),
                });
            }
        };
        let op = request.operation(code.as_ref())?;
        let sent = self
            .dispatcher
            .execute_confidential(op, deadline, caller, &self.confidential)
            .await;
        let executed = match sent {
            Ok(executed) => executed,
            Err(e) => {
                let forget = if kind.fresh && nothing_sent(&e) {
                    // Its first send was refused (or its id is another message's): the
                    // verification never existed for the user, and a retry of the id
                    // starts it afresh.
                    Some(VerificationChange::Forget { id: record.id })
                } else if nothing_sent(&e) {
                    // A resend refused (or a retry of one): the guard counts no code it
                    // did not send; a retry that sends it counts it then.
                    Some(VerificationChange::Unsent { send: request.id })
                } else if matches!(e, Error::ResultLost(_)) {
                    // A voice call was placed but its code is lost: it can never be checked.
                    Some(VerificationChange::Cancel {
                        id: record.id,
                        at: Utc::now(),
                    })
                } else {
                    None
                };
                if let Some(change) = forget {
                    self.store
                        .change_verification(&change)
                        .await
                        .map_err(store_error)?;
                }
                return Err(e);
            }
        };
        let mut record = record;
        if let Output::VoiceOtp(call) = &executed.output {
            let code = Code::given(&call.code).ok_or_else(|| Error::Unavailable {
                cause: crate::core::domain::UnavailableCause::BadResponse,
                outcome_unknown: false,
                detail: "the gateway's voice call answered without a code of digits".into(),
            })?;
            let change = VerificationChange::SetCode {
                id: record.id,
                send: request.id,
                code: self.codes.keep(record.id, &code),
            };
            if let Some(updated) = self
                .store
                .change_verification(&change)
                .await
                .map_err(store_error)?
            {
                record = updated;
            }
        }
        self.store
            .change_verification(&VerificationChange::Sent { send: request.id })
            .await
            .map_err(store_error)?;
        if kind.new_code && !executed.replayed {
            self.guard.count_code(record.phone, CodeOutcome::Sent);
        }
        if kind.first {
            // Counted once its first send is accepted: a refused one never started.
            self.count(VerificationStatus::Pending, &record);
            self.guard.count(record.phone, "started");
        }
        Ok(self.view(record))
    }
}
