//! [`SqlStore`], the one implementation of [`Store`]: msgw's store on SQLite or on
//! PostgreSQL. A method whose SQL both databases speak is written once, over a
//! connection of either ([`Conn`]); a method that differs asks the database's own
//! code (`sqlite/`, `postgres/`): the send path's claims and settlements, event
//! appends with the suppression list's changes (cursor order across replicas), taking due polls (`FOR UPDATE SKIP
//! LOCKED`), the sandbox's message rows, opening and closing.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::common::conn::{Pooled, Tx};
use super::common::{
    claim_sql as claims, events, guard, holds, sandbox, scheduled, suppressions, upkeep,
    verification_changes, verifications,
};
use super::postgres::{self, PgDb};
use super::sqlite::{self, SqliteDb};
use super::verifications::writes_without_row;
use super::{
    Appended, CheckedClaims, ClaimChange, ClaimRecord, ClaimReply, CodeCheck, Decided,
    DueScheduled, EarlierScheduled, GuardCheck, LogAppend, NewScheduled, PendingMessage, RangeHold,
    Retention, SandboxSave, ScheduleReply, ScheduledSummary, Start, StartOutcome, Store,
    StoreError, VerificationChange, VerificationRecord,
};
use crate::core::domain::{
    CallerName, ClientId, Cursor, Grant, LogEvent, Phone, RateLimit, StatusEvent, Suppression,
};

/// msgw's store on one of its two databases.
#[derive(Debug, Clone)]
pub struct SqlStore {
    db: Db,
}

#[derive(Debug, Clone)]
enum Db {
    Sqlite(SqliteDb),
    Postgres(PgDb),
}

impl SqlStore {
    /// Opens (creating if missing) the SQLite database `url` names and migrates it.
    /// Sent messages are first polled `first_poll_after` after sending.
    pub async fn sqlite(url: &str, first_poll_after: Duration) -> Result<Self, StoreError> {
        let db = Db::Sqlite(SqliteDb::open(url, first_poll_after).await?);
        Ok(Self { db })
    }

    /// Connects to the PostgreSQL database `target` names, migrates it and starts
    /// listening for other replicas' appends. Sent messages are first polled
    /// `first_poll_after` after sending.
    pub async fn postgres(
        target: &super::StoreTarget,
        first_poll_after: Duration,
    ) -> Result<Self, StoreError> {
        let db = Db::Postgres(PgDb::open(target, first_poll_after).await?);
        Ok(Self { db })
    }

    /// A connection to read on (SQLite: its readers, beside the writer).
    async fn read(&self) -> Result<Pooled, StoreError> {
        Ok(match &self.db {
            Db::Sqlite(db) => Pooled::Sqlite(db.read().await?),
            Db::Postgres(db) => Pooled::Postgres(db.read().await?),
        })
    }

    /// A connection to write on, outside a transaction (SQLite: its one writer); what
    /// is written there is kept once [`Pooled::finish`] returns.
    async fn write(&self) -> Result<Pooled, StoreError> {
        Ok(match &self.db {
            Db::Sqlite(db) => Pooled::Sqlite(db.write().await?),
            Db::Postgres(db) => Pooled::Postgres(db.read().await?),
        })
    }

    /// A transaction that reads, then writes (SQLite's holds the write lock from its
    /// start: one that read first could neither wait for the lock nor write once
    /// another writer committed).
    async fn begin_write(&self) -> Result<Tx<'static>, StoreError> {
        Ok(match &self.db {
            Db::Sqlite(db) => Tx::Sqlite(db.begin_write().await?),
            Db::Postgres(db) => db.begin().await?,
        })
    }
}

#[tonic::async_trait]
impl Store for SqlStore {
    async fn apply_claims(&self, changes: &[ClaimChange]) -> Result<Vec<ClaimReply>, StoreError> {
        match &self.db {
            Db::Sqlite(db) => db.apply_claims(changes).await,
            Db::Postgres(db) => db.apply_claims(changes).await,
        }
    }

    async fn claim_checking(
        &self,
        changes: &[ClaimChange],
        recipients: &[Phone],
    ) -> Result<CheckedClaims, StoreError> {
        let folded = match &self.db {
            Db::Sqlite(db) => db.claim_checking(changes, recipients).await?,
            Db::Postgres(db) => db.claim_checking(changes, recipients).await?,
        };
        // A group the store cannot fold (take-overs, repeated ids, an in-memory SQLite
        // database): the write and the read side by side.
        let Some((replies, found)) = folded else {
            let (replies, suppressed) =
                tokio::try_join!(self.apply_claims(changes), self.suppressed(recipients))?;
            return Ok(CheckedClaims {
                replies,
                suppressed,
            });
        };
        let suppressed = found
            .into_iter()
            .map(super::rows::phone_from_db)
            .collect::<Result<_, _>>()?;
        Ok(CheckedClaims {
            replies,
            suppressed,
        })
    }

    fn send_path_writers(&self) -> usize {
        match &self.db {
            Db::Sqlite(_) => 1,
            Db::Postgres(db) => db.send_path_writers(),
        }
    }

    async fn claim_of(&self, id: ClientId) -> Result<Option<ClaimRecord>, StoreError> {
        claims::claim_of(&mut self.read().await?.conn(), id).await
    }

    async fn unsettled_claims(
        &self,
        now: DateTime<Utc>,
        in_flight_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<(ClientId, ClaimRecord)>, StoreError> {
        let mut conn = self.read().await?;
        claims::unsettled(&mut conn.conn(), now, in_flight_before, limit).await
    }

    async fn client_id_of(&self, msg_id: &str) -> Result<Option<ClientId>, StoreError> {
        events::client_id_of(&mut self.read().await?.conn(), msg_id).await
    }

    async fn append_log(&self, appends: &[LogAppend]) -> Result<Vec<Appended>, StoreError> {
        match &self.db {
            Db::Sqlite(db) => db.append_log(appends).await,
            Db::Postgres(db) => db.append_log(appends).await,
        }
    }

    async fn events_after(&self, cursor: Cursor, limit: u32) -> Result<Vec<LogEvent>, StoreError> {
        events::after(&mut self.read().await?.conn(), cursor, limit).await
    }

    async fn suppressed(&self, phones: &[Phone]) -> Result<Vec<Phone>, StoreError> {
        if phones.is_empty() {
            return Ok(Vec::new());
        }
        match &self.db {
            Db::Sqlite(db) => db.suppressed(phones).await,
            Db::Postgres(db) => db.suppressed(phones).await,
        }
    }

    async fn suppression(&self, phone: Phone) -> Result<Option<Suppression>, StoreError> {
        suppressions::get(&mut self.read().await?.conn(), phone).await
    }

    async fn suppressions(
        &self,
        after: Option<Phone>,
        limit: u32,
    ) -> Result<Vec<Suppression>, StoreError> {
        suppressions::list(&mut self.read().await?.conn(), after, limit).await
    }

    async fn last_event_of(&self, client_id: ClientId) -> Result<Option<StatusEvent>, StoreError> {
        events::last_of(&mut self.read().await?.conn(), client_id).await
    }

    async fn oldest_cursor(&self) -> Result<Option<Cursor>, StoreError> {
        events::oldest_cursor(&mut self.read().await?.conn()).await
    }

    async fn latest_cursor(&self) -> Result<Cursor, StoreError> {
        match &self.db {
            Db::Sqlite(db) => db.latest_cursor().await,
            Db::Postgres(db) => db.latest_cursor().await,
        }
    }

    fn scheduled_heard(&self) -> watch::Receiver<Option<DateTime<Utc>>> {
        match &self.db {
            // One process writes a SQLite file: its scheduler hears its own schedules.
            Db::Sqlite(_) => watch::channel(None).1,
            Db::Postgres(db) => db.scheduled_heard(),
        }
    }

    async fn take_rate(
        &self,
        limit: RateLimit,
        want: u32,
        at_least: u32,
        paced: bool,
    ) -> Result<Option<Grant>, StoreError> {
        match &self.db {
            // One process writes a SQLite file: it keeps its rate itself.
            Db::Sqlite(_) => Ok(None),
            Db::Postgres(db) => db.take_rate(limit, want, at_least, paced).await.map(Some),
        }
    }

    fn appended(&self) -> watch::Receiver<Cursor> {
        match &self.db {
            Db::Sqlite(db) => db.appended(),
            Db::Postgres(db) => db.appended(),
        }
    }

    async fn prune(&self, retention: Retention, now: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut conn = self.write().await?;
        let pruned = upkeep::prune(&mut conn.conn(), retention, now).await?;
        conn.finish().await?;
        Ok(pruned)
    }

    async fn take_due_for_poll(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<PendingMessage>, StoreError> {
        let due_sql = match &self.db {
            Db::Sqlite(_) => sqlite::DUE_FOR_POLL_SQL,
            Db::Postgres(_) => postgres::DUE_FOR_POLL_SQL,
        };
        let mut conn = self.write().await?;
        let due = upkeep::take_due(&mut conn.conn(), due_sql, now, limit, lease).await?;
        conn.finish().await?;
        Ok(due)
    }

    async fn schedule_poll(
        &self,
        client_id: ClientId,
        next: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        let mut conn = self.write().await?;
        upkeep::schedule_poll(&mut conn.conn(), client_id, next).await?;
        conn.finish().await
    }

    async fn schedule(&self, new: &NewScheduled) -> Result<ScheduleReply, StoreError> {
        // On PostgreSQL the commit tells every replica's scheduler the send time.
        let notify = match &self.db {
            Db::Sqlite(_) => None,
            Db::Postgres(db) => Some(db.channel()),
        };
        scheduled::schedule(self.begin_write().await?, new, notify).await
    }

    async fn cancel_scheduled(
        &self,
        id: ClientId,
        at: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        scheduled::cancel(self.begin_write().await?, id, at).await
    }

    async fn take_due_scheduled(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DueScheduled>, StoreError> {
        let due_sql = match &self.db {
            Db::Sqlite(_) => sqlite::DUE_SCHEDULED_SQL,
            Db::Postgres(_) => postgres::DUE_SCHEDULED_SQL,
        };
        let mut conn = self.write().await?;
        let due = scheduled::take_due(&mut conn.conn(), due_sql, now, limit, lease).await?;
        conn.finish().await?;
        Ok(due)
    }

    async fn forget_scheduled(&self, ids: &[ClientId]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        scheduled::forget(self.begin_write().await?, ids).await
    }

    async fn scheduled_summary(&self) -> Result<ScheduledSummary, StoreError> {
        scheduled::summary(&mut self.read().await?.conn()).await
    }

    async fn earlier_scheduled(&self, limit: u32) -> Result<Vec<EarlierScheduled>, StoreError> {
        scheduled::earlier(&mut self.read().await?.conn(), limit).await
    }

    async fn move_earlier_scheduled(
        &self,
        id: ClientId,
        payload: Vec<u8>,
    ) -> Result<bool, StoreError> {
        scheduled::move_earlier(self.begin_write().await?, id, payload).await
    }

    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.write().await?;
        let held = upkeep::try_lease(&mut conn.conn(), name, holder, ttl, now).await?;
        conn.finish().await?;
        Ok(held)
    }

    async fn sandbox_state(&self, account: &str) -> Result<Option<String>, StoreError> {
        sandbox::state(&mut self.read().await?.conn(), account).await
    }

    async fn sandbox_messages(&self, account: &str) -> Result<Vec<(u64, String)>, StoreError> {
        sandbox::messages(&mut self.read().await?.conn(), account).await
    }

    async fn save_sandbox(&self, account: &str, save: &SandboxSave) -> Result<(), StoreError> {
        match &self.db {
            Db::Sqlite(db) => db.save_sandbox(account, save).await,
            Db::Postgres(db) => db.save_sandbox(account, save).await,
        }
    }

    async fn start_verification(&self, start: &Start) -> Result<Decided<StartOutcome>, StoreError> {
        let mut tx = self.begin_write().await?;
        let decided = verifications::start(&mut tx.conn(), start).await?;
        // A call whose id another start took meanwhile wrote nothing worth keeping.
        if decided.outcome != StartOutcome::IdTaken {
            tx.commit().await?;
        }
        Ok(decided)
    }

    async fn check_verification(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        now: DateTime<Utc>,
        right: CodeCheck<'_>,
        lift: Option<&GuardCheck>,
    ) -> Result<Decided<Option<VerificationRecord>>, StoreError> {
        let mut tx = self.begin_write().await?;
        let decided = verifications::check(&mut tx.conn(), caller, phone, now, right, lift).await?;
        tx.commit().await?;
        Ok(decided)
    }

    async fn cancel_verification(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        now: DateTime<Utc>,
    ) -> Result<Decided<Option<VerificationRecord>>, StoreError> {
        let mut tx = self.begin_write().await?;
        let decided = verifications::cancel(&mut tx.conn(), caller, phone, now).await?;
        tx.commit().await?;
        Ok(decided)
    }

    async fn pending_verification(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        now: DateTime<Utc>,
    ) -> Result<Decided<Option<VerificationRecord>>, StoreError> {
        let mut tx = self.begin_write().await?;
        let decided = verifications::look(&mut tx.conn(), caller, phone, now).await?;
        tx.commit().await?;
        Ok(decided)
    }

    async fn range_hold(
        &self,
        range: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<RangeHold>, StoreError> {
        guard::hold_of(&mut self.read().await?.conn(), range, now).await
    }

    async fn held_ranges(
        &self,
        now: DateTime<Utc>,
        after: &str,
        limit: u32,
    ) -> Result<Vec<RangeHold>, StoreError> {
        holds::held(&mut self.read().await?.conn(), now, after, limit).await
    }

    async fn release_range(
        &self,
        range: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<RangeHold>, StoreError> {
        let mut tx = self.begin_write().await?;
        let released = holds::release(&mut tx.conn(), range, now).await?;
        tx.commit().await?;
        Ok(released)
    }

    async fn verification_of_send(
        &self,
        send: ClientId,
    ) -> Result<Option<(VerificationRecord, bool)>, StoreError> {
        let found = verifications::of_send(&mut self.read().await?.conn(), send).await?;
        Ok(found.map(|s| (s.record, s.sent)))
    }

    async fn change_verification(
        &self,
        change: &VerificationChange,
    ) -> Result<Option<VerificationRecord>, StoreError> {
        let mut tx = self.begin_write().await?;
        let changed = verification_changes::change(&mut tx.conn(), change).await?;
        if changed.is_some() || writes_without_row(change) {
            tx.commit().await?;
        }
        Ok(changed)
    }

    async fn close(&self) {
        match &self.db {
            Db::Sqlite(db) => db.close().await,
            Db::Postgres(db) => db.close().await,
        }
    }
}
