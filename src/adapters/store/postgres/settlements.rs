//! PostgreSQL side of a group of settlements (the outcomes of the send path's
//! envelopes): the claims' outcomes and the messages reconcile tracks, in one
//! statement whose rows are locked in id order first.

use std::{collections::HashSet, time::Duration};

use sqlx::{Connection, PgConnection};

use crate::adapters::store::claim_groups::Settle;
use crate::adapters::store::rows::{
    SettlementColumns, id_to_db, ms, phone_to_db, seconds, settlement_columns,
};
use crate::adapters::store::{ClaimReply, SentMessage, Settlement, StoreError};

/// Records the outcomes of distinct ids in one statement: the outcomes (only where the
/// attempt still matches), and the reconcile rows of exactly the accepted sends whose
/// outcome landed.
pub(super) async fn settle_all(
    conn: &mut PgConnection,
    kept: bool,
    settlements: &[Settle<'_>],
    first_poll_after: Duration,
) -> Result<Vec<ClaimReply>, StoreError> {
    let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
    let n = settlements.len();
    let (mut ids, mut attempts, mut states, mut settled_at) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut msg_ids, mut parts, mut payloads, mut recovered, mut reasons, mut settle_until) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut tracked, mut channels, mut sent_at, mut lifetimes, mut next_polls, mut phones) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (id, attempt, settlement, at) in settlements {
        let SettlementColumns {
            state,
            accepted,
            reason,
            settle_until_ms,
        } = settlement_columns(settlement);
        ids.push(id_to_db(id.get()));
        attempts.push(i64::from(*attempt));
        states.push(state);
        settled_at.push(ms(*at));
        msg_ids.push(accepted.and_then(|a| a.msg_id.clone()));
        parts.push(accepted.map(|a| i64::from(a.parts)));
        payloads.push(accepted.map(|a| a.payload.to_string()));
        recovered.push(accepted.is_some_and(|a| a.recovered));
        reasons.push(reason.map(str::to_owned));
        settle_until.push(settle_until_ms);
        let message: Option<&SentMessage> = match settlement {
            Settlement::Accepted(_, Some(message)) => Some(message),
            _ => None,
        };
        tracked.push(message.map(|m| m.msg_id.clone()));
        channels.push(message.map(|m| m.channel.as_str()));
        sent_at.push(message.map(|m| ms(m.sent_at)));
        lifetimes.push(message.map(|m| seconds(m.lifetime)));
        next_polls.push(message.map(|m| ms(m.sent_at + after)));
        phones.push(message.and_then(|m| m.phone).map(phone_to_db));
    }
    // The claims' rows are locked in id order first (`locked`): the UPDATE alone locks
    // rows in whatever order its plan visits them (a hash join visits the table's
    // order), and against a group claiming or taking over the same ids in id order,
    // that deadlocked (seen under storms of hot ids). The UPDATE changes only rows
    // `locked` holds, and `locked` takes its locks in id order however the plan
    // interleaves the two, so every new lock of the statement comes in id order. One
    // statement, its own transaction: one round trip (behind a pooler in transaction
    // mode, inside the transaction every statement there needs).
    let statement = sqlx::query_as(
        "WITH locked AS MATERIALIZED (
             SELECT client_id FROM claims WHERE client_id = ANY($1)
              ORDER BY client_id FOR UPDATE
         ), v AS (
             SELECT * FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[],
                                  $6::BIGINT[], $7::TEXT[], $8::BOOLEAN[], $9::TEXT[], $10::TEXT[],
                                  $11::TEXT[], $12::BIGINT[], $13::BIGINT[], $14::BIGINT[],
                                  $15::BIGINT[], $16::BIGINT[])
                 AS v (client_id, attempt, state, settled_at_ms, msg_id, parts, payload, recovered,
                       reason, m_msg_id, m_channel, m_sent_at_ms, m_lifetime_s, m_next_poll_ms,
                       settle_until_ms, m_phone)
         ), settled AS (
             UPDATE claims c SET state = v.state, settled_at_ms = v.settled_at_ms,
                    msg_id = v.msg_id, parts = v.parts, payload = v.payload,
                    recovered = v.recovered, reason = v.reason, settle_until_ms = v.settle_until_ms
               FROM v JOIN locked l ON l.client_id = v.client_id
              WHERE c.client_id = v.client_id AND c.attempt = v.attempt
             RETURNING c.client_id
         ), tracked AS (
             INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s,
                                   last_status, is_final, next_poll_ms, polls, phone)
             SELECT v.client_id, v.m_msg_id, v.m_channel, v.m_sent_at_ms, v.m_lifetime_s, NULL,
                    FALSE, v.m_next_poll_ms, 0, v.m_phone
               FROM v JOIN settled s ON s.client_id = v.client_id
              WHERE v.m_msg_id IS NOT NULL
             ON CONFLICT (client_id) DO UPDATE SET
               msg_id = excluded.msg_id, channel = excluded.channel,
               sent_at_ms = excluded.sent_at_ms, lifetime_s = excluded.lifetime_s,
               last_status = NULL, is_final = FALSE, next_poll_ms = excluded.next_poll_ms,
               polls = 0, phone = COALESCE(excluded.phone, messages.phone)
         )
         SELECT client_id FROM settled",
    )
    .persistent(kept)
    .bind(&ids)
    .bind(&attempts)
    .bind(&states)
    .bind(&settled_at)
    .bind(&msg_ids)
    .bind(&parts)
    .bind(&payloads)
    .bind(&recovered)
    .bind(&reasons)
    .bind(&tracked)
    .bind(&channels)
    .bind(&sent_at)
    .bind(&lifetimes)
    .bind(&next_polls)
    .bind(&settle_until)
    .bind(&phones);
    let settled: Vec<(i64,)> = if kept {
        statement.fetch_all(&mut *conn).await?
    } else {
        let mut tx = conn.begin().await?;
        let settled = statement.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        settled
    };
    let settled: HashSet<i64> = settled.into_iter().map(|(id,)| id).collect();
    Ok(settlements
        .iter()
        .map(|(id, ..)| {
            if settled.contains(&id_to_db(id.get())) {
                ClaimReply::Settled
            } else {
                ClaimReply::Superseded
            }
        })
        .collect())
}
