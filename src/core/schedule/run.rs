//! Sending scheduled messages at their time: a pass takes the due ones (one replica
//! each: `FOR UPDATE SKIP LOCKED` on PostgreSQL, the single writer on SQLite, and a
//! lease after which another replica takes what a stopped one took) and hands each to
//! dispatch, which coalesces them into envelopes. The loop wakes at the next due time:
//! the store's, or sooner when this replica, or another one the store heard of
//! (PostgreSQL's NOTIFY), schedules one sooner; and it looks at least every
//! [`LOOK_EVERY`], so a lost notification costs at most that.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Semaphore, watch};

use super::Scheduler;
use crate::core::dispatch::{Owned, ScheduledKey};
use crate::core::domain::{ClientId, Error, Operation, Output};
use crate::core::ports::store::{
    ClaimChange, ClaimReply, ClaimState, DueScheduled, Settlement, StoreError,
};

/// Due messages one pass takes at most (and leaves one replica sends at once).
pub const PASS_MAX: u32 = 1000;

/// How long a replica that took a due message has to send it before another may take
/// it (a stopped replica's): longer than a send takes, upstream timeout included.
pub const LEASE: Duration = Duration::from_secs(30);

/// How often the loop looks at the store without a wake-up.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long after its time a message that could not reach the gateway (nothing sent)
/// is still tried; then it is reported refused.
const GIVE_UP_AFTER: chrono::TimeDelta = chrono::TimeDelta::hours(1);

impl Scheduler {
    /// Sends due messages until `stop` turns true.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut hint = self.next_due.subscribe();
        let mut elsewhere = self.store.scheduled_heard();
        let leaving = Arc::new(Semaphore::new(PASS_MAX as usize));
        let forgetting = self.forgetting.lock().ok().and_then(|mut f| f.take());
        if let Some(forgetting) = forgetting {
            tokio::spawn(forget_in_groups(self.store.clone(), forgetting));
        }
        loop {
            if *stop.borrow() {
                break;
            }
            // Reset before the pass: a message scheduled from now on sets it again.
            self.next_due.send_replace(None);
            hint.borrow_and_update();
            elsewhere.borrow_and_update();
            let next = match self.pass(&leaving).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler: cannot read due messages; trying again shortly");
                    None
                }
            };
            let now = Utc::now();
            let mut wake = now + chrono::TimeDelta::from_std(LOOK_EVERY).unwrap_or_default();
            for sooner in [next, *hint.borrow_and_update()].into_iter().flatten() {
                wake = wake.min(sooner);
            }
            let sleep = (wake - now).to_std().unwrap_or_default();
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                _ = hint.changed() => {}
                () = heard_sooner(&mut elsewhere, wake) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// Takes what is due and starts sending it; when the next message is due.
    async fn pass(
        self: &Arc<Self>,
        leaving: &Arc<Semaphore>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        loop {
            let room = u32::try_from(leaving.available_permits())
                .unwrap_or(PASS_MAX)
                .min(PASS_MAX);
            if room == 0 {
                break;
            }
            let due = self
                .store
                .take_due_scheduled(Utc::now(), room, LEASE)
                .await?;
            let taken = due.len();
            for message in due {
                let Ok(permit) = leaving.clone().acquire_owned().await else {
                    break;
                };
                let this = self.clone();
                tokio::spawn(async move {
                    this.leave(message).await;
                    drop(permit);
                });
            }
            if taken < room as usize {
                break;
            }
        }
        let summary = self.store.scheduled_summary().await?;
        self.metrics
            .schedule
            .scheduled_pending
            .set(i64::try_from(summary.pending).unwrap_or(i64::MAX));
        Ok(summary.next_due)
    }

    /// Sends one due message and settles what the store keeps of it.
    async fn leave(&self, message: DueScheduled) {
        let id = message.id;
        let (op, lane) = match super::kept::decode(&message.payload) {
            Ok((op, lane)) if op.idempotency_key() == Some(id) => (op, lane),
            Ok((op, _)) => {
                let reason = format!(
                    "the kept request of id {id} reads back as another message ({})",
                    op.rpc_name()
                );
                return self.refuse(&message, None, reason).await;
            }
            Err(e) => {
                let reason = format!("the kept request is no longer valid: {e}");
                return self.refuse(&message, None, reason).await;
            }
        };
        let lateness = (Utc::now() - message.send_at).to_std().unwrap_or_default();
        self.metrics
            .schedule
            .scheduled_lateness
            .observe(lateness.as_secs_f64());
        let key = ScheduledKey {
            send_at: message.send_at,
            leaving: true,
        };
        let result = loop {
            match self
                .dispatcher
                .execute_scheduled(op.clone(), lane, None, message.caller.as_ref(), key)
                .await
            {
                Err(Error::Overloaded { retry_after }) => tokio::time::sleep(retry_after).await,
                other => break other,
            }
        };
        match result {
            Ok(executed) => {
                if let Output::Sent(receipt) = &executed.output
                    && receipt.scheduled_for.is_some()
                {
                    // Its claim was not taken over (it belongs to another caller's
                    // request): leave it for the lease to bring back.
                    tracing::warn!(
                        client_id = id.get(),
                        "scheduler: a due message's claim is still scheduled"
                    );
                    return;
                }
                if !executed.replayed {
                    self.metrics
                        .schedule
                        .scheduled_total
                        .with_label_values(&["left"])
                        .inc();
                }
                self.forget(id).await;
            }
            Err(Error::MessageCanceled { .. }) => self.forget(id).await,
            Err(
                e @ (Error::Unavailable { .. }
                | Error::DeadlineExceeded { .. }
                | Error::SendInProgress { .. }),
            ) => {
                let unknown = matches!(
                    e,
                    Error::Unavailable {
                        outcome_unknown: true,
                        ..
                    } | Error::DeadlineExceeded {
                        outcome_unknown: true
                    } | Error::SendInProgress { .. }
                );
                if Utc::now() - message.send_at < GIVE_UP_AFTER || unknown {
                    // Taken again after the lease: a claim left unknown is resolved by
                    // `status` then (and by reconcile), never sent again blindly.
                    tracing::warn!(client_id = id.get(), error = %e, "scheduler: a due message did not leave; trying again after the lease");
                    return;
                }
                self.refuse(&message, Some(&op), e.to_string()).await;
            }
            Err(e) => self.refuse(&message, Some(&op), e.to_string()).await,
        }
    }

    /// A due message that cannot leave: its claim released if still scheduled (so it
    /// is not kept forever), a final REJECTED event with `reason`, its request dropped.
    async fn refuse(&self, message: &DueScheduled, op: Option<&Operation>, reason: String) {
        let id = message.id;
        tracing::info!(
            client_id = id.get(),
            reason,
            "scheduler: a scheduled message was refused as it left"
        );
        self.release_scheduled(id, &reason).await;
        self.metrics
            .schedule
            .scheduled_total
            .with_label_values(&["failed"])
            .inc();
        self.tell(id, op, "REJECTED", Some(reason), Utc::now())
            .await;
        self.forget(id).await;
    }

    /// Releases the claim of `id` if it is still scheduled (a take-over, then a release).
    async fn release_scheduled(&self, id: ClientId, reason: &str) {
        let Some(claims) = self.dispatcher.claims() else {
            return;
        };
        let Ok(Some(record)) = claims.record(id).await else {
            return;
        };
        if !matches!(record.state, ClaimState::Scheduled { .. }) {
            return;
        }
        let take = ClaimChange::TakeOver {
            id,
            fingerprint: record.fingerprint,
            attempt: record.attempt,
            caller: record.caller,
            at: Utc::now(),
        };
        if let Ok(replies) = claims.apply(&[take]).await
            && let Some(ClaimReply::Claimed { attempt }) = replies.first()
        {
            let owned = Owned {
                id,
                attempt: *attempt,
            };
            let _ = claims
                .settle(vec![(owned, Settlement::Released(reason.to_owned()))])
                .await;
        }
    }

    /// Drops the kept request of `id` soon, with others.
    async fn forget(&self, id: ClientId) {
        // Only fails once the loop has stopped: the lease brings the request back, and
        // its claim answers it then.
        let _ = self.forgotten.send(id);
    }
}

/// Returns once the store heard of a message scheduled before `wake` (never, on a store
/// that hears nothing).
async fn heard_sooner(heard: &mut watch::Receiver<Option<DateTime<Utc>>>, wake: DateTime<Utc>) {
    loop {
        if heard.changed().await.is_err() {
            return std::future::pending().await;
        }
        if heard.borrow_and_update().is_some_and(|at| at < wake) {
            return;
        }
    }
}

/// Drops kept requests in groups (one store write for the many that leave in the same
/// second); a failure is logged: the lease brings them back, and their claims answer
/// them then.
async fn forget_in_groups(
    store: Arc<dyn crate::core::ports::store::Store>,
    mut ids: tokio::sync::mpsc::UnboundedReceiver<ClientId>,
) {
    let mut group = Vec::with_capacity(PASS_MAX as usize);
    while ids.recv_many(&mut group, PASS_MAX as usize).await > 0 {
        if let Err(e) = store.forget_scheduled(&group).await {
            tracing::warn!(ids = group.len(), error = %e, "scheduler: cannot drop sent messages' requests");
        }
        group.clear();
    }
}
