//! The gateway msgw sends to: the one configured, or the sandbox it starts beside
//! itself when none is.

use std::sync::Arc;

use secrecy::SecretString;

use crate::adapters::upstream::{GatewayClient, GatewayConfig};
use crate::base::metrics::Metrics;
use crate::core::hooks::HookUrls;
use crate::core::ports::store::Store;
use crate::process::config::{Config, Upstream};
use crate::sandbox::{EmbeddedSandbox, SandboxConfig};

/// The client of the configured gateway, or of the sandbox started here (whose account
/// webhooks reach msgw's account URL), and the sandbox if one was started.
pub(super) async fn connect(
    config: &Config,
    hooks: &HookUrls,
    store: Arc<dyn Store>,
    authentication_open: bool,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<(GatewayClient, Option<EmbeddedSandbox>)> {
    let (base_url, api_key, sandbox) = match config.upstream.clone() {
        Upstream::Gateway { url, api_key } => (url, api_key, None),
        Upstream::Sandbox(sandbox_config) => {
            let sandbox_config = SandboxConfig {
                account_webhook_url: Some(hooks.account_url(&config.account_token)),
                ..sandbox_config
            };
            let api_key = SecretString::from(sandbox_config.api_key.clone());
            let (url, task) =
                EmbeddedSandbox::start(sandbox_config, store, authentication_open).await?;
            (url, api_key, Some(task))
        }
    };
    let gateway = GatewayClient::new(
        GatewayConfig {
            base_url,
            api_key,
            timeout: config.upstream_timeout,
            connections: config.upstream_limits.connections,
        },
        metrics.clone(),
    )
    .map_err(anyhow::Error::msg)?;
    tracing::info!(endpoint = %gateway.endpoint(), "gateway configured");
    Ok((gateway, sandbox))
}
