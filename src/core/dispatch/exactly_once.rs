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
//! | unknown, inside the backoff of its last `status` lookup ([`super::lookups`]) | `OUTCOME_UNKNOWN` with `RetryInfo`, nothing asked | `ALREADY_EXISTS` |
//!
//! A request cut while the gateway may hold it (the upstream timeout, a connection lost
//! after the body left) opens a settle window (`MSGW_UPSTREAM_SETTLE`), stored with the
//! claim: inside it the gateway's "not found" means "not yet", so nothing is sent and
//! the caller is told to retry; only after it does "not found" mean "never sent". A
//! claim left in flight by a stopped owner gets the window from when it turned stale.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::{sync::watch, time::Instant};

use super::answers::replay;
use super::lookups::{Resolving, lookup_later};
use super::{Executed, duration};
use crate::base::metrics::Metrics;
use crate::core::domain::{CallerName, ClientId, Error, Operation, Phone};
use crate::core::group_commit::GroupWriter;
use crate::core::ports::gateway::Gateway;
use crate::core::ports::store::{
    CheckedClaims, ClaimChange, ClaimRecord, ClaimReply, ClaimState, Fingerprint, Settlement,
    Store, StoreError,
};

/// How long past the upstream timeout a claim with no outcome still counts as in flight
/// (the outcome's own commit, a busy store): after that it counts as unknown.
pub const STALE_MARGIN: Duration = Duration::from_secs(5);

/// How long after its claim a call may still send with it: half the stale margin, so
/// its request, however long, ends before anyone may take the claim over.
pub const HELD_FOR: Duration = Duration::from_millis(2500);

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

/// What a keyed operation does, given the claim its id already has.
#[derive(Debug)]
// Lives only during one envelope; boxing the answer would cost an allocation per operation.
#[allow(clippy::large_enum_variant)]
pub enum Decision {
    /// Answered without sending: a replay or a conflict.
    Answer(Result<Executed, Error>),
    /// Take the claim over at `attempt`; with `resolve`, ask the gateway's `status` first.
    TakeOver {
        /// The generation seen.
        attempt: u32,
        /// The earlier outcome is unknown: what the lookup starts from.
        resolve: Option<Resolving>,
    },
    /// Another call owns it: wait for its outcome, at most until it turns stale.
    Wait(DateTime<Utc>),
}

/// Settlements bound for one write, with the claims they settle.
#[derive(Default)]
struct Parted {
    owners: Vec<Owned>,
    changes: Vec<ClaimChange>,
}

impl Parted {
    fn with_capacity(n: usize) -> Self {
        Self {
            owners: Vec::with_capacity(n),
            changes: Vec::with_capacity(n),
        }
    }
}

/// Envelopes whose settlements one store write takes at most.
const SETTLE_MAX_ENVELOPES: usize = 64;

/// The claims of keyed operations, through the store.
#[derive(Debug, Clone)]
pub struct Claims {
    /// Reads stored answers back (replays).
    gateway: Arc<dyn Gateway>,
    store: Arc<dyn Store>,
    /// Group commit of settlements: envelopes that finish while one write runs share
    /// the next.
    settler: GroupWriter<Vec<ClaimChange>, Vec<ClaimReply>>,
    /// Rows per store write, by stage (`claims`, `settlements`).
    rows: prometheus::HistogramVec,
    /// Bumped whenever this process settles claims; waiting calls look again then.
    settled: Arc<watch::Sender<u64>>,
    stale_after: Duration,
    settle: Duration,
}

/// The fingerprint of a request: the hash of its canonical gateway operation.
pub fn fingerprint(gateway: &dyn Gateway, op: &Operation) -> Fingerprint {
    Fingerprint(Sha256::digest(gateway.canonical(op)).into())
}

impl Claims {
    /// Claims over `store`; a claim with no outcome `stale_after` after it was made
    /// counts as unknown; a cut request's outcome is open for `settle` after the cut.
    /// Starts the settlement writer: call inside the runtime.
    pub fn new(
        gateway: Arc<dyn Gateway>,
        store: Arc<dyn Store>,
        stale_after: Duration,
        settle: Duration,
        metrics: &Metrics,
    ) -> Self {
        let rows = metrics.dispatch.store_write_rows.clone();
        let writers = store.send_path_writers().max(1);
        let settler = GroupWriter::spawn_many(writers, SETTLE_MAX_ENVELOPES, {
            let (store, rows) = (store.clone(), rows.clone());
            move |groups: Vec<Vec<ClaimChange>>| {
                let (store, rows) = (store.clone(), rows.clone());
                async move {
                    let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
                    let changes: Vec<ClaimChange> = groups.into_iter().flatten().collect();
                    let replies = settle_retrying(&*store, &changes, &rows).await?;
                    let mut replies = replies.into_iter();
                    Ok(sizes
                        .into_iter()
                        .map(|n| replies.by_ref().take(n).collect())
                        .collect())
                }
            }
        });
        Self {
            gateway,
            store,
            settler,
            rows,
            settled: Arc::new(watch::channel(0).0),
            stale_after,
            settle,
        }
    }

    /// Groups of claims worth writing at once (the store's).
    pub fn writers(&self) -> usize {
        self.store.send_path_writers().max(1)
    }

    /// The end of the settle window of a request cut now.
    pub fn settle_until(&self) -> DateTime<Utc> {
        Utc::now() + duration(self.settle)
    }

    /// Claims in flight since before this at `now` are past their settle window too:
    /// their owner stopped, and the gateway has had the window to carry the request out.
    pub fn in_flight_before(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now - duration(self.stale_after) - duration(self.settle)
    }

    /// Wakes on every settlement of this process; subscribe before looking at a claim,
    /// so a settlement after the look wakes the wait.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.settled.subscribe()
    }

    /// The claim of `id`, if any.
    pub async fn record(&self, id: ClientId) -> Result<Option<ClaimRecord>, StoreError> {
        self.store.claim_of(id).await
    }

    /// Applies a group of claims and take-overs in one store transaction.
    pub async fn apply(&self, changes: &[ClaimChange]) -> Result<Vec<ClaimReply>, StoreError> {
        apply(&*self.store, changes, &self.rows, "claims").await
    }

    /// Applies a group of claims and reads which of `recipients` are on the suppression
    /// list, in one store round trip.
    pub async fn apply_checking(
        &self,
        changes: &[ClaimChange],
        recipients: &[Phone],
    ) -> Result<CheckedClaims, StoreError> {
        self.rows
            .with_label_values(&["claims"])
            .observe(changes.len() as f64);
        let checked = self.store.claim_checking(changes, recipients).await?;
        replies_match(&checked.replies, changes)?;
        Ok(checked)
    }

    /// Which of `recipients` are on the suppression list, for a group with no id to
    /// claim.
    pub async fn suppressed(&self, recipients: &[Phone]) -> Result<Vec<Phone>, StoreError> {
        self.store.suppressed(recipients).await
    }

    /// What `op` (keyed by `id`, hashed to `fingerprint`, `leaving` when it is a
    /// scheduled message leaving, called by `caller`) does with the claim `record` its
    /// id already has.
    pub fn decide(
        &self,
        op: &Operation,
        (id, fingerprint, leaving): (ClientId, Fingerprint, bool),
        caller: Option<&CallerName>,
        record: &ClaimRecord,
    ) -> Decision {
        let conflict = |msg_id: Option<&String>| {
            Decision::Answer(Err(Error::IdConflict {
                id: id.get(),
                msg_id: msg_id.cloned(),
            }))
        };
        let take_over = |resolve: Option<Resolving>| Decision::TakeOver {
            attempt: record.attempt,
            resolve,
        };
        let own = record.caller.as_ref() == caller;
        let same = own && record.fingerprint == fingerprint;
        match &record.state {
            ClaimState::Accepted(outcome) if same => {
                Decision::Answer(replay(&*self.gateway, op, id, outcome.clone()))
            }
            ClaimState::Accepted(outcome) if own => conflict(outcome.msg_id.as_ref()),
            ClaimState::Accepted(_) => conflict(None),
            ClaimState::Released { .. } => take_over(None),
            ClaimState::Scheduled { .. } if same && leaving => take_over(None),
            ClaimState::Scheduled { send_at } if same => {
                Decision::Answer(Ok(super::scheduled_receipt(id, *send_at, true)))
            }
            ClaimState::Canceled { .. } if same => {
                Decision::Answer(Err(Error::MessageCanceled { id: id.get() }))
            }
            _ if !same => conflict(None),
            // Matched above: a same request never gets here with these.
            ClaimState::Scheduled { .. } | ClaimState::Canceled { .. } => conflict(None),
            ClaimState::Unknown {
                lookups: Some(lookups),
                ..
            } if Utc::now() < lookups.next_at => {
                Decision::Answer(Err(lookup_later(id, *lookups, None)))
            }
            ClaimState::Unknown {
                settle_until,
                lookups,
            } => take_over(Some(Resolving {
                settle_until: settle_until.unwrap_or(DateTime::<Utc>::MIN_UTC),
                unresolved: lookups.map_or(0, |l| l.unresolved),
            })),
            ClaimState::InFlight { since } => {
                let stale_at = *since + duration(self.stale_after);
                if Utc::now() >= stale_at {
                    take_over(Some(Resolving {
                        settle_until: stale_at + duration(self.settle),
                        unresolved: 0,
                    }))
                } else {
                    Decision::Wait(stale_at)
                }
            }
        }
    }

    /// Waits until a settlement, the next poll or `stale_at`; false when the caller's
    /// deadline comes first.
    pub async fn wait(
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

    /// Records the outcomes of owned claims in one transaction (with the messages
    /// reconcile tracks), then wakes the calls waiting for them. A store failure is
    /// retried for [`SETTLE_RETRY_FOR`]; past that the claims stay in flight, turn
    /// unknown after the upstream timeout, and the next call with their id resolves
    /// them by `status`. `Err`: the claims whose outcome is not recorded, so that their
    /// callers are not told an outcome the store does not hold.
    pub async fn settle(&self, outcomes: Vec<(Owned, Settlement)>) -> Result<(), Vec<Owned>> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let at = Utc::now();
        // The outcomes of lookups go in a write of their own: they carry the backoff,
        // which the send path's group statements do not write.
        let (mut lookups, mut sends) = (Parted::default(), Parted::with_capacity(outcomes.len()));
        for (owned, settlement) in outcomes {
            let part = if matches!(settlement, Settlement::Unresolved { .. }) {
                &mut lookups
            } else {
                &mut sends
            };
            part.owners.push(owned);
            part.changes.push(ClaimChange::Settle {
                id: owned.id,
                attempt: owned.attempt,
                settlement,
                at,
            });
        }
        let (looked, sent) = tokio::join!(
            async {
                if lookups.changes.is_empty() {
                    return Ok(Vec::new());
                }
                settle_retrying(&*self.store, &lookups.changes, &self.rows).await
            },
            async {
                if sends.changes.is_empty() {
                    return Ok(Vec::new());
                }
                self.settler
                    .submit(std::mem::take(&mut sends.changes))
                    .await
            }
        );
        let mut unrecorded = Vec::new();
        for (owners, written) in [(lookups.owners, looked), (sends.owners, sent)] {
            match written {
                Ok(replies) => {
                    for (owned, reply) in owners.into_iter().zip(replies) {
                        match reply {
                            ClaimReply::Settled => {}
                            ClaimReply::Superseded => tracing::warn!(
                                client_id = owned.id.get(),
                                "claim taken over by another call before its outcome was recorded"
                            ),
                            other => tracing::error!(
                                client_id = owned.id.get(),
                                ?other,
                                "unexpected claim reply"
                            ),
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(
                        claims = owners.len(),
                        error = %e,
                        "cannot record the outcome of sends; a retry will ask the gateway's status"
                    );
                    unrecorded.extend(owners);
                }
            }
        }
        self.settled.send_modify(|generation| *generation += 1);
        if unrecorded.is_empty() {
            Ok(())
        } else {
            Err(unrecorded)
        }
    }

    /// [`Claims::settle`] without waiting: for claims nobody waits on (their caller left).
    pub fn settle_later(&self, outcomes: Vec<(Owned, Settlement)>) {
        if outcomes.is_empty() {
            return;
        }
        let this = self.clone();
        // Nobody to tell: a failure is logged, and the claims resolve by `status`.
        tokio::spawn(async move {
            let _ = this.settle(outcomes).await;
        });
    }
}

/// Applies `changes` in one store call, counting its rows under `stage`.
/// How long a settlement group that failed is written again before its calls are told
/// the outcome is unknown: the stale margin, within which nobody takes the claims over.
pub const SETTLE_RETRY_FOR: Duration = STALE_MARGIN;

/// Writes a settlement group, again after a failure (a settlement is a compare-and-set
/// on its claim's attempt, so writing it twice is harmless) until [`SETTLE_RETRY_FOR`]
/// has passed since the first try.
async fn settle_retrying(
    store: &dyn Store,
    changes: &[ClaimChange],
    rows: &prometheus::HistogramVec,
) -> Result<Vec<ClaimReply>, StoreError> {
    let give_up = Instant::now() + SETTLE_RETRY_FOR;
    let mut pause = Duration::from_millis(50);
    loop {
        match apply(store, changes, rows, "settlements").await {
            Ok(replies) => return Ok(replies),
            Err(e) if Instant::now() + pause < give_up => {
                tracing::warn!(error = %e, changes = changes.len(), "recording outcomes failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

async fn apply(
    store: &dyn Store,
    changes: &[ClaimChange],
    rows: &prometheus::HistogramVec,
    stage: &str,
) -> Result<Vec<ClaimReply>, StoreError> {
    rows.with_label_values(&[stage])
        .observe(changes.len() as f64);
    let replies = store.apply_claims(changes).await?;
    replies_match(&replies, changes)?;
    Ok(replies)
}

/// A store that answered a group with another number of replies than changes failed.
fn replies_match(replies: &[ClaimReply], changes: &[ClaimChange]) -> Result<(), StoreError> {
    if replies.len() == changes.len() {
        return Ok(());
    }
    Err(StoreError::Append(format!(
        "{} claim replies for {} changes",
        replies.len(),
        changes.len()
    )))
}
