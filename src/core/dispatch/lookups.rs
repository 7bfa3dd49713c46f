//! Lookups of unknown outcomes: a retry of an id whose earlier outcome is unknown asks
//! the gateway's `status` before anything is sent, and those lookups are bounded per
//! claim, across callers and replicas, by the store. A lookup takes the claim over (a
//! compare-and-set on its attempt), so while one runs every other call waits for its
//! outcome; one that leaves the outcome unknown (the lookup failed, or the gateway does
//! not know the message yet) records with the claim when the next may run
//! ([`LOOKUP_BACKOFF_FIRST`], doubling up to [`LOOKUP_BACKOFF_MAX`]), and until then a
//! retry is answered `OUTCOME_UNKNOWN` with `RetryInfo` without asking.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::duration;
use crate::core::domain::{ClientId, Error, UnavailableCause};
use crate::core::ports::store::Lookups;

/// After a `status` lookup left an outcome unknown, how long until the next may run;
/// it doubles with each such lookup in a row.
pub const LOOKUP_BACKOFF_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between two `status` lookups of one claim: a gateway whose `status`
/// fails for an hour costs two lookups a minute per id that callers keep retrying.
pub const LOOKUP_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// An earlier outcome a `status` lookup is to find out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolving {
    /// The end of the settle window: before it, "not found" means "not yet".
    pub settle_until: DateTime<Utc>,
    /// Lookups in a row that left the outcome unknown before this one.
    pub unresolved: u32,
}

/// The wait before the next `status` lookup of a claim after `unresolved` lookups in a
/// row left its outcome unknown.
pub fn lookup_backoff(unresolved: u32) -> Duration {
    let doublings = unresolved.saturating_sub(1).min(16);
    LOOKUP_BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(LOOKUP_BACKOFF_MAX)
}

/// The lookups of a claim after the lookup `resolving` ran and left its outcome
/// unknown. `not_yet`: the gateway said it does not know the message, inside the settle
/// window; the next lookup then waits no longer than the window, after which that
/// answer means "never sent" and decides.
pub fn looked_up(resolving: Resolving, not_yet: bool) -> Lookups {
    let unresolved = resolving.unresolved.saturating_add(1);
    let next_at = Utc::now() + duration(lookup_backoff(unresolved));
    Lookups {
        unresolved,
        next_at: if not_yet {
            next_at.min(resolving.settle_until)
        } else {
            next_at
        },
    }
}

/// The answer when the outcome of an earlier send with `id` is unknown and its lookups
/// back off until `lookups.next_at`: nothing was sent, and the gateway is not asked now.
/// `failed`: why the lookup that started the backoff told nothing, when this call ran it.
pub fn lookup_later(id: ClientId, lookups: Lookups, failed: Option<&str>) -> Error {
    let left = (lookups.next_at - Utc::now())
        .to_std()
        .unwrap_or_default()
        .max(Duration::from_millis(100));
    let why = match failed {
        Some(failed) => format!("the gateway's status could not tell it: {failed}"),
        None => format!(
            "msgw's lookups of it at the gateway ({} in a row) did not find it out",
            lookups.unresolved
        ),
    };
    Error::Unavailable {
        cause: UnavailableCause::LookupBackoff { retry_after: left },
        outcome_unknown: true,
        detail: format!(
            "the outcome of an earlier send with id {id} is unknown and {why}; nothing was sent, and msgw asks the gateway again in {}s: retry with the same id then",
            left.as_secs_f64().ceil()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let waits: Vec<u64> = (1..=8).map(|n| lookup_backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(lookup_backoff(u32::MAX), LOOKUP_BACKOFF_MAX);
    }

    #[test]
    fn a_lookup_that_found_nothing_yet_waits_no_longer_than_the_settle_window() {
        let now = Utc::now();
        let resolving = |settle_until| Resolving {
            settle_until,
            unresolved: 4,
        };
        // The fifth in a row waits 16 s, but the window ends in 3 s: then "not found"
        // decides, and that lookup must not wait.
        let soon = now + chrono::Duration::seconds(3);
        let lookups = looked_up(resolving(soon), true);
        assert_eq!(lookups.unresolved, 5);
        assert_eq!(lookups.next_at, soon);
        let failed = looked_up(resolving(soon), false);
        assert!(failed.next_at >= now + chrono::Duration::seconds(16));
    }
}
