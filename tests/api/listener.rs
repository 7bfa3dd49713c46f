//! The webhook listener faces the internet: clients that send slowly, never finish
//! or sit idle are cut off, and the number of open connections is bounded; at the cap
//! the connection waiting for a request longest makes room, one serving a request
//! never does.

use std::time::Duration;

use msgw::transport::http_listener::ListenerLimits;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{Options, TestApp, spawn};

async fn app(limits: ListenerLimits) -> TestApp {
    spawn(Options {
        webhook_limits: limits,
        ..Options::default()
    })
    .await
}

/// Reads until the server closes the connection (or `within` passes); what it sent.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let closed = tokio::time::timeout(within, stream.read_to_end(&mut got)).await;
    closed
        .ok()
        .map(|_| String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn unfinished_headers_and_trickled_bodies_are_cut_off() {
    let app = app(ListenerLimits {
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        max_connections: 1024,
        ..ListenerLimits::default()
    })
    .await;
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(app.http_addr).await.unwrap();
        s.write_all(b"POST /v1/webhooks/status/x HTTP/1.1\r\nHost: msgw\r\n")
            .await
            .unwrap();
        stalled.push(s);
    }
    let mut trickling = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(app.http_addr).await.unwrap();
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: msgw\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{{",
            app.hook_path(1)
        );
        s.write_all(head.as_bytes()).await.unwrap();
        trickling.push(s);
    }
    // Keep trickling one byte per 50 ms while the timeouts run out.
    let feeder = tokio::spawn(async move {
        for _ in 0..40 {
            for s in &mut trickling {
                let _ = s.write_all(b" ").await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        trickling
    });
    for s in &mut stalled {
        assert!(
            read_until_closed(s, Duration::from_secs(3)).await.is_some(),
            "a connection with unfinished headers is still open"
        );
    }
    let mut trickling = feeder.await.unwrap();
    for s in &mut trickling {
        let answer = read_until_closed(s, Duration::from_secs(3))
            .await
            .expect("a trickled body is cut off");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    let late = app
        .metric(r#"msgw_http_connections_closed_total{listener="webhook",reason="header_timeout"}"#)
        .await;
    assert_eq!(late, Some(20.0), "the unfinished headers, by reason");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let app = app(ListenerLimits {
        header_timeout: Duration::from_millis(300),
        ..ListenerLimits::default()
    })
    .await;
    let mut s = TcpStream::connect(app.http_addr).await.unwrap();
    // Any request will do: the webhook listener answers 404 off its webhook paths.
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: msgw\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut s, Duration::from_secs(3))
        .await
        .expect("closed after idling past the header timeout");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}

/// A webhook POST whose body never finishes: its connection is serving a request until
/// the body timeout answers it. Returns once msgw's handler reads the body (it asks
/// for it with `100 Continue`).
async fn busy(app: &TestApp) -> TcpStream {
    let mut s = TcpStream::connect(app.http_addr).await.unwrap();
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: msgw\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n",
        app.hook_path(1)
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut go_on = [0u8; 25];
    s.read_exact(&mut go_on).await.unwrap();
    assert_eq!(&go_on, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"{").await.unwrap();
    s
}

/// Sends a request that closes its connection on `s`; its answer, once it comes.
async fn ask(s: &mut TcpStream, within: Duration) -> Option<String> {
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: msgw\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    read_until_closed(s, within).await
}

#[tokio::test]
async fn at_the_cap_the_connection_waiting_longest_makes_room_and_busy_ones_stay() {
    let app = app(ListenerLimits {
        max_connections: 3,
        body_timeout: Duration::from_secs(2),
        ..ListenerLimits::default()
    })
    .await;
    let mut serving = busy(&app).await;
    let mut silent = TcpStream::connect(app.http_addr).await.unwrap();
    // Idle between requests: a keep-alive connection that was answered once.
    let mut idle = TcpStream::connect(app.http_addr).await.unwrap();
    idle.write_all(b"GET /metrics HTTP/1.1\r\nHost: msgw\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 404");

    // At the cap: the silent connection, waiting longest, makes room at once.
    let mut newcomer = TcpStream::connect(app.http_addr).await.unwrap();
    let answer = ask(&mut newcomer, Duration::from_secs(1))
        .await
        .expect("served at once at the cap");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(
        read_until_closed(&mut silent, Duration::from_secs(1))
            .await
            .is_some(),
        "the connection waiting longest was closed"
    );
    // Then, at the cap again, the one idle longest.
    let _later = TcpStream::connect(app.http_addr).await.unwrap();
    let mut second = TcpStream::connect(app.http_addr).await.unwrap();
    assert!(ask(&mut second, Duration::from_secs(1)).await.is_some());
    assert!(
        read_until_closed(&mut idle, Duration::from_secs(1))
            .await
            .is_some(),
        "the idle keep-alive connection was closed"
    );
    // The connection serving a request was left to finish it.
    let answer = read_until_closed(&mut serving, Duration::from_secs(4))
        .await
        .expect("answered at the body timeout");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(
        app.metric(r#"msgw_http_connections_closed_total{listener="webhook",reason="evicted"}"#)
            .await,
        Some(2.0)
    );
}

#[tokio::test]
async fn when_every_connection_is_serving_a_request_a_new_one_waits_for_an_answer() {
    let app = app(ListenerLimits {
        max_connections: 2,
        body_timeout: Duration::from_secs(1),
        ..ListenerLimits::default()
    })
    .await;
    let mut serving = [busy(&app).await, busy(&app).await];
    let asked = std::time::Instant::now();
    let mut waiting = TcpStream::connect(app.http_addr).await.unwrap();
    let answer = ask(&mut waiting, Duration::from_secs(4))
        .await
        .expect("served once a request was answered");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(
        asked.elapsed() >= Duration::from_millis(900),
        "served after {:?}, before any busy connection was answered",
        asked.elapsed()
    );
    // Both were served to their end.
    for s in &mut serving {
        let answer = read_until_closed(s, Duration::from_secs(3)).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
}
