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
//!   ([`crate::transport::conn_table`]), once it has waited [`LEAST_IDLE`]; a connection serving
//!   a request is never closed for it. Until there is such a connection (every one is
//!   serving a request, or has only just been accepted) the new one waits.

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

use crate::process::metrics::Metrics;
use crate::process::parse;
use crate::transport::auth::incoming::is_connection_error;
use crate::transport::conn_table::{Close, Conn, ConnMetrics, Table};
use crate::transport::listen::Listeners;

/// After an eviction, how long a connection has to finish what it was doing (a
/// response still being written, headers half sent) before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// At the cap, how long a connection must have waited for a request before it makes
/// room: one just accepted may have sent its request already without msgw having read
/// it, and clients that reconnect as soon as they are closed must not push it out
/// before then. It also bounds the churn of such clients: a listener at its cap admits
/// at most `max_connections` per this time.
const LEAST_IDLE: Duration = Duration::from_millis(100);

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
        LEAST_IDLE,
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
        let _ = tcp.set_nodelay(true);
        tokio::spawn(connection(
            tcp,
            conn,
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

/// Serves one connection until it closes: the client leaves, its headers are late, it
/// is evicted (dropped [`CLOSE_GRACE`] later if it has not closed by then) or msgw
/// shuts down (after the request in progress). Always takes it out of the table.
fn connection(
    tcp: TcpStream,
    conn: Arc<Conn>,
    http: &http1::Builder,
    router: Router,
    name: &'static str,
    mut shutdown: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let service = hyper::service::service_fn({
        let conn = conn.clone();
        move |request: http::Request<Incoming>| {
            // Serving a request: not evictable until its handler has answered.
            let busy = conn.stream_opened(true, false, 0);
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
    let served = http.serve_connection(TokioIo::new(tcp), service);
    async move {
        let mut served = pin!(served);
        // Set once told to close: until when it may take (`None`: shutdown, which
        // waits for the request in progress).
        let mut closing: Option<Option<Instant>> = None;
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
                    served.as_mut().graceful_shutdown();
                    closing = Some((reason != Close::Shutdown).then(|| Instant::now() + CLOSE_GRACE));
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
