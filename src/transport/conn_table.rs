//! The open connections of a port (the gRPC port, the webhook and admin listeners):
//! how many streams (HTTP/1: requests) each has open, since when each has been idle,
//! what each makes msgw hold, and which to close to make room.
//!
//! A connection is *idle* without any open stream (the idle timeout counts from
//! then); for eviction it is idle too when every stream it has is *stalled* (its
//! client has left the flow-control window shut). It is *unguarded* when its only
//! streams are on open paths (health and reflection, which need no token). At the
//! cap a new connection makes room by closing the idle connection that never carried
//! a caller's stream longest, else the connection idle longest, else the one
//! unguarded longest: connections that never make a call churn among themselves
//! before a caller's idle one goes, and a client without a token cannot hold the port
//! with `Health/Watch` streams. Connections told to close still hold their file until
//! they are gone, so the table also keeps a ceiling on all connections, closing or
//! not: at the ceiling the accept loop waits and the oldest closing connection is
//! dropped at once.
//!
//! An HTTP listener's table waits a moment before it closes a connection just
//! accepted (its request may be in the socket unread), and tells the accept loop when
//! room is freed instead of refusing.
//!
//! Memory (the gRPC port): each connection counts a fixed cost ([`CONN_COST`]: its
//! buffers, HTTP/2 state, a header block being received), and at the budget a new
//! connection makes room by closing the one idle longest, as at the cap. Each open
//! stream counts a fixed cost, its request's headers and body (and the window its
//! unfinished body was granted),
//! the answer msgw holds for it, and what msgw loads for it (an event stream's replay,
//! a status waiter); the whole port's count is held under the memory budget, and each
//! caller's under its share of it. A stream that would pass either is refused; at the
//! budget the connection holding the most of the caller holding the most is closed at
//! once. A request body is given flow-control window only while its caller is under
//! its share and the port under its budget.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, MutexGuard, OnceLock, atomic::AtomicUsize},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

mod by_message;
mod callers;
mod conn;
mod metrics;
mod streams;

pub use callers::CallerHeld;
pub use conn::Conn;
pub use metrics::ConnMetrics;
pub use streams::{OPEN_PATH_STREAMS, Refused, Room, STREAM_COST, StreamGuard};

use crate::core::held::HeldKind;

/// What one gRPC connection costs msgw before any stream (its socket's buffers, HTTP/2
/// state and HPACK table, its task, a request's header block while it arrives),
/// measured with raw HTTP/2 clients under a 256 MiB memory group: 35 KiB of RSS per
/// connection that sent only its preface, 70 KiB per connection holding a 16 KiB
/// header block unfinished.
pub const CONN_COST: usize = 72 * 1024;

/// The connections a gRPC port's memory budget has room for when nobody sets a cap:
/// their fixed costs take at most half of it, the rest is for their streams.
pub fn connections_within(budget: usize) -> usize {
    (budget / 2 / CONN_COST).max(1)
}

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

/// Connections over the cap that may still be closing, as a share of the cap: the
/// ceiling is `max + max / CLOSING_SHARE + 1`.
pub const CLOSING_SHARE: usize = 8;

/// Every open connection of a port.
pub struct Table {
    inner: Mutex<Inner>,
    max: usize,
    ceiling: usize,
    idle_timeout: Duration,
    /// A connection idle for less than this is not closed to make room.
    least_idle: Duration,
    /// What the port's connections and streams may hold in all, bytes.
    budget: usize,
    /// What one connection counts before its streams ([`CONN_COST`] on the gRPC
    /// port; the HTTP listeners count no memory).
    conn_cost: usize,
    /// What the port's streams hold now, bytes.
    held: AtomicUsize,
    /// Each caller's share of the budget, unless its entry gives its own.
    caller_share: f64,
    /// Every caller's account, by label.
    accounts: Mutex<HashMap<Arc<str>, Arc<CallerHeld>>>,
    /// Request bodies waiting for room to be given window again.
    throttled: AtomicUsize,
    /// Signalled, while some are, when streams let go of bytes.
    room: Arc<Notify>,
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
    /// Connections idle (no stream, or only stalled ones), not closing, that never
    /// carried a caller's stream, longest first: the first to make room, so a flood of
    /// connections that never make a call cannot close the callers' own.
    unclaimed: BTreeSet<(Instant, u64)>,
    /// The other idle connections, not closing, longest first.
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
    /// Where the connection stands in `unclaimed`, if it does.
    unclaimed_key: Option<Instant>,
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

impl Table {
    /// An empty table admitting `max` connections (and holding a few more while
    /// they close), whose streams may hold `budget` bytes in all, and each caller's
    /// `caller_share` of it unless its entry says otherwise.
    pub fn new(
        max: usize,
        idle_timeout: Duration,
        budget: usize,
        caller_share: f64,
        metrics: ConnMetrics,
    ) -> Arc<Self> {
        Self::build(
            max,
            idle_timeout,
            Duration::ZERO,
            (budget, CONN_COST),
            caller_share,
            metrics,
        )
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
        Self::build(max, idle_timeout, least_idle, (usize::MAX, 0), 1.0, metrics)
    }

    fn build(
        max: usize,
        idle_timeout: Duration,
        least_idle: Duration,
        (budget, conn_cost): (usize, usize),
        caller_share: f64,
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
            conn_cost,
            held: AtomicUsize::new(0),
            caller_share,
            accounts: Mutex::default(),
            throttled: AtomicUsize::new(0),
            room: Arc::new(Notify::new()),
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
    /// `None` when every open connection has a stream on msgw's services. At the
    /// memory budget one is told to close the same way, if one can be; if none can,
    /// the new connection is admitted all the same (a prober's new connection must
    /// get its answer), its cost counted: the cap bounds the connections.
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
        let at_cap = inner.conns.len() - inner.closing.len() >= self.max;
        let at_budget = self.conn_cost > 0 && self.held() + self.conn_cost > self.budget;
        let victim = inner
            .unclaimed
            .first()
            .or_else(|| inner.idle.first())
            .or_else(|| inner.unguarded.first())
            .copied();
        if at_cap || (at_budget && victim.is_some()) {
            let Some((since, victim)) = victim else {
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
            caller: OnceLock::new(),
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
                unclaimed_key: None,
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
        drop(inner);
        if self.conn_cost > 0 {
            self.add_held(&conn, HeldKind::Connection, self.conn_cost);
        }
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

    /// Wakes a connection waiting for room, if one is, after `inner` changed.
    fn wake_waiting(&self, mut inner: MutexGuard<'_, Inner>, freed: bool) {
        if freed && std::mem::take(&mut inner.wanted) {
            drop(inner);
            self.freed.notify_one();
        }
    }

    fn remove(&self, id: u64, reason: Close) {
        let mut inner = self.lock();
        let removed = inner.conns.remove(&id);
        if let Some(entry) = &removed {
            inner.forget(id, entry);
        }
        let open = inner.conns.len();
        let wanted = std::mem::take(&mut inner.wanted);
        drop(inner);
        self.metrics
            .open
            .set(i64::try_from(open).unwrap_or(i64::MAX));
        self.metrics.closed(reason);
        if let Some(entry) = removed
            && self.conn_cost > 0
        {
            self.sub_held(&entry.conn, HeldKind::Connection, self.conn_cost);
            if let Some(caller) = entry.conn.caller.get() {
                caller.sub(self.conn_cost);
            }
        }
        self.removed.notify_waiters();
        if wanted {
            self.freed.notify_one();
        }
    }
}

impl Inner {
    /// Takes `entry` out of every ordering.
    fn forget(&mut self, id: u64, entry: &Entry) {
        if let Some(since) = entry.unclaimed_key {
            self.unclaimed.remove(&(since, id));
        }
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
            unclaimed,
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
        let claimed = entry.conn.caller.get().is_some();
        let is_unguarded = open && !is_idle && entry.guarded == 0;
        for (set, key, wanted) in [
            (unclaimed, &mut entry.unclaimed_key, is_idle && !claimed),
            (idle, &mut entry.idle_key, is_idle && claimed),
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
}

#[cfg(test)]
mod tests;
