//! The shared store: PostgreSQL, for several replicas behind one Service. Migrations
//! ship in the binary and run at start under PostgreSQL's advisory lock (replicas
//! starting together take turns). Appends hold the lock on `event_head` until they
//! commit, so cursors commit in order across replicas; each commit NOTIFYs the other
//! replicas, whose listener wakes their streams (`events.rs`). What only PostgreSQL
//! does is here: connecting (`reach.rs`), the send path's own connections
//! (`claims.rs`), appends; the SQL it shares with SQLite is in `common/`.

mod claims;
mod events;
mod reach;

use std::{str::FromStr, sync::Arc, time::Duration};

use secrecy::{ExposeSecret, SecretString};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};
use tokio::sync::watch;

use self::claims::SendPath;
use self::events::{channel_of, follow_appends, head};
use super::common::{conn::Conn, sandbox};
use super::rows::{id_to_db, phone_from_db, phone_to_db};
use super::{Appended, ClaimChange, ClaimReply, LogAppend, SandboxSave, StoreError, advance};
use crate::core::domain::{Cursor, Phone};

/// PostgreSQL's database (or one schema of it), connected and migrated.
#[derive(Debug, Clone)]
pub(super) struct PgDb {
    /// Reads and writes but the send path's (and copying the store reads here).
    pub(super) pool: PgPool,
    /// The send path's own connections.
    send_path: Arc<SendPath>,
    first_poll_after: Duration,
    /// The NOTIFY channel of this schema's event log.
    channel: String,
    appended: watch::Sender<Cursor>,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("src/adapters/store/migrations/postgres");

/// Connections per replica at most: appends take one at a time (group commit), claims
/// one per envelope in flight, replays one per catching-up subscriber.
const MAX_CONNECTIONS: u32 = 16;
/// How long a store call waits for a connection before it fails (the database is
/// down or every connection is busy): RPCs then fail UNAVAILABLE instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
impl PgDb {
    /// Connects to the database `url` names (TLS and other options from the URL;
    /// `password`, when given, replaces one in the URL), migrates it and starts
    /// listening for other replicas' appends. Sent messages are first polled
    /// `first_poll_after` after sending.
    pub(super) async fn open(
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
        reach::reach(&options).await?;
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

    /// A connection of the pool.
    pub(super) async fn read(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        Ok(self.pool.acquire().await?)
    }

    /// A transaction of the pool.
    pub(super) async fn begin(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// Groups of claims, and of settlements, written at once.
    pub(super) fn send_path_writers(&self) -> usize {
        claims::SEND_PATH_WRITERS
    }

    /// See [`super::Store::apply_claims`].
    pub(super) async fn apply_claims(
        &self,
        changes: &[ClaimChange],
    ) -> Result<Vec<ClaimReply>, StoreError> {
        self.send_path
            .apply(&self.pool, changes, self.first_poll_after)
            .await
    }

    /// See [`super::Store::append_log`].
    pub(super) async fn append_log(
        &self,
        appends: &[LogAppend],
    ) -> Result<Vec<Appended>, StoreError> {
        let (appended, head) = events::append(&self.pool, &self.channel, appends).await?;
        advance(&self.appended, head);
        Ok(appended)
    }

    /// See [`super::Store::suppressed`]: one statement for every number.
    pub(super) async fn suppressed(&self, phones: &[Phone]) -> Result<Vec<Phone>, StoreError> {
        let phones: Vec<i64> = phones.iter().map(|p| phone_to_db(*p)).collect();
        let rows: Vec<(i64,)> =
            sqlx::query_as("SELECT phone FROM suppressions WHERE phone = ANY($1)")
                .bind(&phones)
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter().map(|(p,)| phone_from_db(p)).collect()
    }

    /// The newest cursor any replica committed, as far as this one heard.
    pub(super) fn appended(&self) -> watch::Receiver<Cursor> {
        self.appended.subscribe()
    }

    /// See [`super::Store::save_sandbox`]: the message rows in one statement (one round
    /// trip whatever the group's size). The ids of one save are distinct, as one
    /// statement must not update a row twice.
    pub(super) async fn save_sandbox(
        &self,
        account: &str,
        save: &SandboxSave,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        if let Some(state) = &save.account {
            sandbox::save_state(&mut Conn::Postgres(&mut tx), account, state).await?;
        }
        if !save.messages.is_empty() {
            let ids: Vec<i64> = save.messages.iter().map(|(id, _)| id_to_db(*id)).collect();
            let records: Vec<&str> = save.messages.iter().map(|(_, r)| r.as_str()).collect();
            sqlx::query(
                "INSERT INTO sandbox_messages (account, id, record)
                 SELECT $1, * FROM UNNEST($2::BIGINT[], $3::TEXT[])
                 ON CONFLICT (account, id) DO UPDATE SET record = excluded.record",
            )
            .bind(account)
            .bind(&ids)
            .bind(&records)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The newest cursor ever handed out.
    pub(super) async fn latest_cursor(&self) -> Result<Cursor, StoreError> {
        head(&self.pool).await
    }

    /// Closes the connections.
    pub(super) async fn close(&self) {
        self.send_path.close().await;
        self.pool.close().await;
    }
}

/// Takes messages due for a poll (`Store::take_due_for_poll`). SKIP LOCKED: replicas
/// taking due messages at the same time take different ones.
pub(super) const DUE_FOR_POLL_SQL: &str = "UPDATE messages SET next_poll_ms = $1
              WHERE client_id IN (SELECT client_id FROM messages
                                   WHERE NOT is_final AND next_poll_ms IS NOT NULL AND next_poll_ms <= $2
                                   ORDER BY next_poll_ms LIMIT $3
                                   FOR UPDATE SKIP LOCKED)
             RETURNING client_id, sent_at_ms, lifetime_s, polls";

/// Takes due scheduled messages (`Store::take_due_scheduled`). SKIP LOCKED: replicas
/// taking due messages at the same time take different ones.
pub(super) const DUE_SCHEDULED_SQL: &str = "UPDATE scheduled_ops SET due_ms = $1, tries = tries + 1
              WHERE client_id IN (SELECT client_id FROM scheduled_ops WHERE due_ms <= $2
                                   ORDER BY due_ms LIMIT $3
                                   FOR UPDATE SKIP LOCKED)
             RETURNING client_id, send_at_ms, payload, caller, tries";

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
