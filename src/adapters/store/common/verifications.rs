//! Verifications in SQL both databases speak. A start (or resend), a check, a cancel
//! and a look at the pending one each run in one transaction of their own that first
//! takes the number's lock ([`Lock::Start`]): calls about one number take turns across
//! replicas, so what one reads is still so when it writes. The changes made after a
//! send (its code, its acceptance, forgetting a refused start) are single conditional
//! statements whose condition is the state they expect.

use chrono::{DateTime, Utc};

use super::conn::{Conn, Lock, Sql};
use super::guard;
use super::pending::expire_and_pending;
use crate::adapters::store::verifications::{
    VerificationRow, at, caller_to_db, channels_to_db, client_id_to_db, phone_to_db, record,
};
use crate::core::domain::{CallerName, ClientId, Phone};
use crate::core::ports::store::{
    CodeCheck, Decided, GuardCheck, GuardFinding, NewVerification, Start, StartOutcome, StoreError,
    VerificationRecord,
};

/// Cancels (`$1` id, `$2` now): a caller's cancel, and a change after a send.
pub(super) const CANCEL_SQL: &str =
    "UPDATE verifications SET status = 'canceled', updated_at_ms = $2
     WHERE id = $1 AND status = 'pending'
     RETURNING *";

/// New verifications of a number in the window (`$1` phone, `$2` since): how many,
/// and when the oldest started.
const COUNT_SQL: &str = "SELECT COUNT(*), MIN(created_at_ms) FROM verifications
     WHERE phone = $1 AND created_at_ms > $2";

/// Claims a send id for a verification (`$1` send, `$2` verification, `$3` the
/// request's fingerprint).
const CLAIM_SEND_SQL: &str =
    "INSERT INTO verification_sends (client_id, verification_id, request_mac)
     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING client_id";

/// Gives back a send id claimed in this transaction (`$1`).
const UNCLAIM_SEND_SQL: &str = "DELETE FROM verification_sends WHERE client_id = $1";

/// Starts a verification, unless its id or a pending one of the caller and number exists.
const INSERT_SQL: &str = "INSERT INTO verifications
     (id, caller, phone, status, channels, last_send_id, code_mac, sealed_code, seal_nonce,
      checks_left, sends_left, created_at_ms, expires_at_ms, last_send_at_ms, updated_at_ms)
     VALUES ($1, $2, $3, 'pending', $4, $1, $5, $6, $7, $8, $9, $10, $11, $10, $10)
     ON CONFLICT DO NOTHING RETURNING *";

/// The verification of a send (`$1`), whether the gateway accepted the send, and the
/// fingerprint of the request that claimed it.
const OF_SEND_SQL: &str =
    "SELECT verification_id, sent, request_mac FROM verification_sends WHERE client_id = $1";

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

/// Starts a verification, or sends the caller's pending one again, in the caller's
/// transaction (to be committed unless [`StartOutcome::IdTaken`]): a retry of a send
/// replays it (another request with its id is `IdTaken`; a retry of a send that never
/// went out is a code again, checked and counted by the guard); a pending one is resent unless its voice call has not told the code,
/// the guard holds its range, its sends are used up or the latest was too recent;
/// else a new one starts unless the number had its limit or the guard refuses it.
pub(in crate::adapters::store) async fn start(
    conn: &mut Conn<'_>,
    start: &Start,
) -> Result<Decided<StartOutcome>, StoreError> {
    let new = &start.new;
    conn.lock(Lock::Start, phone_to_db(new.phone)).await?;
    if let Some(send) = of_send(conn, new.id).await? {
        return retried(conn, start, send).await;
    }
    let (expired, pending) =
        expire_and_pending(conn, new.caller.as_ref(), new.phone, new.at).await?;
    let (outcome, findings) = match pending {
        Some(pending) => resend(conn, start, pending).await?,
        None => started(conn, start).await?,
    };
    Ok(Decided {
        outcome,
        findings,
        expired,
    })
}

/// A call whose id is a send already: another request's (`IdTaken`), a replay of a send
/// the gateway accepted, or a retry of one that never went out (or whose outcome is
/// unknown), which may send its code again: the guard checks it as a code (its range,
/// its calling code, its keys and those its verification started with, its budget) and
/// counts it once.
async fn retried(
    conn: &mut Conn<'_>,
    start: &Start,
    send: OfSend,
) -> Result<Decided<StartOutcome>, StoreError> {
    let new = &start.new;
    let OfSend {
        record,
        sent,
        request_mac,
    } = send;
    // A send claimed before fingerprints were kept is tied by its number and caller.
    let same = record.phone == new.phone
        && record.caller == new.caller
        && request_mac.is_none_or(|mac| mac == start.request_mac);
    if !same {
        return Ok(Decided::only(StartOutcome::IdTaken));
    }
    let guard = match &start.guard {
        Some(guard) if !sent => Some(guard::with_first_keys(conn, guard, record.id).await?),
        _ => None,
    };
    let Some(guard) = guard else {
        return Ok(Decided::only(StartOutcome::Replay { record, sent }));
    };
    let checked = guard::check(conn, &guard, new.at).await?;
    let mut findings = checked.findings;
    if refused(Some(&guard), &findings) {
        return Ok(Decided {
            outcome: StartOutcome::Refused,
            findings,
            expired: Vec::new(),
        });
    }
    if guard::record(conn, new.id, record.id, &guard, new.at).await? {
        findings.extend(guard::capped(conn, &guard, &checked.open, new.at).await?);
    }
    Ok(Decided {
        outcome: StartOutcome::Replay { record, sent },
        findings,
        expired: Vec::new(),
    })
}

/// Sends `pending` again with the call's id, if its guard and its sends allow.
async fn resend(
    conn: &mut Conn<'_>,
    start: &Start,
    pending: VerificationRecord,
) -> Result<(StartOutcome, Vec<GuardFinding>), StoreError> {
    let new = &start.new;
    if pending.code.is_none() && new.code.is_some() {
        return Ok((StartOutcome::CodeAwaited(pending), Vec::new()));
    }
    // A resend sends a code as a start does: the guard checks and counts it alike (its
    // range, its calling code, its keys and those its verification started with, its
    // budget), and may hold its range.
    let guard = match &start.guard {
        Some(guard) => Some(guard::with_first_keys(conn, guard, pending.id).await?),
        None => None,
    };
    let checked = match &guard {
        Some(guard) => guard::check(conn, guard, new.at).await?,
        None => guard::Checked::default(),
    };
    let mut findings = checked.findings;
    if refused(guard.as_ref(), &findings) {
        return Ok((StartOutcome::Refused, findings));
    }
    if pending.sends_left == 0 {
        return Ok((StartOutcome::Exhausted, findings));
    }
    if pending.last_send_at > start.not_after {
        let last_send_at = pending.last_send_at;
        return Ok((StartOutcome::TooSoon { last_send_at }, findings));
    }
    if !claim_send(conn, start, pending.id).await? {
        // Claimed meanwhile by a start of another number (another lock guards it):
        // another request's id.
        return Ok((StartOutcome::IdTaken, findings));
    }
    let sql = Sql::new(RESEND_SQL)
        .bind(client_id_to_db(pending.id))
        .bind(client_id_to_db(new.id))
        .bind(channels_to_db(&new.channels))
        .bind(new.code.is_none())
        .bind(at(new.at))
        .bind(at(start.not_after));
    let resent: Option<VerificationRow> = conn.fetch_optional(sql).await?;
    let Some(resent) = record(resent)? else {
        // Gone since it was read (retention, which takes no lock, dropped it as it
        // expired): none is pending, so the call starts one.
        let sql = Sql::new(UNCLAIM_SEND_SQL).bind(client_id_to_db(new.id));
        conn.execute(sql).await?;
        return started(conn, start).await;
    };
    if let Some(guard) = &guard {
        guard::record(conn, new.id, pending.id, guard, new.at).await?;
        findings.extend(guard::capped(conn, guard, &checked.open, new.at).await?);
    }
    Ok((StartOutcome::Resent(resent), findings))
}

/// Starts `start.new` unless the number had its limit or the guard refuses it.
async fn started(
    conn: &mut Conn<'_>,
    start: &Start,
) -> Result<(StartOutcome, Vec<GuardFinding>), StoreError> {
    let new = &start.new;
    let sql = Sql::new(COUNT_SQL)
        .bind(phone_to_db(new.phone))
        .bind(at(start.limit.since));
    let (count, oldest): (i64, Option<i64>) = conn.fetch_one(sql).await?;
    if count >= i64::from(start.limit.max) {
        let oldest = oldest.map_or(Ok(new.at), crate::adapters::store::rows::from_ms)?;
        return Ok((StartOutcome::PhoneLimited { oldest }, Vec::new()));
    }
    let checked = match &start.guard {
        Some(guard) => guard::check(conn, guard, new.at).await?,
        None => guard::Checked::default(),
    };
    let mut findings = checked.findings;
    if refused(start.guard.as_ref(), &findings) {
        return Ok((StartOutcome::Refused, findings));
    }
    if !claim_send(conn, start, new.id).await? {
        // Claimed meanwhile by a start of another number (another lock guards it):
        // another request's id.
        return Ok((StartOutcome::IdTaken, findings));
    }
    let record = insert(conn, new).await?;
    if let Some(guard) = &start.guard {
        guard::record(conn, new.id, new.id, guard, new.at).await?;
        findings.extend(guard::capped(conn, guard, &checked.open, new.at).await?);
    }
    Ok((StartOutcome::Started(record), findings))
}

/// Whether an enforcing guard's findings refuse the code.
fn refused(guard: Option<&GuardCheck>, findings: &[GuardFinding]) -> bool {
    guard.is_some_and(|g| g.enforce) && findings.iter().any(guard::refuses)
}

/// Claims the call's id as a send of verification `of`, tied to its request; false when
/// it is taken.
async fn claim_send(conn: &mut Conn<'_>, start: &Start, of: ClientId) -> Result<bool, StoreError> {
    let sql = Sql::new(CLAIM_SEND_SQL)
        .bind(client_id_to_db(start.new.id))
        .bind(client_id_to_db(of))
        .bind(start.request_mac.as_slice());
    let claimed: Option<(i64,)> = conn.fetch_optional(sql).await?;
    Ok(claimed.is_some())
}

/// Inserts a new verification whose first send's id is claimed.
async fn insert(
    conn: &mut Conn<'_>,
    new: &NewVerification,
) -> Result<VerificationRecord, StoreError> {
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
    // Its id's send was just claimed and no pending one was found under the number's
    // lock: only a corrupt store conflicts here.
    record(inserted)?.ok_or_else(|| {
        StoreError::Corrupt(format!(
            "verification {} conflicts with a stored one",
            new.id
        ))
    })
}

/// Checks a code against the caller's pending verification of `phone`: approves it
/// when `right` says the code is its, else takes one check (the last one fails it).
/// After an approval, with `lift` (an enforcing guard's check of the number's range),
/// a hold of the range whose figures no longer call for it ends (a `Lifted` finding).
pub(in crate::adapters::store) async fn check(
    conn: &mut Conn<'_>,
    caller: Option<&CallerName>,
    phone: Phone,
    now: DateTime<Utc>,
    right: CodeCheck<'_>,
    lift: Option<&GuardCheck>,
) -> Result<Decided<Option<VerificationRecord>>, StoreError> {
    let Decided {
        outcome: pending,
        expired,
        ..
    } = look(conn, caller, phone, now).await?;
    let Some(pending) = pending else {
        return Ok(Decided {
            outcome: None,
            findings: Vec::new(),
            expired,
        });
    };
    let mac = pending
        .code
        .as_ref()
        .filter(|_| right(&pending))
        .map(|c| c.mac.as_slice());
    let mut findings = Vec::new();
    let checked: Option<VerificationRow> = match mac {
        Some(mac) => {
            let sql = Sql::new(APPROVE_SQL)
                .bind(client_id_to_db(pending.id))
                .bind(mac)
                .bind(at(now));
            let approved: Option<VerificationRow> = conn.fetch_optional(sql).await?;
            if approved.is_some() {
                guard::approved(conn, pending.id, now).await?;
                if let Some(lift) = lift {
                    findings.extend(lifted(conn, lift, now).await?);
                }
            }
            approved
        }
        None => {
            let sql = Sql::new(WRONG_CODE_SQL)
                .bind(client_id_to_db(pending.id))
                .bind(at(now));
            conn.fetch_optional(sql).await?
        }
    };
    Ok(Decided {
        outcome: record(checked)?,
        findings,
        expired,
    })
}

/// After an approval: a hold (not a shadow one) of the range of `lift`, or of its
/// calling code, ends if its figures no longer call for it. Costs one read a prefix
/// when it is not held.
async fn lifted(
    conn: &mut Conn<'_>,
    lift: &GuardCheck,
    now: DateTime<Utc>,
) -> Result<Vec<GuardFinding>, StoreError> {
    let mut found = Vec::new();
    for scope in lift.scopes() {
        if let Some(hold) = guard::hold_of(conn, scope.prefix, now).await?
            && !hold.shadow
        {
            let judged = guard::judge(conn, lift, scope, now, true).await?;
            found.extend(judged.finding);
        }
    }
    Ok(found)
}

/// Cancels the caller's pending verification of `phone`.
pub(in crate::adapters::store) async fn cancel(
    conn: &mut Conn<'_>,
    caller: Option<&CallerName>,
    phone: Phone,
    now: DateTime<Utc>,
) -> Result<Decided<Option<VerificationRecord>>, StoreError> {
    let mut decided = look(conn, caller, phone, now).await?;
    if let Some(pending) = &decided.outcome {
        let sql = Sql::new(CANCEL_SQL)
            .bind(client_id_to_db(pending.id))
            .bind(at(now));
        decided.outcome = record(conn.fetch_optional(sql).await?)?;
    }
    Ok(decided)
}

/// Under the number's lock: marks the caller's verifications of `phone` past their time
/// expired, then finds the pending one.
pub(in crate::adapters::store) async fn look(
    conn: &mut Conn<'_>,
    caller: Option<&CallerName>,
    phone: Phone,
    now: DateTime<Utc>,
) -> Result<Decided<Option<VerificationRecord>>, StoreError> {
    conn.lock(Lock::Start, phone_to_db(phone)).await?;
    let (expired, pending) = expire_and_pending(conn, caller, phone, now).await?;
    Ok(Decided {
        outcome: pending,
        findings: Vec::new(),
        expired,
    })
}

/// A send of a verification, as stored.
pub(in crate::adapters::store) struct OfSend {
    /// Its verification.
    pub(in crate::adapters::store) record: VerificationRecord,
    /// The gateway accepted it.
    pub(in crate::adapters::store) sent: bool,
    /// The fingerprint of the request that claimed it (`None`: claimed before they
    /// were kept).
    request_mac: Option<Vec<u8>>,
}

/// The verification of a send, whether the gateway accepted the send, and its request.
pub(in crate::adapters::store) async fn of_send(
    conn: &mut Conn<'_>,
    send: ClientId,
) -> Result<Option<OfSend>, StoreError> {
    let sql = Sql::new(OF_SEND_SQL).bind(client_id_to_db(send));
    let found: Option<(i64, bool, Option<Vec<u8>>)> = conn.fetch_optional(sql).await?;
    let Some((id, sent, request_mac)) = found else {
        return Ok(None);
    };
    let row: Option<VerificationRow> = conn.fetch_optional(Sql::new(BY_ID_SQL).bind(id)).await?;
    Ok(record(row)?.map(|record| OfSend {
        record,
        sent,
        request_mac,
    }))
}
