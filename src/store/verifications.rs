//! Verifications in the store: what one is and the changes made to it (their SQL is in
//! `common/verifications.rs`). Every change is one conditional statement (or one
//! transaction) whose condition is the state it expects, so checks and resends stay
//! atomic across replicas: two right codes approve once, concurrent wrong codes take
//! one check each and never more than there are.

use chrono::{DateTime, Utc};

use super::StoreError;
use super::rows::{from_ms, id_from_db, id_to_db, ms};
use crate::domain::{CallerName, Channel, ClientId, Phone, VerificationStatus};

/// A code as the store keeps it: an HMAC to check it against, and a sealed copy for
/// resends; both useless without the verify secret, which is never in the store.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCode {
    /// HMAC-SHA256 of the code (and the verification) under the verify secret.
    pub mac: Vec<u8>,
    /// The code sealed under a key derived from the verify secret and `nonce`.
    pub sealed: Vec<u8>,
    /// The random nonce of the seal.
    pub nonce: Vec<u8>,
}

impl std::fmt::Debug for StoredCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoredCode(..)")
    }
}

/// A verification as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct VerificationRecord {
    /// The client id of its first send.
    pub id: ClientId,
    /// Who started it (`None`: no caller authentication).
    pub caller: Option<CallerName>,
    /// The number.
    pub phone: Phone,
    /// Where it stands.
    pub status: VerificationStatus,
    /// The channels of its latest send.
    pub channels: Vec<Channel>,
    /// The client id of its latest send.
    pub last_send: ClientId,
    /// The code; `None` while a voice call that picks it is under way.
    pub code: Option<StoredCode>,
    /// Wrong codes it still accepts.
    pub checks_left: u32,
    /// Sends it still allows.
    pub sends_left: u32,
    /// When it started.
    pub created_at: DateTime<Utc>,
    /// When its code stops being accepted.
    pub expires_at: DateTime<Utc>,
    /// When its latest send was made.
    pub last_send_at: DateTime<Utc>,
}

/// A verification to start, with its first send.
#[derive(Debug, Clone, PartialEq)]
pub struct NewVerification {
    /// The client id of its first send (also its own id).
    pub id: ClientId,
    /// Who starts it.
    pub caller: Option<CallerName>,
    /// The number.
    pub phone: Phone,
    /// The channels of the first send.
    pub channels: Vec<Channel>,
    /// The code; `None` when the gateway's voice call picks it.
    pub code: Option<StoredCode>,
    /// Wrong codes it accepts.
    pub checks: u32,
    /// Sends it allows after the first.
    pub sends_left: u32,
    /// Now.
    pub at: DateTime<Utc>,
    /// When its code stops being accepted.
    pub expires_at: DateTime<Utc>,
}

/// New verifications per number allowed in a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhoneLimit {
    /// At most this many...
    pub max: u32,
    /// ...started after this.
    pub since: DateTime<Utc>,
}

/// The store's answer to starting a verification.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// Started.
    Started(VerificationRecord),
    /// The caller has one pending for the number already: a resend, not a start.
    Pending(VerificationRecord),
    /// The number had its verifications for the window; the oldest of them started then.
    PhoneLimited {
        /// When the oldest verification in the window started.
        oldest: DateTime<Utc>,
    },
    /// The send id belongs to another verification already.
    IdTaken,
    /// The fraud guard refused it (what it found comes with the answer).
    Refused,
}

/// One change of a verification; each holds only if the verification is still as the
/// change expects (pending, not expired, ...), else nothing changes.
#[derive(Debug, Clone, PartialEq)]
pub enum VerificationChange {
    /// Records a resend with client id `send` on `channels`, if sends are left and the
    /// latest send was at or before `not_after`; `forget_code`: the resend's voice call
    /// picks a new code.
    Resend {
        /// The verification.
        id: ClientId,
        /// The resend's client id.
        send: ClientId,
        /// Its channels.
        channels: Vec<Channel>,
        /// The code is replaced by the one the gateway's voice call picks.
        forget_code: bool,
        /// Now.
        at: DateTime<Utc>,
        /// The latest send must be at or before this.
        not_after: DateTime<Utc>,
    },
    /// Keeps the code a voice call picked, if `send` is still the latest send.
    SetCode {
        /// The verification.
        id: ClientId,
        /// The send that picked it.
        send: ClientId,
        /// The code.
        code: StoredCode,
    },
    /// Marks send `send` as accepted by the gateway.
    Sent {
        /// The send.
        send: ClientId,
    },
    /// Approves it, if its code is still `mac`.
    Approve {
        /// The verification.
        id: ClientId,
        /// The code's HMAC the caller's code matched.
        mac: Vec<u8>,
        /// Now.
        at: DateTime<Utc>,
    },
    /// Takes one check for a wrong code; the last one fails it.
    WrongCode {
        /// The verification.
        id: ClientId,
        /// Now.
        at: DateTime<Utc>,
    },
    /// Cancels it.
    Cancel {
        /// The verification.
        id: ClientId,
        /// Now.
        at: DateTime<Utc>,
    },
    /// Removes a verification whose first send was refused (nothing was sent), with
    /// its sends, so a retry of that send starts it afresh.
    Forget {
        /// The verification.
        id: ClientId,
    },
}

/// Whether a change writes without returning a verification (its transaction commits
/// even then); every other change commits only when it held.
pub(super) fn writes_without_row(change: &VerificationChange) -> bool {
    matches!(
        change,
        VerificationChange::Sent { .. } | VerificationChange::Forget { .. }
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
