//! Claiming before sending: the ids of a group of calls are claimed in one store write
//! (a second one only for take-overs) before the calls wait for a gateway request, and
//! what each operation then does is decided from what the store answered.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::answers::{list_unread, store_error};
use super::coalescer::{Call, Runner};
use super::exactly_once::{Claims, Decision, Owned};
use super::lookups::Resolving;
use super::{Confidential, Executed};
use crate::core::domain::{CallerName, ClientId, Error, Operation, Phone};
use crate::core::ports::store::{ClaimChange, ClaimReply, Fingerprint, Settlement};

/// Where one operation of the envelope stands.
// Lives only during one envelope; boxing the answer would cost an allocation per operation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Slot {
    /// Goes into the envelope; a keyed one with the claim it owns.
    Send(Option<Owned>),
    /// Its earlier outcome is unknown: a `status` query decides; before the end of the
    /// settle window, "not found" means "not yet".
    Resolve(Owned, Resolving),
    /// Another call owns its claim.
    Wait(DateTime<Utc>),
    /// Answered.
    Done(Result<Executed, Error>),
}

/// One operation of the envelope.
pub(super) struct Entry {
    pub(super) call: usize,
    pub(super) op: Operation,
    pub(super) caller: Option<CallerName>,
    pub(super) key: Option<(ClientId, Fingerprint)>,
    pub(super) confidential: Option<Confidential>,
    /// The scheduled send leaving: it takes over its scheduled claim.
    pub(super) leaving: bool,
    pub(super) slot: Slot,
}

/// Claims every keyed operation's id in one store call, which also reads which of
/// `recipients` are on the suppression list, then takes over (in a second one, only
/// when needed) the claims that were released, unknown or stale. Answers the numbers
/// the list holds; an error when it could not be read (then every keyed entry is
/// answered with it too).
pub(super) async fn acquire(
    claims: &Claims,
    entries: &mut [Entry],
    recipients: &[Phone],
) -> Result<HashSet<Phone>, Error> {
    let at = Utc::now();
    let keyed: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].key.is_some())
        .collect();
    if keyed.is_empty() {
        if recipients.is_empty() {
            return Ok(HashSet::new());
        }
        return match claims.suppressed(recipients).await {
            Ok(found) => Ok(found.into_iter().collect()),
            Err(e) => Err(list_unread(e)),
        };
    }
    let changes: Vec<ClaimChange> = keyed
        .iter()
        .filter_map(|&i| entries[i].key.map(|key| (i, key)))
        .map(|(i, (id, fingerprint))| ClaimChange::Claim {
            id,
            fingerprint,
            caller: entries[i].caller.clone(),
            at,
        })
        .collect();
    let (replies, opted_out): (Vec<(usize, ClaimReply)>, HashSet<Phone>) =
        match claims.apply_checking(&changes, recipients).await {
            Ok(checked) => (
                keyed.iter().copied().zip(checked.replies).collect(),
                checked.suppressed.into_iter().collect(),
            ),
            Err(e) => {
                let error = store_error(e);
                for &i in &keyed {
                    entries[i].slot = Slot::Done(Err(error.clone()));
                }
                return Err(error);
            }
        };
    let mut taking: Vec<(usize, Option<Resolving>)> = Vec::new();
    let mut take_overs = Vec::new();
    for (i, reply) in replies {
        let Some((id, fingerprint)) = entries[i].key else {
            continue;
        };
        entries[i].slot = match reply {
            ClaimReply::Existing(record) => {
                let entry = &entries[i];
                let key = (id, fingerprint, entry.leaving);
                match claims.decide(&entry.op, key, entry.caller.as_ref(), &record) {
                    Decision::Answer(answer) => Slot::Done(answer),
                    Decision::Wait(stale_at) => Slot::Wait(stale_at),
                    Decision::TakeOver { attempt, resolve } => {
                        taking.push((i, resolve));
                        take_overs.push(ClaimChange::TakeOver {
                            id,
                            fingerprint,
                            attempt,
                            caller: entries[i].caller.clone(),
                            at,
                        });
                        continue;
                    }
                }
            }
            reply => claimed(id, reply, None),
        };
    }
    if take_overs.is_empty() {
        return Ok(opted_out);
    }
    let indices: Vec<usize> = taking.iter().map(|(i, _)| *i).collect();
    for ((i, reply), (_, resolve)) in apply(claims, &take_overs, entries, &indices)
        .await
        .into_iter()
        .zip(taking)
    {
        if let Some((id, _)) = entries[i].key {
            entries[i].slot = claimed(id, reply, resolve);
        }
    }
    Ok(opted_out)
}

/// Applies `changes` (of the entries at `indices`); on a store failure those entries
/// are answered with it and nothing is returned.
async fn apply(
    claims: &Claims,
    changes: &[ClaimChange],
    entries: &mut [Entry],
    indices: &[usize],
) -> Vec<(usize, ClaimReply)> {
    match claims.apply(changes).await {
        Ok(replies) => indices.iter().copied().zip(replies).collect(),
        Err(e) => {
            let error = store_error(e);
            for &i in indices {
                entries[i].slot = Slot::Done(Err(error.clone()));
            }
            Vec::new()
        }
    }
}

/// The slot of a keyed operation after a claim or take-over (`resolve`: the earlier
/// outcome is unknown, and what its lookup starts from).
fn claimed(id: ClientId, reply: ClaimReply, resolve: Option<Resolving>) -> Slot {
    match reply {
        ClaimReply::Claimed { attempt } => match resolve {
            Some(resolving) => Slot::Resolve(Owned { id, attempt }, resolving),
            None => Slot::Send(Some(Owned { id, attempt })),
        },
        // Another call got there between the look and the take-over: look again.
        ClaimReply::Existing(_) => Slot::Wait(Utc::now()),
        other => Slot::Done(Err(Error::Internal(format!(
            "unexpected claim reply {other:?}"
        )))),
    }
}

/// Gives up the calls that can no longer use their claims: the caller left, or its
/// deadline passed while the claims were written. Nothing of theirs is sent: a claim
/// taken to send is released, one taken to resolve an unknown outcome stays unknown.
pub(super) fn release_unwanted<R: Runner>(
    entries: &mut [Entry],
    calls: &[&Call<R>],
    settlements: &mut Vec<(Owned, Settlement)>,
) {
    let now = Instant::now();
    for call in calls {
        if call.deadline.is_some_and(|d| d <= now) {
            call.abandon();
        }
    }
    for entry in entries.iter_mut() {
        if calls[entry.call].wanted() {
            continue;
        }
        match entry.slot.given_back() {
            Some(back) => settlements.push(back),
            None if matches!(entry.slot, Slot::Send(None)) => {}
            None => continue,
        }
        entry.slot = Slot::Done(Err(Error::DeadlineExceeded {
            outcome_unknown: false,
        }));
    }
}

impl Slot {
    /// The claim this slot owns, if any.
    pub(super) fn owned(&self) -> Option<Owned> {
        match *self {
            Slot::Send(Some(owned)) | Slot::Resolve(owned, _) => Some(owned),
            _ => None,
        }
    }

    /// The claim this slot owns and how it ends when the call goes no further, nothing
    /// of it sent: a claim taken to send is released, one taken to resolve an unknown
    /// outcome stays unknown.
    pub(super) fn given_back(&self) -> Option<(Owned, Settlement)> {
        match *self {
            Slot::Send(Some(owned)) => Some((owned, unsent())),
            Slot::Resolve(owned, resolving) => Some((
                owned,
                Settlement::Unknown {
                    settle_until: resolving.settle_until,
                },
            )),
            _ => None,
        }
    }
}

/// The settlement of a claim whose request never left msgw.
pub(super) fn unsent() -> Settlement {
    Settlement::Released("the caller left before the request was sent".into())
}
