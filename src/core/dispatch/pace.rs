//! The deployment's rate toward the gateway (`MSGW_UPSTREAM_RATE`): one
//! [`RateWindow`] for all replicas. On a shared store (PostgreSQL) the window lives in
//! the store and every replica takes its grants from it, whichever replica the
//! callers happen to reach; a store of one process (SQLite) keeps it in memory.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

use tokio::time::Instant;

use crate::core::domain::{Grant, RateLimit, RateWindow};
use crate::core::ports::store::Store;

/// What a failed ask of a shared store waits before asking again.
const STORE_RETRY_MS: u64 = 100;

/// Grants operations under the deployment's rate.
pub struct Pace {
    limit: RateLimit,
    /// The window when this process keeps it, and the clock it counts on.
    local: Mutex<(RateWindow, Instant)>,
    /// The shared store holding the window, until it says it is no shared one.
    shared: Option<Arc<dyn Store>>,
    local_only: AtomicBool,
}

impl std::fmt::Debug for Pace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pace")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Pace {
    /// A rate this process keeps alone.
    pub fn local(limit: RateLimit) -> Self {
        Self {
            limit,
            local: Mutex::new((RateWindow::default(), Instant::now())),
            shared: None,
            local_only: AtomicBool::new(true),
        }
    }

    /// A rate kept in `store` when it is shared by replicas, else in this process.
    pub fn shared(limit: RateLimit, store: Arc<dyn Store>) -> Self {
        Self {
            shared: Some(store),
            local_only: AtomicBool::new(false),
            ..Self::local(limit)
        }
    }

    /// The limit in force.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// The most a paced grant gives at once.
    pub fn paced_max(&self) -> usize {
        self.limit.paced() as usize
    }

    /// Grants up to `want` operations now, all or none below `at_least` (see
    /// [`RateWindow::grant`]).
    pub async fn grant(&self, want: usize, at_least: usize, paced: bool) -> Grant {
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        let at_least = u32::try_from(at_least).unwrap_or(u32::MAX);
        if let (Some(store), false) = (&self.shared, self.local_only.load(Ordering::Relaxed)) {
            match store.take_rate(self.limit, want, at_least, paced).await {
                Ok(Some(grant)) => return grant,
                Ok(None) => self.local_only.store(true, Ordering::Relaxed),
                Err(e) => {
                    // Nothing leaves on a rate msgw cannot read: the calls wait (up to
                    // their deadlines) for the store to answer again.
                    tracing::warn!(error = %e, "the shared rate toward the gateway is unavailable");
                    return Grant {
                        granted: 0,
                        retry_in_ms: STORE_RETRY_MS,
                    };
                }
            }
        }
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let (window, epoch) = &mut *local;
        // Milliseconds since the pace began, from 1: 0 means "never" to the window.
        let now = i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX - 1) + 1;
        window.grant(self.limit, now, want, at_least, paced)
    }
}
