//! The admin listener: `/metrics` for Prometheus, on its own address
//! (`MSGW_ADMIN_ADDR`), never on the webhook listener that faces the gateway from the
//! internet: balance and traffic figures are not for the public.

use std::sync::Arc;

use axum::{Router, routing::get};

use crate::metrics::Metrics;

/// The admin routes.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(crate::metrics::handler))
        .with_state(metrics)
}
