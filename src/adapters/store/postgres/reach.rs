//! The PostgreSQL store's first contact: one connection at start, so a database msgw
//! cannot use fails the start at once, in one line that names the server, the cause
//! and the fix.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use crate::adapters::store::StoreError;

/// How long msgw waits for the database's first answer at start.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects once, so that a database msgw cannot use fails the start at once with its
/// real cause, the server named and the fix (a pool would retry until its timeout and
/// then say only that it timed out).
pub(super) async fn reach(options: &PgConnectOptions) -> Result<(), StoreError> {
    use sqlx::Connection;
    let server = format!(
        "PostgreSQL at {}:{}",
        options.get_host(),
        options.get_port()
    );
    let user = options.get_username();
    let connected =
        tokio::time::timeout(CONNECT_TIMEOUT, sqlx::PgConnection::connect_with(options)).await;
    let error = match connected {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            return Ok(());
        }
        Ok(Err(error)) => error,
        Err(_) => {
            return Err(StoreError::Config(format!(
                "cannot connect to {server}: no answer within {CONNECT_TIMEOUT:?} (is the host reachable from here?)"
            )));
        }
    };
    let fix = match error.as_database_error().and_then(|e| e.code()).as_deref() {
        Some("28P01") => "check the password (in MSGW_STORE_URL or MSGW_STORE_PASSWORD_FILE)",
        Some("28000") => "check the user in MSGW_STORE_URL and pg_hba.conf",
        Some("3D000") => "create the database, or fix its name in MSGW_STORE_URL",
        _ if matches!(error, sqlx::Error::Io(_)) => {
            "is PostgreSQL running there, and MSGW_STORE_URL's host and port right?"
        }
        _ if matches!(error, sqlx::Error::Tls(_)) => {
            "check sslmode and sslrootcert in MSGW_STORE_URL"
        }
        _ => "check MSGW_STORE_URL",
    };
    Err(StoreError::Config(format!(
        "cannot connect to {server} as {user}: {}: {fix}",
        crate::adapters::store::cause(&error)
    )))
}
