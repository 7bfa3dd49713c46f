//! Files msgw re-reads while it runs (the callers file, TLS certificates): mounted
//! Kubernetes Secrets change by an atomic symlink swap, so the contents are compared,
//! not modification times.

use std::{path::PathBuf, time::Duration};

use tokio::sync::watch;

use crate::base::metrics::Metrics;

/// How often watched files are read for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Watches `paths`; whenever the contents of any of them change, calls `reload`.
/// `what` names them in logs and in the metric's `file` label (a bare word).
/// A failed reload is logged and keeps what was loaded before (a half-written
/// rotation must not lock every caller out); it is retried on the next change.
/// Each reload is counted in `metrics`. Returns when `stop` turns true.
pub async fn watch(
    what: &'static str,
    paths: Vec<PathBuf>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
    metrics: &Metrics,
    mut reload: impl FnMut() -> Result<(), String> + Send,
) {
    let mut seen = read_all(&paths).await;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let now = read_all(&paths).await;
        if now == seen {
            continue;
        }
        seen = now;
        let outcome = match reload() {
            Ok(()) => {
                tracing::info!(what, "reloaded");
                "loaded"
            }
            Err(error) => {
                tracing::error!(what, %error, "reload failed: keeping what was loaded before");
                "failed"
            }
        };
        metrics
            .config_reloads
            .with_label_values(&[what, outcome])
            .inc();
    }
}

/// Each file's contents, `None` where it cannot be read (a reload then says why).
async fn read_all(paths: &[PathBuf]) -> Vec<Option<Vec<u8>>> {
    let mut all = Vec::with_capacity(paths.len());
    for path in paths {
        all.push(tokio::fs::read(path).await.ok());
    }
    all
}
