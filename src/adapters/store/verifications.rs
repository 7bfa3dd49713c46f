//! Verifications' rows as both databases return them, and how their values are
//! stored.

use chrono::{DateTime, Utc};

use super::rows::{from_ms, id_from_db, id_to_db, ms};
use super::{StoreError, StoredCode, VerificationChange, VerificationRecord};
use crate::core::domain::{CallerName, Channel, ClientId, Phone, VerificationStatus};

/// Whether a change writes without returning a verification (its transaction commits
/// even then); every other change commits only when it held.
pub(super) fn writes_without_row(change: &VerificationChange) -> bool {
    matches!(
        change,
        VerificationChange::Sent { .. }
            | VerificationChange::Unsent { .. }
            | VerificationChange::Forget { .. }
    )
}

/// A verification row, as both databases return it.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct VerificationRow {
    id: i64,
    caller: String,
    phone: i64,
    status: String,
    channels: String,
    last_send_id: i64,
    code_mac: Option<Vec<u8>>,
    sealed_code: Option<Vec<u8>>,
    seal_nonce: Option<Vec<u8>>,
    checks_left: i64,
    sends_left: i64,
    created_at_ms: i64,
    expires_at_ms: i64,
    last_send_at_ms: i64,
}

impl TryFrom<VerificationRow> for VerificationRecord {
    type Error = StoreError;

    fn try_from(r: VerificationRow) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("verification {}: {what}", r.id));
        let id = ClientId::new(id_from_db(r.id)).map_err(|_| corrupt("id"))?;
        let last_send = ClientId::new(id_from_db(r.last_send_id)).map_err(|_| corrupt("send"))?;
        let phone = Phone::parse(&r.phone.to_string()).map_err(|_| corrupt("phone"))?;
        let status = VerificationStatus::parse(&r.status).ok_or_else(|| corrupt("status"))?;
        let channels = r
            .channels
            .split(',')
            .map(|name| Channel::from_name(name).ok_or_else(|| corrupt("channel")))
            .collect::<Result<Vec<_>, _>>()?;
        let caller = match r.caller.as_str() {
            "" => None,
            name => Some(CallerName::parse(name).map_err(|_| corrupt("caller"))?),
        };
        let code = match (r.code_mac, r.sealed_code, r.seal_nonce) {
            (Some(mac), Some(sealed), Some(nonce)) => Some(StoredCode { mac, sealed, nonce }),
            (None, None, None) => None,
            _ => return Err(corrupt("code")),
        };
        let count = |v: i64, what| u32::try_from(v).map_err(|_| corrupt(what));
        Ok(Self {
            id,
            caller,
            phone,
            status,
            channels,
            last_send,
            code,
            checks_left: count(r.checks_left, "checks")?,
            sends_left: count(r.sends_left, "sends")?,
            created_at: from_ms(r.created_at_ms)?,
            expires_at: from_ms(r.expires_at_ms)?,
            last_send_at: from_ms(r.last_send_at_ms)?,
        })
    }
}

/// The stored caller: '' for none.
pub(super) fn caller_to_db(caller: Option<&CallerName>) -> &str {
    caller.map_or("", CallerName::as_str)
}

/// Channels as stored.
pub(super) fn channels_to_db(channels: &[Channel]) -> String {
    channels
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// A phone number as stored.
pub(super) fn phone_to_db(phone: Phone) -> i64 {
    i64::try_from(phone.get()).unwrap_or(i64::MAX)
}

/// A client id as stored.
pub(super) fn client_id_to_db(id: ClientId) -> i64 {
    id_to_db(id.get())
}

/// A time as stored.
pub(super) fn at(t: DateTime<Utc>) -> i64 {
    ms(t)
}

/// How long a verification is kept after it started, at least: the phone limit counts
/// the last hour's.
pub(super) const KEPT_AT_LEAST: chrono::Duration = chrono::Duration::hours(1);

/// Verifications from their rows.
pub(super) fn records(rows: Vec<VerificationRow>) -> Result<Vec<VerificationRecord>, StoreError> {
    rows.into_iter().map(VerificationRecord::try_from).collect()
}

/// A verification from its row, if any.
pub(super) fn record(
    row: Option<VerificationRow>,
) -> Result<Option<VerificationRecord>, StoreError> {
    row.map(VerificationRecord::try_from).transpose()
}
