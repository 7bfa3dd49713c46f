//! The command line: `msgw serve`, `check`, `copy-store`, `guard` and `sandbox`, each
//! flag with its environment variable (`msgw serve --help` documents each). A flag is
//! where an option is written, once: its name, variable, default, bounds
//! ([`crate::base::parse`]) and help. The options a subsystem uses are declared on its own
//! settings struct (`verify::Settings`, `optout::Settings`, `dispatch::Limits`, `grpc::port::PortLimits`,
//! ...) and flattened into `serve`'s here; `config/` turns `serve`'s flags into a
//! checked `Config`, and `msgw options` lists them for the docs' and chart's checks.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use secrecy::SecretString;

mod guard;

pub use guard::{GuardAction, GuardCommandArgs};

use crate::base::parse;
use crate::core::dispatch::Limits;
use crate::core::reconcile::ReconcileConfig;
use crate::sandbox::{DEFAULT_API_KEY, SandboxConfig, Tuning};
use crate::transport::grpc::port::PortLimits;
use crate::transport::http_listener::ListenerLimits;
use crate::transport::listen::ListenAddr;

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
    #[command(mut_args = value_named_as_flag)]
    Serve(ServeArgs),
    /// Serve only the sandbox gateway (`POST /api/json.php`), for pointing other code at it.
    Sandbox(SandboxArgs),
    /// Copy a stopped msgw's SQLite store into an empty PostgreSQL store (every table:
    /// claims, tracked messages, the event log with its cursors, verifications, the fraud
    /// guard's counts and holds, the sandbox), to move to several replicas.
    CopyStore(CopyStoreArgs),
    /// Check that a running msgw serves (gRPC health); exit status 0 when it does.
    Check(CheckArgs),
    /// The fraud guard's held number ranges: `msgw guard list`, `msgw guard release RANGE`
    /// (straight in the store, with or without msgw running).
    Guard(GuardCommandArgs),
    /// Every option of `msgw serve` as JSON (flag, variable, default, bounds, help): what
    /// the checks of docs/configuration.md and the Helm chart compare against.
    #[command(hide = true)]
    Options,
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
    #[arg(long, default_value = "5s", value_parser = parse::duration)]
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
    /// PostgreSQL itself when `--to` is a pooler's address: the copy is written there.
    #[arg(long, env = "MSGW_STORE_DIRECT_URL", value_parser = postgres_url)]
    pub to_direct: Option<String>,
}

impl CopyStoreArgs {
    /// The password from its file, if one is named.
    pub fn password(&self) -> anyhow::Result<Option<SecretString>> {
        crate::process::secrets::read(None, self.to_password_file.as_deref())
            .context("--to-password-file")
    }
}

/// Flags of `msgw sandbox`.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Listen address of the sandbox gateway.
    #[arg(long, env = "MSGW_SANDBOX_ADDR", default_value = "0.0.0.0:8090", value_parser = ListenAddr::parse)]
    pub addr: ListenAddr,
    /// API key the sandbox accepts as `auth`.
    #[arg(long, env = "MSGW_SANDBOX_API_KEY", default_value = DEFAULT_API_KEY, value_parser = parse::not_blank)]
    pub api_key: String,
    /// Account-level notification URL that receives pipeline statuses.
    #[arg(long, env = "MSGW_SANDBOX_ACCOUNT_WEBHOOK_URL")]
    pub account_webhook_url: Option<url::Url>,
    /// Delivery speeds.
    #[command(flatten)]
    pub tuning: Tuning,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

impl SandboxArgs {
    /// The sandbox configuration these flags describe.
    pub fn config(&self) -> SandboxConfig {
        SandboxConfig {
            account_webhook_url: self.account_webhook_url.as_ref().map(url::Url::to_string),
            ..self.tuning.config(self.api_key.clone())
        }
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

/// Flags of `msgw serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// gRPC listen address: `IP:PORT`, or `HOST:PORT` to listen on every address the
    /// name resolves to (`localhost`: both loopbacks).
    #[arg(long, env = "MSGW_GRPC_ADDR", default_value = "0.0.0.0:50051", value_parser = ListenAddr::parse)]
    pub grpc_addr: ListenAddr,
    /// The gateway's base URL; msgw posts to `{base_url}/api/json.php`. Unset: the built-in sandbox.
    #[arg(long, env = "MSGW_UPSTREAM_URL", value_parser = parse::http_url)]
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
    #[arg(long, env = "MSGW_UPSTREAM_TIMEOUT", default_value = "10s", value_parser = parse::positive_duration)]
    pub upstream_timeout: Duration,
    /// After a send request is cut while the gateway may hold it (the upstream timeout,
    /// a connection lost after the body left), how long the gateway's "message not
    /// found" still means "not yet": retries inside this window never send. `0s` trusts
    /// "not found" at once.
    #[arg(long, env = "MSGW_UPSTREAM_SETTLE", default_value = "60s", value_parser = parse::duration)]
    pub upstream_settle: Duration,
    /// Gateway requests in flight, operations per request and queued operations.
    #[command(flatten)]
    pub upstream: Limits,
    /// HTTP listen address of the gateway's delivery webhooks (faces the internet).
    #[arg(long, env = "MSGW_HTTP_ADDR", default_value = "0.0.0.0:8080", value_parser = ListenAddr::parse)]
    pub http_addr: ListenAddr,
    /// Admin listen address: `/metrics`, probes and, on the sandbox, its inbox
    /// `/sandbox/` (never on the webhook listener).
    #[arg(long, env = "MSGW_ADMIN_ADDR", default_value = "0.0.0.0:9090", value_parser = ListenAddr::parse)]
    pub admin_addr: ListenAddr,
    /// Bounds of the gRPC port.
    #[command(flatten)]
    pub grpc: PortLimits,
    /// Bounds of the webhook listener.
    #[command(flatten)]
    pub webhook: ListenerLimits,
    /// Base URL where the gateway reaches the HTTP listener; hook URLs are built from it.
    /// Default: the listener's own address (loopback when bound to all interfaces).
    #[arg(long, env = "MSGW_PUBLIC_URL", value_parser = parse::http_url)]
    pub public_url: Option<url::Url>,
    /// HMAC key of the per-message hook tokens (at least 16 characters). Default: on SQLite,
    /// generated once into `<database file>.webhook-secret` (random per start for an
    /// in-memory database); a PostgreSQL store needs it set.
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
    /// Verifications and their fraud guard.
    #[command(flatten)]
    pub verify: crate::core::verify::Settings,
    /// Which replies opt a number out, and back in.
    #[command(flatten)]
    pub opt_out: crate::core::optout::Settings,
    /// How long status, balance and sender lookups are given again.
    #[command(flatten)]
    pub queries: crate::core::queries::QuerySettings,
    /// The store: `sqlite://PATH` (created on first start), `sqlite::memory:`, or
    /// `postgres://USER@HOST/DB?sslmode=...` (shared by several replicas).
    #[arg(long, env = "MSGW_STORE_URL", default_value = "sqlite://msgw.db", value_parser = store_url)]
    pub store_url: String,
    /// File holding the PostgreSQL password (instead of one in the store URL).
    #[arg(long, env = "MSGW_STORE_PASSWORD_FILE")]
    pub store_password_file: Option<PathBuf>,
    /// How a pooler between msgw and PostgreSQL pools: `session` (a direct connection,
    /// or PgBouncer's session mode) or `transaction` (PgBouncer's transaction mode;
    /// needs `--store-direct-url`).
    #[arg(long, env = "MSGW_STORE_POOLING", default_value = "session", value_parser = pooling)]
    pub store_pooling: crate::adapters::store::Pooling,
    /// PostgreSQL itself, past the pooler `--store-url` leads to (`postgres://...`): for
    /// the migrations' lock and LISTEN, which need a session that lasts.
    #[arg(long, env = "MSGW_STORE_DIRECT_URL", value_parser = postgres_url)]
    pub store_direct_url: Option<String>,
    /// Events older than this are dropped from the log (e.g. `7d`, `12h`).
    #[arg(long, env = "MSGW_EVENT_RETENTION", default_value = "7d", value_parser = parse::positive_duration)]
    pub event_retention: Duration,
    /// At most this many events are kept in the log.
    #[arg(long, env = "MSGW_EVENT_RETENTION_COUNT", default_value = "1000000", value_parser = parse::at_least(1u64))]
    pub event_retention_count: u64,
    /// How long the outcome of a send is kept to answer retries with the same id
    /// (longer while reconcile still tracks the message), e.g. `7d`.
    #[arg(long, env = "MSGW_IDEMPOTENCY_RETENTION", default_value = "7d", value_parser = parse::positive_duration)]
    pub idempotency_retention: Duration,
    /// Events kept in memory for live subscribers; a subscriber further behind catches up from the store.
    #[arg(long, env = "MSGW_EVENT_FAN_OUT", default_value = "4096", value_parser = parse::between(16usize, 1_000_000))]
    pub event_fan_out: usize,
    /// Status polling of messages without a final status.
    #[command(flatten)]
    pub reconcile: ReconcileConfig,
    /// How often the balance metric is refreshed (e.g. `5m`); `0` turns it off.
    #[arg(long, env = "MSGW_BALANCE_REFRESH", default_value = "5m", value_parser = parse::duration)]
    pub balance_refresh: Duration,
    /// Tokio worker threads. Default: the container's CPU limit (cgroup quota), else the machine's CPUs.
    #[arg(long, env = "MSGW_WORKER_THREADS", value_parser = parse::between(1u16, 1024))]
    pub worker_threads: Option<u16>,
    /// After SIGTERM, how long in-flight calls may take before msgw exits anyway.
    #[arg(long, env = "MSGW_SHUTDOWN_GRACE", default_value = "25s", value_parser = parse::duration)]
    pub shutdown_grace: Duration,
    /// After SIGTERM, how long msgw reports NOT_SERVING but goes on serving before it
    /// drains, while load balancers and Kubernetes endpoints take it out (e.g. `5s`).
    #[arg(long, env = "MSGW_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse::duration)]
    pub shutdown_delay: Duration,
    /// Who may call the gRPC port.
    #[command(flatten)]
    pub security: SecurityArgs,
    /// Delivery speeds of the built-in sandbox (used only without --upstream-url).
    #[command(flatten)]
    pub sandbox: Tuning,
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

/// `session` or `transaction`.
fn pooling(value: &str) -> Result<crate::adapters::store::Pooling, String> {
    value.parse()
}

/// A PostgreSQL URL: `postgres://...` (`postgresql://`).
fn postgres_url(value: &str) -> Result<String, String> {
    if crate::adapters::store::is_shared(value) {
        Ok(value.to_owned())
    } else {
        Err("must be postgres://USER@HOST/DB".into())
    }
}

/// A store URL: `sqlite:...` or `postgres://...` (`postgresql://`).
fn store_url(value: &str) -> Result<String, String> {
    if value.starts_with("sqlite:") || crate::adapters::store::is_shared(value) {
        Ok(value.to_owned())
    } else {
        Err("must be sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB".into())
    }
}

/// `--upstream-connections <UPSTREAM_CONNECTIONS>` in `--help` and errors, whichever
/// settings struct declares the option (its field is `connections`).
fn value_named_as_flag(arg: clap::Arg) -> clap::Arg {
    match arg.get_long().map(|l| l.to_uppercase().replace('-', "_")) {
        Some(name) => arg.value_name(name),
        None => arg,
    }
}
