//! What both databases speak, written once: the SQL of the store's reads and
//! bookkeeping writes, and [`store_impl!`], which writes the `Store` methods built on
//! it for either store. Each store keeps apart only what really differs: the send
//! path's claims and settlements, event appends (cursor order across replicas),
//! taking due polls (`FOR UPDATE SKIP LOCKED`), starting a verification (advisory
//! locks), opening and closing.

use chrono::{DateTime, Utc};

use super::Retention;

/// Takes or renews a lease (name, holder, until, now): both databases speak this SQL.
/// A row comes back when `holder` holds the lease.
pub(super) const LEASE_SQL: &str = "INSERT INTO leases (name, holder, until_ms) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms
      WHERE leases.holder = excluded.holder OR leases.until_ms < $4
     RETURNING holder";

/// What a prune runs, in order: each statement with its bound values. Both databases
/// speak this SQL; the first two statements drop events (their row counts are the
/// result).
pub(super) fn prune_statements(
    retention: Retention,
    now: DateTime<Utc>,
) -> [(&'static str, Vec<i64>); 9] {
    use super::rows::{millis, ms};
    let horizon = ms(now).saturating_sub(millis(retention.max_age));
    let keep = i64::try_from(retention.max_events).unwrap_or(i64::MAX);
    let claims_horizon = ms(now).saturating_sub(millis(retention.claims_max_age));
    let verifications_horizon = ms(now - super::verifications::KEPT_AT_LEAST);
    let guard_horizon = ms(now).saturating_sub(millis(retention.guard_max_age));
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
        // again. Reconcile resolves open claims; then they age like the others.
        (
            "DELETE FROM claims WHERE COALESCE(settled_at_ms, claimed_at_ms) < $1
               AND state NOT IN ('in_flight', 'unknown')
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
            "DELETE FROM guard_starts WHERE started_at_ms < $1",
            vec![guard_horizon],
        ),
        (
            "DELETE FROM guard_keys WHERE started_at_ms < $1",
            vec![guard_horizon],
        ),
        (
            "DELETE FROM guard_holds WHERE until_ms < $1",
            vec![guard_horizon],
        ),
    ]
}

/// Claims still open past their settle window (`$1`: now, `$2`: in flight before, `$3`:
/// limit; the partial index `claims_unsettled` holds exactly the open ones); an unknown
/// one only once its next `status` lookup may run.
pub(super) const UNSETTLED_SQL: &str = "SELECT * FROM claims
     WHERE state IN ('in_flight', 'unknown')
       AND ((state = 'unknown' AND COALESCE(settle_until_ms, 0) <= $1
             AND COALESCE(next_lookup_ms, 0) <= $1)
            OR (state = 'in_flight' AND claimed_at_ms <= $2))
     ORDER BY claimed_at_ms LIMIT $3";

/// The final event of a message if it has one, else its newest (`$1`: the client id).
pub(super) const LAST_EVENT_SQL: &str =
    "SELECT * FROM events WHERE client_id = $1 ORDER BY is_final DESC, cursor DESC LIMIT 1";

/// Implements [`Store`](super::Store) for `$store`: the methods written below, whose
/// SQL both databases speak, plus the store's own methods passed after the `;`.
/// - `reads`, `writes`: the pools reads and writes use (SQLite writes on its one
///   writer connection; PostgreSQL on its pool);
/// - `verification`: the store's module in `verification_sql`;
/// - `due_for_poll`: its statement that takes due messages (`$1` the lease's end,
///   `$2` now, `$3` the limit; returning client_id, sent_at_ms, lifetime_s, polls);
/// - `start_lock`: a statement that makes starts of one number (`$1`) take turns
///   across replicas, where the database needs one (SQLite's one writer already does);
/// - `begin_write`: the statement that begins a transaction that reads, then writes
///   (SQLite's takes the write lock first: [`super::sqlite_claims::BEGIN_WRITE`]).
///
/// One macro emits the whole impl because `async_trait` does not expand macro calls
/// inside an impl.
macro_rules! store_impl {
    ($store:ty, reads: $read:ident, writes: $write:ident, verification: $vsql:ident, due_for_poll: $due:expr, start_lock: $start_lock:expr, begin_write: $begin_write:expr; $($own:tt)*) => {
        #[tonic::async_trait]
        impl $crate::store::Store for $store {
            $($own)*

            async fn claim_of(
                &self,
                id: $crate::domain::ClientId,
            ) -> Result<Option<$crate::store::ClaimRecord>, $crate::store::StoreError> {
                sqlx::query_as::<_, $crate::store::rows::ClaimRow>(
                    "SELECT * FROM claims WHERE client_id = $1",
                )
                .bind($crate::store::rows::id_to_db(id.get()))
                .fetch_optional(&self.$read)
                .await?
                .map($crate::store::ClaimRecord::try_from)
                .transpose()
            }

            async fn unsettled_claims(
                &self,
                now: chrono::DateTime<chrono::Utc>,
                in_flight_before: chrono::DateTime<chrono::Utc>,
                limit: u32,
            ) -> Result<
                Vec<($crate::domain::ClientId, $crate::store::ClaimRecord)>,
                $crate::store::StoreError,
            > {
                use $crate::store::rows::ms;
                let rows: Vec<$crate::store::rows::ClaimRow> =
                    sqlx::query_as($crate::store::shared::UNSETTLED_SQL)
                        .bind(ms(now))
                        .bind(ms(in_flight_before))
                        .bind(i64::from(limit))
                        .fetch_all(&self.$read)
                        .await?;
                $crate::store::rows::claims_with_ids(rows)
            }

            async fn client_id_of(
                &self,
                msg_id: &str,
            ) -> Result<Option<$crate::domain::ClientId>, $crate::store::StoreError> {
                let row: Option<(i64,)> =
                    sqlx::query_as("SELECT client_id FROM messages WHERE msg_id = $1 LIMIT 1")
                        .bind(msg_id)
                        .fetch_optional(&self.$read)
                        .await?;
                Ok(row.and_then(|(id,)| $crate::store::rows::report_id_from_db(id)))
            }

            async fn events_after(
                &self,
                cursor: $crate::domain::Cursor,
                limit: u32,
            ) -> Result<Vec<$crate::domain::StatusEvent>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::rows::EventRow> = sqlx::query_as(
                    "SELECT * FROM events WHERE cursor > $1 ORDER BY cursor LIMIT $2",
                )
                .bind($crate::store::rows::cursor_to_db(cursor))
                .bind(i64::from(limit))
                .fetch_all(&self.$read)
                .await?;
                rows.into_iter()
                    .map($crate::domain::StatusEvent::try_from)
                    .collect()
            }

            async fn last_event_of(
                &self,
                client_id: $crate::domain::ClientId,
            ) -> Result<Option<$crate::domain::StatusEvent>, $crate::store::StoreError> {
                sqlx::query_as::<_, $crate::store::rows::EventRow>(
                    $crate::store::shared::LAST_EVENT_SQL,
                )
                .bind($crate::store::rows::id_to_db(client_id.get()))
                .fetch_optional(&self.$read)
                .await?
                .map($crate::domain::StatusEvent::try_from)
                .transpose()
            }

            async fn oldest_cursor(
                &self,
            ) -> Result<Option<$crate::domain::Cursor>, $crate::store::StoreError> {
                let (min,): (Option<i64>,) = sqlx::query_as("SELECT MIN(cursor) FROM events")
                    .fetch_one(&self.$read)
                    .await?;
                // A cursor that cannot be one is a corrupt store, not "empty".
                min.map($crate::store::rows::cursor_from_db).transpose()
            }

            fn appended(&self) -> tokio::sync::watch::Receiver<$crate::domain::Cursor> {
                self.appended.subscribe()
            }

            async fn prune(
                &self,
                retention: $crate::store::Retention,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<u64, $crate::store::StoreError> {
                // Every statement runs; the first two drop events, the result.
                let mut dropped = Vec::new();
                for (sql, values) in $crate::store::shared::prune_statements(retention, now) {
                    let query = values
                        .into_iter()
                        .fold(sqlx::query(sql), |query, value| query.bind(value));
                    dropped.push(query.execute(&self.$write).await?.rows_affected());
                }
                Ok(dropped.iter().take(2).sum())
            }

            async fn take_due_for_poll(
                &self,
                now: chrono::DateTime<chrono::Utc>,
                limit: u32,
                lease: std::time::Duration,
            ) -> Result<Vec<$crate::store::PendingMessage>, $crate::store::StoreError> {
                use $crate::store::rows::{millis, ms};
                let rows: Vec<$crate::store::rows::DueRow> = sqlx::query_as($due)
                    .bind(ms(now).saturating_add(millis(lease)))
                    .bind(ms(now))
                    .bind(i64::from(limit))
                    .fetch_all(&self.$write)
                    .await?;
                rows.into_iter()
                    .map($crate::store::rows::pending_from_row)
                    .collect()
            }

            async fn schedule_poll(
                &self,
                client_id: $crate::domain::ClientId,
                next: Option<chrono::DateTime<chrono::Utc>>,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query(
                    "UPDATE messages SET next_poll_ms = $1, polls = polls + 1 WHERE client_id = $2",
                )
                .bind(next.map($crate::store::rows::ms))
                .bind($crate::store::rows::id_to_db(client_id.get()))
                .execute(&self.$write)
                .await?;
                Ok(())
            }

            async fn try_lease(
                &self,
                name: &str,
                holder: &str,
                ttl: std::time::Duration,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<bool, $crate::store::StoreError> {
                use $crate::store::rows::{millis, ms};
                let held: Option<(String,)> = sqlx::query_as($crate::store::shared::LEASE_SQL)
                    .bind(name)
                    .bind(holder)
                    .bind(ms(now).saturating_add(millis(ttl)))
                    .bind(ms(now))
                    .fetch_optional(&self.$write)
                    .await?;
                Ok(held.is_some())
            }

            async fn sandbox_state(
                &self,
                account: &str,
            ) -> Result<Option<String>, $crate::store::StoreError> {
                let row: Option<(String,)> =
                    sqlx::query_as($crate::store::sandbox_sql::STATE_SQL)
                        .bind(account)
                        .fetch_optional(&self.$read)
                        .await?;
                Ok(row.map(|(state,)| state))
            }

            async fn sandbox_messages(
                &self,
                account: &str,
            ) -> Result<Vec<(u64, String)>, $crate::store::StoreError> {
                let rows: Vec<(i64, String)> =
                    sqlx::query_as($crate::store::sandbox_sql::MESSAGES_SQL)
                        .bind(account)
                        .fetch_all(&self.$read)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, record)| ($crate::store::rows::id_from_db(id), record))
                    .collect())
            }

            async fn create_verification(
                &self,
                new: &$crate::store::NewVerification,
                limit: $crate::store::PhoneLimit,
                guard: Option<&$crate::store::GuardCheck>,
            ) -> Result<($crate::store::Created, Vec<$crate::store::GuardFinding>), $crate::store::StoreError> {
                let mut tx = self.$write.begin_with($begin_write).await?;
                let lock: Option<&str> = $start_lock;
                if let Some(lock) = lock {
                    sqlx::query(lock)
                        .bind($crate::store::verifications::phone_to_db(new.phone))
                        .execute(&mut *tx)
                        .await?;
                }
                let (created, findings) =
                    $crate::store::verification_sql::$vsql::create(&mut tx, new, limit, guard).await?;
                let new_hold = findings
                    .iter()
                    .any(|f| matches!(f, $crate::store::GuardFinding::Held { new: true, .. }));
                if matches!(created, $crate::store::Created::Started(_)) || new_hold {
                    tx.commit().await?;
                }
                Ok((created, findings))
            }

            async fn judge_range(
                &self,
                guard: &$crate::store::GuardCheck,
                now: chrono::DateTime<chrono::Utc>,
                lift: bool,
            ) -> Result<Option<$crate::store::GuardFinding>, $crate::store::StoreError> {
                let mut tx = self.$write.begin_with($begin_write).await?;
                let found = $crate::store::guard_sql::$vsql::judge_range(&mut tx, guard, now, lift).await?;
                tx.commit().await?;
                Ok(found)
            }

            async fn range_hold(
                &self,
                range: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Option<$crate::store::RangeHold>, $crate::store::StoreError> {
                let mut conn = self.$read.acquire().await?;
                $crate::store::guard_sql::$vsql::hold_of(&mut conn, range, now).await
            }

            async fn held_ranges(
                &self,
                now: chrono::DateTime<chrono::Utc>,
                after: &str,
                limit: u32,
            ) -> Result<Vec<$crate::store::RangeHold>, $crate::store::StoreError> {
                let mut conn = self.$read.acquire().await?;
                $crate::store::guard_sql::$vsql::held(&mut conn, now, after, limit).await
            }

            async fn release_range(
                &self,
                range: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Option<$crate::store::RangeHold>, $crate::store::StoreError> {
                let mut tx = self.$write.begin_with($begin_write).await?;
                let released = $crate::store::guard_sql::$vsql::release(&mut tx, range, now).await?;
                tx.commit().await?;
                Ok(released)
            }

            async fn verification_of_send(
                &self,
                send: $crate::domain::ClientId,
            ) -> Result<
                Option<($crate::store::VerificationRecord, bool)>,
                $crate::store::StoreError,
            > {
                let mut conn = self.$read.acquire().await?;
                $crate::store::verification_sql::$vsql::of_send(&mut conn, send).await
            }

            async fn pending_verification(
                &self,
                caller: Option<&$crate::domain::CallerName>,
                phone: $crate::domain::Phone,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Option<$crate::store::VerificationRecord>, $crate::store::StoreError> {
                let mut conn = self.$read.acquire().await?;
                $crate::store::verification_sql::$vsql::pending(&mut conn, caller, phone, now).await
            }

            async fn expire_verifications(
                &self,
                caller: Option<&$crate::domain::CallerName>,
                phone: $crate::domain::Phone,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Vec<$crate::store::VerificationRecord>, $crate::store::StoreError> {
                let mut conn = self.$write.acquire().await?;
                $crate::store::verification_sql::$vsql::expire(&mut conn, caller, phone, now).await
            }

            async fn change_verification(
                &self,
                change: &$crate::store::VerificationChange,
            ) -> Result<Option<$crate::store::VerificationRecord>, $crate::store::StoreError> {
                let mut tx = self.$write.begin_with($begin_write).await?;
                let changed = $crate::store::verification_sql::$vsql::change(&mut tx, change).await?;
                if changed.is_some() || $crate::store::verifications::writes_without_row(change) {
                    tx.commit().await?;
                }
                Ok(changed)
            }
        }
    };
}

pub(super) use store_impl;
