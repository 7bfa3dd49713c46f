//! Claims in SQL both databases speak: reading one, the open ones reconcile resolves,
//! and a group applied change by change in one transaction (take-overs, or a group
//! that repeats an id). The send path's groups of only claims or only settlements are
//! written by each database its own way (`sqlite/claims.rs`, `postgres/claims.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::conn::{Conn, Sql, Tx};
use crate::adapters::store::rows::{
    ClaimRow, SettlementColumns, attempt_from_db, claims_with_ids, ms, phone_to_db, seconds,
    settlement_columns,
};
use crate::adapters::store::{
    ClaimChange, ClaimRecord, ClaimReply, Fingerprint, Settlement, StoreError,
};
use crate::core::domain::{CallerName, ClientId};

fn id_to_db(id: ClientId) -> i64 {
    crate::adapters::store::rows::id_to_db(id.get())
}

/// Claims still open past their settle window (`$1`: now, `$2`: in flight before, `$3`:
/// limit; the partial index `claims_unsettled` holds exactly the open ones); an unknown
/// one only once its next `status` lookup may run.
const UNSETTLED_SQL: &str = "SELECT * FROM claims
     WHERE state IN ('in_flight', 'unknown')
       AND ((state = 'unknown' AND COALESCE(settle_until_ms, 0) <= $1
             AND COALESCE(next_lookup_ms, 0) <= $1)
            OR (state = 'in_flight' AND claimed_at_ms <= $2))
     ORDER BY claimed_at_ms LIMIT $3";

/// The claim of `id`, if any.
pub(in crate::adapters::store) async fn claim_of(
    conn: &mut Conn<'_>,
    id: ClientId,
) -> Result<Option<ClaimRecord>, StoreError> {
    let sql = Sql::new("SELECT * FROM claims WHERE client_id = $1").bind(id_to_db(id));
    let row: Option<ClaimRow> = conn.fetch_optional(sql).await?;
    row.map(ClaimRecord::try_from).transpose()
}

/// See [`crate::adapters::store::Store::unsettled_claims`].
pub(in crate::adapters::store) async fn unsettled(
    conn: &mut Conn<'_>,
    now: DateTime<Utc>,
    in_flight_before: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<(ClientId, ClaimRecord)>, StoreError> {
    let sql = Sql::new(UNSETTLED_SQL)
        .bind(ms(now))
        .bind(ms(in_flight_before))
        .bind(i64::from(limit));
    claims_with_ids(conn.fetch_all(sql).await?)
}

/// Applies a group change by change in `tx`, then commits it.
pub(in crate::adapters::store) async fn apply_in(
    mut tx: Tx<'_>,
    changes: &[ClaimChange],
    first_poll_after: Duration,
) -> Result<Vec<ClaimReply>, StoreError> {
    // In id order (stable: one id's changes keep theirs), so that groups written at
    // once lock their rows in one order and never wait on each other in a cycle
    // (PostgreSQL found deadlocks between take-overs of hot ids).
    let mut order: Vec<usize> = (0..changes.len()).collect();
    order.sort_by_key(|&i| changes[i].id());
    let mut replies: Vec<Option<ClaimReply>> = changes.iter().map(|_| None).collect();
    let mut conn = tx.conn();
    for i in order {
        replies[i] = Some(apply(&mut conn, &changes[i], first_poll_after).await?);
    }
    tx.commit().await?;
    Ok(replies.into_iter().flatten().collect())
}

/// Applies one change inside the group's transaction.
async fn apply(
    conn: &mut Conn<'_>,
    change: &ClaimChange,
    first_poll_after: Duration,
) -> Result<ClaimReply, StoreError> {
    match change {
        ClaimChange::Claim {
            id,
            fingerprint,
            caller,
            at,
        } => {
            if insert(conn, *id, fingerprint, caller.as_ref(), *at).await? {
                return Ok(ClaimReply::Claimed { attempt: 1 });
            }
            existing(conn, *id).await
        }
        ClaimChange::TakeOver {
            id,
            fingerprint,
            attempt,
            caller,
            at,
        } => {
            let sql = Sql::new(
                "UPDATE claims SET fingerprint = $1, attempt = attempt + 1, state = 'in_flight',
                        claimed_at_ms = $2, settled_at_ms = NULL, msg_id = NULL, parts = NULL,
                        payload = NULL, recovered = FALSE, reason = NULL, caller = $5,
                        lookups = 0, next_lookup_ms = NULL
                  WHERE client_id = $3 AND attempt = $4 RETURNING attempt",
            )
            .bind(&fingerprint.0[..])
            .bind(ms(*at))
            .bind(id_to_db(*id))
            .bind(i64::from(*attempt))
            .bind(caller.as_ref().map(CallerName::as_str));
            let taken: Option<(i64,)> = conn.fetch_optional(sql).await?;
            if let Some((attempt,)) = taken {
                return Ok(ClaimReply::Claimed {
                    attempt: attempt_from_db(attempt)?,
                });
            }
            // Pruned since the caller looked: the id is free, claim it anew.
            if insert(conn, *id, fingerprint, caller.as_ref(), *at).await? {
                return Ok(ClaimReply::Claimed { attempt: 1 });
            }
            existing(conn, *id).await
        }
        ClaimChange::Settle {
            id,
            attempt,
            settlement,
            at,
        } => settle(conn, (*id, *attempt, settlement, *at), first_poll_after).await,
    }
}

/// Inserts a new in-flight claim unless `id` has one; true when inserted.
async fn insert(
    conn: &mut Conn<'_>,
    id: ClientId,
    fingerprint: &Fingerprint,
    caller: Option<&CallerName>,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let sql = Sql::new(
        "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller)
         VALUES ($1, $2, 1, 'in_flight', $3, $4)
         ON CONFLICT (client_id) DO NOTHING RETURNING attempt",
    )
    .bind(id_to_db(id))
    .bind(&fingerprint.0[..])
    .bind(ms(at))
    .bind(caller.map(CallerName::as_str));
    let inserted: Option<(i64,)> = conn.fetch_optional(sql).await?;
    Ok(inserted.is_some())
}

/// The current claim of `id` (which exists: the caller's insert just conflicted).
async fn existing(conn: &mut Conn<'_>, id: ClientId) -> Result<ClaimReply, StoreError> {
    let sql = Sql::new("SELECT * FROM claims WHERE client_id = $1").bind(id_to_db(id));
    let row: ClaimRow = conn.fetch_one(sql).await?;
    Ok(ClaimReply::Existing(row.try_into()?))
}

/// Records the outcome of the claim `id` owned at `attempt`, and the message reconcile
/// tracks for an accepted send.
async fn settle(
    conn: &mut Conn<'_>,
    (id, attempt, settlement, at): crate::adapters::store::claim_groups::Settle<'_>,
    first_poll_after: Duration,
) -> Result<ClaimReply, StoreError> {
    let SettlementColumns {
        state,
        accepted,
        reason,
        settle_until_ms,
    } = settlement_columns(settlement);
    let lookups = match settlement {
        Settlement::Unresolved { lookups, .. } => Some(lookups),
        _ => None,
    };
    let sql = Sql::new(
        "UPDATE claims SET state = $1, settled_at_ms = $2, msg_id = $3, parts = $4, payload = $5,
                recovered = $6, reason = $7, settle_until_ms = $10, lookups = $11,
                next_lookup_ms = $12
          WHERE client_id = $8 AND attempt = $9",
    )
    .bind(state)
    .bind(ms(at))
    .bind(accepted.and_then(|a| a.msg_id.as_deref()))
    .bind(accepted.map(|a| i64::from(a.parts)))
    .bind(accepted.map(|a| a.payload.to_string()))
    .bind(accepted.is_some_and(|a| a.recovered))
    .bind(reason)
    .bind(id_to_db(id))
    .bind(i64::from(attempt))
    .bind(settle_until_ms)
    .bind(lookups.map_or(0, |l| i64::from(l.unresolved)))
    .bind(lookups.map(|l| ms(l.next_at)));
    if conn.execute(sql).await? == 0 {
        return Ok(ClaimReply::Superseded);
    }
    if let Settlement::Accepted(_, Some(m)) = settlement {
        let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
        let sql = Sql::new(
            "INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s,
                                   last_status, is_final, next_poll_ms, polls, phone)
             VALUES ($1, $2, $3, $4, $5, NULL, FALSE, $6, 0, $7)
             ON CONFLICT (client_id) DO UPDATE SET
               msg_id = excluded.msg_id, channel = excluded.channel,
               sent_at_ms = excluded.sent_at_ms, lifetime_s = excluded.lifetime_s,
               last_status = NULL, is_final = FALSE, next_poll_ms = excluded.next_poll_ms,
               polls = 0, phone = COALESCE(excluded.phone, messages.phone)",
        )
        .bind(id_to_db(m.client_id))
        .bind(m.msg_id.as_str())
        .bind(m.channel.as_str())
        .bind(ms(m.sent_at))
        .bind(seconds(m.lifetime))
        .bind(ms(m.sent_at + after))
        .bind(m.phone.map(phone_to_db));
        conn.execute(sql).await?;
    }
    Ok(ClaimReply::Settled)
}
