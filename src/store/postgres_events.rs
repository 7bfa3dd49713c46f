//! PostgreSQL's event log across replicas: how a replica learns of events another one
//! committed (LISTEN/NOTIFY, and the head read again whenever the listener reconnects
//! and every second), and events as columns for one multi-row insert.

use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::watch;

use super::rows::{cursor_from_db, cursor_to_db, ms, replies_to_json};
use super::{StoreError, advance};
use crate::domain::{CallerName, Cursor, NewEvent};

/// How often the listener also reads the newest cursor, in case a notification was
/// lost in a way the connection did not notice (a half-open TCP connection).
const HEAD_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The NOTIFY channel of a schema (an identifier of at most 63 bytes).
pub(super) fn channel_of(schema: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(schema.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("msgw_events_{hex}")
}

/// Keeps `appended` at the newest cursor any replica committed: LISTENs for their
/// notifications and, whenever the listening connection is (re)established, reads the
/// newest cursor from the database, so nothing committed while it was away is missed.
pub(super) async fn follow_appends(pool: PgPool, channel: String, appended: watch::Sender<Cursor>) {
    let mut backoff = Duration::from_millis(100);
    while !pool.is_closed() {
        match listen(&pool, &channel).await {
            Ok(mut listener) => {
                backoff = Duration::from_millis(100);
                if let Err(e) = follow(&pool, &mut listener, &appended).await {
                    if pool.is_closed() {
                        return;
                    }
                    tracing::warn!(error = %e, "store: lost the notification connection; reconnecting and catching up");
                }
            }
            Err(e) => {
                if pool.is_closed() {
                    return;
                }
                tracing::warn!(error = %e, retry_in = ?backoff, "store: cannot listen for other replicas' events");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// Follows notifications until the connection is lost.
async fn follow(
    pool: &PgPool,
    listener: &mut PgListener,
    appended: &watch::Sender<Cursor>,
) -> Result<(), StoreError> {
    // Listening from here on: whatever committed before is in the head.
    advance(appended, head(pool).await?);
    let mut check = tokio::time::interval(HEAD_CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            received = listener.try_recv() => match received? {
                Some(notification) => match notification.payload().parse::<u64>() {
                    Ok(cursor) => advance(appended, Cursor::new(cursor)),
                    Err(_) => tracing::warn!(payload = notification.payload(), "store: unreadable notification ignored"),
                },
                None => return Err(StoreError::Append("notification connection closed".into())),
            },
            _ = check.tick() => advance(appended, head(pool).await?),
        }
    }
}

pub(super) async fn head(pool: &PgPool) -> Result<Cursor, StoreError> {
    let (cursor,): (i64,) = sqlx::query_as("SELECT cursor FROM event_head")
        .fetch_one(pool)
        .await?;
    cursor_from_db(cursor)
}

/// Events as columns, for one multi-row `INSERT ... SELECT FROM UNNEST(...)`.
#[derive(Default)]
pub(super) struct EventColumns {
    pub(super) cursor: Vec<i64>,
    pub(super) dedup_key: Vec<String>,
    pub(super) client_id: Vec<i64>,
    pub(super) msg_id: Vec<Option<String>>,
    pub(super) channel: Vec<Option<String>>,
    pub(super) status: Vec<Option<String>>,
    pub(super) success: Vec<bool>,
    pub(super) error: Vec<Option<String>>,
    pub(super) updated: Vec<Option<String>>,
    pub(super) reply: Vec<Option<String>>,
    pub(super) duration_s: Vec<Option<f64>>,
    pub(super) request_id: Vec<Option<String>>,
    pub(super) replies: Vec<String>,
    pub(super) received_at_ms: Vec<i64>,
    pub(super) source: Vec<&'static str>,
    pub(super) is_final: Vec<bool>,
    pub(super) caller: Vec<Option<String>>,
}

impl EventColumns {
    pub(super) fn push(
        &mut self,
        cursor: Cursor,
        key: String,
        event: &NewEvent,
        caller: Option<&CallerName>,
    ) {
        let r = &event.report;
        self.cursor.push(cursor_to_db(cursor));
        self.dedup_key.push(key);
        self.client_id
            .push(super::rows::report_id_to_db(r.client_id));
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
