//! Load benchmark of the send path: a real msgw (gRPC on loopback) in front of an
//! in-process fake gateway, driven by concurrent callers with distinct ids over HTTP/2
//! connections, on a SQLite file in a temp dir and then on a fresh PostgreSQL schema
//! (`--store` picks one). Prints, in one run, for each store:
//!
//! - a. `grpc.health.v1.Health/Check` RPC/s on the same server (tonic's own cost);
//! - b. `SendSms` RPC/s with a gateway that answers at once, and the ratio b/a;
//! - c. `SendSms` RPC/s with a gateway of latency L, C connections, batch max B and
//!   many callers; the physical limit C×B/L, the ratio, and the gateway connections
//!   msgw used; the same run with batch max 1 (no coalescing); latencies, and the p50
//!   of a lone caller (≈ L when nothing waits);
//! - d. msgw's CPU time per send in b, read from the kernel's per-thread counters of
//!   msgw's own threads (its tokio workers and its SQLite threads), so the load
//!   generator and the fake gateway, which run on threads of their own, are not
//!   counted (nor are PostgreSQL's processes); and per Health/Check in a, the floor
//!   of any RPC;
//! - e. store writes per second in b and rows per write, by stage (claims,
//!   settlements), from `msgw_store_write_rows`.
//!
//! `--upstream-rate N` runs b and c with traffic shaping on (a rate the load does not
//! reach): what shaping costs the send path.
//!
//! It asserts nothing; it prints. Bounded in time; stops by itself.
//!
//! `cargo bench --bench rpc` (options: `-- --help`)

#[path = "../common/bench_config.rs"]
mod bench_config;
#[path = "../common/callers.rs"]
mod callers;
#[path = "../common/gateway.rs"]
mod gateway;
#[path = "../common/pgbouncer.rs"]
mod pgbouncer;
#[path = "../common/postgres.rs"]
mod postgres;
#[path = "../common/wait.rs"]
mod wait;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use gateway::FakeGateway;
use msgw::{
    core::dispatch::Limits,
    process::app::Application,
    process::config::Config,
    transport::proto::{SendSmsRequest, messaging_service_client::MessagingServiceClient},
};

use tokio::runtime::Runtime;
use tonic::transport::Channel;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[derive(Parser, Debug, Clone)]
#[command(about = "msgw send-path benchmark")]
struct Args {
    /// Concurrent callers of a and b.
    #[arg(long, default_value_t = 64)]
    callers: usize,
    /// HTTP/2 connections the callers share.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Seconds each measured phase runs.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Latency L of the fake gateway in c and d, milliseconds.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Concurrent callers of c.
    #[arg(long, default_value_t = 256)]
    coalesced_callers: usize,
    /// MSGW_UPSTREAM_CONNECTIONS (C) in c.
    #[arg(long, default_value_t = 4)]
    upstream_connections: usize,
    /// MSGW_UPSTREAM_BATCH_MAX (B) in c.
    #[arg(long, default_value_t = 50)]
    batch_max: usize,
    /// Worker threads of msgw's runtime.
    #[arg(long, default_value_t = 2)]
    msgw_workers: usize,
    /// Stores to run against: a SQLite file, a fresh PostgreSQL schema (on the
    /// tests' server, dropped after), or both, one after the other.
    #[arg(long, value_enum, default_value_t = Stores::Both)]
    store: Stores,
    /// PostgreSQL reached directly, or through a PgBouncer started for the run in
    /// session or in transaction mode (`MSGW_STORE_POOLING`).
    #[arg(long, value_enum, default_value_t = Pooler::None)]
    pooler: Pooler,
    /// Callers authenticate: a callers file with one caller, whose bearer token every
    /// send carries (health stays open, as in production).
    #[arg(long)]
    bearer: bool,
    /// MSGW_UPSTREAM_RATE in b and c: traffic shaping on, at a rate the load never
    /// reaches (its cost, not its limit); unset: no rate, as by default.
    #[arg(long)]
    upstream_rate: Option<u32>,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Pooler {
    None,
    Session,
    Transaction,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Stores {
    Sqlite,
    Postgres,
    Both,
}

/// Thread name prefixes of msgw: its runtime, sqlx's SQLite worker, the send path's writer.
const MSGW_THREADS: [&str; 3] = ["msgw-worker", "sqlx-sqlite-wor", "msgw-sqlite"];

/// A running msgw and what stops it.
struct Msgw {
    channels: Vec<Channel>,
    /// The admin listener (`/metrics`).
    http: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
    // Dropped before the schema it serves.
    _bouncer: Option<pgbouncer::Bouncer>,
    _schema: Option<postgres::TestSchema>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    AUTHENTICATED.store(args.bearer, Ordering::Relaxed);
    let runtime = |name: &str, threads: usize| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
    };
    let rts = Runtimes {
        msgw: runtime("msgw-worker", args.msgw_workers)?,
        load: runtime("load", 2)?,
    };
    let gateway_rt = runtime("fake-gateway", 1)?;
    let latency = Duration::from_millis(args.latency_ms);
    let instant = gateway_rt.block_on(FakeGateway::accepting_sends(Duration::ZERO));
    let slow = gateway_rt.block_on(FakeGateway::accepting_sends(latency));
    println!(
        "msgw send-path benchmark (msgw on {} worker threads, {} HTTP/2 connections from the callers, {} s per phase)",
        args.msgw_workers, args.connections, args.seconds,
    );
    if args.bearer {
        println!("callers authenticate with a bearer token (--bearer)");
    }
    let mut sends = Vec::new();
    for postgres in match args.store {
        Stores::Sqlite => &[false][..],
        Stores::Postgres => &[true][..],
        Stores::Both => &[false, true][..],
    } {
        sends.push(run(&rts, &instant, &slow, &args, *postgres)?);
    }
    if let [sqlite, postgres] = sends[..] {
        println!(
            "PostgreSQL b / SQLite b  {:.2}",
            postgres / sqlite.max(1e-9)
        );
    }
    Ok(())
}

/// The runtimes of msgw and of the callers.
struct Runtimes {
    msgw: Runtime,
    load: Runtime,
}

/// Runs every phase against one store and prints a to e; returns b (sends/s).
fn run(
    rts: &Runtimes,
    instant_gateway: &FakeGateway,
    slow_gateway: &FakeGateway,
    args: &Args,
    postgres: bool,
) -> anyhow::Result<f64> {
    let (msgw_rt, load_rt) = (&rts.msgw, &rts.load);
    let seconds = Duration::from_secs(args.seconds);
    println!(
        "== {} store",
        match (postgres, args.pooler) {
            (false, _) => "SQLite",
            (true, Pooler::None) => "PostgreSQL",
            (true, Pooler::Session) => "PostgreSQL through PgBouncer (session mode)",
            (true, Pooler::Transaction) => "PostgreSQL through PgBouncer (transaction mode)",
        }
    );

    // a, b, d, e: a gateway that answers at once, default limits.
    let msgw = start(
        msgw_rt,
        load_rt,
        &instant_gateway.url,
        Limits {
            rate: args.upstream_rate,
            ..Limits::default()
        },
        args,
        postgres,
    )?;
    let (health, sends, cpu, writes) = load_rt.block_on(async {
        // Warm-up: connections, store pages, the allocator.
        drive(
            &msgw.channels,
            args.callers,
            Duration::from_secs(1),
            Call::Send,
        )
        .await;
        let health_cpu_before = msgw_cpu();
        let health = drive(&msgw.channels, args.callers, seconds, Call::Health).await;
        let health_cpu = msgw_cpu().saturating_sub(health_cpu_before);
        let cpu_before = msgw_cpu();
        let before = Counts::read(msgw.http).await;
        let sends = drive(&msgw.channels, args.callers, seconds, Call::Send).await;
        let cpu = msgw_cpu().saturating_sub(cpu_before);
        let counts = Counts::read(msgw.http).await.since(&before);
        (
            health,
            sends.with_envelopes(counts.envelopes),
            (cpu, health_cpu),
            counts,
        )
    });
    let (cpu, health_cpu) = cpu;
    stop(msgw_rt, msgw)?;
    println!(
        "-- {} callers, gateway answers at once, default limits{}",
        args.callers,
        args.upstream_rate
            .map(|r| format!(", MSGW_UPSTREAM_RATE {r}"))
            .unwrap_or_default()
    );
    health.print("a. Health/Check");
    sends.print("b. SendSms");
    println!(
        "   b/a                {:.3}",
        sends.rate() / health.rate().max(1e-9)
    );

    // c: a gateway of latency L, C connections, batch max B, then batch max 1.
    let latency = Duration::from_millis(args.latency_ms);
    let (c, b) = (args.upstream_connections, args.batch_max);
    let limit = (c * b) as f64 / latency.as_secs_f64().max(1e-9);
    let coalesced = Limits {
        connections: c,
        batch_max: b,
        queue_max: 10_000,
        rate: args.upstream_rate,
        ..Limits::default()
    };
    let msgw = start(
        msgw_rt,
        load_rt,
        &slow_gateway.url,
        coalesced,
        args,
        postgres,
    )?;
    let (many, lone, gateway_p50, peers) = load_rt.block_on(async {
        drive(
            &msgw.channels,
            args.coalesced_callers,
            Duration::from_secs(1),
            Call::Send,
        )
        .await;
        let before = Counts::read(msgw.http).await;
        slow_gateway.take_peers();
        let many = drive(&msgw.channels, args.coalesced_callers, seconds, Call::Send).await;
        let many = many.with_envelopes(Counts::read(msgw.http).await.since(&before).envelopes);
        let peers = slow_gateway.take_peers();
        slow_gateway.take_answer_times();
        let lone = drive(
            &msgw.channels,
            1,
            seconds.min(Duration::from_secs(2)),
            Call::Send,
        )
        .await;
        // The gateway's own time for the lone caller's requests: what msgw cannot save.
        let mut times = slow_gateway.take_answer_times();
        times.sort_unstable();
        let gateway_p50 = times.get(times.len() / 2).copied().unwrap_or_default();
        (many, lone, gateway_p50, peers)
    });
    stop(msgw_rt, msgw)?;
    let msgw = start(
        msgw_rt,
        load_rt,
        &slow_gateway.url,
        Limits {
            batch_max: 1,
            ..coalesced
        },
        args,
        postgres,
    )?;
    let single = load_rt.block_on(async {
        drive(
            &msgw.channels,
            args.coalesced_callers,
            Duration::from_secs(1),
            Call::Send,
        )
        .await;
        drive(&msgw.channels, args.coalesced_callers, seconds, Call::Send).await
    });
    stop(msgw_rt, msgw)?;
    println!(
        "-- {} callers, gateway latency L = {} ms, C = {c} connections, B = {b}",
        args.coalesced_callers, args.latency_ms
    );
    many.print("c. SendSms");
    println!(
        "   C×B/L              {limit:>9.0} sends/s; c / (C×B/L) = {:.3}, over {peers} gateway connections",
        many.rate() / limit
    );
    single.print("   same, B = 1");
    println!(
        "   coalesced / B = 1  {:.1}×",
        many.rate() / single.rate().max(1e-9)
    );
    println!(
        "   latency of c       p50 {:.2} ms, p99 {:.2} ms; lone caller p50 {:.2} ms (L = {} ms; the gateway's own p50 {:.2} ms, so msgw adds {:.2} ms)",
        many.percentile(0.5),
        many.percentile(0.99),
        lone.percentile(0.5),
        args.latency_ms,
        gateway_p50.as_secs_f64() * 1e3,
        lone.percentile(0.5) - gateway_p50.as_secs_f64() * 1e3
    );
    println!(
        "d. msgw CPU per send {:.1} µs in b ({:.2} s of msgw thread CPU for {} sends{}); per Health/Check in a {:.1} µs",
        cpu.as_secs_f64() * 1e6 / sends.ok.max(1) as f64,
        cpu.as_secs_f64(),
        sends.ok,
        if postgres {
            "; PostgreSQL's own processes not counted"
        } else {
            ""
        },
        health_cpu.as_secs_f64() * 1e6 / health.ok.max(1) as f64,
    );
    let per_second = |n: f64| n / sends.elapsed.as_secs_f64();
    println!(
        "e. store writes in b {:>9.0} /s: claims {:.0}/s of {:.1} rows, settlements {:.0}/s of {:.1} rows",
        per_second(writes.claims.count + writes.settlements.count),
        per_second(writes.claims.count),
        writes.claims.each(),
        per_second(writes.settlements.count),
        writes.settlements.each(),
    );
    Ok(sends.rate())
}

/// Starts msgw on `msgw_rt` in front of `gateway_url` and connects the callers.
fn start(
    msgw_rt: &Runtime,
    load_rt: &Runtime,
    gateway_url: &str,
    limits: Limits,
    args: &Args,
    postgres: bool,
) -> anyhow::Result<Msgw> {
    let dir = tempfile::tempdir()?;
    let schema = if postgres {
        Some(msgw_rt.block_on(postgres::TestSchema::create()))
    } else {
        None
    };
    let bouncer = match (&schema, args.pooler) {
        (Some(schema), Pooler::Session) => Some(pgbouncer::Bouncer::start(schema, "session")),
        (Some(schema), Pooler::Transaction) => {
            Some(pgbouncer::Bouncer::start(schema, "transaction"))
        }
        _ => None,
    };
    let store_url = match (&schema, &bouncer) {
        (_, Some(bouncer)) => bouncer.url(),
        (Some(schema), None) => schema.url.clone(),
        (None, _) => format!("sqlite://{}", dir.path().join("bench.db").display()),
    };
    let callers_file = if args.bearer {
        Some(
            callers::Callers::new()
                .caller(callers::Entry::token("bench", BEARER))
                .write(dir.path()),
        )
    } else {
        None
    };
    let mut config = Config {
        upstream_limits: limits,
        callers_file,
        ..bench_config::quiet(gateway_url, &store_url)?
    };
    if bouncer.is_some() && args.pooler == Pooler::Transaction {
        config.store_pooling = msgw::adapters::store::Pooling::Transaction;
        config.store_direct_url = schema.as_ref().map(|s| s.url.clone());
    }
    let (grpc, http, stop, server) = msgw_rt.block_on(async {
        let app = Application::build(config).await?;
        let (grpc, http) = (app.grpc_addr()?, app.admin_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run(async {
            let _ = stopped.await;
        }));
        anyhow::Ok((grpc, http, stop, server))
    })?;
    let channels = load_rt.block_on(async {
        let mut channels = Vec::new();
        for _ in 0..args.connections.max(1) {
            channels.push(
                tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))?
                    .tcp_nodelay(true)
                    .connect()
                    .await?,
            );
        }
        anyhow::Ok(channels)
    })?;
    Ok(Msgw {
        channels,
        http,
        stop,
        server,
        _dir: dir,
        _bouncer: bouncer,
        _schema: schema,
    })
}

fn stop(msgw_rt: &Runtime, msgw: Msgw) -> anyhow::Result<()> {
    drop(msgw.channels);
    let _ = msgw.stop.send(());
    msgw_rt.block_on(msgw.server)??;
    Ok(())
}

#[derive(Clone, Copy)]
enum Call {
    Health,
    Send,
}

struct Phase {
    ok: u64,
    failed: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    /// Gateway requests and the operations they carried during the phase.
    envelopes: Option<Histogram>,
}

/// A histogram's count and sum: gateway requests and their operations, or store
/// writes and their rows.
#[derive(Clone, Copy, Default)]
struct Histogram {
    count: f64,
    sum: f64,
}

impl Histogram {
    fn since(self, before: Histogram) -> Histogram {
        Histogram {
            count: self.count - before.count,
            sum: self.sum - before.sum,
        }
    }

    /// The sum per observation: operations per request, rows per write.
    fn each(&self) -> f64 {
        self.sum / self.count.max(1.0)
    }
}

/// What msgw's `/metrics` counted: gateway requests, and store writes by stage.
#[derive(Clone, Copy, Default)]
struct Counts {
    envelopes: Histogram,
    claims: Histogram,
    settlements: Histogram,
}

impl Counts {
    async fn read(http: std::net::SocketAddr) -> Counts {
        let text = match reqwest::get(format!("http://{http}/metrics")).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let sample = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        // `name_count{labels} value`: the space ends the series, so no other matches.
        let histogram = |name: &str, labels: &str| Histogram {
            count: sample(&format!("{name}_count{labels} ")),
            sum: sample(&format!("{name}_sum{labels} ")),
        };
        let stage =
            |stage: &str| histogram("msgw_store_write_rows", &format!("{{stage=\"{stage}\"}}"));
        Counts {
            envelopes: histogram("msgw_upstream_envelope_operations", ""),
            claims: stage("claims"),
            settlements: stage("settlements"),
        }
    }

    fn since(&self, before: &Counts) -> Counts {
        Counts {
            envelopes: self.envelopes.since(before.envelopes),
            claims: self.claims.since(before.claims),
            settlements: self.settlements.since(before.settlements),
        }
    }
}

impl Phase {
    fn with_envelopes(self, envelopes: Histogram) -> Self {
        Self {
            envelopes: Some(envelopes),
            ..self
        }
    }

    fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at `p` (0..1), milliseconds.
    fn percentile(&self, p: f64) -> f64 {
        let i = ((self.latencies.len() as f64 * p) as usize)
            .min(self.latencies.len().saturating_sub(1));
        self.latencies
            .get(i)
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    }

    fn print(&self, name: &str) {
        let pct = |p: f64| self.percentile(p);
        println!(
            "{name:<20} {:>9.0} RPC/s  ({} ok, {} failed in {:.2} s; p50 {:.2} ms, p99 {:.2} ms)",
            self.rate(),
            self.ok,
            self.failed,
            self.elapsed.as_secs_f64(),
            pct(0.5),
            pct(0.99)
        );
        if let Some(e) = self.envelopes {
            println!(
                "{:<20} {:>9.0} gateway requests/s, {:.1} operations each",
                "",
                e.count / self.elapsed.as_secs_f64(),
                e.each()
            );
        }
    }
}

/// The authorization metadata of `--bearer`, and the token in it.
const AUTHORIZATION: &str = "Bearer bench-caller-token-0123456789";
const BEARER: &str = AUTHORIZATION.split_at(7).1;
/// Whether sends carry it.
static AUTHENTICATED: AtomicBool = AtomicBool::new(false);

/// Ids are distinct across the whole run: every send is a new message.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

async fn drive(channels: &[Channel], callers: usize, length: Duration, call: Call) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for i in 0..callers {
        let channel = channels[i % channels.len()].clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            let mut messaging = MessagingServiceClient::new(channel.clone());
            let mut health = HealthClient::new(channel);
            let (mut ok, mut failed, mut latencies) = (0u64, 0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let began = Instant::now();
                let done = match call {
                    Call::Health => health.check(HealthCheckRequest::default()).await.is_ok(),
                    Call::Send => {
                        let mut request = tonic::Request::new(SendSmsRequest {
                            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                            phone: "380971234567".into(),
                            message: "Your code is 4711".into(),
                            signature: "msgw".into(),
                            ..Default::default()
                        });
                        if AUTHENTICATED.load(Ordering::Relaxed) {
                            request.metadata_mut().insert(
                                "authorization",
                                tonic::metadata::MetadataValue::from_static(AUTHORIZATION),
                            );
                        }
                        messaging.send_sms(request).await.is_ok()
                    }
                };
                latencies.push(began.elapsed());
                if done { ok += 1 } else { failed += 1 }
            }
            (ok, failed, latencies)
        });
    }
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let mut phase = Phase {
        ok: 0,
        failed: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        envelopes: None,
    };
    while let Some(Ok((ok, failed, latencies))) = tasks.join_next().await {
        phase.ok += ok;
        phase.failed += failed;
        phase.latencies.extend(latencies);
    }
    phase.elapsed = started.elapsed();
    phase.latencies.sort_unstable();
    phase
}

/// CPU time (user + system) of msgw's threads so far, from /proc/self/task/*/stat.
fn msgw_cpu() -> Duration {
    // Linux reports these in clock ticks of 1/100 s (USER_HZ) on every common platform.
    const TICKS_PER_SECOND: u64 = 100;
    let mut ticks = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // "tid (comm) state ppid ...": comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        if !MSGW_THREADS.iter().any(|p| comm.starts_with(p)) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // After "(comm) ": state is field 0, utime field 11, stime field 12.
        let field = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        ticks += field(11) + field(12);
    }
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}
