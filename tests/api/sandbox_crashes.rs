//! The real binary on its sandbox, as `msgw serve` runs with no gateway configured,
//! killed with SIGKILL and started again on the same store (a SQLite file, or a
//! PostgreSQL schema): what it acknowledged is still there, nothing it handed out is
//! handed out again, and without a configured secret the hooks it gave the sandbox
//! before still verify.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    process::{Child, Command},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use msgw::transport::proto::*;
use tokio_stream::StreamExt;
use tonic::{Code, transport::Channel};

use crate::builders::sms_to;
use crate::helpers::{ACCOUNT_TOKEN, VERIFY_SECRET, WEBHOOK_SECRET, serving_binary};
use crate::postgres::TestSchema;

/// How long a test may take at most; it fails then, never hangs.
const BOUND: Duration = Duration::from_secs(90);

/// msgw on its sandbox on fixed loopback ports (callers and the sandbox's hooks reach
/// the next start at the same address).
struct Sandboxed {
    store_url: String,
    /// Flags of the store: a PostgreSQL store needs the secrets every replica shares.
    store_flags: Vec<String>,
    grpc: u16,
    http: u16,
    step: Duration,
    child: Option<Child>,
}

impl Sandboxed {
    /// On the SQLite file `msgw.db` in `dir`, with no secret configured.
    fn on_sqlite(dir: &Path, step: Duration) -> Self {
        let store_url = format!("sqlite://{}", dir.join("msgw.db").display());
        Self::on(store_url, Vec::new(), step)
    }

    /// On a PostgreSQL schema, with the secrets it needs.
    fn on_postgres(schema: &TestSchema, step: Duration) -> Self {
        let flags = [
            ("--webhook-secret", WEBHOOK_SECRET),
            ("--account-token", ACCOUNT_TOKEN),
            ("--verify-secret", VERIFY_SECRET),
        ];
        let flags = flags
            .iter()
            .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
            .collect();
        Self::on(schema.url.clone(), flags, step)
    }

    fn on(store_url: String, store_flags: Vec<String>, step: Duration) -> Self {
        Self {
            store_url,
            store_flags,
            grpc: free_port(),
            http: free_port(),
            step,
            child: None,
        }
    }

    /// Starts msgw and waits until it serves.
    async fn start(&mut self) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_msgw"));
        // Nothing from the environment: no secret, no gateway, no callers file.
        for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("MSGW_")) {
            command.env_remove(name);
        }
        let step = format!("{}ms", self.step.as_millis());
        command.args([
            "serve",
            "--grpc-addr",
            &format!("127.0.0.1:{}", self.grpc),
            "--http-addr",
            &format!("127.0.0.1:{}", self.http),
            "--admin-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--store-url",
            &self.store_url,
            "--sandbox-step-delay",
            &step,
            "--sandbox-webhook-backoff",
            "50ms",
            // A send cut by a kill is settled by the callers' retries within seconds.
            "--upstream-timeout",
            "1s",
            "--upstream-settle",
            "1s",
            // Statuses come by webhook only.
            "--reconcile-after",
            "1h",
            "--balance-refresh",
            "0",
        ]);
        command.args(&self.store_flags);
        let (child, _) = tokio::task::spawn_blocking(move || serving_binary(command))
            .await
            .unwrap();
        self.child = Some(child);
    }

    /// Kills msgw with SIGKILL: nothing of it runs after this returns.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("msgw is gone");
        }
    }

    /// A channel to msgw's gRPC port that reconnects to whichever msgw runs there.
    fn channel(&self) -> Channel {
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", self.grpc))
            .unwrap()
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_secs(3))
            .connect_lazy()
    }
}

impl Drop for Sandboxed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port: bound, then let go for msgw to bind.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends SMS `id` until msgw acknowledges it, retrying the same id through kills and
/// restarts as a client should (see the README: retry on anything but a refusal);
/// returns its msg_id.
async fn send_until_acknowledged(channel: Channel, id: u64, until: Instant) -> String {
    let mut client =
        msgw::transport::proto::messaging_service_client::MessagingServiceClient::new(channel);
    loop {
        match client.send_sms(sms_to(id, "380971234567")).await {
            Ok(response) => return response.into_inner().receipt.unwrap().msg_id,
            Err(status) => assert!(
                !matches!(
                    status.code(),
                    Code::InvalidArgument | Code::AlreadyExists | Code::FailedPrecondition
                ),
                "send {id} refused: {status:?}"
            ),
        }
        assert!(Instant::now() < until, "send {id} never acknowledged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sandbox's balance in ten-thousandths, as msgw reports it.
async fn balance(channel: Channel, until: Instant) -> i64 {
    let mut client =
        msgw::transport::proto::account_service_client::AccountServiceClient::new(channel);
    loop {
        if let Ok(r) = client.get_balance(GetBalanceRequest {}).await {
            let amount = r.into_inner().amount.unwrap();
            return amount.units * 10_000 + i64::from(amount.nanos) / 100_000;
        }
        assert!(Instant::now() < until, "no balance");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_every_send_acknowledged_before_sigkills_is_kept_once_with_its_msg_id_and_charge()
{
    let dir = tempfile::tempdir().unwrap();
    sends_through_sigkills(Sandboxed::on_sqlite(dir.path(), STEP)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_every_send_acknowledged_before_sigkills_is_kept_once_with_its_msg_id_and_charge()
 {
    let schema = TestSchema::create().await;
    sends_through_sigkills(Sandboxed::on_postgres(&schema, STEP)).await;
}

/// Statuses move during the sends, so webhooks go out while msgw is killed too.
const STEP: Duration = Duration::from_millis(200);

/// Several callers send SMS with distinct ids, each retrying its id until msgw
/// acknowledges it, while msgw is killed and started again; then, after one more
/// kill, every acknowledged send must be found with its msg_id, no msg_id twice, and
/// the balance down by one SMS part per send.
async fn sends_through_sigkills(mut msgw: Sandboxed) {
    const CALLERS: u64 = 4;
    const SENDS_PER_CALLER: u64 = 75;
    const KILLS: u64 = 5;
    let until = Instant::now() + BOUND;
    msgw.start().await;
    let channel = msgw.channel();
    let before = balance(channel.clone(), until).await;

    let acknowledged: Arc<Mutex<HashMap<u64, String>>> = Arc::default();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let (channel, acknowledged) = (channel.clone(), acknowledged.clone());
            tokio::spawn(async move {
                for n in 1..=SENDS_PER_CALLER {
                    let id = caller * 1_000 + n;
                    let msg_id = send_until_acknowledged(channel.clone(), id, until).await;
                    acknowledged.lock().unwrap().insert(id, msg_id);
                }
            })
        })
        .collect();
    // Kills spread over the sends, each while the callers are sending.
    let total = CALLERS * SENDS_PER_CALLER;
    for kill in 1..=KILLS {
        let at = usize::try_from(total * kill / (KILLS + 1)).unwrap();
        while acknowledged.lock().unwrap().len() < at {
            assert!(Instant::now() < until, "the sends stopped going through");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        msgw.kill();
        msgw.start().await;
    }
    for caller in callers {
        caller.await.unwrap();
    }
    // Once more with every send acknowledged: what follows reads what a kill left.
    msgw.kill();
    msgw.start().await;

    let acknowledged = acknowledged.lock().unwrap().clone();
    assert_eq!(acknowledged.len() as u64, total);
    let mut client = msgw::transport::proto::messaging_service_client::MessagingServiceClient::new(
        channel.clone(),
    );
    let mut owners: HashMap<String, u64> = HashMap::new();
    for (&id, msg_id) in &acknowledged {
        let status = client
            .get_message_status(GetMessageStatusRequest {
                id,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("acknowledged send {id} ({msg_id}) is gone: {e:?}"))
            .into_inner();
        assert_eq!(&status.msg_id, msg_id, "send {id}");
        if let Some(other) = owners.insert(status.msg_id.clone(), id) {
            panic!("msg_id {msg_id} given to both {other} and {id}");
        }
    }
    let distinct: HashSet<&String> = acknowledged.values().collect();
    assert_eq!(distinct.len(), acknowledged.len(), "no msg_id twice");
    let after = balance(channel, until).await;
    assert_eq!(
        before - after,
        i64::try_from(total).unwrap() * 10_000,
        "one SMS part (1.00) billed per acknowledged send, no more, no less"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_given_before_a_restart_verify_after_it_without_a_configured_secret() {
    let until = Instant::now() + BOUND;
    let dir = tempfile::tempdir().unwrap();
    // Slow enough that the status is final only after the restart.
    let mut msgw = Sandboxed::on_sqlite(dir.path(), Duration::from_secs(1));
    msgw.start().await;
    let channel = msgw.channel();
    let msg_id = send_until_acknowledged(channel.clone(), 7, until).await;
    msgw.kill();
    msgw.start().await;

    // The sandbox resumes the delivery and posts its final status to the hook URL
    // msgw signed before the kill; only a webhook msgw accepted becomes this event.
    let mut events = msgw::transport::proto::event_service_client::EventServiceClient::new(channel)
        .stream_status_events(StreamStatusEventsRequest::default())
        .await
        .unwrap()
        .into_inner();
    // The status is final two steps after the send, and the sandbox retries a refused
    // webhook within a second: 15 s is long enough.
    let arrival = Instant::now() + Duration::from_secs(15);
    let event = loop {
        let next = tokio::time::timeout_at(arrival.into(), events.next())
            .await
            .expect("the webhook signed before the restart arrives")
            .expect("the stream stays open")
            .unwrap()
            .event
            .unwrap();
        if next.id == 7 && next.r#final {
            break next;
        }
    };
    assert_eq!(
        (event.source(), event.status(), event.msg_id.as_str()),
        (
            EventSource::Webhook,
            MessageStatus::Delivered,
            msg_id.as_str()
        )
    );
    assert!(
        dir.path().join("msgw.db.webhook-secret").is_file(),
        "the generated secret is kept next to the database"
    );
}
