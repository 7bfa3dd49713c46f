//! Scheduled sends in SQL both databases speak: keeping one (its claim and its request
//! in one transaction), cancelling one, and what is kept. Taking due ones differs
//! (`FOR UPDATE SKIP LOCKED` on PostgreSQL): each database gives its statement.
//! Requests wait in `scheduled_ops`; those an earlier version kept in `scheduled` are
//! moved there (see the migration of `scheduled_ops`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::conn::{Conn, Sql, Tx};
use crate::adapters::store::rows::{ClaimRow, from_ms, id_from_db, id_to_db, ms};
use crate::adapters::store::scheduled::{DueRow, due_from_row};
use crate::core::domain::{CallerName, ClientId};
use crate::core::ports::store::{
    ClaimRecord, DueScheduled, EarlierScheduled, NewScheduled, ScheduleReply, ScheduledSummary,
    StoreError,
};

/// Drops what is kept of `id` (`$1`): this version's request, and an earlier version's
/// until it is moved.
const DROP_KEPT: [&str; 2] = [
    "DELETE FROM scheduled_ops WHERE client_id = $1",
    "DELETE FROM scheduled WHERE client_id = $1",
];

/// Claims the id as scheduled and keeps the request, in `tx`; or answers the claim the
/// id has.
pub(in crate::adapters::store) async fn schedule(
    mut tx: Tx<'_>,
    new: &NewScheduled,
    notify: Option<&str>,
) -> Result<ScheduleReply, StoreError> {
    let id = id_to_db(new.id.get());
    let caller = new.caller.as_ref().map(CallerName::as_str);
    let mut conn = tx.conn();
    let sql = Sql::new(
        "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller,
                             send_at_ms)
         VALUES ($1, $2, 1, 'scheduled', $3, $4, $5)
         ON CONFLICT (client_id) DO NOTHING RETURNING attempt",
    )
    .bind(id)
    .bind(&new.fingerprint.0[..])
    .bind(ms(new.at))
    .bind(caller)
    .bind(ms(new.send_at));
    let inserted: Option<(i64,)> = conn.fetch_optional(sql).await?;
    let reply = if inserted.is_some() {
        let sql = Sql::new(
            "INSERT INTO scheduled_ops (client_id, send_at_ms, due_ms, payload, caller, tries,
                                        created_at_ms)
             VALUES ($1, $2, $2, $3, $4, 0, $5)",
        )
        .bind(id)
        .bind(ms(new.send_at))
        .bind(new.payload.clone())
        .bind(caller)
        .bind(ms(new.at));
        conn.execute(sql).await?;
        if let Some(channel) = notify {
            let sql = Sql::new("SELECT pg_notify($1, $2)")
                .bind(channel)
                .bind(scheduled_payload(new.send_at));
            conn.execute(sql).await?;
        }
        ScheduleReply::Scheduled
    } else {
        let sql = Sql::new("SELECT * FROM claims WHERE client_id = $1").bind(id);
        let row: ClaimRow = conn.fetch_one(sql).await?;
        ScheduleReply::Existing(ClaimRecord::try_from(row)?)
    };
    tx.commit().await?;
    Ok(reply)
}

/// Cancels the scheduled message `id` unless it has left (a compare-and-set on its
/// claim's state, which also moves the claim's generation on, so a take-over that
/// looked before fails): when it was to leave, `None` when it was not scheduled.
pub(in crate::adapters::store) async fn cancel(
    mut tx: Tx<'_>,
    id: ClientId,
    at: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let id = id_to_db(id.get());
    let mut conn = tx.conn();
    let sql = Sql::new(
        "UPDATE claims SET state = 'canceled', attempt = attempt + 1, settled_at_ms = $2
          WHERE client_id = $1 AND state = 'scheduled' RETURNING send_at_ms",
    )
    .bind(id)
    .bind(ms(at));
    let canceled: Option<(Option<i64>,)> = conn.fetch_optional(sql).await?;
    let Some((send_at,)) = canceled else {
        return Ok(None);
    };
    for drop in DROP_KEPT {
        conn.execute(Sql::new(drop).bind(id)).await?;
    }
    tx.commit().await?;
    send_at
        .map(from_ms)
        .transpose()?
        .ok_or_else(|| StoreError::Corrupt("scheduled claim without send_at".into()))
        .map(Some)
}

/// Takes up to `limit` due messages with `due_sql`, the store's own statement (`$1` the
/// lease's end, `$2` now, `$3` the limit).
pub(in crate::adapters::store) async fn take_due(
    conn: &mut Conn<'_>,
    due_sql: &'static str,
    now: DateTime<Utc>,
    limit: u32,
    lease: Duration,
) -> Result<Vec<DueScheduled>, StoreError> {
    let sql = super::upkeep::due_statement(due_sql, now, limit, lease);
    let rows: Vec<DueRow> = conn.fetch_all(sql).await?;
    rows.into_iter().map(due_from_row).collect()
}

/// Drops the requests of messages that have left (or can never leave), in `tx`.
pub(in crate::adapters::store) async fn forget(
    mut tx: Tx<'_>,
    ids: &[ClientId],
) -> Result<(), StoreError> {
    let mut conn = tx.conn();
    for id in ids {
        for drop in DROP_KEPT {
            conn.execute(Sql::new(drop).bind(id_to_db(id.get())))
                .await?;
        }
    }
    tx.commit().await
}

/// How many messages are kept, and when the next one is due.
pub(in crate::adapters::store) async fn summary(
    conn: &mut Conn<'_>,
) -> Result<ScheduledSummary, StoreError> {
    let (pending, next): (i64, Option<i64>) = conn
        .fetch_one(Sql::new("SELECT COUNT(*), MIN(due_ms) FROM scheduled_ops"))
        .await?;
    Ok(ScheduledSummary {
        pending: u64::try_from(pending).unwrap_or(0),
        next_due: next.map(from_ms).transpose()?,
    })
}

/// Up to `limit` requests an earlier version kept in `scheduled`, soonest due first.
pub(in crate::adapters::store) async fn earlier(
    conn: &mut Conn<'_>,
    limit: u32,
) -> Result<Vec<EarlierScheduled>, StoreError> {
    let sql =
        Sql::new("SELECT client_id, payload FROM scheduled ORDER BY due_ms, client_id LIMIT $1")
            .bind(i64::from(limit));
    let rows: Vec<(i64, Vec<u8>)> = conn.fetch_all(sql).await?;
    rows.into_iter()
        .map(|(id, payload)| {
            Ok(EarlierScheduled {
                id: ClientId::new(id_from_db(id)).map_err(|_| {
                    StoreError::Corrupt("scheduled message with client id 0".into())
                })?,
                payload,
            })
        })
        .collect()
}

/// Moves the request of `id` from `scheduled` to `scheduled_ops` as `payload`, with its
/// time, lease, caller and tries, in `tx`: false when it is no longer in `scheduled`.
pub(in crate::adapters::store) async fn move_earlier(
    mut tx: Tx<'_>,
    id: ClientId,
    payload: Vec<u8>,
) -> Result<bool, StoreError> {
    let id = id_to_db(id.get());
    let mut conn = tx.conn();
    let sql = Sql::new(
        "DELETE FROM scheduled WHERE client_id = $1
         RETURNING send_at_ms, due_ms, caller, tries, created_at_ms",
    )
    .bind(id);
    let row: Option<(i64, i64, Option<String>, i64, i64)> = conn.fetch_optional(sql).await?;
    let Some((send_at, due, caller, tries, created_at)) = row else {
        return Ok(false);
    };
    let sql = Sql::new(
        "INSERT INTO scheduled_ops (client_id, send_at_ms, due_ms, payload, caller, tries,
                                    created_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (client_id) DO NOTHING",
    )
    .bind(id)
    .bind(send_at)
    .bind(due)
    .bind(payload)
    .bind(caller)
    .bind(tries)
    .bind(created_at);
    conn.execute(sql).await?;
    tx.commit().await?;
    Ok(true)
}

/// The notification of a message scheduled for `send_at` (on the event log's channel,
/// told from a cursor by its first letter).
pub(in crate::adapters::store) fn scheduled_payload(send_at: DateTime<Utc>) -> String {
    format!("s{}", ms(send_at))
}

/// The send time a notification of [`scheduled_payload`] carries; `None` for any other.
pub(in crate::adapters::store) fn scheduled_of(payload: &str) -> Option<DateTime<Utc>> {
    let ms = payload.strip_prefix('s')?.parse::<i64>().ok()?;
    DateTime::from_timestamp_millis(ms)
}
