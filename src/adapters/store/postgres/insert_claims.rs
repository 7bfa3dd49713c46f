//! PostgreSQL side of a group of new claims: the primary key arbitrates between
//! replicas, so of two replicas claiming one id at once exactly one inserts it and the
//! other reads its record; the same statement reads which of the group's numbers are
//! on the suppression list.

use std::collections::{HashMap, HashSet};

use sqlx::PgConnection;

use crate::adapters::store::claim_groups::{ClaimOutcome, NewClaim};
use crate::adapters::store::rows::{ClaimRow, id_to_db, ms};
use crate::adapters::store::{ClaimRecord, ClaimReply, StoreError};

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
    let ids: Vec<i64> = claims.iter().map(|(id, ..)| id_to_db(id.get())).collect();
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

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::super::test_postgres as postgres;
    use super::*;
    use crate::adapters::store::Fingerprint;
    use crate::core::domain::ClientId;

    /// The claims connection dropped after the insert committed, before its answer
    /// came: the retry must know its own claims, not wait on them as another call's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_retried_claim_group_knows_its_own_claims_by_their_tokens() {
        let schema = postgres::TestSchema::create().await;
        let store = super::super::migrated(&schema).await;
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
