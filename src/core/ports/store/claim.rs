//! Idempotency claims: what the store knows about the client id of a keyed operation.
//! The store is the only arbiter (a unique key, insert-if-absent, compare-and-set on
//! the attempt), so the guarantee holds across restarts and replicas.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::SentMessage;
use crate::core::domain::{CallerName, ClientId};

/// SHA-256 of a request's canonical gateway operation, hook excluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

/// The gateway's answer to an accepted keyed operation, kept to answer retries.
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedOutcome {
    /// The gateway's message id, when it gave one.
    pub msg_id: Option<String>,
    /// Billed parts.
    pub parts: u32,
    /// The payload verbatim (the send result, or the status answer when recovered).
    pub payload: Value,
    /// Learned from a `status` query after an unknown outcome, not from the send's answer.
    pub recovered: bool,
}

impl AcceptedOutcome {
    /// The answer of a send the gateway turned out to have, recovered from its `status`
    /// (no parts known; the status answer kept as the payload).
    pub fn recovered(report: &crate::core::domain::StatusReport) -> Self {
        Self {
            msg_id: report.msg_id.clone(),
            parts: 0,
            payload: report.raw.clone(),
            recovered: true,
        }
    }
}

/// Where a claim stands.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimState {
    /// A call owns it and waits for the gateway.
    InFlight {
        /// When it was claimed (or taken over).
        since: DateTime<Utc>,
    },
    /// The gateway accepted it.
    Accepted(AcceptedOutcome),
    /// Nothing was sent (the gateway refused it, or the request never left msgw).
    Released {
        /// The gateway's text or the cause.
        reason: String,
    },
    /// Kept by msgw to leave at `send_at`: nothing has reached the gateway. The message
    /// leaves by a take-over of the claim, like any retry.
    Scheduled {
        /// When it is to leave.
        send_at: DateTime<Utc>,
    },
    /// A scheduled message cancelled before it left: final, the id is spent.
    Canceled {
        /// When it was to leave.
        send_at: DateTime<Utc>,
        /// When it was cancelled.
        at: DateTime<Utc>,
    },
    /// The request may have reached the gateway; a `status` query decides.
    Unknown {
        /// Until then the gateway may still be carrying out the request, so its "not
        /// found" means "not yet" (`None`: no window, as stored before windows existed).
        settle_until: Option<DateTime<Utc>>,
        /// The lookups that left it unknown, if the last one did.
        lookups: Option<Lookups>,
    },
}

/// The `status` lookups of a claim that left its outcome unknown (they failed, or the
/// gateway did not know the message yet): how many in a row, and when the next may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookups {
    /// Lookups in a row that left the outcome unknown (at least 1).
    pub unresolved: u32,
    /// No lookup of the claim runs before this.
    pub next_at: DateTime<Utc>,
}

/// A claim as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRecord {
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// Generation: 1 when claimed, one more per take-over.
    pub attempt: u32,
    /// Its state.
    pub state: ClaimState,
    /// The caller that made it (`None`: no caller authentication).
    pub caller: Option<CallerName>,
}

/// How an owned claim ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// Accepted, with the message to track for reconcile (a send), if any.
    Accepted(AcceptedOutcome, Option<SentMessage>),
    /// Nothing sent.
    Released(String),
    /// Outcome unknown; the gateway may still be carrying the request out until
    /// `settle_until`.
    Unknown {
        /// The end of the settle window.
        settle_until: DateTime<Utc>,
    },
    /// Outcome still unknown after a `status` lookup: as `Unknown`, with when the next
    /// lookup may run. Written apart from the send path's groups (see [`grouped`]).
    Unresolved {
        /// The end of the settle window.
        settle_until: DateTime<Utc>,
        /// The lookups so far.
        lookups: Lookups,
    },
}

/// One change of the claims. Settlements and take-overs of a group commit together;
/// each claim is atomic on its own (insert-if-absent), so a group of claims need not.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimChange {
    /// Claims `id` unless a claim exists.
    Claim {
        /// The id.
        id: ClientId,
        /// The request's fingerprint.
        fingerprint: Fingerprint,
        /// Who claims it.
        caller: Option<CallerName>,
        /// Now.
        at: DateTime<Utc>,
    },
    /// Takes over an existing claim that is still at `attempt` (released, unknown or
    /// stale), for a request with `fingerprint`; its lookups start over (the taker
    /// carries the count it saw into its own settlement).
    TakeOver {
        /// The id.
        id: ClientId,
        /// The request's fingerprint.
        fingerprint: Fingerprint,
        /// The generation the caller saw.
        attempt: u32,
        /// Who takes it over.
        caller: Option<CallerName>,
        /// Now.
        at: DateTime<Utc>,
    },
    /// Records the outcome of a claim the caller owns at `attempt`.
    Settle {
        /// The id.
        id: ClientId,
        /// The generation the caller owns.
        attempt: u32,
        /// The outcome.
        settlement: Settlement,
        /// Now.
        at: DateTime<Utc>,
    },
}

impl ClaimChange {
    /// The id it changes.
    pub fn id(&self) -> ClientId {
        match self {
            Self::Claim { id, .. } | Self::TakeOver { id, .. } | Self::Settle { id, .. } => *id,
        }
    }
}

/// A group of claims written, and which of its recipients the suppression list holds:
/// what the send path asks the store once per dispatch group.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedClaims {
    /// One reply per change, in order.
    pub replies: Vec<ClaimReply>,
    /// The recipients asked about that are on the suppression list.
    pub suppressed: Vec<crate::core::domain::Phone>,
}

/// The store's answer to one [`ClaimChange`].
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimReply {
    /// The caller owns the claim at this generation and must send.
    Claimed {
        /// The generation owned.
        attempt: u32,
    },
    /// Someone else's claim exists (or moved on since the caller looked).
    Existing(ClaimRecord),
    /// The outcome is recorded.
    Settled,
    /// The claim moved on (taken over) before the outcome was recorded.
    Superseded,
}
