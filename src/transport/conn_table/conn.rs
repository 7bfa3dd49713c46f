//! One connection's handle: how its task learns that it must close, and what its
//! streams hold.

use std::sync::{
    Arc, OnceLock,
    atomic::{AtomicUsize, Ordering},
};

use tokio::{sync::Notify, time::Instant};

use super::{CallerHeld, Close, Table};

/// One connection's handle: how its task learns that it must close.
pub struct Conn {
    pub(super) id: u64,
    pub(super) table: Arc<Table>,
    /// What this connection's streams hold, bytes.
    pub(super) held: AtomicUsize,
    /// The caller of its first authenticated stream (clients keep one token per
    /// connection): whose connection it is when one must go for memory.
    pub(super) caller: OnceLock<Arc<CallerHeld>>,
    pub(super) reason: OnceLock<Close>,
    pub(super) close: Notify,
    /// Set when the connection must go at once, without waiting for its client.
    pub(super) abort: Notify,
}

impl Conn {
    /// When the connection becomes idle for too long: `None` while a stream is open.
    pub fn idle_deadline(&self) -> Option<Instant> {
        let inner = self.table.lock();
        let entry = inner.conns.get(&self.id)?;
        (entry.streams == 0).then(|| entry.idle_since + self.table.idle_timeout)
    }

    /// Marks the connection as closing for `reason` (the first reason given wins).
    pub fn close(&self, reason: Close) {
        let marked = self.table.lock().mark_closing(self.id, Instant::now());
        if marked.is_some() {
            self.signal(reason);
        }
    }

    pub(super) fn signal(&self, reason: Close) {
        let _ = self.reason.set(reason);
        self.close.notify_one();
    }

    /// Resolves once the connection has been told to close; returns why.
    pub async fn closing(&self) -> Close {
        self.close.notified().await;
        self.reason.get().copied().unwrap_or(Close::Shutdown)
    }

    /// Resolves when the connection must go at once (msgw is at its ceiling, or at
    /// its memory budget and this connection holds the most).
    pub async fn aborted(&self) {
        self.abort.notified().await;
    }

    /// Why msgw told the connection to close, if it did.
    pub fn closed_for(&self) -> Option<Close> {
        self.reason.get().copied()
    }

    /// What this connection's streams hold now, bytes.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Takes the connection out of the table, counted under the reason msgw closed it
    /// for, or `Client`.
    pub fn finished(&self) {
        let reason = self.reason.get().copied().unwrap_or(Close::Client);
        self.table.remove(self.id, reason);
    }
}
