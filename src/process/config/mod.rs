//! Checked configuration of `msgw serve`: what the flags and environment variables
//! of `cli.rs` become once secrets are read and the rules across options hold.
//!
//! Where an option is checked: its own bounds and format by its flag's parser (stated
//! once, on the flag: [`crate::base::parse`]); everything that depends on more than one
//! option, on a file or on the store (a queue not below the batch, the guard's grace
//! inside its window, the secrets replicas share, caller authentication in front of a
//! real gateway) here, in [`ServeArgs::into_config`] and nowhere else. Both end as
//! [`Problems`], one line each, all at once.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use secrecy::{ExposeSecret, SecretString};

use crate::core::dispatch::Limits;
use crate::core::ports::store::Retention;
use crate::core::reconcile::ReconcileConfig;
use crate::process::cli::{SecurityArgs, ServeArgs};
use crate::sandbox::{DEFAULT_API_KEY, SandboxConfig};
use crate::transport::auth::tls::TlsFiles;
use crate::transport::grpc::port::PortLimits;
use crate::transport::http_listener::ListenerLimits;
use crate::transport::listen::{ListenAddr, Listeners};

pub mod options;
pub mod problems;
mod secrets;
pub use problems::{Problem, Problems};
use secrets::{Secrets, secret};

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
    /// How a pooler in front of PostgreSQL pools.
    pub store_pooling: crate::adapters::store::Pooling,
    /// PostgreSQL itself, past the pooler.
    pub store_direct_url: Option<String>,
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
    /// HMAC key of verifications' codes at rest; `None`: generated and kept next to the
    /// SQLite file.
    pub verify_secret: Option<SecretString>,
    /// Verifications: resend interval, phone limit, allowed prefixes, the fraud guard.
    pub verify: crate::core::verify::Settings,
    /// The replies that opt a number out, and back in.
    pub opt_out: crate::core::optout::Settings,
    /// How long status, balance and sender lookups are given again.
    pub queries: crate::core::queries::QuerySettings,
}

impl Config {
    /// The store to open, and how to reach it.
    pub fn store_target(&self) -> crate::adapters::store::StoreTarget {
        crate::adapters::store::StoreTarget {
            url: self.store_url.clone(),
            password: self.store_password.clone(),
            pooling: self.store_pooling,
            direct_url: self.store_direct_url.clone(),
            names: crate::adapters::store::OptionNames::SERVE,
        }
    }

    /// `msgw serve` with no flags and no environment: every flag at its default.
    pub fn serve_defaults() -> anyhow::Result<Self> {
        crate::base::parse::defaults::<ServeArgs>().into_config()
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

    /// Binds the gRPC, webhook and admin ports, or says what is wrong with each one
    /// that cannot be bound, at once.
    pub fn bind_ports(&self) -> Result<[Listeners; 3], Problems> {
        let ports = ports(&self.grpc_addr, &self.http_addr, &self.admin_addr);
        crate::transport::listen::bind_all(ports.map(|(_, addr)| addr)).map_err(|failed| {
            Problems(
                failed
                    .iter()
                    .map(|(i, e)| Problem::listen(ports[*i].0, ports[*i].1, e))
                    .collect(),
            )
        })
    }
}

impl ServeArgs {
    /// Reads the secrets and checks the rules across options. Every problem found is
    /// reported, in one [`Problems`] error, not only the first.
    pub fn into_config(mut self) -> anyhow::Result<Config> {
        let mut problems = Vec::new();
        let mut refuse = |problem: Problem| problems.push(problem);
        self.check_across(&mut refuse);
        let upstream = self.upstream(&mut refuse);
        let (tls, callers_file) = authentication(
            self.security.clone(),
            matches!(upstream, Upstream::Gateway { .. }),
        )
        .unwrap_or_else(|problem| {
            refuse(problem);
            (None, None)
        });
        let shared_store = crate::adapters::store::is_shared(&self.store_url);
        let secrets = Secrets::read(&mut self, shared_store, &mut refuse);
        if !problems.is_empty() {
            // A busy port is said with the other problems, not in a second round once
            // they are fixed.
            problems.extend(
                ports(&self.grpc_addr, &self.http_addr, &self.admin_addr)
                    .into_iter()
                    .filter_map(|(arg, addr)| {
                        Listeners::probe(addr)
                            .err()
                            .map(|e| Problem::listen(arg, addr, &e))
                    }),
            );
        }
        Problems::check(problems)?;
        Ok(Config {
            grpc_addr: self.grpc_addr,
            http_addr: self.http_addr,
            admin_addr: self.admin_addr,
            public_url: self.public_url,
            webhook_secret: secrets.webhook,
            webhook_secret_previous: secrets.webhook_previous,
            account_token: secrets.account_token,
            generated_secrets: secrets
                .account_token_generated
                .then_some("account webhook token (MSGW_ACCOUNT_TOKEN)")
                .into_iter()
                .collect(),
            store_url: self.store_url,
            store_password: secrets.store_password,
            store_pooling: self.store_pooling,
            store_direct_url: self.store_direct_url,
            retention: Retention {
                max_age: self.event_retention,
                max_events: self.event_retention_count,
                claims_max_age: self.idempotency_retention,
                guard_max_age: self.verify.guard.longest_window(),
                trusted_keys_max_age: self.verify.guard.trusted_key_window,
            },
            event_fan_out: self.event_fan_out,
            reconcile: self.reconcile,
            shutdown_grace: self.shutdown_grace,
            shutdown_delay: self.shutdown_delay,
            balance_refresh: self.balance_refresh,
            upstream,
            upstream_timeout: self.upstream_timeout,
            upstream_settle: self.upstream_settle,
            upstream_limits: self.upstream,
            grpc_limits: self.grpc,
            webhook_limits: self.webhook,
            tls,
            callers_file,
            verify_secret: secrets.verify,
            verify: self.verify,
            opt_out: self.opt_out,
            queries: self.queries,
        })
    }

    /// The rules between options that are not secrets: a queue not below the batch,
    /// a burst within its rate, the guard's grace inside its window, no keyword both opting out and in.
    fn check_across(&self, refuse: &mut impl FnMut(Problem)) {
        if self.upstream.queue_max < self.upstream.batch_max {
            refuse(Problem::value(
                "upstream_queue_max",
                self.upstream.queue_max,
                format!(
                    "must not be below MSGW_UPSTREAM_BATCH_MAX ({})",
                    self.upstream.batch_max
                ),
            ));
        }
        if let Some(burst) = self.upstream.burst {
            match self.upstream.rate {
                None => refuse(Problem::value(
                    "upstream_burst",
                    burst,
                    "needs MSGW_UPSTREAM_RATE (a burst of what rate?)".to_owned(),
                )),
                Some(rate) if burst > rate => refuse(Problem::value(
                    "upstream_burst",
                    burst,
                    format!(
                        "must not be above MSGW_UPSTREAM_RATE ({rate}): no second may hold more than the rate"
                    ),
                )),
                Some(_) => {}
            }
        }
        let guard = &self.verify.guard;
        if guard.grace >= guard.window {
            refuse(Problem::value(
                "verify_guard_grace",
                crate::base::parse::shown(guard.grace),
                format!(
                    "must be shorter than MSGW_VERIFY_GUARD_WINDOW ({})",
                    crate::base::parse::shown(guard.window)
                ),
            ));
        }
        let both = self.opt_out.overlap();
        if !both.is_empty() {
            refuse(Problem::value(
                "opt_in_keywords",
                both.join(","),
                "names keywords MSGW_OPT_OUT_KEYWORDS names too: a reply cannot both opt out and opt back in",
            ));
        }
        let shared_store = crate::adapters::store::is_shared(&self.store_url);
        if !shared_store && let Some(direct) = &self.store_direct_url {
            refuse(Problem::value(
                "store_direct_url",
                crate::adapters::store::redacted(direct),
                "is for a postgres:// MSGW_STORE_URL only",
            ));
        }
        if self.store_pooling == crate::adapters::store::Pooling::Transaction {
            if !shared_store {
                refuse(Problem::value(
                    "store_pooling",
                    self.store_pooling,
                    "is for a postgres:// MSGW_STORE_URL only",
                ));
            } else if self.store_direct_url.is_none() {
                refuse(Problem::value(
                    "store_pooling",
                    self.store_pooling,
                    format!(
                        "needs MSGW_STORE_DIRECT_URL: {}",
                        crate::adapters::store::DIRECT_URL_IS
                    ),
                ));
            }
        }
    }

    /// The gateway (a URL and its API key), or the sandbox when no URL is set: an API
    /// key without a gateway becomes the sandbox's key, so a deployment's secret wiring
    /// can be tried before the gateway account exists.
    fn upstream(&mut self, refuse: &mut impl FnMut(Problem)) -> Upstream {
        let key = secret(
            "api_key",
            self.api_key.take(),
            self.api_key_file.take(),
            refuse,
        );
        match self.upstream_url.take() {
            Some(url) => Upstream::Gateway {
                url,
                api_key: key
                    .filter(|k| !k.expose_secret().is_empty())
                    .unwrap_or_else(|| {
                        refuse(Problem::unset(
                            "api_key",
                            "a gateway URL (MSGW_UPSTREAM_URL) is set: it needs its API key (or MSGW_API_KEY_FILE)",
                        ));
                        SecretString::from(String::new())
                    }),
            },
            None => Upstream::Sandbox(self.sandbox.config(key.map_or_else(
                || DEFAULT_API_KEY.to_owned(),
                |k| k.expose_secret().to_owned(),
            ))),
        }
    }
}

/// The three ports by the option that sets each.
fn ports<'a>(
    grpc: &'a ListenAddr,
    http: &'a ListenAddr,
    admin: &'a ListenAddr,
) -> [(&'static str, &'a ListenAddr); 3] {
    [
        ("grpc_addr", grpc),
        ("http_addr", http),
        ("admin_addr", admin),
    ]
}

/// The TLS files and callers file, refusing a real gateway (`real_gateway`) that
/// anyone reaching the port could spend on, unless that is asked for.
fn authentication(
    security: SecurityArgs,
    real_gateway: bool,
) -> Result<(Option<TlsFiles>, Option<PathBuf>), Problem> {
    let tls = match (security.grpc_tls_cert_file, security.grpc_tls_key_file) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca: security.grpc_tls_client_ca_file,
        }),
        _ => None,
    };
    let mtls = tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    if real_gateway && security.callers_file.is_none() && !mtls && !security.allow_unauthenticated {
        return Err(Problem::unset(
            "callers_file",
            "a real gateway is configured (MSGW_UPSTREAM_URL) but no caller authentication: anyone who reaches the gRPC port could send paid messages and read every delivery event. Set MSGW_CALLERS_FILE (bearer tokens) or MSGW_GRPC_TLS_CLIENT_CA_FILE (mTLS), or MSGW_ALLOW_UNAUTHENTICATED=true if something in front of msgw (a service mesh) already authenticates callers",
        )
        .example("/etc/msgw/callers.toml"));
    }
    Ok((tls, security.callers_file))
}

#[cfg(test)]
mod tests;
