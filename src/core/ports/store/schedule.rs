//! Scheduled sends as stored: the claim of a scheduled message (state `scheduled`, with
//! its time) and the request kept to send then, which replicas take when it is due.

use chrono::{DateTime, Utc};

use super::{ClaimRecord, Fingerprint};
use crate::core::domain::{CallerName, ClientId};

/// A send to keep until `send_at`: its claim and its request.
#[derive(Debug, Clone, PartialEq)]
pub struct NewScheduled {
    /// The id, claimed now.
    pub id: ClientId,
    /// The request's fingerprint (its time included).
    pub fingerprint: Fingerprint,
    /// Who schedules it.
    pub caller: Option<CallerName>,
    /// When it is to leave.
    pub send_at: DateTime<Utc>,
    /// The request, encoded by whoever schedules it (opaque to the store).
    pub payload: Vec<u8>,
    /// Now.
    pub at: DateTime<Utc>,
}

/// What scheduling an id did.
#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleReply {
    /// The id was free: the message is kept.
    Scheduled,
    /// The id has a claim already (this one).
    Existing(ClaimRecord),
}

/// A scheduled message taken to leave.
#[derive(Debug, Clone, PartialEq)]
pub struct DueScheduled {
    /// The id.
    pub id: ClientId,
    /// When it was to leave.
    pub send_at: DateTime<Utc>,
    /// The request as kept.
    pub payload: Vec<u8>,
    /// Who scheduled it.
    pub caller: Option<CallerName>,
    /// How many times it was taken (this one included).
    pub tries: u32,
}

/// A request an earlier version of msgw kept, in that version's form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlierScheduled {
    /// The id.
    pub id: ClientId,
    /// The request as that version kept it.
    pub payload: Vec<u8>,
}

/// What the store keeps to send later, at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScheduledSummary {
    /// Messages kept that have not left.
    pub pending: u64,
    /// When the next one may be taken.
    pub next_due: Option<DateTime<Utc>>,
}
