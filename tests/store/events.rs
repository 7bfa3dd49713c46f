//! The event log: cursors, duplicates, replay, retention, and cursor order across
//! several handles of one store appending at once.

use std::{collections::HashSet, sync::Arc, time::Duration};

use chrono::{TimeZone, Utc};
use msgw::core::domain::{
    Cursor, DeliveryReport, EventSource, LogEvent, Media, NewEvent, Reply, ReportedStatus,
    StatusEvent,
};
use msgw::core::ports::store::{Retention, Store};

use crate::Fixture;

pub fn event(client_id: u64, status: &str) -> NewEvent {
    NewEvent {
        report: DeliveryReport {
            client_id: msgw::core::domain::ClientId::new(client_id).ok(),
            msg_id: Some(format!("m{client_id}")),
            channel_raw: Some("sms".into()),
            status: Some(ReportedStatus::new(status.to_owned())),
            success: status == "DELIVERED",
            error: None,
            updated: None,
            reply: None,
            duration_secs: None,
            request_id: None,
            replies: Vec::new(),
        },
        received_at: Utc::now(),
        source: EventSource::Webhook,
    }
}

/// The status events of a read of the log, which holds nothing else.
pub fn statuses(log: Vec<LogEvent>) -> Vec<StatusEvent> {
    log.into_iter()
        .map(|e| e.into_status().expect("only statuses were appended"))
        .collect()
}

pub async fn appends_hand_out_increasing_cursors_and_skip_duplicates(fixture: Fixture) {
    let store = fixture.open().await;
    assert_eq!(store.latest_cursor().await.unwrap(), Cursor::START);
    assert_eq!(store.oldest_cursor().await.unwrap(), None);
    let first = store
        .append_batch(&[
            event(1, "ACCEPTED"),
            event(2, "ACCEPTED"),
            event(1, "ACCEPTED"),
        ])
        .await
        .unwrap();
    let cursors: Vec<Option<u64>> = first
        .iter()
        .map(|e| e.as_ref().map(|e| e.cursor.get()))
        .collect();
    assert_eq!(
        cursors,
        [Some(1), Some(2), None],
        "the in-group copy is a duplicate"
    );
    let second = store
        .append_batch(&[event(2, "ACCEPTED"), event(2, "DELIVERED")])
        .await
        .unwrap();
    let cursors: Vec<Option<u64>> = second
        .iter()
        .map(|e| e.as_ref().map(|e| e.cursor.get()))
        .collect();
    assert_eq!(
        cursors,
        [None, Some(3)],
        "a stored event is a duplicate later too"
    );
    assert_eq!(store.latest_cursor().await.unwrap(), Cursor::new(3));
    assert_eq!(*store.appended().borrow(), Cursor::new(3));
    assert_eq!(store.oldest_cursor().await.unwrap(), Some(Cursor::new(1)));
    let replay = statuses(store.events_after(Cursor::new(1), 10).await.unwrap());
    assert_eq!(
        replay.iter().map(|e| e.cursor.get()).collect::<Vec<_>>(),
        [2, 3]
    );
    assert_eq!(
        replay[1].event,
        event(2, "DELIVERED").with_time(replay[1].event.received_at)
    );
    assert_eq!(
        store.events_after(Cursor::START, 2).await.unwrap().len(),
        2,
        "limit"
    );
}

trait WithTime {
    fn with_time(self, at: chrono::DateTime<Utc>) -> Self;
}

impl WithTime for NewEvent {
    fn with_time(mut self, at: chrono::DateTime<Utc>) -> Self {
        self.received_at = at;
        self
    }
}

pub async fn every_field_of_an_event_reads_back_exactly(fixture: Fixture) {
    let store = fixture.open().await;
    let mut e = event(u64::MAX, "REPLIED");
    e.report.error = Some("ERR: \"quoted\" ü".into());
    e.report.updated = Some(Utc.with_ymd_and_hms(2022, 5, 1, 9, 1, 2).unwrap());
    e.report.reply = Some("1".into());
    e.report.duration_secs = Some(12.5);
    e.report.request_id = Some("req-1".into());
    e.report.replies = vec![
        Reply {
            datetime: Some(Utc.with_ymd_and_hms(2022, 5, 1, 9, 1, 2).unwrap()),
            time_unreadable: false,
            message: Some("Please wait".into()),
            media: None,
        },
        Reply {
            datetime: None,
            time_unreadable: false,
            message: None,
            media: Some(Media {
                url: "https://url.com/home/vibermedia/".into(),
                filename: "invoice.pdf".into(),
                filesize: 67983,
            }),
        },
    ];
    e.received_at = Utc.timestamp_millis_opt(1_700_000_000_123).unwrap();
    e.source = EventSource::Poll;
    store.append_batch(std::slice::from_ref(&e)).await.unwrap();
    let back = statuses(store.events_after(Cursor::START, 1).await.unwrap());
    assert_eq!(back[0].event, e);
}

pub async fn retention_drops_old_events_but_never_reuses_a_cursor(fixture: Fixture) {
    let store = fixture.open().await;
    let events: Vec<NewEvent> = (1..=10).map(|n| event(n, "DELIVERED")).collect();
    store.append_batch(&events).await.unwrap();
    let retention = Retention {
        max_age: Duration::from_secs(3600),
        max_events: 4,
        claims_max_age: Duration::from_secs(3600),
        guard_max_age: std::time::Duration::from_secs(3600),
        trusted_keys_max_age: std::time::Duration::from_secs(3600),
    };
    assert_eq!(store.prune(retention, Utc::now()).await.unwrap(), 6);
    assert_eq!(store.oldest_cursor().await.unwrap(), Some(Cursor::new(7)));
    let by_age = Retention {
        max_age: Duration::from_secs(1),
        ..retention
    };
    let later = Utc::now() + chrono::Duration::seconds(5);
    assert_eq!(store.prune(by_age, later).await.unwrap(), 4);
    assert_eq!(store.oldest_cursor().await.unwrap(), None);
    assert_eq!(store.latest_cursor().await.unwrap(), Cursor::new(10));
    let next = store.append_batch(&[event(11, "DELIVERED")]).await.unwrap();
    assert_eq!(next[0].as_ref().unwrap().cursor, Cursor::new(11));
}

/// The property cursors exist for: a reader that has seen everything up to cursor N
/// never later finds an event at or below N. Several handles (replicas) append
/// concurrently while a reader follows; the reader must end with every event exactly
/// once, in increasing order, never stepping over one that commits later.
pub async fn cursors_commit_in_order_across_concurrent_appenders(fixture: Fixture) {
    const WRITERS: u64 = 4;
    const GROUPS: u64 = 40;
    const PER_GROUP: u64 = 5;
    let stores: Vec<Arc<dyn Store>> = vec![fixture.open().await, fixture.open().await];
    let reader = fixture.open().await;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = stores[(w % 2) as usize].clone();
        writers.push(tokio::spawn(async move {
            for g in 0..GROUPS {
                let group: Vec<NewEvent> = (0..PER_GROUP)
                    .map(|i| event(1 + w * 1_000_000 + g * 100 + i, "DELIVERED"))
                    .collect();
                store.append_batch(&group).await.unwrap();
            }
        }));
    }
    let total = WRITERS * GROUPS * PER_GROUP;
    let mut last = Cursor::START;
    let mut seen = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while (seen.len() as u64) < total {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reader stuck at {last}"
        );
        for e in statuses(reader.events_after(last, 64).await.unwrap()) {
            assert!(e.cursor > last, "cursor order");
            assert!(seen.insert(e.event.report.client_id), "duplicate");
            last = e.cursor;
        }
        tokio::task::yield_now().await;
    }
    for w in writers {
        w.await.unwrap();
    }
    // Anything that committed after the reader passed it would show up here.
    let all = reader.events_after(Cursor::START, 10_000).await.unwrap();
    assert_eq!(all.len() as u64, total);
    assert_eq!(last.get(), total, "no gaps in the cursors");
}

pub async fn a_messages_final_event_is_found_before_newer_ones(fixture: Fixture) {
    let store = fixture.open().await;
    assert_eq!(
        store
            .last_event_of(msgw::core::domain::ClientId::new(7).unwrap())
            .await
            .unwrap(),
        None
    );
    let mut polled = event(7, "QUEUED");
    polled.source = EventSource::Poll;
    store.append_batch(&[polled]).await.unwrap();
    let newest = store
        .last_event_of(msgw::core::domain::ClientId::new(7).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(newest.event.report.status.unwrap().raw, "QUEUED");
    store
        .append_batch(&[event(7, "DELIVERED"), event(8, "DELIVERED")])
        .await
        .unwrap();
    let mut later = event(7, "ROUTING");
    later.source = EventSource::Poll;
    store.append_batch(&[later]).await.unwrap();
    let found = store
        .last_event_of(msgw::core::domain::ClientId::new(7).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.event.report.status.unwrap().raw, "DELIVERED");
    assert_eq!(found.cursor, Cursor::new(2));
}
