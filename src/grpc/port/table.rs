//! The gRPC port's open connections: how many streams each has open, since when
//! each has been idle, and which to close to make room at the cap.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Arc, Mutex, MutexGuard, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use crate::metrics::Metrics;

/// Why msgw closed a connection (a metric label); `Client` when the client did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// The client closed the connection, or it failed.
    Client,
    /// No TLS handshake and HTTP/2 preface within the handshake timeout.
    HandshakeTimeout,
    /// No open stream for the idle timeout.
    Idle,
    /// The longest idle connection, closed to make room for a new one at the cap.
    Evicted,
    /// msgw is shutting down.
    Shutdown,
}

impl Close {
    /// The `reason` label of `msgw_grpc_connections_closed_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::HandshakeTimeout => "handshake_timeout",
            Self::Idle => "idle",
            Self::Evicted => "evicted",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Every open connection of the gRPC port.
pub struct Table {
    inner: Mutex<Inner>,
    max: usize,
    idle_timeout: Duration,
    metrics: Arc<Metrics>,
    /// Signalled when the last connection is gone.
    emptied: Notify,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    conns: HashMap<u64, Entry>,
    /// Connections without an open stream that are not closing yet, longest idle first.
    idle: BTreeSet<(Instant, u64)>,
    /// Connections told to close that are still open: they no longer count at the cap.
    closing: usize,
}

struct Entry {
    streams: usize,
    idle_since: Instant,
    closing: bool,
    conn: Arc<Conn>,
}

/// One connection's handle: how its task learns that it must close.
pub struct Conn {
    id: u64,
    table: Arc<Table>,
    spoke: AtomicBool,
    reason: OnceLock<Close>,
    close: Notify,
}

/// An open stream of a connection; the connection is idle again once every guard is
/// dropped.
pub struct StreamGuard(Arc<Conn>);

impl Table {
    /// An empty table holding at most `max` connections.
    pub fn new(max: usize, idle_timeout: Duration, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics
            .grpc_connections_max
            .set(i64::try_from(max).unwrap_or(i64::MAX));
        Arc::new(Self {
            inner: Mutex::new(Inner::default()),
            max,
            idle_timeout,
            metrics,
            emptied: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new connection. At the cap, the connection idle longest is told to
    /// close to make room; `None` when every open connection has a stream open.
    pub fn admit(self: &Arc<Self>) -> Option<Arc<Conn>> {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.conns.len() - inner.closing >= self.max {
            let Some((_, victim)) = inner.idle.pop_first() else {
                drop(inner);
                self.metrics.grpc_connections_refused.inc();
                return None;
            };
            if let Some(entry) = inner.conns.get_mut(&victim) {
                entry.closing = true;
                let conn = entry.conn.clone();
                inner.closing += 1;
                conn.signal(Close::Evicted);
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let conn = Arc::new(Conn {
            id,
            table: self.clone(),
            spoke: AtomicBool::new(false),
            reason: OnceLock::new(),
            close: Notify::new(),
        });
        inner.conns.insert(
            id,
            Entry {
                streams: 0,
                idle_since: now,
                closing: false,
                conn: conn.clone(),
            },
        );
        inner.idle.insert((now, id));
        self.metrics
            .grpc_connections_open
            .set(i64::try_from(inner.conns.len()).unwrap_or(i64::MAX));
        Some(conn)
    }

    /// Resolves once no connection is open.
    pub async fn emptied(&self) {
        loop {
            let emptied = self.emptied.notified();
            if self.lock().conns.is_empty() {
                return;
            }
            emptied.await;
        }
    }

    fn remove(&self, id: u64, reason: Close) {
        let mut inner = self.lock();
        if let Some(entry) = inner.conns.remove(&id) {
            if entry.closing {
                inner.closing -= 1;
            } else if entry.streams == 0 {
                inner.idle.remove(&(entry.idle_since, id));
            }
        }
        let open = inner.conns.len();
        drop(inner);
        self.metrics
            .grpc_connections_open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
        self.metrics
            .grpc_connections_closed
            .with_label_values(&[reason.label()])
            .inc();
        if open == 0 {
            self.emptied.notify_waiters();
        }
    }
}

impl Conn {
    /// Counts a new stream; the connection is not idle while the guard lives.
    pub fn stream_opened(self: &Arc<Self>) -> StreamGuard {
        let mut inner = self.table.lock();
        if let Some(entry) = inner.conns.get_mut(&self.id) {
            entry.streams += 1;
            if entry.streams == 1 && !entry.closing {
                let since = entry.idle_since;
                inner.idle.remove(&(since, self.id));
            }
        }
        StreamGuard(self.clone())
    }

    /// When the connection becomes idle for too long: `None` while a stream is open.
    pub fn idle_deadline(&self) -> Option<Instant> {
        let inner = self.table.lock();
        let entry = inner.conns.get(&self.id)?;
        (entry.streams == 0).then(|| entry.idle_since + self.table.idle_timeout)
    }

    /// Marks the connection as closing for `reason` (the first reason given wins).
    pub fn close(&self, reason: Close) {
        let mut inner = self.table.lock();
        let Some(entry) = inner.conns.get_mut(&self.id) else {
            return;
        };
        if entry.closing {
            return;
        }
        entry.closing = true;
        let (streams, since) = (entry.streams, entry.idle_since);
        inner.closing += 1;
        if streams == 0 {
            inner.idle.remove(&(since, self.id));
        }
        drop(inner);
        self.signal(reason);
    }

    fn signal(&self, reason: Close) {
        let _ = self.reason.set(reason);
        self.close.notify_one();
    }

    /// Resolves once the connection has been told to close; returns why.
    pub async fn closing(&self) -> Close {
        self.close.notified().await;
        self.reason.get().copied().unwrap_or(Close::Shutdown)
    }

    /// Why msgw told the connection to close, if it did.
    pub fn closed_for(&self) -> Option<Close> {
        self.reason.get().copied()
    }

    /// The client has sent the HTTP/2 preface.
    pub fn mark_spoke(&self) {
        self.spoke.store(true, Ordering::Relaxed);
    }

    /// Whether the client has sent the HTTP/2 preface.
    pub fn spoke(&self) -> bool {
        self.spoke.load(Ordering::Relaxed)
    }

    /// Takes the connection out of the table, counted under the reason msgw closed it
    /// for, or `Client`.
    pub fn finished(&self) {
        let reason = self.reason.get().copied().unwrap_or(Close::Client);
        self.table.remove(self.id, reason);
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let now = Instant::now();
        let id = self.0.id;
        let mut inner = self.0.table.lock();
        let Some(entry) = inner.conns.get_mut(&id) else {
            return;
        };
        entry.streams -= 1;
        if entry.streams == 0 {
            entry.idle_since = now;
            if !entry.closing {
                inner.idle.insert((now, id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_longest_idle_connection_makes_room() {
        let table = Table::new(2, Duration::from_secs(60), Metrics::new());
        let first = table.admit().unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let second = table.admit().unwrap();
        let _busy = first.stream_opened();
        // `first` has a stream open: `second` is the one to go.
        let third = table.admit().unwrap();
        assert_eq!(second.closing().await, Close::Evicted);
        // Every connection not closing has a stream open: refused.
        let _busy_third = third.stream_opened();
        assert!(table.admit().is_none());
        second.finished();
        assert!(
            table.admit().is_none(),
            "still full: first and third are busy"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_from_its_last_stream_on() {
        let table = Table::new(8, Duration::from_secs(60), Metrics::new());
        let conn = table.admit().unwrap();
        let start = Instant::now();
        assert_eq!(conn.idle_deadline(), Some(start + Duration::from_secs(60)));
        let stream = conn.stream_opened();
        assert_eq!(conn.idle_deadline(), None);
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(stream);
        assert_eq!(conn.idle_deadline(), Some(start + Duration::from_secs(70)));
        conn.finished();
        table.emptied().await;
    }
}
