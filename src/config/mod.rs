//! Validated configuration of `msgw serve`: what the flags and environment variables
//! of `cli.rs` become once checked, secrets read and defaults resolved.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use secrecy::SecretString;

use crate::auth::tls::TlsFiles;
use crate::cli::ServeArgs;
use crate::dispatch::Limits;
use crate::grpc::port::PortLimits;
use crate::http_listener::ListenerLimits;
use crate::listen::ListenAddr;
use crate::reconcile::ReconcileConfig;
use crate::sandbox::{DEFAULT_API_KEY, SandboxConfig};
use crate::store::Retention;

pub mod problems;
mod secrets;
pub use problems::{Problem, Problems};
use secrets::secret_given;
pub use secrets::{random_token, read_secret};

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
    pub grpc_addr: ListenAddr,
    /// HTTP listen address (port 0: any free port).
    pub http_addr: ListenAddr,
    /// Admin listen address (`/metrics`; port 0: any free port).
    pub admin_addr: ListenAddr,
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
        let loopback = ListenAddr::from(SocketAddr::from(([127, 0, 0, 1], 0)));
        let defaults = Self::serve_defaults()
            // config/tests.rs checks that the flags' defaults are valid.
            .expect("msgw serve's defaults make a valid configuration");
        Self {
            grpc_addr: loopback.clone(),
            http_addr: loopback.clone(),
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
    /// Checks the flags and reads secret files. Every problem found is reported, in
    /// one [`Problems`] error, not only the first.
    pub fn into_config(self) -> anyhow::Result<Config> {
        let mut problems = Vec::new();
        let mut refuse = |problem: Problem| problems.push(problem);
        let shown = |d: Duration| humantime::format_duration(d).to_string();
        for (arg, d) in [
            ("upstream_timeout", self.upstream_timeout),
            ("webhook_header_timeout", self.webhook_header_timeout),
            ("webhook_body_timeout", self.webhook_body_timeout),
            ("reconcile_after", self.reconcile_after),
            ("reconcile_interval", self.reconcile_interval),
            ("reconcile_max_backoff", self.reconcile_max_backoff),
            ("event_retention", self.event_retention),
            ("idempotency_retention", self.idempotency_retention),
        ] {
            if d.is_zero() {
                refuse(Problem::value(arg, shown(d), "must be greater than zero"));
            }
        }
        if self.webhook_max_connections == 0 {
            refuse(Problem::value(
                "webhook_max_connections",
                0,
                "must be at least 1",
            ));
        }
        if !(1..=MAX_UPSTREAM_CONNECTIONS).contains(&self.upstream_connections) {
            refuse(Problem::value(
                "upstream_connections",
                self.upstream_connections,
                format!("must be between 1 and {MAX_UPSTREAM_CONNECTIONS}"),
            ));
        }
        if !(1..=MAX_UPSTREAM_BATCH).contains(&self.upstream_batch_max) {
            refuse(Problem::value(
                "upstream_batch_max",
                self.upstream_batch_max,
                format!("must be between 1 and {MAX_UPSTREAM_BATCH}"),
            ));
        }
        if self.upstream_queue_max < self.upstream_batch_max
            || self.upstream_queue_max > MAX_UPSTREAM_QUEUE
        {
            refuse(Problem::value(
                "upstream_queue_max",
                self.upstream_queue_max,
                format!(
                    "must be between MSGW_UPSTREAM_BATCH_MAX ({}) and {MAX_UPSTREAM_QUEUE}",
                    self.upstream_batch_max
                ),
            ));
        }
        if self.event_retention_count == 0 {
            refuse(Problem::value(
                "event_retention_count",
                0,
                "must be at least 1",
            ));
        }
        if self.verify_resend_interval > Duration::from_secs(3600) {
            refuse(Problem::value(
                "verify_resend_interval",
                shown(self.verify_resend_interval),
                "must be at most 1h",
            ));
        }
        let key = secret_given("api_key", self.api_key, self.api_key_file, &mut refuse);
        let upstream = match self.upstream_url {
            Some(url) => {
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    refuse(Problem::value(
                        "upstream_url",
                        &url,
                        "must be an absolute http(s) URL",
                    ));
                }
                let key = key.filter(|k| !k.is_empty()).unwrap_or_else(|| {
                    refuse(Problem::unset(
                        "api_key",
                        "a gateway URL (MSGW_UPSTREAM_URL) is set: it needs its API key (or MSGW_API_KEY_FILE)",
                    ));
                    String::new()
                });
                Upstream::Gateway {
                    url,
                    api_key: SecretString::from(key),
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
            refuse(Problem::value(
                "public_url",
                url,
                "must be an absolute http(s) URL",
            ));
        }
        let (tls, callers_file) = match self
            .security
            .checked(matches!(upstream, Upstream::Gateway { .. }))
        {
            Ok(checked) => checked,
            Err(problem) => {
                refuse(problem);
                (None, None)
            }
        };
        let shared_store = crate::store::is_shared(&self.store_url);
        if !shared_store && !self.store_url.starts_with("sqlite:") {
            refuse(Problem::value(
                "store_url",
                &self.store_url,
                "must be sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB",
            ));
        }
        let store_password = match &self.store_password_file {
            Some(path) if !shared_store => {
                refuse(Problem::value(
                    "store_password_file",
                    path.display(),
                    "is for a postgres:// MSGW_STORE_URL only",
                ));
                None
            }
            Some(path) => match read_secret(path) {
                Ok(password) => Some(SecretString::from(password)),
                Err(e) => {
                    refuse(Problem::value(
                        "store_password_file",
                        path.display(),
                        format!("{e:#}"),
                    ));
                    None
                }
            },
            None => None,
        };
        let at_least_16 = |arg: &str, given: Option<String>, refuse: &mut dyn FnMut(Problem)| {
            given.filter(|s| {
                let long_enough = s.len() >= 16;
                if !long_enough {
                    refuse(Problem::secret(
                        arg,
                        s.len(),
                        "must be at least 16 characters",
                    ));
                }
                long_enough
            })
        };
        let webhook_secret = secret_given(
            "webhook_secret",
            self.webhook_secret,
            self.webhook_secret_file,
            &mut refuse,
        );
        // A secret given but refused is not also "not set" below.
        let webhook_secret_given = webhook_secret.is_some();
        let webhook_secret = at_least_16("webhook_secret", webhook_secret, &mut refuse);
        let verify_secret = secret_given(
            "verify_secret",
            self.verify_secret,
            self.verify_secret_file,
            &mut refuse,
        );
        let verify_secret_given = verify_secret.is_some();
        let verify_secret = at_least_16("verify_secret", verify_secret, &mut refuse);
        let verify_allowed_prefixes = self
            .verify_allowed_prefixes
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .filter_map(|p| {
                let digits = p.strip_prefix('+').unwrap_or(p);
                if digits.is_empty()
                    || digits.len() > 6
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                    || digits.starts_with('0')
                {
                    refuse(Problem::value(
                        "verify_allowed_prefixes",
                        p,
                        "is not a country prefix (1 to 6 digits, not starting with 0)",
                    ));
                    return None;
                }
                Some(digits.to_owned())
            })
            .collect();
        let guard = self.guard.into_settings(&mut refuse);
        let previous = secret_given(
            "webhook_secret_previous",
            self.webhook_secret_previous,
            self.webhook_secret_previous_file,
            &mut refuse,
        );
        let webhook_secret_previous = at_least_16("webhook_secret_previous", previous, &mut refuse);
        if webhook_secret_previous.is_some() && webhook_secret.is_none() {
            refuse(Problem::unset(
                "webhook_secret",
                "MSGW_WEBHOOK_SECRET_PREVIOUS is set: a rotation needs the new secret",
            ));
        }
        let account_token = secret_given(
            "account_token",
            self.account_token,
            self.account_token_file,
            &mut refuse,
        )
        .filter(|s| {
            let valid = s.len() >= 16
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b));
            if !valid {
                refuse(Problem::secret(
                    "account_token",
                    s.len(),
                    "must be at least 16 of A-Z a-z 0-9 - _ . ~",
                ));
            }
            valid
        });
        let account_token_generated = account_token.is_none();
        let account_token = SecretString::from(account_token.unwrap_or_else(random_token));
        // Replicas sharing a store verify each other's hook tokens and check each
        // other's codes: a secret generated per start (or per replica) would make every
        // webhook or code of another replica's message a refusal. SQLite generates them
        // and keeps them next to the database.
        if shared_store {
            for (arg, missing, why) in [
                (
                    "webhook_secret",
                    !webhook_secret_given,
                    "verify each other's webhooks",
                ),
                (
                    "account_token",
                    account_token_generated,
                    "verify each other's webhooks",
                ),
                (
                    "verify_secret",
                    !verify_secret_given,
                    "check each other's one-time codes",
                ),
            ] {
                if missing {
                    refuse(Problem::unset(
                        arg,
                        format!(
                            "a PostgreSQL store is shared by replicas, which must {why}: set it (or its _FILE variable) to the same value on every replica"
                        ),
                    ));
                }
            }
        }
        Problems::check(problems)?;
        Ok(Config {
            grpc_addr: self.grpc_addr,
            http_addr: self.http_addr,
            admin_addr: self.admin_addr,
            public_url: self.public_url,
            webhook_secret: webhook_secret.map(SecretString::from),
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

#[cfg(test)]
mod tests;
