//! The built-in sandbox's account in the store: its document (`sandbox_state`:
//! balance, id counters, templates) and its messages (`sandbox_messages`, one row per
//! client id), so that a save writes only what changed since the last one. The reads
//! and the document's save are written here once; each database writes a save's
//! message rows its own way (`sqlite/mod.rs`, `postgres/mod.rs`), in the same
//! transaction.

use super::conn::{Conn, Sql};
use crate::adapters::store::StoreError;
use crate::adapters::store::rows::{id_from_db, ms};

/// The sandbox's document of `account`, if saved.
pub(in crate::adapters::store) async fn state(
    conn: &mut Conn<'_>,
    account: &str,
) -> Result<Option<String>, StoreError> {
    let sql = Sql::new("SELECT state FROM sandbox_state WHERE account = $1").bind(account);
    let row: Option<(String,)> = conn.fetch_optional(sql).await?;
    Ok(row.map(|(state,)| state))
}

/// The sandbox's messages of `account`: each client id's record.
pub(in crate::adapters::store) async fn messages(
    conn: &mut Conn<'_>,
    account: &str,
) -> Result<Vec<(u64, String)>, StoreError> {
    let sql = Sql::new("SELECT id, record FROM sandbox_messages WHERE account = $1").bind(account);
    let rows: Vec<(i64, String)> = conn.fetch_all(sql).await?;
    Ok(rows
        .into_iter()
        .map(|(id, record)| (id_from_db(id), record))
        .collect())
}

/// Saves the sandbox's document of `account`.
pub(in crate::adapters::store) async fn save_state(
    conn: &mut Conn<'_>,
    account: &str,
    state: &str,
) -> Result<(), StoreError> {
    let sql = Sql::new(
        "INSERT INTO sandbox_state (account, state, saved_at_ms) VALUES ($1, $2, $3)
         ON CONFLICT (account) DO UPDATE SET state = excluded.state,
                                             saved_at_ms = excluded.saved_at_ms",
    )
    .bind(account)
    .bind(state)
    .bind(ms(chrono::Utc::now()));
    conn.execute(sql).await.map(drop)
}
