//! The sandbox inside `msgw serve`: on a free loopback port, its account kept in
//! msgw's own store, stopped with msgw.

use std::sync::Arc;

use anyhow::Context;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

use super::{Sandbox, SandboxConfig};
use crate::core::ports::store::Store;

/// The in-process sandbox gateway and the handle that stops it.
pub struct EmbeddedSandbox {
    /// The account, for the inbox on the admin port.
    pub sandbox: Sandbox,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl EmbeddedSandbox {
    /// Starts the sandbox gateway on a free loopback port; returns its base URL. Its
    /// warning (`open`: no caller authentication either) is the first line a user sees.
    pub async fn start(
        config: SandboxConfig,
        store: Arc<dyn Store>,
        open: bool,
    ) -> anyhow::Result<(url::Url, Self)> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot bind the sandbox gateway")?;
        let addr = listener.local_addr()?;
        let base_url = url::Url::parse(&format!("http://{addr}"))?;
        if open {
            tracing::warn!(
                sandbox_url = %base_url,
                sandbox_api_key = %config.api_key,
                "no MSGW_UPSTREAM_URL set: msgw runs against its built-in SANDBOX gateway; nothing is really sent. The gRPC port is OPEN: no MSGW_CALLERS_FILE or mTLS, so any caller may call (a real gateway refuses to start like this)"
            );
        } else {
            tracing::warn!(
                sandbox_url = %base_url,
                sandbox_api_key = %config.api_key,
                "no MSGW_UPSTREAM_URL set: msgw runs against its built-in SANDBOX gateway; nothing is really sent. Callers authenticate as with a real gateway"
            );
        }
        let (stop, mut stopped) = watch::channel(false);
        // Kept in msgw's store: a restart changes nothing a user can see.
        let sandbox = Sandbox::kept_in(config, store)
            .await
            .context("cannot restore the sandbox's account from the store")?;
        let task = tokio::spawn(super::serve(listener, sandbox.clone(), async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        Ok((
            base_url,
            Self {
                sandbox,
                stop,
                task,
            },
        ))
    }

    /// Stops the sandbox and waits until it has saved its account.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.send_replace(true);
        self.task
            .await
            .context("sandbox task")?
            .context("sandbox gateway")
    }
}
