//! Traffic shaping benchmark: a real msgw (gRPC on loopback, or several replicas on one
//! PostgreSQL schema) with a contracted rate toward an in-process fake gateway. It fires
//! a flood of `PRIORITY_BULK` sends at once (a full bulk lane), and while they drain it
//! sends one-time codes (SendTelegramOtp, always urgent) at a steady pace. Prints:
//!
//! - the codes' time from their call to the gateway: p50, p99, max;
//! - the gateway's achieved rate against the contracted one (over the whole flood, and
//!   the most operations it saw in any one second);
//! - the bulk sends' completion time, and the fewest bulk operations the gateway saw in
//!   any whole second of the flood (never zero: bulk is not starved).
//!
//! It asserts nothing; it prints. Bounded in time; stops by itself.
//!
//! `cargo bench --bench shaping` (options: `-- --help`; `-- --store postgres --replicas 2`
//! for the rate shared by two replicas)

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
    time::{Duration, Instant},
};

use clap::Parser;
use msgw::{
    core::dispatch::Limits,
    process::app::Application,
    process::config::Config,
    transport::proto::{
        Priority, SendSmsRequest, SendTelegramOtpRequest,
        messaging_service_client::MessagingServiceClient,
    },
};
use tonic::transport::Channel;

use gateway::{FakeGateway, Reply, counting_sends};

/// HTTP/2 connections to each replica.
const CONNECTIONS: usize = 12;

/// Ids of the codes start here; bulk sends count from 1.
const CODES_FROM: u64 = 1_000_000_000;

#[derive(Parser, Debug)]
#[command(about = "msgw traffic shaping benchmark")]
struct Args {
    /// MSGW_UPSTREAM_RATE, operations per second.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Bulk sends fired at once.
    #[arg(long, default_value_t = 10_000)]
    bulk: u64,
    /// Codes sent per second while the bulk sends drain.
    #[arg(long, default_value_t = 2.0)]
    codes_per_second: f64,
    /// Latency of the fake gateway, milliseconds.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// The store: a SQLite file (one replica) or a fresh PostgreSQL schema.
    #[arg(long, value_enum, default_value_t = Store::Sqlite)]
    store: Store,
    /// Replicas on the PostgreSQL store, sharing the rate.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Sqlite,
    Postgres,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let (schema, store_url, replicas) = match args.store {
        Store::Sqlite => (
            None,
            format!("sqlite://{}", dir.path().join("bench.db").display()),
            1,
        ),
        Store::Postgres => {
            let schema = postgres::TestSchema::create().await;
            let url = schema.url.clone();
            (Some(schema), url, args.replicas.max(1))
        }
    };
    run(&args, &store_url, replicas).await?;
    drop(schema);
    Ok(())
}

async fn run(args: &Args, store_url: &str, replicas: usize) -> anyhow::Result<()> {
    let gateway = FakeGateway::start().await;
    let arrivals: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let latency = Duration::from_millis(args.latency_ms);
    gateway.respond_with({
        let (arrivals, sends) = (arrivals.clone(), counting_sends());
        move |body| {
            let now = Instant::now();
            let mut seen = arrivals.lock().unwrap();
            for item in body["data"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                if let Some(id) = item["id"].as_u64() {
                    seen.entry(id).or_insert(now);
                }
            }
            drop(seen);
            Reply::After(latency, Box::new(sends(body)))
        }
    });
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..replicas {
        let app = Application::build(config(&gateway.url, store_url, args)?).await?;
        let addr = app.grpc_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run(async {
            let _ = stop_rx.await;
        }));
        servers.push((stop_tx, server));
        // Every bulk send in flight at once: streams of several connections (msgw takes
        // at most MAX_STREAMS_PER_CONNECTION on one).
        for _ in 0..CONNECTIONS {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
                .connect()
                .await?;
            clients.push(MessagingServiceClient::new(channel));
        }
    }

    let started = Instant::now();
    let flood = flood(&clients, args.bulk);
    let codes = codes(&clients, args, started);
    let ((bulk_ok, bulk_done), called) = tokio::join!(flood, codes);

    // Every code and every bulk send has arrived by now (their calls returned).
    let seen = arrivals.lock().unwrap().clone();
    let mut code_ms: Vec<f64> = called
        .iter()
        .filter_map(|(id, at)| Some(seen.get(id)?.duration_since(*at).as_secs_f64() * 1000.0))
        .collect();
    code_ms.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    };
    let mut at: Vec<Instant> = seen.values().copied().collect();
    at.sort();
    let span = match (at.first(), at.last()) {
        (Some(first), Some(last)) => last.duration_since(*first).as_secs_f64(),
        _ => f64::NAN,
    };
    let achieved = (at.len().saturating_sub(1)) as f64 / span;
    let most = most_in_a_second(&at);
    let fewest_bulk = fewest_bulk_in_a_whole_second(&seen, started, bulk_done);
    println!(
        "shaping: rate {}/s, {} replica(s) on {}, gateway latency {} ms",
        args.rate,
        replicas,
        if store_url.starts_with("sqlite") {
            "SQLite"
        } else {
            "PostgreSQL"
        },
        args.latency_ms
    );
    println!(
        "  codes (urgent, {}/s while {} bulk sends drain): {} sent, time to the gateway ms: p50 {:.1}, p99 {:.1}, max {:.1}",
        args.codes_per_second,
        args.bulk,
        code_ms.len(),
        pct(&code_ms, 0.50),
        pct(&code_ms, 0.99),
        code_ms.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "  gateway: {} operations in {span:.2} s = {achieved:.1}/s against {}/s ({:+.1} %); most in any one second {most}",
        at.len(),
        args.rate,
        (achieved / f64::from(args.rate) - 1.0) * 100.0
    );
    println!(
        "  bulk: {bulk_ok} of {} succeeded, all done after {:.2} s; fewest bulk operations in a whole second of the flood {fewest_bulk}",
        args.bulk,
        bulk_done.as_secs_f64()
    );
    for (stop, server) in servers {
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    }
    Ok(())
}

/// Fires `bulk` bulk sends at once, spread over `clients`: how many succeeded, and when
/// the last one was answered.
async fn flood(clients: &[MessagingServiceClient<Channel>], bulk: u64) -> (u64, Duration) {
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for id in 1..=bulk {
        let mut client = clients[id as usize % clients.len()].clone();
        calls.spawn(async move {
            client
                .send_sms(SendSmsRequest {
                    id,
                    phone: "380971234567".into(),
                    message: format!("Spring sale {id}"),
                    signature: "msgw".into(),
                    priority: Priority::Bulk as i32,
                    ..Default::default()
                })
                .await
                .is_ok()
        });
    }
    let mut ok = 0;
    while let Some(done) = calls.join_next().await {
        ok += u64::from(done.unwrap_or(false));
    }
    (ok, started.elapsed())
}

/// Sends codes at `codes_per_second` from half a second in until the flood would have
/// drained at the rate: each code's id and when it was called.
async fn codes(
    clients: &[MessagingServiceClient<Channel>],
    args: &Args,
    started: Instant,
) -> Vec<(u64, Instant)> {
    let every = Duration::from_secs_f64(1.0 / args.codes_per_second.max(0.01));
    let until = started + Duration::from_secs_f64(args.bulk as f64 / f64::from(args.rate.max(1)));
    let mut next = started + Duration::from_millis(500);
    let mut calls = tokio::task::JoinSet::new();
    let mut id = CODES_FROM;
    while next < until {
        tokio::time::sleep_until(next.into()).await;
        let mut client = clients[id as usize % clients.len()].clone();
        calls.spawn(async move {
            let called = Instant::now();
            let sent = client
                .send_telegram_otp(SendTelegramOtpRequest {
                    id,
                    phone: "380671234567".into(),
                    code: "4321".into(),
                    ..Default::default()
                })
                .await;
            sent.ok().map(|_| (id, called))
        });
        id += 1;
        next += every;
    }
    let mut called = Vec::new();
    while let Some(done) = calls.join_next().await {
        called.extend(done.ok().flatten());
    }
    called
}

/// The most arrivals within any one second.
fn most_in_a_second(at: &[Instant]) -> usize {
    let (mut most, mut start) = (0, 0);
    for end in 0..at.len() {
        while at[end].duration_since(at[start]) >= Duration::from_secs(1) {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}

/// The fewest bulk arrivals in any whole second between the flood's start and its end.
fn fewest_bulk_in_a_whole_second(
    seen: &HashMap<u64, Instant>,
    started: Instant,
    done: Duration,
) -> usize {
    let seconds = done.as_secs() as usize;
    let mut per_second = vec![0usize; seconds.max(1)];
    for (id, at) in seen {
        if *id >= CODES_FROM {
            continue;
        }
        let second = at.duration_since(started).as_secs() as usize;
        if let Some(n) = per_second.get_mut(second) {
            *n += 1;
        }
    }
    per_second.into_iter().min().unwrap_or(0)
}

fn config(gateway_url: &str, store_url: &str, args: &Args) -> anyhow::Result<Config> {
    Ok(Config {
        upstream_limits: Limits {
            rate: Some(args.rate),
            queue_max: (args.bulk as usize).max(Limits::default().queue_max),
            ..Limits::default()
        },
        ..bench_config::quiet(gateway_url, store_url)?
    })
}
