//! The store: [`SqlStore`], the one implementation of core's [`Store`] port
//! (`core/ports/store`), over either database: SQLite (the embedded default, one
//! replica) or PostgreSQL (several replicas share it).
//!
//! - `claim_groups.rs`, `verifications.rs`, `guard.rs`, `scheduled.rs`, `rows.rs`: how the
//!   records of core's port are stored, and how a row reads back;
//! - `common/`: the SQL both databases speak, as plain functions over a connection of
//!   either (`common/conn.rs`);
//! - `sqlite/`, `postgres/`: what only one database does (opening, the send path's
//!   writes, event appends);
//! - `sql_store.rs`: the `Store` methods, each written once;
//! - `target.rs`: where the store is, and how a pooler in front of PostgreSQL pools;
//! - `copy.rs`: `msgw copy-store`; `migrations/`: each database's schema.

mod claim_groups;
mod common;
pub mod copy;
mod guard;
mod postgres;
mod rows;
mod scheduled;
mod sql_store;
mod sqlite;
mod target;
mod verifications;

use std::time::Duration;

// Core's records, under the names this adapter's modules use (`super::StoreError`).
use crate::core::domain::Cursor;
use crate::core::ports::store::{
    AcceptedOutcome, Appended, CheckedClaims, ClaimChange, ClaimRecord, ClaimReply, ClaimState,
    CodeCheck, Decided, Driver, DueScheduled, EarlierScheduled, Fingerprint, GuardCheck, LogAppend,
    Lookups, NewScheduled, PendingMessage, RangeHold, Retention, SandboxSave, ScheduleReply,
    ScheduledSummary, SentMessage, Settlement, Start, StartOutcome, Store, StoreError, StoredCode,
    VerificationChange, VerificationRecord,
};
pub use sql_store::SqlStore;
pub use target::{DIRECT_URL_IS, OptionNames, Pooling, StoreTarget, redacted};

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        Self::Database(Driver::new(e))
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Self::Migration(Driver::new(e))
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Embedded(Driver::new(e))
    }
}

/// Moves a newest-cursor watch forward to `cursor` (never back), waking its receivers.
fn advance(newest: &tokio::sync::watch::Sender<Cursor>, cursor: Cursor) {
    newest.send_if_modified(|n| {
        let newer = cursor > *n;
        *n = (*n).max(cursor);
        newer
    });
}

/// The cause of a database error, said once: the database's own message, or the I/O
/// error, without sqlx's wrapping.
fn cause(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(e) => e.message().to_owned(),
        sqlx::Error::Io(e) => e.to_string(),
        sqlx::Error::Tls(e) => format!("TLS: {e}"),
        other => other.to_string(),
    }
}

/// The database file of a `sqlite:` store URL; `None` for an in-memory database or
/// another URL.
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    use std::str::FromStr;
    if !url.starts_with("sqlite:") || url.contains(":memory:") || url.contains("mode=memory") {
        return None;
    }
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).ok()?;
    Some(options.get_filename().to_path_buf())
}

/// Whether a store URL names a PostgreSQL database (a store several replicas share).
pub fn is_shared(url: &str) -> bool {
    url.starts_with("postgres:") || url.starts_with("postgresql:")
}

/// Whether the store a URL names is msgw's, with the fraud guard's tables: looked up
/// without creating or migrating anything, so a command pointed at the wrong database
/// changes nothing in it.
pub async fn has_guard_tables(
    url: &str,
    password: Option<&secrecy::SecretString>,
) -> Result<bool, StoreError> {
    use sqlx::Connection;
    use std::str::FromStr;
    let found: bool = if url.starts_with("sqlite:") {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)?.read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
        sqlx::query_scalar(
            "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'guard_holds'",
        )
        .fetch_one(&mut conn)
        .await?
    } else {
        postgres::has_guard_tables(url, password).await?
    };
    Ok(found)
}

/// Opens the store `target` names: `sqlite://PATH` (created if missing),
/// `sqlite::memory:`, or `postgres://...` (with its password, when given, instead of
/// one in the URL).
pub async fn open(
    target: &StoreTarget,
    first_poll_after: Duration,
) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    let url = target.url.as_str();
    if url.starts_with("sqlite:") {
        Ok(std::sync::Arc::new(
            SqlStore::sqlite(url, first_poll_after).await?,
        ))
    } else if is_shared(url) {
        Ok(std::sync::Arc::new(
            SqlStore::postgres(target, first_poll_after).await?,
        ))
    } else {
        Err(StoreError::Config(format!(
            "unsupported store URL {:?}: expected sqlite://PATH or postgres://...",
            url.split(':').next().unwrap_or_default()
        )))
    }
}
