//! The changes of a verification made after its send (its code, its acceptance, a
//! refused send uncounted, a cancel, forgetting a refused start), in SQL both databases
//! speak: single conditional statements whose condition is the state they expect.

use super::conn::{Conn, Lock, Sql};
use super::guard;
use super::verifications::CANCEL_SQL;
use crate::adapters::store::verifications::record;
use crate::adapters::store::verifications::{VerificationRow, at, client_id_to_db};
use crate::core::ports::store::{StoreError, VerificationChange, VerificationRecord};

/// Keeps a voice call's code: `$1` id, `$2` send, `$3` mac, `$4` sealed, `$5` nonce.
const SET_CODE_SQL: &str = "UPDATE verifications
     SET code_mac = $3, sealed_code = $4, seal_nonce = $5
     WHERE id = $1 AND last_send_id = $2 AND status = 'pending'
     RETURNING *";

/// Marks a send accepted (`$1`).
const SENT_SQL: &str = "UPDATE verification_sends SET sent = TRUE WHERE client_id = $1";

/// Forgets a verification (`$1`) and its sends.
const FORGET_SQL: [&str; 2] = [
    "DELETE FROM verification_sends WHERE verification_id = $1",
    "DELETE FROM verifications WHERE id = $1",
];

/// Applies one change inside the caller's transaction: the verification after it,
/// `None` when it did not hold (or changes no verification row).
pub(in crate::adapters::store) async fn change(
    conn: &mut Conn<'_>,
    change: &VerificationChange,
) -> Result<Option<VerificationRecord>, StoreError> {
    let row: Option<VerificationRow> = match change {
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
        VerificationChange::Cancel { id, at: now } => {
            let sql = Sql::new(CANCEL_SQL)
                .bind(client_id_to_db(*id))
                .bind(at(*now));
            conn.fetch_optional(sql).await?
        }
        VerificationChange::Unsent { send } => {
            guard::unsent(conn, *send).await?;
            None
        }
        VerificationChange::Forget { id } => {
            // Under its number's lock: a start deciding on it sees it whole or not at all.
            let sql = Sql::new("SELECT phone FROM verifications WHERE id = $1")
                .bind(client_id_to_db(*id));
            if let Some((phone,)) = conn.fetch_optional::<(i64,)>(sql).await? {
                conn.lock(Lock::Start, phone).await?;
            }
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
