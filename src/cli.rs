//! The command line: `msgw serve`, `check`, `copy-store` and `sandbox`, each flag with
//! its environment variable (`msgw serve --help` documents each). `config/` turns
//! `serve`'s flags into a validated `Config`.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use secrecy::SecretString;

mod guard;

pub use guard::{GuardAction, GuardArgs, GuardCommandArgs};

use crate::auth::tls::TlsFiles;
use crate::config::read_secret;
use crate::listen::ListenAddr;
use crate::sandbox::{DEFAULT_API_KEY, SandboxConfig};

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
    /// The fraud guard's held number ranges: `msgw guard list`, `msgw guard release RANGE`
    /// (straight in the store, with or without msgw running).
    Guard(GuardCommandArgs),
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
    #[arg(long, env = "MSGW_SANDBOX_ADDR", default_value = "0.0.0.0:8090", value_parser = ListenAddr::parse)]
    pub addr: ListenAddr,
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
            let empty = crate::config::Problem::value("api_key", "", "must not be empty");
            return Err(crate::config::Problems(vec![empty.for_command("sandbox")]).into());
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

/// Flags of `msgw serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// gRPC listen address: `IP:PORT`, or `HOST:PORT` to listen on every address the
    /// name resolves to (`localhost`: both loopbacks).
    #[arg(long, env = "MSGW_GRPC_ADDR", default_value = "0.0.0.0:50051", value_parser = ListenAddr::parse)]
    pub grpc_addr: ListenAddr,
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
    #[arg(long, env = "MSGW_HTTP_ADDR", default_value = "0.0.0.0:8080", value_parser = ListenAddr::parse)]
    pub http_addr: ListenAddr,
    /// Admin listen address: `/metrics`, probes and, on the sandbox, its inbox
    /// `/sandbox/` (never on the webhook listener).
    #[arg(long, env = "MSGW_ADMIN_ADDR", default_value = "0.0.0.0:9090", value_parser = ListenAddr::parse)]
    pub admin_addr: ListenAddr,
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
    /// gRPC port: a response the client does not read (its flow-control window stays
    /// shut) for this long resets its stream; a connection whose socket takes no byte
    /// for this long is closed.
    #[arg(long, env = "MSGW_GRPC_SEND_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub grpc_send_timeout: Duration,
    /// gRPC port: what all its connections may make msgw hold (streams, metadata,
    /// unsent answers), e.g. `64MiB`. At the budget new streams get RESOURCE_EXHAUSTED
    /// and the connection holding the most is closed. Default: a quarter of the memory
    /// limit (the cgroup's `memory.max`, else the machine's memory).
    #[arg(long, env = "MSGW_GRPC_MEMORY_BUDGET", value_parser = crate::memory::parse_size)]
    pub grpc_memory_budget: Option<u64>,
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
    /// The fraud guard.
    #[command(flatten)]
    pub guard: GuardArgs,
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

impl ServeArgs {
    /// Every flag of `msgw serve` at its default, whatever the environment holds:
    /// what `Config::for_tests` starts from, so a new flag's default is written once.
    pub fn defaults() -> Result<Self, clap::Error> {
        use clap::FromArgMatches;
        let command = Self::augment_args(clap::Command::new("serve"))
            .mut_args(|arg| arg.env(None::<&'static str>));
        Self::from_arg_matches(&command.try_get_matches_from(["serve"])?)
    }
}

impl SecurityArgs {
    /// The TLS files and callers file, refusing a real gateway (`real_gateway`) that
    /// anyone reaching the port could spend on, unless that is asked for.
    pub(crate) fn checked(
        self,
        real_gateway: bool,
    ) -> Result<(Option<TlsFiles>, Option<PathBuf>), crate::config::Problem> {
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
            return Err(crate::config::Problem::unset(
                "callers_file",
                "a real gateway is configured (MSGW_UPSTREAM_URL) but no caller authentication: anyone who reaches the gRPC port could send paid messages and read every delivery event. Set MSGW_CALLERS_FILE (bearer tokens) or MSGW_GRPC_TLS_CLIENT_CA_FILE (mTLS), or MSGW_ALLOW_UNAUTHENTICATED=true if something in front of msgw (a service mesh) already authenticates callers",
            )
            .example("/etc/msgw/callers.toml"));
        }
        Ok((tls, self.callers_file))
    }
}

/// The longest duration any option takes: ten years. Longer ones cannot be added to
/// a date (a settle window of 10^11 days would overflow where claims are stamped).
const LONGEST: Duration = Duration::from_secs(10 * 365 * 86_400);

/// A duration (`10s`, `1500ms`, `5m`, `7d`) of at most ten years.
pub(crate) fn duration(value: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(value)
        .map_err(|_| "not a duration: expected a number and a unit (ms, s, m, h, d)")?;
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
