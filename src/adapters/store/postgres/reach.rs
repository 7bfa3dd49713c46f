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
/// `what` names the URL's option in the message.
pub(super) async fn reach(options: &PgConnectOptions, what: &str) -> Result<(), StoreError> {
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
        Some("28P01") => format!("check the password (in {what} or MSGW_STORE_PASSWORD_FILE)"),
        Some("28000") => format!("check the user in {what} and pg_hba.conf"),
        Some("3D000") => format!("create the database, or fix its name in {what}"),
        _ if matches!(error, sqlx::Error::Io(_)) => {
            format!("is PostgreSQL running there, and {what}'s host and port right?")
        }
        _ if matches!(error, sqlx::Error::Tls(_)) => {
            format!("check sslmode and sslrootcert in {what}")
        }
        _ => format!("check {what}"),
    };
    Err(StoreError::Config(format!(
        "cannot connect to {server} as {user}: {}: {fix}",
        crate::adapters::store::cause(&error)
    )))
}
