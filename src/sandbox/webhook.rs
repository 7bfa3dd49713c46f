//! Posting status webhooks with retries.

use super::Inner;

/// POSTs `body` as JSON to `url` until it is answered with HTTP 200, at most
/// `webhook_attempts` times, waiting `webhook_backoff` (doubling) in between.
pub(super) async fn post(inner: &Inner, url: &str, body: &serde_json::Value) {
    let Some(client) = &inner.http else {
        tracing::warn!("sandbox webhook skipped: no HTTP client");
        return;
    };
    let attempts = inner.config.webhook_attempts.max(1);
    let mut backoff = inner.config.webhook_backoff;
    let id = body
        .get("id")
        .and_then(|id| id.as_str())
        .unwrap_or_default();
    for attempt in 1..=attempts {
        // The URL is left out of logs: msgw's hook URLs carry a token.
        match client.post(url).json(body).send().await {
            Ok(resp) if resp.status() == reqwest::StatusCode::OK => {
                tracing::debug!(id, attempt, "sandbox webhook delivered");
                return;
            }
            Ok(resp) => {
                tracing::debug!(id, attempt, status = %resp.status(), "sandbox webhook refused");
            }
            Err(err) => {
                let err = err.without_url();
                tracing::debug!(id, attempt, error = %err, "sandbox webhook failed");
            }
        }
        if attempt < attempts {
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2);
        }
    }
    tracing::info!(id, attempts, "sandbox webhook given up");
}
