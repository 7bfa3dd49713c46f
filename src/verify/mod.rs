//! Verification: one-time codes as a service on top of the sends. A verification's
//! sends are ordinary sends through the dispatcher (the request's id is the send's
//! client id, exactly once, with events), whose claims keep no copy of the code
//! ([`crate::dispatch::Confidential`]); the code itself is kept only as an HMAC and
//! sealed under the verify secret ([`code`]). Every change of a verification is one
//! conditional write in the store, so checks and resends are atomic across replicas.

mod answers;
pub mod code;
pub mod guard;
mod request;
mod settings;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::auth::Caller;
use crate::dispatch::{Confidential, Dispatcher};
use crate::domain::{CallerName, Error, Output, Phone, VerificationStatus};
use crate::metrics::Metrics;
use crate::store::{
    Created, NewVerification, PhoneLimit, Store, StoreError, VerificationChange, VerificationRecord,
};
pub use code::{Code, Codes};
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
}

impl Send {
    const FRESH: Self = Self {
        fresh: true,
        first: true,
    };

    fn retried(first: bool) -> Self {
        Self {
            fresh: false,
            first,
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
            settings,
            guard,
        }
    }

    /// The store verifications are kept in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
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
            .verifications_total
            .with_label_values(&[event, channel])
            .inc();
    }

    /// Marks the caller's verification of `phone` expired once past its time.
    async fn expire(&self, caller: Option<&CallerName>, phone: Phone) -> Result<(), Error> {
        let expired = self
            .store
            .expire_verifications(caller, phone, Utc::now())
            .await
            .map_err(store_error)?;
        for record in &expired {
            self.count(VerificationStatus::Expired, record);
        }
        Ok(())
    }

    async fn pending(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
    ) -> Result<Option<VerificationRecord>, Error> {
        self.expire(caller, phone).await?;
        self.store
            .pending_verification(caller, phone, Utc::now())
            .await
            .map_err(store_error)
    }

    /// Starts a verification of the request's number, or sends the pending one's code
    /// again; a retry of an earlier call with the same id sends nothing new.
    pub async fn start(
        &self,
        caller: &Caller,
        request: &StartVerification,
        deadline: Option<Instant>,
    ) -> Result<View, Error> {
        self.allowed(request.phone)?;
        let name = caller.name.as_ref();
        // Each turn either answers or learns that another call moved first (then the
        // next turn sees what it did); three turns cover every interleaving.
        for _ in 0..3 {
            if let Some((record, sent)) = self
                .store
                .verification_of_send(request.id)
                .await
                .map_err(store_error)?
            {
                if record.caller.as_ref() != name {
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
                return self
                    .send(caller, request, record, Send::retried(first), deadline)
                    .await;
            }
            let now = Utc::now();
            if let Some(pending) = self.pending(name, request.phone).await? {
                if pending.code.is_none() && !request.gateway_picks_code() {
                    // Its voice call has not told the code yet.
                    return Err(Error::SendInProgress {
                        id: pending.last_send.get(),
                        retry_after: Duration::from_secs(1),
                    });
                }
                self.guard
                    .resend(self.store.as_ref(), request.phone, now)
                    .await?;
                let not_after = now - chrono(self.settings.resend_interval);
                let resend = VerificationChange::Resend {
                    id: pending.id,
                    send: request.id,
                    channels: request.channels.clone(),
                    forget_code: request.gateway_picks_code(),
                    at: now,
                    not_after,
                };
                match self
                    .store
                    .change_verification(&resend)
                    .await
                    .map_err(store_error)?
                {
                    Some(record) => {
                        return self
                            .send(caller, request, record, Send::retried(false), deadline)
                            .await;
                    }
                    // This very request's id is a send of it already (a concurrent
                    // retry got there first): the next turn replays that send.
                    None if self
                        .store
                        .verification_of_send(request.id)
                        .await
                        .map_err(store_error)?
                        .is_some() =>
                    {
                        continue;
                    }
                    None if pending.sends_left == 0 => return Err(Error::SendsExhausted),
                    None if pending.last_send_at > not_after => {
                        return Err(Error::ResendTooSoon {
                            retry_after: seconds_until(
                                pending.last_send_at + chrono(self.settings.resend_interval),
                                now,
                            ),
                        });
                    }
                    None => continue,
                }
            }
            let code = (!request.gateway_picks_code()).then(|| Code::generate(request.digits));
            let new = NewVerification {
                id: request.id,
                caller: name.cloned(),
                phone: request.phone,
                channels: request.channels.clone(),
                code: code.as_ref().map(|c| self.codes.keep(request.id, c)),
                checks: CHECKS,
                sends_left: SENDS - 1,
                at: now,
                expires_at: now + chrono(request.ttl),
            };
            let limit = PhoneLimit {
                max: self.settings.phone_limit,
                since: now - chrono(PHONE_WINDOW),
            };
            let guard = self
                .guard
                .check(request.phone, &request.rate_limit_keys, now);
            let (created, findings) = self
                .store
                .create_verification(&new, limit, guard.as_ref())
                .await
                .map_err(store_error)?;
            match created {
                Created::Started(record) => {
                    // Shadow mode: what it found is counted, nothing refused.
                    self.guard.judge(&findings)?;
                    return self
                        .send(caller, request, record, Send::FRESH, deadline)
                        .await;
                }
                Created::Refused => {
                    self.guard.judge(&findings)?;
                    return Err(Error::Internal(
                        "the fraud guard refused a start without a reason".into(),
                    ));
                }
                Created::PhoneLimited { oldest } => {
                    return Err(Error::PhoneRateLimited {
                        retry_after: seconds_until(oldest + chrono(PHONE_WINDOW), now),
                    });
                }
                Created::Pending(_) | Created::IdTaken => continue,
            }
        }
        Err(Error::IdConflict {
            id: request.id.get(),
            msg_id: None,
        })
    }

    /// Sends `record`'s code with the request's id and channels, and records the outcome.
    async fn send(
        &self,
        caller: &Caller,
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
            .execute_confidential(op, deadline, caller.name.as_ref(), &self.confidential)
            .await;
        let executed = match sent {
            Ok(executed) => executed,
            Err(e) => {
                let forget = if kind.fresh && nothing_sent(&e) {
                    // Its first send was refused (or its id is another message's): the
                    // verification never existed for the user, and a retry of the id
                    // starts it afresh.
                    Some(VerificationChange::Forget { id: record.id })
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
                cause: crate::domain::UnavailableCause::BadResponse,
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
        if kind.first {
            // Counted once its first send is accepted: a refused one never started.
            self.count(VerificationStatus::Pending, &record);
            self.guard.count(record.phone, "started");
        }
        Ok(self.view(record))
    }
}
