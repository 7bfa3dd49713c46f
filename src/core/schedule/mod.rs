//! Scheduled sends: a send with a `send_at` ahead is claimed and kept in the store, and
//! answered at once; at its time one replica takes it (`run.rs`) and sends it through
//! dispatch like any send, as a take-over of its claim. The claims table stays the only
//! arbiter of "at most once per id":
//!
//! | the id's claim | same request (same time) | different request |
//! |---|---|---|
//! | none | claim it as scheduled, keep the request | — |
//! | scheduled | answer the scheduled receipt (replayed) | `ALREADY_EXISTS` |
//! | canceled | `FAILED_PRECONDITION` `MESSAGE_CANCELED` | `ALREADY_EXISTS` |
//! | left (any other state) | as any retry of a send (replay, wait, resolve) | `ALREADY_EXISTS` |
//!
//! A request whose `send_at` has passed is a send now, unless its id is claimed by the
//! same scheduled request (a retry after its time): then it is that retry.
//! Cancelling is a compare-and-set from scheduled to canceled; leaving is a
//! compare-and-set of the claim's generation: exactly one of them wins.
//!
//! The request is kept in core's own form (`kept/`), written and read back here.

pub(crate) mod kept;
mod run;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::base::metrics::Metrics;
use crate::core::dispatch::{
    Dispatcher, Executed, Lanes, ScheduledKey, scheduled_fingerprint, scheduled_receipt,
};
use crate::core::domain::{
    CallerName, ClientId, DeliveryReport, Error, EventSource, NewEvent, Operation, Priority,
    ReportedStatus, StatusReport,
};
use crate::core::events::EventLog;
use crate::core::ports::store::{ClaimState, NewScheduled, ScheduleReply, Store, StoreError};

pub use run::LOOK_EVERY;

/// How far ahead a send may be scheduled.
pub const MAX_AHEAD: chrono::TimeDelta = chrono::TimeDelta::days(35);

/// When a send is to leave, as its caller asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timed {
    /// When it is to leave.
    pub send_at: DateTime<Utc>,
}

/// A message cancelled before it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Canceled {
    /// The id.
    pub id: ClientId,
    /// When it was to leave.
    pub send_at: DateTime<Utc>,
    /// When it was cancelled.
    pub at: DateTime<Utc>,
}

/// Keeps, cancels and sends scheduled messages.
pub struct Scheduler {
    dispatcher: Dispatcher,
    store: Arc<dyn Store>,
    events: Arc<EventLog>,
    /// The earliest time this replica scheduled a message for since its last pass.
    next_due: watch::Sender<Option<DateTime<Utc>>>,
    /// Ids whose kept request can go: dropped in groups by the loop (`run.rs`).
    forgotten: tokio::sync::mpsc::UnboundedSender<ClientId>,
    forgetting: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<ClientId>>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scheduler(..)")
    }
}

impl Scheduler {
    /// A scheduler sending through `dispatcher`, keeping messages in `store`, telling
    /// `events`.
    pub fn new(dispatcher: Dispatcher, store: Arc<dyn Store>, events: Arc<EventLog>) -> Arc<Self> {
        let metrics = dispatcher.metrics().clone();
        let (forgotten, forgetting) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(Self {
            forgotten,
            forgetting: std::sync::Mutex::new(Some(forgetting)),
            dispatcher,
            store,
            events,
            next_due: watch::channel(None).0,
            metrics,
        })
    }

    /// The dispatcher sends go through.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// Runs the operations of one call of `caller`, each with its time when it has one:
    /// timed ones are kept or sent as their time says, the rest go to the gateway
    /// together. (Status queries are answered by core/queries, which knows what msgw
    /// keeps, before they would get here.)
    pub async fn execute_all(
        &self,
        ops: Vec<(Operation, Option<Timed>)>,
        lanes: Lanes,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
    ) -> Result<Vec<Result<Executed, Error>>, Error> {
        let mut results: Vec<Option<Result<Executed, Error>>> = ops.iter().map(|_| None).collect();
        let mut plain = Vec::new();
        let mut timed = Vec::new();
        for (i, (op, time)) in ops.into_iter().enumerate() {
            match time {
                Some(time) => timed.push((i, op, time)),
                None => plain.push((i, op)),
            }
        }
        let lanes = &lanes;
        let sends = join_all(timed.into_iter().map(|(i, op, time)| async move {
            (i, self.send(op, time, lanes.of(i), deadline, caller).await)
        }));
        let (indices, plain): (Vec<usize>, Vec<Operation>) = plain.into_iter().unzip();
        let plain_lanes = match lanes {
            Lanes::All(lane) => Lanes::All(*lane),
            Lanes::Each(_) => Lanes::Each(indices.iter().map(|&i| lanes.of(i)).collect()),
        };
        let now = async {
            if plain.is_empty() {
                return Ok(Vec::new());
            }
            self.dispatcher
                .execute_all(plain, plain_lanes, deadline, caller)
                .await
        };
        let (sent, now) = tokio::join!(sends, now);
        for (i, result) in sent {
            results[i] = Some(result);
        }
        for (i, result) in indices.into_iter().zip(now?) {
            results[i] = Some(result);
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Internal("operation left unanswered".into()))))
            .collect())
    }

    /// One send with a time: kept when its time is ahead, else sent now (or answered as
    /// the retry of the scheduled request it repeats).
    async fn send(
        &self,
        op: Operation,
        time: Timed,
        lane: Priority,
        deadline: Option<Instant>,
        caller: Option<&CallerName>,
    ) -> Result<Executed, Error> {
        let Some(id) = op.idempotency_key() else {
            return Err(Error::Internal(format!(
                "a timed operation without an id: {op:?}"
            )));
        };
        let fingerprint = scheduled_fingerprint(self.dispatcher.gateway(), &op, time.send_at);
        let key = ScheduledKey {
            send_at: time.send_at,
            leaving: false,
        };
        let now = Utc::now();
        if time.send_at <= now {
            let record = self.store.claim_of(id).await.map_err(store_error)?;
            return match record {
                Some(r) if r.fingerprint == fingerprint && r.caller.as_ref() == caller => {
                    self.dispatcher
                        .execute_scheduled(op, lane, deadline, caller, key)
                        .await
                }
                // Not its retry: a send now (the dispatcher answers a conflict).
                Some(_) | None => {
                    let mut results = self
                        .dispatcher
                        .execute_all(vec![op], lane.into(), deadline, caller)
                        .await?;
                    results.pop().unwrap_or_else(|| {
                        Err(Error::Internal("no result for the operation".into()))
                    })
                }
            };
        }
        let new = NewScheduled {
            id,
            fingerprint,
            caller: caller.cloned(),
            send_at: time.send_at,
            payload: kept::encode(&op, lane)?,
            at: now,
        };
        match self.store.schedule(&new).await.map_err(store_error)? {
            ScheduleReply::Scheduled => {
                self.metrics
                    .schedule
                    .scheduled_total
                    .with_label_values(&["scheduled"])
                    .inc();
                self.next_due.send_if_modified(|next| {
                    let sooner = next.is_none_or(|n| time.send_at < n);
                    if sooner {
                        *next = Some(time.send_at);
                    }
                    sooner
                });
                self.tell(id, Some(&op), "SCHEDULED", None, now).await;
                Ok(scheduled_receipt(id, time.send_at, false))
            }
            ScheduleReply::Existing(record) => {
                let own = record.caller.as_ref() == caller;
                if !own || record.fingerprint != fingerprint {
                    return Err(Error::IdConflict {
                        id: id.get(),
                        msg_id: None,
                    });
                }
                match record.state {
                    ClaimState::Scheduled { send_at } => Ok(scheduled_receipt(id, send_at, true)),
                    ClaimState::Canceled { .. } => Err(Error::MessageCanceled { id: id.get() }),
                    // It has left: answered as any retry of the send.
                    ClaimState::InFlight { .. }
                    | ClaimState::Accepted(_)
                    | ClaimState::Released { .. }
                    | ClaimState::Unknown { .. } => {
                        self.dispatcher
                            .execute_scheduled(op, lane, deadline, caller, key)
                            .await
                    }
                }
            }
        }
    }

    /// Cancels `caller`'s scheduled message `id` if it has not left.
    pub async fn cancel(
        &self,
        id: ClientId,
        caller: Option<&CallerName>,
    ) -> Result<Canceled, Error> {
        let not_found = || Error::NoSuchMessage { id: id.get() };
        let record = self.store.claim_of(id).await.map_err(store_error)?;
        let Some(record) = record.filter(|r| r.caller.as_ref() == caller) else {
            return Err(not_found());
        };
        match record.state {
            ClaimState::Canceled { send_at, at } => return Ok(Canceled { id, send_at, at }),
            ClaimState::Scheduled { .. } => {}
            ClaimState::InFlight { .. }
            | ClaimState::Accepted(_)
            | ClaimState::Released { .. }
            | ClaimState::Unknown { .. } => return Err(Error::AlreadySent { id: id.get() }),
        }
        // As the store keeps it (milliseconds), so a second answer says the same.
        let now = Utc::now();
        let at = DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
        match self
            .store
            .cancel_scheduled(id, at)
            .await
            .map_err(store_error)?
        {
            Some(send_at) => {
                self.metrics
                    .schedule
                    .scheduled_total
                    .with_label_values(&["canceled"])
                    .inc();
                self.tell(id, None, "CANCELED", None, at).await;
                Ok(Canceled { id, send_at, at })
            }
            // It left, or another call cancelled it, since the look: look again.
            None => match self.store.claim_of(id).await.map_err(store_error)? {
                Some(r) => match r.state {
                    ClaimState::Canceled { send_at, at } => Ok(Canceled { id, send_at, at }),
                    // Not cancelled: it left since the look.
                    ClaimState::Scheduled { .. }
                    | ClaimState::InFlight { .. }
                    | ClaimState::Accepted(_)
                    | ClaimState::Released { .. }
                    | ClaimState::Unknown { .. } => Err(Error::AlreadySent { id: id.get() }),
                },
                None => Err(not_found()),
            },
        }
    }

    /// Appends msgw's own event of message `id` (`op`, when known, names its channel).
    async fn tell(
        &self,
        id: ClientId,
        op: Option<&Operation>,
        status: &str,
        error: Option<String>,
        at: DateTime<Utc>,
    ) {
        let channel = op.and_then(Operation::delivery).map(|(_, c, _)| c);
        let event = NewEvent {
            report: DeliveryReport {
                client_id: Some(id),
                msg_id: None,
                channel_raw: channel.map(|c| c.as_str().to_owned()),
                status: Some(ReportedStatus::new(status.to_owned())),
                success: false,
                error,
                updated: Some(at),
                reply: None,
                duration_secs: None,
                request_id: None,
                replies: Vec::new(),
            },
            received_at: chrono::SubsecRound::trunc_subsecs(at, 3),
            source: EventSource::Msgw,
        };
        // The claim is what counts; an event lost to a store failure is logged.
        if let Err(e) = self.events.append(event).await {
            tracing::error!(client_id = id.get(), status, error = %e, "cannot store a scheduled message's event");
        }
    }
}

/// The status msgw itself holds of message `id`: scheduled or cancelled (the gateway
/// does not know it yet, or ever); `None` for any other.
pub async fn own_status(store: &dyn Store, id: ClientId) -> Result<Option<StatusReport>, Error> {
    let Some(record) = store.claim_of(id).await.map_err(store_error)? else {
        return Ok(None);
    };
    let (status, updated) = match record.state {
        ClaimState::Scheduled { send_at } => ("SCHEDULED", send_at),
        ClaimState::Canceled { at, .. } => ("CANCELED", at),
        // Nothing reached the gateway: a scheduled message refused as it left has
        // msgw's own final event saying why (the gateway would not know the id).
        ClaimState::Released { .. } => {
            let last = store.last_event_of(id).await.map_err(store_error)?;
            return Ok(last
                .filter(|e| e.event.source == EventSource::Msgw)
                .map(|e| e.event.report.into()));
        }
        // It left: the gateway's status is the message's.
        ClaimState::InFlight { .. } | ClaimState::Accepted(_) | ClaimState::Unknown { .. } => {
            return Ok(None);
        }
    };
    Ok(Some(StatusReport {
        id: id.get(),
        msg_id: None,
        channel_raw: None,
        channel: None,
        status: Some(ReportedStatus::new(status.to_owned())),
        updated: Some(updated),
        replies: Vec::new(),
        raw: serde_json::json!({ "id": id.get().to_string(), "status": status }),
    }))
}

/// The answer when the store fails.
fn store_error(e: StoreError) -> Error {
    e.unavailable("msgw's store is unavailable; nothing was scheduled or sent")
}
