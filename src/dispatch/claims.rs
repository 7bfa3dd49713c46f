//! Exactly-once sends: before a keyed operation (every send, the voice OTP call) goes
//! upstream, its client id is claimed in the store with the request's fingerprint.
//! The store arbitrates; this module decides what a call does with what it finds:
//!
//! | the id's claim | same request | different request |
//! |---|---|---|
//! | none | claim it, send | — |
//! | accepted | answer the stored response (replayed) | `ALREADY_EXISTS` |
//! | released (refused, or never left msgw) | take it over, send | take it over, send |
//! | in flight | wait for its outcome, up to the caller's deadline | `ALREADY_EXISTS` |
//! | unknown, or in flight past the upstream timeout | take it over, ask `status` first | `ALREADY_EXISTS` |

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::{sync::watch, time::Instant};

use super::Executed;
use crate::domain::{ClientId, Error, Operation, Output, SendReceipt};
use crate::store::{
    AcceptedOutcome, ClaimChange, ClaimReply, ClaimState, Fingerprint, GroupWriter, Settlement,
    Store, StoreError,
};
use crate::upstream;

/// Claim changes committed in one transaction at most.
const MAX_GROUP: usize = 256;

/// How long past the upstream timeout a claim with no outcome still counts as in flight
/// (the outcome's own commit, a busy store): after that it counts as unknown.
pub const STALE_MARGIN: Duration = Duration::from_secs(5);

/// How often a waiting call looks at the store even without a wake-up (another replica
/// may settle the claim).
const WAIT_POLL: Duration = Duration::from_millis(100);

/// A claim this call owns: it must send (or resolve) and then settle it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    /// The id.
    pub id: ClientId,
    /// The generation owned.
    pub attempt: u32,
}

/// What a keyed operation does next.
#[derive(Debug)]
// Lives only during one call; boxing the answer would cost an allocation per operation.
#[allow(clippy::large_enum_variant)]
pub enum Acquired {
    /// Send it; the claim is owned.
    Send(Owned),
    /// The earlier outcome is unknown: ask the gateway's `status` before sending.
    Resolve(Owned),
    /// Answered without sending: a replay, a conflict, or an error.
    Answer(Result<Executed, Error>),
}

/// The claims of keyed operations, through the store.
#[derive(Debug, Clone)]
pub struct Claims {
    store: Arc<dyn Store>,
    writer: GroupWriter<ClaimChange, ClaimReply>,
    /// Bumped whenever this process settles claims; waiting calls look again then.
    settled: Arc<watch::Sender<u64>>,
    stale_after: Duration,
}

/// The fingerprint of a request: the hash of its canonical gateway operation.
pub fn fingerprint(op: &Operation) -> Fingerprint {
    Fingerprint(Sha256::digest(upstream::canonical(op)).into())
}

enum Next {
    Write(ClaimChange, bool),
    Read,
}

impl Claims {
    /// Claims over `store`; a claim with no outcome `stale_after` after it was made
    /// counts as unknown.
    pub fn new(store: Arc<dyn Store>, stale_after: Duration) -> Self {
        let writer = GroupWriter::spawn(MAX_GROUP, {
            let store = store.clone();
            move |changes: Vec<ClaimChange>| {
                let store = store.clone();
                async move { store.apply_claims(&changes).await }
            }
        });
        Self {
            store,
            writer,
            settled: Arc::new(watch::channel(0).0),
            stale_after,
        }
    }

    /// Claims `op`'s id, waiting for a claim in flight when it must.
    pub async fn acquire(
        &self,
        op: &Operation,
        id: ClientId,
        deadline: Option<Instant>,
    ) -> Acquired {
        let fingerprint = fingerprint(op);
        let claim = || {
            Next::Write(
                ClaimChange::Claim {
                    id,
                    fingerprint,
                    at: Utc::now(),
                },
                false,
            )
        };
        let mut next = claim();
        loop {
            // Subscribed before looking, so a settlement after the look wakes the wait.
            let mut settled = self.settled.subscribe();
            let record = match next {
                Next::Write(change, resolve) => match self.writer.submit(change).await {
                    Ok(ClaimReply::Claimed { attempt }) => {
                        let owned = Owned { id, attempt };
                        return if resolve {
                            Acquired::Resolve(owned)
                        } else {
                            Acquired::Send(owned)
                        };
                    }
                    Ok(ClaimReply::Existing(record)) => record,
                    Ok(other) => {
                        return Acquired::Answer(Err(Error::Internal(format!(
                            "unexpected claim reply {other:?}"
                        ))));
                    }
                    Err(e) => return Acquired::Answer(Err(store_error(e))),
                },
                Next::Read => match self.store.claim_of(id).await {
                    Ok(Some(record)) => record,
                    Ok(None) => {
                        next = claim();
                        continue;
                    }
                    Err(e) => return Acquired::Answer(Err(store_error(e))),
                },
            };
            let take_over = |resolve| {
                Next::Write(
                    ClaimChange::TakeOver {
                        id,
                        fingerprint,
                        attempt: record.attempt,
                        at: Utc::now(),
                    },
                    resolve,
                )
            };
            let conflict = |msg_id: Option<&String>| {
                Acquired::Answer(Err(Error::IdConflict {
                    id: id.get(),
                    msg_id: msg_id.cloned(),
                }))
            };
            let same = record.fingerprint == fingerprint;
            next = match &record.state {
                ClaimState::Accepted(outcome) if same => {
                    return Acquired::Answer(replay(op, id, outcome.clone()));
                }
                ClaimState::Accepted(outcome) => return conflict(outcome.msg_id.as_ref()),
                ClaimState::Released { .. } => take_over(false),
                _ if !same => return conflict(None),
                ClaimState::Unknown => take_over(true),
                ClaimState::InFlight { since } => {
                    let stale_at = *since
                        + chrono::Duration::from_std(self.stale_after)
                            .unwrap_or(chrono::Duration::MAX);
                    if Utc::now() >= stale_at {
                        take_over(true)
                    } else if self.wait(&mut settled, stale_at, deadline).await {
                        Next::Read
                    } else {
                        return Acquired::Answer(Err(in_progress(id, stale_at)));
                    }
                }
            };
        }
    }

    /// Waits until a settlement, the next poll or `stale_at`; false when the caller's
    /// deadline comes first.
    async fn wait(
        &self,
        settled: &mut watch::Receiver<u64>,
        stale_at: DateTime<Utc>,
        deadline: Option<Instant>,
    ) -> bool {
        let now = Instant::now();
        let until_stale = (stale_at - Utc::now()).to_std().unwrap_or_default();
        let wake = now + until_stale.min(WAIT_POLL);
        match deadline {
            Some(d) if d <= now => false,
            Some(d) if d < wake => {
                tokio::select! {
                    changed = settled.changed() => changed.is_ok(),
                    () = tokio::time::sleep_until(d) => false,
                }
            }
            _ => {
                tokio::select! {
                    _ = settled.changed() => {}
                    () = tokio::time::sleep_until(wake) => {}
                }
                true
            }
        }
    }

    /// Records the outcomes of owned claims (one group commit), then wakes the calls
    /// waiting for them. A store failure is logged: the claim stays in flight, turns
    /// unknown after the upstream timeout, and the next call resolves it by `status`.
    pub async fn settle(&self, outcomes: Vec<(Owned, Settlement)>) {
        if outcomes.is_empty() {
            return;
        }
        let at = Utc::now();
        let results = futures_util::future::join_all(outcomes.into_iter().map(
            |(owned, settlement)| async move {
                let result = self
                    .writer
                    .submit(ClaimChange::Settle {
                        id: owned.id,
                        attempt: owned.attempt,
                        settlement,
                        at,
                    })
                    .await;
                (owned, result)
            },
        ))
        .await;
        for (owned, result) in results {
            match result {
                Ok(ClaimReply::Settled) => {}
                Ok(ClaimReply::Superseded) => tracing::warn!(
                    client_id = owned.id.get(),
                    "claim taken over by another call before its outcome was recorded"
                ),
                Ok(other) => {
                    tracing::error!(client_id = owned.id.get(), ?other, "unexpected claim reply")
                }
                Err(e) => tracing::error!(
                    client_id = owned.id.get(),
                    error = %e,
                    "cannot record a send's outcome; a retry will ask the gateway's status"
                ),
            }
        }
        self.settled.send_modify(|generation| *generation += 1);
    }
}

/// The stored answer of an accepted operation, as its first call got it.
pub fn replay(op: &Operation, id: ClientId, outcome: AcceptedOutcome) -> Result<Executed, Error> {
    let output = if !outcome.recovered {
        upstream::parse_output(op, outcome.payload).map_err(|e| {
            Error::Internal(format!("the stored answer of id {id} is unreadable: {e}"))
        })?
    } else if matches!(op, Operation::SendVoiceOtp(_)) {
        return Err(Error::ResultLost(format!(
            "the voice OTP call with id {id} was placed, but the gateway's answer with its code was lost; place a new call with a new id"
        )));
    } else {
        Output::Sent(SendReceipt {
            id: id.get(),
            msg_id: outcome.msg_id.unwrap_or_default(),
            parts: outcome.parts,
            raw: outcome.payload,
        })
    };
    Ok(Executed {
        output,
        replayed: true,
    })
}

fn in_progress(id: ClientId, stale_at: DateTime<Utc>) -> Error {
    let left = (stale_at - Utc::now()).to_std().unwrap_or_default();
    Error::SendInProgress {
        id: id.get(),
        retry_after: left.clamp(Duration::from_millis(100), Duration::from_secs(1)),
    }
}

fn store_error(e: StoreError) -> Error {
    e.unavailable("msgw's store is unavailable; nothing was sent")
}
