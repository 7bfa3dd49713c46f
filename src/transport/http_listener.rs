//! msgw's bounded HTTP/1 listeners: the webhook listener (it faces the gateway through
//! the Ingress) and the admin listener (`/metrics`, probes). A client that sends slowly
//! or never finishes must not hold msgw's resources, nor keep anyone else out:
//!
//! - request headers must arrive within `header_timeout`, which also bounds how long a
//!   keep-alive connection may sit idle between requests;
//! - a body within `body_timeout` (enforced where the handlers read it);
//! - at most `max_connections` are open at once. At the cap a new connection makes
//!   room by closing the one that has waited for a request longest (idle between
//!   requests, or still without its first request's headers), as the gRPC port does
//!   ([`crate::transport::conn_table`]), once it has waited the listener's least idle
//!   time ([`LEAST_IDLE`] for webhooks, less on the admin port); a connection serving
//!   a request is never closed for it. Until there is such a connection (every one is
//!   serving a request, or has only just been accepted) the new one waits.
//!
//! A connection counts as waiting for a request only once msgw has looked at its
//! socket and found no complete request headers there: until its task runs, it is
//! busy. So a probe accepted while msgw's threads are busy elsewhere is not closed
//! before anything read it, and the least idle time only has to cover a request that
//! is still on its way (sent as the client connected), which lets the admin port get
//! through a flood of silent reconnecting sockets quickly (see
//! [`crate::transport::admin::LEAST_IDLE`]).

use std::{pin::pin, sync::Arc, time::Duration};

use axum::Router;
use hyper::{body::Incoming, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpStream,
    sync::watch,
    time::{Instant, sleep_until},
};
use tower_service::Service;

use crate::base::metrics::Metrics;
use crate::base::parse;
use crate::transport::auth::incoming::is_connection_error;
use crate::transport::conn_table::{Close, Conn, ConnMetrics, StreamGuard, Table};
use crate::transport::listen::Listeners;

/// After an eviction, how long a connection has to finish what it was doing (a
/// response still being written, headers half sent) before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// At the cap, how long a connection must have waited for a request before it makes
/// room (the webhook listener's): one just accepted may have sent its request already
/// without msgw having read it, and clients that reconnect as soon as they are closed
/// must not push it out before then. It also bounds the churn of such clients: a
/// listener at its cap admits at most `max_connections` per this time, so a connection
/// queued behind N of them in the kernel's accept queue waits about
/// `N / max_connections` of it.
pub const LEAST_IDLE: Duration = Duration::from_millis(100);

/// Pause after a failed accept other than a client's: out of file descriptors,
/// retrying at once would only spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Bounds of an HTTP listener. As flags they are the webhook listener's
/// (`--webhook-*`); the admin listener sets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct ListenerLimits {
    /// Webhook listener: time a client has to send a request's headers; also the
    /// longest a keep-alive connection may sit idle between requests.
    #[arg(long = "webhook-header-timeout", env = "MSGW_WEBHOOK_HEADER_TIMEOUT", default_value = "10s", value_parser = parse::positive_duration)]
    pub header_timeout: Duration,
    /// Webhook listener: time a client has to send a request's body.
    #[arg(long = "webhook-body-timeout", env = "MSGW_WEBHOOK_BODY_TIMEOUT", default_value = "10s", value_parser = parse::positive_duration)]
    pub body_timeout: Duration,
    /// Webhook listener: connections open at once; more wait to be accepted.
    #[arg(id = "webhook_max_connections", long = "webhook-max-connections", env = "MSGW_WEBHOOK_MAX_CONNECTIONS", default_value = "1024", value_parser = parse::at_least(1usize))]
    pub max_connections: usize,
    /// At the cap, how long a connection must have waited for a request before it
    /// makes room ([`LEAST_IDLE`] unless a listener sets its own; no flag).
    #[arg(skip = LEAST_IDLE)]
    pub least_idle: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        parse::defaults()
    }
}

/// Serves `router` on `listener` (named `name` in metrics and logs) within `limits`
/// until `shutdown` turns true: then stops accepting, closes idle connections and
/// returns once the requests in progress have been answered.
pub async fn serve(
    listener: impl Into<Listeners>,
    router: Router,
    limits: ListenerLimits,
    name: &'static str,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let listener = listener.into();
    let table = Table::with_least_idle(
        limits.max_connections.max(1),
        limits.header_timeout,
        limits.least_idle,
        ConnMetrics::http(&metrics, name),
    );
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            // The client gave up before we took it: nothing is wrong with the listener.
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                tracing::warn!(%error, listener = name, "HTTP listener: accept failed; retrying");
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                }
            }
        };
        // At the ceiling (closing connections included) the oldest closing connection
        // goes at once, and nothing more is accepted until it has.
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            () = table.room() => {}
        }
        let conn = loop {
            // No room yet: every connection is serving a request (the next answered
            // one makes room) or has only just been accepted.
            let at = match table.try_admit() {
                Ok(conn) => break Some(conn),
                Err(at) => at,
            };
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break None,
                () = table.freed() => {}
                () = sleep_until(at.unwrap_or_else(Instant::now)), if at.is_some() => {}
            }
        };
        let Some(conn) = conn else { break };
        // Busy until its task has looked at what it sent (see `connection`).
        let unread = conn.stream_opened(true, false, 0, 0).ok();
        let _ = tcp.set_nodelay(true);
        tokio::spawn(connection(
            tcp,
            conn,
            unread,
            &http,
            router.clone(),
            name,
            shutdown.clone(),
        ));
    }
    // No new connections from here on: the kernel stops completing handshakes.
    drop(listener);
    table.emptied().await;
}

/// A connection's socket shared between hyper, which reads and writes it, and its task,
/// which looks at what has arrived ([`has_sent_headers`]) when it is told to close.
struct SharedTcp(Arc<TcpStream>);

impl tokio::io::AsyncRead for SharedTcp {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        loop {
            std::task::ready!(self.0.poll_read_ready(cx))?;
            // `try_read` clears the readiness when the socket has nothing after all.
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return std::task::Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return std::task::Poll::Ready(Err(e)),
            }
        }
    }
}

impl tokio::io::AsyncWrite for SharedTcp {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                written => return std::task::Poll::Ready(written),
            }
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let done = rustix::net::shutdown(&*self.0, rustix::net::Shutdown::Write);
        std::task::Poll::Ready(done.map_err(std::io::Error::from))
    }
}

/// The most of a new connection's first bytes [`has_sent_headers`] looks at: a probe's,
/// a scrape's or a webhook's headers fit; a client whose headers are longer has at
/// least sent this much, and counts as having sent them.
const PEEK_BYTES: usize = 4096;

/// Whether a connection has sent complete request headers (or [`PEEK_BYTES`] of them)
/// that msgw has not read yet: looked at without taking them from the socket and
/// without waiting.
fn has_sent_headers(tcp: &TcpStream) -> bool {
    let mut buf = [0u8; PEEK_BYTES];
    let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    match rustix::net::recv(tcp, &mut buf[..], flags) {
        Ok((n, _)) => n == PEEK_BYTES || buf[..n].windows(4).any(|w| w == b"\r\n\r\n"),
        // Nothing yet (EAGAIN), or the client is gone.
        Err(_) => false,
    }
}

/// Serves one connection until it closes: the client leaves, its headers are late, it
/// is evicted (dropped [`CLOSE_GRACE`] later if it has not closed by then) or msgw
/// shuts down (after the request in progress). Always takes it out of the table.
/// `unread` keeps the new connection busy: it is let go once its task finds no
/// complete request headers in the socket, else when its first request is served.
fn connection(
    tcp: TcpStream,
    conn: Arc<Conn>,
    unread: Option<StreamGuard>,
    http: &http1::Builder,
    router: Router,
    name: &'static str,
    mut shutdown: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let unread = Arc::new(std::sync::Mutex::new(unread));
    // Told when a request starts being served.
    let started = Arc::new(tokio::sync::Notify::new());
    let service = hyper::service::service_fn({
        let conn = conn.clone();
        let (unread, started) = (unread.clone(), started.clone());
        move |request: http::Request<Incoming>| {
            // Serving a request: not evictable until its handler has answered.
            let busy = conn.stream_opened(true, false, 0, 0);
            unread.lock().unwrap_or_else(|e| e.into_inner()).take();
            started.notify_one();
            let mut router = router.clone();
            async move {
                std::future::poll_fn(|cx| {
                    Service::<http::Request<Incoming>>::poll_ready(&mut router, cx)
                })
                .await?;
                let response = router.call(request).await;
                drop(busy);
                response
            }
        }
    });
    let http = http.clone();
    async move {
        // Looked at when the task runs, not when the connection was accepted: under
        // load that may be much later, and its request is there by then.
        if !has_sent_headers(&tcp) {
            unread.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        let tcp = Arc::new(tcp);
        let served = http.serve_connection(TokioIo::new(SharedTcp(tcp.clone())), service);
        let mut served = pin!(served);
        // Set once told to close: until when it may take (`None`: shutdown, which
        // waits for the request in progress).
        let mut closing: Option<Option<Instant>> = None;
        // Evicted with a request in its socket that hyper has not read yet: it is
        // served, and the connection closes after it.
        let mut keeping = false;
        loop {
            tokio::select! {
                // The connection first: a request already waiting in the socket is read
                // before an eviction that came meanwhile is heard, and then served to
                // its end (a connection that had just been accepted when the cap's
                // churn chose it keeps its request).
                biased;
                done = &mut served => {
                    match done {
                        Err(error) if error.is_timeout() => conn.close(Close::HeaderTimeout),
                        Err(error) => {
                            tracing::debug!(%error, listener = name, "HTTP connection ended");
                        }
                        Ok(()) => {}
                    }
                    break;
                }
                // msgw is at its ceiling: this connection, closing already, goes now.
                () = conn.aborted() => break,
                reason = conn.closing(), if closing.is_none() => {
                    // hyper would close a connection whose request it has not read yet
                    // as idle: one that has sent it keeps it (a probe chosen by the
                    // cap's churn before msgw got to its request).
                    keeping = reason == Close::Evicted && has_sent_headers(&tcp);
                    if !keeping {
                        served.as_mut().graceful_shutdown();
                    }
                    closing = Some((reason != Close::Shutdown).then(|| Instant::now() + CLOSE_GRACE));
                }
                () = started.notified(), if keeping => {
                    keeping = false;
                    served.as_mut().graceful_shutdown();
                }
                _ = shutdown.wait_for(|s| *s), if closing.is_none() => {
                    conn.close(Close::Shutdown);
                    served.as_mut().graceful_shutdown();
                    closing = Some(None);
                }
                () = sleep_until(closing.flatten().unwrap_or_else(Instant::now)), if matches!(closing, Some(Some(_))) => break,
            }
        }
        conn.finished();
    }
}
