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
use super::{
    ClaimChange, ClaimRecord, ClaimReply, Fingerprint, SentMessage, Settlement, StoreError,
};
use crate::domain::{CallerName, ClientId};

fn id_to_db(id: ClientId) -> i64 {
    super::rows::id_to_db(id.get())
}

/// Applies a group of changes in order on the writer connection. What one envelope
/// writes takes one round trip to SQLite: its claims are one INSERT (each claim is
/// atomic on its own, so no transaction is needed around them), its settlements one
/// transaction sent as a single batch of statements. Other groups run change by change
/// in one transaction.
pub(super) async fn apply_all(
    conn: &mut SqliteConnection,
    changes: &[ClaimChange],
    first_poll_after: Duration,
) -> Result<Vec<ClaimReply>, StoreError> {
    match grouped(changes) {
        Grouped::Claims(claims) => return claim_all(conn, &claims).await,
        Grouped::Settlements(settlements) => {
            return settle_all(conn, &settlements, first_poll_after).await;
        }
        Grouped::Mixed => {}
    }
    let mut tx = conn.begin().await?;
    let mut replies = Vec::with_capacity(changes.len());
    for change in changes {
        replies.push(apply(&mut tx, change, first_poll_after).await?);
    }
    tx.commit().await?;
    Ok(replies)
}

/// Claims every id not claimed yet with one INSERT; an id already claimed (before, or
/// earlier in this group) answers its current record.
async fn claim_all(
    conn: &mut SqliteConnection,
    claims: &[NewClaim<'_>],
) -> Result<Vec<ClaimReply>, StoreError> {
    let mut inserted = HashSet::new();
    for chunk in super::rows::row_chunks(claims) {
        let mut query = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller) ",
        );
        query.push_values(chunk, |mut row, (id, fingerprint, caller, at)| {
            row.push_bind(id_to_db(*id))
                .push_bind(&fingerprint.0[..])
                .push("1, 'in_flight'")
                .push_bind(ms(*at))
                .push_bind(*caller);
        });
        query.push(" ON CONFLICT (client_id) DO NOTHING RETURNING client_id");
        let rows: Vec<(i64,)> = query.build_query_as().fetch_all(&mut *conn).await?;
        inserted.extend(rows.into_iter().map(|(id,)| id));
    }
    let outcome = ClaimOutcome::new(claims.iter().map(|c| id_to_db(c.0)).collect(), &inserted);
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

/// Records the outcomes of distinct ids in one transaction sent as one batch of
/// statements: the reconcile rows of accepted sends whose attempt still matches, then
/// the outcomes themselves (only where the attempt matches).
async fn settle_all(
    conn: &mut SqliteConnection,
    settlements: &[Settle<'_>],
    first_poll_after: Duration,
) -> Result<Vec<ClaimReply>, StoreError> {
    let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
    let mut query = sqlx::QueryBuilder::<Sqlite>::new("BEGIN IMMEDIATE;");
    for chunk in super::rows::row_chunks(settlements) {
        // Every settlement has a row here (NULL msg_id: nothing to track), so both
        // statements of a chunk have the same shape and stay in the statement cache.
        query.push(
            " WITH m (client_id, attempt, msg_id, channel, sent_at_ms, lifetime_s, next_poll_ms) AS (",
        );
        query.push_values(chunk, |mut row, (id, attempt, settlement, _)| {
            let message: Option<&SentMessage> = match settlement {
                Settlement::Accepted(_, Some(message)) => Some(message),
                _ => None,
            };
            row.push_bind(id_to_db(*id))
                .push_bind(i64::from(*attempt))
                .push_bind(message.map(|m| m.msg_id.clone()))
                .push_bind(message.map(|m| m.channel.as_str()))
                .push_bind(message.map(|m| ms(m.sent_at)))
                .push_bind(message.map(|m| seconds(m.lifetime)))
                .push_bind(message.map(|m| ms(m.sent_at + after)));
        });
        query.push(
            ") INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s,
                                    last_status, is_final, next_poll_ms, polls)
               SELECT m.client_id, m.msg_id, m.channel, m.sent_at_ms, m.lifetime_s, NULL, 0,
                      m.next_poll_ms, 0
                 FROM m JOIN claims c ON c.client_id = m.client_id AND c.attempt = m.attempt
                WHERE m.msg_id IS NOT NULL
               ON CONFLICT (client_id) DO UPDATE SET
                 msg_id = excluded.msg_id, channel = excluded.channel,
                 sent_at_ms = excluded.sent_at_ms, lifetime_s = excluded.lifetime_s,
                 last_status = NULL, is_final = 0, next_poll_ms = excluded.next_poll_ms,
                 polls = 0;
             WITH v (client_id, attempt, state, settled_at_ms, msg_id, parts, payload, recovered, reason,
                     settle_until_ms) AS (",
        );
        query.push_values(chunk, |mut row, (id, attempt, settlement, at)| {
            let SettlementColumns {
                state,
                accepted,
                reason,
                settle_until_ms,
            } = settlement_columns(settlement);
            row.push_bind(id_to_db(*id))
                .push_bind(i64::from(*attempt))
                .push_bind(state)
                .push_bind(ms(*at))
                .push_bind(accepted.and_then(|a| a.msg_id.clone()))
                .push_bind(accepted.map(|a| i64::from(a.parts)))
                .push_bind(accepted.map(|a| a.payload.to_string()))
                .push_bind(accepted.is_some_and(|a| a.recovered))
                .push_bind(reason.map(str::to_owned))
                .push_bind(settle_until_ms);
        });
        query.push(
            ") UPDATE claims SET state = v.state, settled_at_ms = v.settled_at_ms,
                    msg_id = v.msg_id, parts = v.parts, payload = v.payload,
                    recovered = v.recovered, reason = v.reason, settle_until_ms = v.settle_until_ms
               FROM v WHERE claims.client_id = v.client_id AND claims.attempt = v.attempt
               RETURNING client_id;",
        );
    }
    query.push(" COMMIT");
    let settled: HashSet<i64> = match query.build_query_as::<(i64,)>().fetch_all(&mut *conn).await {
        Ok(rows) => rows.into_iter().map(|(id,)| id).collect(),
        Err(e) => {
            // The batch stopped at the failing statement: end its transaction here, or
            // the connection would go back to the pool inside it.
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return Err(e.into());
        }
    };
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

super::claim_changes::change_by_change!(Sqlite);
