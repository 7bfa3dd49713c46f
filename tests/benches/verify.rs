//! Benchmark of StartVerification with the fraud guard off, on, and on with key and
//! country limits: a real msgw (gRPC on loopback) in front of an in-process gateway
//! that answers at once, on a SQLite file and then on a fresh PostgreSQL schema
//! (`--store` picks one). Concurrent callers start verifications of distinct numbers
//! spread over many ranges (none is ever held). The modes run in alternating rounds
//! (off, on, limits, off, on, limits, ...) so a noisy machine slows all of them alike.
//! Prints, per store and mode: starts per second, p50 and p99 latency, and the ratio
//! to the guard off.
//!
//! It asserts nothing; it prints. Bounded in time; stops by itself.
//!
//! `cargo bench --bench verify` (options: `-- --help`)

#[path = "../common/gateway.rs"]
mod gateway;
#[path = "../common/postgres.rs"]
mod postgres;
#[path = "../common/wait.rs"]
mod wait;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use gateway::FakeGateway;
use msgw::{
    core::verify::guard::{Mode, Settings},
    process::app::Application,
    process::config::{Config, Upstream},
    transport::proto::{
        StartVerificationRequest, verification_service_client::VerificationServiceClient,
    },
};

use tonic::transport::Channel;

#[derive(Parser, Debug, Clone)]
#[command(about = "msgw StartVerification benchmark: the fraud guard off against on")]
struct Args {
    /// Concurrent callers.
    #[arg(long, default_value_t = 16)]
    callers: usize,
    /// Seconds each round of a mode runs.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Rounds of each mode (alternating).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// `sqlite`, `postgres` or `both`.
    #[arg(long, default_value = "both")]
    store: String,
}

/// Calling codes the starts go to (numbers of 12 digits in each).
const CODES: [&str; 10] = ["380", "48", "44", "49", "33", "1", "7", "90", "91", "62"];

#[derive(Clone, Copy, Debug)]
enum Guard {
    Off,
    On,
    Limits,
}

impl Guard {
    const ALL: [Self; 3] = [Self::Off, Self::On, Self::Limits];

    fn name(self) -> &'static str {
        match self {
            Self::Off => "guard off",
            Self::On => "guard on",
            Self::Limits => "guard on, key and country limits",
        }
    }

    fn settings(self) -> Settings {
        match self {
            Self::Off => Settings {
                mode: Mode::Off,
                ..Settings::default()
            },
            // The defaults, but no calling code is ever held: the bench never enters a
            // code, and a calling code's real users do (a held one would make its
            // starts cheap refusals). Each start still reads its calling code's figures.
            Self::On => Settings {
                country_min_starts: 1_000_000,
                ..Settings::default()
            },
            Self::Limits => Settings {
                // Budgets that never fill in a round, as a deployment sizes them; each
                // start counts what its code and key used in the window.
                key_limits: "ip=1000/1h,user=10/1h".parse().expect("limits"),
                country_limits: "380=20000/1h,*=10000/1h".parse().expect("limits"),
                ..Self::On.settings()
            },
        }
    }
}

#[derive(Default)]
struct Tally {
    ok: u64,
    failed: u64,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let gateway = FakeGateway::accepting_sends(Duration::ZERO).await;
        let stores: &[bool] = match args.store.as_str() {
            "sqlite" => &[false],
            "postgres" => &[true],
            _ => &[false, true],
        };
        let ids = Arc::new(AtomicU64::new(1));
        for &pg in stores {
            let mut tallies: Vec<Tally> = Guard::ALL.iter().map(|_| Tally::default()).collect();
            for _ in 0..args.rounds {
                for (i, guard) in Guard::ALL.iter().enumerate() {
                    let round = run(&args, &gateway.url, pg, *guard, ids.clone()).await?;
                    let tally = &mut tallies[i];
                    tally.ok += round.ok;
                    tally.failed += round.failed;
                    tally.latencies.extend(round.latencies);
                    tally.elapsed += round.elapsed;
                }
            }
            let store = if pg { "PostgreSQL" } else { "SQLite" };
            println!(
                "\n{store}: StartVerification, {} callers, {} rounds of {}s per mode",
                args.callers, args.rounds, args.seconds
            );
            let base = rate(&tallies[0]);
            for (guard, tally) in Guard::ALL.iter().zip(&mut tallies) {
                tally.latencies.sort();
                let at = |q: f64| {
                    let n = tally.latencies.len();
                    tally.latencies.get(((n as f64 * q) as usize).min(n.saturating_sub(1)))
                };
                println!(
                    "  {:<34} {:>7.0} starts/s ({:.2} of off)  p50 {:>6.2} ms  p99 {:>6.2} ms  failed {}",
                    guard.name(),
                    rate(tally),
                    rate(tally) / base,
                    at(0.5).map_or(0.0, |d| d.as_secs_f64() * 1e3),
                    at(0.99).map_or(0.0, |d| d.as_secs_f64() * 1e3),
                    tally.failed,
                );
            }
        }
        anyhow::Ok(())
    })
}

fn rate(t: &Tally) -> f64 {
    t.ok as f64 / t.elapsed.as_secs_f64().max(1e-9)
}

/// One round: a fresh msgw with `guard`, `args.callers` callers for `args.seconds`.
async fn run(
    args: &Args,
    gateway: &str,
    pg: bool,
    guard: Guard,
    ids: Arc<AtomicU64>,
) -> anyhow::Result<Tally> {
    let dir = tempfile::tempdir()?;
    let schema = if pg {
        Some(postgres::TestSchema::create().await)
    } else {
        None
    };
    let store_url = match &schema {
        Some(schema) => schema.url.clone(),
        None => format!("sqlite://{}", dir.path().join("bench.db").display()),
    };
    let config = Config {
        verify_secret: Some("bench-verify-secret-0123456789".to_owned().into()),
        verify: msgw::core::verify::Settings {
            guard: guard.settings(),
            // The bench's numbers are made up: every type passes, and typing each one is
            // still paid (MSGW_VERIFY_NUMBER_TYPES=any checks nothing but parses).
            number_types: "any".parse().map_err(anyhow::Error::msg)?,
            ..Default::default()
        },
        ..Config::for_tests(
            Upstream::Gateway {
                url: gateway.parse()?,
                api_key: "bench-key".to_owned().into(),
            },
            store_url,
        )
    };
    let app = Application::build(config).await?;
    let addr = app.grpc_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run(async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let tally = drive(
        channel,
        args.callers,
        Duration::from_secs(args.seconds),
        ids,
    )
    .await;
    let _ = stop.send(());
    server.await??;
    Ok(tally)
}

async fn drive(channel: Channel, callers: usize, length: Duration, ids: Arc<AtomicU64>) -> Tally {
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (channel, ids) = (channel.clone(), ids.clone());
            tokio::spawn(async move {
                let mut client = VerificationServiceClient::new(channel);
                let mut tally = Tally::default();
                while started.elapsed() < length {
                    let id = ids.fetch_add(1, Ordering::Relaxed);
                    // Numbers spread over 10 calling codes and 1000 ranges in each, as
                    // real traffic is: no range nears a hold, no budget fills.
                    let code = CODES[(id % CODES.len() as u64) as usize];
                    let rest = 12 - code.len() - 3;
                    let (range, number) = (id / 10 % 1000, id / 10_000 % 10u64.pow(rest as u32));
                    let phone = format!("+{code}{range:03}{number:0rest$}");
                    let request = StartVerificationRequest {
                        id,
                        phone,
                        signature: "msgw".into(),
                        rate_limit_keys: [
                            ("ip".to_owned(), format!("10.0.{}.{}", id % 200, id % 250)),
                            ("user".to_owned(), format!("u-{id}")),
                        ]
                        .into(),
                        ..Default::default()
                    };
                    let sent = Instant::now();
                    match client.start_verification(request).await {
                        Ok(_) => {
                            tally.ok += 1;
                            tally.latencies.push(sent.elapsed());
                        }
                        Err(_) => tally.failed += 1,
                    }
                }
                tally
            })
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        if let Ok(t) = task.await {
            total.ok += t.ok;
            total.failed += t.failed;
            total.latencies.extend(t.latencies);
        }
    }
    total.elapsed = started.elapsed();
    total
}
