//! The gRPC port's open connections: how many streams each has open, since when
//! each has been idle, and which to close to make room at the cap.
//!
//! A connection is *idle* without any open stream (the idle timeout counts from
//! then), and *unguarded* when its only streams are on open paths (health and
//! reflection, which need no token). At the cap a new connection makes room by
//! closing the connection idle longest, else the one unguarded longest: a client
//! without a token cannot hold the port with `Health/Watch` streams. Connections told
//! to close still hold their file until they are gone, so the table also keeps a
//! ceiling on all connections, closing or not: at the ceiling the accept loop waits
//! and the oldest closing connection is dropped at once.

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
    /// Closed to make room for a new connection at the cap.
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

/// Connections over the cap that may still be closing, as a share of the cap: the
/// ceiling is `max + max / CLOSING_SHARE + 1`.
pub const CLOSING_SHARE: usize = 8;

/// Every open connection of the gRPC port.
pub struct Table {
    inner: Mutex<Inner>,
    max: usize,
    ceiling: usize,
    idle_timeout: Duration,
    metrics: Arc<Metrics>,
    /// Signalled whenever a connection is gone.
    removed: Notify,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    conns: HashMap<u64, Entry>,
    /// Connections without an open stream, not closing, longest idle first.
    idle: BTreeSet<(Instant, u64)>,
    /// Connections whose streams are all on open paths, not closing, longest first.
    unguarded: BTreeSet<(Instant, u64)>,
    /// Connections told to close that are still open, oldest first.
    closing: BTreeSet<(Instant, u64)>,
}

struct Entry {
    streams: usize,
    /// Streams on msgw's own services (not health or reflection).
    guarded: usize,
    idle_since: Instant,
    unguarded_since: Instant,
    closing_since: Option<Instant>,
    conn: Arc<Conn>,
}

impl Entry {
    fn key(&self, since: Instant) -> (Instant, u64) {
        (since, self.conn.id)
    }
}

/// One connection's handle: how its task learns that it must close.
pub struct Conn {
    id: u64,
    table: Arc<Table>,
    spoke: AtomicBool,
    reason: OnceLock<Close>,
    close: Notify,
    /// Set when the connection must go at once, without waiting for its client.
    abort: Notify,
}

/// An open stream of a connection; the connection is idle again once every guard is
/// dropped.
pub struct StreamGuard {
    conn: Arc<Conn>,
    guarded: bool,
}

impl Table {
    /// An empty table admitting `max` connections (and holding a few more while
    /// they close).
    pub fn new(max: usize, idle_timeout: Duration, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics
            .grpc_connections_max
            .set(i64::try_from(max).unwrap_or(i64::MAX));
        Arc::new(Self {
            inner: Mutex::new(Inner::default()),
            max,
            ceiling: max + max / CLOSING_SHARE + 1,
            idle_timeout,
            metrics,
            removed: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves once a just-accepted connection may be admitted: fewer than the
    /// ceiling are open, closing ones included. At the ceiling the oldest closing
    /// connection is dropped at once.
    pub async fn room(&self) {
        loop {
            let removed = self.removed.notified();
            {
                let inner = self.lock();
                if inner.conns.len() < self.ceiling {
                    return;
                }
                if let Some(&(_, oldest)) = inner.closing.first()
                    && let Some(entry) = inner.conns.get(&oldest)
                {
                    entry.conn.abort.notify_one();
                }
            }
            removed.await;
        }
    }

    /// Admits a new connection. At the cap, the connection idle longest (else the one
    /// with only open-path streams for longest) is told to close to make room;
    /// `None` when every open connection has a stream on msgw's services.
    pub fn admit(self: &Arc<Self>) -> Option<Arc<Conn>> {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.conns.len() - inner.closing.len() >= self.max {
            let victim = inner
                .idle
                .first()
                .or_else(|| inner.unguarded.first())
                .map(|&(_, id)| id);
            let Some(victim) = victim else {
                drop(inner);
                self.metrics.grpc_connections_refused.inc();
                return None;
            };
            if let Some(conn) = inner.mark_closing(victim, now) {
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
            abort: Notify::new(),
        });
        inner.conns.insert(
            id,
            Entry {
                streams: 0,
                guarded: 0,
                idle_since: now,
                unguarded_since: now,
                closing_since: None,
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
            let removed = self.removed.notified();
            if self.lock().conns.is_empty() {
                return;
            }
            removed.await;
        }
    }

    fn remove(&self, id: u64, reason: Close) {
        let mut inner = self.lock();
        if let Some(entry) = inner.conns.remove(&id) {
            inner.forget(&entry);
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
        self.removed.notify_waiters();
    }
}

impl Inner {
    /// Takes `entry` out of every ordering.
    fn forget(&mut self, entry: &Entry) {
        self.idle.remove(&entry.key(entry.idle_since));
        self.unguarded.remove(&entry.key(entry.unguarded_since));
        if let Some(since) = entry.closing_since {
            self.closing.remove(&entry.key(since));
        }
    }

    /// Marks connection `id` as closing; its handle, unless it already was.
    fn mark_closing(&mut self, id: u64, now: Instant) -> Option<Arc<Conn>> {
        let entry = self.conns.get(&id)?;
        if entry.closing_since.is_some() {
            return None;
        }
        let (idle, unguarded, conn) = (
            entry.key(entry.idle_since),
            entry.key(entry.unguarded_since),
            entry.conn.clone(),
        );
        self.idle.remove(&idle);
        self.unguarded.remove(&unguarded);
        self.closing.insert((now, id));
        if let Some(entry) = self.conns.get_mut(&id) {
            entry.closing_since = Some(now);
        }
        Some(conn)
    }
}

impl Conn {
    /// Counts a new stream; the connection is not idle while the guard lives, and not
    /// evictable while a `guarded` one (on msgw's own services) lives.
    pub fn stream_opened(self: &Arc<Self>, guarded: bool) -> StreamGuard {
        let mut inner = self.table.lock();
        if let Some(entry) = inner.conns.get_mut(&self.id) {
            entry.streams += 1;
            if guarded {
                entry.guarded += 1;
            }
            let (streams, guarded_now, closing) =
                (entry.streams, entry.guarded, entry.closing_since.is_some());
            let (idle, unguarded) = (
                entry.key(entry.idle_since),
                entry.key(entry.unguarded_since),
            );
            if !closing {
                if streams == 1 {
                    inner.idle.remove(&idle);
                    if guarded_now == 0 {
                        inner.unguarded.insert(unguarded);
                    }
                }
                if guarded && guarded_now == 1 {
                    inner.unguarded.remove(&unguarded);
                }
            }
        }
        StreamGuard {
            conn: self.clone(),
            guarded,
        }
    }

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

    fn signal(&self, reason: Close) {
        let _ = self.reason.set(reason);
        self.close.notify_one();
    }

    /// Resolves once the connection has been told to close; returns why.
    pub async fn closing(&self) -> Close {
        self.close.notified().await;
        self.reason.get().copied().unwrap_or(Close::Shutdown)
    }

    /// Resolves when the connection must go at once (msgw is at its ceiling).
    pub async fn aborted(&self) {
        self.abort.notified().await;
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
        let id = self.conn.id;
        let mut inner = self.conn.table.lock();
        let Some(entry) = inner.conns.get_mut(&id) else {
            return;
        };
        entry.streams -= 1;
        if self.guarded {
            entry.guarded -= 1;
        }
        let closing = entry.closing_since.is_some();
        let (streams, guarded) = (entry.streams, entry.guarded);
        let old_unguarded = entry.key(entry.unguarded_since);
        if self.guarded && guarded == 0 {
            entry.unguarded_since = now;
        }
        if streams == 0 {
            entry.idle_since = now;
        }
        if closing {
            return;
        }
        inner.unguarded.remove(&old_unguarded);
        if streams == 0 {
            inner.idle.insert((now, id));
        } else if guarded == 0 {
            let since = inner.conns.get(&id).map_or(now, |e| e.unguarded_since);
            inner.unguarded.insert((since, id));
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
        let _busy = first.stream_opened(true);
        // `first` has a stream open: `second` is the one to go.
        let third = table.admit().unwrap();
        assert_eq!(second.closing().await, Close::Evicted);
        // Every connection not closing has a stream open: refused.
        let _busy_third = third.stream_opened(true);
        assert!(table.admit().is_none());
        second.finished();
        assert!(
            table.admit().is_none(),
            "still full: first and third are busy"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn streams_needing_no_token_do_not_keep_a_connection_at_the_cap() {
        let table = Table::new(2, Duration::from_secs(60), Metrics::new());
        let watcher = table.admit().unwrap();
        let _watch = watcher.stream_opened(false);
        let caller = table.admit().unwrap();
        let _call = caller.stream_opened(true);
        let newcomer = table.admit().expect("the health watcher makes room");
        assert_eq!(watcher.closing().await, Close::Evicted);
        drop(newcomer);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_from_its_last_stream_on() {
        let table = Table::new(8, Duration::from_secs(60), Metrics::new());
        let conn = table.admit().unwrap();
        let start = Instant::now();
        assert_eq!(conn.idle_deadline(), Some(start + Duration::from_secs(60)));
        let stream = conn.stream_opened(true);
        assert_eq!(conn.idle_deadline(), None);
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(stream);
        assert_eq!(conn.idle_deadline(), Some(start + Duration::from_secs(70)));
        conn.finished();
        table.emptied().await;
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_ceiling_the_oldest_closing_connection_is_dropped_at_once() {
        // Cap 8: the ceiling is 10 connections, closing ones included.
        let table = Table::new(8, Duration::from_secs(60), Metrics::new());
        let mut conns: Vec<_> = (0..8).map(|_| table.admit().unwrap()).collect();
        conns.push(table.admit().unwrap()); // evicts conns[0]
        conns.push(table.admit().unwrap()); // evicts conns[1]
        let waiting = {
            let table = table.clone();
            tokio::spawn(async move { table.room().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "at the ceiling");
        conns[0].aborted().await;
        conns[0].finished();
        waiting.await.unwrap();
    }
}
