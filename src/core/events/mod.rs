//! The event log's live side: appends in cursor order, fans events out to
//! subscribers, and lets each subscriber replay from the store, so a slow or
//! reconnecting subscriber neither blocks others nor misses anything.
//!
//! The live channel carries every event in cursor order without a gap: this
//! replica's own appends go straight in when they are next in line; everything else
//! (other replicas' appends, announced by the store) is read from the store first.
//!
//! The log also holds the suppression list's changes (opt-outs): a report's replies
//! that are keywords change the list as the report is stored, in its transaction, and
//! callers' changes are appended here too, so every change has its place in the one
//! cursor order. Only subscribers that ask for them get them.

use std::{collections::HashSet, sync::Arc, time::Duration};

use chrono::Utc;
use tokio::sync::{Mutex, broadcast, watch};

use crate::base::metrics::Metrics;
use crate::core::domain::{
    CallerName, Channel, ClientId, Cursor, Error, Keywords, LogEvent, NewEvent, StatusEvent,
    SuppressionChange, UnavailableCause,
};
use crate::core::group_commit::GroupWriter;
use crate::core::held::CallAccount;
use crate::core::periodic::{Leased, Periodic};
use crate::core::ports::store::{Appended, LogAppend, Retention, Store, StoreError};

mod intake;
mod subscription;

pub use intake::{Intake, Refused, Taken};
pub use subscription::Subscription;

/// Where a subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// With the next event appended.
    Live,
    /// Just after this cursor.
    After(Cursor),
    /// At the oldest retained event.
    Oldest,
}

/// Which events a subscriber wants; empty sets mean all.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Client ids.
    pub ids: HashSet<ClientId>,
    /// Gateway message ids.
    pub msg_ids: HashSet<String>,
    /// Channels.
    pub channels: HashSet<Channel>,
    /// Only final statuses.
    pub final_only: bool,
    /// Only events of messages this caller sent (`None`: every caller's).
    pub sender: Option<CallerName>,
    /// Also the suppression list's changes (the filters above are the statuses' only).
    pub suppressions: bool,
}

impl Filter {
    /// Whether `e` passes the filter.
    pub fn matches(&self, e: &LogEvent) -> bool {
        match e {
            LogEvent::Status(e) => self.matches_status(e),
            LogEvent::Suppression(_) => self.suppressions,
        }
    }

    fn matches_status(&self, e: &StatusEvent) -> bool {
        let r = &e.event.report;
        (self.ids.is_empty() || r.client_id.is_some_and(|id| self.ids.contains(&id)))
            && (self.msg_ids.is_empty()
                || r.msg_id.as_ref().is_some_and(|m| self.msg_ids.contains(m)))
            && (self.channels.is_empty() || r.channel().is_some_and(|c| self.channels.contains(&c)))
            && (!self.final_only || e.event.is_final())
            && self
                .sender
                .as_ref()
                .is_none_or(|s| e.caller.as_ref() == Some(s))
    }
}

/// Events the follower reads from the store per query to publish them live.
const CATCH_UP_PAGE: u32 = 512;

/// Events committed in one transaction at most. Under load, webhooks that arrive
/// while a commit is running share the next one (group commit).
const MAX_GROUP: usize = 256;

/// The event log: the store plus the in-memory fan-out.
pub struct EventLog {
    store: Arc<dyn Store>,
    live: Arc<Tail>,
    // One writer task appends; its groups reach the fan-out in cursor order.
    writer: GroupWriter<LogAppend, Appended>,
    /// The replies that change the suppression list.
    keywords: Keywords,
    closing: watch::Sender<bool>,
    metrics: Arc<Metrics>,
}

/// The live channel and the newest cursor published on it.
struct Tail {
    channel: broadcast::Sender<Arc<LogEvent>>,
    /// Read from the store before the log takes its first append: an append is either
    /// at or before it (and replayed from the store) or published after it.
    published: Mutex<Cursor>,
}

impl Tail {
    /// Publishes this replica's own appended events that are next in line; anything
    /// after a gap is left to [`follow_store`], which reads it from the store.
    async fn publish_appended(&self, stored: &[LogEvent]) {
        let mut last = self.published.lock().await;
        for e in stored {
            if e.cursor() <= *last {
                continue;
            }
            if e.cursor() != last.next() {
                return;
            }
            // No receiver is fine: subscribers replay from the store.
            let _ = self.channel.send(Arc::new(e.clone()));
            *last = e.cursor();
        }
    }

    /// Reads from the store and publishes everything up to `target`. The store is read
    /// without holding the tail, so this replica's own appends are not held up by it.
    async fn catch_up(&self, store: &dyn Store, target: Cursor) -> Result<(), StoreError> {
        let mut last = *self.published.lock().await;
        while last < target {
            let page = store.events_after(last, CATCH_UP_PAGE).await?;
            let short = page.len() < CATCH_UP_PAGE as usize;
            let mut current = self.published.lock().await;
            // Own appends may have gone out meanwhile: publish only what lies beyond.
            // Cursors the store skips were pruned: nothing to wait for.
            for e in page {
                if e.cursor() > *current {
                    *current = e.cursor();
                    let _ = self.channel.send(Arc::new(e));
                }
            }
            if short {
                *current = (*current).max(target);
            }
            last = *current;
        }
        Ok(())
    }
}

/// Publishes what the store announces (other replicas' appends, or own ones that
/// came after a gap) until the log closes. A failed read is retried: the target
/// stays until it is published.
async fn follow_store(store: Arc<dyn Store>, tail: Arc<Tail>, mut closing: watch::Receiver<bool>) {
    let mut appended = store.appended();
    let mut retry = Duration::from_millis(50);
    loop {
        let target = *appended.borrow_and_update();
        match tail.catch_up(store.as_ref(), target).await {
            Ok(()) => {
                retry = Duration::from_millis(50);
                tokio::select! {
                    changed = appended.changed() => if changed.is_err() { return },
                    _ = closing.wait_for(|c| *c) => return,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?retry, "event log: cannot read new events for live subscribers");
                tokio::select! {
                    () = tokio::time::sleep(retry) => {}
                    _ = closing.wait_for(|c| *c) => return,
                }
                retry = (retry * 2).min(Duration::from_secs(2));
            }
        }
    }
}

fn store_error(e: StoreError) -> Error {
    e.unavailable("msgw's event store is unavailable")
}

fn shutting_down() -> Error {
    Error::Unavailable {
        cause: UnavailableCause::ShuttingDown,
        outcome_unknown: false,
        detail: "msgw is shutting down: reconnect and resume after the last cursor you processed"
            .into(),
    }
}

impl EventLog {
    /// The event log over `store`, from where the store stands; `fan_out` events are
    /// kept in memory for live subscribers; replies that are `keywords` change the
    /// suppression list.
    pub async fn open(
        store: Arc<dyn Store>,
        fan_out: usize,
        metrics: Arc<Metrics>,
        keywords: Keywords,
    ) -> Result<Arc<Self>, StoreError> {
        // Before the writer starts: an own append stored before the tail was known
        // would be counted as published without ever going out live.
        let latest = store.latest_cursor().await?;
        let (channel, _) = broadcast::channel(fan_out.max(16));
        let live = Arc::new(Tail {
            channel,
            published: Mutex::new(latest),
        });
        let (closing, _) = watch::channel(false);
        let writer = GroupWriter::spawn(MAX_GROUP, {
            let (store, live, metrics) = (store.clone(), live.clone(), metrics.clone());
            move |events| append_group(store.clone(), live.clone(), metrics.clone(), events)
        });
        tokio::spawn(follow_store(
            store.clone(),
            live.clone(),
            closing.subscribe(),
        ));
        Ok(Arc::new(Self {
            store,
            live,
            writer,
            keywords,
            closing,
            metrics,
        }))
    }

    /// Durably appends an event, with the suppression list changes its keyword replies
    /// make, and publishes them; `None` for a duplicate.
    pub async fn append(&self, event: NewEvent) -> Result<Option<StatusEvent>, StoreError> {
        let keywords = self.keywords.replies_of(&event.report);
        let append = LogAppend::Report { event, keywords };
        Ok(self.writer.submit(append).await?.status)
    }

    /// Durably makes a caller's change of the suppression list, with its event, and
    /// publishes it: what it did (see [`Appended::entry`], [`Appended::superseded`]).
    pub async fn change_suppression(
        &self,
        change: SuppressionChange,
    ) -> Result<Appended, StoreError> {
        self.writer.submit(LogAppend::Change(change)).await
    }

    /// Ends every subscription with UNAVAILABLE (shutdown), and refuses new ones.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Starts a subscription; events (or the error that ends it) arrive on it. What
    /// it holds on its way to the subscriber is counted on `account`.
    pub async fn subscribe(
        self: &Arc<Self>,
        start: Start,
        filter: Filter,
        account: CallAccount,
    ) -> Result<Subscription, Error> {
        if *self.closing.borrow() {
            return Err(shutting_down());
        }
        // Subscribe before reading the store: whatever is appended from now on is
        // either in the replay or in the channel, so nothing falls in between.
        let live = self.live.channel.subscribe();
        let after = self.start_cursor(start).await?;
        let (tx, subscription) = Subscription::channel();
        let log = Arc::clone(self);
        tokio::spawn(async move {
            log.metrics.events.open_streams.inc();
            let metrics = log.metrics.clone();
            let _open = scopeguard(move || metrics.events.open_streams.dec());
            let mut closing = log.closing.subscribe();
            // A filtered stream may never send again: notice the client leaving
            // without waiting for the next matching event.
            let ended = tokio::select! {
                r = subscription::pump(log.store.as_ref(), after, &filter, live, &tx, &account) => r,
                _ = closing.wait_for(|c| *c) => Err(shutting_down()),
                () = tx.closed() => Ok(()),
            };
            if let Err(e) = ended {
                // The client may be gone already; nothing more to do then.
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(subscription)
    }

    async fn start_cursor(&self, start: Start) -> Result<Cursor, Error> {
        let latest = self.store.latest_cursor().await.map_err(store_error)?;
        match start {
            Start::Live => Ok(latest),
            Start::Oldest => Ok(self
                .store
                .oldest_cursor()
                .await
                .map_err(store_error)?
                .map_or(latest, Cursor::prev)),
            Start::After(cursor) => {
                let oldest = self.store.oldest_cursor().await.map_err(store_error)?;
                // Resuming after `cursor` needs every event from cursor + 1 on.
                let first_kept = oldest.unwrap_or(latest.next());
                if cursor > latest {
                    return Err(Error::CursorOutOfRange {
                        oldest_available: first_kept.prev().get(),
                        detail: format!(
                            "cursor {cursor} is ahead of the newest event ({latest}); the oldest cursor to resume after is {}",
                            first_kept.prev()
                        ),
                    });
                }
                if cursor.next() < first_kept {
                    return Err(Error::CursorOutOfRange {
                        oldest_available: first_kept.prev().get(),
                        detail: format!(
                            "events after cursor {cursor} are past the retention; the oldest cursor to resume after is {}",
                            first_kept.prev()
                        ),
                    });
                }
                Ok(cursor)
            }
        }
    }

    /// The final event of message `id` if one is retained, else its newest.
    pub async fn last_event_of(&self, id: ClientId) -> Result<Option<StatusEvent>, Error> {
        self.store.last_event_of(id).await.map_err(store_error)
    }

    /// The metrics the log records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Applies the retention every `every` until `stop` turns true, whenever `replica`
    /// holds the retention lease (one replica of those sharing the store at a time).
    pub async fn run_retention(
        self: Arc<Self>,
        retention: Retention,
        every: Duration,
        replica: String,
        stop: watch::Receiver<bool>,
    ) {
        let lease = Leased::new(self.store.clone(), "retention", replica, every);
        let mut ticks = Periodic::new(every, stop);
        while ticks.next().await {
            if !lease.held().await {
                continue;
            }
            match self.store.prune(retention, Utc::now()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(dropped = n, "event retention applied"),
                Err(e) => tracing::error!(error = %e, "event retention failed"),
            }
        }
    }
}

/// Commits one group of appends, then publishes the stored events in cursor order.
async fn append_group(
    store: Arc<dyn Store>,
    live: Arc<Tail>,
    metrics: Arc<Metrics>,
    appends: Vec<LogAppend>,
) -> Result<Vec<Appended>, StoreError> {
    let appended = store.append_log(&appends).await?;
    let mut published = Vec::new();
    for (done, append) in appended.iter().zip(&appends) {
        if let LogAppend::Report { event, keywords } = append {
            for keyword in keywords {
                if keyword.time_unreadable(&event.report) {
                    let direction = if keyword.opt_out { "opt_out" } else { "opt_in" };
                    metrics
                        .events
                        .reply_times_unreadable_total
                        .with_label_values(&[direction])
                        .inc();
                }
            }
            let result = if done.status.is_some() {
                "stored"
            } else {
                "duplicate"
            };
            metrics
                .events
                .events_total
                .with_label_values(&[event.source.as_str(), result])
                .inc();
        }
        for s in &done.suppressions {
            let c = &s.change;
            metrics
                .events
                .suppression_changes_total
                .with_label_values(&[c.source.as_str(), c.direction()])
                .inc();
            tracing::info!(
                cursor = s.cursor.get(),
                source = c.source.as_str(),
                client_id = c.client_id.map(ClientId::get),
                caller = c.caller.as_ref().map(CallerName::as_str),
                "{}",
                if c.suppressed {
                    "number opted out: sends to it are refused"
                } else {
                    "number opted back in"
                }
            );
        }
        published.extend(done.events());
    }
    published.sort_by_key(LogEvent::cursor);
    live.publish_appended(&published).await;
    Ok(appended)
}

/// Runs `f` when dropped, however the task ends.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

impl EventLog {
    /// What the log publishes live from now on, as a subscriber's pump receives it
    /// (for tests of how the log starts).
    #[cfg(test)]
    pub(crate) fn live_receiver(&self) -> broadcast::Receiver<Arc<LogEvent>> {
        self.live.channel.subscribe()
    }
}
