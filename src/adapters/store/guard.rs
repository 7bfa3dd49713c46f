//! The fraud guard's state in the store: what a verification start asks of it, what
//! it found, and a held range. The guard's counters are rows (one per verification it
//! counted, one per caller-supplied key of it, one per held range), read and written
//! in the transaction that starts the verification, so replicas share them and two
//! starts never both take the last unit of a limit (their SQL is in `common/guard.rs`).

use chrono::{DateTime, Utc};

use super::StoreError;
use super::rows::from_ms;

/// At most `max` counted since `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The most...
    pub max: u32,
    /// ...counted after this.
    pub since: DateTime<Utc>,
}

/// A caller-supplied rate-limit key of a start: its name and its value's HMAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCheck {
    /// The key's name (`ip`, `user`): not personal, kept for the answer.
    pub name: String,
    /// HMAC-SHA256 of name and value under a key derived from the verify secret.
    pub mac: Vec<u8>,
    /// Its limit.
    pub window: Window,
}

/// What the guard checks before a verification starts, and counts once it has.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardCheck {
    /// Refuse what it finds (on), or only report it (shadow).
    pub enforce: bool,
    /// The number's range (its first digits).
    pub range: String,
    /// The number's calling code (or `unassigned`).
    pub calling_code: String,
    /// The range's starts and approvals are counted after this.
    pub since: DateTime<Utc>,
    /// An unapproved start at or before this is unconverted.
    pub decided_before: DateTime<Utc>,
    /// Held from this many unconverted...
    pub min_starts: u32,
    /// ...when approved / (approved + unconverted) is below this.
    pub min_conversion: f64,
    /// A hold placed now ends then.
    pub hold_until: DateTime<Utc>,
    /// The calling code's budget, if it has one.
    pub country: Option<Window>,
    /// The start's keys that have a limit.
    pub keys: Vec<KeyCheck>,
}

/// A held range.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeHold {
    /// The range's digits.
    pub range: String,
    /// When it was held.
    pub held_at: DateTime<Utc>,
    /// When the hold ends.
    pub until: DateTime<Utc>,
    /// Placed in shadow mode: reported, not enforced.
    pub shadow: bool,
    /// Its unconverted verifications when it was held.
    pub unconverted: u32,
    /// Its approved verifications when it was held.
    pub approved: u32,
}

/// One thing the guard found against a start.
#[derive(Debug, Clone, PartialEq)]
pub enum GuardFinding {
    /// The range is held; `new`: this start's check held it.
    Held {
        /// The hold.
        hold: RangeHold,
        /// Placed by this check.
        new: bool,
    },
    /// A key had its limit; the oldest start counted against it started then.
    KeyLimited {
        /// The key's name.
        name: String,
        /// The key's limit.
        window: Window,
        /// When the oldest start in the window started.
        oldest: DateTime<Utc>,
    },
    /// The range's hold ended: its figures no longer call for it (only when judged
    /// after an approval).
    Lifted {
        /// The hold as it was.
        hold: RangeHold,
    },
    /// The calling code had its budget.
    CountryLimited {
        /// The calling code.
        code: String,
        /// Its budget.
        window: Window,
        /// When the oldest start in the window started.
        oldest: DateTime<Utc>,
    },
}

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

/// A range's figures over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Verifications approved.
    pub approved: u32,
    /// Verifications older than the grace and not approved.
    pub unconverted: u32,
    /// Codes sent to verifications not approved (resends included), whatever their age.
    pub unapproved_sends: u32,
}

/// How many times `MSGW_VERIFY_GUARD_MIN_STARTS` codes a range's unapproved
/// verifications may have had, however young, before the range is judged on them: a
/// bot faster than the grace period is held too.
pub const BURST: u32 = 5;

impl Figures {
    /// Whether these figures hold a range, and the unapproved count that does: enough
    /// unconverted verifications, or codes to unapproved ones beyond [`BURST`] times
    /// that, with too few approved.
    pub fn hold(&self, min_starts: u32, min_conversion: f64) -> Option<u32> {
        let low = |unapproved: u32| {
            f64::from(self.approved)
                < min_conversion * (f64::from(self.approved) + f64::from(unapproved))
        };
        if self.unconverted >= min_starts && low(self.unconverted) {
            return Some(self.unconverted);
        }
        let burst = min_starts.saturating_mul(BURST);
        (self.unapproved_sends >= burst && low(self.unapproved_sends))
            .then_some(self.unapproved_sends)
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

#[cfg(test)]
mod tests {
    use super::Figures;

    fn held(approved: u32, unconverted: u32, unapproved_sends: u32) -> Option<u32> {
        let figures = Figures {
            approved,
            unconverted,
            unapproved_sends,
        };
        figures.hold(20, 0.2)
    }

    #[test]
    fn holds_on_enough_unconverted_below_the_share() {
        assert_eq!(held(0, 20, 20), Some(20));
        assert_eq!(held(0, 19, 19), None);
        assert_eq!(held(4, 21, 21), Some(21));
        assert_eq!(held(5, 20, 20), None);
        assert_eq!(held(100, 40, 60), None);
        assert_eq!(
            Figures {
                approved: 0,
                unconverted: 1000,
                unapproved_sends: 1000
            }
            .hold(20, 0.0),
            None
        );
    }

    #[test]
    fn a_burst_of_young_unapproved_codes_holds_too() {
        assert_eq!(held(0, 0, 99), None);
        assert_eq!(held(0, 0, 100), Some(100));
        // Codes resent to a few verifications count as codes.
        assert_eq!(held(0, 10, 100), Some(100));
        // Real users entering their codes keep a busy range open.
        assert_eq!(held(30, 0, 100), None);
    }
}
