//! Lateness of scheduled sends: schedules N messages (default 1,000) for the same
//! second, a few seconds ahead, then prints how late the fake gateway received each
//! (its arrival minus `send_at`: p50, p99, max), and whether any arrived twice or not
//! at all. Runs on SQLite (one msgw) and on PostgreSQL with two replicas (a schema
//! created for the run on `MSGW_TEST_POSTGRES_URL`, default the local server, dropped
//! after), scheduling through both. Bounded in time; stops by itself.
//!
//! `cargo bench --bench schedule -- --messages 1000 --ahead 3`

#[path = "../common/bench_config.rs"]
mod bench_config;
#[path = "../common/gateway.rs"]
mod gateway;
#[path = "../common/postgres.rs"]
mod postgres;
#[path = "../common/wait.rs"]
mod wait;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use clap::Parser;
use msgw::{
    process::app::Application,
    process::config::Config,
    transport::proto::{SendSmsRequest, messaging_service_client::MessagingServiceClient},
};
use tokio::sync::Semaphore;

use gateway::{FakeGateway, counting_sends};

/// When the gateway first received each id, and how often.
type Arrivals = HashMap<u64, (DateTime<Utc>, u32)>;

#[derive(Parser, Debug)]
#[command(about = "msgw scheduled-send lateness benchmark")]
struct Args {
    /// Messages scheduled for the same second.
    #[arg(long, default_value_t = 1000)]
    messages: u64,
    /// How far ahead (whole seconds, counted from the next whole second): enough for
    /// every message to be scheduled before their time.
    #[arg(long, default_value_t = 3)]
    ahead: u64,
    /// Concurrent scheduling calls.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Only the SQLite run.
    #[arg(long)]
    sqlite_only: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    run("SQLite, 1 replica", &sqlite, 1, &args).await?;
    if !args.sqlite_only {
        let schema = postgres::TestSchema::create().await;
        run("PostgreSQL, 2 replicas", &schema.url, 2, &args).await?;
    }
    Ok(())
}

async fn run(label: &str, store_url: &str, replicas: usize, args: &Args) -> anyhow::Result<()> {
    let gateway = FakeGateway::accepting_sends(Duration::ZERO).await;
    let arrivals: Arc<Mutex<Arrivals>> = Arc::default();
    gateway.respond_with({
        let (arrivals, sends) = (arrivals.clone(), counting_sends());
        move |body| {
            let now = Utc::now();
            let mut seen = arrivals.lock().unwrap();
            for item in body["data"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                if item["type"] == "sms"
                    && let Some(id) = item["id"].as_u64()
                {
                    seen.entry(id).or_insert((now, 0)).1 += 1;
                }
            }
            drop(seen);
            sends(body)
        }
    });
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..replicas {
        let app = Application::build(config(&gateway.url, store_url)?).await?;
        let addr = app.grpc_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run(async {
            let _ = stop_rx.await;
        }));
        servers.push((stop_tx, server));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        clients.push(MessagingServiceClient::new(channel));
    }

    let now = Utc::now();
    let next_second = DateTime::from_timestamp(now.timestamp() + 1, 0).unwrap_or(now);
    let send_at = next_second + chrono::TimeDelta::seconds(args.ahead as i64);
    let stamp = prost_types::Timestamp {
        seconds: send_at.timestamp(),
        nanos: 0,
    };
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let mut calls = tokio::task::JoinSet::new();
    for id in 1..=args.messages {
        let permit = permits.clone().acquire_owned().await?;
        let mut client = clients[id as usize % clients.len()].clone();
        calls.spawn(async move {
            let request = SendSmsRequest {
                id,
                phone: "380971234567".into(),
                message: format!("Reminder {id}"),
                signature: "msgw".into(),
                send_at: Some(stamp),
                ..Default::default()
            };
            let scheduled = client.send_sms(request).await.map(|r| {
                r.into_inner()
                    .receipt
                    .is_some_and(|r| r.scheduled_for.is_some())
            });
            drop(permit);
            matches!(scheduled, Ok(true))
        });
    }
    let mut scheduled = 0u64;
    while let Some(done) = calls.join_next().await {
        scheduled += u64::from(done?);
    }
    let scheduling_done = Utc::now();

    // Until every message arrived, or 15 s past their time.
    let give_up = send_at + chrono::TimeDelta::seconds(15);
    while Utc::now() < give_up && (arrivals.lock().unwrap().len() as u64) < scheduled {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A moment more, so a second send of any id would show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = arrivals.lock().unwrap().clone();
    let mut late: Vec<f64> = seen
        .values()
        .map(|(at, _)| (*at - send_at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0)
        .collect();
    late.sort_by(f64::total_cmp);
    let twice = seen.values().filter(|(_, n)| *n > 1).count();
    let pct = |p: f64| -> f64 {
        if late.is_empty() {
            return f64::NAN;
        }
        late[((late.len() as f64 * p).ceil() as usize).clamp(1, late.len()) - 1]
    };
    println!(
        "{label}: {scheduled} of {} scheduled (the last {:.0} ms before send_at)",
        args.messages,
        (send_at - scheduling_done).num_milliseconds()
    );
    println!(
        "  arrived {} (twice: {twice}), lateness ms: p50 {:.1}, p99 {:.1}, max {:.1}, earliest {:.1}",
        seen.len(),
        pct(0.50),
        pct(0.99),
        late.last().copied().unwrap_or(f64::NAN),
        late.first().copied().unwrap_or(f64::NAN),
    );
    for (stop, server) in servers {
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    }
    Ok(())
}

fn config(gateway_url: &str, store_url: &str) -> anyhow::Result<Config> {
    bench_config::quiet(gateway_url, store_url)
}
