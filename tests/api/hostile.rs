//! Hostile clients on the gRPC port: a client that leaves its flow-control window shut
//! or never reads its socket cannot make msgw hold an answer for it, a connection
//! cannot open many token-free streams, and at the memory budget new streams are
//! refused while the connection holding the most goes.

use std::time::{Duration, Instant};

use msgw::transport::grpc::port::{CONN_COST, OPEN_PATH_STREAMS, PortLimits, STREAM_COST};
use msgw::transport::proto::{StreamStatusEventsRequest, event_service_client::EventServiceClient};
use tokio::{io::AsyncWriteExt, net::TcpStream};

use crate::events::next;
use crate::frames::{
    self, Frame, LIST_SERVICES, PREFACE, REFLECTION_V1ALPHA, RST_STREAM, SETTINGS, grpc_request,
    read_frame,
};
use crate::helpers::{Options, TestApp, spawn};

/// HTTP/2's CANCEL error code.
const CANCEL: u32 = 0x8;
const EVENTS: &str = "/msgw.v1.EventService/StreamStatusEvents";

fn bounded(limits: PortLimits) -> Options {
    Options {
        grpc_limits: limits,
        ..Options::default()
    }
}

/// A connection that has sent the preface and `settings`, then `requests`.
async fn hostile(app: &TestApp, window: Option<u32>, requests: &[Vec<u8>]) -> TcpStream {
    let mut tcp = TcpStream::connect(app.addr).await.unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frames::settings(window));
    for request in requests {
        out.extend(request);
    }
    tcp.write_all(&out).await.unwrap();
    tcp
}

/// Reads frames (acknowledging msgw's SETTINGS) until one matches `wanted`; fails on a
/// close or after `within`.
async fn until_frame(
    tcp: &mut TcpStream,
    within: Duration,
    wanted: impl Fn(&Frame) -> bool,
) -> Frame {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let frame = tokio::time::timeout_at(deadline, read_frame(tcp))
            .await
            .expect("the frame within the time")
            .expect("the connection stays open");
        if frame.kind == SETTINGS && frame.flags & 0x1 == 0 {
            tcp.write_all(&frames::frame(SETTINGS, 0x1, 0, &[]))
                .await
                .unwrap();
        }
        if wanted(&frame) {
            return frame;
        }
    }
}

/// Waits until what msgw's streams hold (its connections' fixed costs aside) is
/// under `below` bytes, failing after 10 s.
async fn streams_let_go(app: &TestApp, below: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = app.metric("msgw_grpc_held_bytes").await.unwrap_or(0.0);
        let connections = app
            .metric(r#"msgw_grpc_held_bytes_by_kind{kind="connection"}"#)
            .await
            .unwrap_or(0.0);
        if held - connections < below as f64 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "msgw's streams hold {} bytes",
            held - connections
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until msgw's metric `series` satisfies `ok`, failing after 10 s.
async fn metric_until(app: &TestApp, series: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = app.metric(series).await.unwrap_or(0.0);
        if ok(value) {
            return value;
        }
        assert!(Instant::now() < deadline, "{series} stays at {value}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_stream_whose_client_leaves_its_window_shut_is_reset_after_the_send_timeout() {
    let send_timeout = Duration::from_millis(1500);
    let app = spawn(bounded(PortLimits {
        send_timeout,
        ..PortLimits::default()
    }))
    .await;
    let opened = Instant::now();
    // A window of 0: msgw may send headers, never a byte of the answer.
    let request = grpc_request(1, REFLECTION_V1ALPHA, &[], LIST_SERVICES, false);
    let mut tcp = hostile(&app, Some(0), &[request]).await;
    let reset = until_frame(&mut tcp, Duration::from_secs(10), |f| {
        assert!(
            !(f.kind == frames::DATA && f.stream == 1 && !f.payload.is_empty()),
            "DATA through a shut window"
        );
        f.kind == RST_STREAM && f.stream == 1
    })
    .await;
    let code = u32::from_be_bytes(reset.payload[..4].try_into().unwrap());
    assert_eq!(code, CANCEL);
    let after = opened.elapsed();
    assert!(
        after >= send_timeout && after < send_timeout + Duration::from_secs(3),
        "reset {after:?} after the request, send timeout {send_timeout:?}"
    );
    assert_eq!(
        app.metric(r#"msgw_grpc_streams_reset_total{reason="send_timeout"}"#)
            .await,
        Some(1.0)
    );
    // Only the stream went: the connection serves the next one.
    let next = grpc_request(3, REFLECTION_V1ALPHA, &[], LIST_SERVICES, true);
    tcp.write_all(&frames::window_update(0, 1 << 20))
        .await
        .unwrap();
    tcp.write_all(&frames::settings(Some(65_535)))
        .await
        .unwrap();
    tcp.write_all(&next).await.unwrap();
    until_frame(&mut tcp, Duration::from_secs(5), |f| {
        f.kind == frames::DATA && f.stream == 3
    })
    .await;
    streams_let_go(&app, STREAM_COST).await;
}

#[tokio::test]
async fn a_connection_whose_socket_takes_nothing_is_closed_after_the_send_timeout() {
    let send_timeout = Duration::from_millis(1500);
    let app = spawn(bounded(PortLimits {
        send_timeout,
        ..PortLimits::default()
    }))
    .await;
    // Wide windows, so that only the socket holds msgw back; a few hundred of the
    // largest reflection answers on one stream, never read.
    let mut requests = vec![frames::window_update(0, 1 << 30)];
    let mut open = frames::settings(Some((1 << 31) - 1));
    open.extend(grpc_request(
        1,
        REFLECTION_V1ALPHA,
        &[],
        &frames::file_by_filename("msgw/v1/messaging.proto"),
        false,
    ));
    requests.push(open);
    for _ in 0..2000 {
        requests.push(frames::grpc_data(
            1,
            &frames::file_by_filename("msgw/v1/messaging.proto"),
            false,
        ));
    }
    // A small receive buffer: msgw's socket fills after a few hundred kilobytes.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket.connect(app.addr).await.unwrap();
    let mut out = PREFACE.to_vec();
    for r in &requests {
        out.extend(r);
    }
    tcp.write_all(&out).await.unwrap();
    let closed = metric_until(
        &app,
        r#"msgw_grpc_connections_closed_total{reason="send_timeout"}"#,
        |n| n >= 1.0,
    )
    .await;
    assert_eq!(closed, 1.0);
    streams_let_go(&app, STREAM_COST).await;
    drop(tcp);
}

#[tokio::test]
async fn a_connection_gets_few_token_free_streams() {
    let app = spawn(Options::default()).await;
    let requests: Vec<Vec<u8>> = (0..OPEN_PATH_STREAMS as u32 + 1)
        .map(|i| grpc_request(1 + 2 * i, REFLECTION_V1ALPHA, &[], LIST_SERVICES, false))
        .collect();
    let mut tcp = hostile(&app, None, &requests).await;
    let last = 1 + 2 * OPEN_PATH_STREAMS as u32;
    // The one over the share is answered RESOURCE_EXHAUSTED at once, in its headers.
    let refused = until_frame(&mut tcp, Duration::from_secs(5), |f| {
        f.kind == frames::HEADERS && f.stream == last
    })
    .await;
    assert_ne!(refused.flags & 0x1, 0, "a trailers-only answer");
    assert_eq!(
        app.metric(r#"msgw_grpc_streams_refused_total{reason="open_path_streams"}"#)
            .await,
        Some(1.0)
    );
    // msgw's own services are not held to that share.
    let mut streams = Vec::new();
    for _ in 0..OPEN_PATH_STREAMS + 4 {
        streams.push(
            app.events()
                .stream_status_events(StreamStatusEventsRequest::default())
                .await
                .expect("an event stream")
                .into_inner(),
        );
    }
}

#[tokio::test]
async fn at_the_memory_budget_new_streams_are_refused_and_the_heaviest_connection_goes() {
    // Room for 30 streams and the two connections here (the heavy one and the
    // caller's), and for 10 to 12 streams more.
    let budget = 40 * STREAM_COST + 4 * CONN_COST;
    // Every client here is the anonymous caller: the whole budget is its share (the
    // shares between callers are tests/api/budgets.rs's).
    let app = spawn(bounded(PortLimits {
        memory_budget: Some(budget as u64),
        caller_share: 1.0,
        ..PortLimits::default()
    }))
    .await;
    // A connection that opens 30 event streams and reads nothing.
    let requests: Vec<Vec<u8>> = (0..30)
        .map(|i| grpc_request(1 + 2 * i, EVENTS, &[], &[], true))
        .collect();
    let mut heavy = hostile(&app, None, &requests).await;
    // All 30 open (the streams' own cost: the total also counts the connections, and
    // reached 30 streams' worth while the last few were still coming).
    metric_until(
        &app,
        r#"msgw_grpc_held_bytes_by_kind{kind="stream"}"#,
        |held| held >= (30 * STREAM_COST) as f64,
    )
    .await;
    // A caller of its own: its streams are served until the budget is reached.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut caller = EventServiceClient::new(channel);
    // What the caller's streams may take: the budget less the streams' and the
    // connections' own costs (what replays hold comes and goes, and only makes the
    // caller refused sooner).
    metric_until(&app, "msgw_grpc_connections_open", |open| open >= 2.0).await;
    let fixed = app
        .metric(r#"msgw_grpc_held_bytes_by_kind{kind="stream"}"#)
        .await
        .unwrap_or(0.0)
        + app
            .metric(r#"msgw_grpc_held_bytes_by_kind{kind="connection"}"#)
            .await
            .unwrap_or(0.0);
    let room = (budget as f64 - fixed) / STREAM_COST as f64;
    let mut opened = Vec::new();
    let refused = loop {
        match caller
            .stream_status_events(StreamStatusEventsRequest::default())
            .await
        {
            Ok(stream) => opened.push(stream.into_inner()),
            Err(status) => break status,
        }
        if opened.len() as f64 > room {
            let held = app.metric("msgw_grpc_held_bytes").await;
            let connections = app.metric("msgw_grpc_connections_open").await;
            panic!(
                "served past the budget ({budget} bytes, room for {room:.1} streams): held {held:?}, connections {connections:?}"
            );
        }
    };
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        !opened.is_empty(),
        "the caller was served before the budget"
    );
    assert!(
        refused.message().contains("MSGW_GRPC_MEMORY_BUDGET"),
        "{refused:?}"
    );
    // The connection holding the most is closed at once, and its streams let go.
    let gone = tokio::time::timeout(Duration::from_secs(5), async {
        while read_frame(&mut heavy).await.is_some() {}
    })
    .await;
    assert!(gone.is_ok(), "the heaviest connection was closed");
    assert_eq!(
        app.metric(r#"msgw_grpc_connections_closed_total{reason="memory_budget"}"#)
            .await,
        Some(1.0)
    );
    streams_let_go(&app, 20 * STREAM_COST).await;
    // The caller goes on: a new stream is served and the old ones still carry events.
    let mut another = caller
        .stream_status_events(StreamStatusEventsRequest::default())
        .await
        .expect("served again once the heavy connection let go")
        .into_inner();
    let body = serde_json::json!({"success": true, "id": "4301", "msg_id": "m4301",
                                  "type": "sms", "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(&app.hook_path(4301), body.to_string())
            .await,
        200
    );
    assert_eq!(next(&mut opened[0]).await.id, 4301);
    assert_eq!(next(&mut another).await.id, 4301);
}
