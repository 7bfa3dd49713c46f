//! Background work that runs every so often until msgw shuts down.

use std::time::Duration;

use tokio::{
    sync::watch,
    time::{Interval, MissedTickBehavior},
};

/// Ticks every `period` (the first tick at once) until the stop signal turns true.
pub struct Periodic {
    tick: Interval,
    stop: watch::Receiver<bool>,
}

impl Periodic {
    /// Ticks every `period`; a slow round delays the next tick instead of bunching them.
    pub fn new(period: Duration, stop: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { tick, stop }
    }

    /// Waits for the next tick: `true` to run a round, `false` once stopped.
    pub async fn next(&mut self) -> bool {
        // A stop signal (or its sender gone) wins over a tick that is due too.
        tokio::select! {
            biased;
            _ = self.stop.wait_for(|s| *s) => false,
            _ = self.tick.tick() => true,
        }
    }
}

/// Work that replicas sharing a store take turns at: a round runs on the replica
/// holding the store's lease `name`, renewed every round; when that replica stops,
/// another takes over once the lease (two periods) runs out.
pub struct Leased {
    store: std::sync::Arc<dyn crate::core::ports::store::Store>,
    name: &'static str,
    replica: String,
    ttl: Duration,
}

impl Leased {
    /// The lease `name`, held by `replica` for two periods at a time.
    pub fn new(
        store: std::sync::Arc<dyn crate::core::ports::store::Store>,
        name: &'static str,
        replica: String,
        period: Duration,
    ) -> Self {
        Self {
            store,
            name,
            replica,
            ttl: period.saturating_mul(2),
        }
    }

    /// Takes or renews the lease: whether this replica runs the round.
    pub async fn held(&self) -> bool {
        match self
            .store
            .try_lease(self.name, &self.replica, self.ttl, chrono::Utc::now())
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(lease = self.name, error = %e, "cannot take the lease of shared work; skipping this round");
                false
            }
        }
    }
}
