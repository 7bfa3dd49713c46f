//! The shared store: PostgreSQL, for several replicas behind one Service. Migrations
//! ship in the binary and run at start under PostgreSQL's advisory lock (replicas
//! starting together take turns). Appends hold the lock on `event_head` until they
//! commit, so cursors commit in order across replicas; each commit NOTIFYs the other
//! replicas, whose listener wakes their streams (`events.rs`). What only PostgreSQL
//! does is here: connecting (`reach.rs`, `sessions.rs`), a pooler in front of it
//! (`pooler.rs`), the send path's own connections (`claims.rs`), appends; the SQL it
//! shares with SQLite is in `common/`.
//!
//! Behind a pooler in transaction mode ([`Pooling::Transaction`]) every statement is
//! unnamed and runs in a transaction, and the sessions that must last (the
//! migrations' lock, LISTEN) are opened to PostgreSQL itself, the direct URL.

mod claims;
mod events;
mod insert_claims;
mod pooler;
mod rate;
mod reach;
mod sessions;
mod settlements;
mod take_overs;

/// The tests' PostgreSQL schemas (one per test, dropped after).
#[cfg(test)]
#[path = "../../../../tests/common/postgres.rs"]
mod test_postgres;

/// The store on a test's schema, which opening it migrates.
#[cfg(test)]
async fn migrated(schema: &test_postgres::TestSchema) -> PgDb {
    PgDb::open(&StoreTarget::new(&schema.url), Duration::from_secs(60))
        .await
        .expect("open the store")
}

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use tokio::sync::watch;

use self::claims::SendPath;
use self::events::{channel_of, follow_appends, head};
use self::sessions::{SessionSettings, connect_options};
use super::common::conn::{Conn, PgPooled, Statements, Tx};
use super::common::sandbox;
use super::rows::{id_to_db, phone_from_db, phone_to_db};
use super::{
    Appended, ClaimChange, ClaimReply, LogAppend, Pooling, SandboxSave, StoreError, StoreTarget,
    advance,
};
use crate::core::domain::{Cursor, Phone};

/// PostgreSQL's database (or one schema of it), connected and migrated.
#[derive(Debug, Clone)]
pub(super) struct PgDb {
    /// Reads and writes but the send path's (and copying the store reads here).
    pub(super) pool: PgPool,
    /// How statements are prepared on the pool's connections.
    statements: Statements,
    /// The send path's own connections.
    send_path: Arc<SendPath>,
    /// The connection that LISTENs: the pool itself, or behind a pooler in transaction
    /// mode, a pool of one connection to PostgreSQL itself.
    listening: PgPool,
    first_poll_after: Duration,
    /// The NOTIFY channel of this schema's event log.
    channel: String,
    appended: watch::Sender<Cursor>,
    /// Send times of messages scheduled on this schema, as notified.
    scheduled: watch::Sender<Option<DateTime<Utc>>>,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("src/adapters/store/migrations/postgres");

/// Connections per replica at most: appends take one at a time (group commit), claims
/// one per envelope in flight, replays one per catching-up subscriber.
const MAX_CONNECTIONS: u32 = 16;
/// How long a store call waits for a connection before it fails (the database is
/// down or every connection is busy): RPCs then fail UNAVAILABLE instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

impl PgDb {
    /// Connects to the database `target` names (TLS and other options from the URL;
    /// its password, when given, replaces one in the URL), migrates it and starts
    /// listening for other replicas' appends. Sent messages are first polled
    /// `first_poll_after` after sending.
    pub(super) async fn open(
        target: &StoreTarget,
        first_poll_after: Duration,
    ) -> Result<Self, StoreError> {
        let password = target.password.as_ref();
        let names = &target.names;
        let (options, settings) = connect_options(names.url, &target.url, password)?;
        reach::reach(&options, names.url).await?;
        pooler::check(&options, target.pooling, &settings, names).await?;
        let direct = match (&target.direct_url, target.pooling) {
            (Some(url), _) => {
                let direct = connect_options(names.direct_url, url, password)?;
                reach::reach(&direct.0, names.direct_url).await?;
                pooler::check_direct(&direct.0, names).await?;
                Some(direct)
            }
            (None, Pooling::Session) => None,
            (None, Pooling::Transaction) => {
                return Err(StoreError::Config(format!(
                    "MSGW_STORE_POOLING=transaction needs {}: {}",
                    names.direct_url,
                    super::DIRECT_URL_IS
                )));
            }
        };
        // Compared before anything is written: migrating one place while serving from
        // another would leave msgw without its tables, and LISTENing on another
        // database would hear no other replica.
        let schema = match &direct {
            Some((direct, direct_settings)) => {
                same_place(
                    (&options, &settings, names.url),
                    (direct, direct_settings, names.direct_url),
                )
                .await?
            }
            None => in_a_schema(sessions::place(&options, &settings).await?, names.url)?.1,
        };
        let statements = match target.pooling {
            Pooling::Session => Statements::Kept,
            Pooling::Transaction => Statements::Unnamed,
        };
        let pool = pool_of(settings.clone())
            .max_connections(MAX_CONNECTIONS)
            .min_connections(1)
            .connect_with(options.clone())
            .await?;
        // The migrations' advisory lock is a session's: on PostgreSQL itself when a
        // direct URL is given.
        match &direct {
            Some((direct, settings)) => {
                let mut conn = PgConnection::connect_with(direct).await?;
                settings.apply(&mut conn).await?;
                MIGRATOR.run(&mut conn).await?;
                let _ = conn.close().await;
            }
            None => MIGRATOR.run(&pool).await?,
        }
        // NOTIFY reaches every session of the database: one channel per schema, so two
        // msgw deployments in two schemas of one database do not wake each other.
        let listening = match direct {
            // Waiting for it no longer than the head is read meanwhile (`events.rs`).
            Some((direct, settings)) if target.pooling == Pooling::Transaction => pool_of(settings)
                .max_connections(1)
                .min_connections(0)
                .acquire_timeout(events::HEAD_CHECK_EVERY)
                .connect_lazy_with(direct),
            _ => pool.clone(),
        };
        // A plan per execution, for the table as it is then: the send path's
        // connections stay open for days, and a generic plan cached while `claims` was
        // nearly empty (a new deployment, a new schema) kept scanning the whole table
        // for every settlement group as it grew, until the next ANALYZE. (Unnamed
        // statements are planned for their values each time anyway.)
        let send_path_settings = match statements {
            Statements::Kept => settings.and("plan_cache_mode", "force_custom_plan"),
            Statements::Unnamed => settings,
        };
        let store = Self {
            pool,
            statements,
            send_path: Arc::new(SendPath::new(
                options,
                send_path_settings,
                statements,
                ACQUIRE_TIMEOUT,
            )),
            listening,
            first_poll_after,
            channel: channel_of(&schema),
            appended: watch::Sender::new(Cursor::START),
            scheduled: watch::Sender::new(None),
        };
        advance(&store.appended, store.latest_cursor().await?);
        tokio::spawn(follow_appends(
            store.listening.clone(),
            (store.pool.clone(), store.statements),
            store.channel.clone(),
            (store.appended.clone(), store.scheduled.clone()),
        ));
        Ok(store)
    }

    /// A connection of the pool (behind a pooler in transaction mode, a transaction:
    /// see [`PgPooled::InTransaction`]).
    pub(super) async fn read(&self) -> Result<PgPooled, StoreError> {
        Ok(match self.statements {
            Statements::Kept => PgPooled::Kept(self.pool.acquire().await?),
            Statements::Unnamed => PgPooled::InTransaction(self.pool.begin().await?),
        })
    }

    /// A transaction of the pool.
    pub(super) async fn begin(&self) -> Result<Tx<'static>, StoreError> {
        Ok(Tx::Postgres(self.pool.begin().await?, self.statements))
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

    /// See [`super::Store::claim_checking`]: a claims group and its suppression read in
    /// one statement: the replies and the numbers found as stored. `None` for any other
    /// group.
    pub(super) async fn claim_checking(
        &self,
        changes: &[ClaimChange],
        recipients: &[Phone],
    ) -> Result<Option<(Vec<ClaimReply>, Vec<i64>)>, StoreError> {
        let check: Vec<i64> = recipients.iter().map(|p| phone_to_db(*p)).collect();
        self.send_path
            .claim_checking(changes, &check, self.first_poll_after)
            .await
    }

    /// See [`super::Store::append_log`].
    pub(super) async fn append_log(
        &self,
        appends: &[LogAppend],
    ) -> Result<Vec<Appended>, StoreError> {
        let (appended, head) =
            events::append(&self.pool, self.statements, &self.channel, appends).await?;
        advance(&self.appended, head);
        Ok(appended)
    }

    /// See [`super::Store::suppressed`]: one statement for every number.
    pub(super) async fn suppressed(&self, phones: &[Phone]) -> Result<Vec<Phone>, StoreError> {
        if phones.is_empty() {
            return Ok(Vec::new());
        }
        let phones: Vec<i64> = phones.iter().map(|p| phone_to_db(*p)).collect();
        let mut conn = self.read().await?;
        let rows: Vec<(i64,)> =
            sqlx::query_as("SELECT phone FROM suppressions WHERE phone = ANY($1)")
                .persistent(self.statements.kept())
                .bind(&phones)
                .fetch_all(&mut *conn)
                .await?;
        drop(conn);
        rows.into_iter().map(|(p,)| phone_from_db(p)).collect()
    }

    /// The newest cursor any replica committed, as far as this one heard.
    pub(super) fn appended(&self) -> watch::Receiver<Cursor> {
        self.appended.subscribe()
    }

    /// Send times of messages scheduled on this schema, as notified.
    pub(super) fn scheduled_heard(&self) -> watch::Receiver<Option<DateTime<Utc>>> {
        self.scheduled.subscribe()
    }

    /// The NOTIFY channel of this schema.
    pub(super) fn channel(&self) -> &str {
        &self.channel
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
            sandbox::save_state(
                &mut Conn::Postgres(&mut tx, self.statements),
                account,
                state,
            )
            .await?;
        }
        if !save.messages.is_empty() {
            let ids: Vec<i64> = save.messages.iter().map(|(id, _)| id_to_db(*id)).collect();
            let records: Vec<&str> = save.messages.iter().map(|(_, r)| r.as_str()).collect();
            sqlx::query(
                "INSERT INTO sandbox_messages (account, id, record)
                 SELECT $1, * FROM UNNEST($2::BIGINT[], $3::TEXT[])
                 ON CONFLICT (account, id) DO UPDATE SET record = excluded.record",
            )
            .persistent(self.statements.kept())
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
        let mut conn = self.read().await?;
        head(&mut *conn, self.statements).await
    }

    /// Closes the connections.
    pub(super) async fn close(&self) {
        self.send_path.close().await;
        self.listening.close().await;
        self.pool.close().await;
    }
}

/// Whether the database `url` names has the fraud guard's tables (see
/// [`super::has_guard_tables`]).
pub(super) async fn has_guard_tables(
    url: &str,
    password: Option<&secrecy::SecretString>,
) -> Result<bool, StoreError> {
    let (options, settings) = connect_options("MSGW_STORE_URL", url, password)?;
    let sql = "SELECT to_regclass('guard_holds') IS NOT NULL";
    let row = sessions::one_row(&options, &settings, sql).await?;
    Ok(sqlx::Row::try_get(&row, 0)?)
}

/// Pool options whose new connections make `settings` first.
fn pool_of(settings: SessionSettings) -> PgPoolOptions {
    let settings = Arc::new(settings);
    PgPoolOptions::new()
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // No ping before each use: a round trip per store call. A connection the
        // database dropped (restart, failover, pg_terminate_backend) fails the one
        // call that finds it and leaves the pool; the send path's writes, which take
        // their own connections, retry once on a fresh one.
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            let settings = settings.clone();
            Box::pin(async move { settings.apply(conn).await })
        })
}

/// The database and schema of a URL, which must name a schema that exists.
fn in_a_schema(
    (database, schema): (String, Option<String>),
    what: &str,
) -> Result<(String, String), StoreError> {
    match schema {
        Some(schema) => Ok((database, schema)),
        None => Err(StoreError::Config(format!(
            "{what} leads to database {database}, where no schema of the search path exists: create msgw's schema (CREATE SCHEMA ... AUTHORIZATION ...), or fix the search path"
        ))),
    }
}

/// The schema the store URL (`pooled`) and the direct URL both lead to: the same
/// database and schema, or a start error naming both.
async fn same_place(
    pooled: (&PgConnectOptions, &SessionSettings, &str),
    direct: (&PgConnectOptions, &SessionSettings, &str),
) -> Result<String, StoreError> {
    let a = in_a_schema(sessions::place(pooled.0, pooled.1).await?, pooled.2)?;
    let b = in_a_schema(sessions::place(direct.0, direct.1).await?, direct.2)?;
    if a != b {
        return Err(StoreError::Config(format!(
            "{} and {} lead to different places (database {}, schema {}; and database {}, schema {}): point both at the same database, and give msgw's role the search_path the direct URL sets",
            pooled.2, direct.2, a.0, a.1, b.0, b.1
        )));
    }
    Ok(a.1)
}

/// Checks, for a command that writes over one session (`msgw copy-store`), that the
/// store URL it was given and the direct URL it writes to are one place.
pub(super) async fn check_same_place(
    url: &str,
    direct_url: &str,
    password: Option<&secrecy::SecretString>,
    names: &super::OptionNames,
) -> Result<(), StoreError> {
    let (options, settings) = connect_options(names.url, url, password)?;
    let (direct, direct_settings) = connect_options(names.direct_url, direct_url, password)?;
    same_place(
        (&options, &settings, names.url),
        (&direct, &direct_settings, names.direct_url),
    )
    .await
    .map(drop)
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
