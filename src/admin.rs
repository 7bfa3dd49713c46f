//! The admin listener: `/metrics` for Prometheus, on its own address
//! (`MSGW_ADMIN_ADDR`), never on the webhook listener that faces the gateway from the
//! internet: balance and traffic figures are not for the public. Also `/livez` and
//! `/readyz` for probes that cannot speak gRPC over TLS (kubelet's gRPC probe cannot).

use std::sync::Arc;

use axum::{Router, http::StatusCode, routing::get};
use tokio::sync::watch;

use crate::metrics::Metrics;

/// The admin routes; `ready` follows the gRPC health status (true: SERVING).
pub fn router(metrics: Arc<Metrics>, ready: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/metrics", get(crate::metrics::handler))
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
