//! Hostile clients against the gRPC port (`cargo bench --bench hostile`): for each
//! kind of client below, a fresh release msgw (its sandbox, a SQLite file in a temp
//! dir, a callers file with one caller) runs as a child process; the clients attack it
//! for `--seconds` and then leave (msgw's memory budget as under the Helm chart's
//! default limit, `--memory-budget`), while a well-behaved client calls
//! `grpc.health.v1.Health/Check` every 100 ms on a connection of its own. Prints, per
//! client: msgw's RSS before, at its peak and `--settle` seconds after they left; the
//! slowest Health/Check answer and the checks that failed (1 s deadline); and msgw's
//! own count of what it cut.
//!
//! The clients speak HTTP/2 by hand (raw frames over TCP), as an attacker would; a
//! client whose connection msgw closes connects again at once.
//!
//! - `never-read`: opens a `ServerReflectionInfo` stream (list_services) every 10 ms
//!   and never reads a byte back;
//! - `zero-window`: the same, announcing `SETTINGS_INITIAL_WINDOW_SIZE=0`, reading
//!   everything msgw sends (so only HTTP/2 flow control holds msgw's answers back);
//! - `half-open-events`: with the caller's token, opens a `StreamStatusEvents` stream
//!   from the oldest event (a few hundred retained) every 10 ms, never reading;
//! - `big-metadata`: `Health/Check` calls with 14 KB of metadata (just under the
//!   16 KiB of headers a request may carry) every 10 ms, never reading;
//! - `replay`: with a token of `events = "all"`, announcing a zero window, opens up to
//!   1,000 `StreamStatusEvents{from_oldest}` streams (1,000 events retained), one a
//!   millisecond, never reading;
//! - `replay-no-token`: the same against a msgw without caller authentication;
//! - `uploads`: with a token that may only query, 200 `Batch` streams per connection,
//!   each declaring a 1,040,000-byte message and uploading it as the windows allow,
//!   never finished;
//! - `waiters`: with a token, 800 `GetMessageStatus{wait_for_final}` streams per
//!   connection, of messages that never become final;
//! - `spread-uploads`: the uploads again, one stream per connection over 250
//!   connections (each stream opens under the share before any sends a byte);
//! - `half-headers`: without a token, 3,000 connections that each send the preface and
//!   a request's header block of 15 KB without its end, hold it, and connect again
//!   100 ms after msgw closes them.
//!
//! Beside every attack a second, well-behaved caller (a token of its own) sends an
//! SMS every 50 ms on its own connection; its SendSms p50, p99 and failures are printed.
//! Where it can (root, cgroup v1), msgw runs inside a memory group of `--memory-limit`
//! (256 MiB, the Helm chart's default limit), its budget then msgw's own default. The
//! benchmark exits non-zero when msgw dies, its RSS passes the limit, or its RSS grows
//! more than twice what it counts as held (plus 32 MiB for the allocator's slack).
//!
//! Then two figures of their own (`hostile_queries.rs`): gateway lookups for 600 status
//! queries of one id (`status-queries`), and the admin port's probes beside 800 idle
//! reconnecting sockets (`admin-flood`).
//!
//! Bounded in time; stops by itself.
//!
//! `cargo bench --bench hostile` (options: `-- --help`)

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

#[path = "../common/callers.rs"]
mod callers;
#[path = "../common/h2frames.rs"]
mod frames;
#[path = "hostile_queries.rs"]
mod queries;

use clap::Parser;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::watch,
};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[derive(Parser, Debug, Clone)]
#[command(about = "msgw gRPC port under hostile clients")]
struct Args {
    /// The msgw binary to attack (default: the one this benchmark was built with).
    #[arg(long)]
    msgw: Option<String>,
    /// Seconds each attack lasts.
    #[arg(long, default_value_t = 16)]
    seconds: u64,
    /// Seconds after the attackers left before RSS is read again.
    #[arg(long, default_value_t = 5)]
    settle: u64,
    /// Run only this attack: a client's name (`never-read`) or one run of it
    /// (`never-read-50`).
    #[arg(long)]
    only: Option<String>,
    /// msgw's `--grpc-memory-budget`: by default what msgw derives under the Helm
    /// chart's default memory limit (256Mi); empty: msgw's own default (a quarter of
    /// this machine's memory), or a msgw from before the budget.
    #[arg(long, default_value = "64MiB")]
    memory_budget: String,
    /// Extra arguments for `msgw serve`.
    #[arg(long, allow_hyphen_values = true)]
    serve_arg: Vec<String>,
    /// The memory group msgw runs in, where cgroup v1 can be used (root); `0`: none.
    #[arg(long, default_value = "256MiB")]
    memory_limit: String,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// What one hostile connection does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NeverRead,
    ZeroWindow,
    HalfOpenEvents,
    BigMetadata,
    Replay,
    ReplayNoToken,
    Uploads,
    Waiters,
    SpreadUploads,
    HalfHeaders,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::NeverRead => "never-read",
            Kind::ZeroWindow => "zero-window",
            Kind::HalfOpenEvents => "half-open-events",
            Kind::BigMetadata => "big-metadata",
            Kind::Replay => "replay",
            Kind::ReplayNoToken => "replay-no-token",
            Kind::Uploads => "uploads",
            Kind::Waiters => "waiters",
            Kind::SpreadUploads => "spread-uploads",
            Kind::HalfHeaders => "half-headers",
        }
    }

    /// Whether msgw runs without caller authentication for it.
    fn open(self) -> bool {
        self == Kind::ReplayNoToken
    }

    /// Whether it needs events in the store to replay.
    fn replays(self) -> bool {
        matches!(
            self,
            Kind::HalfOpenEvents | Kind::Replay | Kind::ReplayNoToken
        )
    }
}

const TOKEN: &str = "hostile-bench-token";
/// The well-behaved second caller.
const SENDER: &str = "hostile-bench-sender";
/// A caller that may only query.
const QUERIER: &str = "hostile-bench-querier";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let attacks = [
        (Kind::NeverRead, 20),
        (Kind::ZeroWindow, 20),
        (Kind::HalfOpenEvents, 20),
        (Kind::BigMetadata, 20),
        (Kind::NeverRead, 50),
        (Kind::NeverRead, 200),
        (Kind::Replay, 20),
        (Kind::ReplayNoToken, 20),
        (Kind::Uploads, 10),
        (Kind::Waiters, 10),
        (Kind::SpreadUploads, 250),
        (Kind::HalfHeaders, 3_000),
    ];
    let limit = size(&args.memory_limit)
        .ok_or_else(|| anyhow::anyhow!("--memory-limit: a size like 256MiB or 1GiB, or 0"))?;
    let group = (limit > 0).then(|| CGroup::create(limit)).flatten();
    println!(
        "msgw gRPC port under hostile clients: {} s of attack, RSS read {} s after they left, memory budget {}",
        args.seconds,
        args.settle,
        if args.memory_budget.is_empty() {
            "msgw's default"
        } else {
            args.memory_budget.as_str()
        }
    );
    match &group {
        Some(group) => println!(
            "msgw runs in the cgroup-v1 memory group {} limited to {} MiB",
            group.path.display(),
            limit / (1024 * 1024)
        ),
        None => println!("msgw runs without a memory group (needs root and cgroup v1)"),
    }
    println!(
        "{:<16} {:>5} {:>10} {:>10} {:>10} {:>11} {:>9} {:>13} {:>10} {:>22}  cut by msgw",
        "client",
        "conns",
        "RSS before",
        "RSS peak",
        "RSS after",
        "held peak",
        "held end",
        "slowest check",
        "failed",
        "sender p50/p99 failed"
    );
    println!(
        "(held: what msgw counts its gRPC streams as holding, msgw_grpc_held_bytes, read every 0.5 s)"
    );
    let mut broken = Vec::new();
    for (kind, conns) in attacks {
        let label = format!("{}-{conns}", kind.name());
        if args
            .only
            .as_ref()
            .is_some_and(|o| !label.contains(o.as_str()))
        {
            continue;
        }
        let limit_mib = group.as_ref().map(|_| limit as f64 / (1024.0 * 1024.0));
        if let Some(problem) =
            runtime.block_on(attack(&args, kind, conns, group.as_ref(), limit_mib))?
        {
            broken.push(format!("{label}: {problem}"));
        }
    }
    drop(group);
    let wanted = |name: &str| args.only.as_ref().is_none_or(|o| name.contains(o.as_str()));
    if wanted("status-queries") {
        runtime.block_on(queries::status_queries(&args))?;
    }
    if wanted("admin-flood") {
        runtime.block_on(queries::admin_flood(&args))?;
    }
    if !broken.is_empty() {
        anyhow::bail!("msgw broke its memory bound:\n{}", broken.join("\n"));
    }
    Ok(())
}

/// Bytes of a size like `256MiB`, `1GiB` or `0`.
fn size(text: &str) -> Option<u64> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match &text[digits.len()..] {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// A cgroup-v1 memory group msgw runs in, removed when dropped.
struct CGroup {
    path: std::path::PathBuf,
}

impl CGroup {
    /// A new group limited to `limit` bytes; `None` where cgroup v1's memory controller
    /// cannot be used (not root, or cgroup v2).
    fn create(limit: u64) -> Option<Self> {
        let root = std::path::Path::new("/sys/fs/cgroup/memory");
        if !root.join("memory.limit_in_bytes").exists() {
            return None;
        }
        let path = root.join(format!("msgw-hostile-{}", std::process::id()));
        std::fs::create_dir(&path).ok()?;
        let group = Self { path };
        std::fs::write(group.path.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
        Some(group)
    }
}

impl Drop for CGroup {
    fn drop(&mut self) {
        // The group can go only once empty: its msgw has been killed and reaped.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A running msgw child process.
struct Msgw {
    child: Child,
    grpc: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Msgw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &Args, open: bool, group: Option<&CGroup>) -> anyhow::Result<Msgw> {
    let dir = tempfile::tempdir()?;
    let callers = callers::Callers::new()
        .caller(callers::Entry::token("bench", TOKEN).all_events())
        .caller(callers::Entry::token("sender", SENDER))
        .caller(callers::Entry::token("querier", QUERIER).permissions(&["query"]))
        .write(dir.path());
    let binary = args
        .msgw
        .clone()
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_msgw").to_owned());
    // In a memory group: a shell joins it, then becomes msgw.
    let mut command = match group {
        Some(group) => {
            let mut command = Command::new("sh");
            command
                .arg("-c")
                .arg("echo $$ > \"$0\" && exec \"$@\"")
                .arg(group.path.join("cgroup.procs"))
                .arg(binary);
            command
        }
        None => Command::new(binary),
    };
    let mut child = command
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .arg("--store-url")
        .arg(format!("sqlite://{}", dir.path().join("msgw.db").display()))
        .args(
            (!open)
                .then(|| ["--callers-file".to_owned(), callers.display().to_string()])
                .into_iter()
                .flatten(),
        )
        .args(
            Some(&args.memory_budget)
                .filter(|b| !b.is_empty() && group.is_none())
                .map(|b| format!("--grpc-memory-budget={b}")),
        )
        .args(&args.serve_arg)
        .env("RUST_LOG", "warn,msgw=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let mut lines = BufReader::new(stderr).lines();
    let (grpc, admin) = loop {
        let line = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("msgw stopped before serving"))??;
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["fields"]["message"] == "msgw serving" {
            let addr = |k: &str| -> anyhow::Result<SocketAddr> {
                Ok(v["fields"][k].as_str().unwrap_or_default().parse()?)
            };
            break (addr("grpc_addr")?, addr("admin_addr")?);
        }
    };
    // Keep reading its log so that msgw never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    Ok(Msgw {
        child,
        grpc,
        admin,
        _dir: dir,
    })
}

/// Resident memory of `pid`, MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One attack on a fresh msgw; `Some(problem)` when msgw broke its memory bound.
async fn attack(
    args: &Args,
    kind: Kind,
    conns: usize,
    group: Option<&CGroup>,
    limit_mib: Option<f64>,
) -> anyhow::Result<Option<String>> {
    let mut msgw = start(args, kind.open(), group)?;
    let pid = msgw.child.id();
    if kind.replays() {
        seed_events(
            msgw.grpc,
            if kind == Kind::HalfOpenEvents {
                300
            } else {
                1_000
            },
        )
        .await?;
    }
    // Warm up: the prober's connection and a first answer of each kind.
    let prober = Prober::start(msgw.grpc).await?;
    let sender = Sender::start(msgw.grpc).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_mib(pid);
    let (stop_tx, stop) = watch::channel(false);
    let mut attackers = Vec::new();
    for _ in 0..conns {
        attackers.push(tokio::spawn(attacker(msgw.grpc, kind, stop.clone())));
    }
    let mut peak = before;
    let mut held_peak: f64 = 0.0;
    let mut held_read = Instant::now();
    let until = Instant::now() + Duration::from_secs(args.seconds);
    while Instant::now() < until {
        peak = peak.max(rss_mib(pid));
        if held_read.elapsed() >= Duration::from_millis(500) {
            held_peak = held_peak.max(held_mib(msgw.admin).await);
            held_read = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_tx.send_replace(true);
    for a in attackers {
        let _ = a.await;
    }
    let until = Instant::now() + Duration::from_secs(args.settle);
    while Instant::now() < until {
        peak = peak.max(rss_mib(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = rss_mib(pid);
    let held_after = held_mib(msgw.admin).await;
    let (slowest, failed, checks) = prober.stop().await;
    let sent = sender.stop().await;
    let cut = cut_counts(msgw.admin).await;
    let died = msgw.child.try_wait().ok().flatten();
    println!(
        "{:<16} {:>5} {:>7.1} MiB {:>6.1} MiB {:>6.1} MiB {:>7.1} MiB {:>5.1} MiB {:>10.1} ms {:>4} of {:<4} {:>22}  {}",
        kind.name(),
        conns,
        before,
        peak,
        after,
        held_peak,
        held_after,
        slowest.as_secs_f64() * 1e3,
        failed,
        checks,
        sent,
        cut
    );
    let grown = peak - before;
    Ok(if let Some(status) = died {
        Some(format!("msgw died ({status})"))
    } else if let Some(limit) = limit_mib.filter(|limit| peak > *limit) {
        Some(format!(
            "RSS peak {peak:.1} MiB over the limit {limit:.0} MiB"
        ))
    } else if grown > 2.0 * held_peak + 32.0 {
        Some(format!(
            "RSS grew {grown:.1} MiB, more than twice the {held_peak:.1} MiB msgw counted"
        ))
    } else {
        None
    })
}

/// The well-behaved second caller: a SendSms every 50 ms on its own connection.
struct Sender {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<(Vec<Duration>, u64, Option<String>)>,
}

impl Sender {
    async fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        use msgw::transport::proto::{
            SendSmsRequest, messaging_service_client::MessagingServiceClient,
        };
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .timeout(Duration::from_secs(5))
            .connect()
            .await?;
        let mut client = MessagingServiceClient::new(channel);
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut took = Vec::new();
            let mut failed = 0;
            let mut first_error = None;
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            for id in 5_000_000u64.. {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {}
                }
                let mut request = tonic::Request::new(SendSmsRequest {
                    id,
                    phone: format!("380502{:06}", id % 1_000_000),
                    message: "hostile benchmark: the other caller".into(),
                    signature: "msgw".into(),
                    ..Default::default()
                });
                if let Ok(token) = format!("Bearer {SENDER}").parse() {
                    request.metadata_mut().insert("authorization", token);
                }
                let started = Instant::now();
                match client.send_sms(request).await {
                    Ok(_) => took.push(started.elapsed()),
                    Err(status) => {
                        failed += 1;
                        first_error.get_or_insert_with(|| {
                            format!("{:?}: {}", status.code(), status.message())
                        });
                    }
                }
            }
            (took, failed, first_error)
        });
        Ok(Self { stop, task })
    }

    /// `p50/p99 ms, failed`.
    async fn stop(self) -> String {
        self.stop.send_replace(true);
        let (mut took, failed, first_error) = self.task.await.unwrap_or_default();
        if let Some(error) = first_error {
            println!("  the second caller's first failure: {error}");
        }
        took.sort();
        let at = |q: f64| {
            took.get(((took.len() as f64 * q) as usize).min(took.len().saturating_sub(1)))
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
        };
        format!("{:.1}/{:.1} ms {failed}", at(0.5), at(0.99))
    }
}

/// Sends a few hundred SMS through the sandbox and waits until their delivery events are
/// in the log, so that an event stream from the oldest has something to send.
async fn seed_events(addr: SocketAddr, n: u64) -> anyhow::Result<()> {
    use msgw::transport::proto::{
        SendViberRequest, ViberText, messaging_service_client::MessagingServiceClient,
        send_viber_request::Content,
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = MessagingServiceClient::new(channel.clone());
    // Viber, at half an SMS's price: the sandbox's balance (1,000 UAH) then still
    // pays for the second caller's SMS during the attack.
    for id in 1..=n {
        let mut request = tonic::Request::new(SendViberRequest {
            id,
            phone: format!("380501{id:06}"),
            signature: "msgw".into(),
            content: Some(Content::Text(ViberText {
                message: "hostile benchmark: an event to replay".into(),
            })),
            ..Default::default()
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse()?);
        client.send_viber(request).await?;
    }
    // The sandbox reports each message within seconds: wait for the first events.
    let mut events = msgw::transport::proto::event_service_client::EventServiceClient::new(channel);
    let mut request = tonic::Request::new(msgw::transport::proto::StreamStatusEventsRequest {
        from_oldest: true,
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse()?);
    let mut stream = events.stream_status_events(request).await?.into_inner();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    let deadline = deadline + Duration::from_secs(n / 100);
    while seen < n && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
            Ok(Ok(Some(_))) => seen += 1,
            _ => break,
        }
    }
    Ok(())
}

/// msgw's `/metrics` text ("" when it does not answer within 5 s).
async fn metrics_text(admin: SocketAddr) -> String {
    let Ok(mut tcp) = TcpStream::connect(admin).await else {
        return String::new();
    };
    let _ = tcp
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: msgw\r\nconnection: close\r\n\r\n")
        .await;
    let mut body = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_string(&mut body)).await;
    body
}

/// What msgw counts its gRPC port's streams as holding, MiB.
async fn held_mib(admin: SocketAddr) -> f64 {
    let body = metrics_text(admin).await;
    body.lines()
        .find_map(|l| l.strip_prefix("msgw_grpc_held_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0.0, |b| b / (1024.0 * 1024.0))
}

/// msgw's counters of connections and streams it cut, from `/metrics`.
async fn cut_counts(admin: SocketAddr) -> String {
    let body = metrics_text(admin).await;
    let mut cut = Vec::new();
    for line in body.lines() {
        let interesting = line.starts_with("msgw_grpc_connections_closed_total")
            || line.starts_with("msgw_grpc_streams_reset_total")
            || line.starts_with("msgw_grpc_streams_refused_total");
        if interesting && !line.contains("reason=\"client\"") {
            let (name, value) = line.rsplit_once(' ').unwrap_or((line, ""));
            if value != "0" {
                let short = name
                    .trim_start_matches("msgw_grpc_")
                    .replace("_total", "")
                    .replace("reason=", "");
                cut.push(format!("{short}={value}"));
            }
        }
    }
    if cut.is_empty() {
        "none".into()
    } else {
        cut.join(" ")
    }
}

/// The well-behaved client: a Health/Check every 100 ms, each with a 1 s deadline.
struct Prober {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    slowest_us: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    checks: Arc<AtomicU64>,
}

impl Prober {
    async fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(1))
            .connect()
            .await?;
        let mut client = HealthClient::new(channel);
        client.check(HealthCheckRequest::default()).await?;
        let (stop, mut stopped) = watch::channel(false);
        let slowest_us = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let checks = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (slowest_us, failed, checks) = (slowest_us.clone(), failed.clone(), checks.clone());
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tokio::select! {
                        _ = stopped.changed() => return,
                        _ = tick.tick() => {}
                    }
                    let started = Instant::now();
                    let answered = client.check(HealthCheckRequest::default()).await;
                    let took = started.elapsed();
                    checks.fetch_add(1, Ordering::Relaxed);
                    slowest_us.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
                    if answered.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Ok(Self {
            stop,
            task,
            slowest_us,
            failed,
            checks,
        })
    }

    async fn stop(self) -> (Duration, u64, u64) {
        self.stop.send_replace(true);
        let _ = self.task.await;
        (
            Duration::from_micros(self.slowest_us.load(Ordering::Relaxed)),
            self.failed.load(Ordering::Relaxed),
            self.checks.load(Ordering::Relaxed),
        )
    }
}

/// One hostile connection, connecting again whenever msgw closes it, until `stop`.
async fn attacker(addr: SocketAddr, kind: Kind, mut stop: watch::Receiver<bool>) {
    if kind == Kind::HalfHeaders {
        return half_headers(addr, stop).await;
    }
    if matches!(kind, Kind::Uploads | Kind::SpreadUploads) {
        let streams = if kind == Kind::Uploads { 200 } else { 1 };
        let auth = format!("Bearer {QUERIER}");
        let metadata = [("authorization", auth.as_str())];
        let sent = AtomicU64::new(0);
        while !*stop.borrow() {
            let until = tokio::time::Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                _ = stop.changed() => return,
                () = frames::upload_unfinished(
                    addr,
                    "/msgw.v1.MessagingService/Batch",
                    &metadata,
                    streams,
                    1_040_000,
                    until,
                    &sent,
                ) => {}
            }
        }
        return;
    }
    while !*stop.borrow() {
        let Ok(tcp) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (mut read, mut write) = tcp.into_split();
        let zero = matches!(kind, Kind::ZeroWindow | Kind::Replay | Kind::ReplayNoToken);
        let reader = zero.then(|| {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
            })
        });
        let window = zero.then_some(0);
        let mut opening = frames::PREFACE.to_vec();
        opening.extend(frames::settings(window));
        let mut stream_id = 1u32;
        let every = match kind {
            Kind::Replay | Kind::ReplayNoToken | Kind::Waiters => 1,
            _ => 10,
        };
        let most = match kind {
            Kind::Replay | Kind::ReplayNoToken => 1_000,
            Kind::Waiters => 800,
            _ => u32::MAX,
        };
        let mut tick = tokio::time::interval(Duration::from_millis(every));
        let mut bytes = opening;
        loop {
            let wrote = tokio::select! {
                _ = stop.changed() => break,
                wrote = write.write_all(&bytes) => wrote,
            };
            if wrote.is_err() || stream_id > 1 << 30 {
                break;
            }
            if stream_id / 2 >= most {
                // As many streams as it opens: hold them until stopped.
                let _ = stop.changed().await;
                break;
            }
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => {}
            }
            bytes = request(kind, stream_id);
            stream_id += 2;
        }
        if let Some(reader) = reader {
            reader.abort();
        }
    }
}

/// A connection without a token that sends a request's header block without its end
/// and holds it, connecting again 100 ms after msgw closes it, until `stop`.
async fn half_headers(addr: SocketAddr, mut stop: watch::Receiver<bool>) {
    let mut opening = frames::PREFACE.to_vec();
    opening.extend(frames::settings(None));
    let mut headers = frames::grpc_headers(
        1,
        "/msgw.v1.MessagingService/Batch",
        &[("x-pad", &"p".repeat(15_000))],
    );
    // END_HEADERS unset: msgw keeps the block, waiting for its CONTINUATION.
    headers[4] &= !0x4;
    opening.extend(headers);
    let mut buf = vec![0u8; 4096];
    while !*stop.borrow() {
        if let Ok(mut tcp) = TcpStream::connect(addr).await
            && tcp.write_all(&opening).await.is_ok()
        {
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    read = tcp.read(&mut buf) => if !matches!(read, Ok(n) if n > 0) {
                        break;
                    },
                }
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// The frames of one hostile request on `stream`.
fn request(kind: Kind, stream: u32) -> Vec<u8> {
    let auth = format!("Bearer {TOKEN}");
    let pad = "x".repeat(2000);
    // Just under the 16 KiB of headers HTTP/2 servers accept by default.
    let names: Vec<String> = (0..7).map(|i| format!("x-pad-{i}")).collect();
    match kind {
        // The reflection stream left open after one list_services.
        Kind::NeverRead | Kind::ZeroWindow => frames::grpc_request(
            stream,
            frames::REFLECTION_V1ALPHA,
            &[],
            frames::LIST_SERVICES,
            false,
        ),
        // StreamStatusEventsRequest { from_oldest: true }.
        Kind::HalfOpenEvents => frames::grpc_request(
            stream,
            "/msgw.v1.EventService/StreamStatusEvents",
            &[("authorization", auth.as_str())],
            &[0x10, 0x01],
            true,
        ),
        // StreamStatusEventsRequest { from_oldest: true }, with a token or without.
        Kind::Replay | Kind::ReplayNoToken => {
            let metadata = [("authorization", auth.as_str())];
            let metadata = if kind == Kind::Replay {
                &metadata[..]
            } else {
                &[]
            };
            frames::grpc_request(
                stream,
                "/msgw.v1.EventService/StreamStatusEvents",
                metadata,
                &[0x10, 0x01],
                true,
            )
        }
        // GetMessageStatusRequest { id, wait_for_final: true } of a message msgw
        // never sent: waits its whole deadline.
        Kind::Waiters => {
            use prost::Message;
            let query = msgw::transport::proto::GetMessageStatusRequest {
                id: 7_000_000 + u64::from(stream),
                wait_for_final: true,
            };
            frames::grpc_request(
                stream,
                "/msgw.v1.MessagingService/GetMessageStatus",
                &[("authorization", auth.as_str())],
                &query.encode_to_vec(),
                true,
            )
        }
        Kind::Uploads | Kind::SpreadUploads | Kind::HalfHeaders => Vec::new(),
        // HealthCheckRequest {} under 7 × 2,000 bytes of metadata.
        Kind::BigMetadata => {
            let metadata: Vec<(&str, &str)> =
                names.iter().map(|n| (n.as_str(), pad.as_str())).collect();
            frames::grpc_request(stream, "/grpc.health.v1.Health/Check", &metadata, &[], true)
        }
    }
}
