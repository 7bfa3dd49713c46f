//! Validated configuration of `msgw serve`: what the flags and environment variables
//! of `cli.rs` become once checked, secrets read and defaults resolved.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use secrecy::SecretString;

use crate::auth::tls::TlsFiles;
use crate::cli::ServeArgs;
use crate::dispatch::Limits;
use crate::grpc::port::PortLimits;
use crate::http_listener::ListenerLimits;
use crate::reconcile::ReconcileConfig;
use crate::sandbox::{DEFAULT_API_KEY, SandboxConfig};
use crate::store::Retention;

/// Most gateway requests in flight that can be configured.
const MAX_UPSTREAM_CONNECTIONS: usize = 1024;
/// Most operations per gateway request that can be configured.
const MAX_UPSTREAM_BATCH: usize = 1000;
/// Most queued operations that can be configured (each holds a validated request).
const MAX_UPSTREAM_QUEUE: usize = 1_000_000;

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
    /// HMAC key of hook tokens; `None`: generated and kept next to the SQLite file
    /// (random per start for an in-memory database).
    pub webhook_secret: Option<SecretString>,
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
    /// The fraud guard.
    pub guard: crate::verify::guard::Settings,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self {
            secret: None,
            resend_interval: Duration::from_secs(30),
            phone_limit: 5,
            allowed_prefixes: Vec::new(),
            guard: crate::verify::guard::Settings::default(),
        }
    }
}

impl Config {
    /// `msgw serve` with no flags and no environment: every flag at its default.
    pub fn serve_defaults() -> anyhow::Result<Self> {
        ServeArgs::defaults()?.into_config()
    }

    /// msgw on loopback ports the system chooses, with `msgw serve`'s defaults, fixed
    /// secrets, no authentication and background refreshes off: what tests and
    /// benchmarks start from, changing only what they are about.
    pub fn for_tests(upstream: Upstream, store_url: String) -> Self {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let defaults = Self::serve_defaults()
            // config/tests.rs checks that the flags' defaults are valid.
            .expect("msgw serve's defaults make a valid configuration");
        Self {
            grpc_addr: loopback,
            http_addr: loopback,
            admin_addr: loopback,
            webhook_secret: Some("test-webhook-secret-0123456789".to_owned().into()),
            account_token: "test-account-token-0123456789".to_owned().into(),
            generated_secrets: Vec::new(),
            store_url,
            // Tests that stop msgw do not wait out a pod's grace.
            shutdown_grace: Duration::from_secs(5),
            shutdown_delay: Duration::ZERO,
            balance_refresh: Duration::ZERO,
            upstream,
            ..defaults
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
        let webhook_secret = secret_if_set(
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
        let guard = self.guard.into_settings()?;
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
            if webhook_secret.is_none() {
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
                    webhook_secret.is_none(),
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
            generated_secrets: account_token_generated
                .then_some("account webhook token (MSGW_ACCOUNT_TOKEN)")
                .into_iter()
                .collect(),
            store_url: self.store_url,
            store_password,
            retention: Retention {
                max_age: self.event_retention,
                max_events: self.event_retention_count,
                claims_max_age: self.idempotency_retention,
                guard_max_age: guard.longest_window(),
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
                send_timeout: self.grpc_send_timeout,
                memory_budget: self.grpc_memory_budget,
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
                guard,
            },
        })
    }
}

/// A secret from its flag or file, checked; `None` when neither is set.
fn secret_if_set(
    what: &str,
    value: Option<String>,
    file: Option<&std::path::Path>,
    valid: impl Fn(&str) -> bool,
    rule: &str,
) -> anyhow::Result<Option<SecretString>> {
    let given = match (value, file) {
        (Some(v), _) => Some(v.trim().to_owned()),
        (None, Some(path)) => Some(read_secret(path).with_context(|| what.to_owned())?),
        (None, None) => None,
    };
    match given {
        Some(v) if valid(&v) => Ok(Some(SecretString::from(v))),
        Some(_) => bail!("the {what} must be {rule}"),
        None => Ok(None),
    }
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
    Ok(match secret_if_set(what, value, file, valid, rule)? {
        Some(secret) => (secret, false),
        None => (SecretString::from(random_token()), true),
    })
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
mod tests;
