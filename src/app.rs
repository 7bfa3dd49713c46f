//! Startup: binds the listeners (port 0 allowed), wires the layers, serves until shutdown.

use std::{future::Future, net::SocketAddr};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Server;
use tonic_health::ServingStatus;

use secrecy::SecretString;
use tokio::{sync::oneshot, task::JoinHandle};

use crate::config::{Config, Upstream};
use crate::dispatch::Dispatcher;
use crate::grpc::{Account, Messaging, Templates};
use crate::proto::{
    self, account_service_server::AccountServiceServer,
    messaging_service_server::MessagingServiceServer,
    template_service_server::TemplateServiceServer,
};
use crate::sandbox::{self, Sandbox, SandboxConfig};
use crate::upstream::{Gateway, GatewayConfig};

/// A built, not yet serving, msgw.
pub struct Application {
    grpc: TcpListener,
    dispatcher: Dispatcher,
    sandbox: Option<RunningSandbox>,
}

/// The in-process sandbox gateway and the handle that stops it.
struct RunningSandbox {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Application {
    /// Binds the gRPC port and connects the layers; nothing is served yet.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let (base_url, api_key, sandbox) = match config.upstream {
            Upstream::Gateway { url, api_key } => (url, api_key, None),
            Upstream::Sandbox(sandbox_config) => {
                let (url, running) = start_sandbox(sandbox_config.clone()).await?;
                (
                    url,
                    SecretString::from(sandbox_config.api_key),
                    Some(running),
                )
            }
        };
        let gateway = Gateway::new(GatewayConfig {
            base_url,
            api_key,
            timeout: config.upstream_timeout,
            max_idle_connections: config.upstream_connections,
        })
        .map_err(anyhow::Error::msg)?;
        tracing::info!(endpoint = %gateway.endpoint(), "gateway configured");
        let grpc = TcpListener::bind(config.grpc_addr)
            .await
            .with_context(|| format!("cannot bind the gRPC address {}", config.grpc_addr))?;
        Ok(Self {
            grpc,
            dispatcher: Dispatcher::new(gateway),
            sandbox,
        })
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.grpc.local_addr()?)
    }

    /// Serves until `shutdown` resolves, then reports NOT_SERVING, stops accepting,
    /// and lets in-flight calls finish.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (health, health_service) = tonic_health::server::health_reporter();
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .context("reflection v1")?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .context("reflection v1alpha")?;

        let addr = self.grpc_addr()?;
        for service in SERVICES {
            health
                .set_service_status(service, ServingStatus::Serving)
                .await;
        }
        health.set_service_status("", ServingStatus::Serving).await;
        tracing::info!(%addr, "gRPC listening");

        let draining = {
            let health = health.clone();
            async move {
                shutdown.await;
                tracing::info!("shutting down: NOT_SERVING, draining in-flight calls");
                health
                    .set_service_status("", ServingStatus::NotServing)
                    .await;
                for service in SERVICES {
                    health
                        .set_service_status(service, ServingStatus::NotServing)
                        .await;
                }
            }
        };

        Server::builder()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(MessagingServiceServer::new(Messaging::new(
                self.dispatcher.clone(),
            )))
            .add_service(AccountServiceServer::new(Account::new(
                self.dispatcher.clone(),
            )))
            .add_service(TemplateServiceServer::new(Templates::new(self.dispatcher)))
            .serve_with_incoming_shutdown(TcpListenerStream::new(self.grpc), draining)
            .await
            .context("gRPC server")?;
        if let Some(sandbox) = self.sandbox {
            let _ = sandbox.stop.send(());
            sandbox
                .task
                .await
                .context("sandbox task")?
                .context("sandbox gateway")?;
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// Starts the sandbox gateway on a free loopback port and returns its base URL.
async fn start_sandbox(config: SandboxConfig) -> anyhow::Result<(url::Url, RunningSandbox)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind the sandbox gateway")?;
    let addr = listener.local_addr()?;
    let base_url = url::Url::parse(&format!("http://{addr}"))?;
    tracing::warn!(
        sandbox_url = %base_url,
        sandbox_api_key = %config.api_key,
        "no MSGW_UPSTREAM_URL set: msgw runs against its built-in SANDBOX gateway; nothing is really sent"
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(sandbox::serve(listener, Sandbox::new(config), async {
        let _ = stopped.await;
    }));
    Ok((base_url, RunningSandbox { stop, task }))
}

/// The services msgw serves, as health check names.
const SERVICES: [&str; 3] = [
    "msgw.v1.MessagingService",
    "msgw.v1.AccountService",
    "msgw.v1.TemplateService",
];

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
