//! Test harness: a fake gateway on loopback that records every request, and the
//! real msgw started on port 0 against it.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use msgw::{
    core::dispatch::Limits, core::hooks::HookSigner, core::ports::store::Retention,
    core::reconcile::ReconcileConfig, sandbox::SandboxConfig, transport::grpc::port::PortLimits,
    transport::http_listener::ListenerLimits,
};
use msgw::{
    process::app::Application,
    process::config::{Config, Upstream},
    transport::proto::{
        account_service_client::AccountServiceClient, event_service_client::EventServiceClient,
        messaging_service_client::MessagingServiceClient,
        template_service_client::TemplateServiceClient,
        verification_service_client::VerificationServiceClient,
    },
};
use tokio::{sync::oneshot, task::JoinHandle};
use tonic::transport::Channel;

pub use crate::callers::{Callers, Entry, sha256_hex};
pub use crate::gateway::{API_KEY, FakeGateway, Reply, default_reply};

/// The webhook HMAC key the tests configure.
pub const WEBHOOK_SECRET: &str = "test-webhook-secret-0123456789";
/// The verification secret of tests on a PostgreSQL store (SQLite ones keep a
/// generated one next to the database unless they set their own).
pub const VERIFY_SECRET: &str = "test-verify-secret-0123456789";
/// The account webhook token the tests configure.
pub const ACCOUNT_TOKEN: &str = "test-account-token-0123456789";

/// msgw, running against a fake gateway or its sandbox.
pub struct TestApp {
    pub addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The admin listener (`/metrics`).
    pub admin_addr: SocketAddr,
    pub gateway: FakeGateway,
    /// The SQLite file; the directory lives as long as the app (or a restart of it).
    pub store: Arc<tempfile::TempDir>,
    channel: Channel,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestApp {
    pub fn messaging(&self) -> MessagingServiceClient<Channel> {
        MessagingServiceClient::new(self.channel.clone())
    }

    pub fn account(&self) -> AccountServiceClient<Channel> {
        AccountServiceClient::new(self.channel.clone())
    }

    pub fn templates(&self) -> TemplateServiceClient<Channel> {
        TemplateServiceClient::new(self.channel.clone())
    }

    pub fn events(&self) -> EventServiceClient<Channel> {
        EventServiceClient::new(self.channel.clone())
    }

    pub fn verification(&self) -> VerificationServiceClient<Channel> {
        VerificationServiceClient::new(self.channel.clone())
    }

    pub fn suppressions(
        &self,
    ) -> msgw::transport::proto::suppression_service_client::SuppressionServiceClient<Channel> {
        msgw::transport::proto::suppression_service_client::SuppressionServiceClient::new(
            self.channel.clone(),
        )
    }

    pub fn fraud_guard(
        &self,
    ) -> msgw::transport::proto::fraud_guard_service_client::FraudGuardServiceClient<Channel> {
        msgw::transport::proto::fraud_guard_service_client::FraudGuardServiceClient::new(
            self.channel.clone(),
        )
    }

    pub fn store_url(&self) -> String {
        store_url(&self.store)
    }

    /// The sum of the samples of metric `name` whose labels include every `labels`
    /// pair (`reason="suspected_fraud"`), as `/metrics` prints them.
    pub async fn metric_sum(&self, name: &str, labels: &[&str]) -> f64 {
        let text = reqwest::get(format!("http://{}/metrics", self.admin_addr))
            .await
            .expect("the admin listener answers")
            .text()
            .await
            .expect("a metrics page");
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
            .filter(|l| labels.iter().all(|label| l.contains(label)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// POSTs a webhook body to msgw's HTTP listener; returns the HTTP status.
    pub async fn post_webhook(&self, path: &str, body: impl Into<reqwest::Body>) -> u16 {
        reqwest::Client::new()
            .post(format!("http://{}{path}", self.http_addr))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("webhook POST")
            .status()
            .as_u16()
    }

    /// The per-message hook path msgw gives the gateway for `client_id`.
    /// The value of the first sample of `series` (name and labels as printed) on
    /// `/metrics`, if there is one.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = reqwest::get(format!("http://{}/metrics", self.admin_addr))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find(|l| {
                l.strip_prefix(series)
                    .is_some_and(|rest| rest.starts_with(' '))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    pub fn hook_path(&self, client_id: u64) -> String {
        let signer = HookSigner::new(&WEBHOOK_SECRET.to_owned().into());
        format!(
            "/v1/webhooks/status/{}",
            signer.token(msgw::core::domain::ClientId::new(client_id).expect("an id above 0"))
        )
    }

    /// The full hook URL msgw injects into a send of `client_id`.
    pub fn hook_url(&self, client_id: u64) -> String {
        format!("http://{}{}", self.http_addr, self.hook_path(client_id))
    }

    /// Stops msgw and starts it again on the same store (with a new fake gateway).
    pub async fn restart(self, options: Options) -> TestApp {
        let store = self.store.clone();
        self.stop().await.expect("msgw stops cleanly");
        spawn(Options {
            store: Some(store),
            ..options
        })
        .await
    }

    /// Sends the shutdown signal and waits until the server has stopped.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.server.take() {
            Some(h) => h.await?,
            None => Ok(()),
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(h) = &self.server {
            h.abort();
        }
    }
}

fn store_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("msgw.db").display())
}

/// How a test wants msgw.
pub struct Options {
    pub upstream_timeout: Duration,
    /// After a cut send request, how long "not found" means "not yet".
    pub upstream_settle: Duration,
    /// Another gateway URL instead of the fake gateway.
    pub upstream_url: Option<String>,
    /// Run against the sandbox with this step delay instead of the fake gateway.
    pub sandbox_step: Option<Duration>,
    /// The sandbox's contracted rate (operations a second), with `sandbox_step`.
    pub sandbox_rate: Option<u32>,
    /// First status poll after sending.
    pub reconcile_after: Duration,
    /// Reuse this store directory (a restart).
    pub store: Option<Arc<tempfile::TempDir>>,
    pub retention: Retention,
    pub shutdown_grace: Duration,
    /// NOT_SERVING but serving on, after the shutdown signal.
    pub shutdown_delay: Duration,
    /// Events kept in memory for live subscribers.
    pub fan_out: usize,
    /// Balance metric refresh; zero: off.
    pub balance_refresh: Duration,
    /// Gateway requests in flight, operations per request, queued operations.
    pub limits: Limits,
    /// Bounds of the gRPC port.
    pub grpc_limits: PortLimits,
    /// Timeouts and connection limit of the webhook listener.
    pub webhook_limits: ListenerLimits,
    /// Another store URL (a PostgreSQL schema shared by replicas) instead of SQLite.
    pub store_url: Option<String>,
    /// How a pooler between msgw and PostgreSQL pools (`store_url` is then its).
    pub store_pooling: msgw::adapters::store::Pooling,
    /// PostgreSQL itself, past the pooler.
    pub store_direct_url: Option<String>,
    /// The webhook secret before a rotation.
    pub webhook_secret_previous: Option<String>,
    /// TLS (and mTLS) on the gRPC port.
    pub tls: Option<msgw::transport::auth::tls::TlsFiles>,
    /// What the harness's client trusts and presents; set exactly when `tls` is.
    pub tls_client: Option<TlsClient>,
    /// The callers file (bearer tokens, permissions, rates).
    /// A callers file msgw reads, written into its directory.
    pub callers: Option<Callers>,
    pub callers_file: Option<std::path::PathBuf>,
    /// Verifications: secret (PostgreSQL stores get [`VERIFY_SECRET`]), resend
    /// interval, phone limit, allowed prefixes.
    pub verify: msgw::core::verify::Settings,
    /// The replies that opt a number out, and back in.
    pub opt_out: msgw::core::optout::Settings,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            upstream_timeout: Duration::from_secs(5),
            // Tests of the settle window set their own.
            upstream_settle: Duration::ZERO,
            upstream_url: None,
            sandbox_step: None,
            sandbox_rate: None,
            // Tests that do not expect polling must not see any.
            reconcile_after: Duration::from_secs(3600),
            store: None,
            retention: Retention {
                max_age: Duration::from_secs(86_400),
                max_events: 1_000_000,
                claims_max_age: Duration::from_secs(7 * 86_400),
                guard_max_age: std::time::Duration::from_secs(3600),
                trusted_keys_max_age: std::time::Duration::from_secs(3600),
            },
            shutdown_grace: Duration::from_secs(5),
            shutdown_delay: Duration::ZERO,
            fan_out: 4096,
            balance_refresh: Duration::ZERO,
            limits: Limits::default(),
            grpc_limits: PortLimits::default(),
            webhook_limits: ListenerLimits::default(),
            store_url: None,
            store_pooling: msgw::adapters::store::Pooling::Session,
            store_direct_url: None,
            webhook_secret_previous: None,
            tls: None,
            tls_client: None,
            callers: None,
            callers_file: None,
            verify: msgw::core::verify::Settings::default(),
            opt_out: msgw::core::optout::Settings::default(),
        }
    }
}

pub async fn spawn_app() -> TestApp {
    spawn(Options::default()).await
}

/// msgw with this upstream timeout, pointed at `upstream_url` instead of the fake gateway if given.
pub async fn spawn_app_with(upstream_timeout: Duration, upstream_url: Option<String>) -> TestApp {
    spawn(Options {
        upstream_timeout,
        upstream_url,
        ..Options::default()
    })
    .await
}

/// msgw as `msgw serve` runs without a gateway: against its in-process sandbox,
/// with statuses moving every `step_delay`.
pub async fn spawn_sandboxed_app(step_delay: Duration) -> TestApp {
    spawn(Options {
        sandbox_step: Some(step_delay),
        ..Options::default()
    })
    .await
}

/// The configuration of msgw as a test wants it, and its SQLite directory.
pub fn config(options: Options, gateway: &FakeGateway) -> (Config, Arc<tempfile::TempDir>) {
    let upstream = match options.sandbox_step {
        Some(step_delay) => Upstream::Sandbox(SandboxConfig {
            step_delay,
            webhook_backoff: Duration::from_millis(10),
            rate: options.sandbox_rate,
            ..SandboxConfig::default()
        }),
        None => Upstream::Gateway {
            url: options
                .upstream_url
                .unwrap_or_else(|| gateway.url.clone())
                .parse()
                .unwrap(),
            api_key: API_KEY.to_owned().into(),
        },
    };
    let store = options
        .store
        .unwrap_or_else(|| Arc::new(tempfile::tempdir().expect("temp dir")));
    let shared = options.store_url.is_some();
    let store_url = options.store_url.unwrap_or_else(|| store_url(&store));
    let verify = options.verify;
    let verify_secret = shared.then(|| VERIFY_SECRET.to_owned().into());
    let config = Config {
        webhook_secret: Some(WEBHOOK_SECRET.to_owned().into()),
        webhook_secret_previous: options.webhook_secret_previous.clone().map(Into::into),
        account_token: ACCOUNT_TOKEN.to_owned().into(),
        retention: options.retention,
        event_fan_out: options.fan_out,
        reconcile: ReconcileConfig {
            interval: Duration::from_millis(20),
            first_after: options.reconcile_after,
            max_backoff: options.reconcile_after * 4,
        },
        shutdown_grace: options.shutdown_grace,
        shutdown_delay: options.shutdown_delay,
        balance_refresh: options.balance_refresh,
        upstream_timeout: options.upstream_timeout,
        upstream_settle: options.upstream_settle,
        upstream_limits: options.limits,
        grpc_limits: options.grpc_limits,
        webhook_limits: options.webhook_limits,
        tls: options.tls,
        callers_file: options
            .callers
            .map(|callers| callers.write(store.path()))
            .or(options.callers_file),
        verify_secret,
        verify,
        opt_out: options.opt_out,
        store_pooling: options.store_pooling,
        store_direct_url: options.store_direct_url,
        ..Config::for_tests(upstream, store_url)
    };
    (config, store)
}

pub async fn spawn(mut options: Options) -> TestApp {
    let tls_client = options.tls_client.take();
    assert_eq!(
        options.tls.is_some(),
        tls_client.is_some(),
        "Options::tls and Options::tls_client go together"
    );
    let gateway = FakeGateway::start().await;
    let (config, store) = config(options, &gateway);
    let app = Application::build(config).await.expect("app builds");
    let addr = app.grpc_addr().unwrap();
    let http_addr = app.http_addr().unwrap();
    let admin_addr = app.admin_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async {
        let _ = rx.await;
    }));
    let channel = match &tls_client {
        Some(client) => connect_tls(addr, client).await,
        None => connect(addr).await,
    };
    TestApp {
        addr,
        http_addr,
        admin_addr,
        gateway,
        store,
        channel,
        shutdown: Some(tx),
        server: Some(server),
    }
}
/// Connects and waits until the health service answers SERVING.
pub async fn connect(addr: SocketAddr) -> Channel {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to msgw");
    wait_serving(channel).await
}

/// What a TLS client of msgw trusts and presents (PEM).
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// The CA the server's certificate must chain to.
    pub ca: String,
    /// The client certificate and its key, for mTLS.
    pub identity: Option<(String, String)>,
}

impl TlsClient {
    /// An endpoint of msgw at `addr` over TLS, checking the server's name `localhost`.
    pub fn endpoint(&self, addr: SocketAddr) -> tonic::transport::Endpoint {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .domain_name("localhost");
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .tls_config(tls)
            .expect("TLS client configuration")
    }
}

/// Connects over TLS and waits until the health service answers SERVING.
pub async fn connect_tls(addr: SocketAddr, client: &TlsClient) -> Channel {
    let channel = client
        .endpoint(addr)
        .connect()
        .await
        .expect("connect to msgw over TLS");
    wait_serving(channel).await
}

/// `channel` once the health service answers SERVING over it.
async fn wait_serving(channel: Channel) -> Channel {
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for _ in 0..200 {
        let ok = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|r| {
                r.into_inner().status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
            })
            .unwrap_or(false);
        if ok {
            return channel;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("msgw did not become SERVING");
}

/// A request carrying `authorization: Bearer <token>`.
pub fn as_caller<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ASCII token"),
    );
    request
}

/// The field paths of a status's BadRequest, in order.
pub fn violations(status: &tonic::Status) -> Vec<String> {
    use tonic_types::StatusExt;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    status
        .get_details_bad_request()
        .expect("BadRequest details")
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect()
}

/// The ErrorInfo reason and metadata of a status.
pub fn error_info(status: &tonic::Status) -> (String, std::collections::HashMap<String, String>) {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info().expect("ErrorInfo details");
    assert_eq!(info.domain, "msgw");
    (info.reason, info.metadata)
}

/// An exact amount as msgw answers it (`google.type.Money`).
pub fn money(
    currency: &str,
    units: i64,
    nanos: i32,
) -> Option<msgw::transport::proto::google_type::Money> {
    Some(msgw::transport::proto::google_type::Money {
        currency_code: currency.into(),
        units,
        nanos,
    })
}

/// A valid SMS with client id `id`.
pub use crate::builders::sms;

/// Arguments of `msgw serve` on free loopback ports, logging JSON, with its SQLite
/// store in `dir` (for tests that run the binary).
pub fn serve_args(dir: &std::path::Path) -> Vec<String> {
    [
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--store-url",
    ]
    .map(str::to_owned)
    .into_iter()
    .chain([format!("sqlite://{}", dir.join("msgw.db").display())])
    .collect()
}

/// Starts the real msgw binary as `command` says (logging JSON) and waits until it
/// serves; returns it with its gRPC address. Its log is drained from then on, so msgw
/// never blocks on a full pipe. Blocks: call it off the runtime's threads.
pub fn serving_binary(
    mut command: std::process::Command,
) -> (std::process::Child, std::net::SocketAddr) {
    use std::io::{BufRead, BufReader};
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("msgw starts");
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut log = Vec::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("msgw stopped before it served:\n{}", log.join("\n"));
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["fields"]["message"] == "msgw serving" {
            break v["fields"]["grpc_addr"].as_str().unwrap().parse().unwrap();
        }
        log.push(line);
    };
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// A loopback address where connections are refused for as long as the returned
/// socket lives: it holds the port (bound, never listening), so no other test's
/// listener can take it meanwhile, as one could a port that was freed.
pub fn refusing_addr() -> (SocketAddr, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    (socket.local_addr().unwrap(), socket)
}
