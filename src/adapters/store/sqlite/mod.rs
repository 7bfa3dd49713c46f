//! The embedded store: one SQLite file in WAL mode, created and migrated on first
//! start. What only SQLite does is here: opening the file and its pools, the send
//! path's writer thread (`writer.rs`, `claims.rs`), event appends (`events.rs`),
//! checkpoints; the SQL it shares with PostgreSQL is in `common/`.

mod claims;
mod events;
mod writer;

use std::{str::FromStr, sync::Arc, time::Duration};

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};
use tokio::sync::watch;

use self::claims::{BEGIN_WRITE, Work};
use self::writer::{SendPathWriter, wait_for_writer};
use super::common::{conn::Conn, sandbox};
use super::rows::{cursor_from_db, id_to_db, phone_from_db, phone_to_db, row_chunks};
use super::{Appended, ClaimChange, ClaimReply, LogAppend, SandboxSave, StoreError, advance};
use crate::core::domain::{Cursor, Phone};

/// Takes messages due for a poll (`Store::take_due_for_poll`). One writer: the select
/// and the update cannot interleave with another take.
pub(super) const DUE_FOR_POLL_SQL: &str = "UPDATE messages SET next_poll_ms = $1
              WHERE client_id IN (SELECT client_id FROM messages
                                   WHERE is_final = 0 AND next_poll_ms IS NOT NULL AND next_poll_ms <= $2
                                   ORDER BY next_poll_ms LIMIT $3)
             RETURNING client_id, sent_at_ms, lifetime_s, polls";

/// Takes due scheduled messages (`Store::take_due_scheduled`): its one writer takes
/// them one pass at a time.
pub(super) const DUE_SCHEDULED_SQL: &str = "UPDATE scheduled_ops SET due_ms = $1, tries = tries + 1
              WHERE client_id IN (SELECT client_id FROM scheduled_ops WHERE due_ms <= $2
                                   ORDER BY due_ms LIMIT $3)
             RETURNING client_id, send_at_ms, payload, caller, tries";

/// An SQLite database file (or an in-memory database), opened and migrated.
#[derive(Debug, Clone)]
pub(super) struct SqliteDb {
    /// Readers: WAL lets them run beside the writer (copying the store reads here).
    pub(super) pool: SqlitePool,
    /// The writing connection for all but the send path's groups. Writers that queue
    /// here wait their turn in the pool; this connection and the send path's take
    /// turns through SQLite's lock ([`wait_for_writer`]).
    pub(super) writer: SqlitePool,
    /// The send path's claims and settlements, on a thread and connection of their own
    /// (`None` for an in-memory database, which exists only on the pool's writer).
    send_path: Option<Arc<SendPathWriter>>,
    first_poll_after: Duration,
    /// The newest cursor appended (one process owns the file: its own appends are all).
    appended: watch::Sender<Cursor>,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("src/adapters/store/migrations/sqlite");

impl SqliteDb {
    /// Opens (creating if missing) the database `url` names and migrates it.
    /// Sent messages are first polled `first_poll_after` after sending.
    pub(super) async fn open(url: &str, first_poll_after: Duration) -> Result<Self, StoreError> {
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
        if !in_memory {
            let file = options.get_filename();
            if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty())
                && !dir.is_dir()
            {
                return Err(StoreError::Config(format!(
                    "the directory {} does not exist: create it, or point MSGW_STORE_URL at a file in one that does",
                    dir.display()
                )));
            }
        }
        let pool_of = |connections| {
            SqlitePoolOptions::new()
                .max_connections(connections)
                .min_connections(1)
                // A local file cannot drop a connection the way a network can: skip the
                // ping before every use, a round trip to the connection's thread each time.
                .test_before_acquire(false)
                // A failed write can leave sqlx's count of open transactions wrong (SQLite
                // rolls back by itself on a full disk or an I/O error, and the ROLLBACK
                // that follows then fails): such a connection would refuse or misplace
                // every later transaction, so it is closed and a new one opened.
                .after_release(|conn, _| {
                    use sqlx::Connection;
                    Box::pin(async move {
                        if conn.is_in_transaction() {
                            // Runs the rollback a dropped transaction queued.
                            conn.ping().await?;
                        }
                        Ok(!conn.is_in_transaction())
                    })
                })
                // Writers take turns with the send path's writer in small steps.
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        claims::on_locked(conn, |db| Ok(db.busy_handler(Some(wait_for_writer))?))
                            .await
                            .map_err(|e| sqlx::Error::Configuration(Box::new(e)))
                    })
                })
                .connect_with(options.clone())
        };
        let writer = pool_of(1).await.map_err(|e| {
            StoreError::Config(format!(
                "cannot open {}: {} (msgw must be able to create and write it)",
                options.get_filename().display(),
                super::cause(&e)
            ))
        })?;
        MIGRATOR.run(&writer).await?;
        // An in-memory database exists once per connection: it has only the writer's.
        let pool = if in_memory {
            writer.clone()
        } else {
            pool_of(4).await?
        };
        let send_path = if in_memory {
            None
        } else {
            tokio::spawn(checkpoint_wal(pool.clone()));
            Some(Arc::new(SendPathWriter::open(options.get_filename())?))
        };
        let store = Self {
            pool,
            writer,
            send_path,
            first_poll_after,
            appended: watch::Sender::new(Cursor::START),
        };
        advance(&store.appended, store.latest_cursor().await?);
        Ok(store)
    }

    /// A connection of the readers' pool.
    pub(super) async fn read(&self) -> Result<PoolConnection<Sqlite>, StoreError> {
        Ok(self.pool.acquire().await?)
    }

    /// The writing connection (all writes but the send path's take turns on it).
    pub(super) async fn write(&self) -> Result<PoolConnection<Sqlite>, StoreError> {
        Ok(self.writer.acquire().await?)
    }

    /// A transaction that reads, then writes: it holds the write lock from its start.
    pub(super) async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.writer.begin_with(BEGIN_WRITE).await?)
    }

    /// See [`super::Store::apply_claims`]: the send path's groups on its writer thread,
    /// other groups change by change on the writing connection.
    pub(super) async fn apply_claims(
        &self,
        changes: &[ClaimChange],
    ) -> Result<Vec<ClaimReply>, StoreError> {
        if let Some(send_path) = &self.send_path
            && let Some(work) = Work::of(changes, self.first_poll_after)
        {
            return Ok(send_path.write(work).await?.replies);
        }
        let mut conn = self.writer.acquire().await?;
        claims::apply_all(&mut conn, changes, self.first_poll_after).await
    }

    /// See [`super::Store::claim_checking`]: a claims group and its suppression reads in
    /// one transaction of the send path's writer: the replies and the numbers found as
    /// stored. `None` for any other group, or an in-memory database.
    pub(super) async fn claim_checking(
        &self,
        changes: &[ClaimChange],
        recipients: &[Phone],
    ) -> Result<Option<(Vec<ClaimReply>, Vec<i64>)>, StoreError> {
        let Some(send_path) = &self.send_path else {
            return Ok(None);
        };
        let Some(work @ Work::Claims(..)) = Work::of(changes, self.first_poll_after) else {
            return Ok(None);
        };
        let written = send_path.write(work.checking(recipients)).await?;
        Ok(Some((written.replies, written.suppressed)))
    }

    /// See [`super::Store::append_log`].
    pub(super) async fn append_log(
        &self,
        appends: &[LogAppend],
    ) -> Result<Vec<Appended>, StoreError> {
        // The write lock first: the duplicate checks, the list and the inserts see the
        // same log.
        let mut tx = self.begin_write().await?;
        let appended = events::append(&mut tx, appends).await?;
        tx.commit().await?;
        let last = appended
            .iter()
            .flat_map(|a| a.events())
            .map(|e| e.cursor())
            .max();
        if let Some(last) = last {
            advance(&self.appended, last);
        }
        Ok(appended)
    }

    /// See [`super::Store::suppressed`]: on a reader, beside the writer.
    pub(super) async fn suppressed(&self, phones: &[Phone]) -> Result<Vec<Phone>, StoreError> {
        let mut conn = self.read().await?;
        let mut found = Vec::new();
        for chunk in row_chunks(phones) {
            let mut query = sqlx::QueryBuilder::<Sqlite>::new(
                "SELECT phone FROM suppressions WHERE phone IN (",
            );
            let mut list = query.separated(", ");
            for phone in chunk {
                list.push_bind(phone_to_db(*phone));
            }
            query.push(")");
            let rows: Vec<(i64,)> = query.build_query_as().fetch_all(&mut *conn).await?;
            for (phone,) in rows {
                found.push(phone_from_db(phone)?);
            }
        }
        Ok(found)
    }

    /// The newest cursor appended.
    pub(super) fn appended(&self) -> watch::Receiver<Cursor> {
        self.appended.subscribe()
    }

    /// See [`super::Store::save_sandbox`]: one statement per message row, parsed once
    /// and stepped per row (SQLite parses a statement by its length: one row of
    /// placeholders per message would cost more to parse than to write).
    pub(super) async fn save_sandbox(
        &self,
        account: &str,
        save: &SandboxSave,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        if let Some(state) = &save.account {
            sandbox::save_state(&mut Conn::Sqlite(&mut tx), account, state).await?;
        }
        for (id, record) in &save.messages {
            sqlx::query(
                "INSERT INTO sandbox_messages (account, id, record) VALUES ($1, $2, $3)
                 ON CONFLICT (account, id) DO UPDATE SET record = excluded.record",
            )
            .bind(account)
            .bind(id_to_db(*id))
            .bind(record.as_str())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The newest cursor ever handed out.
    pub(super) async fn latest_cursor(&self) -> Result<Cursor, StoreError> {
        // sqlite_sequence remembers the highest cursor even after its event was pruned.
        let seq: Option<(i64,)> =
            sqlx::query_as("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
                .fetch_optional(&self.pool)
                .await?;
        seq.map_or(Ok(Cursor::START), |(s,)| cursor_from_db(s))
    }

    /// Flushes and closes the database.
    pub(super) async fn close(&self) {
        // Leave a compact file behind: everything in the database, an empty WAL.
        // Readers first, so the checkpoint can empty the WAL (an in-memory database's
        // readers are its writer: nothing to checkpoint then).
        if let Some(send_path) = &self.send_path {
            send_path.close().await;
        }
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

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use sqlx::Connection;

    use super::*;
    use crate::adapters::store::Fingerprint;
    use crate::core::domain::ClientId;

    async fn store(dir: &tempfile::TempDir) -> SqliteDb {
        let url = format!("sqlite://{}", dir.path().join("msgw.db").display());
        SqliteDb::open(&url, Duration::from_secs(60)).await.unwrap()
    }

    fn claim(id: u64) -> ClaimChange {
        ClaimChange::Claim {
            id: ClientId::new(id).unwrap(),
            fingerprint: Fingerprint([7; 32]),
            caller: None,
            at: Utc::now(),
        }
    }

    /// SQLite ends a transaction by itself on some failures (a full disk); sqlx's
    /// ROLLBACK then fails and it counts the transaction as still open, so it would
    /// refuse every later `BEGIN IMMEDIATE` on that connection.
    #[tokio::test]
    async fn a_writer_that_miscounts_its_transactions_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        {
            let mut conn = store.writer.acquire().await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            sqlx::query("ROLLBACK").execute(&mut *tx).await.unwrap();
        }
        assert_eq!(store.append_log(&[]).await.unwrap(), vec![]);
    }

    /// Holds SQLite's write lock from another connection until told to let go.
    fn hold_write_lock(
        path: std::path::PathBuf,
    ) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (locked, is_locked) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let db = rusqlite::Connection::open(path).unwrap();
            db.execute_batch("BEGIN EXCLUSIVE").unwrap();
            locked.send(()).unwrap();
            let _ = released.recv();
            db.execute_batch("COMMIT").unwrap();
        });
        is_locked.recv().unwrap();
        (release, holder)
    }

    /// Another process holds the write lock past the busy timeout: the first group
    /// waits the timeout, the groups behind it fail at once instead of a timeout each
    /// (seen by an adversarial run as waves of callers answered after 5, 11 and 16 s),
    /// and once a write gets the lock, writes wait the whole timeout again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn behind_a_lock_held_past_the_busy_timeout_groups_fail_fast_until_it_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        let path = dir.path().join("msgw.db");
        let (release, holder) = hold_write_lock(path.clone());
        let first = std::time::Instant::now();
        assert!(store.apply_claims(&[claim(1)]).await.is_err());
        assert!(
            first.elapsed() >= Duration::from_secs(4),
            "{:?}",
            first.elapsed()
        );
        let second = std::time::Instant::now();
        assert!(store.apply_claims(&[claim(2)]).await.is_err());
        assert!(
            second.elapsed() < Duration::from_secs(2),
            "{:?}",
            second.elapsed()
        );
        release.send(()).unwrap();
        holder.join().unwrap();
        let claimed = vec![ClaimReply::Claimed { attempt: 1 }];
        assert_eq!(store.apply_claims(&[claim(3)]).await.unwrap(), claimed);
        // A lock held for a second now is waited for, as before.
        let (release, holder) = hold_write_lock(path);
        let waiting = tokio::spawn({
            let store = store.clone();
            async move { store.apply_claims(&[claim(4)]).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        release.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(waiting.await.unwrap().unwrap(), claimed);
    }

    /// A transaction left open on the writer (sqlx not counting it) would refuse the
    /// send path's next group: the group rolls it back first.
    #[tokio::test]
    async fn a_claims_group_rolls_back_a_transaction_left_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        {
            let mut conn = store.writer.acquire().await.unwrap();
            sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
        }
        let replies = store.apply_claims(&[claim(1), claim(2)]).await.unwrap();
        assert_eq!(replies, vec![ClaimReply::Claimed { attempt: 1 }; 2]);
    }
}
