//! The fraud guard's flags of `msgw serve`, and `msgw guard` (operators list and
//! release held ranges straight in the store).

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::verify::guard::{CountryLimits, KeyLimits, Mode, SafePrefixes, Settings, holds};

fn mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

fn share(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| (0.0..=1.0).contains(v))
        .ok_or_else(|| format!("{s:?} is not a share from 0 to 1 (e.g. 0.2)"))
}

/// The fraud guard's flags (see README, "Fraud guard").
#[derive(Debug, Clone, Args)]
pub struct GuardArgs {
    /// The fraud guard in front of every verification send: `on` (refuses), `shadow`
    /// (decides, counts and logs, refuses nothing) or `off`.
    #[arg(long, env = "MSGW_VERIFY_FRAUD_GUARD", default_value = "on", value_parser = mode)]
    pub verify_fraud_guard: Mode,
    /// A number range is the number's first this many digits (2 to 12).
    #[arg(long, env = "MSGW_VERIFY_GUARD_PREFIX_DIGITS", default_value_t = 6)]
    pub verify_guard_prefix_digits: usize,
    /// The sliding window a range's verifications and approvals are counted over.
    #[arg(long, env = "MSGW_VERIFY_GUARD_WINDOW", default_value = "1h", value_parser = super::duration)]
    pub verify_guard_window: Duration,
    /// A verification this old and not approved counts as unconverted.
    #[arg(long, env = "MSGW_VERIFY_GUARD_GRACE", default_value = "2m", value_parser = super::duration)]
    pub verify_guard_grace: Duration,
    /// A range is held from this many unconverted verifications in the window...
    #[arg(long, env = "MSGW_VERIFY_GUARD_MIN_STARTS", default_value_t = 20)]
    pub verify_guard_min_starts: u32,
    /// ...when fewer than this share of its decided verifications were approved.
    #[arg(long, env = "MSGW_VERIFY_GUARD_MIN_CONVERSION", default_value = "0.2", value_parser = share)]
    pub verify_guard_min_conversion: f64,
    /// How long a held range stays held (new verifications to it: PERMISSION_DENIED).
    #[arg(long, env = "MSGW_VERIFY_GUARD_HOLD", default_value = "1h", value_parser = super::duration)]
    pub verify_guard_hold: Duration,
    /// Starts per caller-supplied rate-limit key name (StartVerification's
    /// `rate_limit_keys`), e.g. `ip=10/1h,user=5/1h`. Default: none.
    #[arg(long, env = "MSGW_VERIFY_KEY_LIMITS", default_value = "", value_parser = |s: &str| s.parse::<KeyLimits>())]
    pub verify_key_limits: KeyLimits,
    /// Starts per calling code (ITU E.164, 1 to 3 digits), e.g.
    /// `380=2000/1h,*=200/1h` (`*`: each other code). Default: none.
    #[arg(long, env = "MSGW_VERIFY_COUNTRY_LIMITS", default_value = "", value_parser = |s: &str| s.parse::<CountryLimits>())]
    pub verify_country_limits: CountryLimits,
    /// Numbers or ranges the guard leaves alone (your own test numbers), e.g.
    /// `380000000,4477009001`. Default: none.
    #[arg(long, env = "MSGW_VERIFY_SAFE_PREFIXES", default_value = "", value_parser = |s: &str| s.parse::<SafePrefixes>())]
    pub verify_safe_prefixes: SafePrefixes,
}

impl GuardArgs {
    /// The guard's settings; what is wrong with them goes to `refuse`.
    pub fn into_settings(self, refuse: &mut impl FnMut(crate::config::Problem)) -> Settings {
        let settings = Settings {
            mode: self.verify_fraud_guard,
            prefix_digits: self.verify_guard_prefix_digits,
            window: self.verify_guard_window,
            grace: self.verify_guard_grace,
            min_starts: self.verify_guard_min_starts,
            min_conversion: self.verify_guard_min_conversion,
            hold: self.verify_guard_hold,
            key_limits: self.verify_key_limits,
            country_limits: self.verify_country_limits,
            safe_prefixes: self.verify_safe_prefixes,
        };
        for (arg, value, why) in settings.problems() {
            refuse(crate::config::Problem::value(arg, value, why));
        }
        settings
    }
}

/// Flags of `msgw guard`.
#[derive(Debug, Clone, Args)]
pub struct GuardCommandArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: GuardAction,
    /// The store msgw runs on (the same as `msgw serve`'s).
    #[arg(
        long,
        env = "MSGW_STORE_URL",
        default_value = "sqlite://msgw.db",
        global = true
    )]
    pub store_url: String,
    /// File holding the PostgreSQL password (instead of one in the store URL).
    #[arg(long, env = "MSGW_STORE_PASSWORD_FILE", global = true)]
    pub store_password_file: Option<std::path::PathBuf>,
}

/// What `msgw guard` does.
#[derive(Debug, Clone, Subcommand)]
pub enum GuardAction {
    /// List the number ranges the fraud guard holds now.
    List,
    /// End a range's hold now; its verifications count afresh from then on.
    Release {
        /// The range's digits, as `msgw guard list` shows them.
        range: String,
    },
}

impl GuardCommandArgs {
    /// Runs `msgw guard`: the lines it prints.
    pub async fn run(self) -> anyhow::Result<Vec<String>> {
        let args = self;
        if let Some(path) = crate::store::sqlite_file(&args.store_url)
            && !path.exists()
        {
            anyhow::bail!(
                "no store at {} (MSGW_STORE_URL={}): run it where msgw serve runs, with the same MSGW_STORE_URL",
                path.display(),
                args.store_url
            );
        }
        let password = args
            .store_password_file
            .as_deref()
            .map(|p| crate::config::read_secret(p).map(secrecy::SecretString::from))
            .transpose()
            .context("--store-password-file")?;
        let holds = crate::store::has_guard_tables(&args.store_url, password.as_ref())
            .await
            .with_context(|| {
                format!(
                    "cannot read the store {}",
                    args.store_url.split('@').next_back().unwrap_or_default()
                )
            })?;
        if !holds {
            anyhow::bail!(
                "{} is not msgw's store, or no msgw with the fraud guard has run on it (no guard_holds table): point MSGW_STORE_URL at the store msgw serve uses",
                args.store_url.split('@').next_back().unwrap_or_default()
            );
        }
        let store = crate::store::open(
            &args.store_url,
            password.as_ref(),
            std::time::Duration::from_secs(60),
        )
        .await
        .with_context(|| {
            format!(
                "cannot open the store {}",
                args.store_url.split('@').next_back().unwrap_or_default()
            )
        })?;
        let now = chrono::Utc::now();
        let lines = match args.action {
            GuardAction::List => {
                let mut lines = Vec::new();
                let mut after = String::new();
                loop {
                    let (page, next) =
                        holds::held(store.as_ref(), now, &after, holds::PAGE_MAX).await?;
                    lines.extend(page.iter().map(holds::describe));
                    match next {
                        Some(token) => after = token,
                        None => break,
                    }
                }
                if lines.is_empty() {
                    lines.push("no range is held".to_owned());
                }
                lines
            }
            GuardAction::Release { range } => {
                let range = holds::parse_range(&range)
                    .map_err(|e| anyhow::anyhow!("RANGE {range:?} {}", e.0))?;
                let released =
                    holds::release(store.as_ref(), &range, now, "the command line").await?;
                vec![format!(
                    "released {}: its verifications count afresh from now",
                    released.range
                )]
            }
        };
        store.close().await;
        Ok(lines)
    }
}
