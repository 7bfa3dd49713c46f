//! A connection's streams: what each holds against the port's memory budget, which
//! are stalled on a client that does not read, and which a connection may not open.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use tokio::time::Instant;

use super::{Close, Conn, Inner, Table};

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
}

impl Inner {
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
