//! The shared store: PostgreSQL, for several replicas behind one Service. Migrations
//! ship in the binary and run at start under PostgreSQL's advisory lock (replicas
//! starting together take turns). Appends hold the lock on `event_head` until they
//! commit, so cursors commit in order across replicas; each commit NOTIFYs the other
//! replicas, whose listener wakes their streams.

use std::{collections::HashSet, str::FromStr, sync::Arc, time::Duration};

use secrecy::{ExposeSecret, SecretString};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::sync::watch;

use super::postgres_events::{EventColumns, channel_of, follow_appends, head};
use super::rows::{cursor_from_db, cursor_to_db, id_to_db};
use super::{
    ClaimChange, ClaimReply, Store, StoreError, advance,
    postgres_claims::{self, SendPath},
};
use crate::domain::{Cursor, NewEvent, StatusEvent};

/// PostgreSQL implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct PgStore {
    /// Reads and writes but the send path's (and copying the store reads here).
    pub(super) pool: PgPool,
    /// The send path's own connections.
    pub(super) send_path: Arc<SendPath>,
    first_poll_after: Duration,
    /// The NOTIFY channel of this schema's event log.
    channel: String,
    appended: watch::Sender<Cursor>,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("src/store/migrations/postgres");

/// Connections per replica at most: appends take one at a time (group commit), claims
/// one per envelope in flight, replays one per catching-up subscriber.
const MAX_CONNECTIONS: u32 = 16;
/// How long a store call waits for a connection before it fails (the database is
/// down or every connection is busy): RPCs then fail UNAVAILABLE instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
impl PgStore {
    /// Connects to the database `url` names (TLS and other options from the URL;
    /// `password`, when given, replaces one in the URL), migrates it and starts
    /// listening for other replicas' appends. Sent messages are first polled
    /// `first_poll_after` after sending.
    pub async fn open(
        url: &str,
        password: Option<&SecretString>,
        first_poll_after: Duration,
    ) -> Result<Self, StoreError> {
        let mut options = PgConnectOptions::from_str(url)?;
        // `msgw` in pg_stat_activity, unless the URL names the connections otherwise.
        if options.get_application_name().is_none() {
            options = options.application_name("msgw");
        }
        if let Some(password) = password {
            options = options.password(password.expose_secret());
        }
        super::postgres_reach::reach(&options).await?;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .min_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // No ping before each use: a round trip per store call. A connection the
            // database dropped (restart, failover, pg_terminate_backend) fails the one
            // call that finds it and leaves the pool; the send path's writes, which
            // take their own connections, retry once on a fresh one.
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        MIGRATOR.run(&pool).await?;
        // NOTIFY reaches every session of the database: one channel per schema, so two
        // msgw deployments in two schemas of one database do not wake each other.
        let (schema,): (String,) = sqlx::query_as("SELECT current_schema()")
            .fetch_one(&pool)
            .await?;
        let store = Self {
            pool,
            // A plan per execution, for the table as it is then: the send path's
            // connections stay open for days, and a generic plan cached while `claims`
            // was nearly empty (a new deployment, a new schema) kept scanning the whole
            // table for every settlement group as it grew, until the next ANALYZE.
            send_path: Arc::new(SendPath::new(
                options.options([("plan_cache_mode", "force_custom_plan")]),
                ACQUIRE_TIMEOUT,
            )),
            first_poll_after,
            channel: channel_of(&schema),
            appended: watch::Sender::new(Cursor::START),
        };
        advance(&store.appended, store.latest_cursor().await?);
        tokio::spawn(follow_appends(
            store.pool.clone(),
            store.channel.clone(),
            store.appended.clone(),
        ));
        Ok(store)
    }
}

/// Takes messages due for a poll (`Store::take_due_for_poll`). SKIP LOCKED: replicas
/// taking due messages at the same time take different ones.
const DUE_FOR_POLL_SQL: &str = "UPDATE messages SET next_poll_ms = $1
              WHERE client_id IN (SELECT client_id FROM messages
                                   WHERE NOT is_final AND next_poll_ms IS NOT NULL AND next_poll_ms <= $2
                                   ORDER BY next_poll_ms LIMIT $3
                                   FOR UPDATE SKIP LOCKED)
             RETURNING client_id, sent_at_ms, lifetime_s, polls";

/// Starts of one number (`$1`) queue here, so two replicas cannot both see room under
/// its limit and both start one. The two-key form keeps these locks apart from
/// single-key ones (sqlx's migration lock).
const START_LOCK_SQL: &str =
    "SELECT pg_advisory_xact_lock(hashtext('msgw.verifications'), hashtext($1::text))";

super::shared::store_impl! {
    PgStore, reads: pool, writes: pool, verification: postgres, due_for_poll: DUE_FOR_POLL_SQL,
    start_lock: Some(START_LOCK_SQL), begin_write: "BEGIN";

    fn send_path_writers(&self) -> usize {
        postgres_claims::SEND_PATH_WRITERS
    }

    async fn apply_claims(&self, changes: &[ClaimChange]) -> Result<Vec<ClaimReply>, StoreError> {
        self.send_path
            .apply(&self.pool, changes, self.first_poll_after)
            .await
    }

    async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<Option<StatusEvent>>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Held until commit: appends of every replica take their cursors one after
        // another, and each commits before the next one reads the head.
        let (head,): (i64,) = sqlx::query_as("SELECT cursor FROM event_head FOR UPDATE")
            .fetch_one(&mut *tx)
            .await?;
        let head = cursor_from_db(head)?;
        let keys: Vec<String> = events.iter().map(NewEvent::dedup_key).collect();
        // Read after taking the lock: every append that could hold one of these keys
        // has committed.
        let stored: Vec<(String,)> =
            sqlx::query_as("SELECT dedup_key FROM events WHERE dedup_key = ANY($1)")
                .bind(&keys)
                .fetch_all(&mut *tx)
                .await?;
        let mut seen: HashSet<String> = stored.into_iter().map(|(k,)| k).collect();
        let ids: Vec<i64> = events
            .iter()
            .filter_map(|e| e.report.client_id)
            .map(|id| id_to_db(id.get()))
            .collect();
        let callers = super::rows::callers_by_id(
            sqlx::query_as(
                "SELECT client_id, caller FROM claims WHERE caller IS NOT NULL AND client_id = ANY($1)",
            )
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
                event: event.clone(),
            }));
        }
        if next > head {
            let c = columns;
            sqlx::query(
                "INSERT INTO events (cursor, dedup_key, client_id, msg_id, channel, status, success,
                                     error, updated, reply, duration_s, request_id, replies,
                                     received_at_ms, source, is_final, caller)
                 SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[],
                                      $6::TEXT[], $7::BOOLEAN[], $8::TEXT[], $9::TEXT[], $10::TEXT[],
                                      $11::DOUBLE PRECISION[], $12::TEXT[], $13::TEXT[], $14::BIGINT[],
                                      $15::TEXT[], $16::BOOLEAN[], $17::TEXT[])",
            )
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
            // The notification is delivered when (and only if) the transaction commits.
            sqlx::query(
                "WITH h AS (UPDATE event_head SET cursor = $1 RETURNING cursor)
                 SELECT pg_notify($2, cursor::TEXT) FROM h",
            )
            .bind(cursor_to_db(next))
            .bind(&self.channel)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        advance(&self.appended, next);
        Ok(appended)
    }

    async fn save_sandbox(
        &self,
        account: &str,
        save: &super::SandboxSave,
    ) -> Result<(), StoreError> {
        super::sandbox_sql::save_postgres(&self.pool, account, save).await
    }

    async fn latest_cursor(&self) -> Result<Cursor, StoreError> {
        head(&self.pool).await
    }

    async fn close(&self) {
        self.send_path.close().await;
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_identifiers_per_schema() {
        let a = channel_of("public");
        assert_eq!(a, channel_of("public"));
        assert_ne!(a, channel_of("msgw_test_1"));
        assert!(a.len() <= 63);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }
}
