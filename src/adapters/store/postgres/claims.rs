//! PostgreSQL side of the idempotency claims. The primary key arbitrates between
//! replicas: a claim is `INSERT ... ON CONFLICT DO NOTHING`, so of two replicas
//! claiming one id at once, exactly one inserts and the other reads its record.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::Mutex;

use super::sessions::SessionSettings;
use crate::adapters::store::claim_groups::{ClaimOutcome, Grouped, NewClaim, Settle, grouped};
use crate::adapters::store::common::claim_sql::apply_in;
use crate::adapters::store::common::conn::{Statements, Tx};
use crate::adapters::store::rows::{
    ClaimRow, SettlementColumns, ms, phone_to_db, seconds, settlement_columns,
};
use crate::adapters::store::{
    ClaimChange, ClaimRecord, ClaimReply, SentMessage, Settlement, StoreError,
};
use crate::core::domain::ClientId;

fn id_to_db(id: ClientId) -> i64 {
    crate::adapters::store::rows::id_to_db(id.get())
}

/// Groups of claims, and of settlements, written at once: each commit waits for
/// PostgreSQL's WAL sync, which commits under way together share.
pub(super) const SEND_PATH_WRITERS: usize = 2;

/// The connections of the send path's two group-commit stages, claims and settlements,
/// [`SEND_PATH_WRITERS`] each: a stage writes that many groups at a time, so
/// connections of its own serve it without the pool's checkout and the ping the pool
/// sends on every return.
#[derive(Debug)]
pub(super) struct SendPath {
    /// What opens a connection.
    options: PgConnectOptions,
    /// What a new connection sets first.
    settings: SessionSettings,
    /// How statements are prepared on them.
    statements: Statements,
    /// How long opening one may take.
    connect_timeout: Duration,
    stages: [[Mutex<Option<PgConnection>>; SEND_PATH_WRITERS]; 2],
}

impl SendPath {
    /// Connections opened as `options` say, when first needed, within `connect_timeout`,
    /// each making `settings` first.
    pub(super) fn new(
        options: PgConnectOptions,
        settings: SessionSettings,
        statements: Statements,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            options,
            settings,
            statements,
            connect_timeout,
            stages: std::array::from_fn(|_| std::array::from_fn(|_| Mutex::new(None))),
        }
    }

    /// Applies a group of changes: the send path's groups on a connection of their
    /// stage, retried once on a new connection when the database dropped it; others
    /// change by change in one transaction of the pool.
    pub(super) async fn apply(
        &self,
        pool: &PgPool,
        changes: &[ClaimChange],
        first_poll_after: Duration,
    ) -> Result<Vec<ClaimReply>, StoreError> {
        let group = grouped(changes);
        if let Grouped::Mixed = group {
            let tx = Tx::Postgres(pool.begin().await?, self.statements);
            return apply_in(tx, changes, first_poll_after).await;
        }
        Ok(self.on_stage(&group, &[], first_poll_after).await?.0)
    }

    /// Applies a group of only claims and reads which of `check` (numbers) are on the
    /// suppression list, in one statement on a connection of the claims stage: the
    /// replies and the numbers found. `None` for any other group.
    pub(super) async fn claim_checking(
        &self,
        changes: &[ClaimChange],
        check: &[i64],
        first_poll_after: Duration,
    ) -> Result<Option<(Vec<ClaimReply>, Vec<i64>)>, StoreError> {
        let group = grouped(changes);
        if !matches!(group, Grouped::Claims(_)) {
            return Ok(None);
        }
        self.on_stage(&group, check, first_poll_after)
            .await
            .map(Some)
    }

    /// Applies a group of only claims (reading `check` beside) or only settlements on a
    /// connection of its stage, retried once on a new connection when the database
    /// dropped it.
    async fn on_stage(
        &self,
        group: &Grouped<'_>,
        check: &[i64],
        first_poll_after: Duration,
    ) -> Result<(Vec<ClaimReply>, Vec<i64>), StoreError> {
        // Take-overs are claims too (the claims stage writes them, before requests
        // leave).
        let stage = match group {
            Grouped::Claims(_) | Grouped::TakeOvers(_) => &self.stages[0],
            _ => &self.stages[1],
        };
        // A free connection of the stage; its callers keep within SEND_PATH_WRITERS
        // groups at once, so one is free but for a rare reconcile settlement.
        let mut held = match stage.iter().find_map(|c| c.try_lock().ok()) {
            Some(held) => held,
            None => stage[0].lock().await,
        };
        // One token per change, the same on the retry: it tells this group's own
        // claims from other calls' when the first attempt's answer was lost.
        let tokens: Vec<i64> = match group {
            Grouped::Claims(claims) => claims.iter().map(|_| rand::random()).collect(),
            Grouped::TakeOvers(take_overs) => take_overs.iter().map(|_| rand::random()).collect(),
            _ => Vec::new(),
        };
        let mut retried = false;
        loop {
            let conn = match &mut *held {
                Some(conn) => conn,
                empty => empty.insert(self.connect().await?),
            };
            let applied = apply_on(
                conn,
                self.statements,
                group,
                (&tokens, check),
                retried,
                first_poll_after,
            );
            match applied.await {
                // Both writes may run twice: a claim that did land is known again by
                // its token, a settlement is a compare-and-set on the attempt.
                Err(e) if is_connection_error(&e) => {
                    *held = None;
                    if retried {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, "store: the connection of the send path failed; retrying once on a new one");
                    retried = true;
                }
                result => return result,
            }
        }
    }

    /// A new connection of the send path's own, its settings made, within the connect
    /// timeout.
    async fn connect(&self) -> Result<PgConnection, StoreError> {
        let connect = async {
            let mut conn = PgConnection::connect_with(&self.options).await?;
            self.settings.apply(&mut conn).await?;
            Ok::<_, sqlx::Error>(conn)
        };
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(conn) => Ok(conn?),
            Err(_) => Err(sqlx::Error::PoolTimedOut.into()),
        }
    }

    /// Closes the connections.
    pub(super) async fn close(&self) {
        for conn in self.stages.iter().flatten() {
            if let Some(conn) = conn.lock().await.take() {
                let _ = conn.close().await;
            }
        }
    }
}

/// Whether `e` says the connection is gone (the statement may or may not have run), not
/// that the statement failed.
fn is_connection_error(e: &StoreError) -> bool {
    let StoreError::Database(driver) = e else {
        return false;
    };
    match driver.get::<sqlx::Error>() {
        Some(sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_)) => true,
        Some(sqlx::Error::Database(e)) => e.code().is_some_and(|code| {
            // Class 08: connection exception; 57P01..03: the server is shutting down
            // or cannot take connections now.
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// Applies a group of only claims (one INSERT, each claim atomic on its own, that also
/// reads which numbers of `check` are suppressed) or only settlements (one UPDATE with
/// the reconcile rows of the accepted sends) on `conn`: one round trip, two for claims
/// of which some already existed. Behind a pooler in transaction mode the claims run in
/// a transaction, as every statement there must.
async fn apply_on(
    conn: &mut PgConnection,
    statements: Statements,
    group: &Grouped<'_>,
    (tokens, check): (&[i64], &[i64]),
    retried: bool,
    first_poll_after: Duration,
) -> Result<(Vec<ClaimReply>, Vec<i64>), StoreError> {
    let kept = statements.kept();
    match group {
        Grouped::Claims(claims) if kept => {
            claim_all(conn, kept, claims, (tokens, check), retried).await
        }
        Grouped::Claims(claims) => {
            let mut tx = conn.begin().await?;
            let done = claim_all(&mut tx, kept, claims, (tokens, check), retried).await?;
            tx.commit().await?;
            Ok(done)
        }
        Grouped::Settlements(settlements) => {
            let replies = settle_all(conn, kept, settlements, first_poll_after).await?;
            Ok((replies, Vec::new()))
        }
        Grouped::TakeOvers(take_overs) => {
            let replies =
                super::take_overs::take_over_all(conn, kept, take_overs, tokens, retried).await?;
            Ok((replies, Vec::new()))
        }
        Grouped::Mixed => Err(StoreError::Append(
            "a group mixing claims and settlements needs a transaction".into(),
        )),
    }
}

/// Claims every id not claimed yet with one INSERT, whose statement also reads which
/// numbers of `check` are on the suppression list; an id already claimed (before, by
/// another replica, or earlier in this group) answers its current record. `retried`:
/// an earlier attempt of this group may have committed; its claims, still as it left
/// them, are known by their `tokens` and count as inserted now.
pub(super) async fn claim_all(
    conn: &mut PgConnection,
    kept: bool,
    claims: &[NewClaim<'_>],
    (tokens, check): (&[i64], &[i64]),
    retried: bool,
) -> Result<(Vec<ClaimReply>, Vec<i64>), StoreError> {
    let ids: Vec<i64> = claims.iter().map(|(id, ..)| id_to_db(*id)).collect();
    let fingerprints: Vec<Vec<u8>> = claims.iter().map(|(_, f, ..)| f.0.to_vec()).collect();
    let callers: Vec<Option<&str>> = claims.iter().map(|(_, _, caller, _)| *caller).collect();
    let at: Vec<i64> = claims.iter().map(|(.., at)| ms(*at)).collect();
    // In id order: two replicas inserting overlapping groups wait for each other in
    // the same order, never in a cycle. Then in the group's order: of an id twice in
    // the group, the first is inserted, as `ClaimOutcome` takes it.
    // The suppression list's rows come back beside the inserted ids (a row has one or
    // the other): the statement sees the list as of its start, as a read beside it did.
    let rows: Vec<(Option<i64>, Option<i64>)> = sqlx::query_as(
        "WITH inserted AS (
           INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller,
                               claim_token)
           SELECT id, fingerprint, 1, 'in_flight', at, caller, token
             FROM UNNEST($1::BIGINT[], $2::BYTEA[], $3::BIGINT[], $4::TEXT[], $5::BIGINT[])
                  WITH ORDINALITY AS t (id, fingerprint, at, caller, token, n)
            ORDER BY id, n
           ON CONFLICT (client_id) DO NOTHING RETURNING client_id)
         SELECT client_id, NULL::BIGINT FROM inserted
         UNION ALL
         SELECT NULL::BIGINT, phone FROM suppressions WHERE phone = ANY($6::BIGINT[])",
    )
    .persistent(kept)
    .bind(&ids)
    .bind(&fingerprints)
    .bind(&at)
    .bind(&callers)
    .bind(tokens)
    .bind(check)
    .fetch_all(&mut *conn)
    .await?;
    let mut inserted: Vec<(i64,)> = Vec::with_capacity(rows.len());
    let mut suppressed = Vec::new();
    for row in rows {
        match row {
            (Some(id), _) => inserted.push((id,)),
            (None, Some(phone)) => suppressed.push(phone),
            (None, None) => {}
        }
    }
    if retried {
        inserted.extend(
            sqlx::query_as::<_, (i64,)>(
                "SELECT c.client_id FROM claims c
                   JOIN UNNEST($1::BIGINT[], $2::BIGINT[]) AS t (id, token)
                     ON c.client_id = t.id AND c.claim_token = t.token
                  WHERE c.attempt = 1 AND c.state = 'in_flight'",
            )
            .persistent(kept)
            .bind(&ids)
            .bind(tokens)
            .fetch_all(&mut *conn)
            .await?,
        );
    }
    let inserted: HashSet<i64> = inserted.into_iter().map(|(id,)| id).collect();
    let outcome = ClaimOutcome::new(ids, &inserted);
    let existing = outcome.to_read();
    let mut records = HashMap::new();
    if !existing.is_empty() {
        let rows: Vec<ClaimRow> = sqlx::query_as("SELECT * FROM claims WHERE client_id = ANY($1)")
            .persistent(kept)
            .bind(&existing)
            .fetch_all(&mut *conn)
            .await?;
        for row in rows {
            records.insert(row.client_id, ClaimRecord::try_from(row)?);
        }
    }
    Ok((outcome.replies(&records)?, suppressed))
}

/// Records the outcomes of distinct ids in one statement: the outcomes (only where the
/// attempt still matches), and the reconcile rows of exactly the accepted sends whose
/// outcome landed.
async fn settle_all(
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
        ids.push(id_to_db(*id));
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
            if settled.contains(&id_to_db(*id)) {
                ClaimReply::Settled
            } else {
                ClaimReply::Superseded
            }
        })
        .collect())
}

/// The tests' PostgreSQL schemas (one per test, dropped after).
#[cfg(test)]
#[path = "../../../../tests/common/postgres.rs"]
mod test_postgres;

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::test_postgres as postgres;
    use super::*;
    use crate::adapters::store::Fingerprint;

    /// The send path's connections plan every statement for the tables as they are: a
    /// generic plan cached while `claims` was nearly empty scans the whole table for
    /// every settlement group once it has grown (seen as PostgreSQL's CPU going to
    /// sequential scans under load, and half the sends per second).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_send_paths_connections_plan_each_statement_anew() {
        let schema = postgres::TestSchema::create().await;
        let store = super::super::PgDb::open(
            &crate::adapters::store::StoreTarget::new(&schema.url),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        let mut conn = store.send_path.connect().await.unwrap();
        let (mode,): (String,) = sqlx::query_as("SHOW plan_cache_mode")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(mode, "force_custom_plan");
        conn.close().await.unwrap();
        store.close().await;
    }

    /// The claims connection dropped after the insert committed, before its answer
    /// came: the retry must know its own claims, not wait on them as another call's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_retried_claim_group_knows_its_own_claims_by_their_tokens() {
        let schema = postgres::TestSchema::create().await;
        // Opening the store migrates the schema.
        let store = super::super::PgDb::open(
            &crate::adapters::store::StoreTarget::new(&schema.url),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        let mut conn = postgres::connect(&schema.url).await;
        let fingerprint = Fingerprint([3; 32]);
        let now = Utc::now();
        let claims: Vec<NewClaim<'_>> = [1_u64, 2, 1]
            .into_iter()
            .map(|id| (ClientId::new(id).unwrap(), &fingerprint, None, now))
            .collect();
        let tokens = [11, 12, 13];
        let (first, _) = claim_all(&mut conn, true, &claims, (&tokens, &[]), false)
            .await
            .unwrap();
        assert!(matches!(first[0], ClaimReply::Claimed { attempt: 1 }));
        assert!(matches!(first[1], ClaimReply::Claimed { attempt: 1 }));
        assert!(
            matches!(first[2], ClaimReply::Existing(_)),
            "the second of id 1"
        );
        // The same group again, as a retry whose first answer was lost: the same
        // replies, the first of id 1 owning it.
        let (again, _) = claim_all(&mut conn, true, &claims, (&tokens, &[]), true)
            .await
            .unwrap();
        assert!(matches!(again[0], ClaimReply::Claimed { attempt: 1 }));
        assert!(matches!(again[1], ClaimReply::Claimed { attempt: 1 }));
        assert!(matches!(again[2], ClaimReply::Existing(_)));
        // Another group with other tokens finds them claimed.
        let (other, _) = claim_all(&mut conn, true, &claims[..2], (&[21, 22], &[]), true)
            .await
            .unwrap();
        assert!(other.iter().all(|r| matches!(r, ClaimReply::Existing(_))));
        store.close().await;
    }
}
