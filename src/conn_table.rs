//! The open connections of a port (the gRPC port, the webhook and admin listeners):
//! how many streams (HTTP/1: requests) each has open, since when each has been idle,
//! what each makes msgw hold, and which to close to make room.
//!
//! A connection is *idle* without any open stream (the idle timeout counts from
//! then); for eviction it is idle too when every stream it has is *stalled* (its
//! client has left the flow-control window shut). It is *unguarded* when its only
//! streams are on open paths (health and reflection, which need no token). At the
//! cap a new connection makes room by closing the connection idle longest, else the
//! one unguarded longest: a client without a token cannot hold the port with
//! `Health/Watch` streams. Connections told to close still hold their file until
//! they are gone, so the table also keeps a ceiling on all connections, closing or
//! not: at the ceiling the accept loop waits and the oldest closing connection is
//! dropped at once.
//!
//! An HTTP listener's table waits a moment before it closes a connection just
//! accepted (its request may be in the socket unread), and tells the accept loop when
//! room is freed instead of refusing.
//!
//! Memory (the gRPC port): each open stream counts a fixed cost, its request's headers and body,
//! and the answer msgw holds for it; the whole port's count is held under the
//! memory budget. A stream that would pass it is refused, and the connection that
//! holds the most is closed at once.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Arc, Mutex, MutexGuard, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use prometheus::{IntCounter, IntCounterVec, IntGauge};
use tokio::{sync::Notify, time::Instant};

use crate::metrics::Metrics;

/// What one open stream costs msgw beyond its headers and bodies (its task, HTTP/2
/// state, tonic's buffers, an event stream's subscription), measured with
/// `cargo bench --bench hostile`: 29 KiB of RSS per event stream left unread, 35 to
/// 41 KiB per reflection stream on a connection that reads nothing.
pub const STREAM_COST: usize = 32 * 1024;

/// Streams on open paths (health watches, reflection: no token needed) one
/// connection may have open at once; health checks, answered at once, are not held
/// to it, and msgw's own services may have up to
/// [`crate::grpc::port::MAX_STREAMS_PER_CONNECTION`].
pub const OPEN_PATH_STREAMS: usize = 8;

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
    /// It held the most when the port reached its memory budget.
    MemoryBudget,
    /// Its socket took no byte for the send timeout.
    SendTimeout,
    /// It did not answer a keepalive ping in time.
    KeepaliveTimeout,
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
            Self::MemoryBudget => "memory_budget",
            Self::SendTimeout => "send_timeout",
            Self::KeepaliveTimeout => "keepalive_timeout",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Why msgw refused a new stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The connection has [`OPEN_PATH_STREAMS`] health and reflection streams open.
    OpenPathStreams,
    /// The port holds its memory budget.
    MemoryBudget,
}

impl Refused {
    /// The `reason` label of `msgw_grpc_streams_refused_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::OpenPathStreams => "open_path_streams",
            Self::MemoryBudget => "memory_budget",
        }
    }

    /// The status message the client reads.
    pub fn message(self) -> &'static str {
        match self {
            Self::OpenPathStreams => {
                "too many health and reflection streams open on this connection: close some first"
            }
            Self::MemoryBudget => {
                "msgw is at its memory budget (MSGW_GRPC_MEMORY_BUDGET): retry with backoff"
            }
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
    /// The gRPC port's memory series.
    memory: Option<MemoryMetrics>,
}

/// What the gRPC port's streams hold, may hold, and how many are stalled.
#[derive(Clone)]
struct MemoryMetrics {
    held: IntGauge,
    budget: IntGauge,
    stalled: IntGauge,
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
            memory: Some(MemoryMetrics {
                held: metrics.grpc_held_bytes.clone(),
                budget: metrics.grpc_memory_budget.clone(),
                stalled: metrics.grpc_streams_stalled.clone(),
            }),
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
            memory: None,
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
    /// What the port's streams may hold in all, bytes.
    budget: usize,
    /// What the port's streams hold now, bytes.
    held: AtomicUsize,
    metrics: ConnMetrics,
    /// Signalled whenever a connection is gone.
    removed: Notify,
    /// Signalled, once a new connection found no room ([`Table::try_admit`]), when
    /// one becomes evictable or is gone.
    freed: Notify,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    conns: HashMap<u64, Entry>,
    /// Connections idle (no stream, or only stalled ones), not closing, longest first.
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
    /// Streams whose client has left the window shut.
    stalled: usize,
    /// Health checks in progress (open-path streams answered at once).
    probes: usize,
    /// Since when no stream has been open (the idle timeout counts from here).
    idle_since: Instant,
    /// Where the connection stands in `idle`, if it does.
    idle_key: Option<Instant>,
    /// Where the connection stands in `unguarded`, if it does.
    unguarded_key: Option<Instant>,
    closing_since: Option<Instant>,
    conn: Arc<Conn>,
}

impl Entry {
    /// Streams on open paths that stay open (health watches, reflection).
    fn open_path(&self) -> usize {
        self.streams - self.guarded - self.probes
    }
}

/// One connection's handle: how its task learns that it must close.
pub struct Conn {
    id: u64,
    table: Arc<Table>,
    /// What this connection's streams hold, bytes.
    held: AtomicUsize,
    reason: OnceLock<Close>,
    close: Notify,
    /// Set when the connection must go at once, without waiting for its client.
    abort: Notify,
}

/// An open stream of a connection (its clones share it): counted open, with what it
/// holds, until the last clone is dropped.
#[derive(Clone)]
pub struct StreamGuard(Arc<Stream>);

struct Stream {
    conn: Arc<Conn>,
    guarded: bool,
    probe: bool,
    held: AtomicUsize,
}

/// A stream marked stalled until this is dropped.
pub struct Stalled<'a>(&'a Stream);

impl Table {
    /// An empty table admitting `max` connections (and holding a few more while
    /// they close), whose streams may hold `budget` bytes in all.
    pub fn new(
        max: usize,
        idle_timeout: Duration,
        budget: usize,
        metrics: ConnMetrics,
    ) -> Arc<Self> {
        Self::build(max, idle_timeout, Duration::ZERO, budget, metrics)
    }

    /// An HTTP listener's table: as [`Table::new`] without a memory budget, where a
    /// connection makes room only once it has been idle for `least_idle` (one just
    /// accepted may have sent its request without msgw having read it yet, and a
    /// flood of reconnecting clients must not close it before then).
    pub fn with_least_idle(
        max: usize,
        idle_timeout: Duration,
        least_idle: Duration,
        metrics: ConnMetrics,
    ) -> Arc<Self> {
        Self::build(max, idle_timeout, least_idle, usize::MAX, metrics)
    }

    fn build(
        max: usize,
        idle_timeout: Duration,
        least_idle: Duration,
        budget: usize,
        metrics: ConnMetrics,
    ) -> Arc<Self> {
        metrics.max.set(i64::try_from(max).unwrap_or(i64::MAX));
        if let Some(memory) = &metrics.memory {
            memory.budget.set(i64::try_from(budget).unwrap_or(i64::MAX));
        }
        Arc::new(Self {
            inner: Mutex::new(Inner::default()),
            max,
            ceiling: max + max / CLOSING_SHARE + 1,
            idle_timeout,
            least_idle,
            budget,
            held: AtomicUsize::new(0),
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
            held: AtomicUsize::new(0),
            reason: OnceLock::new(),
            close: Notify::new(),
            abort: Notify::new(),
        });
        inner.conns.insert(
            id,
            Entry {
                streams: 0,
                guarded: 0,
                stalled: 0,
                probes: 0,
                idle_since: now,
                idle_key: None,
                unguarded_key: None,
                closing_since: None,
                conn: conn.clone(),
            },
        );
        inner.refile(id, now);
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

    /// What the port's streams hold now, bytes.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    fn add_held(&self, conn: &Conn, bytes: usize) {
        conn.held.fetch_add(bytes, Ordering::Relaxed);
        self.held.fetch_add(bytes, Ordering::Relaxed);
        if let Some(memory) = &self.metrics.memory {
            memory.held.add(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    fn sub_held(&self, conn: &Conn, bytes: usize) {
        conn.held.fetch_sub(bytes, Ordering::Relaxed);
        self.held.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(memory) = &self.metrics.memory {
            memory.held.sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// Wakes a connection waiting for room, if one is, after `inner` changed.
    fn wake_waiting(&self, mut inner: MutexGuard<'_, Inner>, freed: bool) {
        if freed && std::mem::take(&mut inner.wanted) {
            drop(inner);
            self.freed.notify_one();
        }
    }

    fn remove(&self, id: u64, reason: Close) {
        let mut inner = self.lock();
        if let Some(entry) = inner.conns.remove(&id) {
            inner.forget(id, &entry);
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
    fn forget(&mut self, id: u64, entry: &Entry) {
        if let Some(since) = entry.idle_key {
            self.idle.remove(&(since, id));
        }
        if let Some(since) = entry.unguarded_key {
            self.unguarded.remove(&(since, id));
        }
        if let Some(since) = entry.closing_since {
            self.closing.remove(&(since, id));
        }
    }

    /// Puts connection `id` where its streams place it now: idle (no stream, or only
    /// stalled ones), unguarded (only open-path streams), or neither; a connection
    /// keeps its place (and its age there) while it stays. True when it has just
    /// become one to make room with.
    fn refile(&mut self, id: u64, now: Instant) -> bool {
        let Inner {
            conns,
            idle,
            unguarded,
            ..
        } = self;
        let Some(entry) = conns.get_mut(&id) else {
            return false;
        };
        let mut freed = false;
        let open = entry.closing_since.is_none();
        let is_idle = open && entry.stalled == entry.streams;
        let is_unguarded = open && !is_idle && entry.guarded == 0;
        for (set, key, wanted) in [
            (idle, &mut entry.idle_key, is_idle),
            (unguarded, &mut entry.unguarded_key, is_unguarded),
        ] {
            match (*key, wanted) {
                (Some(since), false) => {
                    set.remove(&(since, id));
                    *key = None;
                }
                (None, true) => {
                    set.insert((now, id));
                    *key = Some(now);
                    freed = true;
                }
                _ => {}
            }
        }
        freed
    }

    /// Marks connection `id` as closing; its handle, unless it already was.
    fn mark_closing(&mut self, id: u64, now: Instant) -> Option<Arc<Conn>> {
        let entry = self.conns.get_mut(&id)?;
        if entry.closing_since.is_some() {
            return None;
        }
        entry.closing_since = Some(now);
        let conn = entry.conn.clone();
        self.closing.insert((now, id));
        self.refile(id, now);
        Some(conn)
    }

    /// The connection, not closing yet, whose streams hold the most.
    fn heaviest(&self) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, e)| e.closing_since.is_none())
            .max_by_key(|(_, e)| e.conn.held.load(Ordering::Relaxed))
            .map(|(&id, _)| id)
    }
}

impl Conn {
    /// Counts a new stream whose request headers take `header_bytes`; the connection
    /// is not idle while the guard lives, and not evictable while a `guarded` one (on
    /// msgw's own services) lives. Refused when the connection has its share of
    /// open-path streams, or when the port is at its memory budget (the connection
    /// holding the most is then closed at once), unless it is a health `probe`.
    pub fn stream_opened(
        self: &Arc<Self>,
        guarded: bool,
        probe: bool,
        header_bytes: usize,
    ) -> Result<StreamGuard, Refused> {
        let table = &self.table;
        let cost = STREAM_COST + header_bytes;
        let now = Instant::now();
        let mut inner = table.lock();
        // A health check is answered at once: only streams that stay open (health
        // watches, reflection) are held to the connection's share.
        if let Some(entry) = inner.conns.get(&self.id)
            && !guarded
            && !probe
            && entry.open_path() >= OPEN_PATH_STREAMS
        {
            return Err(Refused::OpenPathStreams);
        }
        let held = table.held();
        if held + cost > table.budget {
            // Connections already closing let go of theirs soon: close another only if
            // that is not enough, so a burst at the budget does not close them all.
            let leaving: usize = inner
                .closing
                .iter()
                .filter_map(|(_, id)| inner.conns.get(id))
                .map(|e| e.conn.held())
                .sum();
            let heaviest = if held.saturating_sub(leaving) + cost > table.budget {
                inner.heaviest().and_then(|id| inner.mark_closing(id, now))
            } else {
                None
            };
            if let Some(conn) = heaviest {
                tracing::warn!(
                    held = conn.held(),
                    budget = table.budget,
                    "gRPC port: at the memory budget (MSGW_GRPC_MEMORY_BUDGET): closing the connection that holds the most"
                );
                conn.signal(Close::MemoryBudget);
                conn.abort.notify_one();
            }
            // A health check is served all the same: it holds nothing for long.
            if !probe {
                return Err(Refused::MemoryBudget);
            }
        }
        if let Some(entry) = inner.conns.get_mut(&self.id) {
            entry.streams += 1;
            entry.guarded += usize::from(guarded);
            entry.probes += usize::from(probe);
            inner.refile(self.id, now);
        }
        drop(inner);
        table.add_held(self, cost);
        Ok(StreamGuard(Arc::new(Stream {
            conn: self.clone(),
            guarded,
            probe,
            held: AtomicUsize::new(cost),
        })))
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

impl StreamGuard {
    /// Counts `bytes` more held by the stream until [`release`](Self::release)d.
    pub fn hold(&self, bytes: usize) {
        self.0.held.fetch_add(bytes, Ordering::Relaxed);
        self.0.conn.table.add_held(&self.0.conn, bytes);
    }

    /// Counts `bytes` the stream no longer holds.
    pub fn release(&self, bytes: usize) {
        self.0.held.fetch_sub(bytes, Ordering::Relaxed);
        self.0.conn.table.sub_held(&self.0.conn, bytes);
    }

    /// Marks the stream stalled (its client leaves the window shut) until the mark
    /// is dropped: a connection whose streams are all stalled counts as idle.
    pub fn stalled(&self) -> Stalled<'_> {
        self.0.set_stalled(true);
        Stalled(&self.0)
    }
}

impl Stream {
    fn set_stalled(&self, stalled: bool) {
        let table = &self.conn.table;
        if let Some(memory) = &table.metrics.memory {
            if stalled {
                memory.stalled.inc();
            } else {
                memory.stalled.dec();
            }
        }
        let mut inner = table.lock();
        let Some(entry) = inner.conns.get_mut(&self.conn.id) else {
            return;
        };
        if stalled {
            entry.stalled += 1;
        } else {
            entry.stalled -= 1;
        }
        let freed = inner.refile(self.conn.id, Instant::now());
        table.wake_waiting(inner, freed);
    }
}

impl Drop for Stalled<'_> {
    fn drop(&mut self) {
        self.0.set_stalled(false);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let now = Instant::now();
        let table = &self.conn.table;
        table.sub_held(&self.conn, self.held.load(Ordering::Relaxed));
        let id = self.conn.id;
        let mut inner = table.lock();
        let Some(entry) = inner.conns.get_mut(&id) else {
            return;
        };
        entry.streams -= 1;
        entry.guarded -= usize::from(self.guarded);
        entry.probes -= usize::from(self.probe);
        if entry.streams == 0 {
            entry.idle_since = now;
        }
        let freed = inner.refile(id, now);
        table.wake_waiting(inner, freed);
    }
}

#[cfg(test)]
mod tests;
