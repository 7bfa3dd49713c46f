//! msgw's bounded HTTP/1 listeners: the webhook listener (it faces the gateway through
//! the Ingress) and the admin listener (`/metrics`, probes). A client that sends slowly
//! or never finishes must not hold msgw's resources: request headers must arrive within `header_timeout` (which also bounds
//! how long a keep-alive connection may sit idle between requests), a body within
//! `body_timeout` (enforced where the handlers read it), and at most
//! `max_connections` are open at once; beyond that, new connections wait in the
//! kernel's accept queue.

use std::{future::Future, sync::Arc, time::Duration};

use axum::Router;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::Semaphore};

/// Bounds of an HTTP listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Time to receive a request's headers, and the longest idle keep-alive.
    pub header_timeout: Duration,
    /// Time to receive a request's body.
    pub body_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then
/// lets the requests in progress finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: wait a moment instead of spinning.
                    tracing::warn!(error = %e, "webhook listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "webhook connection ended");
            }
            drop(slot);
        });
    }
    graceful.shutdown().await;
}
