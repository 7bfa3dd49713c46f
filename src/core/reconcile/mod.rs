//! Finds the final status of messages whose webhook never came: a message with no
//! final status some time after sending is polled with the `status` operation,
//! with backoff, until it is final or its lifetime is over. What a poll learns
//! becomes an event with source `poll`. Sends whose outcome stayed unknown past their
//! settle window are resolved the same way (`unsettled`).

mod unsettled;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::base::parse;
use crate::core::dispatch::Dispatcher;
use crate::core::domain::{
    ClientId, DeliveryReport, Error, EventSource, NewEvent, Operation, Output, Priority,
    StatusReport,
};
use crate::core::events::EventLog;
use crate::core::periodic::Periodic;
use crate::core::ports::store::{PendingMessage, Store};

/// When and how often to poll: `msgw serve`'s `--reconcile-*` options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct ReconcileConfig {
    /// How often msgw looks for messages due for a poll.
    #[arg(long = "reconcile-interval", env = "MSGW_RECONCILE_INTERVAL", default_value = "5s", value_parser = parse::positive_duration)]
    pub interval: Duration,
    /// A sent message with no final status this long after sending is polled with
    /// `status` (the store schedules it); later polls back off from it.
    #[arg(long = "reconcile-after", env = "MSGW_RECONCILE_AFTER", default_value = "5m", value_parser = parse::positive_duration)]
    pub first_after: Duration,
    /// Longest wait between two polls of one message.
    #[arg(long = "reconcile-max-backoff", env = "MSGW_RECONCILE_MAX_BACKOFF", default_value = "30m", value_parser = parse::positive_duration)]
    pub max_backoff: Duration,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        parse::defaults()
    }
}

/// Status queries sent to the gateway in one envelope at most (fewer when
/// `MSGW_UPSTREAM_BATCH_MAX` is lower).
const POLL_BATCH: usize = 50;

/// How long a taken message is left to the replica that took it: it reschedules the
/// message after its poll; if it stopped before that, another replica polls it then.
const POLL_LEASE: Duration = Duration::from_secs(60);

/// Polls messages that have no final status.
pub struct Reconciler {
    store: Arc<dyn Store>,
    events: Arc<EventLog>,
    dispatcher: Dispatcher,
    config: ReconcileConfig,
}

impl Reconciler {
    /// A reconciler over these parts.
    pub fn new(
        store: Arc<dyn Store>,
        events: Arc<EventLog>,
        dispatcher: Dispatcher,
        config: ReconcileConfig,
    ) -> Self {
        Self {
            store,
            events,
            dispatcher,
            config,
        }
    }

    /// Messages polled in one call: they share one envelope.
    fn poll_batch(&self) -> u32 {
        u32::try_from(POLL_BATCH.min(self.dispatcher.batch_max())).unwrap_or(1)
    }

    /// Polls due messages every interval until `stop` turns true.
    pub async fn run(self, stop: watch::Receiver<bool>) {
        let mut ticks = Periodic::new(self.config.interval, stop);
        while ticks.next().await {
            // Drain everything due before waiting again.
            loop {
                match self.poll_due().await {
                    Ok(n) if n == self.poll_batch() as usize => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "reconcile: poll round failed");
                        break;
                    }
                }
            }
            loop {
                match self.resolve_unsettled().await {
                    Ok(n) if n == self.poll_batch() as usize => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "reconcile: resolving unknown outcomes failed");
                        break;
                    }
                }
            }
        }
    }

    /// Polls one batch of due messages; returns how many were due.
    pub async fn poll_due(&self) -> Result<usize, Error> {
        let now = Utc::now();
        let due = self
            .store
            .take_due_for_poll(now, self.poll_batch(), POLL_LEASE)
            .await
            .map_err(store_error)?;
        if due.is_empty() {
            return Ok(0);
        }
        let ops = due
            .iter()
            .map(|m| Operation::GetMessageStatus(m.client_id))
            .collect();
        let results = match self
            .dispatcher
            // Background polls wait behind callers' sends (the bulk share keeps them
            // moving): a lost webhook can wait, a code cannot.
            .execute_all(ops, Priority::Bulk.into(), None, None)
            .await
        {
            Ok(results) => results,
            Err(e) => {
                for m in &due {
                    self.reschedule(m, now).await;
                }
                return Err(e);
            }
        };
        for (message, result) in due.iter().zip(results) {
            match result.map(|executed| executed.output) {
                Ok(Output::Status(report)) => {
                    let event = NewEvent {
                        report: delivery_report(report),
                        received_at: crate::core::domain::received_now(),
                        source: EventSource::Poll,
                    };
                    let is_final = event.is_final();
                    if let Err(e) = self.events.append(event).await {
                        tracing::error!(client_id = message.client_id.get(), error = %e, "reconcile: cannot store polled status");
                    }
                    if !is_final {
                        self.reschedule(message, now).await;
                    }
                }
                Ok(other) => {
                    tracing::error!(
                        client_id = message.client_id.get(),
                        ?other,
                        "reconcile: unexpected answer to a status query"
                    );
                    self.reschedule(message, now).await;
                }
                Err(e) => {
                    tracing::debug!(client_id = message.client_id.get(), error = %e, "reconcile: status query refused");
                    self.reschedule(message, now).await;
                }
            }
        }
        Ok(due.len())
    }

    async fn reschedule(&self, m: &PendingMessage, now: DateTime<Utc>) {
        let next = next_poll(m, now, self.config);
        if next.is_none() {
            tracing::info!(
                client_id = m.client_id.get(),
                polls = m.polls + 1,
                "reconcile: lifetime over without a final status; polling stops"
            );
        }
        if let Err(e) = self.store.schedule_poll(m.client_id, next).await {
            tracing::error!(client_id = m.client_id.get(), error = %e, "reconcile: cannot schedule the next poll");
        }
    }
}

/// The next poll: the first delay doubled per poll made, capped, and never after the
/// message's lifetime (plus one first delay for the gateway's last word).
fn next_poll(
    m: &PendingMessage,
    now: DateTime<Utc>,
    config: ReconcileConfig,
) -> Option<DateTime<Utc>> {
    let factor = 2u32.saturating_pow(m.polls.min(20));
    let delay = config
        .first_after
        .saturating_mul(factor)
        .min(config.max_backoff);
    let next = now + chrono::Duration::from_std(delay).ok()?;
    let end = m.sent_at + chrono::Duration::from_std(m.lifetime + config.first_after).ok()?;
    (next <= end).then_some(next)
}

fn delivery_report(r: StatusReport) -> DeliveryReport {
    let success = r
        .status
        .as_ref()
        .and_then(|s| s.known)
        .is_some_and(|s| s.is_success());
    DeliveryReport {
        client_id: ClientId::new(r.id).ok(),
        msg_id: r.msg_id,
        channel_raw: r.channel_raw,
        status: r.status,
        success,
        error: None,
        updated: r.updated,
        reply: None,
        duration_secs: None,
        request_id: None,
        replies: r.replies,
    }
}

fn store_error(e: crate::core::ports::store::StoreError) -> Error {
    e.unavailable("msgw's store is unavailable: no messages to poll this round")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::domain::ClientId;

    #[test]
    fn polls_back_off_and_stop_after_the_lifetime() {
        let sent = Utc::now();
        let config = ReconcileConfig {
            interval: Duration::from_secs(1),
            first_after: Duration::from_secs(60),
            max_backoff: Duration::from_secs(600),
        };
        let m = |polls| PendingMessage {
            client_id: ClientId::new(1).unwrap(),
            sent_at: sent,
            lifetime: Duration::from_secs(3600),
            polls,
        };
        let at = |polls, now| next_poll(&m(polls), now, config).map(|t| (t - now).num_seconds());
        assert_eq!(at(0, sent), Some(60));
        assert_eq!(at(1, sent), Some(120));
        assert_eq!(at(3, sent), Some(480));
        assert_eq!(at(10, sent), Some(600), "capped");
        let late = sent + chrono::Duration::seconds(3600);
        assert_eq!(at(10, late), None, "past lifetime + first delay");
    }
}
