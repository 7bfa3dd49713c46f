//! The SQL of verifications, which both databases speak, and the functions each store
//! runs it with (generated per connection type: only the types differ).

/// New verifications of a number in the window (`$1` phone, `$2` since): how many,
/// and when the oldest started.
pub(super) const COUNT_SQL: &str = "SELECT COUNT(*), MIN(created_at_ms) FROM verifications
     WHERE phone = $1 AND created_at_ms > $2";

/// Claims a send id for a verification (`$1` send, `$2` verification).
pub(super) const CLAIM_SEND_SQL: &str =
    "INSERT INTO verification_sends (client_id, verification_id)
     VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING client_id";

/// Starts a verification, unless its id or a pending one of the caller and number exists.
pub(super) const INSERT_SQL: &str = "INSERT INTO verifications
     (id, caller, phone, status, channels, last_send_id, code_mac, sealed_code, seal_nonce,
      checks_left, sends_left, created_at_ms, expires_at_ms, last_send_at_ms, updated_at_ms)
     VALUES ($1, $2, $3, 'pending', $4, $1, $5, $6, $7, $8, $9, $10, $11, $10, $10)
     ON CONFLICT DO NOTHING RETURNING *";

/// The pending, unexpired verification of a caller and number (`$1`, `$2`, `$3` now).
pub(super) const PENDING_SQL: &str = "SELECT * FROM verifications
     WHERE caller = $1 AND phone = $2 AND status = 'pending' AND expires_at_ms > $3";

/// Marks expired the pending verifications of a caller and number past their time
/// (`$1`, `$2`, `$3` now).
pub(super) const EXPIRE_SQL: &str =
    "UPDATE verifications SET status = 'expired', updated_at_ms = $3
     WHERE caller = $1 AND phone = $2 AND status = 'pending' AND expires_at_ms <= $3
     RETURNING *";

/// The verification of a send (`$1`) and whether the gateway accepted the send.
pub(super) const OF_SEND_SQL: &str =
    "SELECT verification_id, sent FROM verification_sends WHERE client_id = $1";

/// A verification by id.
pub(super) const BY_ID_SQL: &str = "SELECT * FROM verifications WHERE id = $1";

/// A resend: `$1` id, `$2` send, `$3` channels, `$4` forget the code, `$5` now,
/// `$6` latest send at or before.
pub(super) const RESEND_SQL: &str = "UPDATE verifications
     SET sends_left = sends_left - 1, last_send_id = $2, channels = $3, last_send_at_ms = $5,
         updated_at_ms = $5,
         code_mac = CASE WHEN $4 THEN NULL ELSE code_mac END,
         sealed_code = CASE WHEN $4 THEN NULL ELSE sealed_code END,
         seal_nonce = CASE WHEN $4 THEN NULL ELSE seal_nonce END
     WHERE id = $1 AND status = 'pending' AND expires_at_ms > $5 AND sends_left > 0
       AND last_send_at_ms <= $6
     RETURNING *";

/// Keeps a voice call's code: `$1` id, `$2` send, `$3` mac, `$4` sealed, `$5` nonce.
pub(super) const SET_CODE_SQL: &str = "UPDATE verifications
     SET code_mac = $3, sealed_code = $4, seal_nonce = $5
     WHERE id = $1 AND last_send_id = $2 AND status = 'pending'
     RETURNING *";

/// Marks a send accepted (`$1`).
pub(super) const SENT_SQL: &str = "UPDATE verification_sends SET sent = TRUE WHERE client_id = $1";

/// Approves: `$1` id, `$2` mac, `$3` now.
pub(super) const APPROVE_SQL: &str =
    "UPDATE verifications SET status = 'approved', updated_at_ms = $3
     WHERE id = $1 AND status = 'pending' AND expires_at_ms > $3 AND code_mac = $2
     RETURNING *";

/// One check less for a wrong code (`$1` id, `$2` now); the last one fails it. Both
/// expressions read the row as it was before the update.
pub(super) const WRONG_CODE_SQL: &str = "UPDATE verifications
     SET checks_left = checks_left - 1,
         status = CASE WHEN checks_left <= 1 THEN 'failed' ELSE status END,
         updated_at_ms = $2
     WHERE id = $1 AND status = 'pending' AND expires_at_ms > $2 AND checks_left > 0
     RETURNING *";

/// Cancels (`$1` id, `$2` now).
pub(super) const CANCEL_SQL: &str =
    "UPDATE verifications SET status = 'canceled', updated_at_ms = $2
     WHERE id = $1 AND status = 'pending'
     RETURNING *";

/// Forgets a verification (`$1`) and its sends.
pub(super) const FORGET_SQL: [&str; 2] = [
    "DELETE FROM verification_sends WHERE verification_id = $1",
    "DELETE FROM verifications WHERE id = $1",
];

/// Generates a store's verification functions over its connection type: both
/// databases speak the SQL above, only their connection types differ.
macro_rules! verification_queries {
    ($conn:ty, guard: $guard:ident) => {
        use chrono::{DateTime, Utc};

        use crate::domain::{CallerName, ClientId, Phone};
        use crate::store::StoreError;
        use crate::store::guard::{GuardCheck, GuardFinding};
        use crate::store::guard_sql::$guard as guard_sql;
        use crate::store::verification_sql::{
            APPROVE_SQL, BY_ID_SQL, CANCEL_SQL, CLAIM_SEND_SQL, COUNT_SQL, EXPIRE_SQL, FORGET_SQL,
            INSERT_SQL, OF_SEND_SQL, PENDING_SQL, RESEND_SQL, SENT_SQL, SET_CODE_SQL,
            WRONG_CODE_SQL,
        };
        use crate::store::verifications::{
            Created, NewVerification, PhoneLimit, VerificationChange, VerificationRecord,
            VerificationRow, at, caller_to_db, channels_to_db, client_id_to_db, phone_to_db,
        };

        fn records(rows: Vec<VerificationRow>) -> Result<Vec<VerificationRecord>, StoreError> {
            rows.into_iter().map(VerificationRecord::try_from).collect()
        }

        fn record(row: Option<VerificationRow>) -> Result<Option<VerificationRecord>, StoreError> {
            row.map(VerificationRecord::try_from).transpose()
        }

        /// Starts a verification inside the caller's transaction (rolled back unless
        /// `Started`, or kept for a hold the guard placed), checked by the fraud guard
        /// when `guard` is given; with what the guard found.
        pub(in crate::store) async fn create(
            conn: &mut $conn,
            new: &NewVerification,
            limit: PhoneLimit,
            guard: Option<&GuardCheck>,
        ) -> Result<(Created, Vec<GuardFinding>), StoreError> {
            let (count, oldest): (i64, Option<i64>) = sqlx::query_as(COUNT_SQL)
                .bind(phone_to_db(new.phone))
                .bind(at(limit.since))
                .fetch_one(&mut *conn)
                .await?;
            if count >= i64::from(limit.max) {
                let oldest = oldest.map_or(Ok(new.at), crate::store::rows::from_ms)?;
                return Ok((Created::PhoneLimited { oldest }, Vec::new()));
            }
            let findings = match guard {
                Some(guard) => guard_sql::check(&mut *conn, guard, new.at).await?,
                None => Vec::new(),
            };
            if guard.is_some_and(|g| g.enforce) && !findings.is_empty() {
                return Ok((Created::Refused, findings));
            }
            let created = started(&mut *conn, new).await?;
            if let (Created::Started(_), Some(guard)) = (&created, guard) {
                guard_sql::record(&mut *conn, new.id, guard, new.at).await?;
            }
            Ok((created, findings))
        }

        /// Claims the first send's id and inserts the verification.
        async fn started(conn: &mut $conn, new: &NewVerification) -> Result<Created, StoreError> {
            let claimed: Option<(i64,)> = sqlx::query_as(CLAIM_SEND_SQL)
                .bind(client_id_to_db(new.id))
                .bind(client_id_to_db(new.id))
                .fetch_optional(&mut *conn)
                .await?;
            if claimed.is_none() {
                return Ok(Created::IdTaken);
            }
            let code = new.code.as_ref();
            let inserted: Option<VerificationRow> = sqlx::query_as(INSERT_SQL)
                .bind(client_id_to_db(new.id))
                .bind(caller_to_db(new.caller.as_ref()))
                .bind(phone_to_db(new.phone))
                .bind(channels_to_db(&new.channels))
                .bind(code.map(|c| c.mac.clone()))
                .bind(code.map(|c| c.sealed.clone()))
                .bind(code.map(|c| c.nonce.clone()))
                .bind(i64::from(new.checks))
                .bind(i64::from(new.sends_left))
                .bind(at(new.at))
                .bind(at(new.expires_at))
                .fetch_optional(&mut *conn)
                .await?;
            if let Some(row) = inserted {
                return Ok(Created::Started(row.try_into()?));
            }
            match pending(&mut *conn, new.caller.as_ref(), new.phone, new.at).await? {
                Some(existing) => Ok(Created::Pending(existing)),
                None => Ok(Created::IdTaken),
            }
        }

        /// The caller's pending, unexpired verification of the number.
        pub(in crate::store) async fn pending(
            conn: &mut $conn,
            caller: Option<&CallerName>,
            phone: Phone,
            now: DateTime<Utc>,
        ) -> Result<Option<VerificationRecord>, StoreError> {
            record(
                sqlx::query_as(PENDING_SQL)
                    .bind(caller_to_db(caller))
                    .bind(phone_to_db(phone))
                    .bind(at(now))
                    .fetch_optional(&mut *conn)
                    .await?,
            )
        }

        /// Marks the caller's pending verifications of the number that are past their
        /// time expired, and returns them.
        pub(in crate::store) async fn expire(
            conn: &mut $conn,
            caller: Option<&CallerName>,
            phone: Phone,
            now: DateTime<Utc>,
        ) -> Result<Vec<VerificationRecord>, StoreError> {
            records(
                sqlx::query_as(EXPIRE_SQL)
                    .bind(caller_to_db(caller))
                    .bind(phone_to_db(phone))
                    .bind(at(now))
                    .fetch_all(&mut *conn)
                    .await?,
            )
        }

        /// The verification of a send, and whether the gateway accepted the send.
        pub(in crate::store) async fn of_send(
            conn: &mut $conn,
            send: ClientId,
        ) -> Result<Option<(VerificationRecord, bool)>, StoreError> {
            let found: Option<(i64, bool)> = sqlx::query_as(OF_SEND_SQL)
                .bind(client_id_to_db(send))
                .fetch_optional(&mut *conn)
                .await?;
            let Some((id, sent)) = found else {
                return Ok(None);
            };
            let row: Option<VerificationRow> = sqlx::query_as(BY_ID_SQL)
                .bind(id)
                .fetch_optional(&mut *conn)
                .await?;
            Ok(record(row)?.map(|r| (r, sent)))
        }

        /// Applies one change inside the caller's transaction: the verification after
        /// it, `None` when it did not hold (or changes no verification row).
        pub(in crate::store) async fn change(
            conn: &mut $conn,
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
                    let claimed: Option<(i64,)> = sqlx::query_as(CLAIM_SEND_SQL)
                        .bind(client_id_to_db(*send))
                        .bind(client_id_to_db(*id))
                        .fetch_optional(&mut *conn)
                        .await?;
                    if claimed.is_none() {
                        return Ok(None);
                    }
                    let resent: Option<VerificationRow> = sqlx::query_as(RESEND_SQL)
                        .bind(client_id_to_db(*id))
                        .bind(client_id_to_db(*send))
                        .bind(channels_to_db(channels))
                        .bind(*forget_code)
                        .bind(at(*now))
                        .bind(at(*not_after))
                        .fetch_optional(&mut *conn)
                        .await?;
                    if resent.is_some() {
                        guard_sql::resent(&mut *conn, *id).await?;
                    }
                    resent
                }
                VerificationChange::SetCode { id, send, code } => {
                    sqlx::query_as(SET_CODE_SQL)
                        .bind(client_id_to_db(*id))
                        .bind(client_id_to_db(*send))
                        .bind(code.mac.clone())
                        .bind(code.sealed.clone())
                        .bind(code.nonce.clone())
                        .fetch_optional(&mut *conn)
                        .await?
                }
                VerificationChange::Sent { send } => {
                    sqlx::query(SENT_SQL)
                        .bind(client_id_to_db(*send))
                        .execute(&mut *conn)
                        .await?;
                    None
                }
                VerificationChange::Approve { id, mac, at: now } => {
                    let approved: Option<VerificationRow> = sqlx::query_as(APPROVE_SQL)
                        .bind(client_id_to_db(*id))
                        .bind(mac.clone())
                        .bind(at(*now))
                        .fetch_optional(&mut *conn)
                        .await?;
                    if approved.is_some() {
                        guard_sql::approved(&mut *conn, *id).await?;
                    }
                    approved
                }
                VerificationChange::WrongCode { id, at: now } => {
                    sqlx::query_as(WRONG_CODE_SQL)
                        .bind(client_id_to_db(*id))
                        .bind(at(*now))
                        .fetch_optional(&mut *conn)
                        .await?
                }
                VerificationChange::Cancel { id, at: now } => {
                    sqlx::query_as(CANCEL_SQL)
                        .bind(client_id_to_db(*id))
                        .bind(at(*now))
                        .fetch_optional(&mut *conn)
                        .await?
                }
                VerificationChange::Forget { id } => {
                    guard_sql::forget(&mut *conn, *id).await?;
                    for sql in FORGET_SQL {
                        sqlx::query(sql)
                            .bind(client_id_to_db(*id))
                            .execute(&mut *conn)
                            .await?;
                    }
                    None
                }
            };
            record(row)
        }
    };
}

pub(super) use verification_queries;

/// The verification functions of the SQLite store.
pub(super) mod sqlite {
    super::verification_queries!(sqlx::SqliteConnection, guard: sqlite);
}

/// The verification functions of the PostgreSQL store.
pub(super) mod postgres {
    super::verification_queries!(sqlx::PgConnection, guard: postgres);
}
