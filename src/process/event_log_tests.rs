//! The event log as msgw starts it: its live side over a store of its own (here, where
//! both the store adapter and core may be named).

use std::{sync::Arc, time::Duration};

use chrono::Utc;

use crate::adapters::store::SqlStore;
use crate::base::metrics::Metrics;
use crate::core::domain::{
    ClientId, DeliveryReport, EventSource, Keywords, NewEvent, ReportedStatus,
};
use crate::core::events::EventLog;

fn delivered(id: u64) -> NewEvent {
    NewEvent {
        report: DeliveryReport {
            client_id: ClientId::new(id).ok(),
            msg_id: Some(format!("m{id}")),
            channel_raw: Some("sms".into()),
            status: Some(ReportedStatus::new("DELIVERED".into())),
            success: true,
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

/// A subscriber listening from the start gets the log's very first appends live, in
/// cursor order, even when they are stored before the follower's first read of the
/// store (here: the appends take the one connection of an in-memory store first).
#[tokio::test]
async fn appends_right_after_the_start_are_published_live() {
    let store = SqlStore::sqlite("sqlite::memory:", Duration::from_secs(3600))
        .await
        .unwrap();
    let log = EventLog::open(
        Arc::new(store),
        16,
        Metrics::new().unwrap(),
        Keywords::default(),
    )
    .await
    .unwrap();
    let mut live = log.live_receiver();
    for id in 1..=2 {
        log.append(delivered(id)).await.unwrap();
    }
    for cursor in 1..=2 {
        let e = tokio::time::timeout(Duration::from_secs(5), live.recv())
            .await
            .expect("the append was published")
            .unwrap();
        assert_eq!(e.cursor().get(), cursor);
    }
}
