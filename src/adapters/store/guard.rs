//! The fraud guard's rows as both databases return them, and its advisory locks.

use chrono::{DateTime, Utc};

use super::common::conn::Lock;
use super::rows::from_ms;
use super::{GuardCheck, RangeHold, StoreError};
use crate::core::ports::store::{KeyCheck, Scope};

/// A hold row, as both databases return it.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct HoldRow {
    range_prefix: String,
    held_at_ms: i64,
    until_ms: i64,
    shadow: bool,
    unconverted: i64,
    approved: i64,
    released_at_ms: Option<i64>,
}

impl HoldRow {
    /// When the range was last released by an operator.
    pub(super) fn released_at(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.released_at_ms.map(from_ms).transpose()
    }
}

impl TryFrom<HoldRow> for RangeHold {
    type Error = StoreError;

    fn try_from(r: HoldRow) -> Result<Self, StoreError> {
        let count = |v: i64| {
            u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("hold {}", r.range_prefix)))
        };
        Ok(Self {
            held_at: from_ms(r.held_at_ms)?,
            until: from_ms(r.until_ms)?,
            shadow: r.shadow,
            unconverted: count(r.unconverted)?,
            approved: count(r.approved)?,
            range: r.range_prefix,
        })
    }
}

/// The advisory-lock key of a caller-supplied key (its HMAC's first bytes): locks are
/// taken in this order, so two starts never wait on each other's keys.
pub(super) fn key_lock(mac: &[u8]) -> i32 {
    let mut bytes = [0u8; 4];
    for (b, m) in bytes.iter_mut().zip(mac) {
        *b = *m;
    }
    i32::from_be_bytes(bytes)
}

/// The locks of a check of `guard` over `scopes` and `keys` (in lock order), in the
/// order taken: each scope's range, then the keys, then the calling code's budget.
pub(super) fn check_locks(
    guard: &GuardCheck,
    scopes: &[Scope<'_>],
    keys: &[&KeyCheck],
) -> Vec<(Lock, String)> {
    let ranges = scopes
        .iter()
        .map(|scope| (Lock::Range, scope.prefix.to_owned()));
    let keys = keys
        .iter()
        .map(|key| (Lock::Key, key_lock(&key.mac).to_string()));
    let budget = guard
        .country
        .map(|_| (Lock::Country, guard.calling_code.clone()));
    ranges.chain(keys).chain(budget).collect()
}
