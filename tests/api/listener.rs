//! The webhook listener faces the internet: clients that send slowly, never finish
//! or sit idle are cut off, and the number of open connections is bounded.

use std::time::Duration;

use msgw::http_listener::ListenerLimits;
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

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let app = app(ListenerLimits {
        max_connections: 3,
        ..ListenerLimits::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(app.http_addr).await.unwrap());
    }
    let mut waiting = TcpStream::connect(app.http_addr).await.unwrap();
    waiting
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: msgw\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting.read_exact(&mut first))
            .await
            .is_err(),
        "served beyond the connection limit"
    );
    drop(held.pop());
    let answer = read_until_closed(&mut waiting, Duration::from_secs(3))
        .await
        .expect("served once a connection closed");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}
