//! The admin listener: `/metrics` for Prometheus, on its own address
//! (`MSGW_ADMIN_ADDR`), never on the webhook listener that faces the gateway from the
//! internet: balance and traffic figures are not for the public. Also `/livez` and
//! `/readyz` for probes that cannot speak gRPC over TLS (kubelet's gRPC probe cannot).
//! On the sandbox, `app.rs` adds the sandbox's inbox (`/sandbox/`), whose live pages
//! are bounded so that probes keep their room.
//!
//! Probes must be answered whatever else is connected: the listener is bounded like the
//! webhook listener (at its cap the connection waiting for a request longest makes
//! room), and its header timeout is short, since probes and scrapes send their request
//! as soon as they have connected.

use std::{sync::Arc, time::Duration};

use axum::{Router, http::StatusCode, routing::get};
use tokio::sync::watch;

use crate::base::metrics::Metrics;
use crate::transport::http_listener::ListenerLimits;

/// How long an admin connection may go without a request's headers (new, or idle
/// between requests): a probe or a scrape sends its request at once, so a connection
/// that has sent none by then is not one of them.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Connections the admin port (`/metrics`, probes) holds at most; part of the files the
/// process keeps for everything but connections (`process::fd_limit::RESERVED`).
pub const ADMIN_CONNECTIONS: usize = 64;

/// At the cap, how long an admin connection must have waited for a request before it
/// makes room. Probes and scrapes send their request as they connect (within a
/// millisecond on a node), so a short wait keeps theirs; and it sets how fast the port
/// gets through sockets that connect, say nothing and reconnect: [`ADMIN_CONNECTIONS`]
/// per this time, 6,400 a second, so a probe queued behind 800 of them in the accept
/// queue is reached in about an eighth of a second (the webhook listener's
/// [`LEAST_IDLE`](crate::transport::http_listener::LEAST_IDLE) would take 1.25 s).
pub const LEAST_IDLE: Duration = Duration::from_millis(10);

/// The admin listener's bounds: [`HEADER_TIMEOUT`], and
/// [`ADMIN_CONNECTIONS`] at most (the only bodies
/// it reads are the inbox buttons' few bytes), making room as [`LEAST_IDLE`] says.
pub fn limits() -> ListenerLimits {
    ListenerLimits {
        header_timeout: HEADER_TIMEOUT,
        body_timeout: HEADER_TIMEOUT,
        max_connections: ADMIN_CONNECTIONS,
        least_idle: LEAST_IDLE,
    }
}

/// The admin routes; `ready` follows the gRPC health status (true: SERVING).
pub fn router(metrics: Arc<Metrics>, ready: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/metrics", get(crate::base::metrics::handler))
        .with_state(metrics)
        .route("/livez", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = *ready.borrow();
                async move {
                    if ready {
                        (StatusCode::OK, "SERVING\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "NOT_SERVING\n")
                    }
                }
            }),
        )
}
