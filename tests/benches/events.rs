//! Load benchmark of the delivery-event path: drives webhooks into a real msgw
//! (HTTP on loopback, SQLite store in a temp dir) at a fixed rate while N gRPC
//! subscribers stream every event, then prints the ingest rate and the
//! webhook→stream latency (from the start of the POST to the event's arrival at
//! a subscriber). Bounded in count and time; stops by itself.
//!
//! `cargo bench --bench events -- --rate 2000 --subscribers 100 --seconds 10`
//!
//! Across replicas: `--postgres --replicas 2` runs two msgw on one PostgreSQL schema
//! (created for the run on the server `MSGW_TEST_POSTGRES_URL` names, default the local
//! one, and dropped after); webhooks go to the first replica, subscribers stream from
//! the last, so the latency is webhook on replica A → NOTIFY → stream on replica B.
//!
//! `cargo bench --bench events -- --postgres --replicas 2 --rate 1000 --subscribers 20`

#[path = "../common/postgres.rs"]
mod postgres;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use msgw::{
    core::hooks::HookSigner,
    core::ports::store::Retention,
    core::reconcile::ReconcileConfig,
    process::app::Application,
    process::config::{Config, Upstream},
    sandbox::SandboxConfig,
    transport::proto::{StreamStatusEventsRequest, event_service_client::EventServiceClient},
};
use tokio::sync::Semaphore;
use tokio_stream::StreamExt;

#[derive(Parser, Debug)]
#[command(about = "msgw webhook → event stream benchmark")]
struct Args {
    /// Webhooks per second.
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// Concurrent stream subscribers.
    #[arg(long, default_value_t = 100)]
    subscribers: usize,
    /// How long to send.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// gRPC connections the subscribers share.
    #[arg(long, default_value_t = 10)]
    connections: usize,
    /// Webhooks in flight at most.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Store URL; default: a SQLite file in a temp dir.
    #[arg(long, conflicts_with = "postgres")]
    store: Option<String>,
    /// A fresh PostgreSQL schema for the run (dropped after).
    #[arg(long)]
    postgres: bool,
    /// msgw replicas on the store (more than one needs PostgreSQL): webhooks go to the
    /// first, subscribers stream from the last.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

const SECRET: &str = "bench-webhook-secret-0123456789";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let total = args.rate * args.seconds;
    let dir = tempfile::tempdir()?;
    anyhow::ensure!(
        args.replicas >= 1 && (args.replicas == 1 || args.postgres),
        "--replicas above 1 needs --postgres"
    );
    let schema = if args.postgres {
        Some(postgres::TestSchema::create().await)
    } else {
        None
    };
    let store_url = match &schema {
        Some(schema) => schema.url.clone(),
        None => args
            .store
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display())),
    };
    let config = Config {
        webhook_secret: Some(SECRET.to_owned().into()),
        retention: Retention {
            max_age: Duration::from_secs(3600),
            max_events: 10_000_000,
            claims_max_age: Duration::from_secs(7 * 86_400),
            guard_max_age: std::time::Duration::from_secs(3600),
            trusted_keys_max_age: std::time::Duration::from_secs(3600),
        },
        reconcile: ReconcileConfig {
            interval: Duration::from_secs(3600),
            first_after: Duration::from_secs(3600),
            max_backoff: Duration::from_secs(3600),
        },
        upstream_timeout: Duration::from_secs(5),
        ..Config::for_tests(Upstream::Sandbox(SandboxConfig::default()), store_url)
    };
    let mut servers = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..args.replicas {
        let app = Application::build(config.clone()).await?;
        addrs.push((app.grpc_addr()?, app.http_addr()?));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run(async {
            let _ = stop_rx.await;
        }));
        servers.push((stop_tx, server));
    }
    // Webhooks in on the first replica, events out of the last.
    let (http, grpc) = (addrs[0].1, addrs[args.replicas - 1].0);

    // When each webhook's POST started, in ns since `origin`, indexed by client id.
    let origin = Instant::now();
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..=total).map(|_| AtomicU64::new(0)).collect());

    let mut channels = Vec::new();
    for _ in 0..args.connections.max(1) {
        channels.push(
            tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))?
                .connect()
                .await?,
        );
    }
    let mut subscribers = tokio::task::JoinSet::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(args.subscribers.max(1));
    for i in 0..args.subscribers {
        let mut client = EventServiceClient::new(channels[i % channels.len()].clone());
        let (sent_at, ready) = (sent_at.clone(), ready_tx.clone());
        subscribers.spawn(async move {
            let mut stream = client
                .stream_status_events(StreamStatusEventsRequest::default())
                .await
                .expect("subscribe")
                .into_inner();
            let _ = ready.send(()).await;
            let mut latencies = Vec::with_capacity(total as usize);
            while latencies.len() < total as usize {
                let Ok(Some(Ok(item))) =
                    tokio::time::timeout(Duration::from_secs(30), stream.next()).await
                else {
                    break;
                };
                let now = origin.elapsed().as_nanos() as u64;
                if let Some(e) = item.event {
                    let started = sent_at[e.id as usize].load(Ordering::Relaxed);
                    latencies.push(Duration::from_nanos(now.saturating_sub(started)));
                }
            }
            latencies
        });
    }
    for _ in 0..args.subscribers {
        ready_rx.recv().await;
    }

    let signer = HookSigner::new(&SECRET.to_owned().into());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    // How long each POST took until msgw acknowledged it (the commit is inside).
    let ack_ns: Arc<Vec<AtomicU64>> = Arc::new((0..=total).map(|_| AtomicU64::new(0)).collect());
    let mut posts = tokio::task::JoinSet::new();
    let start = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / args.rate as f64);
    for id in 1..=total {
        tokio::time::sleep_until((start + interval.mul_f64((id - 1) as f64)).into()).await;
        let permit = permits.clone().acquire_owned().await?;
        let url = format!(
            "http://{http}/v1/webhooks/status/{}",
            signer.token(
                msgw::core::domain::ClientId::new(id).map_err(|e| anyhow::anyhow!("{e:?}"))?
            )
        );
        let body = format!(
            r#"{{"success":true,"id":"{id}","msg_id":"{}","type":"sms","status":"DELIVERED","updated":"2026-01-01T00:00:00+00:00"}}"#,
            100_000_000 + id
        );
        let (client, sent_at, acked, failed, ack_ns) = (
            client.clone(),
            sent_at.clone(),
            acked.clone(),
            failed.clone(),
            ack_ns.clone(),
        );
        posts.spawn(async move {
            let began = origin.elapsed().as_nanos() as u64;
            sent_at[id as usize].store(began, Ordering::Relaxed);
            let ok = client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok { &acked } else { &failed }.fetch_add(1, Ordering::Relaxed);
            let done = origin.elapsed().as_nanos() as u64;
            ack_ns[id as usize].store(done.saturating_sub(began), Ordering::Relaxed);
            drop(permit);
        });
    }
    while posts.join_next().await.is_some() {}
    let ingest = start.elapsed();

    let mut all = Vec::new();
    let mut complete = 0;
    while let Some(r) = subscribers.join_next().await {
        let latencies = r?;
        complete += usize::from(latencies.len() == total as usize);
        all.extend(latencies);
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };

    let path = if args.replicas > 1 {
        format!(
            "webhooks → replica 1 → PostgreSQL → NOTIFY → replica {} → {} gRPC subscribers",
            args.replicas, args.subscribers
        )
    } else if schema.is_some() {
        format!(
            "webhooks → PostgreSQL → {} gRPC subscribers",
            args.subscribers
        )
    } else {
        format!("webhooks → SQLite → {} gRPC subscribers", args.subscribers)
    };
    println!("msgw events benchmark ({path}, loopback, one process)");
    println!(
        "  target rate        {} webhooks/s for {} s ({total} webhooks)",
        args.rate, args.seconds
    );
    println!(
        "  ingest             {} acknowledged, {} failed in {:.2} s = {:.0} webhooks/s",
        acked.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        ingest.as_secs_f64(),
        acked.load(Ordering::Relaxed) as f64 / ingest.as_secs_f64()
    );
    println!(
        "  deliveries         {} events to subscribers; {complete}/{} subscribers got every event",
        all.len(),
        args.subscribers
    );
    let mut acks: Vec<u64> = ack_ns
        .iter()
        .skip(1)
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    acks.sort_unstable();
    let ack_ms = |p: f64| {
        let i = ((acks.len() as f64 * p) as usize).min(acks.len().saturating_sub(1));
        acks.get(i).copied().unwrap_or_default() as f64 / 1e6
    };
    println!(
        "  webhook ack        p50 {:.2} ms   p99 {:.2} ms   (POST until 200: parse, verify, commit)",
        ack_ms(0.50),
        ack_ms(0.99)
    );
    println!(
        "  webhook→stream     p50 {:.2} ms   p99 {:.2} ms   p99.9 {:.2} ms   max {:.2} ms",
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        pct(0.999).as_secs_f64() * 1e3,
        all.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );

    for (stop, server) in servers {
        let _ = stop.send(());
        server.await??;
    }
    drop(schema);
    Ok(())
}
