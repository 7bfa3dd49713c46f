//! The store's upkeep, in SQL both databases speak: retention, reconcile's polls and
//! the leases that let one replica at a time do shared work.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::conn::{Conn, Sql};
use crate::adapters::store::rows::{DueRow, id_to_db, millis, ms, pending_from_row};
use crate::adapters::store::{PendingMessage, Retention, StoreError};
use crate::core::domain::ClientId;

/// Takes or renews a lease (name, holder, until, now): both databases speak this SQL.
/// A row comes back when `holder` holds the lease.
const LEASE_SQL: &str = "INSERT INTO leases (name, holder, until_ms) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms
      WHERE leases.holder = excluded.holder OR leases.until_ms < $4
     RETURNING holder";

/// What a prune runs, in order: each statement with its bound values. The first two
/// statements drop events (their row counts are the result).
fn prune_statements(retention: Retention, now: DateTime<Utc>) -> [(&'static str, Vec<i64>); 11] {
    let horizon = ms(now).saturating_sub(millis(retention.max_age));
    let keep = i64::try_from(retention.max_events).unwrap_or(i64::MAX);
    let claims_horizon = ms(now).saturating_sub(millis(retention.claims_max_age));
    let verifications_horizon = ms(now - crate::adapters::store::verifications::KEPT_AT_LEAST);
    let guard_horizon = ms(now).saturating_sub(millis(retention.guard_max_age));
    let trusted_horizon = ms(now).saturating_sub(millis(retention.trusted_keys_max_age));
    [
        (
            "DELETE FROM events WHERE received_at_ms < $1",
            vec![horizon],
        ),
        (
            "DELETE FROM events WHERE cursor <= (SELECT COALESCE(MAX(cursor), 0) FROM events) - $1",
            vec![keep],
        ),
        // A message is tracked until it is final or its lifetime is over, then kept as
        // long as its events, for msg_id lookups.
        (
            "DELETE FROM messages WHERE sent_at_ms + lifetime_s * 1000 < $1 AND sent_at_ms < $2",
            vec![ms(now), horizon],
        ),
        // A claim outlives its retention while reconcile still tracks its message, and
        // an open one (in flight, or its outcome unknown) is never dropped for its age:
        // it is the only record that the send may have left, so a retry must not send
        // again. Reconcile resolves open claims; then they age like the others. A
        // scheduled one is kept until it has left or been cancelled.
        (
            "DELETE FROM claims WHERE COALESCE(settled_at_ms, claimed_at_ms) < $1
               AND state NOT IN ('in_flight', 'unknown', 'scheduled')
               AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.client_id = claims.client_id
                                AND NOT m.is_final AND m.sent_at_ms + m.lifetime_s * 1000 >= $2)",
            vec![claims_horizon, ms(now)],
        ),
        // A verification is kept while pending and unexpired, and for the hour its start
        // counts against its number's limit.
        (
            "DELETE FROM verifications WHERE created_at_ms < $1
               AND (status <> 'pending' OR expires_at_ms <= $2)",
            vec![verifications_horizon, ms(now)],
        ),
        (
            "DELETE FROM verification_sends WHERE NOT EXISTS
               (SELECT 1 FROM verifications v WHERE v.id = verification_sends.verification_id)",
            vec![],
        ),
        // The fraud guard counts over its windows; a hold stays while it is in force,
        // and its release date as long as the figures it resets.
        (
            "DELETE FROM guard_codes WHERE sent_at_ms < $1",
            vec![guard_horizon],
        ),
        (
            "DELETE FROM guard_code_keys WHERE sent_at_ms < $1",
            vec![guard_horizon],
        ),
        (
            "DELETE FROM guard_trusted_keys WHERE approved_at_ms < $1",
            vec![trusted_horizon],
        ),
        (
            "DELETE FROM guard_holds WHERE until_ms < $1",
            vec![guard_horizon],
        ),
        // A reply is remembered as long as the events of its message.
        (
            "DELETE FROM seen_replies WHERE seen_at_ms < $1",
            vec![horizon],
        ),
    ]
}

/// Drops what the retention no longer keeps; how many events were dropped.
pub(in crate::adapters::store) async fn prune(
    conn: &mut Conn<'_>,
    retention: Retention,
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    // Every statement runs; the first two drop events, the result.
    let mut dropped = Vec::new();
    for (text, values) in prune_statements(retention, now) {
        let sql = values.into_iter().fold(Sql::new(text), Sql::bind);
        dropped.push(conn.execute(sql).await?);
    }
    Ok(dropped.iter().take(2).sum())
}

/// Takes up to `limit` messages due for a poll at `now` with `due_sql`, the store's own
/// statement (`$1` the lease's end, `$2` now, `$3` the limit; returning client_id,
/// sent_at_ms, lifetime_s, polls): how one replica at a time takes a message differs.
pub(in crate::adapters::store) async fn take_due(
    conn: &mut Conn<'_>,
    due_sql: &'static str,
    now: DateTime<Utc>,
    limit: u32,
    lease: Duration,
) -> Result<Vec<PendingMessage>, StoreError> {
    let rows: Vec<DueRow> = conn
        .fetch_all(due_statement(due_sql, now, limit, lease))
        .await?;
    rows.into_iter().map(pending_from_row).collect()
}

/// A statement that takes due rows under a lease, bound as every such statement is:
/// `$1` the lease's end, `$2` now, `$3` the limit (status polls, scheduled sends).
pub(in crate::adapters::store) fn due_statement(
    due_sql: &'static str,
    now: DateTime<Utc>,
    limit: u32,
    lease: Duration,
) -> Sql {
    Sql::new(due_sql)
        .bind(ms(now).saturating_add(millis(lease)))
        .bind(ms(now))
        .bind(i64::from(limit))
}

/// Schedules the next poll of a message, or stops polling it (`None`).
pub(in crate::adapters::store) async fn schedule_poll(
    conn: &mut Conn<'_>,
    client_id: ClientId,
    next: Option<DateTime<Utc>>,
) -> Result<(), StoreError> {
    let sql =
        Sql::new("UPDATE messages SET next_poll_ms = $1, polls = polls + 1 WHERE client_id = $2")
            .bind(next.map(ms))
            .bind(id_to_db(client_id.get()));
    conn.execute(sql).await.map(drop)
}

/// Takes or renews the lease `name` for `holder` until `now + ttl`; true when `holder`
/// holds it.
pub(in crate::adapters::store) async fn try_lease(
    conn: &mut Conn<'_>,
    name: &str,
    holder: &str,
    ttl: Duration,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let sql = Sql::new(LEASE_SQL)
        .bind(name)
        .bind(holder)
        .bind(ms(now).saturating_add(millis(ttl)))
        .bind(ms(now));
    let held: Option<(String,)> = conn.fetch_optional(sql).await?;
    Ok(held.is_some())
}
