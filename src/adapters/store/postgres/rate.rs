//! The deployment's rate toward the gateway, shared by the replicas: one row holds the
//! rate's window, and a grant is one short transaction that locks it, decides on the
//! database's clock (replicas' clocks may differ; the database's is one) and writes
//! it back.

use sqlx::Connection;

use super::PgDb;
use crate::adapters::store::StoreError;
use crate::core::domain::{Grant, RateLimit, RateWindow};

impl PgDb {
    /// See [`crate::core::ports::store::Store::take_rate`].
    pub(in crate::adapters::store) async fn take_rate(
        &self,
        limit: RateLimit,
        want: u32,
        at_least: u32,
        paced: bool,
    ) -> Result<Grant, StoreError> {
        let kept = self.statements.kept();
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        let (state,): (Vec<u8>,) =
            sqlx::query_as("SELECT state FROM upstream_rate WHERE id = 1 FOR UPDATE")
                .persistent(kept)
                .fetch_one(&mut *tx)
                .await?;
        // The time once the row is ours: read with the lock, it could be from before
        // another replica's grant that held the row.
        let (now,): (i64,) =
            sqlx::query_as("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT")
                .persistent(kept)
                .fetch_one(&mut *tx)
                .await?;
        let mut window = read(&state);
        let grant = window.grant(limit, now, want, at_least, paced);
        if grant.granted > 0 || !paced {
            // A paced refusal changes nothing that the next grant would not work out
            // again; an urgent one marks the window for the room it waits for.
            let state = serde_json::to_vec(&window)
                .map_err(|e| StoreError::Corrupt(format!("the rate's window: {e}")))?;
            sqlx::query("UPDATE upstream_rate SET state = $1 WHERE id = 1")
                .persistent(kept)
                .bind(state)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(grant)
    }
}

/// The stored window; one that does not read back starts afresh (a window that could
/// not be read must not stop every send for good).
fn read(state: &[u8]) -> RateWindow {
    if state.is_empty() {
        return RateWindow::default();
    }
    serde_json::from_slice(state).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "the shared rate's window does not read back: starting a new one");
        RateWindow::default()
    })
}
