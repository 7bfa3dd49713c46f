//! Startup: binds the listeners (port 0 allowed), wires the layers, serves until
//! shutdown, then drains.

pub use super::signal::shutdown_signal;
use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use secrecy::SecretString;
use tokio::sync::watch;
use tonic_health::ServingStatus;
use tower_layer::Layer;

use crate::adapters::upstream::{self, GatewayClient, GatewayConfig};
use crate::base::metrics::Metrics;
use crate::core::dispatch::{Dispatcher, Tracking};
use crate::core::events::{EventLog, Intake};
use crate::core::hooks::{HookSigner, HookUrls};
use crate::core::optout::Suppressions;
use crate::core::periodic::Leased;
use crate::core::ports::store::{Retention, Store};
use crate::core::queries::Queries;
use crate::core::reconcile::{ReconcileConfig, Reconciler};
use crate::core::schedule::Scheduler;
use crate::core::verify::{self, Codes, Verifier};
use crate::process::config::{Config, Upstream};
use crate::process::kept_secret;
use crate::sandbox::{EmbeddedSandbox, SandboxConfig};
use crate::transport::auth::tls::TlsReloader;
use crate::transport::auth::{AuthLayer, Authenticator};
use crate::transport::grpc::port::PortLimits;
use crate::transport::grpc::{StampLayer, TooLargeLayer};
use crate::transport::http_listener::{self, ListenerLimits};
use crate::transport::listen::Listeners;
use crate::transport::webhook::{self, WebhookState};

/// How often the event retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// A built, not yet serving, msgw.
pub struct Application {
    grpc: Listeners,
    /// TLS of the gRPC port; `None`: plaintext.
    tls: Option<Arc<TlsReloader>>,
    /// Who may call the gRPC port.
    auth: Arc<Authenticator>,
    /// Bounds of the gRPC port, and its connection cap (resolved from the file limit).
    grpc_limits: PortLimits,
    grpc_max_connections: usize,
    grpc_memory_budget: usize,
    http: Listeners,
    admin: Listeners,
    dispatcher: Dispatcher,
    scheduler: Arc<Scheduler>,
    queries: Arc<Queries>,
    verifier: Verifier,
    store: Arc<dyn Store>,
    events: Arc<EventLog>,
    webhooks: WebhookState,
    webhook_limits: ListenerLimits,
    reconcile: ReconcileConfig,
    retention: Retention,
    shutdown_grace: Duration,
    shutdown_delay: Duration,
    balance_refresh: Duration,
    sandbox: Option<EmbeddedSandbox>,
    /// This replica's name among those sharing the store (holder of leases).
    replica: String,
}

impl Application {
    /// Binds the gRPC, webhook and admin ports, opens the store and connects the layers;
    /// nothing is served yet.
    pub async fn build(mut config: Config) -> anyhow::Result<Self> {
        let files = crate::process::fd_limit::raise();
        let shares = crate::process::fd_limit::share(
            files,
            config.upstream_limits.connections,
            config.grpc_limits.max_connections,
            config.webhook_limits.max_connections,
        )
        .map_err(anyhow::Error::msg)?;
        if shares.webhook < config.webhook_limits.max_connections {
            tracing::warn!(
                file_limit = files,
                webhook_max_connections = shares.webhook,
                "the file limit is low: the webhook listener takes fewer connections than MSGW_WEBHOOK_MAX_CONNECTIONS"
            );
            config.webhook_limits.max_connections = shares.webhook;
        }
        let auth = Authenticator::new(
            config.callers_file.clone(),
            config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        )
        .map_err(anyhow::Error::msg)?;
        let [grpc, http, admin] = config.bind_ports()?;
        let public_url = match config.public_url {
            Some(url) => url,
            None => own_url(http.local_addr()?)?,
        };
        let store = crate::adapters::store::open(
            &config.store_url,
            config.store_password.as_ref(),
            config.reconcile.first_after,
        )
        .await
        .with_context(|| format!("cannot open the store {}", redact(&config.store_url)))?;
        // Not configured (SQLite only, see config): kept next to the database, so the
        // hooks of messages sent before a restart still verify after it.
        let (webhook_secret, webhook_note) = match config.webhook_secret {
            Some(secret) => (secret, None),
            None => kept_secret::WEBHOOK.of_store(&config.store_url)?,
        };
        let signer =
            HookSigner::new(&webhook_secret).with_previous(config.webhook_secret_previous.as_ref());
        let hooks = HookUrls::new(&public_url, signer.clone());
        let (base_url, api_key, sandbox) = match config.upstream {
            Upstream::Gateway { url, api_key } => (url, api_key, None),
            Upstream::Sandbox(sandbox_config) => {
                let sandbox_config = SandboxConfig {
                    account_webhook_url: Some(hooks.account_url(&config.account_token)),
                    ..sandbox_config
                };
                let api_key = SecretString::from(sandbox_config.api_key.clone());
                let (url, task) =
                    EmbeddedSandbox::start(sandbox_config, store.clone(), auth.is_open()).await?;
                (url, api_key, Some(task))
            }
        };
        // After the sandbox's warning: that one is the first line a user sees.
        tracing::info!(store = %redact(&config.store_url), "store open");
        let metrics = Metrics::new()?;
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
        for secret in &config.generated_secrets {
            tracing::info!("no {secret} configured: generated a random one for this run");
        }
        if let Some(note) = webhook_note {
            tracing::info!("{note}");
        }

        let events = EventLog::open(
            store.clone(),
            config.event_fan_out,
            metrics.clone(),
            config.opt_out.keywords(),
        )
        .await
        .context("cannot read where the event log stands")?;
        let dispatcher =
            Dispatcher::new(Arc::new(gateway), config.upstream_limits, metrics.clone())
                .with_tracking(Tracking {
                    hooks: hooks.clone(),
                    store: store.clone(),
                    settle: config.upstream_settle,
                });
        let scheduler = Scheduler::new(dispatcher.clone(), store.clone(), events.clone());
        let queries = Arc::new(Queries::new(
            dispatcher.clone(),
            store.clone(),
            config.queries,
        ));
        let verify_secret = match config.verify_secret {
            Some(secret) => secret,
            // Not configured (SQLite only, see config): kept next to the database.
            None => {
                let (secret, note) = kept_secret::VERIFY.of_store(&config.store_url)?;
                if let Some(note) = note {
                    tracing::info!("{note}");
                }
                secret
            }
        };
        // libphonenumber's metadata, loaded now rather than by the first verification.
        crate::core::numbers::load();
        let verifier = Verifier::new(
            dispatcher.clone(),
            store.clone(),
            Codes::new(&verify_secret),
            verify::Settings {
                sandbox: sandbox.is_some(),
                sandbox_numbers: match sandbox {
                    Some(_) => crate::sandbox::magic::NUMBERS.to_vec(),
                    None => Vec::new(),
                },
                ..config.verify
            },
        );
        if auth.is_open() {
            if sandbox.is_none() {
                tracing::warn!(
                    "no caller authentication (MSGW_ALLOW_UNAUTHENTICATED=true): whatever reaches the gRPC port may send and read every event"
                );
            }
        } else {
            tracing::info!(
                callers = auth.callers(),
                callers_file = config.callers_file.is_some(),
                "gRPC callers must authenticate"
            );
        }
        let tls = crate::transport::auth::tls::for_grpc_port(config.tls).context("gRPC TLS")?;
        // The limit of msgw's own cgroup (v2, else v1), else the machine's memory.
        let memory = crate::process::memory::find();
        match &memory {
            Some(found) => tracing::info!(
                memory_limit = found.bytes,
                from = %found.from,
                "memory limit found"
            ),
            None => tracing::warn!("no memory limit found (no cgroup limit, no /proc/meminfo)"),
        }
        let memory_limit = memory.map(|found| found.bytes);
        let grpc_memory_budget = config
            .grpc_limits
            .memory_budget
            .or(memory_limit.map(|limit| limit / crate::process::memory::GRPC_SHARE))
            .map_or(usize::MAX, |b| usize::try_from(b).unwrap_or(usize::MAX));
        // Unless set, the connections whose fixed costs fit in half the budget.
        let grpc_max_connections = match config.grpc_limits.max_connections {
            Some(_) => shares.grpc,
            None => shares
                .grpc
                .min(crate::transport::conn_table::connections_within(
                    grpc_memory_budget,
                )),
        };
        tracing::info!(
            max_connections = grpc_max_connections,
            memory_budget = grpc_memory_budget,
            memory_limit,
            send_timeout = ?config.grpc_limits.send_timeout,
            file_limit = files,
            handshake_timeout = ?config.grpc_limits.handshake_timeout,
            idle_timeout = ?config.grpc_limits.idle_timeout,
            "gRPC port bounds"
        );
        tracing::info!(
            %public_url,
            "gateway webhooks: per-message hooks under /v1/webhooks/status/, pipeline statuses at /v1/webhooks/account/<MSGW_ACCOUNT_TOKEN>"
        );
        Ok(Self {
            grpc,
            tls,
            auth,
            grpc_limits: config.grpc_limits,
            grpc_max_connections,
            grpc_memory_budget,
            http,
            admin,
            dispatcher,
            scheduler,
            queries,
            verifier,
            webhooks: WebhookState {
                signer,
                account_token: config.account_token,
                intake: Intake::new(events.clone(), store.clone(), upstream::parse_webhook),
                metrics,
                body_timeout: config.webhook_limits.body_timeout,
            },
            webhook_limits: config.webhook_limits,
            store,
            events,
            reconcile: config.reconcile,
            retention: config.retention,
            shutdown_grace: config.shutdown_grace,
            shutdown_delay: config.shutdown_delay,
            balance_refresh: config.balance_refresh,
            sandbox,
            replica: replica_name(),
        })
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.grpc.local_addr()?)
    }

    /// The bound HTTP (webhook) address.
    pub fn http_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.http.local_addr()?)
    }

    /// The bound admin (`/metrics`) address.
    pub fn admin_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.admin.local_addr()?)
    }

    /// Serves until `shutdown` resolves. Then: NOT_SERVING (serving on for the shutdown
    /// delay, if any), open streams end with UNAVAILABLE, no new connections, in-flight
    /// calls finish within the grace period, background work stops, and the store is
    /// closed.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (routes, health) = crate::transport::grpc::server::routes(
            self.scheduler.clone(),
            self.queries.clone(),
            self.events.clone(),
            self.verifier.clone(),
            Suppressions::new(self.store.clone(), self.events.clone()),
        )
        .context("gRPC reflection")?;
        health.set(ServingStatus::Serving).await;
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn({
            let (health, delay) = (health.clone(), self.shutdown_delay);
            async move {
                shutdown.await;
                if !delay.is_zero() {
                    tracing::info!(
                        ?delay,
                        "shutting down: NOT_SERVING, serving on while load balancers take msgw out"
                    );
                    health.set(ServingStatus::NotServing).await;
                    tokio::time::sleep(delay).await;
                }
                stop_tx.send_replace(true);
            }
        });
        let metrics = self.webhooks.metrics.clone();
        let grpc_addr = self.grpc_addr()?;
        let http_addr = self.http_addr()?;
        let admin_addr = self.admin_addr()?;
        // The first address of each port by name (what scripts read), and all of them:
        // a host name listens on each address it resolves to.
        let all = [&self.grpc, &self.http, &self.admin].map(Listeners::describe);

        let mut admin_routes =
            crate::transport::admin::router(self.webhooks.metrics.clone(), health.ready());
        // The sandbox's inbox: on the admin port, the one never exposed to the gateway
        // nor to callers; only when msgw runs on its sandbox.
        if let Some(sandbox) = &self.sandbox {
            admin_routes = admin_routes.merge(sandbox.sandbox.inbox(stop.clone()));
            let inbox = own_url(admin_addr)?.join("/sandbox/")?;
            tracing::info!(%inbox, "the sandbox's inbox: every message msgw sends, in a browser");
        }
        let admin_task = tokio::spawn(http_listener::serve(
            self.admin,
            admin_routes,
            crate::transport::admin::limits(),
            "admin",
            metrics.clone(),
            stop.clone(),
        ));
        let http_task = tokio::spawn(http_listener::serve(
            self.http,
            webhook::router(self.webhooks),
            self.webhook_limits,
            "webhook",
            metrics.clone(),
            stop.clone(),
        ));
        let reconcile_task = tokio::spawn(
            Reconciler::new(
                self.store.clone(),
                self.events.clone(),
                self.dispatcher.clone(),
                self.reconcile,
            )
            .run(stop.clone()),
        );
        let schedule_task = tokio::spawn(self.scheduler.clone().run(stop.clone()));
        let upgrade_task = tokio::spawn(super::kept_upgrade::run(self.store.clone(), stop.clone()));
        let balance_task = tokio::spawn(crate::core::balance::refresh(
            self.dispatcher.clone(),
            self.balance_refresh,
            Leased::new(
                self.store.clone(),
                "balance",
                self.replica.clone(),
                self.balance_refresh,
            ),
            stop.clone(),
        ));
        let retention_task = tokio::spawn(self.events.clone().run_retention(
            self.retention,
            RETENTION_EVERY,
            self.replica.clone(),
            stop.clone(),
        ));
        let tls_task = self
            .tls
            .clone()
            .map(|tls| tokio::spawn(tls.watch(stop.clone(), metrics.clone())));
        let callers_task = tokio::spawn(self.auth.clone().watch(stop.clone(), metrics.clone()));
        let guard_task = tokio::spawn(self.verifier.watch_guard(stop.clone()));
        tracing::info!(
            %grpc_addr,
            %http_addr,
            %admin_addr,
            grpc_addrs = %all[0],
            http_addrs = %all[1],
            admin_addrs = %all[2],
            "msgw serving"
        );

        let (drain, draining) = watch::channel(false);
        tokio::spawn({
            let (health, events, mut stop) = (health.clone(), self.events.clone(), stop.clone());
            async move {
                let _ = stop.wait_for(|s| *s).await;
                tracing::info!(
                    "shutting down: NOT_SERVING, closing streams, draining in-flight calls"
                );
                health.set(ServingStatus::NotServing).await;
                events.close();
                drain.send_replace(true);
            }
        });
        // Outermost first: the arrival stamp, the size check, then authentication.
        let service = StampLayer.layer(
            TooLargeLayer.layer(AuthLayer::new(self.auth.clone(), metrics.clone()).layer(routes)),
        );
        let server = crate::transport::grpc::port::serve(
            self.grpc,
            self.tls,
            service,
            self.grpc_limits,
            self.grpc_max_connections,
            self.grpc_memory_budget,
            metrics,
            draining,
        );
        let grace = self.shutdown_grace;
        let grace_over = {
            let mut stop = stop.clone();
            async move {
                let _ = stop.wait_for(|s| *s).await;
                tokio::time::sleep(grace).await;
            }
        };
        tokio::select! {
            () = server => {}
            () = grace_over => tracing::warn!(?grace, "grace period over: dropping the calls still in flight"),
        }

        http_task.await.context("HTTP task")?;
        callers_task.await.context("callers file task")?;
        admin_task.await.context("admin task")?;
        reconcile_task.await.context("reconcile task")?;
        schedule_task.await.context("schedule task")?;
        upgrade_task
            .await
            .context("scheduled messages' upgrade task")?;
        retention_task.await.context("retention task")?;
        balance_task.await.context("balance task")?;
        guard_task.await.context("fraud guard task")?;
        if let Some(tls_task) = tls_task {
            tls_task.await.context("TLS reload task")?;
        }
        if let Some(sandbox) = self.sandbox {
            sandbox.stop().await?;
        }
        self.store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// A name for this process among the replicas: the pod's host name (for operators
/// reading the leases table) plus a random suffix (unique even across restarts).
fn replica_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "msgw".into());
    format!("{host}-{:08x}", rand::random::<u32>())
}

/// The HTTP listener's own URL; loopback when it listens on all interfaces.
fn own_url(addr: SocketAddr) -> anyhow::Result<url::Url> {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    Ok(url::Url::parse(&format!(
        "http://{}",
        SocketAddr::new(ip, addr.port())
    ))?)
}

/// A store URL for logs: any password in it replaced.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}
