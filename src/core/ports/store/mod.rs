//! The store as core sees it: [`Store`], msgw's durable state (idempotency claims of
//! keyed operations, the messages msgw sent, the event log with the suppression list,
//! verifications and the fraud guard's counts, scheduled messages, the sandbox's
//! account, leases), and the records it takes and gives. `adapters/store` implements
//! it on SQLite and PostgreSQL.
//!
//! - `claim.rs`: idempotency claims and their settlements;
//! - `log.rs`: what an append to the event log carries and answers;
//! - `verification.rs`, `guard.rs`: verifications and the fraud guard's figures;
//! - `schedule.rs`: scheduled messages.

mod claim;
mod guard;
mod log;
mod schedule;
mod verification;

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::core::domain::{
    CallerName, Channel, ClientId, Cursor, Error, Grant, LogEvent, NewEvent, Phone, RateLimit,
    StatusEvent, Suppression, UnavailableCause,
};

pub use claim::{
    AcceptedOutcome, CheckedClaims, ClaimChange, ClaimRecord, ClaimReply, ClaimState, Fingerprint,
    Lookups, Settlement,
};
pub use guard::{
    BURST, Figures, GuardCheck, GuardFinding, KeyCheck, RangeHold, Scope, ScopeKind, Window,
};
pub use log::{Appended, LogAppend};
pub use schedule::{DueScheduled, EarlierScheduled, NewScheduled, ScheduleReply, ScheduledSummary};
pub use verification::{
    CodeCheck, Decided, NewVerification, PhoneLimit, Start, StartOutcome, StoredCode,
    VerificationChange, VerificationRecord,
};

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("store: {0}")]
    Database(#[source] Driver),
    /// The database's schema could not be brought up to date.
    #[error("store migration: {0}")]
    Migration(#[source] Driver),
    /// The SQLite database failed on the send path's writes.
    #[error("store: {0}")]
    Embedded(#[source] Driver),
    /// Stored data msgw cannot read back.
    #[error("store holds unreadable data: {0}")]
    Corrupt(String),
    /// A group append failed (the same failure is reported to each event of the group).
    #[error("store append failed: {0}")]
    Append(String),
    /// A store URL msgw does not support.
    #[error("{0}")]
    Config(String),
}

impl StoreError {
    /// The error a caller gets for this failure: the cause goes to the log, the caller
    /// gets `detail` (never a database message).
    pub fn unavailable(self, detail: &str) -> Error {
        tracing::error!(error = %self, "store failed");
        Error::Unavailable {
            cause: UnavailableCause::Store,
            outcome_unknown: false,
            detail: detail.to_owned(),
        }
    }
}

/// A database driver's error as the store adapter met it: its text and its causes are
/// the driver's own, and the adapter can look at it again ([`Driver::get`]); core only
/// reports it.
pub struct Driver(Box<dyn std::error::Error + Send + Sync>);

impl Driver {
    /// Wraps the driver's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }

    /// The driver's error, if it is an `E`.
    pub fn get<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Driver {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// One save of the built-in sandbox's account: what changed since the last one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxSave {
    /// The account's document (balance, id counters, templates), when it changed.
    pub account: Option<String>,
    /// The records (JSON) of the client ids whose message or delivery changed; each id
    /// at most once.
    pub messages: Vec<(u64, String)>,
}

/// A message msgw sent and tracks until its status is final.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    /// Client id.
    pub client_id: ClientId,
    /// Gateway id.
    pub msg_id: String,
    /// The first channel.
    pub channel: Channel,
    /// When msgw sent it.
    pub sent_at: DateTime<Utc>,
    /// How long the gateway keeps trying.
    pub lifetime: Duration,
    /// The number it went to (a reply to it opts that number out); `None` when msgw
    /// learned of the send without its request (an outcome reconcile recovered).
    pub phone: Option<Phone>,
}

/// A sent message whose status is not final yet and is due for a poll.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingMessage {
    /// Client id.
    pub client_id: ClientId,
    /// When msgw sent it.
    pub sent_at: DateTime<Utc>,
    /// How long the gateway keeps trying.
    pub lifetime: Duration,
    /// Polls made so far.
    pub polls: u32,
}

/// Bounds of the event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Events older than this are dropped.
    pub max_age: Duration,
    /// At most this many events are kept.
    pub max_events: u64,
    /// Idempotency claims older than this are dropped (unless reconcile still tracks
    /// their message).
    pub claims_max_age: Duration,
    /// The fraud guard's counts older than this are dropped (its longest window).
    pub guard_max_age: Duration,
    /// A key's approval older than this no longer makes it trusted, and is dropped.
    pub trusted_keys_max_age: Duration,
}

/// msgw's durable state.
#[tonic::async_trait]
pub trait Store: std::fmt::Debug + Send + Sync + 'static {
    /// Applies claim changes in order, one reply each: settlements and take-overs of
    /// a group in one transaction, claims each atomic on its own. Settling an accepted
    /// send also records its message for reconcile, in the same transaction.
    async fn apply_claims(&self, changes: &[ClaimChange]) -> Result<Vec<ClaimReply>, StoreError>;

    /// Applies a group of claims as [`Store::apply_claims`] does and reads which of
    /// `recipients` are on the suppression list, in the same round trip where the store
    /// can (the send path's writer transaction on SQLite, one statement on PostgreSQL):
    /// the send path's one store call per dispatch group.
    async fn claim_checking(
        &self,
        changes: &[ClaimChange],
        recipients: &[Phone],
    ) -> Result<CheckedClaims, StoreError>;

    /// Groups of claims, and of settlements, worth writing at once: 1 where one writer
    /// serializes them anyway (SQLite); more where each commit waits for a sync that
    /// concurrent commits share (PostgreSQL).
    fn send_path_writers(&self) -> usize {
        1
    }

    /// The claim of `id`, if any.
    async fn claim_of(&self, id: ClientId) -> Result<Option<ClaimRecord>, StoreError>;

    /// Claims whose outcome is still open once nothing can change it any more: unknown
    /// ones whose settle window ended by `now`, and in-flight ones claimed at or before
    /// `in_flight_before` (their owner stopped); oldest first, at most `limit`.
    async fn unsettled_claims(
        &self,
        now: DateTime<Utc>,
        in_flight_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<(ClientId, ClaimRecord)>, StoreError>;

    /// The client id of a gateway message id, if msgw sent it.
    async fn client_id_of(&self, msg_id: &str) -> Result<Option<ClientId>, StoreError>;

    /// Appends to the event log in one transaction, in order, one answer each (see
    /// [`LogAppend`]): reports, each unless the same event is stored already, with the
    /// suppression list changes their keyword replies make, and callers' changes of the
    /// list, each with its event. Cursors are handed out in commit order, across every
    /// process that shares the store: once a reader has seen cursor N, no event with a
    /// cursor at or below N commits later.
    async fn append_log(&self, appends: &[LogAppend]) -> Result<Vec<Appended>, StoreError>;

    /// Appends reports whose replies change nothing ([`Store::append_log`]): each
    /// event with its cursor, `None` for a duplicate.
    async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<Option<StatusEvent>>, StoreError> {
        let appends: Vec<LogAppend> = events.iter().cloned().map(LogAppend::report).collect();
        Ok(self
            .append_log(&appends)
            .await?
            .into_iter()
            .map(|a| a.status)
            .collect())
    }

    /// Up to `limit` events (statuses and list changes) with a cursor above `cursor`,
    /// in cursor order.
    async fn events_after(&self, cursor: Cursor, limit: u32) -> Result<Vec<LogEvent>, StoreError>;

    /// The numbers among `phones` that are on the suppression list (one read).
    async fn suppressed(&self, phones: &[Phone]) -> Result<Vec<Phone>, StoreError>;

    /// The suppression list's entry of `phone`, if it is on it.
    async fn suppression(&self, phone: Phone) -> Result<Option<Suppression>, StoreError>;

    /// Up to `limit` entries of the suppression list after `after` (from the first when
    /// `None`), in number order.
    async fn suppressions(
        &self,
        after: Option<Phone>,
        limit: u32,
    ) -> Result<Vec<Suppression>, StoreError>;

    /// The final event of message `client_id` if one is retained, else its newest.
    async fn last_event_of(&self, client_id: ClientId) -> Result<Option<StatusEvent>, StoreError>;

    /// The oldest retained cursor, if any event is retained.
    async fn oldest_cursor(&self) -> Result<Option<Cursor>, StoreError>;

    /// The newest cursor ever handed out (0 before the first event), retained or not.
    async fn latest_cursor(&self) -> Result<Cursor, StoreError>;

    /// The newest committed cursor this store has heard of: its own appends and, on a
    /// shared store, other replicas' (a hint to read the store, never a replacement for
    /// it: after a lost notification it is corrected from the store).
    fn appended(&self) -> tokio::sync::watch::Receiver<Cursor>;

    /// The send time of the latest message scheduled on this store that this handle
    /// heard of (on a shared store, other replicas' too): a hint for the scheduler to
    /// look sooner than its next look, never a replacement for looking.
    fn scheduled_heard(&self) -> tokio::sync::watch::Receiver<Option<DateTime<Utc>>>;

    /// Takes up to `want` operations (all or none below `at_least`; `paced`: see
    /// [`crate::core::domain::RateWindow::grant`]) from the deployment's rate toward the
    /// gateway, kept in this store for every replica on it, on the store's clock.
    /// `None`: this store is no shared one (one process keeps the rate itself).
    async fn take_rate(
        &self,
        limit: RateLimit,
        want: u32,
        at_least: u32,
        paced: bool,
    ) -> Result<Option<Grant>, StoreError>;

    /// Drops events beyond the retention, messages that no longer need tracking and
    /// claims past their retention; returns how many events were dropped.
    async fn prune(&self, retention: Retention, now: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Takes up to `limit` non-final messages whose next poll is due at `now`, and
    /// moves their next poll to `now + lease`: a message is polled by one replica at a
    /// time, and polled again after the lease if that replica never reschedules it.
    async fn take_due_for_poll(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<PendingMessage>, StoreError>;

    /// Schedules the next poll of a message, or stops polling it (`None`).
    async fn schedule_poll(
        &self,
        client_id: ClientId,
        next: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError>;

    /// Claims `new.id` as scheduled and keeps its request until it has left, in one
    /// transaction; or the claim the id has already.
    async fn schedule(&self, new: &NewScheduled) -> Result<ScheduleReply, StoreError>;

    /// Cancels the scheduled message `id` if it has not left (its claim becomes
    /// `canceled`, its request is dropped): when it was to leave; `None` when its claim
    /// was not scheduled (any more).
    async fn cancel_scheduled(
        &self,
        id: ClientId,
        at: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// Takes up to `limit` scheduled messages due at `now`, oldest first, and moves
    /// their next take to `now + lease`: one replica at a time takes a message, and
    /// another takes it after the lease if that one never forgets it.
    async fn take_due_scheduled(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DueScheduled>, StoreError>;

    /// Drops the kept requests of messages that have left (or never can).
    async fn forget_scheduled(&self, ids: &[ClientId]) -> Result<(), StoreError>;

    /// How many scheduled messages are kept, and when the next is due.
    async fn scheduled_summary(&self) -> Result<ScheduledSummary, StoreError>;

    /// Up to `limit` requests an earlier version of msgw kept, in its form, soonest due
    /// first: each leaves once moved into this version's form
    /// ([`Store::move_earlier_scheduled`]).
    async fn earlier_scheduled(&self, limit: u32) -> Result<Vec<EarlierScheduled>, StoreError>;

    /// Moves the request of `id` an earlier version kept to where this version keeps
    /// requests, as `payload`, with its time, lease, caller and tries (its claim is
    /// untouched): false when it is gone (it left, or was cancelled or moved meanwhile).
    async fn move_earlier_scheduled(
        &self,
        id: ClientId,
        payload: Vec<u8>,
    ) -> Result<bool, StoreError>;

    /// Takes or renews the lease `name` for `holder` until `now + ttl`; true when
    /// `holder` holds it (nobody else held an unexpired lease).
    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// The built-in sandbox's saved document of `account` (balance, id counters,
    /// templates: JSON), if any.
    async fn sandbox_state(&self, account: &str) -> Result<Option<String>, StoreError>;

    /// The built-in sandbox's saved messages of `account`: each client id's record (JSON).
    async fn sandbox_messages(&self, account: &str) -> Result<Vec<(u64, String)>, StoreError>;

    /// Saves what changed in the built-in sandbox's `account`, in one transaction.
    async fn save_sandbox(&self, account: &str, save: &SandboxSave) -> Result<(), StoreError>;

    /// Starts a verification of a number with its first send, or sends the caller's
    /// pending one again, or replays a retried send: reads, decides and writes in one
    /// transaction, in which calls about one number take turns across replicas (see
    /// [`StartOutcome`]). The fraud guard (checked when `start.guard` is given) judges
    /// a start and a resend's range; what it found comes with the answer (a shadow
    /// guard finds without refusing), and a hold it placed stays even when the call
    /// is refused.
    async fn start_verification(&self, start: &Start) -> Result<Decided<StartOutcome>, StoreError>;

    /// Checks a code against the caller's pending verification of `phone` that has not
    /// expired at `now`, in one transaction: approved when `right` says the code is
    /// its, else one check less (the last one fails it); the verification after the
    /// check, `None` when none is pending. After an approval, with `lift` (an enforcing
    /// guard's check of the number's range), a hold of the range whose figures no longer
    /// call for it ends (a `Lifted` finding).
    async fn check_verification(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        now: DateTime<Utc>,
        right: CodeCheck<'_>,
        lift: Option<&GuardCheck>,
    ) -> Result<Decided<Option<VerificationRecord>>, StoreError>;

    /// Cancels the caller's pending verification of `phone`, in one transaction; `None`
    /// when none is pending.
    async fn cancel_verification(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        now: DateTime<Utc>,
    ) -> Result<Decided<Option<VerificationRecord>>, StoreError>;

    /// The caller's pending verification of `phone` that has not expired at `now`, in
    /// one transaction that first marks those past their time expired.
    async fn pending_verification(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        now: DateTime<Utc>,
    ) -> Result<Decided<Option<VerificationRecord>>, StoreError>;

    /// The hold of `range` in force at `now`.
    async fn range_hold(
        &self,
        range: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<RangeHold>, StoreError>;

    /// Ranges held at `now`, in range order after `after`, at most `limit`.
    async fn held_ranges(
        &self,
        now: DateTime<Utc>,
        after: &str,
        limit: u32,
    ) -> Result<Vec<RangeHold>, StoreError>;

    /// Ends the hold of `range` at `now` (its figures count afresh from then on);
    /// `None` when it was not held.
    async fn release_range(
        &self,
        range: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<RangeHold>, StoreError>;

    /// The verification a send (by client id) belongs to, and whether the gateway
    /// accepted that send.
    async fn verification_of_send(
        &self,
        send: ClientId,
    ) -> Result<Option<(VerificationRecord, bool)>, StoreError>;

    /// Applies one change of a verification atomically: the verification after it, or
    /// `None` when the verification was no longer as the change expects.
    async fn change_verification(
        &self,
        change: &VerificationChange,
    ) -> Result<Option<VerificationRecord>, StoreError>;

    /// Flushes and closes the store.
    async fn close(&self);
}
