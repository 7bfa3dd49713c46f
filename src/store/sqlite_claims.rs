//! SQLite side of the idempotency claims: every change runs inside the caller's
//! transaction, so a group of changes commits (or fails) together.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use chrono::{DateTime, Utc};
use rusqlite::types::Value;
use sqlx::{Connection, Sqlite, SqliteConnection};

use super::claims::{ClaimOutcome, Grouped, NewClaim, Settle, grouped};
use super::rows::{ClaimRow, SettlementColumns, attempt_from_db, ms, seconds, settlement_columns};
use super::{
    ClaimChange, ClaimRecord, ClaimReply, Fingerprint, SentMessage, Settlement, StoreError,
};
use crate::domain::{CallerName, ClientId};

fn id_to_db(id: ClientId) -> i64 {
    super::rows::id_to_db(id.get())
}

/// Applies a group of changes in order on the writer connection. The send path's groups
/// (only claims, or only settlements) run whole on this thread with the connection
/// locked out from sqlx's worker ([`on_locked`]): one hand-off per group, not one per
/// statement and row. Other groups run change by change in one transaction.
pub(super) async fn apply_all(
    conn: &mut SqliteConnection,
    changes: &[ClaimChange],
    first_poll_after: Duration,
) -> Result<Vec<ClaimReply>, StoreError> {
    match grouped(changes) {
        Grouped::Claims(claims) => {
            let inserted = on_locked(conn, |db| insert_claims(db, &claims)).await?;
            return replies_of_claims(conn, &claims, &inserted).await;
        }
        Grouped::Settlements(settlements) => {
            return on_locked(conn, |db| settle_all(db, &settlements, first_poll_after)).await;
        }
        Grouped::Mixed => {}
    }
    apply_in(conn.begin().await?, changes, first_poll_after).await
}

/// Runs `work` on the writer's SQLite connection, locked out from the sqlx worker
/// thread that otherwise drives it, on this thread and in one go.
async fn on_locked<T>(
    conn: &mut SqliteConnection,
    work: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    let mut locked = conn.lock_handle().await?;
    // SAFETY: `lock_handle` keeps sqlx's worker off the database handle until `locked`
    // drops, so this thread has it alone. The rusqlite connection wraps the handle
    // without owning it (`from_handle` never closes it) and is dropped, finalizing the
    // statements it prepared, before `locked` is.
    let db = unsafe { rusqlite::Connection::from_handle(locked.as_raw_handle().as_ptr()) }?;
    let done = work(&db);
    drop(db);
    drop(locked);
    Ok(done?)
}

/// Claims every id not claimed yet with one INSERT (each claim is atomic on its own, so
/// no transaction is needed around them); returns the ids it inserted.
fn insert_claims(
    db: &rusqlite::Connection,
    claims: &[NewClaim<'_>],
) -> rusqlite::Result<HashSet<i64>> {
    let mut inserted = HashSet::with_capacity(claims.len());
    for chunk in super::rows::row_chunks(claims) {
        let sql = format!(
            "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller) VALUES {}
             ON CONFLICT (client_id) DO NOTHING RETURNING client_id",
            rows_of("(?, ?, 1, 'in_flight', ?, ?)", chunk.len())
        );
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 4);
        for (id, fingerprint, caller, at) in chunk {
            values.extend([
                Value::Integer(id_to_db(*id)),
                Value::Blob(fingerprint.0.to_vec()),
                Value::Integer(ms(*at)),
                caller.map_or(Value::Null, |c| Value::Text(c.to_owned())),
            ]);
        }
        let mut statement = db.prepare(&sql)?;
        let mut rows = statement.query(rusqlite::params_from_iter(values))?;
        while let Some(row) = rows.next()? {
            inserted.insert(row.get(0)?);
        }
    }
    Ok(inserted)
}

/// The replies to a group of claims: claimed where inserted; otherwise (claimed
/// before, or earlier in this group) the id's current record, read back.
async fn replies_of_claims(
    conn: &mut SqliteConnection,
    claims: &[NewClaim<'_>],
    inserted: &HashSet<i64>,
) -> Result<Vec<ClaimReply>, StoreError> {
    let outcome = ClaimOutcome::new(claims.iter().map(|c| id_to_db(c.0)).collect(), inserted);
    let existing = outcome.to_read();
    let mut records = HashMap::new();
    for chunk in super::rows::row_chunks(&existing) {
        let mut query =
            sqlx::QueryBuilder::<Sqlite>::new("SELECT * FROM claims WHERE client_id IN (");
        let mut ids = query.separated(", ");
        for id in chunk {
            ids.push_bind(*id);
        }
        query.push(")");
        for row in query
            .build_query_as::<ClaimRow>()
            .fetch_all(&mut *conn)
            .await?
        {
            records.insert(row.client_id, ClaimRecord::try_from(row)?);
        }
    }
    outcome.replies(&records)
}

/// Records the outcomes of distinct ids in one transaction: the reconcile rows of
/// accepted sends whose attempt still matches, then the outcomes themselves (only where
/// the attempt matches).
fn settle_all(
    db: &rusqlite::Connection,
    settlements: &[Settle<'_>],
    first_poll_after: Duration,
) -> rusqlite::Result<Vec<ClaimReply>> {
    db.execute_batch("BEGIN IMMEDIATE")?;
    match settle_in_transaction(db, settlements, first_poll_after) {
        Ok(settled) => {
            db.execute_batch("COMMIT")?;
            Ok(settlements
                .iter()
                .map(|(id, ..)| {
                    if settled.contains(&id_to_db(*id)) {
                        ClaimReply::Settled
                    } else {
                        ClaimReply::Superseded
                    }
                })
                .collect())
        }
        Err(e) => {
            // End the transaction here: the connection goes back to the pool.
            let _ = db.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// The statements of [`settle_all`]; returns the ids whose outcome was recorded.
fn settle_in_transaction(
    db: &rusqlite::Connection,
    settlements: &[Settle<'_>],
    first_poll_after: Duration,
) -> rusqlite::Result<HashSet<i64>> {
    let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
    let mut settled = HashSet::with_capacity(settlements.len());
    for chunk in super::rows::row_chunks(settlements) {
        // Every settlement has a row here (NULL msg_id: nothing to track).
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 7);
        for (id, attempt, settlement, _) in chunk {
            let message: Option<&SentMessage> = match settlement {
                Settlement::Accepted(_, Some(message)) => Some(message),
                _ => None,
            };
            values.extend([
                Value::Integer(id_to_db(*id)),
                Value::Integer(i64::from(*attempt)),
                message.map_or(Value::Null, |m| Value::Text(m.msg_id.clone())),
                message.map_or(Value::Null, |m| Value::Text(m.channel.as_str().to_owned())),
                message.map_or(Value::Null, |m| Value::Integer(ms(m.sent_at))),
                message.map_or(Value::Null, |m| Value::Integer(seconds(m.lifetime))),
                message.map_or(Value::Null, |m| Value::Integer(ms(m.sent_at + after))),
            ]);
        }
        db.prepare(&format!(
            "WITH m (client_id, attempt, msg_id, channel, sent_at_ms, lifetime_s, next_poll_ms) AS (VALUES {})
             INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s,
                                   last_status, is_final, next_poll_ms, polls)
             SELECT m.client_id, m.msg_id, m.channel, m.sent_at_ms, m.lifetime_s, NULL, 0,
                    m.next_poll_ms, 0
               FROM m JOIN claims c ON c.client_id = m.client_id AND c.attempt = m.attempt
              WHERE m.msg_id IS NOT NULL
             ON CONFLICT (client_id) DO UPDATE SET
               msg_id = excluded.msg_id, channel = excluded.channel,
               sent_at_ms = excluded.sent_at_ms, lifetime_s = excluded.lifetime_s,
               last_status = NULL, is_final = 0, next_poll_ms = excluded.next_poll_ms,
               polls = 0",
            rows_of("(?, ?, ?, ?, ?, ?, ?)", chunk.len())
        ))?
        .execute(rusqlite::params_from_iter(values))?;
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 10);
        for (id, attempt, settlement, at) in chunk {
            let columns = settlement_columns(settlement);
            values.extend([
                Value::Integer(id_to_db(*id)),
                Value::Integer(i64::from(*attempt)),
                Value::Text(columns.state.to_owned()),
                Value::Integer(ms(*at)),
                columns
                    .accepted
                    .and_then(|a| a.msg_id.clone())
                    .map_or(Value::Null, Value::Text),
                columns
                    .accepted
                    .map_or(Value::Null, |a| Value::Integer(i64::from(a.parts))),
                columns
                    .accepted
                    .map_or(Value::Null, |a| Value::Text(a.payload.to_string())),
                Value::Integer(i64::from(columns.accepted.is_some_and(|a| a.recovered))),
                columns
                    .reason
                    .map_or(Value::Null, |r| Value::Text(r.to_owned())),
                columns.settle_until_ms.map_or(Value::Null, Value::Integer),
            ]);
        }
        let mut statement = db.prepare(&format!(
            "WITH v (client_id, attempt, state, settled_at_ms, msg_id, parts, payload, recovered,
                     reason, settle_until_ms) AS (VALUES {})
             UPDATE claims SET state = v.state, settled_at_ms = v.settled_at_ms,
                    msg_id = v.msg_id, parts = v.parts, payload = v.payload,
                    recovered = v.recovered, reason = v.reason, settle_until_ms = v.settle_until_ms
               FROM v WHERE claims.client_id = v.client_id AND claims.attempt = v.attempt
             RETURNING client_id",
            rows_of("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", chunk.len())
        ))?;
        let mut rows = statement.query(rusqlite::params_from_iter(values))?;
        while let Some(row) = rows.next()? {
            settled.insert(row.get(0)?);
        }
    }
    Ok(settled)
}

/// `n` copies of a row of placeholders, comma-separated.
fn rows_of(row: &str, n: usize) -> String {
    let mut sql = String::with_capacity((row.len() + 2) * n);
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(row);
    }
    sql
}

super::claim_changes::change_by_change!(Sqlite);
