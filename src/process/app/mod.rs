//! Startup: binds the listeners (port 0 allowed), wires the layers, serves until
//! shutdown, then drains.

pub use super::signal::shutdown_signal;
use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::sync::watch;
use tonic_health::ServingStatus;
use tower_layer::Layer;

use crate::adapters::upstream;
use crate::base::metrics::Metrics;
use crate::core::dispatch::{Dispatcher, Tracking};
use crate::core::events::{EventLog, Intake};
use crate::core::hooks::{HookSigner, HookUrls};
use crate::core::optout::Suppressions;
use crate::core::ports::store::Store;
use crate::core::queries::Queries;
use crate::core::schedule::Scheduler;
use crate::core::verify::{self, Codes, Verifier};
use crate::process::config::Config;
use crate::process::kept_secret;
use crate::transport::auth::tls::TlsReloader;
use crate::transport::auth::{AuthLayer, Authenticator};
use crate::transport::grpc::port::PortLimits;
use crate::transport::grpc::server::Health;
use crate::transport::grpc::{StampLayer, TooLargeLayer};
use crate::transport::listen::Listeners;
use crate::transport::webhook::WebhookState;

mod background;
mod bounds;
mod gateway;

use background::{Background, Beside};

/// A built, not yet serving, msgw.
pub struct Application {
    grpc: GrpcPort,
    services: Services,
    beside: Beside,
    shutdown_grace: Duration,
    shutdown_delay: Duration,
}

/// The gRPC port: its sockets, TLS, callers and bounds.
struct GrpcPort {
    listeners: Listeners,
    /// TLS of the gRPC port; `None`: plaintext.
    tls: Option<Arc<TlsReloader>>,
    /// Who may call the gRPC port.
    auth: Arc<Authenticator>,
    /// Bounds of the gRPC port, and its connection cap and memory budget (resolved from
    /// the file limit and msgw's memory limit).
    limits: PortLimits,
    max_connections: usize,
    memory_budget: usize,
}

/// What the RPCs and the background tasks share: core's services and the store.
struct Services {
    dispatcher: Dispatcher,
    scheduler: Arc<Scheduler>,
    queries: Arc<Queries>,
    verifier: Verifier,
    store: Arc<dyn Store>,
    events: Arc<EventLog>,
}

impl Application {
    /// Binds the gRPC, webhook and admin ports, opens the store and connects the layers;
    /// nothing is served yet.
    pub async fn build(mut config: Config) -> anyhow::Result<Self> {
        let files = bounds::files(&mut config)?;
        let auth = Authenticator::new(
            config.callers_file.clone(),
            config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        )
        .map_err(anyhow::Error::msg)?;
        let [grpc, http, admin] = config.bind_ports()?;
        let public_url = match config.public_url.clone() {
            Some(url) => url,
            None => own_url(http.local_addr()?)?,
        };
        let store =
            crate::adapters::store::open(&config.store_target(), config.reconcile.first_after)
                .await
                .with_context(|| {
                    format!(
                        "cannot open the store {}",
                        crate::adapters::store::redacted(&config.store_url)
                    )
                })?;
        // Not configured (SQLite only, see config): kept next to the database, so the
        // hooks of messages sent before a restart still verify after it.
        let (webhook_secret, webhook_note) = match config.webhook_secret.take() {
            Some(secret) => (secret, None),
            None => kept_secret::WEBHOOK.of_store(&config.store_url)?,
        };
        let signer =
            HookSigner::new(&webhook_secret).with_previous(config.webhook_secret_previous.as_ref());
        let hooks = HookUrls::new(&public_url, signer.clone());
        let metrics = Metrics::new()?;
        let (gateway, sandbox) =
            gateway::connect(&config, &hooks, store.clone(), auth.is_open(), &metrics).await?;
        // After the sandbox's warning: that one is the first line a user sees.
        tracing::info!(store = %crate::adapters::store::redacted(&config.store_url), "store open");
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
        let verifier = verifier(
            &mut config,
            dispatcher.clone(),
            store.clone(),
            sandbox.is_some(),
        )?;
        log_authentication(&auth, sandbox.is_some(), config.callers_file.is_some());
        let grpc_bounds = bounds::grpc_port(&config, &files);
        let tls = crate::transport::auth::tls::for_grpc_port(config.tls).context("gRPC TLS")?;
        tracing::info!(
            %public_url,
            "gateway webhooks: per-message hooks under /v1/webhooks/status/, pipeline statuses at /v1/webhooks/account/<MSGW_ACCOUNT_TOKEN>"
        );
        Ok(Self {
            grpc: GrpcPort {
                listeners: grpc,
                tls,
                auth,
                limits: config.grpc_limits,
                max_connections: grpc_bounds.max_connections,
                memory_budget: grpc_bounds.memory_budget,
            },
            beside: Beside {
                http,
                admin,
                webhooks: WebhookState {
                    signer,
                    account_token: config.account_token,
                    intake: Intake::new(events.clone(), store.clone(), upstream::parse_webhook),
                    metrics,
                    body_timeout: config.webhook_limits.body_timeout,
                },
                webhook_limits: config.webhook_limits,
                reconcile: config.reconcile,
                retention: config.retention,
                balance_refresh: config.balance_refresh,
                sandbox,
                replica: replica_name(),
            },
            services: Services {
                dispatcher,
                scheduler,
                queries,
                verifier,
                store,
                events,
            },
            shutdown_grace: config.shutdown_grace,
            shutdown_delay: config.shutdown_delay,
        })
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.grpc.listeners.local_addr()?)
    }

    /// The bound HTTP (webhook) address.
    pub fn http_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.beside.http.local_addr()?)
    }

    /// The bound admin (`/metrics`) address.
    pub fn admin_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.beside.admin.local_addr()?)
    }

    /// Serves until `shutdown` resolves. Then: NOT_SERVING (serving on for the shutdown
    /// delay, if any), open streams end with UNAVAILABLE, no new connections, in-flight
    /// calls finish within the grace period, background work stops, and the store is
    /// closed.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let services = &self.services;
        let (routes, health) = crate::transport::grpc::server::routes(
            services.scheduler.clone(),
            services.queries.clone(),
            services.events.clone(),
            services.verifier.clone(),
            Suppressions::new(services.store.clone(), services.events.clone()),
        )
        .context("gRPC reflection")?;
        health.set(ServingStatus::Serving).await;
        let stop = stop_after(shutdown, health.clone(), self.shutdown_delay);
        let metrics = self.beside.webhooks.metrics.clone();
        let addrs = [self.grpc_addr()?, self.http_addr()?, self.admin_addr()?];
        // The first address of each port by name (what scripts read), and all of them:
        // a host name listens on each address it resolves to.
        let all =
            [&self.grpc.listeners, &self.beside.http, &self.beside.admin].map(Listeners::describe);
        let port = self.grpc;
        let background = Background::spawn(
            self.beside,
            &self.services,
            port.auth.clone(),
            port.tls.clone(),
            health.ready(),
            &stop,
        )?;
        tracing::info!(
            grpc_addr = %addrs[0],
            http_addr = %addrs[1],
            admin_addr = %addrs[2],
            grpc_addrs = %all[0],
            http_addrs = %all[1],
            admin_addrs = %all[2],
            "msgw serving"
        );
        let draining = drain_after(&stop, health, self.services.events.clone());
        // Outermost first: the arrival stamp, the size check, then authentication.
        let service = StampLayer
            .layer(TooLargeLayer.layer(AuthLayer::new(port.auth, metrics.clone()).layer(routes)));
        let server = crate::transport::grpc::port::serve(
            port.listeners,
            port.tls,
            service,
            port.limits,
            port.max_connections,
            port.memory_budget,
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
        background.join().await?;
        self.services.store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Stop, sent when `shutdown` resolves and, if there is a shutdown delay, after serving
/// on NOT_SERVING for it while load balancers take msgw out.
fn stop_after(
    shutdown: impl Future<Output = ()> + Send + 'static,
    health: Health,
    delay: Duration,
) -> watch::Receiver<bool> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
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
    });
    stop
}

/// Draining, sent once stop is: NOT_SERVING, the event streams closed, then the gRPC
/// port drains its calls.
fn drain_after(
    stop: &watch::Receiver<bool>,
    health: Health,
    events: Arc<EventLog>,
) -> watch::Receiver<bool> {
    let (drain, draining) = watch::channel(false);
    let mut stop = stop.clone();
    tokio::spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
        tracing::info!("shutting down: NOT_SERVING, closing streams, draining in-flight calls");
        health.set(ServingStatus::NotServing).await;
        events.close();
        drain.send_replace(true);
    });
    draining
}

/// The one-time-code verifier, with its secret (configured, else kept next to the
/// SQLite database) and libphonenumber's metadata loaded now rather than by the first
/// verification.
fn verifier(
    config: &mut Config,
    dispatcher: Dispatcher,
    store: Arc<dyn Store>,
    sandbox: bool,
) -> anyhow::Result<Verifier> {
    let secret = match config.verify_secret.take() {
        Some(secret) => secret,
        None => {
            let (secret, note) = kept_secret::VERIFY.of_store(&config.store_url)?;
            if let Some(note) = note {
                tracing::info!("{note}");
            }
            secret
        }
    };
    crate::core::numbers::load();
    Ok(Verifier::new(
        dispatcher,
        store,
        Codes::new(&secret),
        verify::Settings {
            sandbox,
            sandbox_numbers: if sandbox {
                crate::sandbox::magic::NUMBERS.to_vec()
            } else {
                Vec::new()
            },
            ..config.verify.clone()
        },
    ))
}

/// Says who may call the gRPC port: warns when anyone may, outside the sandbox.
fn log_authentication(auth: &Authenticator, sandbox: bool, callers_file: bool) {
    if auth.is_open() {
        if !sandbox {
            tracing::warn!(
                "no caller authentication (MSGW_ALLOW_UNAUTHENTICATED=true): whatever reaches the gRPC port may send and read every event"
            );
        }
    } else {
        tracing::info!(
            callers = auth.callers(),
            callers_file,
            "gRPC callers must authenticate"
        );
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
