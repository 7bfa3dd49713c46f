//! Sends with a `send_at`: how their claims are keyed (the time is part of the
//! request), and the answer to one kept for later.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::Executed;
use crate::core::domain::{ClientId, Operation, Output, SendReceipt};
use crate::core::ports::gateway::Gateway;
use crate::core::ports::store::Fingerprint;

/// The fingerprint of a request with a `send_at`: its operation and its time, so the
/// same message at another time is another request (a request without one keeps the
/// fingerprint it always had).
pub fn scheduled_fingerprint(
    gateway: &dyn Gateway,
    op: &Operation,
    send_at: DateTime<Utc>,
) -> Fingerprint {
    let mut hash = Sha256::new();
    hash.update(gateway.canonical(op));
    hash.update(b"\nsend_at_ms:");
    hash.update(send_at.timestamp_millis().to_be_bytes());
    Fingerprint(hash.finalize().into())
}

/// How a call with a `send_at` keys its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledKey {
    /// The request's time, part of its fingerprint.
    pub send_at: DateTime<Utc>,
    /// The scheduled message leaving at its time (msgw's own call), rather than a
    /// caller's retry: only it takes a scheduled claim over.
    pub leaving: bool,
}

/// The answer to a send kept to leave at `send_at`: nothing reached the gateway yet.
pub fn scheduled_receipt(id: ClientId, send_at: DateTime<Utc>, replayed: bool) -> Executed {
    Executed {
        output: Output::Sent(SendReceipt {
            id: id.get(),
            msg_id: String::new(),
            parts: 0,
            raw: serde_json::Value::Null,
            scheduled_for: Some(send_at),
        }),
        replayed,
        source: None,
    }
}
