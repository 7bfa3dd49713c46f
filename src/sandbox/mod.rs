//! In-process emulator of the gateway's JSON endpoint (`POST /api/json.php`).
//!
//! It is msgw's default upstream and the upstream of its tests. It follows the
//! gateway's API (docs/gateway.md) on its own terms and shares no code with msgw's request
//! builder, so that a mistake there shows up as an error here.

mod account;
mod billing;
mod channel;
mod config;
mod delivery;
mod embedded;
mod error;
mod fields;
mod hlr;
mod http;
mod inbox;
pub(crate) mod magic;
mod message;
mod ops;
mod persist;
mod pipeline;
mod rate;
mod saved;
mod sends;
mod state;
mod status;
mod templates;
mod viber;
mod webhook;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

pub use config::{DEFAULT_API_KEY, SandboxConfig, Tuning};
pub use embedded::EmbeddedSandbox;

use state::State;

/// Timeout of one webhook POST attempt.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// A running sandbox account; clones share the same state.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

/// Shared by the HTTP handler and the background delivery tasks.
struct Inner {
    config: SandboxConfig,
    /// Shared with the writer of its saves.
    state: Arc<Mutex<State>>,
    /// `None` only if the TLS backend failed to initialise; webhooks are then skipped.
    http: Option<reqwest::Client>,
    /// Flips to `true` when `serve` shuts down, stopping every delivery task.
    stopped: watch::Sender<bool>,
    /// Where the account is kept across restarts; `None`: in memory only.
    persistence: Option<persist::Persistence>,
    /// The operations of the last second, when a rate is set.
    rate: Option<Mutex<rate::Window>>,
}

/// Locks the account state; a panic elsewhere while holding the lock must not take
/// the emulator down with it, so a poisoned lock is recovered.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Inner {
    /// The account state.
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Waits until the state as it is now is saved; at once for an account kept in
    /// memory only.
    async fn durable(&self) -> Result<(), crate::core::ports::store::StoreError> {
        match &self.persistence {
            Some(persistence) => persistence.durable().await,
            None => Ok(()),
        }
    }

    /// Counts an envelope of `ops` operations if the rate allows them now; else
    /// counts nothing and says in how many whole seconds they would fit.
    fn admit(&self, ops: usize) -> Result<(), u64> {
        match &self.rate {
            Some(window) => window
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .admit(std::time::Instant::now(), ops),
            None => Ok(()),
        }
    }

    /// Whether `name` is a registered sender name (case-sensitive, like an alpha-name).
    fn is_sender(&self, name: &str) -> bool {
        self.config.senders.iter().any(|s| s == name)
    }
}

impl Sandbox {
    /// Creates a sandbox account from `config`, kept in memory only.
    pub fn new(config: SandboxConfig) -> Self {
        let state = State::new(
            billing::to_units(config.balance),
            config.account_webhook_url.clone(),
        );
        Self::with(config, Arc::new(Mutex::new(state)), None)
    }

    /// The sandbox account kept in `store`: as it was saved there, if it was, with
    /// its deliveries under way resumed; every answer waits for the save of what it
    /// shows (see `persist.rs`).
    pub async fn kept_in(
        config: SandboxConfig,
        store: Arc<dyn crate::core::ports::store::Store>,
    ) -> Result<Self, crate::core::ports::store::StoreError> {
        let state = State::new(
            billing::to_units(config.balance),
            config.account_webhook_url.clone(),
        );
        let (state, persistence, underway) = persist::Persistence::load(store, state).await?;
        let sandbox = Self::with(config, state, Some(persistence));
        persist::resume(&sandbox.inner, underway);
        Ok(sandbox)
    }

    fn with(
        config: SandboxConfig,
        state: Arc<Mutex<State>>,
        persistence: Option<persist::Persistence>,
    ) -> Self {
        let http = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            .build()
            .map_err(|err| tracing::error!(%err, "sandbox cannot build its webhook client"))
            .ok();
        let (stopped, _) = watch::channel(false);
        let rate = config.rate.map(|rate| Mutex::new(rate::Window::new(rate)));
        Self {
            inner: Arc::new(Inner {
                rate,
                config,
                state,
                http,
                stopped,
                persistence,
            }),
        }
    }

    /// Router serving `POST /api/json.php`.
    ///
    /// Delivery tasks of sends made through it stop when `serve` shuts down,
    /// or with the tokio runtime when the router is mounted elsewhere.
    pub fn router(&self) -> axum::Router {
        http::router(self.inner.clone())
    }

    /// The API key this sandbox accepts.
    pub fn api_key(&self) -> &str {
        &self.inner.config.api_key
    }

    /// Sets the account-level notification address that receives pipeline statuses.
    pub fn set_account_webhook_url(&self, url: Option<String>) {
        self.inner.state().account_webhook_url = url;
    }

    /// Current balance (read-only inspection, e.g. for tests).
    pub fn balance(&self) -> f64 {
        billing::to_amount(self.inner.state().balance())
    }

    /// Stops every delivery task, now and for later sends.
    fn stop(&self) {
        self.inner.stopped.send_replace(true);
    }
}

/// Serves the emulator on `listener` until `shutdown` resolves; background delivery tasks stop too.
///
/// The sandbox stays stopped afterwards: later sends are still answered but
/// their statuses no longer move.
pub async fn serve(
    listener: impl Into<crate::transport::listen::Listeners>,
    sandbox: Sandbox,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = listener.into();
    if let Ok(addrs) = listener.local_addrs() {
        tracing::info!(?addrs, "sandbox gateway listening on /api/json.php");
    }
    let keeping = tokio::spawn(persist::keep(sandbox.inner.clone()));
    let stopper = sandbox.clone();
    // Its inbox too (`/sandbox/`), whose live updates end when it stops.
    let routes = sandbox
        .router()
        .merge(sandbox.inbox(sandbox.inner.stopped.subscribe()));
    let result = axum::serve(listener, routes)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stopper.stop();
        })
        .await;
    sandbox.stop();
    // The last save, before the store closes.
    if let Err(e) = keeping.await {
        tracing::error!(error = %e, "sandbox: saving its state failed");
    }
    result
}
