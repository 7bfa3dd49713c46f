//! Exact budgets: what replaying event streams and unfinished uploads make msgw hold is
//! counted against the gRPC port's memory budget and its caller's share of it, and one
//! caller at its share does not stop another from being served.

use std::{
    sync::{Arc, atomic::AtomicU64, atomic::Ordering},
    time::{Duration, Instant},
};

use futures_util::StreamExt;
use msgw::transport::grpc::port::PortLimits;
use msgw::transport::proto::StreamStatusEventsRequest;
use prost::Message;
use tokio::io::AsyncWriteExt;

use crate::builders::sms;
use crate::callers::{Callers, Entry};
use crate::frames::{self, PREFACE, grpc_request, read_frame};
use crate::helpers::{Options, TestApp, as_caller, spawn};

const EVENTS: &str = "/msgw.v1.EventService/StreamStatusEvents";
const BATCH: &str = "/msgw.v1.MessagingService/Batch";
const WATCHER: &str = "watcher-token";
const UPLOADER: &str = "uploader-token";
const SENDER: &str = "sender-token";
const MIB: usize = 1024 * 1024;

/// msgw with a memory budget of `budget` bytes (each caller a quarter of it) and three
/// callers: one streaming every caller's events, one that may only query, one sending.
async fn app(budget: usize) -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = Callers::new()
        .caller(Entry::token("watcher", WATCHER).all_events())
        .caller(Entry::token("uploader", UPLOADER).permissions(&["query"]))
        .caller(Entry::token("sender", SENDER))
        .write(dir.path());
    let app = spawn(Options {
        grpc_limits: PortLimits {
            memory_budget: Some(budget as u64),
            ..PortLimits::default()
        },
        callers_file: Some(path),
        ..Options::default()
    })
    .await;
    (app, dir)
}

/// `n` delivery webhooks stored as events.
async fn store_events(app: &TestApp, n: u64) {
    let posted = futures_util::stream::iter(1..=n)
        .map(|id| async move {
            let body = serde_json::json!({"success": true, "id": id.to_string(),
                "msg_id": format!("m{id}"), "type": "sms", "status": "DELIVERED",
                "error": "a delivery report long enough to weigh something in memory"});
            app.post_webhook(&app.hook_path(id), body.to_string()).await
        })
        .buffer_unordered(32)
        .filter(|code| std::future::ready(*code != 200))
        .count()
        .await;
    assert_eq!(posted, 0, "every webhook stored");
}

/// The value of `series`, 0 when msgw does not show it.
async fn metric(app: &TestApp, series: &str) -> f64 {
    app.metric(series).await.unwrap_or(0.0)
}

/// Sends `n` SMS as the sender, failing on any error or an answer slower than 5 s.
async fn sender_is_served(app: &TestApp, first_id: u64, n: u64) {
    for id in first_id..first_id + n {
        let started = Instant::now();
        let sent = app.messaging().send_sms(as_caller(SENDER, sms(id))).await;
        assert!(sent.is_ok(), "the other caller's send {id}: {sent:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn replaying_event_streams_that_never_read_are_held_to_their_callers_share() {
    let budget = 4 * MIB;
    let (app, _dir) = app(budget).await;
    store_events(&app, 2_000).await;
    // 300 streams replaying every event from the oldest, on a connection whose
    // flow-control window is shut: msgw may send headers, never an event.
    let request = StreamStatusEventsRequest {
        from_oldest: true,
        ..Default::default()
    }
    .encode_to_vec();
    let auth = format!("Bearer {WATCHER}");
    let mut out = PREFACE.to_vec();
    out.extend(frames::settings(Some(0)));
    for i in 0..300 {
        out.extend(grpc_request(
            1 + 2 * i,
            EVENTS,
            &[("authorization", &auth)],
            &request,
            true,
        ));
    }
    let mut tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    tcp.write_all(&out).await.unwrap();
    // Acknowledge msgw's settings; read (and drop) what it answers.
    let reader = tokio::spawn(async move {
        while let Some(f) = read_frame(&mut tcp).await {
            if f.kind == frames::SETTINGS && f.flags & 0x1 == 0 {
                let _ = tcp
                    .write_all(&frames::frame(frames::SETTINGS, 0x1, 0, &[]))
                    .await;
            }
        }
    });
    let refused = r#"msgw_grpc_caller_share_refused_total{caller="watcher"}"#;
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&app, refused).await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the watcher was never held to its share"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the admitted streams load what they will.
    let replay = r#"msgw_grpc_held_bytes_by_kind{kind="replay"}"#;
    let mut last = -1.0;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = metric(&app, replay).await;
        if now == last {
            break;
        }
        last = now;
        assert!(Instant::now() < deadline, "replays keep loading: {now}");
    }
    assert!(last > 0.0, "the events loaded for the replays are counted");
    let held = metric(&app, "msgw_grpc_held_bytes").await;
    assert!(
        held <= budget as f64,
        "held {held} over the budget {budget}"
    );
    // The watcher holds about its share (a quarter): each stream admitted under it
    // then loads at most one page of events.
    let watcher = metric(&app, r#"msgw_grpc_caller_held_bytes{caller="watcher"}"#).await;
    assert!(
        watcher > 0.0 && watcher <= (budget / 4 + 256 * 1024) as f64,
        "the watcher holds {watcher}"
    );
    // Another caller is served all the while.
    sender_is_served(&app, 900_001, 20).await;
    reader.abort();
}

#[tokio::test]
async fn unfinished_uploads_stop_getting_window_at_their_callers_share() {
    let budget = 8 * MIB;
    let (app, _dir) = app(budget).await;
    let sent = Arc::new(AtomicU64::new(0));
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    // Two connections of 10 Batch requests each, every one declaring a 1,040,000-byte
    // message and uploading it as the windows allow, never finished.
    let auth = format!("Bearer {UPLOADER}");
    let uploads: Vec<_> = (0..2)
        .map(|_| {
            let (sent, auth, addr) = (sent.clone(), auth.clone(), app.addr);
            tokio::spawn(async move {
                frames::upload_unfinished(
                    addr,
                    BATCH,
                    &[("authorization", &auth)],
                    10,
                    1_040_000,
                    until,
                    &sent,
                )
                .await;
            })
        })
        .collect();
    // The uploads stall: msgw gives no more window.
    let mut last = 0;
    let mut still = 0;
    while still < 4 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = sent.load(Ordering::Relaxed);
        still = if now == last && now > 0 { still + 1 } else { 0 };
        last = now;
        assert!(
            tokio::time::Instant::now() < until,
            "the uploads never stalled: {now} bytes sent"
        );
    }
    // What msgw let in: the uploader's share, plus what each connection's window
    // (1 MiB) let through before msgw stopped giving it back.
    let share = budget / 4;
    let allowed = (share + 2 * MIB + 64 * 1024) as u64;
    assert!(
        last <= allowed,
        "{last} bytes uploaded, more than the share and the windows ({allowed})"
    );
    assert!(last >= share as u64 / 2, "only {last} bytes uploaded");
    let request = metric(&app, r#"msgw_grpc_held_bytes_by_kind{kind="request"}"#).await;
    assert!(
        request >= last as f64 * 0.9,
        "request bodies counted: {request} of {last} bytes received"
    );
    // The sender is served while the uploader is at its share.
    sender_is_served(&app, 910_001, 20).await;
    for upload in uploads {
        upload.abort();
    }
}
