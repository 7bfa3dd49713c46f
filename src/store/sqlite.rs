//! The embedded store: one SQLite file in WAL mode, created and migrated on first start.

use std::{str::FromStr, time::Duration};

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{
    Row,
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
        SqliteSynchronous,
    },
};

use super::{
    ClaimChange, ClaimRecord, ClaimReply, PendingMessage, Retention, SentMessage, Store,
    StoreError, sqlite_claims,
};
use crate::domain::{
    ClientId, DeliveryReport, EventSource, Media, NewEvent, Reply, ReportedStatus, StatusEvent,
};

/// SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Readers: WAL lets them run beside the writer.
    pool: SqlitePool,
    /// The one writing connection. SQLite takes one writer at a time; writers that
    /// queue here wait their turn without SQLite's busy handler, which sleeps in
    /// steps of milliseconds while another write transaction holds the lock.
    writer: SqlitePool,
    first_poll_after: Duration,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("src/store/migrations/sqlite");

impl SqliteStore {
    /// Opens (creating if missing) the database `url` names and migrates it.
    /// Sent messages are first polled `first_poll_after` after sending.
    pub async fn open(url: &str, first_poll_after: Duration) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode: a commit survives a crash of msgw; only a power loss
            // can take back the last transactions.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            // Checkpoints run in the background (below), not inside a webhook's commit:
            // a checkpoint syncs the database file and would stall every waiting append.
            .pragma("wal_autocheckpoint", "0");
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let pool_of = |connections| {
            SqlitePoolOptions::new()
                .max_connections(connections)
                .min_connections(1)
                // A local file cannot drop a connection the way a network can: skip the
                // ping before every use, a round trip to the connection's thread each time.
                .test_before_acquire(false)
                .connect_with(options.clone())
        };
        let writer = pool_of(1).await?;
        MIGRATOR.run(&writer).await?;
        // An in-memory database exists once per connection: it has only the writer's.
        let pool = if in_memory {
            writer.clone()
        } else {
            pool_of(4).await?
        };
        if !in_memory {
            tokio::spawn(checkpoint_wal(pool.clone()));
        }
        Ok(Self {
            pool,
            writer,
            first_poll_after,
        })
    }
}

/// How often the write-ahead log is copied back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Copies the WAL into the database file while appends go on (a passive checkpoint
/// never blocks the writer), until the pool is closed.
async fn checkpoint_wal(pool: SqlitePool) {
    let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await
        {
            if pool.is_closed() {
                return;
            }
            tracing::warn!(error = %e, "store: WAL checkpoint failed");
        }
    }
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_ms(v: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(v)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {v}")))
}

pub(super) fn seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Client ids are u64 on the wire and INTEGER (i64) in SQLite: stored bit for bit.
fn id_to_db(id: u64) -> i64 {
    id as i64
}

fn id_from_db(v: i64) -> u64 {
    v as u64
}

#[derive(Serialize, Deserialize)]
struct ReplyRow {
    datetime: Option<DateTime<Utc>>,
    message: Option<String>,
    media: Option<MediaRow>,
}

#[derive(Serialize, Deserialize)]
struct MediaRow {
    url: String,
    filename: String,
    filesize: u64,
}

fn replies_to_json(replies: &[Reply]) -> String {
    let rows: Vec<ReplyRow> = replies
        .iter()
        .map(|r| ReplyRow {
            datetime: r.datetime,
            message: r.message.clone(),
            media: r.media.as_ref().map(|m| MediaRow {
                url: m.url.clone(),
                filename: m.filename.clone(),
                filesize: m.filesize,
            }),
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".into())
}

fn replies_from_json(text: &str) -> Result<Vec<Reply>, StoreError> {
    let rows: Vec<ReplyRow> =
        serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("replies: {e}")))?;
    Ok(rows
        .into_iter()
        .map(|r| Reply {
            datetime: r.datetime,
            message: r.message,
            media: r.media.map(|m| Media {
                url: m.url,
                filename: m.filename,
                filesize: m.filesize,
            }),
        })
        .collect())
}

fn event_from_row(row: &SqliteRow) -> Result<StatusEvent, StoreError> {
    let source: String = row.try_get("source")?;
    let updated: Option<String> = row.try_get("updated")?;
    let status: Option<String> = row.try_get("status")?;
    let replies: String = row.try_get("replies")?;
    let cursor: i64 = row.try_get("cursor")?;
    Ok(StatusEvent {
        cursor: u64::try_from(cursor)
            .map_err(|_| StoreError::Corrupt(format!("cursor {cursor}")))?,
        event: NewEvent {
            report: DeliveryReport {
                client_id: id_from_db(row.try_get("client_id")?),
                msg_id: row.try_get("msg_id")?,
                channel_raw: row.try_get("channel")?,
                status: status.map(ReportedStatus::new),
                success: row.try_get("success")?,
                error: row.try_get("error")?,
                // An optional field that does not read back is left out, logged: one
                // bad row must never stop a replay for every subscriber.
                updated: updated.and_then(|u| {
                    let parsed = DateTime::parse_from_rfc3339(&u)
                        .ok()
                        .map(|t| t.with_timezone(&Utc))
                        .filter(crate::domain::representable);
                    if parsed.is_none() {
                        tracing::warn!(cursor, updated = %u, "stored event: unreadable `updated` left out");
                    }
                    parsed
                }),
                reply: row.try_get("reply")?,
                duration_secs: row.try_get("duration_s")?,
                request_id: row.try_get("request_id")?,
                replies: replies_from_json(&replies).unwrap_or_else(|e| {
                    tracing::warn!(cursor, error = %e, "stored event: unreadable `replies` left out");
                    Vec::new()
                }),
            },
            received_at: from_ms(row.try_get("received_at_ms")?)?,
            source: EventSource::from_name(&source)
                .ok_or_else(|| StoreError::Corrupt(format!("source {source:?}")))?,
        },
    })
}

/// Remembers a sent message for reconcile (a resend with the same client id replaces it).
/// Its first poll is due `first_poll_after` after sending.
pub(super) async fn record_sent(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    messages: &[&SentMessage],
    first_poll_after: Duration,
) -> Result<(), StoreError> {
    let after = chrono::Duration::from_std(first_poll_after).unwrap_or(chrono::Duration::MAX);
    for chunk in row_chunks(messages) {
        let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO messages (client_id, msg_id, channel, sent_at_ms, lifetime_s, last_status, is_final, next_poll_ms, polls) ",
        );
        query.push_values(chunk, |mut row, m| {
            row.push_bind(sqlite_claims::id_to_db(m.client_id))
                .push_bind(m.msg_id.as_str())
                .push_bind(m.channel.as_str())
                .push_bind(ms(m.sent_at))
                .push_bind(seconds(m.lifetime))
                .push("NULL, 0")
                .push_bind(ms(m.sent_at + after))
                .push("0");
        });
        query.push(
            " ON CONFLICT (client_id) DO UPDATE SET
               msg_id = excluded.msg_id, channel = excluded.channel, sent_at_ms = excluded.sent_at_ms,
               lifetime_s = excluded.lifetime_s, last_status = NULL, is_final = 0,
               next_poll_ms = excluded.next_poll_ms, polls = 0",
        );
        query.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// Rows per multi-row statement at most (at most 14 bound values each, far below
/// SQLite's variable limit).
const INSERT_CHUNK: usize = 256;

/// Splits `items` for multi-row statements into chunks whose lengths are powers of two
/// (at most [`INSERT_CHUNK`]): every group size then reuses a handful of prepared
/// statements from the connection's cache instead of preparing a new text each time.
pub(super) fn row_chunks<T>(mut items: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if items.is_empty() {
            return None;
        }
        let n = items.len().min(INSERT_CHUNK);
        let size = 1 << n.ilog2();
        let (chunk, rest) = items.split_at(size);
        items = rest;
        Some(chunk)
    })
}

/// Inserts events with one multi-row statement; duplicates (already stored, or twice in
/// `events`) come back as `None`. Rows are inserted in order, so cursors ascend with them.
async fn insert_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    events: &[NewEvent],
) -> Result<Vec<Option<StatusEvent>>, StoreError> {
    let keys: Vec<String> = events.iter().map(NewEvent::dedup_key).collect();
    let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "INSERT INTO events (dedup_key, client_id, msg_id, channel, status, success, error, updated, reply,
                             duration_s, request_id, replies, received_at_ms, source, is_final) ",
    );
    query.push_values(events.iter().zip(&keys), |mut row, (event, key)| {
        let r = &event.report;
        row.push_bind(key.as_str())
            .push_bind(id_to_db(r.client_id))
            .push_bind(r.msg_id.as_deref())
            .push_bind(r.channel_raw.as_deref())
            .push_bind(r.status.as_ref().map(|s| s.raw.as_str()))
            .push_bind(r.success)
            .push_bind(r.error.as_deref())
            .push_bind(r.updated.map(|u| u.to_rfc3339()))
            .push_bind(r.reply.as_deref())
            .push_bind(r.duration_secs)
            .push_bind(r.request_id.as_deref())
            .push_bind(replies_to_json(&r.replies))
            .push_bind(ms(event.received_at))
            .push_bind(event.source.as_str())
            .push_bind(event.is_final());
    });
    query.push(" ON CONFLICT (dedup_key) DO NOTHING RETURNING dedup_key, cursor");
    let rows: Vec<(String, i64)> = query.build_query_as().fetch_all(&mut **tx).await?;
    let mut cursors: std::collections::HashMap<String, i64> = rows.into_iter().collect();
    events
        .iter()
        .zip(keys)
        .map(|(event, key)| {
            // `remove`: a second copy of the same event in this group is a duplicate.
            cursors
                .remove(&key)
                .map(|cursor| {
                    Ok(StatusEvent {
                        cursor: u64::try_from(cursor)
                            .map_err(|_| StoreError::Corrupt(format!("cursor {cursor}")))?,
                        event: event.clone(),
                    })
                })
                .transpose()
        })
        .collect()
}

#[tonic::async_trait]
impl Store for SqliteStore {
    async fn apply_claims(&self, changes: &[ClaimChange]) -> Result<Vec<ClaimReply>, StoreError> {
        let mut conn = self.writer.acquire().await?;
        sqlite_claims::apply_all(&mut conn, changes, self.first_poll_after).await
    }

    async fn claim_of(&self, id: ClientId) -> Result<Option<ClaimRecord>, StoreError> {
        sqlx::query("SELECT * FROM claims WHERE client_id = ?")
            .bind(sqlite_claims::id_to_db(id))
            .fetch_optional(&self.pool)
            .await?
            .map(|row| sqlite_claims::record_from_row(&row))
            .transpose()
    }

    async fn client_id_of(&self, msg_id: &str) -> Result<Option<u64>, StoreError> {
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT client_id FROM messages WHERE msg_id = ? LIMIT 1")
                .bind(msg_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(id,)| id_from_db(id)))
    }

    async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<Option<StatusEvent>>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let mut stored = Vec::with_capacity(events.len());
        for chunk in row_chunks(events) {
            stored.extend(insert_events(&mut tx, chunk).await?);
        }
        tx.commit().await?;
        Ok(stored)
    }

    async fn events_after(&self, cursor: u64, limit: u32) -> Result<Vec<StatusEvent>, StoreError> {
        let rows = sqlx::query("SELECT * FROM events WHERE cursor > ? ORDER BY cursor LIMIT ?")
            .bind(i64::try_from(cursor).unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn oldest_cursor(&self) -> Result<Option<u64>, StoreError> {
        let (min,): (Option<i64>,) = sqlx::query_as("SELECT MIN(cursor) FROM events")
            .fetch_one(&self.pool)
            .await?;
        Ok(min.and_then(|c| u64::try_from(c).ok()))
    }

    async fn latest_cursor(&self) -> Result<u64, StoreError> {
        // sqlite_sequence remembers the highest cursor even after its event was pruned.
        let seq: Option<(i64,)> =
            sqlx::query_as("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
                .fetch_optional(&self.pool)
                .await?;
        Ok(seq.and_then(|(s,)| u64::try_from(s).ok()).unwrap_or(0))
    }

    async fn prune(&self, retention: Retention, now: DateTime<Utc>) -> Result<u64, StoreError> {
        let horizon = ms(now) - i64::try_from(retention.max_age.as_millis()).unwrap_or(i64::MAX);
        let by_age = sqlx::query("DELETE FROM events WHERE received_at_ms < ?")
            .bind(horizon)
            .execute(&self.writer)
            .await?
            .rows_affected();
        let keep = i64::try_from(retention.max_events).unwrap_or(i64::MAX);
        let by_count = sqlx::query(
            "DELETE FROM events WHERE cursor <= (SELECT COALESCE(MAX(cursor), 0) FROM events) - ?",
        )
        .bind(keep)
        .execute(&self.writer)
        .await?
        .rows_affected();
        // A message is tracked until it is final or its lifetime is over, then kept as
        // long as its events for msg_id lookups.
        sqlx::query(
            "DELETE FROM messages WHERE sent_at_ms + lifetime_s * 1000 < ? AND sent_at_ms < ?",
        )
        .bind(ms(now))
        .bind(horizon)
        .execute(&self.writer)
        .await?;
        // A claim outlives its retention while reconcile still tracks its message.
        let claims_horizon =
            ms(now) - i64::try_from(retention.claims_max_age.as_millis()).unwrap_or(i64::MAX);
        sqlx::query(
            "DELETE FROM claims WHERE COALESCE(settled_at_ms, claimed_at_ms) < ?
               AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.client_id = claims.client_id
                                AND m.is_final = 0 AND m.sent_at_ms + m.lifetime_s * 1000 >= ?)",
        )
        .bind(claims_horizon)
        .bind(ms(now))
        .execute(&self.writer)
        .await?;
        Ok(by_age + by_count)
    }

    async fn due_for_poll(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<PendingMessage>, StoreError> {
        let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT client_id, sent_at_ms, lifetime_s, polls FROM messages
             WHERE is_final = 0 AND next_poll_ms IS NOT NULL AND next_poll_ms <= ?
             ORDER BY next_poll_ms LIMIT ?",
        )
        .bind(ms(now))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(id, sent, lifetime, polls)| {
                Ok(PendingMessage {
                    client_id: ClientId::new(id_from_db(id)).map_err(|_| {
                        StoreError::Corrupt("tracked message with client id 0".into())
                    })?,
                    sent_at: from_ms(sent)?,
                    lifetime: Duration::from_secs(u64::try_from(lifetime).unwrap_or(0)),
                    polls: u32::try_from(polls).unwrap_or(u32::MAX),
                })
            })
            .collect()
    }

    async fn schedule_poll(
        &self,
        client_id: ClientId,
        next: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE messages SET next_poll_ms = ?, polls = polls + 1 WHERE client_id = ?")
            .bind(next.map(ms))
            .bind(sqlite_claims::id_to_db(client_id))
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn close(&self) {
        // Leave a compact file behind: everything in the database, an empty WAL.
        // Readers first, so the checkpoint can empty the WAL (an in-memory database's
        // readers are its writer: nothing to checkpoint then).
        self.pool.close().await;
        if self.writer.is_closed() {
            return;
        }
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.writer)
            .await
        {
            tracing::warn!(error = %e, "store: final WAL checkpoint failed");
        }
        self.writer.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_chunks_are_powers_of_two_covering_every_item_in_order() {
        let items: Vec<u32> = (0..600).collect();
        for n in [0, 1, 2, 3, 50, 255, 256, 257, 600] {
            let chunks: Vec<&[u32]> = row_chunks(&items[..n]).collect();
            assert!(
                chunks
                    .iter()
                    .all(|c| c.len().is_power_of_two() && c.len() <= INSERT_CHUNK)
            );
            assert_eq!(chunks.concat(), items[..n].to_vec());
        }
        let sizes: Vec<usize> = row_chunks(&items[..50]).map(<[u32]>::len).collect();
        assert_eq!(sizes, [32, 16, 2]);
    }
}
