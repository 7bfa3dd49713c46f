//! Whether the connections a store URL leads to keep their server session, told at
//! start: a pooler in transaction mode that msgw was not told of would fail store
//! calls one by one (a prepared statement "already exists" on another client's
//! session, or is missing), so msgw refuses to start instead, naming the setting.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, Row};

use super::sessions::SessionSettings;
use crate::adapters::store::{OptionNames, Pooling, StoreError};

/// How long the look at the server sessions may take: a pooler in session mode with a
/// pool of one session would keep the second connection waiting (PgBouncer: up to its
/// `query_wait_timeout`, 120 s by default).
const LOOK_WITHIN: Duration = Duration::from_secs(10);

/// What two connections saw of their server sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Two transactions of one connection ran on different server sessions, or two
    /// connections open at once on one: a pooler in transaction (or statement) mode.
    SessionsShared,
    /// One connection kept its server session while another was in a transaction.
    /// Certain for a direct connection and a pooler in session mode; a pooler in
    /// transaction mode that handed the first connection its old session back looks
    /// the same.
    SessionKept,
}

/// The backend's process id, by the simple protocol (no statement to prepare).
async fn backend(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    let row = sqlx::raw_sql("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await?;
    row.try_get(0)
}

/// Opens two connections: the first reads its backend, the second holds a
/// transaction open and reads its own, and the first reads its backend again. A
/// pooler in transaction mode gives the second the first one's session (PgBouncer
/// hands out the session released last), or the first a new one.
async fn look(options: &PgConnectOptions) -> Result<Seen, sqlx::Error> {
    let mut first = PgConnection::connect_with(options).await?;
    let mut second = PgConnection::connect_with(options).await?;
    let before = backend(&mut first).await?;
    let mut held = second.begin().await?;
    let holder = backend(&mut held).await?;
    // Not asked again when the second already has its session: with a pool of one
    // session the first would wait for the second's transaction.
    let seen = if holder == before || backend(&mut first).await? != before {
        Seen::SessionsShared
    } else {
        Seen::SessionKept
    };
    held.rollback().await?;
    let _ = second.close().await;
    let _ = first.close().await;
    Ok(seen)
}

/// What two connections of `options` see of their server sessions, within
/// [`LOOK_WITHIN`].
async fn seen(options: &PgConnectOptions, what: &str) -> Result<Seen, StoreError> {
    let too_small = || {
        StoreError::Config(format!(
            "{what} gave no second server session in time (within {LOOK_WITHIN:?}, or the pooler's query_wait_timeout): a pooler's pool is too small for msgw (in session mode each replica holds up to 18 server sessions; in transaction mode a few serve every replica), or the database is overloaded"
        ))
    };
    match tokio::time::timeout(LOOK_WITHIN, look(options)).await {
        Ok(Ok(seen)) => Ok(seen),
        // PgBouncer's own wait for a server session ran out first.
        Ok(Err(e))
            if e.as_database_error()
                .is_some_and(|e| e.message() == "query_wait_timeout") =>
        {
            Err(too_small())
        }
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(too_small()),
    }
}

/// Checks that `pooling` fits what the connections `options` leads to do, before
/// anything is written through them: a pooler in transaction mode without
/// `MSGW_STORE_POOLING=transaction` fails the start with the fix; `transaction` where
/// connections keep their session works, more slowly, and is said in a warning.
/// `settings` are the URL's `options`, which no transaction pooler can keep.
pub(super) async fn check(
    options: &PgConnectOptions,
    pooling: Pooling,
    settings: &SessionSettings,
    names: &OptionNames,
) -> Result<(), StoreError> {
    let url = names.url;
    if pooling == Pooling::Transaction && !settings.is_empty() {
        return Err(StoreError::Config(format!(
            "{url} asks for session settings ({}), which a pooler in transaction mode (MSGW_STORE_POOLING=transaction) cannot keep: set them on msgw's role instead (ALTER ROLE ... SET search_path = ...), and keep them in {}",
            settings.describe(),
            names.direct_url
        )));
    }
    match (pooling, seen(options, url).await?) {
        (Pooling::Session, Seen::SessionsShared) => Err(StoreError::Config(format!(
            "{url} leads to a connection pooler in transaction mode (two transactions of one connection ran in different server sessions), where msgw's prepared statements and notifications would fail call by call: {}",
            names.transaction_fix
        ))),
        (Pooling::Transaction, Seen::SessionKept) => {
            tracing::warn!(
                "MSGW_STORE_POOLING=transaction, but the connections of {url} seem to keep their server session (a direct connection, or a pooler in session mode): MSGW_STORE_POOLING=session would be faster there"
            );
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Checks that the direct URL's connections keep their server session, as the
/// migrations' lock and LISTEN need.
pub(super) async fn check_direct(
    options: &PgConnectOptions,
    names: &OptionNames,
) -> Result<(), StoreError> {
    let direct = names.direct_url;
    match seen(options, direct).await? {
        Seen::SessionKept => Ok(()),
        Seen::SessionsShared => Err(StoreError::Config(format!(
            "{direct} leads to a connection pooler in transaction mode (two transactions of one connection ran in different server sessions): point it at PostgreSQL itself (or a pooler in session mode), for the migrations' lock and LISTEN, which need a session that lasts"
        ))),
    }
}
