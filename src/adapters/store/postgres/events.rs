//! PostgreSQL's event log across replicas: appends that take their cursors in commit
//! order (one multi-row insert of events as columns), and how a replica learns of
//! events another one committed (LISTEN/NOTIFY, and the head read again whenever the
//! listener reconnects and every second).

use std::{collections::HashSet, time::Duration};

use chrono::{DateTime, Utc};

use sqlx::Postgres;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::adapters::store::common::conn::{Conn, Statements};
use crate::adapters::store::common::scheduled::scheduled_of;
use crate::adapters::store::common::suppressions;
use crate::adapters::store::rows::{
    callers_by_id, cursor_from_db, cursor_to_db, id_to_db, ms, phone_to_db, replies_to_json,
    report_id_to_db,
};
use crate::adapters::store::{Appended, LogAppend, StoreError, advance};
use crate::core::domain::{CallerName, Cursor, NewEvent, StatusEvent, SuppressionEvent};

/// How often the listener also reads the newest cursor, in case a notification was
/// lost in a way the connection did not notice (a half-open TCP connection).
pub(super) const HEAD_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The NOTIFY channel of a schema (an identifier of at most 63 bytes).
pub(super) fn channel_of(schema: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(schema.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("msgw_events_{hex}")
}

/// Keeps `appended` at the newest cursor any replica committed: LISTENs for their
/// notifications on a connection of `listening` (one that keeps its server session:
/// the store's own pool, or behind a pooler in transaction mode, one to PostgreSQL
/// itself) and, whenever the listening connection is (re)established, reads the
/// newest cursor on it, so nothing committed while it was away is missed. While it
/// cannot listen, it reads the newest cursor through `store` (its pool, and how
/// statements are prepared there) every second instead.
pub(super) async fn follow_appends(
    listening: PgPool,
    store: (PgPool, Statements),
    channel: String,
    (appended, scheduled): (watch::Sender<Cursor>, watch::Sender<Option<DateTime<Utc>>>),
) {
    let mut backoff = Duration::from_millis(100);
    let mut said = false;
    while !listening.is_closed() {
        match listen(&listening, &channel).await {
            Ok(mut listener) => {
                backoff = Duration::from_millis(100);
                said = false;
                if let Err(e) = follow(&mut listener, &appended, &scheduled).await {
                    if listening.is_closed() {
                        return;
                    }
                    tracing::warn!(error = %e, "store: lost the notification connection; reconnecting and catching up");
                }
            }
            Err(e) => {
                if listening.is_closed() {
                    return;
                }
                if !said {
                    tracing::warn!(error = %e, "store: cannot listen for other replicas' events; reading the newest cursor every second until it can");
                    said = true;
                }
            }
        }
        // Until it listens again, the head is read at least every second.
        let listen_again = Instant::now() + backoff;
        loop {
            if let Ok(cursor) = head_through(&store.0, store.1).await {
                advance(&appended, cursor);
            }
            let now = Instant::now();
            if now >= listen_again || listening.is_closed() {
                break;
            }
            tokio::time::sleep((listen_again - now).min(HEAD_CHECK_EVERY)).await;
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// The newest cursor, read through a connection of `pool` (a transaction behind a
/// pooler in transaction mode).
async fn head_through(pool: &PgPool, statements: Statements) -> Result<Cursor, StoreError> {
    match statements {
        Statements::Kept => head(&mut *pool.acquire().await?, statements).await,
        Statements::Unnamed => head(&mut *pool.begin().await?, statements).await,
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// Follows notifications until the connection is lost.
async fn follow(
    listener: &mut PgListener,
    appended: &watch::Sender<Cursor>,
    scheduled: &watch::Sender<Option<DateTime<Utc>>>,
) -> Result<(), StoreError> {
    // Listening from here on: whatever committed before is in the head.
    advance(appended, head(&mut *listener, Statements::Kept).await?);
    let mut next_check = Instant::now() + HEAD_CHECK_EVERY;
    loop {
        // Checked first: a steady flow of notifications never starves the check.
        if Instant::now() >= next_check {
            advance(appended, head(&mut *listener, Statements::Kept).await?);
            next_check = Instant::now() + HEAD_CHECK_EVERY;
        }
        let Ok(received) = tokio::time::timeout_at(next_check, listener.try_recv()).await else {
            continue;
        };
        let Some(notification) = received? else {
            return Err(StoreError::Append("notification connection closed".into()));
        };
        if let Some(send_at) = scheduled_of(notification.payload()) {
            scheduled.send_replace(Some(send_at));
            continue;
        }
        match notification.payload().parse::<u64>() {
            Ok(cursor) => advance(appended, Cursor::new(cursor)),
            Err(_) => tracing::warn!(
                payload = notification.payload(),
                "store: unreadable notification ignored"
            ),
        }
    }
}

/// The newest cursor handed out, read on `conn`.
pub(super) async fn head<'c>(
    conn: impl sqlx::Executor<'c, Database = Postgres>,
    statements: Statements,
) -> Result<Cursor, StoreError> {
    let (cursor,): (i64,) = sqlx::query_as("SELECT cursor FROM event_head")
        .persistent(statements.kept())
        .fetch_one(conn)
        .await?;
    cursor_from_db(cursor)
}

/// Events as columns, for one multi-row `INSERT ... SELECT FROM UNNEST(...)`.
#[derive(Default)]
struct EventColumns {
    cursor: Vec<i64>,
    dedup_key: Vec<String>,
    client_id: Vec<i64>,
    msg_id: Vec<Option<String>>,
    channel: Vec<Option<String>>,
    status: Vec<Option<String>>,
    success: Vec<bool>,
    error: Vec<Option<String>>,
    updated: Vec<Option<String>>,
    reply: Vec<Option<String>>,
    duration_s: Vec<Option<f64>>,
    request_id: Vec<Option<String>>,
    replies: Vec<String>,
    received_at_ms: Vec<i64>,
    source: Vec<&'static str>,
    is_final: Vec<bool>,
    caller: Vec<Option<String>>,
}

impl EventColumns {
    fn push(&mut self, cursor: Cursor, key: String, event: &NewEvent, caller: Option<&CallerName>) {
        let r = &event.report;
        self.cursor.push(cursor_to_db(cursor));
        self.dedup_key.push(key);
        self.client_id.push(report_id_to_db(r.client_id));
        self.msg_id.push(r.msg_id.clone());
        self.channel.push(r.channel_raw.clone());
        self.status.push(r.status.as_ref().map(|s| s.raw.clone()));
        self.success.push(r.success);
        self.error.push(r.error.clone());
        self.updated.push(r.updated.map(|u| u.to_rfc3339()));
        self.reply.push(r.reply.clone());
        self.duration_s.push(r.duration_secs);
        self.request_id.push(r.request_id.clone());
        self.replies.push(replies_to_json(&r.replies));
        self.received_at_ms.push(ms(event.received_at));
        self.source.push(event.source.as_str());
        self.is_final.push(event.is_final());
        self.caller.push(caller.map(|c| c.as_str().to_owned()));
    }
}

/// Appends `appends` in one transaction (see [`crate::adapters::store::Store::append_log`]),
/// holding the lock on `event_head` until the commit, whose NOTIFY on `channel` wakes
/// the other replicas; with the head after it. The reports' events take the first
/// cursors, the list changes the next ones.
pub(super) async fn append(
    pool: &PgPool,
    statements: Statements,
    channel: &str,
    appends: &[LogAppend],
) -> Result<(Vec<Appended>, Cursor), StoreError> {
    let kept = statements.kept();
    let events: Vec<&NewEvent> = appends
        .iter()
        .filter_map(|a| match a {
            LogAppend::Report { event, .. } => Some(event),
            LogAppend::Change(_) => None,
        })
        .collect();
    let mut tx = pool.begin().await?;
    // Held until commit: appends of every replica take their cursors one after
    // another, and each commits before the next one reads the head.
    let (head,): (i64,) = sqlx::query_as("SELECT cursor FROM event_head FOR UPDATE")
        .persistent(kept)
        .fetch_one(&mut *tx)
        .await?;
    let head = cursor_from_db(head)?;
    let keys: Vec<String> = events.iter().map(|e| e.dedup_key()).collect();
    // Read after taking the lock: every append that could hold one of these keys
    // has committed.
    let stored: Vec<(String,)> =
        sqlx::query_as("SELECT dedup_key FROM events WHERE dedup_key = ANY($1)")
            .persistent(kept)
            .bind(&keys)
            .fetch_all(&mut *tx)
            .await?;
    let mut seen: HashSet<String> = stored.into_iter().map(|(k,)| k).collect();
    let ids: Vec<i64> = events
        .iter()
        .filter_map(|e| e.report.client_id)
        .map(|id| id_to_db(id.get()))
        .collect();
    let callers = callers_by_id(
        sqlx::query_as(
            "SELECT client_id, caller FROM claims WHERE caller IS NOT NULL AND client_id = ANY($1)",
        )
        .persistent(kept)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?,
    )?;
    let mut columns = EventColumns::default();
    let mut next = head;
    let mut appended = Vec::with_capacity(events.len());
    for (event, key) in events.iter().zip(keys) {
        if seen.contains(&key) {
            appended.push(None);
            continue;
        }
        next = next.next();
        seen.insert(key.clone());
        let caller = event
            .report
            .client_id
            .and_then(|id| callers.get(&id))
            .cloned();
        columns.push(next, key, event, caller.as_ref());
        appended.push(Some(StatusEvent {
            cursor: next,
            caller,
            event: (*event).clone(),
        }));
    }
    let statuses_end = next;
    if next > head {
        let c = columns;
        sqlx::query(
            "INSERT INTO events (cursor, dedup_key, client_id, msg_id, channel, status, success,
                                 error, updated, reply, duration_s, request_id, replies,
                                 received_at_ms, source, is_final, caller)
             SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[],
                                  $5::TEXT[], $6::TEXT[], $7::BOOLEAN[], $8::TEXT[],
                                  $9::TEXT[], $10::TEXT[], $11::DOUBLE PRECISION[],
                                  $12::TEXT[], $13::TEXT[], $14::BIGINT[], $15::TEXT[],
                                  $16::BOOLEAN[], $17::TEXT[])",
        )
        .persistent(kept)
        .bind(&c.cursor)
        .bind(&c.dedup_key)
        .bind(&c.client_id)
        .bind(&c.msg_id)
        .bind(&c.channel)
        .bind(&c.status)
        .bind(&c.success)
        .bind(&c.error)
        .bind(&c.updated)
        .bind(&c.reply)
        .bind(&c.duration_s)
        .bind(&c.request_id)
        .bind(&c.replies)
        .bind(&c.received_at_ms)
        .bind(&c.source)
        .bind(&c.is_final)
        .bind(&c.caller)
        .execute(&mut *tx)
        .await?;
    }
    let applied = suppressions::apply(&mut Conn::Postgres(&mut tx, statements), appends).await?;
    let mut changes = ChangeColumns::default();
    let mut answers = Vec::with_capacity(appends.len());
    let mut statuses = appended.into_iter();
    for (append, applied) in appends.iter().zip(applied) {
        let status = match append {
            LogAppend::Report { .. } => statuses.next().flatten(),
            LogAppend::Change(_) => None,
        };
        let suppressions = applied
            .made
            .into_iter()
            .map(|m| {
                next = next.next();
                changes.push(next, &m);
                SuppressionEvent {
                    cursor: next,
                    change: m.change,
                }
            })
            .collect();
        answers.push(Appended {
            status,
            suppressions,
            entry: applied.entry,
            superseded: applied.superseded,
        });
    }
    if next > statuses_end {
        changes.insert(&mut tx, kept).await?;
    }
    if next > head {
        // The notification is delivered when (and only if) the transaction commits.
        sqlx::query(
            "WITH h AS (UPDATE event_head SET cursor = $1 RETURNING cursor)
                 SELECT pg_notify($2, cursor::TEXT) FROM h",
        )
        .persistent(kept)
        .bind(cursor_to_db(next))
        .bind(channel)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok((answers, next))
}

/// The events of list changes as columns, for one multi-row insert.
#[derive(Default)]
struct ChangeColumns {
    cursor: Vec<i64>,
    dedup_key: Vec<String>,
    client_id: Vec<i64>,
    received_at_ms: Vec<i64>,
    source: Vec<&'static str>,
    caller: Vec<Option<String>>,
    kind: Vec<&'static str>,
    phone: Vec<i64>,
    reason: Vec<String>,
}

impl ChangeColumns {
    fn push(&mut self, cursor: Cursor, made: &suppressions::Made) {
        let c = &made.change;
        self.cursor.push(cursor_to_db(cursor));
        self.dedup_key.push(made.key.clone());
        self.client_id.push(report_id_to_db(c.client_id));
        self.received_at_ms.push(ms(c.at));
        self.source.push(c.source.as_str());
        self.caller
            .push(c.caller.as_ref().map(|n| n.as_str().to_owned()));
        self.kind.push(c.direction());
        self.phone.push(phone_to_db(c.phone));
        self.reason.push(c.reason.as_str().to_owned());
    }

    async fn insert(self, tx: &mut sqlx::PgConnection, kept: bool) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO events (cursor, dedup_key, client_id, success, replies, received_at_ms,
                                 source, is_final, caller, kind, phone, reason)
             SELECT c, k, i, FALSE, '[]', r, s, FALSE, w, d, p, e
               FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::TEXT[],
                           $6::TEXT[], $7::TEXT[], $8::BIGINT[], $9::TEXT[])
                 AS v (c, k, i, r, s, w, d, p, e)",
        )
        .persistent(kept)
        .bind(&self.cursor)
        .bind(&self.dedup_key)
        .bind(&self.client_id)
        .bind(&self.received_at_ms)
        .bind(&self.source)
        .bind(&self.caller)
        .bind(&self.kind)
        .bind(&self.phone)
        .bind(&self.reason)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}
