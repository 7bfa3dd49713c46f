//! SQLite side of the idempotency claims: every change runs inside the caller's
//! transaction, so a group of changes commits (or fails) together.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use chrono::{DateTime, TimeZone, Utc};
use sqlx::{Connection, Row, Sqlite, SqliteConnection, Transaction, sqlite::SqliteRow};

use super::{
    AcceptedOutcome, ClaimChange, ClaimRecord, ClaimReply, ClaimState, Fingerprint, SentMessage,
    Settlement, StoreError,
};
use crate::domain::ClientId;

type Tx<'a> = Transaction<'a, Sqlite>;

/// Client ids are u64 on the wire and INTEGER (i64) in SQLite: stored bit for bit.
pub(super) fn id_to_db(id: ClientId) -> i64 {
    id.get() as i64
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
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
    let claims: Option<Vec<(ClientId, &Fingerprint, DateTime<Utc>)>> = changes
        .iter()
        .map(|c| match c {
            ClaimChange::Claim {
                id,
                fingerprint,
                at,
            } => Some((*id, fingerprint, *at)),
            _ => None,
        })
        .collect();
    if let Some(claims) = claims {
        return claim_all(conn, &claims).await;
    }
    let settlements: Option<Vec<Settle<'_>>> = changes
        .iter()
        .map(|c| match c {
            ClaimChange::Settle {
                id,
                attempt,
                settlement,
                at,
            } => Some((*id, *attempt, settlement, *at)),
            _ => None,
        })
        .collect();
    if let Some(settlements) = settlements {
        let distinct: HashSet<ClientId> = settlements.iter().map(|s| s.0).collect();
        if distinct.len() == settlements.len() {
            return settle_all(conn, &settlements, first_poll_after).await;
        }
    }
    let mut tx = conn.begin().await?;
    let mut replies = Vec::with_capacity(changes.len());
    for change in changes {
        replies.push(apply(&mut tx, change, first_poll_after).await?);
    }
    tx.commit().await?;
    Ok(replies)
}

/// A settlement: id, attempt owned, outcome, when.
type Settle<'a> = (ClientId, u32, &'a Settlement, DateTime<Utc>);

/// Claims every id not claimed yet with one INSERT; an id already claimed (before, or
/// earlier in this group) answers its current record.
async fn claim_all(
    conn: &mut SqliteConnection,
    claims: &[(ClientId, &Fingerprint, DateTime<Utc>)],
) -> Result<Vec<ClaimReply>, StoreError> {
    let mut inserted = HashSet::new();
    for chunk in super::sqlite::row_chunks(claims) {
        let mut query = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms) ",
        );
        query.push_values(chunk, |mut row, (id, fingerprint, at)| {
            row.push_bind(id_to_db(*id))
                .push_bind(&fingerprint.0[..])
                .push("1, 'in_flight'")
                .push_bind(ms(*at));
        });
        query.push(" ON CONFLICT (client_id) DO NOTHING RETURNING client_id");
        let rows: Vec<(i64,)> = query.build_query_as().fetch_all(&mut *conn).await?;
        inserted.extend(rows.into_iter().map(|(id,)| id));
    }
    // The first occurrence of an inserted id owns it; every other looks at the record.
    let mut owned = HashSet::new();
    let mut replies: Vec<Option<ClaimReply>> = claims
        .iter()
        .map(|(id, _, _)| {
            let db = id_to_db(*id);
            (inserted.contains(&db) && owned.insert(db))
                .then_some(ClaimReply::Claimed { attempt: 1 })
        })
        .collect();
    let existing: Vec<i64> = claims
        .iter()
        .zip(&replies)
        .filter(|(_, reply)| reply.is_none())
        .map(|((id, _, _), _)| id_to_db(*id))
        .collect();
    let mut records = HashMap::new();
    for chunk in super::sqlite::row_chunks(&existing) {
        let mut query =
            sqlx::QueryBuilder::<Sqlite>::new("SELECT * FROM claims WHERE client_id IN (");
        let mut ids = query.separated(", ");
        for id in chunk {
            ids.push_bind(*id);
        }
        query.push(")");
        for row in query.build().fetch_all(&mut *conn).await? {
            let id: i64 = row.try_get("client_id")?;
            records.insert(id, record_from_row(&row)?);
        }
    }
    for ((id, _, _), reply) in claims.iter().zip(replies.iter_mut()) {
        if reply.is_none() {
            let record = records.get(&id_to_db(*id)).cloned().ok_or_else(|| {
                StoreError::Corrupt(format!("claim of {id} conflicted but cannot be read"))
            })?;
            *reply = Some(ClaimReply::Existing(record));
        }
    }
    Ok(replies.into_iter().flatten().collect())
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
    for chunk in super::sqlite::row_chunks(settlements) {
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
                .push_bind(message.map(|m| super::sqlite::seconds(m.lifetime)))
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
             WITH v (client_id, attempt, state, settled_at_ms, msg_id, parts, payload, recovered, reason) AS (",
        );
        query.push_values(chunk, |mut row, (id, attempt, settlement, at)| {
            let (state, accepted, reason) = columns(settlement);
            row.push_bind(id_to_db(*id))
                .push_bind(i64::from(*attempt))
                .push_bind(state)
                .push_bind(ms(*at))
                .push_bind(accepted.and_then(|a| a.msg_id.clone()))
                .push_bind(accepted.map(|a| i64::from(a.parts)))
                .push_bind(accepted.map(|a| a.payload.to_string()))
                .push_bind(accepted.is_some_and(|a| a.recovered))
                .push_bind(reason.map(str::to_owned));
        });
        query.push(
            ") UPDATE claims SET state = v.state, settled_at_ms = v.settled_at_ms,
                    msg_id = v.msg_id, parts = v.parts, payload = v.payload,
                    recovered = v.recovered, reason = v.reason
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

/// The stored state, accepted outcome and release reason of a settlement.
fn columns(settlement: &Settlement) -> (&'static str, Option<&AcceptedOutcome>, Option<&str>) {
    match settlement {
        Settlement::Accepted(outcome, _) => ("accepted", Some(outcome), None),
        Settlement::Released(reason) => ("released", None, Some(reason.as_str())),
        Settlement::Unknown => ("unknown", None, None),
    }
}

/// Applies one change.
/// A settled send's first poll is due `first_poll_after` after sending.
async fn apply(
    tx: &mut Tx<'_>,
    change: &ClaimChange,
    first_poll_after: Duration,
) -> Result<ClaimReply, StoreError> {
    match change {
        ClaimChange::Claim {
            id,
            fingerprint,
            at,
        } => {
            if insert(tx, *id, fingerprint, *at).await? {
                return Ok(ClaimReply::Claimed { attempt: 1 });
            }
            existing(tx, *id).await
        }
        ClaimChange::TakeOver {
            id,
            fingerprint,
            attempt,
            at,
        } => {
            let taken: Option<(i64,)> = sqlx::query_as(
                "UPDATE claims SET fingerprint = ?, attempt = attempt + 1, state = 'in_flight',
                        claimed_at_ms = ?, settled_at_ms = NULL, msg_id = NULL, parts = NULL,
                        payload = NULL, recovered = 0, reason = NULL
                  WHERE client_id = ? AND attempt = ? RETURNING attempt",
            )
            .bind(&fingerprint.0[..])
            .bind(ms(*at))
            .bind(id_to_db(*id))
            .bind(i64::from(*attempt))
            .fetch_optional(&mut **tx)
            .await?;
            if let Some((attempt,)) = taken {
                return Ok(ClaimReply::Claimed {
                    attempt: db_attempt(attempt)?,
                });
            }
            // Pruned since the caller looked: the id is free, claim it anew.
            if insert(tx, *id, fingerprint, *at).await? {
                return Ok(ClaimReply::Claimed { attempt: 1 });
            }
            existing(tx, *id).await
        }
        ClaimChange::Settle {
            id,
            attempt,
            settlement,
            at,
        } => settle(tx, *id, *attempt, settlement, *at, first_poll_after).await,
    }
}

/// Inserts a new in-flight claim unless `id` has one; true when inserted.
async fn insert(
    tx: &mut Tx<'_>,
    id: ClientId,
    fingerprint: &Fingerprint,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let inserted: Option<(i64,)> = sqlx::query_as(
        "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms)
         VALUES (?, ?, 1, 'in_flight', ?)
         ON CONFLICT (client_id) DO NOTHING RETURNING attempt",
    )
    .bind(id_to_db(id))
    .bind(&fingerprint.0[..])
    .bind(ms(at))
    .fetch_optional(&mut **tx)
    .await?;
    Ok(inserted.is_some())
}

/// The current claim of `id` (which exists: the caller's insert just conflicted).
async fn existing(tx: &mut Tx<'_>, id: ClientId) -> Result<ClaimReply, StoreError> {
    let row = sqlx::query("SELECT * FROM claims WHERE client_id = ?")
        .bind(id_to_db(id))
        .fetch_one(&mut **tx)
        .await?;
    Ok(ClaimReply::Existing(record_from_row(&row)?))
}

async fn settle(
    tx: &mut Tx<'_>,
    id: ClientId,
    attempt: u32,
    settlement: &Settlement,
    at: DateTime<Utc>,
    first_poll_after: Duration,
) -> Result<ClaimReply, StoreError> {
    let (state, accepted, reason) = columns(settlement);
    let updated = sqlx::query(
        "UPDATE claims SET state = ?, settled_at_ms = ?, msg_id = ?, parts = ?, payload = ?,
                recovered = ?, reason = ?
          WHERE client_id = ? AND attempt = ?",
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
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if updated == 0 {
        return Ok(ClaimReply::Superseded);
    }
    if let Settlement::Accepted(_, Some(message)) = settlement {
        super::sqlite::record_sent(tx, &[message], first_poll_after).await?;
    }
    Ok(ClaimReply::Settled)
}

fn db_attempt(v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("claim attempt {v}")))
}

/// Reads a claims row.
pub(super) fn record_from_row(row: &SqliteRow) -> Result<ClaimRecord, StoreError> {
    let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
    let fingerprint = Fingerprint(
        fingerprint
            .try_into()
            .map_err(|_| StoreError::Corrupt("claim fingerprint is not 32 bytes".into()))?,
    );
    let state: String = row.try_get("state")?;
    let state = match state.as_str() {
        "in_flight" => {
            let since: i64 = row.try_get("claimed_at_ms")?;
            ClaimState::InFlight {
                since: Utc
                    .timestamp_millis_opt(since)
                    .single()
                    .ok_or_else(|| StoreError::Corrupt(format!("claimed_at_ms {since}")))?,
            }
        }
        "accepted" => {
            let payload: Option<String> = row.try_get("payload")?;
            let parts: Option<i64> = row.try_get("parts")?;
            ClaimState::Accepted(AcceptedOutcome {
                msg_id: row.try_get("msg_id")?,
                parts: u32::try_from(parts.unwrap_or(0))
                    .map_err(|_| StoreError::Corrupt(format!("claim parts {parts:?}")))?,
                payload: match payload {
                    Some(text) => serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("claim payload: {e}")))?,
                    None => serde_json::Value::Null,
                },
                recovered: row.try_get("recovered")?,
            })
        }
        "released" => ClaimState::Released {
            reason: row
                .try_get::<Option<String>, _>("reason")?
                .unwrap_or_default(),
        },
        "unknown" => ClaimState::Unknown,
        other => return Err(StoreError::Corrupt(format!("claim state {other:?}"))),
    };
    Ok(ClaimRecord {
        fingerprint,
        attempt: db_attempt(row.try_get("attempt")?)?,
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SqliteStore, Store};

    fn id(n: u64) -> ClientId {
        ClientId::new(n).unwrap()
    }

    const A: Fingerprint = Fingerprint([1; 32]);
    const B: Fingerprint = Fingerprint([2; 32]);

    async fn store() -> SqliteStore {
        SqliteStore::open("sqlite::memory:", Duration::from_secs(60))
            .await
            .unwrap()
    }

    fn claim(n: u64, fingerprint: Fingerprint) -> ClaimChange {
        ClaimChange::Claim {
            id: id(n),
            fingerprint,
            at: Utc::now(),
        }
    }

    #[tokio::test]
    async fn the_second_claim_of_an_id_in_one_group_sees_the_first() {
        let store = store().await;
        let replies = store
            .apply_claims(&[claim(1, A), claim(1, A), claim(2, B)])
            .await
            .unwrap();
        assert_eq!(replies[0], ClaimReply::Claimed { attempt: 1 });
        let ClaimReply::Existing(record) = &replies[1] else {
            panic!("{:?}", replies[1])
        };
        assert_eq!(record.fingerprint, A);
        assert!(matches!(record.state, ClaimState::InFlight { .. }));
        assert_eq!(replies[2], ClaimReply::Claimed { attempt: 1 });
    }

    #[tokio::test]
    async fn a_take_over_wins_once_and_fences_the_old_owner() {
        let store = store().await;
        store.apply_claims(&[claim(1, A)]).await.unwrap();
        let take = |fingerprint| ClaimChange::TakeOver {
            id: id(1),
            fingerprint,
            attempt: 1,
            at: Utc::now(),
        };
        let replies = store.apply_claims(&[take(B), take(A)]).await.unwrap();
        assert_eq!(replies[0], ClaimReply::Claimed { attempt: 2 });
        assert!(
            matches!(&replies[1], ClaimReply::Existing(r) if r.attempt == 2 && r.fingerprint == B)
        );

        let settle = |attempt| ClaimChange::Settle {
            id: id(1),
            attempt,
            settlement: Settlement::Released("Error in Sender-name".into()),
            at: Utc::now(),
        };
        let replies = store.apply_claims(&[settle(1), settle(2)]).await.unwrap();
        assert_eq!(replies, [ClaimReply::Superseded, ClaimReply::Settled]);
        let record = store.claim_of(id(1)).await.unwrap().unwrap();
        assert_eq!(
            record.state,
            ClaimState::Released {
                reason: "Error in Sender-name".into()
            }
        );
    }

    #[tokio::test]
    async fn taking_over_a_pruned_claim_claims_it_anew() {
        let store = store().await;
        let take = ClaimChange::TakeOver {
            id: id(9),
            fingerprint: A,
            attempt: 3,
            at: Utc::now(),
        };
        assert_eq!(
            store.apply_claims(&[take]).await.unwrap(),
            [ClaimReply::Claimed { attempt: 1 }]
        );
    }

    #[tokio::test]
    async fn an_accepted_outcome_reads_back_exactly() {
        let store = store().await;
        store
            .apply_claims(&[claim(ClientId::MAX, A)])
            .await
            .unwrap();
        let outcome = AcceptedOutcome {
            msg_id: Some("123456789".into()),
            parts: 3,
            payload: serde_json::json!({"id": 1, "msg_id": 123456789, "data": 1, "parts": 3, "x": 0.1}),
            recovered: false,
        };
        let settle = ClaimChange::Settle {
            id: id(ClientId::MAX),
            attempt: 1,
            settlement: Settlement::Accepted(outcome.clone(), None),
            at: Utc::now(),
        };
        assert_eq!(
            store.apply_claims(&[settle]).await.unwrap(),
            [ClaimReply::Settled]
        );
        let record = store.claim_of(id(ClientId::MAX)).await.unwrap().unwrap();
        assert_eq!(record.state, ClaimState::Accepted(outcome));
        assert_eq!(record.fingerprint, A);
    }

    #[tokio::test]
    async fn a_group_of_settlements_fences_each_id_and_tracks_only_what_it_settled() {
        let store = store().await;
        store
            .apply_claims(&[claim(1, A), claim(2, A), claim(3, A)])
            .await
            .unwrap();
        let accepted = |n: u64| {
            Settlement::Accepted(
                AcceptedOutcome {
                    msg_id: Some(format!("m{n}")),
                    parts: 1,
                    payload: serde_json::json!({"msg_id": format!("m{n}")}),
                    recovered: false,
                },
                Some(SentMessage {
                    client_id: id(n),
                    msg_id: format!("m{n}"),
                    channel: crate::domain::Channel::Sms,
                    sent_at: Utc::now(),
                    lifetime: Duration::from_secs(3600),
                }),
            )
        };
        let settle = |n: u64, attempt, settlement| ClaimChange::Settle {
            id: id(n),
            attempt,
            settlement,
            at: Utc::now(),
        };
        let replies = store
            .apply_claims(&[
                settle(1, 1, accepted(1)),
                // Someone took id 2 over: this outcome must not land, nor its tracking.
                settle(2, 7, accepted(2)),
                settle(3, 1, Settlement::Unknown),
            ])
            .await
            .unwrap();
        assert_eq!(
            replies,
            [
                ClaimReply::Settled,
                ClaimReply::Superseded,
                ClaimReply::Settled
            ]
        );
        assert!(matches!(
            store.claim_of(id(1)).await.unwrap().unwrap().state,
            ClaimState::Accepted(_)
        ));
        assert!(matches!(
            store.claim_of(id(2)).await.unwrap().unwrap().state,
            ClaimState::InFlight { .. }
        ));
        assert_eq!(
            store.claim_of(id(3)).await.unwrap().unwrap().state,
            ClaimState::Unknown
        );
        assert_eq!(store.client_id_of("m1").await.unwrap(), Some(1));
        assert_eq!(store.client_id_of("m2").await.unwrap(), None);
    }
}
