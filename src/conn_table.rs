//! The open connections of a port (the gRPC port, the webhook and admin listeners):
//! how many streams (HTTP/1: requests) each has open, since when each has been idle,
//! and which to close to make room at the cap.
//!
//! A connection is *idle* without any open stream (the idle timeout counts from
//! then), and *unguarded* when its only streams are on open paths (gRPC health and
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

use prometheus::{IntCounter, IntCounterVec, IntGauge};
use tokio::{sync::Notify, time::Instant};

use crate::metrics::Metrics;

/// Why msgw closed a connection (a metric label); `Client` when the client did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// The client closed the connection, or it failed.
    Client,
    /// No TLS handshake and HTTP/2 preface within the handshake timeout.
    HandshakeTimeout,
    /// HTTP/1: no complete request headers within the header timeout, on a new
    /// connection or between two requests.
    HeaderTimeout,
    /// No open stream for the idle timeout.
    Idle,
    /// Closed to make room for a new connection at the cap.
    Evicted,
    /// msgw is shutting down.
    Shutdown,
}

impl Close {
    /// The `reason` label of `msgw_grpc_connections_closed_total` and
    /// `msgw_http_connections_closed_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::HandshakeTimeout => "handshake_timeout",
            Self::HeaderTimeout => "header_timeout",
            Self::Idle => "idle",
            Self::Evicted => "evicted",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Connections over the cap that may still be closing, as a share of the cap: the
/// ceiling is `max + max / CLOSING_SHARE + 1`.
pub const CLOSING_SHARE: usize = 8;

/// Where a port's table counts its connections.
#[derive(Clone)]
pub struct ConnMetrics {
    open: IntGauge,
    max: IntGauge,
    closed: IntCounterVec,
    /// The `listener` label of an HTTP listener's series (the gRPC port's have none).
    listener: Option<&'static str>,
    /// Connections refused at the cap; `None`: the port waits instead.
    refused: Option<IntCounter>,
}

impl ConnMetrics {
    /// The gRPC port's series.
    pub fn grpc(metrics: &Metrics) -> Self {
        Self {
            open: metrics.grpc_connections_open.clone(),
            max: metrics.grpc_connections_max.clone(),
            closed: metrics.grpc_connections_closed.clone(),
            listener: None,
            refused: Some(metrics.grpc_connections_refused.clone()),
        }
    }

    /// The series of the HTTP listener named `listener` (`webhook`, `admin`).
    pub fn http(metrics: &Metrics, listener: &'static str) -> Self {
        Self {
            open: metrics.http_connections_open.with_label_values(&[listener]),
            max: metrics.http_connections_max.with_label_values(&[listener]),
            closed: metrics.http_connections_closed.clone(),
            listener: Some(listener),
            refused: None,
        }
    }

    fn closed(&self, reason: Close) {
        match self.listener {
            Some(listener) => self.closed.with_label_values(&[listener, reason.label()]),
            None => self.closed.with_label_values(&[reason.label()]),
        }
        .inc();
    }
}

/// Every open connection of a port.
pub struct Table {
    inner: Mutex<Inner>,
    max: usize,
    ceiling: usize,
    idle_timeout: Duration,
    /// A connection idle for less than this is not closed to make room.
    least_idle: Duration,
    metrics: ConnMetrics,
    /// Signalled whenever a connection is gone.
    removed: Notify,
    /// Signalled, once a new connection found no room ([`Table::admit`] said `None`),
    /// when one becomes evictable or is gone.
    freed: Notify,
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
    /// A new connection waits for room: signal `freed` on the next change that makes some.
    wanted: bool,
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
    pub fn new(max: usize, idle_timeout: Duration, metrics: ConnMetrics) -> Arc<Self> {
        Self::with_least_idle(max, idle_timeout, Duration::ZERO, metrics)
    }

    /// [`Table::new`], where a connection makes room only once it has been idle for
    /// `least_idle`: one just accepted may have sent its request without msgw having
    /// read it yet, and a flood of reconnecting clients must not close it before then.
    pub fn with_least_idle(
        max: usize,
        idle_timeout: Duration,
        least_idle: Duration,
        metrics: ConnMetrics,
    ) -> Arc<Self> {
        metrics.max.set(i64::try_from(max).unwrap_or(i64::MAX));
        Arc::new(Self {
            inner: Mutex::new(Inner::default()),
            max,
            ceiling: max + max / CLOSING_SHARE + 1,
            idle_timeout,
            least_idle,
            metrics,
            removed: Notify::new(),
            freed: Notify::new(),
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
        self.try_admit().ok()
    }

    /// [`Table::admit`], saying why not: `Err(Some(at))` when the connection to make
    /// room has been idle for less than the table's least idle time (it may at `at`),
    /// `Err(None)` when every open connection has a stream on msgw's services. Either
    /// way [`Table::freed`] resolves once a connection is gone or has become idle.
    pub fn try_admit(self: &Arc<Self>) -> Result<Arc<Conn>, Option<Instant>> {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.conns.len() - inner.closing.len() >= self.max {
            let victim = inner.idle.first().or_else(|| inner.unguarded.first());
            let Some(&(since, victim)) = victim else {
                inner.wanted = true;
                drop(inner);
                if let Some(refused) = &self.metrics.refused {
                    refused.inc();
                }
                return Err(None);
            };
            if since + self.least_idle > now {
                inner.wanted = true;
                return Err(Some(since + self.least_idle));
            }
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
            .open
            .set(i64::try_from(inner.conns.len()).unwrap_or(i64::MAX));
        Ok(conn)
    }

    /// Resolves once a connection may have become idle or gone since
    /// [`Table::try_admit`] last found no room (at once if it already has).
    pub async fn freed(&self) {
        self.freed.notified().await;
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
        let wanted = std::mem::take(&mut inner.wanted);
        drop(inner);
        self.metrics
            .open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
        self.metrics.closed(reason);
        self.removed.notify_waiters();
        if wanted {
            self.freed.notify_one();
        }
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
        if guarded == 0 && std::mem::take(&mut inner.wanted) {
            drop(inner);
            self.conn.table.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests;
