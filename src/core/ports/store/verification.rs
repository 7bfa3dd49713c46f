//! Verifications in the store: what one is, the calls that decide on one (a start or
//! resend, a check, a cancel: each reads, decides and writes in one transaction, in
//! which calls about one number take turns across replicas), and the changes made
//! after a send (their SQL is in `common/verifications.rs`). So two right codes
//! approve once, concurrent wrong codes take one check each and never more than there
//! are, and concurrent starts of one number start one verification.

use chrono::{DateTime, Utc};

use super::guard::{GuardCheck, GuardFinding};
use crate::core::domain::{CallerName, Channel, ClientId, Phone, VerificationStatus};

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

/// A call that starts a verification of a number, or sends the caller's pending one
/// again: everything the store needs to decide which, and to do it, in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// The verification to start when the caller has none pending for the number. Its
    /// id is the call's (its send's client id); its code is `None` when the call's
    /// voice call picks one, which then also replaces a pending one's code on a resend.
    pub new: NewVerification,
    /// A resend needs the pending one's latest send at or before this.
    pub not_after: DateTime<Utc>,
    /// New verifications per number.
    pub limit: PhoneLimit,
    /// The fraud guard's check of a start (`None`: the guard leaves the number alone);
    /// a resend, and a retry of a send that never went out, are checked alike.
    pub guard: Option<GuardCheck>,
    /// The keyed fingerprint of the call's request, which its id stays tied to: a call
    /// with a send id claimed by another request is [`StartOutcome::IdTaken`].
    pub request_mac: Vec<u8>,
}

/// What a [`Start`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum StartOutcome {
    /// Started, its first send the call's.
    Started(VerificationRecord),
    /// The caller's pending verification, its latest send now the call's.
    Resent(VerificationRecord),
    /// The call's id is a send of this verification already, of the same request (a
    /// retry); `sent`: the gateway accepted that send. A retry of a send that never went
    /// out is checked and counted by the guard as a code (its findings come with the
    /// answer); nothing else is written.
    Replay {
        /// The verification the send belongs to (maybe another caller's).
        record: VerificationRecord,
        /// The gateway accepted the send.
        sent: bool,
    },
    /// The pending verification's voice call has not told its code yet.
    CodeAwaited(VerificationRecord),
    /// The pending verification's latest send was after `not_after`.
    TooSoon {
        /// When its latest send was made.
        last_send_at: DateTime<Utc>,
    },
    /// The pending verification has no sends left.
    Exhausted,
    /// The number had its verifications for the window; the oldest of them started then.
    PhoneLimited {
        /// When the oldest verification in the window started.
        oldest: DateTime<Utc>,
    },
    /// The fraud guard refused it (what it found comes with the answer).
    Refused,
    /// The call's id is another request's: a send of another number, caller or request
    /// (`ALREADY_EXISTS`, even when that send never went out), or claimed meanwhile by a
    /// start of another number (nothing written).
    IdTaken,
}

/// A verification call's answer, with what came to light on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided<T> {
    /// What the call did.
    pub outcome: T,
    /// What the fraud guard found: against a start or a resend (a shadow guard finds
    /// without refusing; a hold it placed stays even when the call is refused), or a
    /// hold lifted after an approval.
    pub findings: Vec<GuardFinding>,
    /// The caller's verifications of the number that were past their time, marked
    /// expired by this call (each is reported once, whoever asks).
    pub expired: Vec<VerificationRecord>,
}

impl<T> Decided<T> {
    /// `outcome`, with nothing found and nothing expired.
    pub(crate) fn only(outcome: T) -> Self {
        Self {
            outcome,
            findings: Vec::new(),
            expired: Vec::new(),
        }
    }
}

/// Judges a code against a pending verification: true when it is the verification's.
pub type CodeCheck<'a> = &'a (dyn Fn(&VerificationRecord) -> bool + Send + Sync);

/// One change of a verification after its send (the send itself, and checks and
/// cancels, are decided by the store in one call each); each holds only if the
/// verification is still as the change expects, else nothing changes.
#[derive(Debug, Clone, PartialEq)]
pub enum VerificationChange {
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
    /// Cancels it (its voice call's code is lost: it can never be checked).
    Cancel {
        /// The verification.
        id: ClientId,
        /// Now.
        at: DateTime<Utc>,
    },
    /// Uncounts send `send`, refused with nothing sent (a resend's: its verification
    /// stays, and its id stays tied to its request): the guard counts only codes sent,
    /// and counts it again if a retry sends it.
    Unsent {
        /// The send.
        send: ClientId,
    },
    /// Removes a verification whose first send was refused (nothing was sent), with
    /// its sends, so a retry of that send starts it afresh.
    Forget {
        /// The verification.
        id: ClientId,
    },
}
