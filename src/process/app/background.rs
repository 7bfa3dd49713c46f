//! What msgw runs beside its ports until stop: the webhook and admin listeners, the
//! reconciler, the scheduler, the balance refresh, the event retention, the watchers of
//! the callers file, the TLS certificates and the fraud guard's ranges.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use tokio::{sync::watch, task::JoinHandle};

use super::{Services, own_url};
use crate::core::periodic::Leased;
use crate::core::ports::store::Retention;
use crate::core::reconcile::{ReconcileConfig, Reconciler};
use crate::sandbox::EmbeddedSandbox;
use crate::transport::auth::Authenticator;
use crate::transport::auth::tls::TlsReloader;
use crate::transport::http_listener::{self, ListenerLimits};
use crate::transport::listen::Listeners;
use crate::transport::webhook::WebhookState;

/// How often the event retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// What runs beside the gRPC port, not started yet.
pub(super) struct Beside {
    pub(super) http: Listeners,
    pub(super) admin: Listeners,
    pub(super) webhooks: WebhookState,
    pub(super) webhook_limits: ListenerLimits,
    pub(super) reconcile: ReconcileConfig,
    pub(super) retention: Retention,
    pub(super) balance_refresh: Duration,
    pub(super) sandbox: Option<EmbeddedSandbox>,
    /// This replica's name among those sharing the store (holder of leases).
    pub(super) replica: String,
}

/// The tasks running beside the gRPC port, each named for the error that says it
/// failed, and the sandbox, if msgw runs on one.
pub(super) struct Background {
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    sandbox: Option<EmbeddedSandbox>,
}

impl Background {
    /// Starts every task; each ends once `stop` is sent. `ready`: the health `/readyz`
    /// answers with.
    pub(super) fn spawn(
        beside: Beside,
        services: &Services,
        auth: Arc<Authenticator>,
        tls: Option<Arc<TlsReloader>>,
        ready: watch::Receiver<bool>,
        stop: &watch::Receiver<bool>,
    ) -> anyhow::Result<Self> {
        let metrics = beside.webhooks.metrics.clone();
        let mut admin_routes = crate::transport::admin::router(metrics.clone(), ready);
        // The sandbox's inbox: on the admin port, the one never exposed to the gateway
        // nor to callers; only when msgw runs on its sandbox.
        if let Some(sandbox) = &beside.sandbox {
            admin_routes = admin_routes.merge(sandbox.sandbox.inbox(stop.clone()));
            let inbox = own_url(beside.admin.local_addr()?)?.join("/sandbox/")?;
            tracing::info!(%inbox, "the sandbox's inbox: every message msgw sends, in a browser");
        }
        let mut tasks = vec![
            (
                "admin task",
                tokio::spawn(http_listener::serve(
                    beside.admin,
                    admin_routes,
                    crate::transport::admin::limits(),
                    "admin",
                    metrics.clone(),
                    stop.clone(),
                )),
            ),
            (
                "HTTP task",
                tokio::spawn(http_listener::serve(
                    beside.http,
                    crate::transport::webhook::router(beside.webhooks),
                    beside.webhook_limits,
                    "webhook",
                    metrics.clone(),
                    stop.clone(),
                )),
            ),
            (
                "reconcile task",
                tokio::spawn(
                    Reconciler::new(
                        services.store.clone(),
                        services.events.clone(),
                        services.dispatcher.clone(),
                        beside.reconcile,
                    )
                    .run(stop.clone()),
                ),
            ),
            (
                "schedule task",
                tokio::spawn(services.scheduler.clone().run(stop.clone())),
            ),
            (
                "scheduled messages' upgrade task",
                tokio::spawn(crate::process::kept_upgrade::run(
                    services.store.clone(),
                    stop.clone(),
                )),
            ),
            (
                "balance task",
                tokio::spawn(crate::core::balance::refresh(
                    services.dispatcher.clone(),
                    beside.balance_refresh,
                    Leased::new(
                        services.store.clone(),
                        "balance",
                        beside.replica.clone(),
                        beside.balance_refresh,
                    ),
                    stop.clone(),
                )),
            ),
            (
                "retention task",
                tokio::spawn(services.events.clone().run_retention(
                    beside.retention,
                    RETENTION_EVERY,
                    beside.replica.clone(),
                    stop.clone(),
                )),
            ),
            (
                "callers file task",
                tokio::spawn(auth.watch(stop.clone(), metrics.clone())),
            ),
            (
                "fraud guard task",
                tokio::spawn(services.verifier.watch_guard(stop.clone())),
            ),
        ];
        if let Some(tls) = tls {
            tasks.push((
                "TLS reload task",
                tokio::spawn(tls.watch(stop.clone(), metrics)),
            ));
        }
        Ok(Self {
            tasks,
            sandbox: beside.sandbox,
        })
    }

    /// Waits for every task to end (after stop), then stops the sandbox.
    pub(super) async fn join(self) -> anyhow::Result<()> {
        for (name, task) in self.tasks {
            task.await.context(name)?;
        }
        if let Some(sandbox) = self.sandbox {
            sandbox.stop().await?;
        }
        Ok(())
    }
}
