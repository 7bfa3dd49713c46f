//! The built-in sandbox's account in the store: its document (`sandbox_state`:
//! balance, id counters, templates) and its messages (`sandbox_messages`, one row per
//! client id), so that a save writes only what changed since the last one. The reads
//! are SQL both databases speak (`shared.rs`); a save is one transaction, written here
//! per database.

use sqlx::{PgPool, SqlitePool};

use super::rows::{id_to_db, ms};
use super::{SandboxSave, StoreError};

/// Reads the sandbox's document (`$1`: account).
pub(super) const STATE_SQL: &str = "SELECT state FROM sandbox_state WHERE account = $1";

/// Reads the sandbox's messages (`$1`: account).
pub(super) const MESSAGES_SQL: &str = "SELECT id, record FROM sandbox_messages WHERE account = $1";

/// Saves the sandbox's document (`$1`: account, `$2`: state, `$3`: now).
const SAVE_STATE_SQL: &str = "INSERT INTO sandbox_state (account, state, saved_at_ms)
     VALUES ($1, $2, $3)
     ON CONFLICT (account) DO UPDATE SET state = excluded.state, saved_at_ms = excluded.saved_at_ms";

/// Saves a change on SQLite: one statement per message row, parsed once and stepped
/// per row (SQLite parses a statement by its length: one row of placeholders per
/// message would cost more to parse than to write).
pub(super) async fn save_sqlite(
    writer: &SqlitePool,
    account: &str,
    save: &SandboxSave,
) -> Result<(), StoreError> {
    // IMMEDIATE: the write lock first, like every other write to the file.
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    if let Some(state) = &save.account {
        sqlx::query(SAVE_STATE_SQL)
            .bind(account)
            .bind(state)
            .bind(ms(chrono::Utc::now()))
            .execute(&mut *tx)
            .await?;
    }
    for (id, record) in &save.messages {
        sqlx::query(
            "INSERT INTO sandbox_messages (account, id, record) VALUES ($1, $2, $3)
             ON CONFLICT (account, id) DO UPDATE SET record = excluded.record",
        )
        .bind(account)
        .bind(id_to_db(*id))
        .bind(record.as_str())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Saves a change on PostgreSQL: the message rows in one statement (one round trip
/// whatever the group's size). The ids of one save are distinct, as one statement
/// must not update a row twice.
pub(super) async fn save_postgres(
    pool: &PgPool,
    account: &str,
    save: &SandboxSave,
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    if let Some(state) = &save.account {
        sqlx::query(SAVE_STATE_SQL)
            .bind(account)
            .bind(state)
            .bind(ms(chrono::Utc::now()))
            .execute(&mut *tx)
            .await?;
    }
    if !save.messages.is_empty() {
        let ids: Vec<i64> = save.messages.iter().map(|(id, _)| id_to_db(*id)).collect();
        let records: Vec<&str> = save.messages.iter().map(|(_, r)| r.as_str()).collect();
        sqlx::query(
            "INSERT INTO sandbox_messages (account, id, record)
             SELECT $1, * FROM UNNEST($2::BIGINT[], $3::TEXT[])
             ON CONFLICT (account, id) DO UPDATE SET record = excluded.record",
        )
        .bind(account)
        .bind(&ids)
        .bind(&records)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
