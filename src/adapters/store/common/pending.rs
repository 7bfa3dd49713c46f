//! The caller's pending verification of a number, as a start, a resend and a look
//! find it: its overdue ones marked expired first, in the same statement on
//! PostgreSQL.

use chrono::{DateTime, Utc};

use super::conn::{Conn, Sql};
use crate::adapters::store::verifications::{
    VerificationRow, at, caller_to_db, phone_to_db, record, records,
};
use crate::core::domain::{CallerName, Phone};
use crate::core::ports::store::{StoreError, VerificationRecord};

/// The pending, unexpired verification of a caller and number (`$1`, `$2`, `$3` now).
const PENDING_SQL: &str = "SELECT * FROM verifications
     WHERE caller = $1 AND phone = $2 AND status = 'pending' AND expires_at_ms > $3";

/// Marks expired the pending verifications of a caller and number past their time
/// (`$1`, `$2`, `$3` now).
const EXPIRE_SQL: &str = "UPDATE verifications SET status = 'expired', updated_at_ms = $3
     WHERE caller = $1 AND phone = $2 AND status = 'pending' AND expires_at_ms <= $3
     RETURNING *";

/// Marks the caller's pending verifications of the number that are past their time
/// expired (returned first), and finds its pending, unexpired one: one statement on
/// PostgreSQL, two on SQLite (which has no `UPDATE` in a `WITH`).
pub(super) async fn expire_and_pending(
    conn: &mut Conn<'_>,
    caller: Option<&CallerName>,
    phone: Phone,
    now: DateTime<Utc>,
) -> Result<(Vec<VerificationRecord>, Option<VerificationRecord>), StoreError> {
    if !conn.is_postgres() {
        let expired = expire(conn, caller, phone, now).await?;
        return Ok((expired, pending(conn, caller, phone, now).await?));
    }
    // The two sets are apart (past their time or not), and the statement's snapshot
    // is one: the rows read are those the update left alone.
    let sql = Sql::new(
        "WITH expired AS (
           UPDATE verifications SET status = 'expired', updated_at_ms = $3
            WHERE caller = $1 AND phone = $2 AND status = 'pending' AND expires_at_ms <= $3
           RETURNING *)
         SELECT TRUE AS expired, e.* FROM expired e
         UNION ALL
         SELECT FALSE, v.* FROM verifications v
          WHERE v.caller = $1 AND v.phone = $2 AND v.status = 'pending'
            AND v.expires_at_ms > $3",
    )
    .bind(caller_to_db(caller))
    .bind(phone_to_db(phone))
    .bind(at(now));
    let rows: Vec<FoundRow> = conn.fetch_all(sql).await?;
    let (mut expired, mut pending) = (Vec::new(), None);
    for found in rows {
        if found.expired {
            expired.push(VerificationRecord::try_from(found.row)?);
        } else if pending.is_none() {
            pending = Some(VerificationRecord::try_from(found.row)?);
        }
    }
    Ok((expired, pending))
}

/// A row of [`expire_and_pending`]: a verification and whether the statement expired it.
#[derive(sqlx::FromRow)]
struct FoundRow {
    expired: bool,
    #[sqlx(flatten)]
    row: VerificationRow,
}

/// The caller's pending, unexpired verification of the number.
async fn pending(
    conn: &mut Conn<'_>,
    caller: Option<&CallerName>,
    phone: Phone,
    now: DateTime<Utc>,
) -> Result<Option<VerificationRecord>, StoreError> {
    let sql = Sql::new(PENDING_SQL)
        .bind(caller_to_db(caller))
        .bind(phone_to_db(phone))
        .bind(at(now));
    record(conn.fetch_optional(sql).await?)
}

/// Marks the caller's pending verifications of the number that are past their time
/// expired, and returns them.
async fn expire(
    conn: &mut Conn<'_>,
    caller: Option<&CallerName>,
    phone: Phone,
    now: DateTime<Utc>,
) -> Result<Vec<VerificationRecord>, StoreError> {
    let sql = Sql::new(EXPIRE_SQL)
        .bind(caller_to_db(caller))
        .bind(phone_to_db(phone))
        .bind(at(now));
    records(conn.fetch_all(sql).await?)
}
