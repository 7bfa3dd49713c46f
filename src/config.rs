//! Command line and environment configuration (`msgw serve --help` documents each).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use secrecy::SecretString;

use crate::auth::tls::TlsFiles;
use crate::dispatch::Limits;
use crate::grpc::port::PortLimits;
use crate::http_listener::ListenerLimits;
use crate::reconcile::ReconcileConfig;
use crate::sandbox::{DEFAULT_API_KEY, SandboxConfig};
use crate::store::Retention;

/// msgw: a typed gRPC facade for a multi-channel messaging gateway.
#[derive(Debug, Parser)]
#[command(name = "msgw", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once at startup; boxing a variant would only complicate the call sites.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Serve the gRPC API (against the built-in sandbox when no gateway URL is set).
    Serve(ServeArgs),
    /// Serve only the sandbox gateway (`POST /api/json.php`), for pointing other code at it.
    Sandbox(SandboxArgs),
    /// Copy a stopped msgw's SQLite store into an empty PostgreSQL store (claims,
    /// tracked messages and the event log with its cursors), to move to several replicas.
    CopyStore(CopyStoreArgs),
    /// Check that a running msgw serves (gRPC health); exit status 0 when it does.
    Check(CheckArgs),
}

/// Flags of `msgw check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// msgw's gRPC address: `host:port` or a URL.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub addr: String,
    /// The health service to check ("" is the whole server; or e.g. msgw.v1.MessagingService).
    #[arg(long, default_value = "")]
    pub service: String,
    /// How long to wait for the connection and the answer.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub timeout: Duration,
    /// CA certificate (PEM) msgw's TLS certificate must chain to: connect over TLS.
    #[arg(long)]
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for an mTLS msgw.
    #[arg(long, requires_all = ["tls_key_file", "tls_ca_file"])]
    pub tls_cert_file: Option<PathBuf>,
    /// Key (PEM) of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// The name msgw's certificate must hold. Default: the host of --addr.
    #[arg(long, requires = "tls_ca_file")]
    pub tls_server_name: Option<String>,
}

/// Flags of `msgw copy-store`.
#[derive(Debug, Clone, Args)]
pub struct CopyStoreArgs {
    /// The SQLite store to copy (`sqlite://PATH`); stop msgw first.
    #[arg(long)]
    pub from: String,
    /// The PostgreSQL store to fill (`postgres://...`); it must be empty.
    #[arg(long, env = "MSGW_STORE_URL")]
    pub to: String,
    /// File holding the PostgreSQL password (instead of one in the URL).
    #[arg(long, env = "MSGW_STORE_PASSWORD_FILE")]
    pub to_password_file: Option<PathBuf>,
}

impl CopyStoreArgs {
    /// The password from its file, if one is named.
    pub fn password(&self) -> anyhow::Result<Option<SecretString>> {
        self.to_password_file
            .as_deref()
            .map(|path| {
                read_secret(path)
                    .map(SecretString::from)
                    .context("--to-password-file")
            })
            .transpose()
    }
}

/// Speeds of the sandbox's simulated delivery.
#[derive(Debug, Clone, Args)]
pub struct SandboxTuning {
    /// Sandbox: delay between two status changes of a message (e.g. `1s`, `20ms`).
    #[arg(long, env = "MSGW_SANDBOX_STEP_DELAY", default_value = "1s", value_parser = duration)]
    pub sandbox_step_delay: Duration,
    /// Sandbox: attempts to deliver one webhook.
    #[arg(long, env = "MSGW_SANDBOX_WEBHOOK_ATTEMPTS", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub sandbox_webhook_attempts: u32,
    /// Sandbox: delay before the first webhook retry; doubles on each retry.
    #[arg(long, env = "MSGW_SANDBOX_WEBHOOK_BACKOFF", default_value = "500ms", value_parser = duration)]
    pub sandbox_webhook_backoff: Duration,
}

impl SandboxTuning {
    /// A sandbox configuration with these speeds and `api_key`.
    pub fn config(&self, api_key: String) -> SandboxConfig {
        SandboxConfig {
            api_key,
            step_delay: self.sandbox_step_delay,
            webhook_attempts: self.sandbox_webhook_attempts,
            webhook_backoff: self.sandbox_webhook_backoff,
            ..SandboxConfig::default()
        }
    }
}

/// Flags of `msgw sandbox`.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Listen address of the sandbox gateway.
    #[arg(long, env = "MSGW_SANDBOX_ADDR", default_value = "0.0.0.0:8090", value_parser = listen_addr)]
    pub addr: SocketAddr,
    /// API key the sandbox accepts as `auth`.
    #[arg(long, env = "MSGW_SANDBOX_API_KEY", default_value = DEFAULT_API_KEY)]
    pub api_key: String,
    /// Account-level notification URL that receives pipeline statuses.
    #[arg(long, env = "MSGW_SANDBOX_ACCOUNT_WEBHOOK_URL")]
    pub account_webhook_url: Option<url::Url>,
    /// Delivery speeds.
    #[command(flatten)]
    pub tuning: SandboxTuning,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

impl SandboxArgs {
    /// The sandbox configuration these flags describe.
    pub fn config(&self) -> anyhow::Result<SandboxConfig> {
        if self.api_key.trim().is_empty() {
            bail!("--api-key must not be empty");
        }
        Ok(SandboxConfig {
            account_webhook_url: self.account_webhook_url.as_ref().map(url::Url::to_string),
            ..self.tuning.config(self.api_key.clone())
        })
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging flags shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, env = "MSGW_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log level or filter directives (e.g. `info`, `msgw=debug,info`).
    #[arg(long, env = "MSGW_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// Most gateway requests in flight that can be configured.
const MAX_UPSTREAM_CONNECTIONS: usize = 1024;
/// Most operations per gateway request that can be configured.
const MAX_UPSTREAM_BATCH: usize = 1000;
/// Most queued operations that can be configured (each holds a validated request).
const MAX_UPSTREAM_QUEUE: usize = 1_000_000;

/// Flags of `msgw serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// gRPC listen address.
    #[arg(long, env = "MSGW_GRPC_ADDR", default_value = "0.0.0.0:50051", value_parser = listen_addr)]
    pub grpc_addr: SocketAddr,
    /// The gateway's base URL; msgw posts to `{base_url}/api/json.php`. Unset: the built-in sandbox.
    #[arg(long, env = "MSGW_UPSTREAM_URL")]
    pub upstream_url: Option<url::Url>,
    /// The gateway API key (prefer --api-key-file: values in flags show up in process lists).
    #[arg(
        long,
        env = "MSGW_API_KEY",
        hide_env_values = true,
        conflicts_with = "api_key_file"
    )]
    pub api_key: Option<String>,
    /// File holding the gateway API key (e.g. a mounted Kubernetes Secret); surrounding whitespace is ignored.
    #[arg(long, env = "MSGW_API_KEY_FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Upper bound of one upstream request (e.g. `10s`, `1500ms`). A request with a send
    /// in it is never cut sooner for a caller's deadline: the caller is answered at its
    /// deadline, and the request runs on so that its outcome is recorded.
    #[arg(long, env = "MSGW_UPSTREAM_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub upstream_timeout: Duration,
    /// After a send request is cut while the gateway may hold it (the upstream timeout,
    /// a connection lost after the body left), how long the gateway's "message not
    /// found" still means "not yet": retries inside this window never send. `0s` trusts
    /// "not found" at once.
    #[arg(long, env = "MSGW_UPSTREAM_SETTLE", default_value = "60s", value_parser = duration)]
    pub upstream_settle: Duration,
    /// Gateway requests in flight at most, and so connections to the gateway. Calls that
    /// arrive while all are busy queue and go out together in the next free one.
    #[arg(long, env = "MSGW_UPSTREAM_CONNECTIONS", default_value_t = 8)]
    pub upstream_connections: usize,
    /// Operations in one gateway request at most; must not exceed what the gateway
    /// accepts in one request. Also the most items of one `Batch` call.
    #[arg(long, env = "MSGW_UPSTREAM_BATCH_MAX", default_value_t = 50)]
    pub upstream_batch_max: usize,
    /// Operations waiting for a gateway request at most; calls beyond it are refused
    /// with RESOURCE_EXHAUSTED (and RetryInfo), so overload cannot grow memory.
    #[arg(long, env = "MSGW_UPSTREAM_QUEUE_MAX", default_value_t = 10_000)]
    pub upstream_queue_max: usize,
    /// HTTP listen address of the gateway's delivery webhooks (faces the internet).
    #[arg(long, env = "MSGW_HTTP_ADDR", default_value = "0.0.0.0:8080", value_parser = listen_addr)]
    pub http_addr: SocketAddr,
    /// Admin listen address: `/metrics` (never on the webhook listener).
    #[arg(long, env = "MSGW_ADMIN_ADDR", default_value = "0.0.0.0:9090", value_parser = listen_addr)]
    pub admin_addr: SocketAddr,
    /// gRPC port: time a connection has to finish its TLS handshake and send the
    /// HTTP/2 preface; then it is closed.
    #[arg(long, env = "MSGW_GRPC_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub grpc_handshake_timeout: Duration,
    /// gRPC port: a connection without an open stream this long gets GOAWAY and is
    /// closed. An open event stream is never idle, events or not.
    #[arg(long, env = "MSGW_GRPC_IDLE_TIMEOUT", default_value = "5m", value_parser = positive_duration)]
    pub grpc_idle_timeout: Duration,
    /// gRPC port: connections at most. At the cap a new connection makes room by
    /// closing the one idle longest. Default: from the file limit (`ulimit -n`), less
    /// what the store, the gateway and the other ports need.
    #[arg(long, env = "MSGW_GRPC_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    pub grpc_max_connections: Option<u32>,
    /// Webhook listener: time a client has to send a request's headers; also the
    /// longest a keep-alive connection may sit idle between requests.
    #[arg(long, env = "MSGW_WEBHOOK_HEADER_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub webhook_header_timeout: Duration,
    /// Webhook listener: time a client has to send a request's body.
    #[arg(long, env = "MSGW_WEBHOOK_BODY_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub webhook_body_timeout: Duration,
    /// Webhook listener: connections open at once; more wait to be accepted.
    #[arg(long, env = "MSGW_WEBHOOK_MAX_CONNECTIONS", default_value_t = 1024)]
    pub webhook_max_connections: usize,
    /// Base URL where the gateway reaches the HTTP listener; hook URLs are built from it.
    /// Default: the listener's own address (loopback when bound to all interfaces).
    #[arg(long, env = "MSGW_PUBLIC_URL")]
    pub public_url: Option<url::Url>,
    /// HMAC key of the per-message hook tokens (at least 16 characters). Default: random per start.
    #[arg(
        long,
        env = "MSGW_WEBHOOK_SECRET",
        hide_env_values = true,
        conflicts_with = "webhook_secret_file"
    )]
    pub webhook_secret: Option<String>,
    /// File holding the webhook HMAC key.
    #[arg(long, env = "MSGW_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// The webhook HMAC key before a rotation: hook tokens it signed still verify, so
    /// webhooks of messages sent before the rotation are not lost. New hooks use
    /// --webhook-secret.
    #[arg(
        long,
        env = "MSGW_WEBHOOK_SECRET_PREVIOUS",
        hide_env_values = true,
        conflicts_with = "webhook_secret_previous_file"
    )]
    pub webhook_secret_previous: Option<String>,
    /// File holding the previous webhook HMAC key.
    #[arg(long, env = "MSGW_WEBHOOK_SECRET_PREVIOUS_FILE")]
    pub webhook_secret_previous_file: Option<PathBuf>,
    /// Token of the account-level webhook URL `/v1/webhooks/account/<token>` (pipeline statuses;
    /// at least 16 of A-Z a-z 0-9 - _ . ~). Default: random per start.
    #[arg(
        long,
        env = "MSGW_ACCOUNT_TOKEN",
        hide_env_values = true,
        conflicts_with = "account_token_file"
    )]
    pub account_token: Option<String>,
    /// File holding the account webhook token.
    #[arg(long, env = "MSGW_ACCOUNT_TOKEN_FILE")]
    pub account_token_file: Option<PathBuf>,
    /// HMAC key of verifications' one-time codes at rest (at least 16 characters); never
    /// in the store. Required with a PostgreSQL store (the same on every replica).
    /// Default with SQLite: generated once and kept in `<database file>.verify-secret`
    /// (mode 0600) next to the database.
    #[arg(
        long,
        env = "MSGW_VERIFY_SECRET",
        hide_env_values = true,
        conflicts_with = "verify_secret_file"
    )]
    pub verify_secret: Option<String>,
    /// File holding the verification HMAC key.
    #[arg(long, env = "MSGW_VERIFY_SECRET_FILE")]
    pub verify_secret_file: Option<PathBuf>,
    /// Least time between two sends of one verification's code; a resend sooner gets
    /// RESOURCE_EXHAUSTED with RetryInfo.
    #[arg(long, env = "MSGW_VERIFY_RESEND_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub verify_resend_interval: Duration,
    /// New verifications of one phone number per hour, across callers (SMS-pumping guard).
    #[arg(long, env = "MSGW_VERIFY_PHONE_LIMIT", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub verify_phone_limit: u32,
    /// Country prefixes verifications may go to, comma-separated (e.g. `380,48,1`;
    /// a leading `+` is ignored). Default: any.
    #[arg(long, env = "MSGW_VERIFY_ALLOWED_PREFIXES", value_delimiter = ',')]
    pub verify_allowed_prefixes: Vec<String>,
    /// The store: `sqlite://PATH` (created on first start), `sqlite::memory:`, or
    /// `postgres://USER@HOST/DB?sslmode=...` (shared by several replicas).
    #[arg(long, env = "MSGW_STORE_URL", default_value = "sqlite://msgw.db")]
    pub store_url: String,
    /// File holding the PostgreSQL password (instead of one in the store URL).
    #[arg(long, env = "MSGW_STORE_PASSWORD_FILE")]
    pub store_password_file: Option<PathBuf>,
    /// Events older than this are dropped from the log (e.g. `7d`, `12h`).
    #[arg(long, env = "MSGW_EVENT_RETENTION", default_value = "7d", value_parser = duration)]
    pub event_retention: Duration,
    /// At most this many events are kept in the log.
    #[arg(long, env = "MSGW_EVENT_RETENTION_COUNT", default_value_t = 1_000_000)]
    pub event_retention_count: u64,
    /// How long the outcome of a send is kept to answer retries with the same id
    /// (longer while reconcile still tracks the message), e.g. `7d`.
    #[arg(long, env = "MSGW_IDEMPOTENCY_RETENTION", default_value = "7d", value_parser = duration)]
    pub idempotency_retention: Duration,
    /// Events kept in memory for live subscribers; a subscriber further behind catches up from the store.
    #[arg(long, env = "MSGW_EVENT_FAN_OUT", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(16..=1_000_000))]
    pub event_fan_out: u64,
    /// A sent message with no final status this long after sending is polled with `status`.
    #[arg(long, env = "MSGW_RECONCILE_AFTER", default_value = "5m", value_parser = duration)]
    pub reconcile_after: Duration,
    /// How often msgw looks for messages due for a poll.
    #[arg(long, env = "MSGW_RECONCILE_INTERVAL", default_value = "5s", value_parser = duration)]
    pub reconcile_interval: Duration,
    /// Longest wait between two polls of one message (polls back off from --reconcile-after).
    #[arg(long, env = "MSGW_RECONCILE_MAX_BACKOFF", default_value = "30m", value_parser = duration)]
    pub reconcile_max_backoff: Duration,
    /// How often the balance metric is refreshed (e.g. `5m`); `0` turns it off.
    #[arg(long, env = "MSGW_BALANCE_REFRESH", default_value = "5m", value_parser = duration)]
    pub balance_refresh: Duration,
    /// Tokio worker threads. Default: the container's CPU limit (cgroup quota), else the machine's CPUs.
    #[arg(long, env = "MSGW_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
    /// After SIGTERM, how long in-flight calls may take before msgw exits anyway.
    #[arg(long, env = "MSGW_SHUTDOWN_GRACE", default_value = "25s", value_parser = duration)]
    pub shutdown_grace: Duration,
    /// After SIGTERM, how long msgw reports NOT_SERVING but goes on serving before it
    /// drains, while load balancers and Kubernetes endpoints take it out (e.g. `5s`).
    #[arg(long, env = "MSGW_SHUTDOWN_DELAY", default_value = "0s", value_parser = duration)]
    pub shutdown_delay: Duration,
    /// Who may call the gRPC port.
    #[command(flatten)]
    pub security: SecurityArgs,
    /// Delivery speeds of the built-in sandbox (used only without --upstream-url).
    #[command(flatten)]
    pub sandbox: SandboxTuning,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

/// TLS and caller authentication of the gRPC port.
#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// Certificate chain (PEM) of the gRPC port's TLS; reloaded when the file changes.
    #[arg(long, env = "MSGW_GRPC_TLS_CERT_FILE", requires = "grpc_tls_key_file")]
    pub grpc_tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of the gRPC port's TLS; reloaded when the file changes.
    #[arg(long, env = "MSGW_GRPC_TLS_KEY_FILE", requires = "grpc_tls_cert_file")]
    pub grpc_tls_key_file: Option<PathBuf>,
    /// CA certificates (PEM) that sign callers' client certificates (mTLS): callers
    /// must present one; the caller's name is its first DNS SAN, else its CN.
    #[arg(
        long,
        env = "MSGW_GRPC_TLS_CLIENT_CA_FILE",
        requires = "grpc_tls_cert_file"
    )]
    pub grpc_tls_client_ca_file: Option<PathBuf>,
    /// Callers (TOML): names, SHA-256 hashes of their bearer tokens, permissions and
    /// send rates; reloaded when the file changes.
    #[arg(long, env = "MSGW_CALLERS_FILE")]
    pub callers_file: Option<PathBuf>,
    /// Serve a real gateway with no caller authentication (neither a callers file nor
    /// mTLS), e.g. behind a mesh that already authenticates callers.
    #[arg(long, env = "MSGW_ALLOW_UNAUTHENTICATED", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_unauthenticated: bool,
}

impl SecurityArgs {
    /// The TLS files and callers file, refusing a real gateway (`real_gateway`) that
    /// anyone reaching the port could spend on, unless that is asked for.
    fn checked(self, real_gateway: bool) -> anyhow::Result<(Option<TlsFiles>, Option<PathBuf>)> {
        let tls = match (self.grpc_tls_cert_file, self.grpc_tls_key_file) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca: self.grpc_tls_client_ca_file,
            }),
            _ => None,
        };
        let mtls = tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        if real_gateway && self.callers_file.is_none() && !mtls && !self.allow_unauthenticated {
            bail!(
                "a real gateway is configured (MSGW_UPSTREAM_URL) but no caller authentication: anyone who reaches the gRPC port could send paid messages and read every delivery event. Set MSGW_CALLERS_FILE (bearer tokens) or MSGW_GRPC_TLS_CLIENT_CA_FILE (mTLS), or MSGW_ALLOW_UNAUTHENTICATED=true if something in front of msgw (a service mesh) already authenticates callers"
            );
        }
        Ok((tls, self.callers_file))
    }
}

/// Which gateway msgw talks to.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A real gateway.
    Gateway {
        /// Its base URL.
        url: url::Url,
        /// Its API key.
        api_key: SecretString,
    },
    /// The in-process sandbox.
    Sandbox(SandboxConfig),
}

/// Validated configuration of `msgw serve`.
#[derive(Debug, Clone)]
pub struct Config {
    /// gRPC listen address (port 0: any free port).
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (port 0: any free port).
    pub http_addr: SocketAddr,
    /// Admin listen address (`/metrics`; port 0: any free port).
    pub admin_addr: SocketAddr,
    /// Base URL of the HTTP listener as the gateway sees it; `None`: the listener's own address.
    pub public_url: Option<url::Url>,
    /// HMAC key of hook tokens.
    pub webhook_secret: SecretString,
    /// The HMAC key before a rotation, still accepted when verifying.
    pub webhook_secret_previous: Option<SecretString>,
    /// Token of the account-level webhook.
    pub account_token: SecretString,
    /// Secrets that were not configured and were generated for this run.
    pub generated_secrets: Vec<&'static str>,
    /// The store URL.
    pub store_url: String,
    /// The PostgreSQL password, when read from a file.
    pub store_password: Option<SecretString>,
    /// Event log bounds.
    pub retention: Retention,
    /// Events kept in memory for live subscribers.
    pub event_fan_out: usize,
    /// Status polling of messages without a final status.
    pub reconcile: ReconcileConfig,
    /// Drain time after a shutdown signal.
    pub shutdown_grace: Duration,
    /// Serving on, NOT_SERVING, after a shutdown signal and before draining.
    pub shutdown_delay: Duration,
    /// Balance metric refresh period; zero: off.
    pub balance_refresh: Duration,
    /// The gateway.
    pub upstream: Upstream,
    /// Upper bound of one upstream request.
    pub upstream_timeout: Duration,
    /// How long "not found" means "not yet" after a cut send request.
    pub upstream_settle: Duration,
    /// Gateway requests in flight, operations per request and queued operations, at most.
    pub upstream_limits: Limits,
    /// Bounds of the gRPC port.
    pub grpc_limits: PortLimits,
    /// Timeouts and connection limit of the webhook listener.
    pub webhook_limits: ListenerLimits,
    /// TLS of the gRPC port; `None`: plaintext.
    pub tls: Option<TlsFiles>,
    /// The callers file; `None`: no bearer tokens.
    pub callers_file: Option<PathBuf>,
    /// Verifications: their secret, resend interval, phone limit and allowed prefixes.
    pub verify: VerifyConfig,
}

/// Settings of the verification service.
#[derive(Debug, Clone)]
pub struct VerifyConfig {
    /// HMAC key of codes at rest; `None`: generated and kept next to the SQLite file.
    pub secret: Option<SecretString>,
    /// Least time between two sends of one verification.
    pub resend_interval: Duration,
    /// New verifications per phone number per hour.
    pub phone_limit: u32,
    /// Country prefixes (digits) verifications may go to; empty: any.
    pub allowed_prefixes: Vec<String>,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self {
            secret: None,
            resend_interval: Duration::from_secs(30),
            phone_limit: 5,
            allowed_prefixes: Vec::new(),
        }
    }
}

impl Config {
    /// msgw on loopback ports the system chooses, with `msgw serve`'s defaults, fixed
    /// secrets, no authentication and background refreshes off: what tests and
    /// benchmarks start from, changing only what they are about.
    pub fn for_tests(upstream: Upstream, store_url: String) -> Self {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let week = Duration::from_secs(7 * 86_400);
        Self {
            grpc_addr: loopback,
            http_addr: loopback,
            admin_addr: loopback,
            public_url: None,
            webhook_secret: "test-webhook-secret-0123456789".to_owned().into(),
            webhook_secret_previous: None,
            account_token: "test-account-token-0123456789".to_owned().into(),
            generated_secrets: Vec::new(),
            store_url,
            store_password: None,
            retention: Retention {
                max_age: week,
                max_events: 1_000_000,
                claims_max_age: week,
            },
            event_fan_out: 4096,
            reconcile: ReconcileConfig {
                interval: Duration::from_secs(5),
                first_after: Duration::from_secs(300),
                max_backoff: Duration::from_secs(1800),
            },
            shutdown_grace: Duration::from_secs(5),
            shutdown_delay: Duration::ZERO,
            balance_refresh: Duration::ZERO,
            upstream,
            upstream_timeout: Duration::from_secs(10),
            upstream_settle: Duration::from_secs(60),
            upstream_limits: Limits::default(),
            grpc_limits: PortLimits::default(),
            webhook_limits: ListenerLimits::default(),
            tls: None,
            callers_file: None,
            verify: VerifyConfig::default(),
        }
    }
}

impl ServeArgs {
    /// Checks the flags and reads secret files.
    pub fn into_config(self) -> anyhow::Result<Config> {
        if self.upstream_timeout.is_zero() {
            bail!("--upstream-timeout must be greater than zero");
        }
        for (flag, d) in [
            ("--webhook-header-timeout", self.webhook_header_timeout),
            ("--webhook-body-timeout", self.webhook_body_timeout),
        ] {
            if d.is_zero() {
                bail!("{flag} must be greater than zero");
            }
        }
        if self.webhook_max_connections == 0 {
            bail!("--webhook-max-connections must be at least 1");
        }
        if !(1..=MAX_UPSTREAM_CONNECTIONS).contains(&self.upstream_connections) {
            bail!(
                "--upstream-connections must be between 1 and {MAX_UPSTREAM_CONNECTIONS}, got {}",
                self.upstream_connections
            );
        }
        if !(1..=MAX_UPSTREAM_BATCH).contains(&self.upstream_batch_max) {
            bail!(
                "--upstream-batch-max must be between 1 and {MAX_UPSTREAM_BATCH}, got {}",
                self.upstream_batch_max
            );
        }
        if self.upstream_queue_max < self.upstream_batch_max
            || self.upstream_queue_max > MAX_UPSTREAM_QUEUE
        {
            bail!(
                "--upstream-queue-max must be between --upstream-batch-max ({}) and {MAX_UPSTREAM_QUEUE}, got {}",
                self.upstream_batch_max,
                self.upstream_queue_max
            );
        }
        let key = match (self.api_key, self.api_key_file) {
            (Some(key), _) => Some(key),
            (None, Some(path)) => Some(read_secret(&path).context("--api-key-file")?),
            (None, None) => None,
        };
        let upstream = match self.upstream_url {
            Some(url) => {
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    bail!("--upstream-url must be an absolute http(s) URL, got {url}");
                }
                let Some(key) = key.filter(|k| !k.trim().is_empty()) else {
                    bail!(
                        "a gateway URL is set but no API key: set MSGW_API_KEY or MSGW_API_KEY_FILE"
                    );
                };
                Upstream::Gateway {
                    url,
                    api_key: SecretString::from(key.trim().to_owned()),
                }
            }
            // An API key without a gateway becomes the sandbox's key, so a deployment's
            // secret wiring can be tried before the gateway account exists.
            None => Upstream::Sandbox(
                self.sandbox
                    .config(key.unwrap_or_else(|| DEFAULT_API_KEY.to_owned())),
            ),
        };
        if let Some(url) = &self.public_url
            && (!matches!(url.scheme(), "http" | "https") || url.host_str().is_none())
        {
            bail!("--public-url must be an absolute http(s) URL, got {url}");
        }
        for (name, d) in [
            ("--reconcile-after", self.reconcile_after),
            ("--reconcile-interval", self.reconcile_interval),
            ("--reconcile-max-backoff", self.reconcile_max_backoff),
            ("--event-retention", self.event_retention),
            ("--idempotency-retention", self.idempotency_retention),
        ] {
            if d.is_zero() {
                bail!("{name} must be greater than zero");
            }
        }
        if self.event_retention_count == 0 {
            bail!("--event-retention-count must be at least 1");
        }
        let (tls, callers_file) = self
            .security
            .checked(matches!(upstream, Upstream::Gateway { .. }))?;
        let shared_store = crate::store::is_shared(&self.store_url);
        if !shared_store && !self.store_url.starts_with("sqlite:") {
            bail!(
                "--store-url must be sqlite://PATH, sqlite::memory: or postgres://..., got {:?}",
                self.store_url.split(':').next().unwrap_or_default()
            );
        }
        let store_password = match &self.store_password_file {
            Some(_) if !shared_store => {
                bail!("--store-password-file is for a postgres:// store URL only")
            }
            Some(path) => Some(SecretString::from(
                read_secret(path).context("--store-password-file")?,
            )),
            None => None,
        };
        let (webhook_secret, webhook_secret_generated) = secret_or_random(
            "webhook secret (MSGW_WEBHOOK_SECRET)",
            self.webhook_secret,
            self.webhook_secret_file.as_deref(),
            |s| s.len() >= 16,
            "at least 16 characters",
        )?;
        let verify_secret = match (self.verify_secret, self.verify_secret_file) {
            (Some(v), _) => Some(v.trim().to_owned()),
            (None, Some(path)) => Some(read_secret(&path).context("--verify-secret-file")?),
            (None, None) => None,
        };
        if verify_secret.as_ref().is_some_and(|s| s.len() < 16) {
            bail!("the verification secret (MSGW_VERIFY_SECRET) must be at least 16 characters");
        }
        let verify_allowed_prefixes = self
            .verify_allowed_prefixes
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .map(|p| {
                let digits = p.strip_prefix('+').unwrap_or(p);
                if digits.is_empty()
                    || digits.len() > 6
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                    || digits.starts_with('0')
                {
                    bail!(
                        "--verify-allowed-prefixes: {p:?} is not a country prefix (1 to 6 digits, not starting with 0)"
                    );
                }
                Ok(digits.to_owned())
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if self.verify_resend_interval > Duration::from_secs(3600) {
            bail!("--verify-resend-interval must be at most 1h");
        }
        let webhook_secret_previous = match (
            self.webhook_secret_previous,
            self.webhook_secret_previous_file,
        ) {
            (Some(v), _) => Some(v.trim().to_owned()),
            (None, Some(path)) => {
                Some(read_secret(&path).context("--webhook-secret-previous-file")?)
            }
            (None, None) => None,
        };
        if let Some(previous) = &webhook_secret_previous {
            if previous.len() < 16 {
                bail!(
                    "the previous webhook secret (MSGW_WEBHOOK_SECRET_PREVIOUS) must be at least 16 characters"
                );
            }
            if webhook_secret_generated {
                bail!(
                    "MSGW_WEBHOOK_SECRET_PREVIOUS is set but MSGW_WEBHOOK_SECRET is not: a rotation needs the new secret"
                );
            }
        }
        let (account_token, account_token_generated) = secret_or_random(
            "account webhook token (MSGW_ACCOUNT_TOKEN)",
            self.account_token,
            self.account_token_file.as_deref(),
            |s| {
                s.len() >= 16
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b))
            },
            "at least 16 of A-Z a-z 0-9 - _ . ~",
        )?;
        // Replicas sharing a store verify each other's hook tokens: a secret generated
        // per start would make every webhook of a message another replica sent a 401.
        if shared_store {
            for (name, generated) in [
                (
                    "MSGW_WEBHOOK_SECRET (or MSGW_WEBHOOK_SECRET_FILE)",
                    webhook_secret_generated,
                ),
                (
                    "MSGW_ACCOUNT_TOKEN (or MSGW_ACCOUNT_TOKEN_FILE)",
                    account_token_generated,
                ),
            ] {
                if generated {
                    bail!(
                        "a PostgreSQL store is shared by replicas, which must verify each other's webhooks: set {name} to the same value on every replica"
                    );
                }
            }
        }
        // Replicas check each other's codes: a key per replica would refuse every code
        // another replica sent. SQLite generates one and keeps it (see --verify-secret).
        if shared_store && verify_secret.is_none() {
            bail!(
                "a PostgreSQL store is shared by replicas, which must check each other's one-time codes: set MSGW_VERIFY_SECRET (or MSGW_VERIFY_SECRET_FILE) to the same value on every replica"
            );
        }
        Ok(Config {
            grpc_addr: self.grpc_addr,
            http_addr: self.http_addr,
            admin_addr: self.admin_addr,
            public_url: self.public_url,
            webhook_secret,
            webhook_secret_previous: webhook_secret_previous.map(SecretString::from),
            account_token,
            generated_secrets: [
                (
                    "webhook secret (MSGW_WEBHOOK_SECRET)",
                    webhook_secret_generated,
                ),
                (
                    "account webhook token (MSGW_ACCOUNT_TOKEN)",
                    account_token_generated,
                ),
            ]
            .into_iter()
            .filter_map(|(name, generated)| generated.then_some(name))
            .collect(),
            store_url: self.store_url,
            store_password,
            retention: Retention {
                max_age: self.event_retention,
                max_events: self.event_retention_count,
                claims_max_age: self.idempotency_retention,
            },
            event_fan_out: usize::try_from(self.event_fan_out).unwrap_or(usize::MAX),
            reconcile: ReconcileConfig {
                interval: self.reconcile_interval,
                first_after: self.reconcile_after,
                max_backoff: self.reconcile_max_backoff,
            },
            shutdown_grace: self.shutdown_grace,
            shutdown_delay: self.shutdown_delay,
            balance_refresh: self.balance_refresh,
            upstream,
            upstream_timeout: self.upstream_timeout,
            upstream_settle: self.upstream_settle,
            upstream_limits: Limits {
                connections: self.upstream_connections,
                batch_max: self.upstream_batch_max,
                queue_max: self.upstream_queue_max,
            },
            grpc_limits: PortLimits {
                handshake_timeout: self.grpc_handshake_timeout,
                idle_timeout: self.grpc_idle_timeout,
                max_connections: self.grpc_max_connections.map(|n| n as usize),
            },
            webhook_limits: ListenerLimits {
                header_timeout: self.webhook_header_timeout,
                body_timeout: self.webhook_body_timeout,
                max_connections: self.webhook_max_connections,
            },
            tls,
            callers_file,
            verify: VerifyConfig {
                secret: verify_secret.map(SecretString::from),
                resend_interval: self.verify_resend_interval,
                phone_limit: self.verify_phone_limit,
                allowed_prefixes: verify_allowed_prefixes,
            },
        })
    }
}

/// The longest duration any option takes: ten years. Longer ones cannot be added to
/// a date (a settle window of 10^11 days would overflow where claims are stamped).
const LONGEST: Duration = Duration::from_secs(10 * 365 * 86_400);

/// A duration (`10s`, `1500ms`, `5m`, `7d`) of at most ten years.
fn duration(value: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(value).map_err(|e| e.to_string())?;
    if d > LONGEST {
        return Err("must be at most 3650d".into());
    }
    Ok(d)
}

/// A duration above zero (`10s`, `1500ms`, `5m`), at most ten years.
fn positive_duration(value: &str) -> Result<Duration, String> {
    match duration(value)? {
        d if d.is_zero() => Err("must be above zero".into()),
        d => Ok(d),
    }
}

/// A listen address: `IP:PORT` or `HOST:PORT` (a host name is looked up once, at
/// start: `localhost:50051` listens on loopback).
fn listen_addr(value: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    use std::net::ToSocketAddrs;
    let mut found = value.to_socket_addrs().map_err(|e| {
        format!("expected IP:PORT or HOST:PORT (e.g. 0.0.0.0:50051, localhost:50051): {e}")
    })?;
    // Of a name's addresses, IPv4 first: what `localhost` means to most clients.
    let all: Vec<SocketAddr> = found.by_ref().collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| format!("{value} names no address"))
}

/// A secret from its flag or file, checked; a random one when neither is set
/// (the flag says so, for the startup log).
fn secret_or_random(
    what: &str,
    value: Option<String>,
    file: Option<&std::path::Path>,
    valid: impl Fn(&str) -> bool,
    rule: &str,
) -> anyhow::Result<(SecretString, bool)> {
    let given = match (value, file) {
        (Some(v), _) => Some(v.trim().to_owned()),
        (None, Some(path)) => Some(read_secret(path).with_context(|| what.to_owned())?),
        (None, None) => None,
    };
    match given {
        Some(v) if valid(&v) => Ok((SecretString::from(v), false)),
        Some(_) => bail!("the {what} must be {rule}"),
        None => Ok((SecretString::from(random_token()), true)),
    }
}

/// 32 random bytes, base64url: URL-safe and strong enough for an HMAC key.
pub fn random_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Reads a secret from a file, trimming the newline editors and `kubectl create secret` leave.
pub fn read_secret(path: &std::path::Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = text.trim();
    if text.is_empty() {
        bail!("{} is empty", path.display());
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> anyhow::Result<Config> {
        let cli = Cli::try_parse_from(["msgw", "serve"].iter().chain(args))?;
        match cli.command {
            Command::Serve(args) => args.into_config(),
            Command::Sandbox(_) | Command::CopyStore(_) | Command::Check(_) => bail!("not serve"),
        }
    }

    #[test]
    fn durations_beyond_ten_years_are_refused_with_the_flag_named() {
        for flag in [
            "--upstream-settle",
            "--upstream-timeout",
            "--idempotency-retention",
        ] {
            let error = serve(&[flag, "100000000000d"]).unwrap_err().to_string();
            assert!(error.contains(flag) && error.contains("3650d"), "{error}");
        }
        assert!(serve(&["--upstream-settle", "3650d"]).is_ok());
    }

    #[test]
    fn listen_addresses_take_host_names() {
        let config = serve(&[
            "--grpc-addr",
            "localhost:58351",
            "--http-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "[::1]:9091",
        ])
        .unwrap();
        assert!(config.grpc_addr.ip().is_loopback(), "{}", config.grpc_addr);
        assert_eq!(config.grpc_addr.port(), 58351);
        assert_eq!(config.http_addr, "127.0.0.1:0".parse().unwrap());
        assert_eq!(config.admin_addr, "[::1]:9091".parse().unwrap());
        let error = serve(&["--grpc-addr", "localhost"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("HOST:PORT"), "{error}");
    }

    #[test]
    fn a_postgres_store_needs_the_secrets_every_replica_shares() {
        let pg = ["--store-url", "postgres://msgw@db/msgw"];
        let error = serve(&pg).unwrap_err().to_string();
        assert!(error.contains("MSGW_WEBHOOK_SECRET"), "{error}");
        let secret = ["--webhook-secret", "0123456789abcdef0123"];
        let error = serve(&[&pg[..], &secret[..]].concat())
            .unwrap_err()
            .to_string();
        assert!(error.contains("MSGW_ACCOUNT_TOKEN"), "{error}");
        let token = ["--account-token", "0123456789abcdef0123"];
        let error = serve(&[&pg[..], &secret[..], &token[..]].concat())
            .unwrap_err()
            .to_string();
        assert!(error.contains("MSGW_VERIFY_SECRET"), "{error}");
        let verify = ["--verify-secret", "fedcba9876543210fedc"];
        let config = serve(&[&pg[..], &secret[..], &token[..], &verify[..]].concat()).unwrap();
        assert_eq!(config.store_url, "postgres://msgw@db/msgw");
        assert!(config.store_password.is_none());
    }

    #[test]
    fn a_previous_webhook_secret_needs_the_new_one_and_its_length() {
        let error = serve(&["--webhook-secret-previous", "0123456789abcdef0123"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("a rotation needs the new secret"), "{error}");
        let error = serve(&[
            "--webhook-secret",
            "0123456789abcdef0123",
            "--webhook-secret-previous",
            "short",
        ])
        .unwrap_err()
        .to_string();
        assert!(error.contains("at least 16"), "{error}");
        let config = serve(&[
            "--webhook-secret",
            "0123456789abcdef0123",
            "--webhook-secret-previous",
            "the-old-secret-0123456",
        ])
        .unwrap();
        assert!(config.webhook_secret_previous.is_some());
    }

    #[test]
    fn a_real_gateway_without_caller_authentication_refuses_to_start() {
        let gateway = ["--upstream-url", "https://gw.example", "--api-key", "k"];
        let error = serve(&gateway).unwrap_err().to_string();
        for needed in [
            "MSGW_CALLERS_FILE",
            "MSGW_GRPC_TLS_CLIENT_CA_FILE",
            "MSGW_ALLOW_UNAUTHENTICATED=true",
        ] {
            assert!(error.contains(needed), "{error}");
        }
        // TLS alone authenticates nobody.
        let tls = [
            "--grpc-tls-cert-file",
            "c.pem",
            "--grpc-tls-key-file",
            "k.pem",
        ];
        assert!(serve(&[&gateway[..], &tls[..]].concat()).is_err());
        for enough in [
            &["--callers-file", "callers.toml"][..],
            &[&tls[..], &["--grpc-tls-client-ca-file", "ca.pem"][..]].concat(),
            &["--allow-unauthenticated"][..],
            &["--allow-unauthenticated", "true"][..],
        ] {
            let config = serve(&[&gateway[..], enough].concat());
            assert!(config.is_ok(), "{enough:?}: {config:?}");
        }
        let error = serve(&[&gateway[..], &["--allow-unauthenticated", "false"][..]].concat());
        assert!(error.is_err());
        // The sandbox stays open with nothing configured.
        let config = serve(&[]).unwrap();
        assert!(config.callers_file.is_none() && config.tls.is_none());
    }

    #[test]
    fn tls_files_come_in_pairs_and_a_client_ca_needs_them() {
        let error = serve(&["--grpc-tls-cert-file", "c.pem"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--grpc-tls-key-file"), "{error}");
        let error = serve(&["--grpc-tls-client-ca-file", "ca.pem"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--grpc-tls-cert-file"), "{error}");
        let config = serve(&[
            "--grpc-tls-cert-file",
            "c.pem",
            "--grpc-tls-key-file",
            "k.pem",
            "--grpc-tls-client-ca-file",
            "ca.pem",
        ])
        .unwrap();
        let tls = config.tls.unwrap();
        assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
    }

    #[test]
    fn store_urls_and_password_files_are_checked() {
        let error = serve(&["--store-url", "mysql://db/msgw"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("sqlite://PATH"), "{error}");
        let error = serve(&["--store-password-file", "/nonexistent"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("postgres:// store URL only"), "{error}");
    }

    #[test]
    fn upstream_limits_default_to_the_documented_values() {
        let config = serve(&[]).unwrap();
        assert_eq!(
            config.upstream_limits,
            Limits {
                connections: 8,
                batch_max: 50,
                queue_max: 10_000
            }
        );
    }

    #[test]
    fn upstream_limits_out_of_range_are_refused_with_the_flag_named() {
        for (args, flag) in [
            (["--upstream-connections", "0"], "--upstream-connections"),
            (["--upstream-batch-max", "0"], "--upstream-batch-max"),
            (["--upstream-batch-max", "1001"], "--upstream-batch-max"),
            (["--upstream-queue-max", "10"], "--upstream-queue-max"),
        ] {
            let error = serve(&args).unwrap_err().to_string();
            assert!(error.contains(flag), "{args:?}: {error}");
        }
    }
}
