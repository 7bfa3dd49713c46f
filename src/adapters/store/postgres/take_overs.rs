//! PostgreSQL side of a group of take-overs (scheduled messages leaving together,
//! retries of released or unknown ids): one compare-and-set on the attempts for the
//! whole group, the rows locked in id order first, as the claims and settlements
//! groups lock them (`claims.rs`).

use std::collections::HashMap;

use sqlx::{Connection, PgConnection};

use super::insert_claims::claim_all;
use crate::adapters::store::claim_groups::{NewClaim, TakeOver};
use crate::adapters::store::rows::{attempt_from_db, id_to_db, ms};
use crate::adapters::store::{ClaimReply, StoreError};

/// Takes over, in one transaction, every claim still at the attempt its taker saw: the
/// rows locked in id order (as the other groups lock them), then one UPDATE. A claim
/// pruned since is claimed anew, and one that moved on answers its record. `retried`:
/// an earlier attempt of this group may have committed; its take-overs are known by
/// their `tokens`.
pub(super) async fn take_over_all(
    conn: &mut PgConnection,
    kept: bool,
    take_overs: &[TakeOver<'_>],
    tokens: &[i64],
    retried: bool,
) -> Result<Vec<ClaimReply>, StoreError> {
    let ids: Vec<i64> = take_overs.iter().map(|t| id_to_db(t.0.get())).collect();
    let fingerprints: Vec<Vec<u8>> = take_overs.iter().map(|t| t.1.0.to_vec()).collect();
    let attempts: Vec<i64> = take_overs.iter().map(|t| i64::from(t.2)).collect();
    let callers: Vec<Option<&str>> = take_overs.iter().map(|t| t.3).collect();
    let at: Vec<i64> = take_overs.iter().map(|t| ms(t.4)).collect();
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT 1 FROM claims WHERE client_id = ANY($1) ORDER BY client_id FOR UPDATE")
        .persistent(kept)
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    let mut taken: Vec<(i64, i64)> = sqlx::query_as(
        "UPDATE claims c SET fingerprint = t.fingerprint, attempt = c.attempt + 1,
                state = 'in_flight', claimed_at_ms = t.at, settled_at_ms = NULL,
                msg_id = NULL, parts = NULL, payload = NULL, recovered = FALSE,
                reason = NULL, caller = t.caller, lookups = 0, next_lookup_ms = NULL,
                claim_token = t.token
           FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::BYTEA[], $4::BIGINT[], $5::TEXT[],
                       $6::BIGINT[]) AS t (id, attempt, fingerprint, at, caller, token)
          WHERE c.client_id = t.id AND c.attempt = t.attempt
         RETURNING c.client_id, c.attempt",
    )
    .persistent(kept)
    .bind(&ids)
    .bind(&attempts)
    .bind(&fingerprints)
    .bind(&at)
    .bind(&callers)
    .bind(tokens)
    .fetch_all(&mut *tx)
    .await?;
    if retried {
        taken.extend(
            sqlx::query_as::<_, (i64, i64)>(
                "SELECT c.client_id, c.attempt FROM claims c
                   JOIN UNNEST($1::BIGINT[], $2::BIGINT[], $3::BIGINT[]) AS t (id, attempt, token)
                     ON c.client_id = t.id AND c.claim_token = t.token
                  WHERE c.attempt = t.attempt + 1 AND c.state = 'in_flight'",
            )
            .persistent(kept)
            .bind(&ids)
            .bind(&attempts)
            .bind(tokens)
            .fetch_all(&mut *tx)
            .await?,
        );
    }
    let taken: HashMap<i64, i64> = taken.into_iter().collect();
    let mut replies: Vec<Option<ClaimReply>> = Vec::with_capacity(ids.len());
    let (mut missed, mut missed_tokens) = (Vec::new(), Vec::new());
    for (i, id) in ids.iter().enumerate() {
        match taken.get(id) {
            Some(&attempt) => replies.push(Some(ClaimReply::Claimed {
                attempt: attempt_from_db(attempt)?,
            })),
            None => {
                replies.push(None);
                missed.push(i);
                missed_tokens.push(tokens[i]);
            }
        }
    }
    if !missed.is_empty() {
        // Pruned since the taker looked: the id is free, claim it anew; or it moved on.
        let claims: Vec<NewClaim<'_>> = missed
            .iter()
            .map(|&i| {
                let (id, fingerprint, _, caller, at) = take_overs[i];
                (id, fingerprint, caller, at)
            })
            .collect();
        let (claimed, _) =
            claim_all(&mut tx, kept, &claims, (&missed_tokens, &[]), retried).await?;
        for (i, reply) in missed.into_iter().zip(claimed) {
            replies[i] = Some(reply);
        }
    }
    tx.commit().await?;
    Ok(replies.into_iter().flatten().collect())
}
