//! PostgreSQL side of the idempotency claims: the send path's own connections, on
//! which each group (new claims: `insert_claims.rs`, take-overs: `take_overs.rs`,
//! settlements: `settlements.rs`) is one round trip, retried once on a new connection
//! when the database drops one; other groups change by change in a transaction.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::Mutex;

use super::sessions::SessionSettings;
use crate::adapters::store::claim_groups::{Grouped, grouped};
use crate::adapters::store::common::claim_sql::apply_in;
use crate::adapters::store::common::conn::{Statements, Tx};
use crate::adapters::store::{ClaimChange, ClaimReply, StoreError};

/// Groups of claims, and of settlements, written at once. One per stage, from
/// measurement (`cargo bench --bench rpc`, docs/benchmark.md): with two, each commit
/// shared its WAL sync with the other stage's anyway, groups were half as large, and
/// PostgreSQL spent more CPU per send on more commits (7,228 and 7,652 sends/s against
/// 8,627 and 8,931 with one; four were worse still).
pub(super) const SEND_PATH_WRITERS: usize = 1;

/// The connections of the send path's two group-commit stages, claims and settlements,
/// [`SEND_PATH_WRITERS`] each: a stage writes that many groups at a time, so
/// connections of its own serve it without the pool's checkout and the ping the pool
/// sends on every return.
#[derive(Debug)]
pub(super) struct SendPath {
    /// What opens a connection.
    options: PgConnectOptions,
    /// What a new connection sets first.
    settings: SessionSettings,
    /// How statements are prepared on them.
    statements: Statements,
    /// How long opening one may take.
    connect_timeout: Duration,
    stages: [[Mutex<Option<PgConnection>>; SEND_PATH_WRITERS]; 2],
}

impl SendPath {
    /// Connections opened as `options` say, when first needed, within `connect_timeout`,
    /// each making `settings` first.
    pub(super) fn new(
        options: PgConnectOptions,
        settings: SessionSettings,
        statements: Statements,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            options,
            settings,
            statements,
            connect_timeout,
            stages: std::array::from_fn(|_| std::array::from_fn(|_| Mutex::new(None))),
        }
    }

    /// Applies a group of changes: the send path's groups on a connection of their
    /// stage, retried once on a new connection when the database dropped it; others
    /// change by change in one transaction of the pool.
    pub(super) async fn apply(
        &self,
        pool: &PgPool,
        changes: &[ClaimChange],
        first_poll_after: Duration,
    ) -> Result<Vec<ClaimReply>, StoreError> {
        let group = grouped(changes);
        if let Grouped::Mixed = group {
            let tx = Tx::Postgres(pool.begin().await?, self.statements);
            return apply_in(tx, changes, first_poll_after).await;
        }
        Ok(self.on_stage(&group, &[], first_poll_after).await?.0)
    }

    /// Applies a group of only claims and reads which of `check` (numbers) are on the
    /// suppression list, in one statement on a connection of the claims stage: the
    /// replies and the numbers found. `None` for any other group.
    pub(super) async fn claim_checking(
        &self,
        changes: &[ClaimChange],
        check: &[i64],
        first_poll_after: Duration,
    ) -> Result<Option<(Vec<ClaimReply>, Vec<i64>)>, StoreError> {
        let group = grouped(changes);
        if !matches!(group, Grouped::Claims(_)) {
            return Ok(None);
        }
        self.on_stage(&group, check, first_poll_after)
            .await
            .map(Some)
    }

    /// Applies a group of only claims (reading `check` beside) or only settlements on a
    /// connection of its stage, retried once on a new connection when the database
    /// dropped it.
    async fn on_stage(
        &self,
        group: &Grouped<'_>,
        check: &[i64],
        first_poll_after: Duration,
    ) -> Result<(Vec<ClaimReply>, Vec<i64>), StoreError> {
        // Take-overs are claims too (the claims stage writes them, before requests
        // leave).
        let stage = match group {
            Grouped::Claims(_) | Grouped::TakeOvers(_) => &self.stages[0],
            _ => &self.stages[1],
        };
        // A free connection of the stage; its callers keep within SEND_PATH_WRITERS
        // groups at once, so one is free but for a rare reconcile settlement.
        let mut held = match stage.iter().find_map(|c| c.try_lock().ok()) {
            Some(held) => held,
            None => stage[0].lock().await,
        };
        // One token per change, the same on the retry: it tells this group's own
        // claims from other calls' when the first attempt's answer was lost.
        let tokens: Vec<i64> = match group {
            Grouped::Claims(claims) => claims.iter().map(|_| rand::random()).collect(),
            Grouped::TakeOvers(take_overs) => take_overs.iter().map(|_| rand::random()).collect(),
            _ => Vec::new(),
        };
        let mut retried = false;
        loop {
            let conn = match &mut *held {
                Some(conn) => conn,
                empty => empty.insert(self.connect().await?),
            };
            let applied = apply_on(
                conn,
                self.statements,
                group,
                (&tokens, check),
                retried,
                first_poll_after,
            );
            match applied.await {
                // Both writes may run twice: a claim that did land is known again by
                // its token, a settlement is a compare-and-set on the attempt.
                Err(e) if is_connection_error(&e) => {
                    *held = None;
                    if retried {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, "store: the connection of the send path failed; retrying once on a new one");
                    retried = true;
                }
                result => return result,
            }
        }
    }

    /// A new connection of the send path's own, its settings made, within the connect
    /// timeout.
    async fn connect(&self) -> Result<PgConnection, StoreError> {
        let connect = async {
            let mut conn = PgConnection::connect_with(&self.options).await?;
            self.settings.apply(&mut conn).await?;
            Ok::<_, sqlx::Error>(conn)
        };
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(conn) => Ok(conn?),
            Err(_) => Err(sqlx::Error::PoolTimedOut.into()),
        }
    }

    /// Closes the connections.
    pub(super) async fn close(&self) {
        for conn in self.stages.iter().flatten() {
            if let Some(conn) = conn.lock().await.take() {
                let _ = conn.close().await;
            }
        }
    }
}

/// Whether `e` says the connection is gone (the statement may or may not have run), not
/// that the statement failed.
fn is_connection_error(e: &StoreError) -> bool {
    let StoreError::Database(driver) = e else {
        return false;
    };
    match driver.get::<sqlx::Error>() {
        Some(sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_)) => true,
        Some(sqlx::Error::Database(e)) => e.code().is_some_and(|code| {
            // Class 08: connection exception; 57P01..03: the server is shutting down
            // or cannot take connections now.
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// Applies a group of only claims (one INSERT, each claim atomic on its own, that also
/// reads which numbers of `check` are suppressed) or only settlements (one UPDATE with
/// the reconcile rows of the accepted sends) on `conn`: one round trip, two for claims
/// of which some already existed. Behind a pooler in transaction mode the claims run in
/// a transaction, as every statement there must.
async fn apply_on(
    conn: &mut PgConnection,
    statements: Statements,
    group: &Grouped<'_>,
    (tokens, check): (&[i64], &[i64]),
    retried: bool,
    first_poll_after: Duration,
) -> Result<(Vec<ClaimReply>, Vec<i64>), StoreError> {
    let kept = statements.kept();
    match group {
        Grouped::Claims(claims) if kept => {
            super::insert_claims::claim_all(conn, kept, claims, (tokens, check), retried).await
        }
        Grouped::Claims(claims) => {
            let mut tx = conn.begin().await?;
            let done =
                super::insert_claims::claim_all(&mut tx, kept, claims, (tokens, check), retried)
                    .await?;
            tx.commit().await?;
            Ok(done)
        }
        Grouped::Settlements(settlements) => {
            let replies =
                super::settlements::settle_all(conn, kept, settlements, first_poll_after).await?;
            Ok((replies, Vec::new()))
        }
        Grouped::TakeOvers(take_overs) => {
            let replies =
                super::take_overs::take_over_all(conn, kept, take_overs, tokens, retried).await?;
            Ok((replies, Vec::new()))
        }
        Grouped::Mixed => Err(StoreError::Append(
            "a group mixing claims and settlements needs a transaction".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_postgres as postgres;
    use super::*;

    /// The send path's connections plan every statement for the tables as they are: a
    /// generic plan cached while `claims` was nearly empty scans the whole table for
    /// every settlement group once it has grown (seen as PostgreSQL's CPU going to
    /// sequential scans under load, and half the sends per second).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_send_paths_connections_plan_each_statement_anew() {
        let schema = postgres::TestSchema::create().await;
        let store = super::super::migrated(&schema).await;
        let mut conn = store.send_path.connect().await.unwrap();
        let (mode,): (String,) = sqlx::query_as("SHOW plan_cache_mode")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(mode, "force_custom_plan");
        conn.close().await.unwrap();
        store.close().await;
    }
}
