//! The admin listener answers probes whatever else is connected to it: sockets that
//! connect, say nothing and reconnect whenever msgw drops them cannot keep `/livez`
//! and `/readyz` waiting, nor, on the webhook listener, the gateway's webhooks.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use msgw::transport::http_listener::ListenerLimits;
use serde_json::json;
use tokio::{io::AsyncReadExt, net::TcpStream};

use crate::helpers::{Options, TestApp, spawn, spawn_app};

/// Sockets that connect and say nothing, each reconnecting as soon as msgw closes it,
/// on a thread and runtime of their own (as clients elsewhere would be), until dropped
/// or for a minute at most.
struct Flood {
    stop: Arc<AtomicBool>,
    /// Connections made, and connections msgw closed.
    connected: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(addr: SocketAddr, sockets: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let connected = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::spawn({
            let (stop, connected, closed) = (stop.clone(), connected.clone(), closed.clone());
            move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let until = tokio::time::Instant::now() + Duration::from_secs(60);
                    let (stop_tx, stopped) = tokio::sync::watch::channel(false);
                    // Tells the sockets to stop when the test drops the flood, or after
                    // the minute.
                    tokio::spawn({
                        let stop = stop.clone();
                        async move {
                            while !stop.load(Ordering::Relaxed)
                                && tokio::time::Instant::now() < until
                            {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            stop_tx.send_replace(true);
                        }
                    });
                    let sockets: Vec<_> = (0..sockets)
                        .map(|_| {
                            let (stop, connected, closed, stopped) = (
                                stop.clone(),
                                connected.clone(),
                                closed.clone(),
                                stopped.clone(),
                            );
                            tokio::spawn(async move {
                                while !stop.load(Ordering::Relaxed)
                                    && tokio::time::Instant::now() < until
                                {
                                    let Ok(mut tcp) = TcpStream::connect(addr).await else {
                                        tokio::time::sleep(Duration::from_millis(5)).await;
                                        continue;
                                    };
                                    connected.fetch_add(1, Ordering::Relaxed);
                                    let mut buf = [0u8; 256];
                                    // Waits for msgw to close it (no timer per socket:
                                    // the flood's own cost stays off the machine's two
                                    // cores, which msgw shares with it here).
                                    let mut stopping = stopped.clone();
                                    loop {
                                        tokio::select! {
                                            read = tcp.read(&mut buf) => match read {
                                                Ok(1..) => continue,
                                                Ok(0) | Err(_) => {
                                                    closed.fetch_add(1, Ordering::Relaxed);
                                                    break;
                                                }
                                            },
                                            _ = stopping.wait_for(|s| *s) => break,
                                        }
                                    }
                                }
                            })
                        })
                        .collect();
                    for socket in sockets {
                        let _ = socket.await;
                    }
                });
            }
        });
        Self {
            stop,
            connected,
            closed,
            thread: Some(thread),
        }
    }

    /// Waits until every socket has connected and msgw has closed at least `closed`
    /// of them: the flood holds the port and churns.
    async fn churning(&self, sockets: usize, closed: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.connected.load(Ordering::Relaxed) < sockets
            || self.closed.load(Ordering::Relaxed) < closed
        {
            assert!(
                Instant::now() < deadline,
                "the flood never got going: {} connected, {} closed",
                self.connected.load(Ordering::Relaxed),
                self.closed.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// GETs `path` of the admin listener on a new connection, as a kubelet probe does,
/// giving up after `timeout`: its status and how long it took.
async fn probe(app: &TestApp, path: &str, timeout: Duration) -> (Result<u16, String>, Duration) {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let asked = Instant::now();
    let status = client
        .get(format!("http://{}{path}", app.admin_addr))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("{e:?}"));
    (status, asked.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_within_a_second_while_idle_reconnecting_sockets_hold_the_admin_port() {
    let app = spawn_app().await;
    let sockets = msgw::transport::admin::ADMIN_CONNECTIONS + 16;
    let flood = Flood::start(app.admin_addr, sockets);
    flood.churning(sockets, 16).await;
    let second = Duration::from_secs(1);
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        for path in ["/livez", "/readyz"] {
            let (status, took) = probe(&app, path, second).await;
            assert_eq!(status, Ok(200), "{path} after {took:?}");
            assert!(took < second, "{path} answered in {took:?}");
            slowest = slowest.max(took);
        }
    }
    let churned = flood.closed.load(Ordering::Relaxed);
    drop(flood);
    println!("{sockets} idle sockets, {churned} closed by msgw: slowest probe {slowest:?}");
    let evicted = app
        .metric(r#"msgw_http_connections_closed_total{listener="admin",reason="evicted"}"#)
        .await;
    assert!(evicted >= Some(16.0), "{evicted:?}");
}

/// Probes `/livez` and `/readyz` `rounds` times each beside `sockets` idle reconnecting
/// sockets on the admin port: how long each took, sorted; every one must answer 200
/// within a second.
async fn probes_beside_a_flood(sockets: usize, rounds: usize) -> Vec<Duration> {
    let app = spawn_app().await;
    let flood = Flood::start(app.admin_addr, sockets);
    flood.churning(sockets, sockets).await;
    let second = Duration::from_secs(1);
    let mut answers = Vec::new();
    for _ in 0..rounds {
        for path in ["/livez", "/readyz"] {
            // Given longer than the second it must take, so a slow answer is measured.
            let (status, t) = probe(&app, path, second * 5).await;
            answers.push((path, status, t));
        }
    }
    let churned = flood.closed.load(Ordering::Relaxed);
    drop(flood);
    let mut took: Vec<Duration> = answers.iter().map(|(_, _, t)| *t).collect();
    took.sort();
    println!(
        "{sockets} idle reconnecting sockets, {churned} closed by msgw: probes p50 {:?}, slowest {:?}",
        took[took.len() / 2],
        took[took.len() - 1]
    );
    for (path, status, t) in &answers {
        assert_eq!(*status, Ok(200), "{path} after {t:?}: {answers:?}");
        assert!(*t < second, "{path} answered in {t:?}: {answers:?}");
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_within_a_second_beside_800_idle_reconnecting_admin_sockets() {
    let took = probes_beside_a_flood(800, 10).await;
    assert_eq!(took.len(), 20);
}

#[tokio::test]
async fn a_silent_admin_connection_is_closed_after_the_short_header_timeout() {
    let app = spawn_app().await;
    let mut silent = TcpStream::connect(app.admin_addr).await.unwrap();
    let opened = Instant::now();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut buf))
        .await
        .expect("closed")
        .ok();
    let after = opened.elapsed();
    assert!(
        after >= msgw::transport::admin::HEADER_TIMEOUT
            && after < msgw::transport::admin::HEADER_TIMEOUT * 2,
        "closed after {after:?}"
    );
    assert_eq!(
        app.metric(
            r#"msgw_http_connections_closed_total{listener="admin",reason="header_timeout"}"#
        )
        .await,
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_taken_while_idle_reconnecting_sockets_hold_the_webhook_listener() {
    let cap = 16;
    let app = spawn(Options {
        webhook_limits: ListenerLimits {
            max_connections: cap,
            ..ListenerLimits::default()
        },
        ..Options::default()
    })
    .await;
    let flood = Flood::start(app.http_addr, cap * 2);
    flood.churning(cap * 2, cap).await;
    for id in 7001..7011_u64 {
        let body = json!({"success": true, "id": id.to_string(), "msg_id": format!("m{id}"),
                          "type": "sms", "status": "DELIVERED"});
        let posted = Instant::now();
        let status = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
            .post(format!("http://{}{}", app.http_addr, app.hook_path(id)))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map(|r| r.status().as_u16())
            .map_err(|e| format!("{e:?}"));
        assert_eq!(status, Ok(200), "webhook {id} after {:?}", posted.elapsed());
    }
    drop(flood);
    let stored = app
        .metric(r#"msgw_webhooks_total{endpoint="status",result="stored"}"#)
        .await;
    assert_eq!(stored, Some(10.0));
}
