//! The fraud guard's state in the store: what a verification start asks of it, what
//! it found, and a held range. The guard's counters are rows (one per code it counted,
//! one per caller-supplied key of each code, one per key that approved a code, one per
//! held range), read and written in the transaction that starts (or resends) the
//! verification, so replicas share them and two sends never both take the last unit of
//! a limit (their SQL is in `common/guard.rs`).

use chrono::{DateTime, Utc};

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

/// What the guard checks before a code is sent (a start's or a resend's), and counts
/// once it is.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardCheck {
    /// Refuse what it finds (on), or only report it (shadow).
    pub enforce: bool,
    /// The number's range (its first digits).
    pub range: String,
    /// The number's calling code (or `unassigned`).
    pub calling_code: String,
    /// Judged by conversion; false for a safe prefix, which only limits and budgets count.
    pub judged: bool,
    /// The calling code is judged as a range too, held from this many unconverted codes
    /// (`None`: not judged, or no assigned calling code).
    pub code_min_starts: Option<u32>,
    /// The number's region when its calling code is shared by several (`1/JM`: the
    /// calling code, `/`, libphonenumber's region code), judged like the calling code
    /// (from `code_min_starts`) when that is judged; `None` otherwise.
    pub region: Option<String>,
    /// The range's codes and approvals are counted after this.
    pub since: DateTime<Utc>,
    /// An unapproved code sent at or before this is unconverted.
    pub decided_before: DateTime<Utc>,
    /// The range is held from this many unconverted codes...
    pub min_starts: u32,
    /// ...when approved / (approved + unconverted) is below this.
    pub min_conversion: f64,
    /// A hold placed now ends then.
    pub hold_until: DateTime<Utc>,
    /// The calling code's budget, if it has one.
    pub country: Option<Window>,
    /// The call's keys that have a limit.
    pub keys: Vec<KeyCheck>,
    /// Every key name's limit: a resend's code counts against the keys its verification
    /// started with too, whether or not the resend carries them.
    pub key_limits: Vec<(String, Window)>,
    /// A key that approved a code after this passes a range hold (`None`: no key does).
    pub trusted_since: Option<DateTime<Utc>>,
}

impl GuardCheck {
    /// The prefixes judged by conversion, in the order they are locked: the range, then
    /// the region of a shared calling code, then the calling code (when it is judged,
    /// and not the range itself).
    pub fn scopes(&self) -> Vec<Scope<'_>> {
        if !self.judged {
            return Vec::new();
        }
        let mut scopes = vec![Scope {
            prefix: &self.range,
            kind: ScopeKind::Range,
            min_starts: self.min_starts,
        }];
        if let Some(min_starts) = self.code_min_starts {
            if let Some(region) = &self.region {
                scopes.push(Scope {
                    prefix: region,
                    kind: ScopeKind::Region,
                    min_starts,
                });
            }
            if self.calling_code != self.range {
                scopes.push(Scope {
                    prefix: &self.calling_code,
                    kind: ScopeKind::CallingCode,
                    min_starts,
                });
            }
        }
        scopes
    }
}

/// What a [`Scope`] is, and so which column of the counted codes names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeKind {
    /// A range: the number's first digits.
    Range,
    /// A region of a shared calling code (`1/JM`).
    Region,
    /// A whole calling code.
    CallingCode,
}

/// A prefix the conversion rule judges: a number's range, its region of a shared
/// calling code, or its whole calling code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    /// Its digits, or `code/REGION` (the hold's key).
    pub prefix: &'a str,
    /// What it is (its codes are counted by range, region or calling code).
    pub kind: ScopeKind,
    /// Held from this many unconverted codes.
    pub min_starts: u32,
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
    /// Its unconverted codes when it was held.
    pub unconverted: u32,
    /// Its approved verifications when it was held.
    pub approved: u32,
}

/// One thing the guard found against a start.
#[derive(Debug, Clone, PartialEq)]
pub enum GuardFinding {
    /// The range is held; `new`: this call's check held it.
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
    /// The code this call sends reached its range's cap: the range is held from now on,
    /// and this code goes out (the last one).
    Placed {
        /// The hold.
        hold: RangeHold,
    },
    /// The range is held, and a key of the call that approved a code before passes it.
    Trusted {
        /// The hold passed.
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

/// A range's figures over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Verifications approved.
    pub approved: u32,
    /// Codes older than the grace to verifications not approved.
    pub unconverted: u32,
    /// Codes sent to verifications not approved (resends included), whatever their age.
    pub unapproved_sends: u32,
}

/// How many times `MSGW_VERIFY_GUARD_MIN_STARTS` codes a range's unapproved
/// verifications may have had, however young, before the range is judged on them: a
/// bot faster than the grace period is held too, at this cap.
pub const BURST: u32 = 2;

impl Figures {
    /// The figures once one more code is sent to an unapproved verification; `judged`:
    /// the grace is zero, so it is unconverted at once.
    pub fn after_code(self, judged: bool) -> Self {
        Self {
            unconverted: self.unconverted.saturating_add(u32::from(judged)),
            unapproved_sends: self.unapproved_sends.saturating_add(1),
            ..self
        }
    }

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
        assert_eq!(held(0, 0, 39), None);
        assert_eq!(held(0, 0, 40), Some(40));
        // Codes resent to a few verifications count as codes.
        assert_eq!(held(0, 10, 40), Some(40));
        // Real users entering their codes keep a busy range open.
        assert_eq!(held(10, 0, 40), None);
    }

    #[test]
    fn the_code_that_reaches_the_cap_holds_the_range() {
        let before = Figures {
            approved: 0,
            unconverted: 19,
            unapproved_sends: 39,
        };
        assert_eq!(before.hold(20, 0.2), None);
        assert_eq!(before.after_code(false).hold(20, 0.2), Some(40));
        assert_eq!(before.after_code(true).hold(20, 0.2), Some(20));
    }
}
