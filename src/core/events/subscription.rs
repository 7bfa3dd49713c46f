//! One subscriber's side of the event log: the events it is sent, from the store
//! until caught up and then live, each counted on the subscriber's account (see
//! [`crate::core::held`]) from the moment msgw loads it until the subscriber takes
//! it. A subscriber that does not read holds at most one page and its channel's
//! buffer, all of it counted, however many events the store keeps.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use tokio::sync::{broadcast, mpsc};

use super::{Filter, shutting_down, store_error};
use crate::core::domain::{Cursor, Error, LogEvent};
use crate::core::held::{CallAccount, Held, HeldKind};
use crate::core::ports::store::Store;

/// Events fetched from the store per query while replaying: small, so that a stream
/// that does not read holds little.
pub(super) const REPLAY_PAGE: u32 = 64;
/// Events a subscription buffers towards its client before its producer waits.
pub(super) const SUBSCRIBER_BUFFER: usize = 32;
/// What an event is reserved at before it is loaded; a reservation then takes the
/// page's real size.
const EVENT_RESERVE: usize = 512;

/// An event on its way to a subscriber, with what it holds in memory until taken.
type Item = Result<(LogEvent, Held), Error>;

/// The receiving end of a subscription: events (or the error that ends it) in cursor
/// order. A stream of them, too.
pub struct Subscription {
    rx: mpsc::Receiver<Item>,
}

impl Subscription {
    pub(super) fn channel() -> (mpsc::Sender<Item>, Self) {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        (tx, Self { rx })
    }

    /// The next event; `None` once the subscription has ended.
    pub async fn recv(&mut self) -> Option<Result<LogEvent, Error>> {
        self.rx.recv().await.map(taken)
    }
}

impl tokio_stream::Stream for Subscription {
    type Item = Result<LogEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|item| item.map(taken))
    }
}

/// The event, no longer counted: the subscriber has it.
fn taken(item: Item) -> Result<LogEvent, Error> {
    item.map(|(event, _held)| event)
}

/// What an event holds in memory, about: the value and the text it owns.
fn held_size(e: &LogEvent) -> usize {
    let text = match e {
        LogEvent::Status(e) => {
            let r = &e.event.report;
            let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
            opt(&r.msg_id)
                + opt(&r.channel_raw)
                + opt(&r.error)
                + opt(&r.reply)
                + opt(&r.request_id)
                + r.status.as_ref().map_or(0, |s| s.raw.len())
                + e.caller.as_ref().map_or(0, |c| c.as_str().len())
                + r.replies
                    .iter()
                    .map(|reply| {
                        std::mem::size_of_val(reply)
                            + opt(&reply.message)
                            + reply
                                .media
                                .as_ref()
                                .map_or(0, |m| m.url.len() + m.filename.len())
                    })
                    .sum::<usize>()
        }
        LogEvent::Suppression(e) => {
            e.change.reason.as_str().len()
                + e.change.caller.as_ref().map_or(0, |c| c.as_str().len())
        }
    };
    std::mem::size_of::<Item>() + text
}

/// Sends `event` to the subscriber, counted on `account` until it takes it; false
/// once the subscriber is gone.
async fn send(tx: &mpsc::Sender<Item>, account: &CallAccount, event: LogEvent) -> bool {
    let held = Held::new(account, HeldKind::Replay, held_size(&event));
    tx.send(Ok((event, held))).await.is_ok()
}

/// Sends events after `last` to `tx` forever: from the store until caught up, then
/// live; back to the store whenever the live channel lost events. A page is loaded
/// only once the subscriber has room for it, and counted from then on.
pub(super) async fn pump(
    store: &dyn Store,
    mut last: Cursor,
    filter: &Filter,
    mut live: broadcast::Receiver<std::sync::Arc<LogEvent>>,
    tx: &mpsc::Sender<Item>,
    account: &CallAccount,
) -> Result<(), Error> {
    loop {
        loop {
            // A subscriber that reads nothing stops the replay here, holding what its
            // channel buffers, instead of loading page after page.
            let Ok(permit) = tx.reserve().await else {
                return Ok(());
            };
            drop(permit);
            // A page as large as the caller's share has room for: streams at the share
            // load one event at a time, once what they hold is gone, and wait otherwise.
            let mut loaded = Held::reserve(
                account,
                HeldKind::Replay,
                REPLAY_PAGE as usize * EVENT_RESERVE,
                EVENT_RESERVE,
            )
            .await;
            let size = u32::try_from(loaded.bytes() / EVENT_RESERVE)
                .unwrap_or(REPLAY_PAGE)
                .clamp(1, REPLAY_PAGE);
            let page = store.events_after(last, size).await.map_err(store_error)?;
            let full = page.len() >= size as usize;
            loaded.resize(page.iter().map(held_size).sum::<usize>());
            for e in page {
                last = e.cursor();
                let held = loaded.split(held_size(&e));
                if filter.matches(&e) && tx.send(Ok((e, held))).await.is_err() {
                    return Ok(());
                }
            }
            if !full {
                break;
            }
        }
        loop {
            match live.recv().await {
                Ok(e) if e.cursor() <= last => continue,
                // Not the next one: something was missed; the store has it.
                Ok(e) if e.cursor() != last.next() => break,
                Ok(e) => {
                    last = e.cursor();
                    if filter.matches(&e) && !send(tx, account, (*e).clone()).await {
                        return Ok(());
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(
                        missed,
                        last = last.get(),
                        "subscriber fell behind; replaying from the store"
                    );
                    break;
                }
                Err(broadcast::error::RecvError::Closed) => return Err(shutting_down()),
            }
        }
    }
}
