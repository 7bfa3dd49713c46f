//! How the stores write a group of claim changes: sorted into claims, settlements or
//! change by change (`grouped`), and what an insert-if-absent of claims owns.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::{ClaimChange, ClaimRecord, ClaimReply, Fingerprint, Settlement, StoreError};
use crate::core::domain::{CallerName, ClientId};

/// A settlement as the stores write it: id, attempt owned, outcome, when.
pub(super) type Settle<'a> = (ClientId, u32, &'a Settlement, DateTime<Utc>);

/// A group of changes, sorted by how a store writes it.
pub(super) enum Grouped<'a> {
    /// Only claims (each atomic on its own): insert-if-absent, one round trip.
    Claims(Vec<NewClaim<'a>>),
    /// Only settlements, of distinct ids: one transaction.
    Settlements(Vec<Settle<'a>>),
    /// Only take-overs, of distinct ids (scheduled messages leaving, retries of
    /// released ids): one compare-and-set on the attempts.
    TakeOvers(Vec<TakeOver<'a>>),
    /// Anything else (repeated ids, mixed kinds): change by change, in one transaction.
    Mixed,
}

/// A take-over of a group of take-overs: id, fingerprint, attempt seen, caller, when.
pub(super) type TakeOver<'a> = (
    ClientId,
    &'a Fingerprint,
    u32,
    Option<&'a str>,
    DateTime<Utc>,
);

/// A claim of a group of claims: id, fingerprint, caller, when.
pub(super) type NewClaim<'a> = (ClientId, &'a Fingerprint, Option<&'a str>, DateTime<Utc>);

/// Sorts a group of changes: what one envelope writes is all claims or all
/// settlements of distinct ids. A lookup's settlement ([`Settlement::Unresolved`])
/// goes change by change: the send path's statements do not write its backoff.
pub(super) fn grouped(changes: &[ClaimChange]) -> Grouped<'_> {
    let claims: Option<Vec<_>> = changes
        .iter()
        .map(|c| match c {
            ClaimChange::Claim {
                id,
                fingerprint,
                caller,
                at,
            } => Some((
                *id,
                fingerprint,
                caller.as_ref().map(CallerName::as_str),
                *at,
            )),
            _ => None,
        })
        .collect();
    if let Some(claims) = claims {
        return Grouped::Claims(claims);
    }
    let settlements: Option<Vec<Settle<'_>>> = changes
        .iter()
        .map(|c| match c {
            ClaimChange::Settle {
                id,
                attempt,
                settlement,
                at,
            } if !matches!(settlement, Settlement::Unresolved { .. }) => {
                Some((*id, *attempt, settlement, *at))
            }
            _ => None,
        })
        .collect();
    match settlements {
        Some(settlements) if distinct(settlements.iter().map(|s| s.0)) => {
            return Grouped::Settlements(settlements);
        }
        Some(_) => return Grouped::Mixed,
        None => {}
    }
    let take_overs: Option<Vec<TakeOver<'_>>> = changes
        .iter()
        .map(|c| match c {
            ClaimChange::TakeOver {
                id,
                fingerprint,
                attempt,
                caller,
                at,
            } => Some((
                *id,
                fingerprint,
                *attempt,
                caller.as_ref().map(CallerName::as_str),
                *at,
            )),
            _ => None,
        })
        .collect();
    match take_overs {
        Some(take_overs) if distinct(take_overs.iter().map(|t| t.0)) => {
            Grouped::TakeOvers(take_overs)
        }
        _ => Grouped::Mixed,
    }
}

/// Whether no id comes twice.
fn distinct(ids: impl ExactSizeIterator<Item = ClientId>) -> bool {
    let n = ids.len();
    ids.collect::<HashSet<_>>().len() == n
}

/// What a group of claims owns, once the insert-if-absent said which ids it inserted:
/// the first occurrence of an inserted id owns it (`None`); every other gets the
/// record, to be read from the ids this returns.
pub(super) struct ClaimOutcome {
    owned: Vec<bool>,
    ids: Vec<i64>,
}

impl ClaimOutcome {
    /// `ids` (as stored, in the group's order) of which `inserted` were inserted.
    pub(super) fn new(ids: Vec<i64>, inserted: &HashSet<i64>) -> Self {
        let mut first = HashSet::new();
        let owned = ids
            .iter()
            .map(|id| inserted.contains(id) && first.insert(*id))
            .collect();
        Self { owned, ids }
    }

    /// The ids whose existing record must be read.
    pub(super) fn to_read(&self) -> Vec<i64> {
        self.ids
            .iter()
            .zip(&self.owned)
            .filter(|(_, owned)| !**owned)
            .map(|(id, _)| *id)
            .collect()
    }

    /// One reply per claim, given the records read.
    pub(super) fn replies(
        self,
        records: &HashMap<i64, ClaimRecord>,
    ) -> Result<Vec<ClaimReply>, StoreError> {
        self.ids
            .iter()
            .zip(self.owned)
            .map(|(id, owned)| {
                if owned {
                    return Ok(ClaimReply::Claimed { attempt: 1 });
                }
                records
                    .get(id)
                    .cloned()
                    .map(ClaimReply::Existing)
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!("claim of {id} conflicted but cannot be read"))
                    })
            })
            .collect()
    }
}
