//! One connection's life: TLS handshake and HTTP/2 preface within the handshake
//! timeout, then HTTP/2 until the client leaves, the connection has been idle too
//! long, it is evicted to make room, or msgw shuts down (GOAWAY first for a client
//! that speaks HTTP/2).

use std::{
    io,
    pin::{Pin, pin},
    sync::Arc,
    task::{Context, Poll},
};

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::watch,
    time::{Instant, sleep_until},
};

use super::service::ConnService;
use super::{CLOSE_GRACE, GrpcRoutes, PortLimits};
use crate::auth::incoming::{GrpcConn, is_connection_error};
use crate::auth::tls::TlsReloader;
use crate::conn_table::{Close, Conn};

/// The HTTP/2 client preface (`PRI * HTTP/2.0...`) is this long.
const PREFACE_BYTES: usize = 24;

/// Serves one accepted connection until it closes; always takes it out of the table.
pub async fn serve<S>(
    tcp: TcpStream,
    tls: Option<Arc<TlsReloader>>,
    conn: Arc<Conn>,
    inner: S,
    builder: http2::Builder<TokioExecutor>,
    limits: PortLimits,
    shutdown: watch::Receiver<bool>,
) where
    S: GrpcRoutes,
{
    let handshake_by = Instant::now() + limits.handshake_timeout;
    let peer = tcp.peer_addr().ok();
    if let Some(io) = handshake(tcp, tls, &conn, handshake_by, shutdown.clone()).await {
        let service = ConnService {
            inner,
            peer: io.peer_info(),
            conn: conn.clone(),
        };
        let io = Watched {
            io,
            conn: conn.clone(),
            read: 0,
        };
        let served = builder.serve_connection(TokioIo::new(io), service);
        run(served, &conn, handshake_by, limits, shutdown).await;
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
async fn handshake(
    tcp: TcpStream,
    tls: Option<Arc<TlsReloader>>,
    conn: &Conn,
    by: Instant,
    mut shutdown: watch::Receiver<bool>,
) -> Option<GrpcConn> {
    let Some(tls) = tls else {
        return Some(GrpcConn::Plain(tcp));
    };
    let peer = tcp.peer_addr().ok();
    tokio::select! {
        done = tokio::time::timeout_at(by, GrpcConn::tls(tcp, &tls)) => match done {
            Ok(Ok(io)) => Some(io),
            // TCP probes of load balancers and port scanners: routine, not worth a line.
            Ok(Err(error)) if is_connection_error(&error) => {
                tracing::debug!(?peer, %error, "gRPC port: TLS handshake failed");
                None
            }
            Ok(Err(error)) => {
                tracing::info!(?peer, %error, "gRPC port: TLS handshake failed");
                None
            }
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

/// Drives the HTTP/2 connection, closing it when msgw must.
async fn run<S>(
    served: http2::Connection<TokioIo<Watched>, ConnService<S>, TokioExecutor>,
    conn: &Conn,
    handshake_by: Instant,
    limits: PortLimits,
    mut shutdown: watch::Receiver<bool>,
) where
    S: GrpcRoutes,
{
    let mut served = pin!(served);
    // First check: at the end of the handshake time the client must have spoken, and
    // a connection that never opens a stream is idle from its start.
    let accepted = handshake_by - limits.handshake_timeout;
    let mut check = pin!(sleep_until(
        handshake_by.min(accepted + limits.idle_timeout)
    ));
    // Set once GOAWAY has gone: how long the client has to finish (`None`: shutdown,
    // bounded by msgw's grace period instead).
    let mut closing: Option<Option<Instant>> = None;
    loop {
        tokio::select! {
            // msgw is at its ceiling: this connection, closing already, goes now.
            () = conn.aborted() => return,
            done = &mut served => {
                if let Err(error) = done {
                    tracing::debug!(%error, "gRPC port: connection ended");
                }
                return;
            }
            () = &mut check, if closing.is_none() => {
                let now = Instant::now();
                if !conn.spoke() {
                    if now >= handshake_by {
                        conn.close(Close::HandshakeTimeout);
                        return;
                    }
                    check.as_mut().reset(handshake_by);
                    continue;
                }
                match conn.idle_deadline() {
                    Some(deadline) if deadline <= now => {
                        conn.close(Close::Idle);
                        served.as_mut().graceful_shutdown();
                        closing = Some(Some(now + CLOSE_GRACE));
                    }
                    Some(deadline) => check.as_mut().reset(deadline),
                    // A stream is open: it cannot be idle before its end plus the timeout.
                    None => check.as_mut().reset(now + limits.idle_timeout),
                }
            }
            _ = conn.closing(), if closing.is_none() => {
                if !conn.spoke() {
                    return;
                }
                served.as_mut().graceful_shutdown();
                closing = Some(Some(Instant::now() + CLOSE_GRACE));
            }
            _ = shutdown.wait_for(|s| *s), if !matches!(closing, Some(None)) => {
                conn.close(Close::Shutdown);
                if !conn.spoke() {
                    return;
                }
                served.as_mut().graceful_shutdown();
                closing = Some(None);
            }
            () = sleep_until(closing.flatten().unwrap_or(handshake_by)), if matches!(closing, Some(Some(_))) => {
                return;
            }
        }
    }
}

/// The connection's stream, marking its connection as having spoken once the HTTP/2
/// preface has been read.
struct Watched {
    io: GrpcConn,
    conn: Arc<Conn>,
    read: usize,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if this.read < PREFACE_BYTES {
            this.read += buf.filled().len() - before;
            if this.read >= PREFACE_BYTES {
                this.conn.mark_spoke();
            }
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
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
