//! Durable state: idempotency claims of keyed operations, the messages msgw sent
//! (for reconcile) and the event log (for resumable streams). One trait; SQLite is
//! the embedded implementation.

mod claims;
mod group;
mod sqlite;
mod sqlite_claims;

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::{Channel, ClientId, Error, NewEvent, StatusEvent, UnavailableCause};

pub use claims::{
    AcceptedOutcome, ClaimChange, ClaimRecord, ClaimReply, ClaimState, Fingerprint, Settlement,
};
pub use group::GroupWriter;
pub use sqlite::SqliteStore;

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("store: {0}")]
    Database(#[from] sqlx::Error),
    /// The database's schema could not be brought up to date.
    #[error("store migration: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
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
}

/// msgw's durable state.
#[tonic::async_trait]
pub trait Store: std::fmt::Debug + Send + Sync + 'static {
    /// Applies claim changes in order, one reply each: settlements and take-overs of
    /// a group in one transaction, claims each atomic on its own. Settling an accepted
    /// send also records its message for reconcile, in the same transaction.
    async fn apply_claims(&self, changes: &[ClaimChange]) -> Result<Vec<ClaimReply>, StoreError>;

    /// The claim of `id`, if any.
    async fn claim_of(&self, id: ClientId) -> Result<Option<ClaimRecord>, StoreError>;

    /// The client id of a gateway message id, if msgw sent it.
    async fn client_id_of(&self, msg_id: &str) -> Result<Option<u64>, StoreError>;

    /// Appends events in one transaction, each unless the same event is stored already
    /// (`None` for a duplicate), and returns them with their cursors in order.
    /// Callers serialize appends, so cursors are handed out in commit order.
    async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<Option<StatusEvent>>, StoreError>;

    /// Up to `limit` events with a cursor above `cursor`, in cursor order.
    async fn events_after(&self, cursor: u64, limit: u32) -> Result<Vec<StatusEvent>, StoreError>;

    /// The oldest retained cursor, if any event is retained.
    async fn oldest_cursor(&self) -> Result<Option<u64>, StoreError>;

    /// The newest cursor ever handed out (0 before the first event), retained or not.
    async fn latest_cursor(&self) -> Result<u64, StoreError>;

    /// Drops events beyond the retention, messages that no longer need tracking and
    /// claims past their retention; returns how many events were dropped.
    async fn prune(&self, retention: Retention, now: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Up to `limit` non-final messages whose next poll is due at `now`.
    async fn due_for_poll(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<PendingMessage>, StoreError>;

    /// Schedules the next poll of a message, or stops polling it (`None`).
    async fn schedule_poll(
        &self,
        client_id: ClientId,
        next: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError>;

    /// Flushes and closes the store.
    async fn close(&self);
}

/// Opens the store a URL names: `sqlite://PATH` (created if missing) or `sqlite::memory:`.
pub async fn open(
    url: &str,
    first_poll_after: Duration,
) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(std::sync::Arc::new(
            SqliteStore::open(url, first_poll_after).await?,
        ))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Err(StoreError::Config(
            "PostgreSQL stores are not supported by this build of msgw yet; use sqlite://PATH"
                .into(),
        ))
    } else {
        Err(StoreError::Config(format!(
            "unsupported store URL {:?}: expected sqlite://PATH",
            url.split(':').next().unwrap_or_default()
        )))
    }
}
