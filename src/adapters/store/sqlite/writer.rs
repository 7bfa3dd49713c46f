//! The send path's SQLite writer: a thread of its own, with a connection of its own to
//! the database file, writes the claims and settlements groups. It takes every group
//! queued while it wrote and commits them in one transaction, so the two stages of the
//! send path (claims before requests leave, settlements after) share commits, and its
//! statements stay prepared for the life of the connection: one wake-up per turn, no
//! statement parsed per group, no hop through sqlx's worker thread.
//!
//! A group is answered only after the transaction holding it commits. When the merged
//! transaction fails, each group is written again in a transaction of its own, so one
//! failing group never fails another. Writes are as durable as the pool's: WAL with
//! `synchronous = NORMAL`, so a commit survives a crash of msgw, and only a power loss
//! can take back the last transactions (then claims of sends that may have left are
//! lost, and a retry could send them again).
//!
//! SQLite takes one writer at a time: this connection and the pool's writer take turns
//! through the file's lock, waiting with [`wait_for_writer`] in steps of microseconds,
//! not SQLite's default steps of milliseconds.

use std::{
    path::Path,
    sync::{Mutex, mpsc},
    time::Duration,
};

use tokio::sync::oneshot;

use super::claims::{Work, Written, in_transaction};
use crate::adapters::store::StoreError;

/// How long each write of the send path waits for the lock after one waited the whole
/// busy timeout in vain, until a write gets it again.
const STARVED_WAIT: Duration = Duration::from_millis(100);

/// Groups one transaction takes at most.
const GROUPS_PER_TRANSACTION: usize = 64;

/// How long a writer waits for the other to end its transaction: as long as the pool's
/// busy timeout.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The send path's writer thread, and the way to it.
#[derive(Debug)]
pub(super) struct SendPathWriter {
    /// `None` once closed. Dropping the sender (closing, or dropping the store) ends
    /// the thread once its queue is empty.
    jobs: Mutex<Option<mpsc::Sender<Message>>>,
}

enum Message {
    Write(Job),
    /// Stop after the groups queued before it; answered once the connection is closed.
    Close(oneshot::Sender<()>),
}

struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Written, StoreError>>,
}

impl SendPathWriter {
    /// Opens a connection to the (migrated, WAL mode) database file `path` and starts
    /// the writer thread.
    pub(super) fn open(path: &Path) -> Result<Self, StoreError> {
        let db = rusqlite::Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // As the pool's connections: checkpoints run in the background, never inside
        // a commit of the send path.
        db.execute_batch(
            "PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; PRAGMA foreign_keys = ON;",
        )?;
        db.busy_handler(Some(wait_for_writer))?;
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("msgw-sqlite".into())
            .spawn(move || run(db, queue))
            .map_err(|e| StoreError::Config(format!("cannot start the SQLite writer: {e}")))?;
        Ok(Self {
            jobs: Mutex::new(Some(jobs)),
        })
    }

    /// Writes `work` in the next transaction; its replies once it committed.
    pub(super) async fn write(&self, work: Work) -> Result<Written, StoreError> {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|jobs| jobs.send(Message::Write(Job { work, reply })).is_ok());
        if !sent {
            return Err(closed());
        }
        answer.await.unwrap_or_else(|_| Err(closed()))
    }

    /// Stops the thread once the groups queued now are written, and closes its
    /// connection; later writes fail.
    pub(super) async fn close(&self) {
        let Some(jobs) = self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let (done, closed) = oneshot::channel();
        if jobs.send(Message::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

fn closed() -> StoreError {
    StoreError::Append("the store is closed".into())
}

/// The thread: takes what queued, writes it, answers, until closed.
fn run(db: rusqlite::Connection, queue: mpsc::Receiver<Message>) {
    let mut closing = None;
    let mut starved = false;
    while closing.is_none() {
        let Ok(first) = queue.recv() else { break };
        let mut jobs = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Write(job) => jobs.push(job),
                Message::Close(done) => {
                    closing = Some(done);
                    break;
                }
            }
            if jobs.len() < GROUPS_PER_TRANSACTION {
                next = queue.try_recv().ok();
            }
        }
        let missed_lock = write(&db, jobs);
        // After a wait for the lock as long as the busy timeout, the lock's holder
        // (another process, a stalled disk) is likely to hold it on: the groups queued
        // behind try briefly each, so that their callers hear at once instead of a
        // busy timeout apiece, until a write gets the lock again.
        if missed_lock != starved {
            starved = missed_lock;
            let wait = if starved {
                wait_briefly
            } else {
                wait_for_writer
            };
            if let Err(e) = db.busy_handler(Some(wait)) {
                tracing::warn!(error = %e, "store: cannot set the SQLite writer's busy handler");
            }
        }
    }
    // Groups queued after the close are answered "closed" (their replies drop).
    drop(queue);
    drop(db);
    if let Some(done) = closing {
        let _ = done.send(());
    }
}

/// Writes the groups in one transaction and answers each; when that fails, each group
/// again in a transaction of its own. True when the write lock was not had in time.
fn write(db: &rusqlite::Connection, jobs: Vec<Job>) -> bool {
    if jobs.is_empty() {
        return false;
    }
    let merged = in_transaction(db, || {
        jobs.iter()
            .map(|job| job.work.apply(db))
            .collect::<Result<Vec<_>, StoreError>>()
    });
    match merged {
        Ok(replies) => {
            for (job, replies) in jobs.into_iter().zip(replies) {
                let _ = job.reply.send(Ok(replies));
            }
            false
        }
        // One group, or the lock not had within the busy timeout: writing the groups
        // again would only make their callers wait that long once more.
        Err(e) if jobs.len() == 1 || waited_for_lock(&e) => {
            let missed_lock = waited_for_lock(&e);
            let text = e.to_string();
            let mut first = Some(e);
            for job in jobs {
                let e = first
                    .take()
                    .unwrap_or_else(|| StoreError::Append(text.clone()));
                let _ = job.reply.send(Err(e));
            }
            missed_lock
        }
        Err(e) => {
            tracing::warn!(error = %e, groups = jobs.len(), "store: a merged write failed; writing its groups one by one");
            let mut missed_lock = false;
            for job in jobs {
                let done = in_transaction(db, || job.work.apply(db));
                missed_lock |= done.as_ref().is_err_and(waited_for_lock);
                let _ = job.reply.send(done);
            }
            missed_lock
        }
    }
}

/// Whether `e` is the write lock not had within the busy timeout (another writer, or
/// another process, held it).
fn waited_for_lock(e: &StoreError) -> bool {
    let StoreError::Embedded(driver) = e else {
        return false;
    };
    let Some(rusqlite::Error::SqliteFailure(failure, _)) = driver.get::<rusqlite::Error>() else {
        return false;
    };
    matches!(
        failure.code,
        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
    )
}

/// SQLite's busy handler for msgw's writers: while the other writer holds the file's
/// write lock, wait in steps growing from 20 µs to 1 ms (a send-path transaction takes
/// tens of microseconds; SQLite's default handler sleeps 1, 2, 5, 10 ms and longer),
/// for up to [`BUSY_TIMEOUT`] in all. `attempts`: how often it was called for this wait.
pub(super) fn wait_for_writer(attempts: i32) -> bool {
    wait_up_to(attempts, BUSY_TIMEOUT)
}

/// The send path's busy handler after a wait as long as the busy timeout failed: the
/// same steps, for up to [`STARVED_WAIT`].
fn wait_briefly(attempts: i32) -> bool {
    wait_up_to(attempts, STARVED_WAIT)
}

/// Waits one step of a wait for the lock that may last `limit` in all.
fn wait_up_to(attempts: i32, limit: Duration) -> bool {
    const FIRST: u64 = 20;
    const LONGEST: Duration = Duration::from_millis(1);
    let step = Duration::from_micros(FIRST << attempts.clamp(0, 6)).min(LONGEST);
    // The growing steps take under 1.3 ms, then one step per millisecond.
    let steps = u128::try_from(attempts).unwrap_or(0);
    if steps > limit.as_millis() {
        return false;
    }
    std::thread::sleep(step);
    true
}

#[cfg(test)]
mod tests {
    use super::{StoreError, wait_for_writer, waited_for_lock};

    /// A merged transaction that could not get the write lock within the busy timeout
    /// fails all its groups at once: writing each again would make its callers wait
    /// the whole timeout once more (seen by an adversarial run as 11 s instead of 5).
    #[test]
    fn a_write_lock_not_had_is_told_from_other_failures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locked.db");
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x); BEGIN EXCLUSIVE;")
            .unwrap();
        let writer = rusqlite::Connection::open(&path).unwrap();
        writer.busy_timeout(std::time::Duration::ZERO).unwrap();
        let busy = writer.execute_batch("BEGIN IMMEDIATE").unwrap_err();
        assert!(waited_for_lock(&busy.into()));
        let other = writer
            .execute_batch("INSERT INTO missing VALUES (1)")
            .unwrap_err();
        assert!(!waited_for_lock(&other.into()));
        assert!(!waited_for_lock(&StoreError::Corrupt("x".into())));
    }

    #[test]
    fn a_busy_writer_is_waited_for_about_five_seconds_in_small_steps() {
        assert!(wait_for_writer(0));
        assert!(wait_for_writer(5000));
        assert!(!wait_for_writer(5001));
        assert!(!wait_for_writer(i32::MAX));
    }
}
