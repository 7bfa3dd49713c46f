//! Scheduled messages' rows as the stores take them.

use super::rows::{caller_from_db, from_ms, id_from_db};
use super::{DueScheduled, StoreError};
use crate::core::domain::ClientId;

/// A row of `scheduled` as taken: client id, send at, payload, caller, tries.
pub(super) type DueRow = (i64, i64, Vec<u8>, Option<String>, i64);

/// Reads a taken row.
pub(super) fn due_from_row(
    (id, send_at, payload, caller, tries): DueRow,
) -> Result<DueScheduled, StoreError> {
    Ok(DueScheduled {
        id: ClientId::new(id_from_db(id))
            .map_err(|_| StoreError::Corrupt("scheduled message with client id 0".into()))?,
        send_at: from_ms(send_at)?,
        payload,
        caller: caller_from_db(caller)?,
        tries: u32::try_from(tries).unwrap_or(u32::MAX),
    })
}
