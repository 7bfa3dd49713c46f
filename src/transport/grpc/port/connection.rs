//! One connection's life: TLS handshake and HTTP/2 preface within the handshake
//! timeout, then HTTP/2 (msgw drives it itself, so that each stream's answer goes out
//! only as fast as its client reads) until the client leaves, the connection has been
//! idle too long, it is evicted to make room or for memory, its socket has taken
//! nothing for the send timeout, it leaves a keepalive ping unanswered, or msgw shuts
//! down (GOAWAY first for a client that speaks HTTP/2).

use std::{
    future::poll_fn,
    io,
    pin::{Pin, pin},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use h2::{Ping, PingPong, server::Connection as H2};
use hyper::body::Bytes;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::{Notify, watch},
    time::{Instant, sleep_until},
};

use super::stream::{self, Shared};
use super::{CLOSE_GRACE, GrpcRoutes, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, PortLimits};
use crate::base::metrics::Metrics;
use crate::transport::auth::incoming::{GrpcConn, is_connection_error};
use crate::transport::auth::tls::TlsReloader;
use crate::transport::conn_table::{Close, Conn};

/// Serves one accepted connection until it closes; always takes it out of the table.
#[allow(clippy::too_many_arguments)]
pub async fn serve<S>(
    tcp: TcpStream,
    tls: Option<Arc<TlsReloader>>,
    conn: Arc<Conn>,
    routes: S,
    builder: h2::server::Builder,
    limits: PortLimits,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) where
    S: GrpcRoutes,
{
    let handshake_by = Instant::now() + limits.handshake_timeout;
    let peer = tcp.peer_addr().ok();
    if let Some(io) = tls_handshake(tcp, tls, &conn, handshake_by, shutdown.clone()).await {
        let peer_info = io.peer_info();
        let writes = Arc::new(Writes::default());
        let io = Watched {
            io,
            writes: writes.clone(),
        };
        if let Some(h2) = h2_handshake(builder, io, &conn, handshake_by, shutdown.clone()).await {
            let shared = Arc::new(Shared {
                conn: conn.clone(),
                peer: peer_info,
                send_timeout: limits.send_timeout,
                metrics,
            });
            run(h2, routes, shared, &writes, limits, shutdown).await;
        }
    }
    if conn.closed_for() == Some(Close::HandshakeTimeout) {
        tracing::debug!(
            ?peer,
            timeout = ?limits.handshake_timeout,
            "gRPC port: no TLS handshake and HTTP/2 preface in time: closed"
        );
    }
    conn.finished();
}

/// The TLS handshake, if the port speaks TLS; `None` when the connection is closed
/// before it completes.
async fn tls_handshake(
    tcp: TcpStream,
    tls: Option<Arc<TlsReloader>>,
    conn: &Conn,
    by: Instant,
    shutdown: watch::Receiver<bool>,
) -> Option<GrpcConn> {
    let Some(tls) = tls else {
        return Some(GrpcConn::Plain(tcp));
    };
    let peer = tcp.peer_addr().ok();
    match in_time(GrpcConn::tls(tcp, &tls), conn, by, shutdown).await? {
        Ok(io) => Some(io),
        // TCP probes of load balancers and port scanners: routine, not worth a line.
        Err(error) if is_connection_error(&error) => {
            tracing::debug!(?peer, %error, "gRPC port: TLS handshake failed");
            None
        }
        Err(error) => {
            tracing::info!(?peer, %error, "gRPC port: TLS handshake failed");
            None
        }
    }
}

/// The HTTP/2 preface and settings; `None` when the client does not send them in
/// time, or the connection is closed before.
async fn h2_handshake(
    builder: h2::server::Builder,
    io: Watched,
    conn: &Conn,
    by: Instant,
    shutdown: watch::Receiver<bool>,
) -> Option<H2<Watched, Bytes>> {
    match in_time(builder.handshake(io), conn, by, shutdown).await? {
        Ok(h2) => Some(h2),
        Err(error) => {
            tracing::debug!(%error, "gRPC port: no HTTP/2 preface");
            None
        }
    }
}

/// A step of the handshake, done by `by`; `None` when it is not (the connection is
/// then closed for its handshake timeout), or the connection must close before.
async fn in_time<F: Future>(
    step: F,
    conn: &Conn,
    by: Instant,
    mut shutdown: watch::Receiver<bool>,
) -> Option<F::Output> {
    tokio::select! {
        done = tokio::time::timeout_at(by, step) => match done {
            Ok(done) => Some(done),
            Err(_) => {
                conn.close(Close::HandshakeTimeout);
                None
            }
        },
        _ = conn.closing() => None,
        () = conn.aborted() => None,
        _ = shutdown.wait_for(|s| *s) => None,
    }
}

/// Drives the HTTP/2 connection: each new stream on a task of its own; closes the
/// connection when msgw must.
async fn run<S>(
    mut h2: H2<Watched, Bytes>,
    routes: S,
    shared: Arc<Shared>,
    writes: &Writes,
    limits: PortLimits,
    mut shutdown: watch::Receiver<bool>,
) where
    S: GrpcRoutes,
{
    let conn = shared.conn.clone();
    let mut pings = h2.ping_pong();
    let mut check = pin!(sleep_until(next_idle_check(&conn, &limits)));
    let mut keepalive = pin!(sleep_until(Instant::now() + KEEPALIVE_INTERVAL));
    let mut pong_due: Option<Instant> = None;
    let mut stall_check = pin!(sleep_until(Instant::now()));
    let mut stall_armed = false;
    // Set once GOAWAY has gone: how long the client has to finish (`None`: shutdown,
    // bounded by msgw's grace period instead).
    let mut closing: Option<Option<Instant>> = None;
    loop {
        tokio::select! {
            // msgw is at its ceiling or its memory budget: this connection goes now.
            () = conn.aborted() => return,
            accepted = h2.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    tokio::spawn(stream::serve(request, respond, routes.clone(), shared.clone()));
                }
                Some(Err(error)) => {
                    tracing::debug!(%error, "gRPC port: connection ended");
                    return;
                }
                None => return,
            },
            () = &mut check, if closing.is_none() => {
                let now = Instant::now();
                match conn.idle_deadline() {
                    Some(deadline) if deadline <= now => {
                        conn.close(Close::Idle);
                        h2.graceful_shutdown();
                        closing = Some(Some(now + CLOSE_GRACE));
                    }
                    Some(deadline) => check.as_mut().reset(deadline),
                    // A stream is open: it cannot be idle before its end plus the timeout.
                    None => check.as_mut().reset(now + limits.idle_timeout),
                }
            }
            // The socket stopped taking bytes: look again once the send timeout is up.
            () = writes.blocked.notified() => {
                if let Some(since) = writes.blocked_since() {
                    stall_check.as_mut().reset(since + limits.send_timeout);
                    stall_armed = true;
                }
            }
            () = &mut stall_check, if stall_armed => {
                stall_armed = false;
                if let Some(since) = writes.blocked_since() {
                    if since + limits.send_timeout <= Instant::now() {
                        conn.close(Close::SendTimeout);
                        return;
                    }
                    stall_check.as_mut().reset(since + limits.send_timeout);
                    stall_armed = true;
                }
            }
            () = &mut keepalive, if pong_due.is_none() => {
                match pings.as_mut().map(|p| p.send_ping(Ping::opaque())) {
                    Some(Ok(())) => pong_due = Some(Instant::now() + KEEPALIVE_TIMEOUT),
                    // A ping already on its way, or the connection is closing.
                    _ => keepalive.as_mut().reset(Instant::now() + KEEPALIVE_INTERVAL),
                }
            }
            ponged = pong(&mut pings), if pong_due.is_some() => {
                pong_due = None;
                if ponged.is_err() {
                    return;
                }
                keepalive.as_mut().reset(Instant::now() + KEEPALIVE_INTERVAL);
            }
            () = sleep_until(pong_due.unwrap_or_else(Instant::now)), if pong_due.is_some() => {
                conn.close(Close::KeepaliveTimeout);
                return;
            }
            _ = conn.closing(), if closing.is_none() => {
                h2.graceful_shutdown();
                closing = Some(Some(Instant::now() + CLOSE_GRACE));
            }
            _ = shutdown.wait_for(|s| *s), if !matches!(closing, Some(None)) => {
                conn.close(Close::Shutdown);
                h2.graceful_shutdown();
                closing = Some(None);
            }
            () = sleep_until(closing.flatten().unwrap_or_else(Instant::now)), if matches!(closing, Some(Some(_))) => {
                return;
            }
        }
    }
}

/// When the idle check first runs: a connection that never opens a stream is idle
/// from its start.
fn next_idle_check(conn: &Conn, limits: &PortLimits) -> Instant {
    conn.idle_deadline()
        .unwrap_or_else(|| Instant::now() + limits.idle_timeout)
}

/// The answer to the keepalive ping in flight.
async fn pong(pings: &mut Option<PingPong>) -> Result<(), h2::Error> {
    match pings {
        Some(pings) => poll_fn(|cx| pings.poll_pong(cx)).await.map(drop),
        None => std::future::pending().await,
    }
}

/// Whether the connection's socket takes what msgw writes.
#[derive(Default)]
struct Writes {
    /// Milliseconds since [`EPOCH`] when a write last found the socket full, plus one;
    /// 0 while writes go through.
    blocked_ms: AtomicU64,
    /// Signalled when writes start to block.
    blocked: Notify,
}

/// The clock of [`Writes`].
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

impl Writes {
    fn epoch() -> Instant {
        *EPOCH.get_or_init(Instant::now)
    }

    fn wrote(&self) {
        if self.blocked_ms.load(Ordering::Relaxed) != 0 {
            self.blocked_ms.store(0, Ordering::Relaxed);
        }
    }

    fn would_block(&self) {
        if self.blocked_ms.load(Ordering::Relaxed) == 0 {
            let ms = Self::epoch().elapsed().as_millis();
            self.blocked_ms.store(
                u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1,
                Ordering::Relaxed,
            );
            self.blocked.notify_one();
        }
    }

    /// Since when the socket has taken nothing, if it is full.
    fn blocked_since(&self) -> Option<Instant> {
        match self.blocked_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Self::epoch() + Duration::from_millis(ms - 1)),
        }
    }
}

/// The connection's stream, noting when the socket stops taking bytes.
struct Watched {
    io: GrpcConn,
    writes: Arc<Writes>,
}

impl Watched {
    fn noted(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match &polled {
            Poll::Ready(Ok(n)) if *n > 0 => self.writes.wrote(),
            Poll::Pending => self.writes.would_block(),
            _ => {}
        }
        polled
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.noted(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.noted(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
