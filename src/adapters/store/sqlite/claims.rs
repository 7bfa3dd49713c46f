//! SQLite side of the idempotency claims. The send path's groups (only claims, or only
//! settlements of distinct ids) become [`Work`]: owned rows, written with single-row
//! statements parsed once per connection, by the send path's writer
//! ([`super::writer`]) or, for an in-memory database, on the pool's writer
//! connection. Other groups run change by change in one sqlx transaction
//! (`common/claim_sql.rs`).

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use rusqlite::OptionalExtension;
use sqlx::SqliteConnection;

use crate::adapters::store::claim_groups::{ClaimOutcome, Grouped, grouped};
use crate::adapters::store::common::{claim_sql::apply_in, conn::Tx};
use crate::adapters::store::rows::{
    ClaimRow, attempt_from_db, ms, phone_to_db, seconds, settlement_columns,
};
use crate::adapters::store::{ClaimChange, ClaimRecord, ClaimReply, Settlement, StoreError};
use crate::core::domain::{ClientId, Phone};

/// How every SQLite write transaction begins: with the write lock, before it reads.
/// A deferred transaction that read first cannot wait for the lock (SQLite skips the
/// busy handler then) nor write once the other writer, the send path's or the pool's,
/// committed after its read (`SQLITE_BUSY_SNAPSHOT`): either way "database is locked"
/// at once. `BEGIN IMMEDIATE` waits its turn through the busy handler instead.
pub(in crate::adapters::store) const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

fn id_to_db(id: ClientId) -> i64 {
    crate::adapters::store::rows::id_to_db(id.get())
}

/// A send-path group as rows to write: owned, so another thread can write it.
#[derive(Debug)]
pub(super) enum Work {
    /// Claims, each inserted unless its id is claimed, and the recipients whose place
    /// on the suppression list the same transaction reads.
    Claims(Vec<ClaimIn>, Vec<i64>),
    /// Settlements of distinct ids.
    Settlements(Vec<SettleIn>),
    /// Take-overs of distinct ids, each at the attempt its taker saw.
    TakeOvers(Vec<(ClaimIn, i64)>),
}

/// A claim to insert (or to take over).
#[derive(Debug)]
pub(super) struct ClaimIn {
    id: i64,
    fingerprint: [u8; 32],
    caller: Option<String>,
    at_ms: i64,
}

/// A settlement to record, with the message reconcile tracks when accepted.
#[derive(Debug)]
pub(super) struct SettleIn {
    id: i64,
    attempt: i64,
    state: &'static str,
    at_ms: i64,
    msg_id: Option<String>,
    parts: Option<i64>,
    payload: Option<String>,
    recovered: bool,
    reason: Option<String>,
    settle_until_ms: Option<i64>,
    track: Option<TrackIn>,
}

/// The `messages` row of an accepted send.
#[derive(Debug)]
struct TrackIn {
    msg_id: String,
    channel: &'static str,
    sent_at_ms: i64,
    lifetime_s: i64,
    next_poll_ms: i64,
    phone: Option<i64>,
}

impl Work {
    /// The rows of a send-path group; `None` for any other group (take-overs, repeated
    /// ids), which runs change by change. Sent messages are first polled
    /// `first_poll_after` after sending.
    pub(super) fn of(changes: &[ClaimChange], first_poll_after: Duration) -> Option<Self> {
        let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
        match grouped(changes) {
            Grouped::Claims(claims) => Some(Self::Claims(
                claims
                    .into_iter()
                    .map(|(id, fingerprint, caller, at)| ClaimIn {
                        id: id_to_db(id),
                        fingerprint: fingerprint.0,
                        caller: caller.map(str::to_owned),
                        at_ms: ms(at),
                    })
                    .collect(),
                Vec::new(),
            )),
            Grouped::Settlements(settlements) => Some(Self::Settlements(
                settlements
                    .into_iter()
                    .map(|(id, attempt, settlement, at)| {
                        let columns = settlement_columns(settlement);
                        let accepted = columns.accepted;
                        SettleIn {
                            id: id_to_db(id),
                            attempt: i64::from(attempt),
                            state: columns.state,
                            at_ms: ms(at),
                            msg_id: accepted.and_then(|a| a.msg_id.clone()),
                            parts: accepted.map(|a| i64::from(a.parts)),
                            payload: accepted.map(|a| a.payload.to_string()),
                            recovered: accepted.is_some_and(|a| a.recovered),
                            reason: columns.reason.map(str::to_owned),
                            settle_until_ms: columns.settle_until_ms,
                            track: match settlement {
                                Settlement::Accepted(_, Some(m)) => Some(TrackIn {
                                    msg_id: m.msg_id.clone(),
                                    channel: m.channel.as_str(),
                                    sent_at_ms: ms(m.sent_at),
                                    lifetime_s: seconds(m.lifetime),
                                    next_poll_ms: ms(m.sent_at + after),
                                    phone: m.phone.map(phone_to_db),
                                }),
                                _ => None,
                            },
                        }
                    })
                    .collect(),
            )),
            Grouped::TakeOvers(take_overs) => Some(Self::TakeOvers(
                take_overs
                    .into_iter()
                    .map(|(id, fingerprint, attempt, caller, at)| {
                        let claim = ClaimIn {
                            id: id_to_db(id),
                            fingerprint: fingerprint.0,
                            caller: caller.map(str::to_owned),
                            at_ms: ms(at),
                        };
                        (claim, i64::from(attempt))
                    })
                    .collect(),
            )),
            Grouped::Mixed => None,
        }
    }

    /// The same work, a claims group also reading which of `recipients` are on the
    /// suppression list.
    pub(super) fn checking(self, recipients: &[Phone]) -> Self {
        match self {
            Self::Claims(claims, _) => {
                Self::Claims(claims, recipients.iter().map(|p| phone_to_db(*p)).collect())
            }
            settlements => settlements,
        }
    }

    /// Writes the rows inside the transaction open on `db`: one reply per row, and the
    /// suppressed recipients a claims group asked about.
    pub(super) fn apply(&self, db: &rusqlite::Connection) -> Result<Written, StoreError> {
        match self {
            Self::Claims(claims, check) => Ok(Written {
                replies: insert_claims(db, claims)?,
                suppressed: suppressed(db, check)?,
            }),
            Self::Settlements(settlements) => Ok(Written {
                replies: settle_all(db, settlements)?,
                suppressed: Vec::new(),
            }),
            Self::TakeOvers(take_overs) => Ok(Written {
                replies: take_over_all(db, take_overs)?,
                suppressed: Vec::new(),
            }),
        }
    }
}

/// What a [`Work`] wrote, once committed.
#[derive(Debug)]
pub(super) struct Written {
    /// One reply per row.
    pub(super) replies: Vec<ClaimReply>,
    /// The numbers asked about that are on the suppression list.
    pub(super) suppressed: Vec<i64>,
}

/// Which of `phones` are on the suppression list: a cached single-row statement
/// stepped once per number, on the send path's connection (no second connection, no
/// statement parsed per group).
fn suppressed(db: &rusqlite::Connection, phones: &[i64]) -> rusqlite::Result<Vec<i64>> {
    if phones.is_empty() {
        return Ok(Vec::new());
    }
    let mut read = db.prepare_cached("SELECT 1 FROM suppressions WHERE phone = ?1")?;
    let mut found = Vec::new();
    for &phone in phones {
        if read.exists([phone])? {
            found.push(phone);
        }
    }
    Ok(found)
}

/// Applies a group of changes on the pool's writer connection, in one transaction: the
/// send path's groups with their rows written on this thread, the connection locked out
/// from sqlx's worker ([`on_locked`]); other groups change by change.
pub(super) async fn apply_all(
    conn: &mut SqliteConnection,
    changes: &[ClaimChange],
    first_poll_after: Duration,
) -> Result<Vec<ClaimReply>, StoreError> {
    match Work::of(changes, first_poll_after) {
        Some(work) => on_locked(conn, |db| in_transaction(db, || work.apply(db)))
            .await
            .map(|written| written.replies),
        None => {
            use sqlx::Connection;
            let tx = Tx::Sqlite(conn.begin_with(BEGIN_WRITE).await?);
            apply_in(tx, changes, first_poll_after).await
        }
    }
}

/// Runs `work` on a pool connection's SQLite handle, locked out from the sqlx worker
/// thread that otherwise drives it, on this thread and in one go.
pub(super) async fn on_locked<T>(
    conn: &mut SqliteConnection,
    work: impl FnOnce(&rusqlite::Connection) -> Result<T, StoreError>,
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
    done
}

/// Claims every id not claimed yet (each claim is atomic on its own: an id already
/// claimed is left as it is), then reads back the records of the ids it did not
/// insert. Single-row statements, parsed once per connection: SQLite's parser costs by
/// the statement's length, so one statement with a row of placeholders per claim cost
/// more to parse than its rows cost to insert.
fn insert_claims<C: std::borrow::Borrow<ClaimIn>>(
    db: &rusqlite::Connection,
    claims: &[C],
) -> Result<Vec<ClaimReply>, StoreError> {
    let mut insert = db.prepare_cached(
        "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller)
         VALUES (?1, ?2, 1, 'in_flight', ?3, ?4)
         ON CONFLICT (client_id) DO NOTHING",
    )?;
    let mut inserted = HashSet::with_capacity(claims.len());
    for claim in claims {
        let claim = claim.borrow();
        let row = rusqlite::params![claim.id, &claim.fingerprint[..], claim.at_ms, claim.caller];
        if insert.execute(row)? == 1 {
            inserted.insert(claim.id);
        }
    }
    let outcome = ClaimOutcome::new(claims.iter().map(|c| c.borrow().id).collect(), &inserted);
    let existing = outcome.to_read();
    let mut records = HashMap::with_capacity(existing.len());
    if !existing.is_empty() {
        let mut read = db.prepare_cached(ClaimRow::SELECT_BY_ID)?;
        for id in existing {
            if let Some(row) = read.query_row([id], ClaimRow::from_rusqlite).optional()? {
                records.insert(id, ClaimRecord::try_from(row)?);
            }
        }
    }
    outcome.replies(&records)
}

/// Takes over claims still at the attempt each taker saw, a cached statement stepped
/// per row; a claim pruned since is claimed anew, and one that moved on answers its
/// record.
fn take_over_all(
    db: &rusqlite::Connection,
    take_overs: &[(ClaimIn, i64)],
) -> Result<Vec<ClaimReply>, StoreError> {
    let mut take = db.prepare_cached(
        "UPDATE claims SET fingerprint = ?1, attempt = attempt + 1, state = 'in_flight',
                claimed_at_ms = ?2, settled_at_ms = NULL, msg_id = NULL, parts = NULL,
                payload = NULL, recovered = FALSE, reason = NULL, caller = ?5,
                lookups = 0, next_lookup_ms = NULL
          WHERE client_id = ?3 AND attempt = ?4 RETURNING attempt",
    )?;
    let mut replies = Vec::with_capacity(take_overs.len());
    let mut missed = Vec::new();
    for (i, (claim, attempt)) in take_overs.iter().enumerate() {
        let row = rusqlite::params![
            &claim.fingerprint[..],
            claim.at_ms,
            claim.id,
            attempt,
            claim.caller
        ];
        match take.query_row(row, |r| r.get::<_, i64>(0)).optional()? {
            Some(attempt) => replies.push(Some(ClaimReply::Claimed {
                attempt: attempt_from_db(attempt)?,
            })),
            None => {
                replies.push(None);
                missed.push(i);
            }
        }
    }
    if !missed.is_empty() {
        // Pruned since the taker looked: the id is free, claim it anew; or it moved on.
        let claims: Vec<&ClaimIn> = missed.iter().map(|&i| &take_overs[i].0).collect();
        for (i, reply) in missed.into_iter().zip(insert_claims(db, &claims)?) {
            replies[i] = Some(reply);
        }
    }
    Ok(replies.into_iter().flatten().collect())
}

/// Records the outcomes of distinct ids: the reconcile row of an accepted send whose
/// attempt still matches, then the outcome itself (only where the attempt matches).
fn settle_all(
    db: &rusqlite::Connection,
    settlements: &[SettleIn],
) -> rusqlite::Result<Vec<ClaimReply>> {
    let mut track = db.prepare_cached(
        "INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s,
                               last_status, is_final, next_poll_ms, polls, phone)
         SELECT c.client_id, ?3, ?4, ?5, ?6, NULL, 0, ?7, 0, ?8
           FROM claims c WHERE c.client_id = ?1 AND c.attempt = ?2
         ON CONFLICT (client_id) DO UPDATE SET
           msg_id = excluded.msg_id, channel = excluded.channel,
           sent_at_ms = excluded.sent_at_ms, lifetime_s = excluded.lifetime_s,
           last_status = NULL, is_final = 0, next_poll_ms = excluded.next_poll_ms,
           polls = 0, phone = COALESCE(excluded.phone, messages.phone)",
    )?;
    let mut settle = db.prepare_cached(
        "UPDATE claims SET state = ?3, settled_at_ms = ?4, msg_id = ?5, parts = ?6,
                payload = ?7, recovered = ?8, reason = ?9, settle_until_ms = ?10
          WHERE client_id = ?1 AND attempt = ?2",
    )?;
    let mut replies = Vec::with_capacity(settlements.len());
    for s in settlements {
        if let Some(m) = &s.track {
            track.execute(rusqlite::params![
                s.id,
                s.attempt,
                m.msg_id,
                m.channel,
                m.sent_at_ms,
                m.lifetime_s,
                m.next_poll_ms,
                m.phone,
            ])?;
        }
        let changed = settle.execute(rusqlite::params![
            s.id,
            s.attempt,
            s.state,
            s.at_ms,
            s.msg_id,
            s.parts,
            s.payload,
            s.recovered,
            s.reason,
            s.settle_until_ms,
        ])?;
        replies.push(if changed == 1 {
            ClaimReply::Settled
        } else {
            ClaimReply::Superseded
        });
    }
    Ok(replies)
}

/// Runs `work` in one write transaction on `db`: committed when it succeeds, rolled back
/// when it or the commit fails (a commit can fail, e.g. on a full disk, and leave the
/// transaction open), so the connection is left with no transaction open. One still
/// open when it starts (left by a failed write) is rolled back first: it would refuse
/// this one.
pub(super) fn in_transaction<T, E: From<rusqlite::Error>>(
    db: &rusqlite::Connection,
    work: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    if !db.is_autocommit() {
        tracing::warn!("store: a failed write left a transaction open; rolling it back");
        db.execute_batch("ROLLBACK")?;
    }
    db.execute_batch(BEGIN_WRITE)?;
    let done = work().and_then(|done| db.execute_batch("COMMIT").map(|()| done).map_err(E::from));
    if done.is_err() && !db.is_autocommit() {
        let _ = db.execute_batch("ROLLBACK");
    }
    done
}

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
             CREATE TABLE child (parent INTEGER REFERENCES parent (id)
                                 DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        let failed: rusqlite::Result<usize> =
            in_transaction(&db, || db.execute("INSERT INTO child VALUES (1)", []));
        assert!(failed.is_err(), "the commit fails");
        assert!(db.is_autocommit(), "no transaction left open");
        let next: rusqlite::Result<usize> =
            in_transaction(&db, || db.execute("INSERT INTO parent VALUES (1)", []));
        assert_eq!(next.unwrap(), 1, "the next group begins and commits");
    }
}
