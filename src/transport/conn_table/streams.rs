//! A connection's streams: what each holds against the port's memory budget and its
//! caller's share, which are stalled on a client that does not read, and which a
//! connection may not open.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
};

use tokio::{sync::futures::OwnedNotified, time::Instant};

use super::by_message::ByMessage;
use super::{CallerHeld, Close, Conn, Inner, Table};
use crate::core::held::{Account, HeldKind};

/// What one open stream costs msgw beyond its headers and bodies (its task, HTTP/2
/// state, tonic's buffers, an event stream's subscription), measured with
/// `cargo bench --bench hostile`: 29 KiB of RSS per event stream left unread, 35 to
/// 41 KiB per reflection stream on a connection that reads nothing.
pub const STREAM_COST: usize = 32 * 1024;

/// Streams on open paths (health watches, reflection: no token needed) one
/// connection may have open at once; health checks, answered at once, are not held
/// to it, and msgw's own services may have as many as the gRPC port allows
/// (`MAX_STREAMS_PER_CONNECTION` there).
pub const OPEN_PATH_STREAMS: usize = 8;

/// Why msgw refused a new stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The connection has [`OPEN_PATH_STREAMS`] health and reflection streams open.
    OpenPathStreams,
    /// The port holds its memory budget.
    MemoryBudget,
    /// The stream's caller holds its share of the memory budget.
    CallerShare,
}

impl Refused {
    /// The `reason` label of `msgw_grpc_streams_refused_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::OpenPathStreams => "open_path_streams",
            Self::MemoryBudget => "memory_budget",
            Self::CallerShare => "caller_share",
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
            Self::CallerShare => {
                "this caller's streams hold its share of msgw's memory budget (MSGW_GRPC_CALLER_SHARE, or memory_share in the callers file): read or close some of them, then retry with backoff"
            }
        }
    }
}

/// An open stream of a connection (its clones share it): counted open, with what it
/// holds, until the last clone is dropped.
#[derive(Clone)]
pub struct StreamGuard(Arc<Stream>);

struct Stream {
    conn: Arc<Conn>,
    guarded: bool,
    probe: bool,
    /// What it holds, by kind (in [`HeldKind::ALL`]'s order), as counted on the
    /// port, its connection and its caller.
    held: [AtomicUsize; HeldKind::ALL.len()],
    /// Of the events on their way to its client, what the stream really holds and
    /// what it has counted on the port.
    messages: ByMessage,
    /// Its caller, once authenticated.
    caller: OnceLock<Arc<CallerHeld>>,
}

/// A stream marked stalled until this is dropped.
pub struct Stalled<'a>(&'a Stream);

impl Table {
    /// What the port's streams hold now, bytes.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub(super) fn add_held(&self, conn: &Conn, kind: HeldKind, bytes: usize) {
        conn.held.fetch_add(bytes, Ordering::Relaxed);
        self.held.fetch_add(bytes, Ordering::Relaxed);
        if let Some(memory) = &self.metrics.memory {
            let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
            memory.held.add(bytes);
            memory.kind(kind).add(bytes);
        }
    }

    pub(super) fn sub_held(&self, conn: &Conn, kind: HeldKind, bytes: usize) {
        conn.held.fetch_sub(bytes, Ordering::Relaxed);
        self.held.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(memory) = &self.metrics.memory {
            let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
            memory.held.sub(bytes);
            memory.kind(kind).sub(bytes);
        }
        // Request bodies wait for room: tell them (only while some do).
        if self.throttled.load(Ordering::Relaxed) > 0 {
            self.room.notify_waiters();
        }
    }

    /// Whether the port has room for `bytes` more under its budget.
    fn has_room(&self, bytes: usize) -> bool {
        self.held() + bytes <= self.budget
    }
}

impl Inner {
    /// The connection, not closing yet, whose streams hold the most: of `caller`'s
    /// connections if it has any open, else of all.
    fn heaviest(&self, caller: Option<&Arc<CallerHeld>>) -> Option<u64> {
        let open = || self.conns.iter().filter(|(_, e)| e.closing_since.is_none());
        let heaviest = |conns: &mut dyn Iterator<Item = (&u64, &super::Entry)>| {
            conns
                .max_by_key(|(_, e)| e.conn.held.load(Ordering::Relaxed))
                .map(|(&id, _)| id)
        };
        caller
            .and_then(|caller| {
                heaviest(
                    &mut open().filter(|(_, e)| {
                        e.conn.caller.get().is_some_and(|c| Arc::ptr_eq(c, caller))
                    }),
                )
            })
            .or_else(|| heaviest(&mut open()))
    }
}

impl Conn {
    /// Counts a new stream whose request headers take `header_bytes` and whose
    /// request body may still send `window` bytes unasked (counted as `Request`); the
    /// connection is not idle while the guard lives, and not evictable while a
    /// `guarded` one (on msgw's own services) lives. Refused when the connection has
    /// its share of open-path streams, or when the port is at its memory budget (the
    /// connection holding the most is then closed at once), unless it is a health
    /// `probe`.
    pub fn stream_opened(
        self: &Arc<Self>,
        guarded: bool,
        probe: bool,
        header_bytes: usize,
        window: usize,
    ) -> Result<StreamGuard, Refused> {
        let table = &self.table;
        let cost = STREAM_COST + header_bytes + window;
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
                // The caller holding the most gives way first: one caller's streams
                // do not cost the others their connections.
                let caller = table.heaviest_caller();
                inner
                    .heaviest(caller.as_ref())
                    .and_then(|id| inner.mark_closing(id, now))
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
        let fixed = cost - window;
        table.add_held(self, HeldKind::Stream, fixed);
        if window > 0 {
            table.add_held(self, HeldKind::Request, window);
        }
        let stream = Stream {
            conn: self.clone(),
            guarded,
            probe,
            held: Default::default(),
            messages: Default::default(),
            caller: OnceLock::new(),
        };
        stream.held[HeldKind::Stream as usize].store(fixed, Ordering::Relaxed);
        stream.held[HeldKind::Request as usize].store(window, Ordering::Relaxed);
        Ok(StreamGuard(Arc::new(stream)))
    }
}

impl StreamGuard {
    /// Counts `bytes` more held by the stream for `kind` until
    /// [`release`](Self::release)d.
    pub fn hold(&self, kind: HeldKind, bytes: usize) {
        self.0.hold(kind, bytes);
    }

    /// Counts `bytes` of `kind` the stream no longer holds.
    pub fn release(&self, kind: HeldKind, bytes: usize) {
        self.0.release(kind, bytes);
    }

    /// The stream as the account core counts what it holds on (event replays,
    /// status waiters).
    pub fn account(&self) -> Arc<dyn Account> {
        self.0.clone()
    }

    /// The account of caller `label` on the stream's port (`share`: its own share of
    /// the budget, `None`: the port's default).
    pub fn caller_account(&self, label: &str, share: Option<f64>) -> Arc<CallerHeld> {
        self.0.conn.table.caller(label, share)
    }

    /// Charges the stream, and whatever it holds from now on, to `caller`; refused
    /// when that would take the caller past its share (the stream then stays
    /// uncharged and is to be answered RESOURCE_EXHAUSTED). A health check is
    /// charged all the same.
    pub fn charge(&self, caller: Arc<CallerHeld>) -> Result<(), Refused> {
        let stream = &self.0;
        let table = &stream.conn.table;
        if stream.caller.get().is_some() {
            return Ok(());
        }
        // A connection belongs to the caller of its first charged stream, and its
        // fixed cost is that caller's too: one caller cannot hold every connection.
        let conn_cost = if stream.conn.caller.get().is_none() {
            table.conn_cost
        } else {
            0
        };
        if !stream.probe && caller.would_pass(stream.total() + conn_cost) {
            if let Some(memory) = &table.metrics.memory {
                memory
                    .refused_by_caller
                    .with_label_values(&[caller.label()])
                    .inc();
            }
            return Err(Refused::CallerShare);
        }
        if stream.caller.set(caller.clone()).is_ok() {
            caller.add(stream.total());
            if stream.conn.caller.set(caller.clone()).is_ok() {
                caller.add(table.conn_cost);
            }
        }
        Ok(())
    }

    /// Whether a request body of this stream may be given `bytes` more flow-control
    /// window: its caller's share and the port's budget have room for them.
    pub fn has_room(&self, bytes: usize) -> bool {
        let stream = &self.0;
        stream.conn.table.has_room(bytes)
            && stream
                .caller
                .get()
                .is_none_or(|caller| caller.held() + bytes <= caller.share())
    }

    /// Whether `bytes` could ever fit: they are within the caller's share and the
    /// port's budget.
    pub fn could_hold(&self, bytes: usize) -> bool {
        let stream = &self.0;
        bytes <= stream.conn.table.budget
            && stream
                .caller
                .get()
                .is_none_or(|caller| bytes <= caller.share())
    }

    /// Resolves once streams have let go of bytes (the port or a caller may have room
    /// again); create it before looking at [`has_room`](Self::has_room).
    pub fn room(&self) -> Room {
        self.0.room()
    }

    /// Marks the stream stalled (its client leaves the window shut) until the mark
    /// is dropped: a connection whose streams are all stalled counts as idle.
    pub fn stalled(&self) -> Stalled<'_> {
        self.0.set_stalled(true);
        Stalled(&self.0)
    }
}

/// A wait for room: resolves once streams have let go of bytes. While it lives,
/// releases wake waiters (they do not otherwise, to keep releases cheap).
pub struct Room {
    notified: Pin<Box<OwnedNotified>>,
    table: Arc<Table>,
}

impl Future for Room {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.notified.as_mut().poll(cx)
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.table.throttled.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Stream {
    fn room(&self) -> Room {
        let table = self.conn.table.clone();
        table.throttled.fetch_add(1, Ordering::Relaxed);
        Room {
            notified: Box::pin(table.room.clone().notified_owned()),
            table,
        }
    }

    fn total(&self) -> usize {
        self.held.iter().map(|h| h.load(Ordering::Relaxed)).sum()
    }

    fn hold(&self, kind: HeldKind, bytes: usize) {
        let more = self.messages.hold(kind, bytes).unwrap_or(bytes);
        if more > 0 {
            self.count(kind, more);
        }
    }

    fn release(&self, kind: HeldKind, bytes: usize) {
        let less = self.messages.release(kind, bytes).unwrap_or(bytes);
        if less > 0 {
            self.uncount(kind, less);
        }
    }

    /// Counts `bytes` of `kind` on the port, the connection and the caller.
    fn count(&self, kind: HeldKind, bytes: usize) {
        self.held[kind as usize].fetch_add(bytes, Ordering::Relaxed);
        if let Some(caller) = self.caller.get() {
            caller.add(bytes);
        }
        self.conn.table.add_held(&self.conn, kind, bytes);
    }

    /// Counts `bytes` of `kind` no longer held on the port, the connection and the
    /// caller.
    fn uncount(&self, kind: HeldKind, bytes: usize) {
        self.held[kind as usize].fetch_sub(bytes, Ordering::Relaxed);
        if let Some(caller) = self.caller.get() {
            caller.sub(bytes);
        }
        self.conn.table.sub_held(&self.conn, kind, bytes);
    }

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
        for kind in HeldKind::ALL {
            let bytes = self.held[kind as usize].load(Ordering::Relaxed);
            if bytes > 0 {
                self.uncount(kind, bytes);
            }
        }
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

impl Account for Stream {
    fn hold(&self, kind: HeldKind, bytes: usize) {
        Stream::hold(self, kind, bytes);
    }

    fn release(&self, kind: HeldKind, bytes: usize) {
        Stream::release(self, kind, bytes);
    }

    fn try_hold(&self, kind: HeldKind, want: usize, least: usize) -> Option<usize> {
        let table = &self.conn.table;
        let first = self
            .messages
            .holds_none(kind)
            .unwrap_or_else(|| self.held[kind as usize].load(Ordering::Relaxed) == 0);
        let room = table.budget.saturating_sub(table.held()).min(want);
        let bytes = match self.caller.get() {
            Some(caller) => caller.try_add_up_to(room, least, first)?,
            None if room >= least => room,
            None if first => least,
            None => return None,
        };
        self.messages.hold_counted(kind, bytes);
        self.held[kind as usize].fetch_add(bytes, Ordering::Relaxed);
        table.add_held(&self.conn, kind, bytes);
        Some(bytes)
    }

    fn room(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(Stream::room(self))
    }
}
