//! SQLite side of the idempotency claims: every change runs inside the caller's
//! transaction, so a group of changes commits (or fails) together.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use chrono::{DateTime, Utc};
use sqlx::{Connection, Sqlite, SqliteConnection};

use super::claims::{ClaimOutcome, Grouped, NewClaim, Settle, grouped};
use super::rows::{ClaimRow, SettlementColumns, attempt_from_db, ms, seconds, settlement_columns};
use super::{ClaimChange, ClaimRecord, ClaimReply, Fingerprint, Settlement, StoreError};
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
    // Nothing of the pool's is in a transaction here: one still open was left by a
    // failed write (see `in_transaction`), and would refuse this group's.
    if !db.is_autocommit() {
        tracing::warn!("store: a failed write left a transaction open; rolling it back");
        db.execute_batch("ROLLBACK")?;
    }
    let done = work(&db);
    drop(db);
    drop(locked);
    Ok(done?)
}

/// Claims every id not claimed yet, in one transaction (each claim is atomic on its
/// own: an id already claimed is left as it is); returns the ids it inserted. One
/// single-row statement, parsed once per group and run per claim: SQLite's parser
/// costs by the statement's length, so a statement of many rows of placeholders cost
/// more to parse than its rows cost to insert.
fn insert_claims(
    db: &rusqlite::Connection,
    claims: &[NewClaim<'_>],
) -> rusqlite::Result<HashSet<i64>> {
    in_transaction(db, || {
        let mut insert = db.prepare(
            "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller)
             VALUES (?1, ?2, 1, 'in_flight', ?3, ?4)
             ON CONFLICT (client_id) DO NOTHING",
        )?;
        let mut inserted = HashSet::with_capacity(claims.len());
        for (id, fingerprint, caller, at) in claims {
            let id = id_to_db(*id);
            if insert.execute(rusqlite::params![id, &fingerprint.0[..], ms(*at), caller])? == 1 {
                inserted.insert(id);
            }
        }
        Ok(inserted)
    })
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

/// Records the outcomes of distinct ids in one transaction: the reconcile row of an
/// accepted send whose attempt still matches, then the outcome itself (only where the
/// attempt matches). Single-row statements, parsed once per group (see
/// [`insert_claims`]).
fn settle_all(
    db: &rusqlite::Connection,
    settlements: &[Settle<'_>],
    first_poll_after: Duration,
) -> rusqlite::Result<Vec<ClaimReply>> {
    let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
    in_transaction(db, || {
        let mut track = db.prepare(
            "INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s,
                                   last_status, is_final, next_poll_ms, polls)
             SELECT c.client_id, ?3, ?4, ?5, ?6, NULL, 0, ?7, 0
               FROM claims c WHERE c.client_id = ?1 AND c.attempt = ?2
             ON CONFLICT (client_id) DO UPDATE SET
               msg_id = excluded.msg_id, channel = excluded.channel,
               sent_at_ms = excluded.sent_at_ms, lifetime_s = excluded.lifetime_s,
               last_status = NULL, is_final = 0, next_poll_ms = excluded.next_poll_ms,
               polls = 0",
        )?;
        let mut settle = db.prepare(
            "UPDATE claims SET state = ?3, settled_at_ms = ?4, msg_id = ?5, parts = ?6,
                    payload = ?7, recovered = ?8, reason = ?9, settle_until_ms = ?10
              WHERE client_id = ?1 AND attempt = ?2",
        )?;
        let mut replies = Vec::with_capacity(settlements.len());
        for (id, attempt, settlement, at) in settlements {
            let (id, attempt) = (id_to_db(*id), i64::from(*attempt));
            if let Settlement::Accepted(_, Some(m)) = settlement {
                track.execute(rusqlite::params![
                    id,
                    attempt,
                    m.msg_id,
                    m.channel.as_str(),
                    ms(m.sent_at),
                    seconds(m.lifetime),
                    ms(m.sent_at + after),
                ])?;
            }
            let columns = settlement_columns(settlement);
            let accepted = columns.accepted;
            let changed = settle.execute(rusqlite::params![
                id,
                attempt,
                columns.state,
                ms(*at),
                accepted.and_then(|a| a.msg_id.as_deref()),
                accepted.map(|a| i64::from(a.parts)),
                accepted.map(|a| a.payload.to_string()),
                accepted.is_some_and(|a| a.recovered),
                columns.reason,
                columns.settle_until_ms,
            ])?;
            replies.push(if changed == 1 {
                ClaimReply::Settled
            } else {
                ClaimReply::Superseded
            });
        }
        Ok(replies)
    })
}

/// Runs `work` in one write transaction on `db`: committed when it succeeds, rolled back
/// when it or the commit fails (a commit can fail, e.g. on a full disk, and leave the
/// transaction open), so the connection goes back to the pool with no transaction open.
fn in_transaction<T>(
    db: &rusqlite::Connection,
    work: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    db.execute_batch("BEGIN IMMEDIATE")?;
    let done = work().and_then(|done| db.execute_batch("COMMIT").map(|()| done));
    if done.is_err() && !db.is_autocommit() {
        let _ = db.execute_batch("ROLLBACK");
    }
    done
}

super::claim_changes::change_by_change!(Sqlite);

#[cfg(test)]
mod tests {
    use super::in_transaction;

    /// A commit that fails (here a deferred foreign key; on a full disk, the write)
    /// leaves SQLite's transaction open: it must be rolled back, or every later group
    /// on the connection fails to begin.
    #[test]
    fn a_failed_commit_leaves_no_transaction_open() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        let failed = in_transaction(&db, || db.execute("INSERT INTO child VALUES (1)", []));
        assert!(failed.is_err(), "the commit fails");
        assert!(db.is_autocommit(), "no transaction left open");
        let next = in_transaction(&db, || db.execute("INSERT INTO parent VALUES (1)", []));
        assert_eq!(next.unwrap(), 1, "the next group begins and commits");
    }
}
