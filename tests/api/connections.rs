//! The gRPC port's bounds: silent connections are closed, idle ones get GOAWAY, a
//! quiet event stream is not idle, and at the cap the longest idle connection makes
//! room for a new one.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use msgw::transport::grpc::port::PortLimits;
use msgw::transport::proto::StreamStatusEventsRequest;
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_stream::StreamExt;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::events::{next, subscribe};
use crate::helpers::{Options, TestApp, spawn};
use crate::wait;

/// The HTTP/2 client preface and an empty SETTINGS frame: a client that has spoken.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
/// The HTTP/2 frame type of GOAWAY.
const GOAWAY: u8 = 0x7;

/// The next HTTP/2 frame's type; `None` once the server has closed the connection.
async fn next_frame(tcp: &mut TcpStream) -> Option<u8> {
    let mut header = [0u8; 9];
    tcp.read_exact(&mut header).await.ok()?;
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; len];
    tcp.read_exact(&mut payload).await.ok()?;
    Some(header[3])
}

/// Reads frames until GOAWAY; returns when it came, failing the test on a close
/// without one.
async fn goaway(tcp: &mut TcpStream) -> Instant {
    loop {
        match next_frame(tcp).await {
            Some(GOAWAY) => return Instant::now(),
            Some(_) => continue,
            None => panic!("the connection closed without GOAWAY"),
        }
    }
}

/// Whether the server has closed `tcp` (end of stream or reset), waiting up to `within`.
async fn closed(tcp: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

async fn health(addr: SocketAddr) -> Result<(), String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn bounded(limits: PortLimits) -> Options {
    Options {
        grpc_limits: limits,
        ..Options::default()
    }
}

#[tokio::test]
async fn a_preface_only_connection_gets_goaway_after_the_idle_timeout() {
    let idle = Duration::from_millis(800);
    let app = spawn(bounded(PortLimits {
        idle_timeout: idle,
        ..PortLimits::default()
    }))
    .await;
    let mut tcp = TcpStream::connect(app.addr).await.unwrap();
    let opened = Instant::now();
    tcp.write_all(PREFACE).await.unwrap();
    let at = goaway(&mut tcp).await;
    let after = at - opened;
    assert!(
        after >= idle && after < idle + Duration::from_secs(2),
        "GOAWAY {after:?} after opening, idle timeout {idle:?}"
    );
    assert!(
        closed(&mut tcp, Duration::from_secs(3)).await,
        "closed after GOAWAY"
    );
    // This one and the harness's own connection, which carried no stream either.
    let idle_closed = app
        .metric(r#"msgw_grpc_connections_closed_total{reason="idle"}"#)
        .await;
    assert!(idle_closed >= Some(1.0), "{idle_closed:?}");
}

#[tokio::test]
async fn a_connection_that_never_speaks_is_closed_after_the_handshake_timeout() {
    let handshake = Duration::from_millis(500);
    let app = spawn(bounded(PortLimits {
        handshake_timeout: handshake,
        ..PortLimits::default()
    }))
    .await;
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    let opened = Instant::now();
    assert!(closed(&mut silent, Duration::from_secs(3)).await);
    assert!(opened.elapsed() >= handshake, "closed before the timeout");
    // Half a preface is not a preface.
    let mut halfway = TcpStream::connect(app.addr).await.unwrap();
    halfway.write_all(&PREFACE[..10]).await.unwrap();
    assert!(closed(&mut halfway, Duration::from_secs(3)).await);
    assert_eq!(
        app.metric(r#"msgw_grpc_connections_closed_total{reason="handshake_timeout"}"#)
            .await,
        Some(2.0)
    );
}

/// Proves `stream` is alive: a webhook's event arrives on it.
async fn still_streaming(
    app: &TestApp,
    stream: &mut tonic::Streaming<msgw::transport::proto::StreamStatusEventsResponse>,
    id: u64,
) {
    let body = json!({"success": true, "id": id.to_string(), "msg_id": format!("m{id}"),
                      "type": "sms", "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(&app.hook_path(id), body.to_string()).await,
        200
    );
    assert_eq!(next(stream).await.id, id);
}

#[tokio::test]
async fn a_quiet_event_stream_outlives_the_idle_timeout() {
    let idle = Duration::from_millis(500);
    let app = spawn(bounded(PortLimits {
        idle_timeout: idle,
        ..PortLimits::default()
    }))
    .await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    // A sentinel opened after the stream, speaking HTTP/2 but opening no stream, is
    // closed for idleness: by then the stream's connection has been quiet for longer.
    let mut sentinel = TcpStream::connect(app.addr).await.unwrap();
    sentinel.write_all(PREFACE).await.unwrap();
    goaway(&mut sentinel).await;
    let idle_closed = r#"msgw_grpc_connections_closed_total{reason="idle"}"#;
    let failure = "the sentinel was never counted closed for idleness";
    wait::until_some(Duration::from_secs(10), failure, || async {
        app.metric(idle_closed).await.filter(|&n| n >= 1.0)
    })
    .await;
    still_streaming(&app, &mut stream, 4101).await;
    assert_eq!(
        app.metric(idle_closed).await,
        Some(1.0),
        "no connection but the sentinel was closed for idleness"
    );
}

#[tokio::test]
async fn at_the_cap_the_longest_idle_connection_makes_room_and_busy_ones_stay() {
    // The harness's own connection is the first of two.
    let app = spawn(bounded(PortLimits {
        max_connections: Some(2),
        ..PortLimits::default()
    }))
    .await;
    let mut idle = TcpStream::connect(app.addr).await.unwrap();
    idle.write_all(PREFACE).await.unwrap();
    // The server's SETTINGS: the handshake is done and the connection counted.
    assert_eq!(next_frame(&mut idle).await, Some(crate::frames::SETTINGS));
    // The harness's connection carries a stream: it is busy, `idle` is not.
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;

    health(app.addr)
        .await
        .expect("a new caller is served at the cap");
    goaway(&mut idle).await;
    assert!(closed(&mut idle, Duration::from_secs(3)).await);
    still_streaming(&app, &mut stream, 4201).await;
    assert_eq!(
        app.metric(r#"msgw_grpc_connections_closed_total{reason="evicted"}"#)
            .await,
        Some(1.0)
    );

    // Every connection busy: a new one is refused, and the busy ones go on.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut second = msgw::transport::proto::event_service_client::EventServiceClient::new(channel)
        .stream_status_events(StreamStatusEventsRequest::default())
        .await
        .expect("the second connection makes room for itself")
        .into_inner();
    assert!(health(app.addr).await.is_err(), "served past the cap");
    // The client may try more than once.
    let refused = app.metric("msgw_grpc_connections_refused_total").await;
    assert!(refused >= Some(1.0), "{refused:?}");
    still_streaming(&app, &mut stream, 4202).await;
    assert_eq!(next(&mut second).await.id, 4202);
    // The second stream is still open: it carries a later event too.
    still_streaming(&app, &mut stream, 4203).await;
    assert_eq!(
        next(&mut second).await.id,
        4203,
        "the second stream is still open"
    );
}

/// `msgw serve` as a process under `ulimit -n <files>`, against its sandbox: its gRPC
/// address, and every line it logs.
fn start_limited(
    files: u32,
    store: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, SocketAddr, Arc<Mutex<Vec<String>>>) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_msgw"))
        .args(crate::helpers::serve_args(store))
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("msgw starts");
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("msgw logs until it serves").unwrap();
        log.lock().unwrap().push(line.clone());
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["fields"]["message"] == "msgw serving" {
            break v["fields"]["grpc_addr"].as_str().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn({
        let log = log.clone();
        move || {
            for line in lines.map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        }
    });
    (child, addr, log)
}

#[tokio::test]
async fn a_flood_of_silent_connections_never_keeps_a_caller_out_under_a_low_file_limit() {
    const SILENT: usize = 1500;
    let store = tempfile::tempdir().unwrap();
    let (mut child, addr, log) = start_limited(
        1024,
        store.path(),
        &[
            "--grpc-handshake-timeout",
            "3s",
            "--grpc-idle-timeout",
            "3s",
        ],
    );
    let cap = log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "gRPC port bounds")
        .and_then(|v| v["fields"]["max_connections"].as_u64())
        .expect("msgw logs its connection cap");
    assert!(
        (cap as usize) < SILENT && cap > 100,
        "a cap of {cap} under a file limit of 1024"
    );

    let opened = Arc::new(AtomicUsize::new(0));
    let flood = tokio::spawn({
        let opened = opened.clone();
        async move {
            let mut silent = Vec::with_capacity(SILENT);
            for n in 0..SILENT {
                let mut tcp = TcpStream::connect(addr).await.expect("the kernel takes it");
                // Every other one speaks HTTP/2 and goes quiet: it gets GOAWAY and a moment
                // to close when evicted, so closing connections pile up.
                if n % 2 == 0 {
                    let _ = tcp.write_all(PREFACE).await;
                }
                silent.push(tcp);
                opened.fetch_add(1, Ordering::Relaxed);
            }
            silent
        }
    });
    // A caller during the flood: once it is under way.
    let failure = "the flood never got under way";
    wait::until(Duration::from_secs(10), failure, || {
        opened.load(Ordering::Relaxed) >= 100
    })
    .await;
    let asked = Instant::now();
    health(addr).await.expect("served during the flood");
    let answered = asked.elapsed();
    let mut silent = flood.await.unwrap();
    // And one after it, with every silent connection still open.
    let asked_after = Instant::now();
    health(addr).await.expect("served after the flood");
    let answered_after = asked_after.elapsed();
    assert!(
        answered < Duration::from_secs(5) && answered_after < Duration::from_secs(5),
        "health answered in {answered:?} during and {answered_after:?} after the flood"
    );
    println!(
        "{SILENT} silent connections, cap {cap}: health answered in {answered:?} during, {answered_after:?} after the flood"
    );

    // Every quiet connection is closed: evicted, or at the handshake or idle timeout.
    for tcp in &mut silent {
        assert!(
            closed(tcp, Duration::from_secs(6)).await,
            "a silent connection still open"
        );
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let log = log.lock().unwrap();
    assert!(
        !log.iter().any(|l| l.contains("Too many open files")),
        "msgw ran out of files: {}",
        log.iter()
            .filter(|l| l.contains("Too many open files"))
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test]
async fn health_watch_streams_without_a_token_cannot_hold_the_port() {
    let app = spawn(bounded(PortLimits {
        max_connections: Some(3),
        ..PortLimits::default()
    }))
    .await;
    // The harness's connection carries an event stream: a caller's, guarded.
    let mut events = subscribe(&app, StreamStatusEventsRequest::default()).await;
    // Two connections each hold a Health/Watch stream, which needs no token.
    let mut watches = Vec::new();
    for _ in 0..2 {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", app.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut watch = HealthClient::new(channel)
            .watch(HealthCheckRequest::default())
            .await
            .unwrap()
            .into_inner();
        watch.next().await.expect("the current status").unwrap();
        watches.push(watch);
    }
    health(app.addr)
        .await
        .expect("a watcher makes room for a new caller");
    still_streaming(&app, &mut events, 4301).await;
}
