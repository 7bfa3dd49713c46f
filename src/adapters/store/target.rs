//! Where the store is and how msgw reaches it: the store URL, the PostgreSQL password,
//! and for PostgreSQL behind a connection pooler (PgBouncer), the pooler's mode and the
//! database's own address.

use std::fmt;
use std::str::FromStr;

use secrecy::SecretString;

/// How a connection pooler between msgw and PostgreSQL hands out server sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooling {
    /// A connection is one server session from its start to its end: a direct
    /// connection, or PgBouncer's `pool_mode = session`.
    #[default]
    Session,
    /// PgBouncer's `pool_mode = transaction`: each transaction may run on another
    /// server session. msgw then prepares no named statement, runs every statement in
    /// a transaction of its own, and LISTENs and migrates over [`StoreTarget::direct_url`].
    Transaction,
}

impl Pooling {
    /// The option's value, as `MSGW_STORE_POOLING` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Transaction => "transaction",
        }
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Pooling {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "session" => Ok(Self::Session),
            "transaction" => Ok(Self::Transaction),
            other => Err(format!(
                "{other:?} is not a pooling mode: expected `session` (a direct connection, or PgBouncer's session mode) or `transaction` (PgBouncer's transaction mode)"
            )),
        }
    }
}

/// What the direct URL is, and why transaction pooling needs it (for messages).
pub const DIRECT_URL_IS: &str = "PostgreSQL itself, past the pooler, for the migrations' lock and LISTEN, which need a session that lasts";

/// What a command calls the store's options, for its messages: `msgw serve`'s (and
/// `msgw guard`'s) environment, or `msgw copy-store`'s flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionNames {
    /// The store URL's.
    pub url: &'static str,
    /// The direct URL's.
    pub direct_url: &'static str,
    /// What to do when the store URL leads to a pooler in transaction mode that the
    /// command was not told of.
    pub transaction_fix: &'static str,
}

impl OptionNames {
    /// `msgw serve`'s and `msgw guard`'s.
    pub const SERVE: Self = Self {
        url: "MSGW_STORE_URL",
        direct_url: "MSGW_STORE_DIRECT_URL",
        transaction_fix: "set MSGW_STORE_POOLING=transaction and MSGW_STORE_DIRECT_URL to PostgreSQL itself, or put the pooler in session mode",
    };
    /// `msgw copy-store`'s.
    pub const COPY: Self = Self {
        url: "--to (MSGW_STORE_URL)",
        direct_url: "--to-direct (MSGW_STORE_DIRECT_URL)",
        transaction_fix: "give --to-direct (MSGW_STORE_DIRECT_URL), PostgreSQL itself past the pooler: the copy is written there",
    };
}

/// The store msgw opens.
#[derive(Debug, Clone)]
pub struct StoreTarget {
    /// `sqlite://PATH`, `sqlite::memory:` or `postgres://...` (the pooler's address
    /// when there is one).
    pub url: String,
    /// PostgreSQL's password, replacing one in the URLs.
    pub password: Option<SecretString>,
    /// How the connections `url` leads to keep their server sessions.
    pub pooling: Pooling,
    /// PostgreSQL itself, past the pooler: for migrations (under a session's lock) and
    /// LISTEN, which need a session of their own. Needed with [`Pooling::Transaction`].
    pub direct_url: Option<String>,
    /// What the options are called in messages.
    pub names: OptionNames,
}

impl StoreTarget {
    /// The store `url` names, reached directly (or through a pooler in session mode).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            password: None,
            pooling: Pooling::Session,
            direct_url: None,
            names: OptionNames::SERVE,
        }
    }
}

/// A store URL for logs and messages: any password in it replaced.
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}
