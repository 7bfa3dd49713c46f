//! The gRPC port: msgw's own accept loop and HTTP/2 connections, bounded so that no
//! client, with or without a token, can fill it or make msgw hold what it does not
//! read.
//!
//! - A connection must finish its TLS handshake and send the HTTP/2 preface within
//!   the handshake timeout, or it is closed.
//! - A connection without an open stream for the idle timeout gets GOAWAY and is
//!   closed; an event stream that carries no events is a stream, so never idle.
//! - HTTP/2 keepalive pings find peers that vanished without a word.
//! - At the cap, a new connection makes room by closing the one idle longest (GOAWAY
//!   first if it spoke HTTP/2); only when every connection has a stream open is the
//!   new one refused. A connection whose streams all wait on a client that does not
//!   read counts as idle.
//! - An answer goes out as fast as its client reads it and no faster: a stream whose
//!   client leaves its window shut for the send timeout is reset, a connection whose
//!   socket takes nothing for the send timeout is closed.
//! - A connection has few streams on the token-free services (health, reflection).
//! - Everything the port's streams hold is counted against a memory budget: at the
//!   budget new streams are refused with RESOURCE_EXHAUSTED and the connection that
//!   holds the most is closed.

mod connection;
mod framing;
mod received;
mod stream;

use std::{convert::Infallible, sync::Arc, time::Duration};

use hyper::body::{Body as HttpBody, Bytes};

use tokio::{sync::watch, time::Instant};

use crate::base::metrics::Metrics;
use crate::base::parse;
use crate::transport::auth::incoming::is_connection_error;
use crate::transport::auth::tls::TlsReloader;
use crate::transport::conn_table::{ConnMetrics, Table};
use crate::transport::listen::Listeners;

pub use crate::transport::conn_table::{
    CLOSING_SHARE, CONN_COST, Close, OPEN_PATH_STREAMS, STREAM_COST, connections_within,
};

/// Streams one connection may have open at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1024;
/// How often an idle connection is pinged to find out whether its peer is still there.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// How long a ping may go unanswered before the connection is dropped.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// After GOAWAY for idleness or eviction, how long the client has to close.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Pause after a failed accept other than a client's: out of file descriptors,
/// retrying at once would only spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// How often the callers holding the most are shown in the metrics.
const REPORT_CALLERS_EVERY: Duration = Duration::from_secs(1);
/// Least time between two warnings about refused connections.
const REFUSED_WARN_EVERY: Duration = Duration::from_secs(60);

/// What the port serves: msgw's layered routes (any tower service answering gRPC
/// requests, never failing: errors are statuses).
pub trait GrpcRoutes:
    tower_service::Service<
        http::Request<tonic::body::Body>,
        Response = http::Response<Self::ResBody>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
    /// The response body.
    type ResBody: HttpBody<Data = Bytes, Error: Into<tonic::codegen::StdError>> + Send + 'static;
}

impl<S, B> GrpcRoutes for S
where
    S: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<B>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static,
    B: HttpBody<Data = Bytes, Error: Into<tonic::codegen::StdError>> + Send + 'static,
{
    type ResBody = B;
}

/// The gRPC port's bounds: `msgw serve`'s `--grpc-*` options.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct PortLimits {
    /// gRPC port: time a connection has to finish its TLS handshake and send the
    /// HTTP/2 preface; then it is closed.
    #[arg(long = "grpc-handshake-timeout", env = "MSGW_GRPC_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse::positive_duration)]
    pub handshake_timeout: Duration,
    /// gRPC port: a connection without an open stream this long gets GOAWAY and is
    /// closed. An open event stream is never idle, events or not.
    #[arg(long = "grpc-idle-timeout", env = "MSGW_GRPC_IDLE_TIMEOUT", default_value = "5m", value_parser = parse::positive_duration)]
    pub idle_timeout: Duration,
    /// gRPC port: connections at most. At the cap a new connection makes room by
    /// closing an idle one (one that never carried a call first). Default: what half
    /// the memory budget holds at 72 KiB a connection, at most what the file limit
    /// (`ulimit -n`) leaves after the store, the gateway and the other ports.
    #[arg(id = "grpc_max_connections", long = "grpc-max-connections", env = "MSGW_GRPC_MAX_CONNECTIONS", value_parser = parse::at_least(1usize))]
    pub max_connections: Option<usize>,
    /// gRPC port: a response the client does not read (its flow-control window stays
    /// shut) for this long resets its stream; a connection whose socket takes no byte
    /// for this long is closed.
    #[arg(long = "grpc-send-timeout", env = "MSGW_GRPC_SEND_TIMEOUT", default_value = "10s", value_parser = parse::positive_duration)]
    pub send_timeout: Duration,
    /// gRPC port: what all its connections may make msgw hold (streams, metadata,
    /// unsent answers), e.g. `64MiB`. At the budget new streams get RESOURCE_EXHAUSTED
    /// and the connection holding the most is closed. Default: a quarter of the memory
    /// limit (the cgroup's `memory.max`, else the machine's memory).
    #[arg(long = "grpc-memory-budget", env = "MSGW_GRPC_MEMORY_BUDGET", value_parser = crate::base::parse::size)]
    pub memory_budget: Option<u64>,
    /// gRPC port: the share of the memory budget one caller's streams may hold (every
    /// caller without a token counts as one, `anonymous`), from 0 to 1. Beyond it the
    /// caller's new streams get RESOURCE_EXHAUSTED and its request bodies no more
    /// flow-control window, while other callers are served. A caller's
    /// `memory_share` in the callers file overrides it.
    #[arg(long = "grpc-caller-share", env = "MSGW_GRPC_CALLER_SHARE", default_value = "0.25", value_parser = parse::share)]
    pub caller_share: f64,
}

impl Default for PortLimits {
    fn default() -> Self {
        parse::defaults()
    }
}

/// Serves `service` on `listener` until `shutdown` turns true: then stops accepting,
/// sends GOAWAY on every connection and returns once all have closed. `max_connections`
/// and `memory_budget` are the resolved bounds.
#[allow(clippy::too_many_arguments)]
pub async fn serve<S>(
    listener: impl Into<Listeners>,
    tls: Option<Arc<TlsReloader>>,
    service: S,
    limits: PortLimits,
    max_connections: usize,
    memory_budget: usize,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: GrpcRoutes,
{
    let listener = listener.into();
    let table = Table::new(
        max_connections,
        limits.idle_timeout,
        memory_budget,
        limits.caller_share,
        ConnMetrics::grpc(&metrics),
    );
    let builder = http2_settings();
    let mut warned: Option<Instant> = None;
    let mut report = tokio::time::interval(REPORT_CALLERS_EVERY);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            accepted = listener.accept() => accepted,
            _ = report.tick() => {
                table.report_callers();
                continue;
            }
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            // The client gave up before we took it: nothing is wrong with the listener.
            Err(error) if is_connection_error(&error) => {
                tracing::debug!(%error, "gRPC port: connection closed before accept");
                continue;
            }
            Err(error) => {
                tracing::error!(%error, "gRPC port: cannot accept connections; retrying");
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
        let Some(conn) = table.admit() else {
            if warned.is_none_or(|at| at.elapsed() >= REFUSED_WARN_EVERY) {
                warned = Some(Instant::now());
                tracing::warn!(
                    %peer,
                    max_connections,
                    "gRPC port: connection refused: every connection has a stream open (MSGW_GRPC_MAX_CONNECTIONS)"
                );
            }
            continue;
        };
        // Nagle would hold back every small streamed event behind the previous one's ACK.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, %error, "gRPC port: cannot set TCP_NODELAY");
        }
        tokio::spawn(connection::serve(
            tcp,
            tls.clone(),
            conn,
            service.clone(),
            builder.clone(),
            limits,
            metrics.clone(),
            shutdown.clone(),
        ));
    }
    // No new connections from here on: the kernel stops completing handshakes.
    drop(listener);
    table.emptied().await;
}

/// The HTTP/2 settings of every connection: a 64 KiB window per stream (HTTP/2's
/// own default; each counted against the budget while its request body is
/// unfinished) and 1 MiB per connection, at most [`MAX_STREAMS_PER_CONNECTION`]
/// streams, 16 KiB of headers per request.
fn http2_settings() -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW as u32)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        // Enough for one filtered event stream per message in flight; each costs
        // memory (counted against the budget), so one connection cannot open them
        // without end.
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        // Streams a client may reset in a row before msgw drops it (rapid reset).
        .max_local_error_reset_streams(Some(1024));
    builder
}

/// The flow-control window msgw grants each stream: what a client may send on it
/// before msgw gives window back, counted as held while its request body is open.
pub(crate) const STREAM_WINDOW: usize = 64 * 1024;
/// The flow-control window msgw grants each connection, shared by its streams.
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// The largest HTTP/2 frame msgw accepts.
const MAX_FRAME: u32 = 16 * 1024;
/// Request headers (gRPC metadata) per request at most, as HTTP/2 counts them.
const MAX_HEADER_LIST: u32 = 16 * 1024;
