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
use crate::wait;

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
            // Streams left unread stay open for the whole test, however slow the
            // machine: the shares are what it measures, not the send timeout.
            send_timeout: Duration::from_secs(120),
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

/// Connections the gRPC port has taken in so far: open, closed for any reason, or
/// refused at the cap.
async fn connections_taken(app: &TestApp) -> f64 {
    metric(app, "msgw_grpc_connections_open").await
        + app
            .metric_sum("msgw_grpc_connections_closed_total", &[])
            .await
        + metric(app, "msgw_grpc_connections_refused_total").await
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
    // then loads at most one page of events. The callers holding the most are shown
    // once a second: wait for the watcher to be shown.
    let watcher = wait::until_some(
        Duration::from_secs(10),
        "the watcher's held bytes are never shown",
        || async {
            let held = metric(&app, r#"msgw_grpc_caller_held_bytes{caller="watcher"}"#).await;
            (held > 0.0).then_some(held)
        },
    )
    .await;
    assert!(
        watcher <= (budget / 4 + 256 * 1024) as f64,
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
    // Two connections of 10 Batch requests each, every one declaring a 1,040,000-byte
    // message and uploading it as the windows allow, never finished.
    let (last, uploads) = upload_until_stalled(&app, 2, 10).await;
    // What msgw holds: the uploader's share at most, the messages tonic reserved room
    // for and the windows it granted counted in it. A stream refused at the share may
    // still send its window, which msgw drops.
    let share = budget / 4;
    assert!(
        last <= (share + 20 * 64 * 1024) as u64,
        "{last} bytes uploaded, more than the share ({share}) and the windows"
    );
    assert!(last >= share as u64 / 2, "only {last} bytes uploaded");
    let uploader = metric(&app, r#"msgw_grpc_caller_held_bytes{caller="uploader"}"#).await;
    assert!(
        uploader > share as f64 / 2.0 && uploader <= share as f64,
        "the uploader holds {uploader}, its share is {share}"
    );
    let request = metric(&app, r#"msgw_grpc_held_bytes_by_kind{kind="request"}"#).await;
    assert!(
        request >= 1_040_000.0,
        "a declared message counts in full: {request}"
    );
    // The sender is served while the uploader is at its share.
    sender_is_served(&app, 910_001, 20).await;
    for upload in uploads {
        upload.abort();
    }
}

#[tokio::test]
async fn unfinished_uploads_over_many_connections_stay_within_their_callers_share() {
    let budget = 8 * MIB;
    let (app, _dir) = app(budget).await;
    // 40 connections of one upload each: every stream opens (under the share) before
    // any sends a byte, and each may send its stream's window unasked.
    let (last, uploads) = upload_until_stalled(&app, 40, 1).await;
    let share = budget / 4;
    // A stream refused at the share may still send its window: msgw drops that.
    assert!(
        last <= (share + 40 * 64 * 1024) as u64,
        "{last} bytes uploaded over 40 connections, more than the share ({share}) and the refused streams' windows"
    );
    let uploader = metric(&app, r#"msgw_grpc_caller_held_bytes{caller="uploader"}"#).await;
    assert!(
        uploader > 0.0 && uploader <= share as f64,
        "the uploader holds {uploader}, its share is {share}"
    );
    let request = metric(&app, r#"msgw_grpc_held_bytes_by_kind{kind="request"}"#).await;
    assert!(
        request <= share as f64,
        "request bodies and their windows {request}, over the share {share}"
    );
    assert!(
        metric(&app, "msgw_grpc_held_bytes").await <= budget as f64,
        "within the budget"
    );
    sender_is_served(&app, 920_001, 20).await;
    for upload in uploads {
        upload.abort();
    }
}

/// `conns` connections of `streams` Batch requests each as the uploader, every one
/// declaring a 1,040,000-byte message and uploading it as the windows allow, never
/// finished; returns the bytes uploaded once msgw gives no more window.
async fn upload_until_stalled(
    app: &TestApp,
    conns: usize,
    streams: u32,
) -> (u64, Vec<tokio::task::JoinHandle<()>>) {
    let sent = Arc::new(AtomicU64::new(0));
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let auth = format!("Bearer {UPLOADER}");
    let uploads: Vec<_> = (0..conns)
        .map(|_| {
            let (sent, auth, addr) = (sent.clone(), auth.clone(), app.addr);
            tokio::spawn(async move {
                frames::upload_unfinished(
                    addr,
                    BATCH,
                    &[("authorization", &auth)],
                    streams,
                    1_040_000,
                    until,
                    &sent,
                )
                .await;
            })
        })
        .collect();
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
    (last, uploads)
}

#[tokio::test]
async fn connections_count_against_the_budget_and_are_capped_by_it() {
    let budget = 8 * MIB;
    let (app, _dir) = app(budget).await;
    let taken_before = connections_taken(&app).await;
    // 150 connections that send the HTTP/2 preface and nothing more, and 50 that
    // leave a request's header block unfinished: under 8 MiB the cap is 56.
    let mut flood = Vec::new();
    for i in 0..200 {
        let Ok(mut tcp) = tokio::net::TcpStream::connect(app.addr).await else {
            continue;
        };
        let mut out = PREFACE.to_vec();
        out.extend(frames::settings(None));
        if i % 4 == 0 {
            // HEADERS without END_HEADERS: msgw keeps the block until it is whole.
            let mut headers = frames::grpc_headers(1, BATCH, &[("x-pad", &"p".repeat(8_000))]);
            headers[4] &= !0x4;
            out.extend(headers);
        }
        let _ = tcp.write_all(&out).await;
        flood.push(tcp);
    }
    let flooded = taken_before + flood.len() as f64;
    let failure = "msgw never took in every connection of the flood";
    wait::until_some(Duration::from_secs(10), failure, || async {
        (connections_taken(&app).await >= flooded).then_some(())
    })
    .await;
    let open = metric(&app, "msgw_grpc_connections_open").await;
    assert!(
        (1.0..=64.0).contains(&open),
        "{open} connections open: the cap from the budget is 56 (64 with those closing)"
    );
    let held = metric(&app, r#"msgw_grpc_held_bytes_by_kind{kind="connection"}"#).await;
    assert_eq!(
        held,
        open * 72.0 * 1024.0,
        "each open connection counts 72 KiB"
    );
    assert!(held <= (budget / 2 + 8 * 72 * 1024) as f64);
    // A caller's new connection takes the place of an idle one.
    sender_is_served(&app, 930_001, 20).await;
    drop(flood);
}

#[tokio::test]
async fn a_declared_message_counts_in_full_from_its_prefix_on() {
    let budget = 8 * MIB;
    let (app, _dir) = app(budget).await;
    // One Batch request that declares a 1,040,000-byte message and sends 100 bytes of
    // it: tonic reserves the whole length on reading the prefix.
    let auth = format!("Bearer {UPLOADER}");
    let mut body = vec![0u8];
    body.extend(1_040_000u32.to_be_bytes());
    body.extend([0u8; 100]);
    let mut out = PREFACE.to_vec();
    out.extend(frames::settings(None));
    out.extend(frames::grpc_headers(1, BATCH, &[("authorization", &auth)]));
    out.extend(frames::frame(frames::DATA, 0, 1, &body));
    let mut tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    tcp.write_all(&out).await.unwrap();
    let request = r#"msgw_grpc_held_bytes_by_kind{kind="request"}"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = metric(&app, request).await;
        if held >= 1_040_000.0 {
            assert!(held < 1_040_000.0 + 2.0 * 64.0 * 1024.0, "{held}");
            break;
        }
        assert!(Instant::now() < deadline, "request bodies count {held}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(tcp);
}
