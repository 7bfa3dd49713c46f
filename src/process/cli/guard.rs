//! `msgw guard`: operators list and release held ranges straight in the store. (The
//! fraud guard's options of `msgw serve` are on its settings, `verify::guard::Settings`.)

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::core::verify::guard::holds;

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
    /// How a pooler in front of PostgreSQL pools (the same as `msgw serve`'s).
    #[arg(long, env = "MSGW_STORE_POOLING", default_value = "session", value_parser = super::pooling, global = true)]
    pub store_pooling: crate::adapters::store::Pooling,
    /// PostgreSQL itself, past the pooler (the same as `msgw serve`'s).
    #[arg(long, env = "MSGW_STORE_DIRECT_URL", value_parser = super::postgres_url, global = true)]
    pub store_direct_url: Option<String>,
}

/// What `msgw guard` does.
#[derive(Debug, Clone, Subcommand)]
pub enum GuardAction {
    /// List the number ranges the fraud guard holds now.
    List,
    /// End a range's hold now; its verifications count afresh from then on.
    Release {
        /// The range's digits, or a region of a shared calling code (`1/JM`), as
        /// `msgw guard list` shows them.
        range: String,
    },
}

impl GuardCommandArgs {
    /// Runs `msgw guard`: the lines it prints.
    pub async fn run(self) -> anyhow::Result<Vec<String>> {
        let args = self;
        if let Some(path) = crate::adapters::store::sqlite_file(&args.store_url)
            && !path.exists()
        {
            anyhow::bail!(
                "no store at {} (MSGW_STORE_URL={}): run it where msgw serve runs, with the same MSGW_STORE_URL",
                path.display(),
                args.store_url
            );
        }
        let password = crate::process::secrets::read(None, args.store_password_file.as_deref())
            .context("--store-password-file")?;
        let holds = crate::adapters::store::has_guard_tables(&args.store_url, password.as_ref())
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
        let target = crate::adapters::store::StoreTarget {
            url: args.store_url.clone(),
            password,
            pooling: args.store_pooling,
            direct_url: args.store_direct_url.clone(),
            names: crate::adapters::store::OptionNames::SERVE,
        };
        let store = crate::adapters::store::open(&target, std::time::Duration::from_secs(60))
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
