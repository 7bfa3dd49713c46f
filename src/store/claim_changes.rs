//! Claim changes applied one by one inside a group's transaction (take-overs, or a
//! group that repeats an id): the same SQL on both databases (SQLite reads `$N`
//! placeholders too), written once and instantiated per database.

/// Defines `apply` (and its helpers) over transactions of `$db`.
macro_rules! change_by_change {
    ($db:ty) => {
        /// Applies a group change by change in `tx`, then commits it.
        async fn apply_in(
            mut tx: sqlx::Transaction<'_, $db>,
            changes: &[ClaimChange],
            first_poll_after: Duration,
        ) -> Result<Vec<ClaimReply>, StoreError> {
            // In id order (stable: one id's changes keep theirs), so that groups written
            // at once lock their rows in one order and never wait on each other in a
            // cycle (PostgreSQL found deadlocks between take-overs of hot ids).
            let mut order: Vec<usize> = (0..changes.len()).collect();
            order.sort_by_key(|&i| changes[i].id());
            let mut replies: Vec<Option<ClaimReply>> = changes.iter().map(|_| None).collect();
            for i in order {
                replies[i] = Some(apply(&mut tx, &changes[i], first_poll_after).await?);
            }
            tx.commit().await?;
            Ok(replies.into_iter().flatten().collect())
        }

        /// Applies one change inside the group's transaction.
        async fn apply(
            tx: &mut sqlx::Transaction<'_, $db>,
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
                    if insert(tx, *id, fingerprint, caller.as_ref(), *at).await? {
                        return Ok(ClaimReply::Claimed { attempt: 1 });
                    }
                    existing(tx, *id).await
                }
                ClaimChange::TakeOver {
                    id,
                    fingerprint,
                    attempt,
                    caller,
                    at,
                } => {
                    let taken: Option<(i64,)> = sqlx::query_as(
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
                    .bind(caller.as_ref().map(CallerName::as_str))
                    .fetch_optional(&mut **tx)
                    .await?;
                    if let Some((attempt,)) = taken {
                        return Ok(ClaimReply::Claimed {
                            attempt: attempt_from_db(attempt)?,
                        });
                    }
                    // Pruned since the caller looked: the id is free, claim it anew.
                    if insert(tx, *id, fingerprint, caller.as_ref(), *at).await? {
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
            tx: &mut sqlx::Transaction<'_, $db>,
            id: ClientId,
            fingerprint: &Fingerprint,
            caller: Option<&CallerName>,
            at: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            let inserted: Option<(i64,)> = sqlx::query_as(
                "INSERT INTO claims (client_id, fingerprint, attempt, state, claimed_at_ms, caller)
                 VALUES ($1, $2, 1, 'in_flight', $3, $4)
                 ON CONFLICT (client_id) DO NOTHING RETURNING attempt",
            )
            .bind(id_to_db(id))
            .bind(&fingerprint.0[..])
            .bind(ms(at))
            .bind(caller.map(CallerName::as_str))
            .fetch_optional(&mut **tx)
            .await?;
            Ok(inserted.is_some())
        }

        /// The current claim of `id` (which exists: the caller's insert just conflicted).
        async fn existing(tx: &mut sqlx::Transaction<'_, $db>, id: ClientId) -> Result<ClaimReply, StoreError> {
            let row: ClaimRow = sqlx::query_as("SELECT * FROM claims WHERE client_id = $1")
                .bind(id_to_db(id))
                .fetch_one(&mut **tx)
                .await?;
            Ok(ClaimReply::Existing(row.try_into()?))
        }

        async fn settle(
            tx: &mut sqlx::Transaction<'_, $db>,
            id: ClientId,
            attempt: u32,
            settlement: &Settlement,
            at: DateTime<Utc>,
            first_poll_after: Duration,
        ) -> Result<ClaimReply, StoreError> {
            let SettlementColumns { state, accepted, reason, settle_until_ms } =
                settlement_columns(settlement);
            let lookups = match settlement {
                Settlement::Unresolved { lookups, .. } => Some(lookups),
                _ => None,
            };
            let updated = sqlx::query(
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
            .bind(lookups.map(|l| ms(l.next_at)))
            .execute(&mut **tx)
            .await?
            .rows_affected();
            if updated == 0 {
                return Ok(ClaimReply::Superseded);
            }
            if let Settlement::Accepted(_, Some(m)) = settlement {
                let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
                sqlx::query(
                    "INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s,
                                           last_status, is_final, next_poll_ms, polls)
                     VALUES ($1, $2, $3, $4, $5, NULL, FALSE, $6, 0)
                     ON CONFLICT (client_id) DO UPDATE SET
                       msg_id = excluded.msg_id, channel = excluded.channel,
                       sent_at_ms = excluded.sent_at_ms, lifetime_s = excluded.lifetime_s,
                       last_status = NULL, is_final = FALSE, next_poll_ms = excluded.next_poll_ms,
                       polls = 0",
                )
                .bind(id_to_db(m.client_id))
                .bind(&m.msg_id)
                .bind(m.channel.as_str())
                .bind(ms(m.sent_at))
                .bind(seconds(m.lifetime))
                .bind(ms(m.sent_at + after))
                .execute(&mut **tx)
                .await?;
            }
            Ok(ClaimReply::Settled)
        }
    };
}

pub(super) use change_by_change;
