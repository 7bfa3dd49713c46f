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
