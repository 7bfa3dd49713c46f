//! Verifications in SQL both databases speak: starting one under its number's limit
//! (and the fraud guard's check), finding the pending one, expiring, and the
//! conditional changes whose condition is the state they expect.

use chrono::{DateTime, Utc};

use super::conn::{Conn, Lock, Sql};
use super::guard;
use crate::domain::{CallerName, ClientId, Phone};
use crate::store::StoreError;
use crate::store::guard::{GuardCheck, GuardFinding};
use crate::store::verifications::{
    Created, NewVerification, PhoneLimit, VerificationChange, VerificationRecord, VerificationRow,
    at, caller_to_db, channels_to_db, client_id_to_db, phone_to_db,
};

/// New verifications of a number in the window (`$1` phone, `$2` since): how many,
/// and when the oldest started.
const COUNT_SQL: &str = "SELECT COUNT(*), MIN(created_at_ms) FROM verifications
     WHERE phone = $1 AND created_at_ms > $2";

/// Claims a send id for a verification (`$1` send, `$2` verification).
const CLAIM_SEND_SQL: &str = "INSERT INTO verification_sends (client_id, verification_id)
     VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING client_id";

/// Starts a verification, unless its id or a pending one of the caller and number exists.
const INSERT_SQL: &str = "INSERT INTO verifications
     (id, caller, phone, status, channels, last_send_id, code_mac, sealed_code, seal_nonce,
      checks_left, sends_left, created_at_ms, expires_at_ms, last_send_at_ms, updated_at_ms)
     VALUES ($1, $2, $3, 'pending', $4, $1, $5, $6, $7, $8, $9, $10, $11, $10, $10)
     ON CONFLICT DO NOTHING RETURNING *";

/// The pending, unexpired verification of a caller and number (`$1`, `$2`, `$3` now).
const PENDING_SQL: &str = "SELECT * FROM verifications
     WHERE caller = $1 AND phone = $2 AND status = 'pending' AND expires_at_ms > $3";

/// Marks expired the pending verifications of a caller and number past their time
/// (`$1`, `$2`, `$3` now).
const EXPIRE_SQL: &str = "UPDATE verifications SET status = 'expired', updated_at_ms = $3
     WHERE caller = $1 AND phone = $2 AND status = 'pending' AND expires_at_ms <= $3
     RETURNING *";

/// The verification of a send (`$1`) and whether the gateway accepted the send.
const OF_SEND_SQL: &str =
    "SELECT verification_id, sent FROM verification_sends WHERE client_id = $1";

/// A verification by id.
const BY_ID_SQL: &str = "SELECT * FROM verifications WHERE id = $1";

/// A resend: `$1` id, `$2` send, `$3` channels, `$4` forget the code, `$5` now,
/// `$6` latest send at or before.
const RESEND_SQL: &str = "UPDATE verifications
     SET sends_left = sends_left - 1, last_send_id = $2, channels = $3, last_send_at_ms = $5,
         updated_at_ms = $5,
         code_mac = CASE WHEN $4 THEN NULL ELSE code_mac END,
         sealed_code = CASE WHEN $4 THEN NULL ELSE sealed_code END,
         seal_nonce = CASE WHEN $4 THEN NULL ELSE seal_nonce END
     WHERE id = $1 AND status = 'pending' AND expires_at_ms > $5 AND sends_left > 0
       AND last_send_at_ms <= $6
     RETURNING *";

/// Keeps a voice call's code: `$1` id, `$2` send, `$3` mac, `$4` sealed, `$5` nonce.
const SET_CODE_SQL: &str = "UPDATE verifications
     SET code_mac = $3, sealed_code = $4, seal_nonce = $5
     WHERE id = $1 AND last_send_id = $2 AND status = 'pending'
     RETURNING *";

/// Marks a send accepted (`$1`).
const SENT_SQL: &str = "UPDATE verification_sends SET sent = TRUE WHERE client_id = $1";

/// Approves: `$1` id, `$2` mac, `$3` now.
const APPROVE_SQL: &str = "UPDATE verifications SET status = 'approved', updated_at_ms = $3
     WHERE id = $1 AND status = 'pending' AND expires_at_ms > $3 AND code_mac = $2
     RETURNING *";

/// One check less for a wrong code (`$1` id, `$2` now); the last one fails it. Both
/// expressions read the row as it was before the update.
const WRONG_CODE_SQL: &str = "UPDATE verifications
     SET checks_left = checks_left - 1,
         status = CASE WHEN checks_left <= 1 THEN 'failed' ELSE status END,
         updated_at_ms = $2
     WHERE id = $1 AND status = 'pending' AND expires_at_ms > $2 AND checks_left > 0
     RETURNING *";

/// Cancels (`$1` id, `$2` now).
const CANCEL_SQL: &str = "UPDATE verifications SET status = 'canceled', updated_at_ms = $2
     WHERE id = $1 AND status = 'pending'
     RETURNING *";

/// Forgets a verification (`$1`) and its sends.
const FORGET_SQL: [&str; 2] = [
    "DELETE FROM verification_sends WHERE verification_id = $1",
    "DELETE FROM verifications WHERE id = $1",
];

fn records(rows: Vec<VerificationRow>) -> Result<Vec<VerificationRecord>, StoreError> {
    rows.into_iter().map(VerificationRecord::try_from).collect()
}

fn record(row: Option<VerificationRow>) -> Result<Option<VerificationRecord>, StoreError> {
    row.map(VerificationRecord::try_from).transpose()
}

/// Starts a verification inside the caller's transaction (to be rolled back unless
/// `Started`, or kept for a hold the guard placed), checked by the fraud guard when
/// `guard` is given; with what the guard found. Starts of one number take turns.
pub(in crate::store) async fn create(
    conn: &mut Conn<'_>,
    new: &NewVerification,
    limit: PhoneLimit,
    guard: Option<&GuardCheck>,
) -> Result<(Created, Vec<GuardFinding>), StoreError> {
    conn.lock(Lock::Start, phone_to_db(new.phone)).await?;
    let sql = Sql::new(COUNT_SQL)
        .bind(phone_to_db(new.phone))
        .bind(at(limit.since));
    let (count, oldest): (i64, Option<i64>) = conn.fetch_one(sql).await?;
    if count >= i64::from(limit.max) {
        let oldest = oldest.map_or(Ok(new.at), crate::store::rows::from_ms)?;
        return Ok((Created::PhoneLimited { oldest }, Vec::new()));
    }
    let findings = match guard {
        Some(guard) => guard::check(conn, guard, new.at).await?,
        None => Vec::new(),
    };
    if guard.is_some_and(|g| g.enforce) && !findings.is_empty() {
        return Ok((Created::Refused, findings));
    }
    let created = started(conn, new).await?;
    if let (Created::Started(_), Some(guard)) = (&created, guard) {
        guard::record(conn, new.id, guard, new.at).await?;
    }
    Ok((created, findings))
}

/// Claims the first send's id and inserts the verification.
async fn started(conn: &mut Conn<'_>, new: &NewVerification) -> Result<Created, StoreError> {
    let sql = Sql::new(CLAIM_SEND_SQL)
        .bind(client_id_to_db(new.id))
        .bind(client_id_to_db(new.id));
    let claimed: Option<(i64,)> = conn.fetch_optional(sql).await?;
    if claimed.is_none() {
        return Ok(Created::IdTaken);
    }
    let code = new.code.as_ref();
    let sql = Sql::new(INSERT_SQL)
        .bind(client_id_to_db(new.id))
        .bind(caller_to_db(new.caller.as_ref()))
        .bind(phone_to_db(new.phone))
        .bind(channels_to_db(&new.channels))
        .bind(code.map(|c| c.mac.as_slice()))
        .bind(code.map(|c| c.sealed.as_slice()))
        .bind(code.map(|c| c.nonce.as_slice()))
        .bind(i64::from(new.checks))
        .bind(i64::from(new.sends_left))
        .bind(at(new.at))
        .bind(at(new.expires_at));
    let inserted: Option<VerificationRow> = conn.fetch_optional(sql).await?;
    if let Some(row) = inserted {
        return Ok(Created::Started(row.try_into()?));
    }
    match pending(conn, new.caller.as_ref(), new.phone, new.at).await? {
        Some(existing) => Ok(Created::Pending(existing)),
        None => Ok(Created::IdTaken),
    }
}

/// The caller's pending, unexpired verification of the number.
pub(in crate::store) async fn pending(
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
pub(in crate::store) async fn expire(
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

/// The verification of a send, and whether the gateway accepted the send.
pub(in crate::store) async fn of_send(
    conn: &mut Conn<'_>,
    send: ClientId,
) -> Result<Option<(VerificationRecord, bool)>, StoreError> {
    let sql = Sql::new(OF_SEND_SQL).bind(client_id_to_db(send));
    let found: Option<(i64, bool)> = conn.fetch_optional(sql).await?;
    let Some((id, sent)) = found else {
        return Ok(None);
    };
    let row: Option<VerificationRow> = conn.fetch_optional(Sql::new(BY_ID_SQL).bind(id)).await?;
    Ok(record(row)?.map(|r| (r, sent)))
}

/// Applies one change inside the caller's transaction: the verification after it,
/// `None` when it did not hold (or changes no verification row).
pub(in crate::store) async fn change(
    conn: &mut Conn<'_>,
    change: &VerificationChange,
) -> Result<Option<VerificationRecord>, StoreError> {
    let row: Option<VerificationRow> = match change {
        VerificationChange::Resend {
            id,
            send,
            channels,
            forget_code,
            at: now,
            not_after,
        } => {
            let sql = Sql::new(CLAIM_SEND_SQL)
                .bind(client_id_to_db(*send))
                .bind(client_id_to_db(*id));
            let claimed: Option<(i64,)> = conn.fetch_optional(sql).await?;
            if claimed.is_none() {
                return Ok(None);
            }
            let sql = Sql::new(RESEND_SQL)
                .bind(client_id_to_db(*id))
                .bind(client_id_to_db(*send))
                .bind(channels_to_db(channels))
                .bind(*forget_code)
                .bind(at(*now))
                .bind(at(*not_after));
            let resent: Option<VerificationRow> = conn.fetch_optional(sql).await?;
            if resent.is_some() {
                guard::resent(conn, *id).await?;
            }
            resent
        }
        VerificationChange::SetCode { id, send, code } => {
            let sql = Sql::new(SET_CODE_SQL)
                .bind(client_id_to_db(*id))
                .bind(client_id_to_db(*send))
                .bind(code.mac.as_slice())
                .bind(code.sealed.as_slice())
                .bind(code.nonce.as_slice());
            conn.fetch_optional(sql).await?
        }
        VerificationChange::Sent { send } => {
            conn.execute(Sql::new(SENT_SQL).bind(client_id_to_db(*send)))
                .await?;
            None
        }
        VerificationChange::Approve { id, mac, at: now } => {
            let sql = Sql::new(APPROVE_SQL)
                .bind(client_id_to_db(*id))
                .bind(mac.as_slice())
                .bind(at(*now));
            let approved: Option<VerificationRow> = conn.fetch_optional(sql).await?;
            if approved.is_some() {
                guard::approved(conn, *id).await?;
            }
            approved
        }
        VerificationChange::WrongCode { id, at: now } => {
            let sql = Sql::new(WRONG_CODE_SQL)
                .bind(client_id_to_db(*id))
                .bind(at(*now));
            conn.fetch_optional(sql).await?
        }
        VerificationChange::Cancel { id, at: now } => {
            let sql = Sql::new(CANCEL_SQL)
                .bind(client_id_to_db(*id))
                .bind(at(*now));
            conn.fetch_optional(sql).await?
        }
        VerificationChange::Forget { id } => {
            guard::forget(conn, *id).await?;
            for sql in FORGET_SQL {
                conn.execute(Sql::new(sql).bind(client_id_to_db(*id)))
                    .await?;
            }
            None
        }
    };
    record(row)
}
