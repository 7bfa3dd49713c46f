//! Two more hostile clients of `cargo bench --bench hostile`, which print figures
//! rather than RSS (`--only status-queries`, `--only admin-flood`):
//!
//! - `status-queries`: 600 `GetMessageStatus` of one id in a row, then 200 at once,
//!   from one caller: how many gateway `status` requests msgw made for them
//!   (`msgw_upstream_requests_total`) and where the answers came from
//!   (`msgw_status_answers_total`);
//! - `admin-flood`: 800 sockets that connect to the admin port, say nothing and
//!   reconnect whenever msgw closes them, while `/livez` and `/readyz` are probed 20
//!   times on new connections (1 s timeout): the probes' p50 and slowest answer.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use msgw::transport::proto::{
    GetMessageStatusRequest, SendSmsRequest, messaging_service_client::MessagingServiceClient,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::watch,
};

use super::{Args, TOKEN, metrics_text, start};

/// A request of the bench's caller.
fn as_caller<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Ok(value) = format!("Bearer {TOKEN}").parse() {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

/// The sum of the samples of metric `name` whose labels include `label`.
async fn metric_sum(admin: SocketAddr, name: &str, label: &str) -> f64 {
    metrics_text(admin)
        .await
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// 600 status queries of one id in a row, then 200 at once: gateway lookups and sources.
pub async fn status_queries(args: &Args) -> anyhow::Result<()> {
    let msgw = start(args, false, None)?;
    let mut client = MessagingServiceClient::connect(format!("http://{}", msgw.grpc)).await?;
    let id = 424_242;
    client
        .send_sms(as_caller(SendSmsRequest {
            id,
            phone: "380971234567".into(),
            message: "hostile bench".into(),
            signature: "msgw".into(),
            ..Default::default()
        }))
        .await?;
    let lookups = |admin| async move {
        metric_sum(
            admin,
            "msgw_upstream_requests_total",
            r#"operation="status""#,
        )
        .await
    };
    let before = lookups(msgw.admin).await;
    let started = Instant::now();
    let mut failed = 0;
    for _ in 0..600 {
        let query = GetMessageStatusRequest {
            id,
            ..Default::default()
        };
        failed += usize::from(client.get_message_status(as_caller(query)).await.is_err());
    }
    let in_a_row = started.elapsed();
    let after_row = lookups(msgw.admin).await;
    let at_once = futures_util::future::join_all((0..200).map(|_| {
        let mut client = client.clone();
        async move {
            let query = GetMessageStatusRequest {
                id,
                ..Default::default()
            };
            client.get_message_status(as_caller(query)).await.is_err()
        }
    }))
    .await;
    failed += at_once.iter().filter(|f| **f).count();
    let after_once = lookups(msgw.admin).await;
    let mut sources = Vec::new();
    for source in ["store", "lookup", "shared-lookup", "cache"] {
        let label = format!(r#"source="{source}""#);
        let n = metric_sum(msgw.admin, "msgw_status_answers_total", &label).await;
        sources.push(format!("{source} {n}"));
    }
    println!(
        "status-queries: 600 GetMessageStatus of one id in a row ({:.1} s) -> {} gateway status requests; 200 at once -> {}; {} failed; answers by source: {}",
        in_a_row.as_secs_f64(),
        after_row - before,
        after_once - after_row,
        failed,
        if sources.iter().all(|s| s.ends_with(" 0")) {
            "(this msgw does not say)".to_owned()
        } else {
            sources.join(", ")
        }
    );
    Ok(())
}

/// `/livez` and `/readyz` beside 800 idle reconnecting sockets on the admin port.
pub async fn admin_flood(args: &Args) -> anyhow::Result<()> {
    let msgw = start(args, false, None)?;
    let sockets = 800;
    let (stop_tx, stop) = watch::channel(false);
    let closed = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..sockets)
        .map(|_| tokio::spawn(silent(msgw.admin, stop.clone(), closed.clone())))
        .collect();
    // Until the flood churns: every socket has been closed once, on average.
    let deadline = Instant::now() + Duration::from_secs(20);
    while closed.load(Ordering::Relaxed) < sockets && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut took = Vec::new();
    let mut failed = 0;
    for i in 0..20 {
        let path = if i % 2 == 0 { "/livez" } else { "/readyz" };
        let asked = Instant::now();
        let answered = tokio::time::timeout(Duration::from_secs(1), probe(msgw.admin, path)).await;
        took.push(asked.elapsed());
        failed += usize::from(!matches!(answered, Ok(Ok(true))));
    }
    stop_tx.send_replace(true);
    for socket in flood {
        let _ = socket.await;
    }
    took.sort();
    println!(
        "admin-flood: /livez and /readyz beside {sockets} idle reconnecting admin sockets ({} closed by msgw): p50 {:.0} ms, slowest {:.0} ms, {failed} of 20 not answered 200 within 1 s",
        closed.load(Ordering::Relaxed),
        took[took.len() / 2].as_secs_f64() * 1e3,
        took[took.len() - 1].as_secs_f64() * 1e3,
    );
    Ok(())
}

/// A socket that connects, says nothing, and reconnects as soon as msgw closes it.
async fn silent(addr: SocketAddr, mut stop: watch::Receiver<bool>, closed: Arc<AtomicUsize>) {
    let mut buf = [0u8; 256];
    while !*stop.borrow() {
        let Ok(mut tcp) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        loop {
            tokio::select! {
                read = tcp.read(&mut buf) => match read {
                    Ok(1..) => continue,
                    Ok(0) | Err(_) => {
                        closed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                },
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

/// GETs `path` on a new connection, as a kubelet probe does: whether it is 200.
async fn probe(admin: SocketAddr, path: &str) -> std::io::Result<bool> {
    let mut tcp = TcpStream::connect(admin).await?;
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: msgw\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head).await?;
    Ok(&head == b"HTTP/1.1 200")
}
