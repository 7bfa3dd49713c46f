//! Several msgw replicas on one PostgreSQL database (a schema of its own per test),
//! with one fake gateway behind them: exactly-once sends, every event on every
//! replica's streams, a replica dying mid-load, and the database going away. Each test
//! runs on PostgreSQL reached directly and through PgBouncer in session and in
//! transaction mode.
//!
//! Each replica runs in a runtime of its own, so a test can kill one abruptly (its
//! tasks and sockets dropped mid-flight, no graceful shutdown), as a lost node would.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures_util::{StreamExt as _, stream};
use msgw::{core::hooks::HookSigner, process::app::Application, transport::proto::*};
use serde_json::{Value, json};
use tokio::time::Instant;
use tonic::{Code, transport::Channel};

use crate::helpers::{
    FakeGateway, Options, Reply, WEBHOOK_SECRET, config, connect, default_reply, error_info, sms,
};
use crate::pgbouncer::Bouncer;
use crate::postgres::TestSchema;
use crate::remembering::{Mode, Remembering};
use crate::settling::{retry_until_ok, with_deadline};
use msgw::adapters::store::Pooling;

/// One msgw process, as far as the test can tell.
pub struct Replica {
    http_addr: SocketAddr,
    admin_addr: SocketAddr,
    channel: Channel,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Replica {
    async fn start(schema: &TestSchema, gateway: &FakeGateway) -> Self {
        Self::start_with(Options::default(), schema, gateway).await
    }

    /// A replica with these options, on `schema` (or the store URL they name, such as a
    /// pooler's in front of it), in front of `gateway`.
    pub async fn start_with(
        mut options: Options,
        schema: &TestSchema,
        gateway: &FakeGateway,
    ) -> Self {
        let store_url = options.store_url.take().unwrap_or(schema.url.clone());
        let (config, dir) = config(
            Options {
                store_url: Some(store_url),
                upstream_timeout: Duration::from_secs(1),
                ..options
            },
            gateway,
        );
        let (ready, started) = tokio::sync::oneshot::channel();
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("replica runtime");
            runtime.block_on(async move {
                let app = Application::build(config).await.expect("replica builds");
                let addrs = (
                    app.http_addr().unwrap(),
                    app.admin_addr().unwrap(),
                    app.grpc_addr().unwrap(),
                );
                let _ = ready.send(addrs);
                tokio::select! {
                    served = app.run(std::future::pending()) => served.expect("replica serves"),
                    _ = killed => {}
                }
            });
            // Abruptly: every task and socket of the replica is dropped where it stands.
            runtime.shutdown_background();
            drop(dir);
        });
        let (http_addr, admin_addr, addr) = started.await.expect("replica started");
        Self {
            http_addr,
            admin_addr,
            channel: connect(addr).await,
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    /// Starts `n` replicas at once (their migrations race for the advisory lock).
    pub async fn start_all(n: usize, schema: &TestSchema, gateway: &FakeGateway) -> Vec<Self> {
        futures_util::future::join_all((0..n).map(|_| Self::start(schema, gateway))).await
    }

    pub fn messaging(&self) -> messaging_service_client::MessagingServiceClient<Channel> {
        messaging_service_client::MessagingServiceClient::new(self.channel.clone())
    }

    /// A connection to its gRPC port.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// Its webhook listener.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The `/metrics` text.
    async fn metrics(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.admin_addr))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// Kills the replica abruptly.
    fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// POSTs the delivery webhook of `id`; the HTTP status, or `None` if the replica
    /// could not be reached.
    async fn webhook(&self, http: &reqwest::Client, id: u64) -> Option<u16> {
        let token = HookSigner::new(&WEBHOOK_SECRET.to_owned().into())
            .token(msgw::core::domain::ClientId::new(id).unwrap());
        let body = json!({"success": true, "id": id.to_string(), "msg_id": format!("m{id}"),
                          "type": "sms", "status": "DELIVERED"});
        http.post(format!(
            "http://{}/v1/webhooks/status/{token}",
            self.http_addr
        ))
        .json(&body)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The database a test's replicas share: a schema of its own, reached directly or
/// through a PgBouncer of its own in either mode.
pub struct Database {
    // Dropped before the schema it serves.
    bouncer: Option<Bouncer>,
    pooling: Pooling,
    /// The schema (to cut the database off, or kill its connections).
    pub schema: TestSchema,
}

impl Database {
    /// A schema reached directly.
    pub async fn direct() -> Self {
        Self {
            bouncer: None,
            pooling: Pooling::Session,
            schema: TestSchema::create().await,
        }
    }

    /// A schema behind PgBouncer in `pooling`'s mode.
    pub async fn through_pgbouncer(pooling: Pooling) -> Self {
        let schema = TestSchema::create().await;
        Self {
            bouncer: Some(Bouncer::start(&schema, pooling.as_str())),
            pooling,
            schema,
        }
    }

    /// msgw's options for this database: the pooler's URL, its mode, and in transaction
    /// mode PostgreSQL's own URL as the direct one.
    pub fn options(&self) -> Options {
        self.with(Options::default())
    }

    /// `options` with this database as the store.
    fn with(&self, options: Options) -> Options {
        Options {
            store_url: Some(match &self.bouncer {
                Some(bouncer) => bouncer.url(),
                None => self.schema.url.clone(),
            }),
            store_pooling: self.pooling,
            store_direct_url: (self.pooling == Pooling::Transaction)
                .then(|| self.schema.url.clone()),
            ..options
        }
    }

    /// A replica with `options` on this database.
    pub async fn replica(&self, options: Options, gateway: &FakeGateway) -> Replica {
        Replica::start_with(self.with(options), &self.schema, gateway).await
    }

    /// `n` replicas started at once (their migrations take turns).
    pub async fn replicas(&self, n: usize, gateway: &FakeGateway) -> Vec<Replica> {
        futures_util::future::join_all((0..n).map(|_| self.replica(Options::default(), gateway)))
            .await
    }
}

/// The client ids of every `sms` operation the gateway received.
fn sms_sent(gateway: &FakeGateway) -> Vec<u64> {
    gateway
        .envelopes()
        .iter()
        .flatten()
        .filter(|op| op["type"] == "sms")
        .map(|op| op["id"].as_u64().expect("numeric id"))
        .collect()
}

/// A gateway that takes `latency` to answer (so calls on different replicas overlap)
/// and knows what it was sent: a `status` query for an id it never received is
/// refused, as the real gateway's is, so msgw resends instead of assuming.
pub async fn slow_gateway(latency: Duration) -> FakeGateway {
    let gateway = FakeGateway::start().await;
    let sent = Arc::new(Mutex::new(HashSet::new()));
    gateway.respond_with(move |body: &Value| {
        let Reply::Json(mut answer) = default_reply(body) else {
            unreachable!("the default reply is JSON")
        };
        let mut sent = sent.lock().unwrap();
        for (i, op) in body["data"].as_array().into_iter().flatten().enumerate() {
            let id = op["id"].as_u64().unwrap_or_default();
            match op["type"].as_str() {
                Some("sms") => {
                    sent.insert(id);
                }
                Some("status") if !sent.contains(&id) => {
                    answer["data"][i] =
                        json!({"success": false, "error": "Message not found", "data": {"id": id}});
                }
                _ => {}
            }
        }
        Reply::After(latency, Box::new(Reply::Json(answer)))
    });
    gateway
}

/// Sends `SendSms(id)` until it succeeds, moving to the next replica after a failure
/// (as a client behind a load balancer would retry); the msg_id it got.
async fn send_until_ok(replicas: &[Replica], first: usize, id: u64, give_up: Instant) -> String {
    let mut at = first;
    loop {
        let mut request = tonic::Request::new(sms(id));
        request.set_timeout(Duration::from_secs(15));
        match replicas[at % replicas.len()]
            .messaging()
            .send_sms(request)
            .await
        {
            Ok(response) => return response.into_inner().receipt.expect("receipt").msg_id,
            Err(status) => {
                assert!(
                    Instant::now() < give_up,
                    "SendSms({id}) still failing: {status:?}"
                );
                assert!(
                    matches!(
                        status.code(),
                        Code::Unavailable | Code::DeadlineExceeded | Code::Unknown
                    ),
                    "only transient failures may happen: {status:?}"
                );
                at += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// What a subscriber received: (cursor, client id) in arrival order.
type Received = Arc<Mutex<Vec<(u64, u64)>>>;

/// Streams from `replicas[first]` after cursor 0 until `want` distinct events arrived;
/// when its stream breaks (replica gone, database gone) it resumes after the last
/// cursor it got, on the next replica that is up. Returns how often it resumed.
async fn follow(
    channels: Vec<Channel>,
    first: usize,
    want: usize,
    received: Received,
    give_up: Instant,
) -> usize {
    let mut at = first;
    let mut last = 0;
    let mut resumed = 0;
    loop {
        let request = StreamStatusEventsRequest {
            after_cursor: Some(last),
            ..Default::default()
        };
        let opened = event_service_client::EventServiceClient::new(channels[at].clone())
            .stream_status_events(request)
            .await;
        if let Ok(response) = opened {
            let mut stream = response.into_inner();
            loop {
                let next = tokio::time::timeout_at(give_up, stream.next()).await;
                match next.expect("subscriber: all events within the time limit") {
                    Some(Ok(item)) => {
                        let event = item.event.expect("event");
                        last = event.cursor;
                        let mut got = received.lock().unwrap();
                        got.push((event.cursor, event.id));
                        if got.len() >= want {
                            return resumed;
                        }
                    }
                    Some(Err(_)) | None => break,
                }
            }
        }
        assert!(Instant::now() < give_up, "subscriber could not resume");
        resumed += 1;
        at = (at + 1) % channels.len();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One subscriber per replica, each following from cursor 0 until `want` events.
fn follow_on_each(
    channels: &[Channel],
    want: usize,
    give_up: Instant,
) -> Vec<(Received, tokio::task::JoinHandle<usize>)> {
    (0..channels.len())
        .map(|at| {
            let received = Received::default();
            let task = tokio::spawn(follow(
                channels.to_vec(),
                at,
                want,
                received.clone(),
                give_up,
            ));
            (received, task)
        })
        .collect()
}

/// Every event exactly once, in increasing cursor order, and each id of `expected`.
fn assert_complete(received: &Received, expected: &HashSet<u64>, who: &str) {
    let got = received.lock().unwrap();
    assert!(
        got.windows(2).all(|w| w[0].0 < w[1].0),
        "{who}: cursors must increase"
    );
    let ids: HashSet<u64> = got.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids.len(), got.len(), "{who}: no event twice");
    let missing: Vec<&u64> = expected.difference(&ids).collect();
    assert!(
        missing.is_empty(),
        "{who}: missing acknowledged events {missing:?}"
    );
}

pub async fn a_send_cut_on_one_replica_is_not_sent_again_by_another_inside_the_settle_window(
    database: Database,
) {
    let gateway = FakeGateway::start().await;
    let remembering = Remembering::install(&gateway);
    // Replicas cut requests after 1 s; the gateway carries sends out after 2 s.
    *remembering.slow.lock().unwrap() = Duration::from_secs(2);
    remembering.set(Mode::SlowSends);
    let options = || Options {
        upstream_settle: Duration::from_secs(5),
        ..Options::default()
    };
    let a = database.replica(options(), &gateway).await;
    let b = database.replica(options(), &gateway).await;
    let status = a
        .messaging()
        .send_sms(with_deadline(9001, Duration::from_secs(30)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");

    let (ok, refused) = retry_until_ok(b.messaging(), 9001, Duration::from_secs(15)).await;
    assert!(refused >= 1, "B honoured the window A opened");
    assert!(
        ok.metadata()
            .get("msgw-replayed")
            .is_some_and(|v| v == "true")
    );
    assert_eq!(ok.get_ref().receipt.as_ref().unwrap().msg_id, "500000001");
    assert_eq!(
        remembering.sends_of(9001),
        1,
        "the gateway got id 9001 once"
    );
}

pub async fn duplicate_sends_spread_across_replicas_reach_the_gateway_once_per_id(
    database: Database,
) {
    let gateway = slow_gateway(Duration::from_millis(20)).await;
    let replicas = database.replicas(3, &gateway).await;
    duplicates_reach_the_gateway_once(&replicas, &gateway).await;
}

/// 1,000 SendSms over 200 ids, every id five times on different `replicas` at once:
/// the gateway receives each id once.
pub async fn duplicates_reach_the_gateway_once(replicas: &[Replica], gateway: &FakeGateway) {
    let give_up = Instant::now() + Duration::from_secs(60);
    let calls: Vec<(usize, u64)> = (0..1000).map(|i| (i, 1 + (i as u64 % 200))).collect();
    let answers: Vec<(u64, String)> = stream::iter(calls)
        .map(|(i, id)| async move { (id, send_until_ok(replicas, i, id, give_up).await) })
        .buffer_unordered(100)
        .collect()
        .await;
    assert_eq!(answers.len(), 1000);
    let mut sent = sms_sent(gateway);
    sent.sort_unstable();
    assert_eq!(
        sent,
        (1..=200).collect::<Vec<_>>(),
        "exactly one upstream send per id"
    );
}

pub async fn webhooks_posted_to_any_replica_reach_every_replicas_subscribers(database: Database) {
    let gateway = FakeGateway::start().await;
    let replicas = database.replicas(3, &gateway).await;
    webhooks_reach_every_subscriber(&replicas, 2000).await;
}

/// `events` webhooks posted round the `replicas`: a subscriber on each gets every one,
/// in cursor order.
pub async fn webhooks_reach_every_subscriber(replicas: &[Replica], events: u64) {
    let channels: Vec<Channel> = replicas.iter().map(|r| r.channel.clone()).collect();
    let give_up = Instant::now() + Duration::from_secs(90);
    let subscribers = follow_on_each(&channels, events as usize, give_up);
    let http = reqwest::Client::new();
    let statuses: Vec<Option<u16>> = stream::iter(1..=events)
        .map(|id| {
            let http = &http;
            async move {
                replicas[id as usize % replicas.len()]
                    .webhook(http, id)
                    .await
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(
        statuses.iter().all(|s| *s == Some(200)),
        "every webhook acknowledged"
    );
    let expected: HashSet<u64> = (1..=events).collect();
    for (at, (received, task)) in subscribers.into_iter().enumerate() {
        task.await.expect("subscriber");
        assert_complete(&received, &expected, &format!("subscriber on replica {at}"));
    }
}

/// How long each of `n` webhooks posted to `from` took to reach a subscriber of `to`
/// (one at a time, so each is measured alone), in order.
pub async fn event_delays(from: &Replica, to: &Replica, n: u64) -> Vec<Duration> {
    let mut stream = event_service_client::EventServiceClient::new(to.channel())
        .stream_status_events(StreamStatusEventsRequest {
            after_cursor: Some(0),
            ..Default::default()
        })
        .await
        .expect("subscribe")
        .into_inner();
    let http = reqwest::Client::new();
    let mut delays = Vec::new();
    for id in 1..=n {
        let posted = Instant::now();
        assert_eq!(from.webhook(&http, id).await, Some(200));
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the event within 10 s")
            .expect("the stream goes on")
            .expect("an event");
        assert_eq!(item.event.expect("event").id, id);
        delays.push(posted.elapsed());
    }
    delays
}

pub async fn a_replica_killed_mid_load_loses_nothing_acknowledged_and_its_subscriber_resumes_elsewhere(
    database: Database,
) {
    const EVENTS: u64 = 1500;
    let gateway = FakeGateway::start().await;
    let mut replicas = database.replicas(3, &gateway).await;
    let channels: Vec<Channel> = replicas.iter().map(|r| r.channel.clone()).collect();
    let give_up = Instant::now() + Duration::from_secs(90);
    // The subscriber on the replica about to die resumes on the next one.
    let subscribers = follow_on_each(&channels, EVENTS as usize, give_up);
    let http = reqwest::Client::new();
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let post = |replicas: &[Replica], ids: std::ops::RangeInclusive<u64>| {
        let (http, acknowledged) = (http.clone(), acknowledged.clone());
        let targets: Vec<(u64, SocketAddr)> = ids
            .map(|id| (id, replicas[id as usize % replicas.len()].http_addr))
            .collect();
        let alive: Vec<SocketAddr> = replicas.iter().map(|r| r.http_addr).collect();
        async move {
            stream::iter(targets)
                .map(|(id, addr)| {
                    let (http, acknowledged, alive) = (&http, &acknowledged, &alive);
                    async move {
                        // Like the gateway: retry a refused or failed webhook, possibly
                        // reaching another replica behind the Service.
                        let mut addr = addr;
                        for attempt in 0..50 {
                            let token = HookSigner::new(&WEBHOOK_SECRET.to_owned().into())
            .token(msgw::core::domain::ClientId::new(id).unwrap());
                            let body = json!({"success": true, "id": id.to_string(), "msg_id": format!("m{id}"),
                                              "type": "sms", "status": "DELIVERED"});
                            let sent = http
                                .post(format!("http://{addr}/v1/webhooks/status/{token}"))
                                .json(&body)
                                .send()
                                .await;
                            if matches!(&sent, Ok(r) if r.status() == 200) {
                                acknowledged.lock().unwrap().insert(id);
                                return;
                            }
                            addr = alive[(id as usize + attempt + 1) % alive.len()];
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        panic!("webhook {id} never acknowledged");
                    }
                })
                .buffer_unordered(24)
                .collect::<Vec<()>>()
                .await;
        }
    };
    let first_half = tokio::spawn(post(&replicas, 1..=EVENTS / 2));
    // Kill replica 2 while webhooks are in flight on it: once some are acknowledged.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while acknowledged.lock().unwrap().len() < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no webhook acknowledged in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    replicas[2].kill();
    first_half.await.expect("first half posted");
    let survivors = &replicas[..2];
    post(survivors, EVENTS / 2 + 1..=EVENTS).await;
    let expected = acknowledged.lock().unwrap().clone();
    assert_eq!(expected.len() as u64, EVENTS);
    for (at, (received, task)) in subscribers.into_iter().enumerate() {
        let resumed = task.await.expect("subscriber");
        if at == 2 {
            assert!(
                resumed > 0,
                "the killed replica's subscriber resumed elsewhere"
            );
        }
        assert_complete(
            &received,
            &expected,
            &format!("subscriber started on replica {at}"),
        );
    }
}

pub async fn a_send_left_in_flight_by_a_dead_replica_is_resolved_by_another_without_resending(
    database: Database,
) {
    let gateway = FakeGateway::start().await;
    // The gateway accepts the send but answers too late for the replica that sent it.
    gateway.respond_with(|body: &Value| {
        if body["data"][0]["type"] == "sms" {
            Reply::After(Duration::from_secs(30), Box::new(default_reply(body)))
        } else {
            default_reply(body)
        }
    });
    let mut replicas = database.replicas(2, &gateway).await;
    let doomed = replicas[1].messaging();
    let in_flight = tokio::spawn(async move { doomed.clone().send_sms(sms(777)).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while sms_sent(&gateway).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the send never reached the gateway"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    replicas[1].kill();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the caller lost its replica"
    );
    // The caller retries on a surviving replica: the claim is in flight with nobody
    // behind it; once stale, a status query finds the message instead of a resend.
    let mut retry = tonic::Request::new(sms(777));
    retry.set_timeout(Duration::from_secs(20));
    let answer = replicas[0]
        .messaging()
        .send_sms(retry)
        .await
        .expect("the retry is answered")
        .into_inner();
    assert_eq!(answer.receipt.expect("receipt").id, 777);
    assert_eq!(sms_sent(&gateway), [777], "sent once");
    let polled: Vec<Value> = gateway
        .envelopes()
        .into_iter()
        .flatten()
        .filter(|op| op["type"] == "status")
        .collect();
    assert_eq!(
        polled.len(),
        1,
        "resolved with one status query: {polled:?}"
    );
}

pub async fn while_the_database_is_away_calls_fail_unavailable_and_msgw_recovers_by_itself(
    database: Database,
) {
    let schema = &database.schema;
    let gateway = slow_gateway(Duration::ZERO).await;
    let replicas = database.replicas(2, &gateway).await;
    let http = reqwest::Client::new();
    let channels: Vec<Channel> = replicas.iter().map(|r| r.channel.clone()).collect();
    let give_up = Instant::now() + Duration::from_secs(60);
    let received = Received::default();
    let subscriber = tokio::spawn(follow(channels, 0, 2, received.clone(), give_up));
    assert_eq!(replicas[1].webhook(&http, 1).await, Some(200));

    schema.outage().await;
    let refused = replicas[0]
        .messaging()
        .send_sms(sms(10))
        .await
        .expect_err("no store, no send");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(error_info(&refused).0, "STORE_UNAVAILABLE");
    assert_eq!(
        replicas[1].webhook(&http, 2).await,
        Some(503),
        "the gateway must retry"
    );
    let balance = account_service_client::AccountServiceClient::new(replicas[0].channel.clone())
        .get_balance(GetBalanceRequest::default())
        .await;
    assert!(
        balance.is_ok(),
        "calls without the store keep working: {balance:?}"
    );
    let stream = event_service_client::EventServiceClient::new(replicas[0].channel.clone())
        .stream_status_events(StreamStatusEventsRequest::default())
        .await
        .expect_err("no store, no new stream");
    assert_eq!(stream.code(), Code::Unavailable, "{stream:?}");
    assert_eq!(error_info(&stream).0, "STORE_UNAVAILABLE");
    assert!(
        sms_sent(&gateway).is_empty(),
        "nothing sent without a claim"
    );

    schema.recover().await;
    send_until_ok(&replicas, 0, 10, give_up).await;
    loop {
        if replicas[1].webhook(&http, 2).await == Some(200) {
            break;
        }
        assert!(Instant::now() < give_up, "webhooks never accepted again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    subscriber.await.expect("subscriber");
    assert_complete(&received, &HashSet::from([1, 2]), "subscriber");
    assert_eq!(sms_sent(&gateway), [10]);
}

pub async fn connections_killed_mid_load_lose_nothing_and_send_nothing_twice(database: Database) {
    const SENDS: u64 = 300;
    let schema = &database.schema;
    let gateway = slow_gateway(Duration::from_millis(5)).await;
    let replicas = database.replicas(2, &gateway).await;
    let channels: Vec<Channel> = replicas.iter().map(|r| r.channel.clone()).collect();
    let give_up = Instant::now() + Duration::from_secs(90);
    let received = Received::default();
    let subscriber = tokio::spawn(follow(
        channels,
        1,
        SENDS as usize,
        received.clone(),
        give_up,
    ));
    let http = reqwest::Client::new();
    let load = {
        let replicas = &replicas;
        let http = &http;
        stream::iter(1..=SENDS)
            .map(move |id| async move {
                let msg_id = send_until_ok(replicas, id as usize, id, give_up).await;
                let mut at = id as usize;
                while replicas[at % 2].webhook(http, id).await != Some(200) {
                    assert!(Instant::now() < give_up, "webhook {id} never acknowledged");
                    at += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (id, msg_id)
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
    };
    let killer = async {
        let mut killed = 0;
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            killed += schema.kill_connections().await;
        }
        killed
    };
    let (answers, killed) = tokio::join!(load, killer);
    assert!(killed > 0, "connections were killed");
    let answers: HashMap<u64, String> = answers.into_iter().collect();
    assert_eq!(answers.len() as u64, SENDS);
    let mut sent = sms_sent(&gateway);
    sent.sort_unstable();
    assert_eq!(
        sent,
        (1..=SENDS).collect::<Vec<_>>(),
        "each id sent exactly once"
    );
    subscriber.await.expect("subscriber");
    assert_complete(&received, &(1..=SENDS).collect(), "subscriber");
}

pub async fn one_replica_at_a_time_refreshes_the_balance_and_another_takes_over_when_it_dies(
    database: Database,
) {
    let gateway = FakeGateway::start().await;
    let options = || Options {
        balance_refresh: Duration::from_millis(100),
        ..Options::default()
    };
    let mut replicas = vec![
        database.replica(options(), &gateway).await,
        database.replica(options(), &gateway).await,
    ];
    let exporting = |texts: &[String]| -> Vec<usize> {
        texts
            .iter()
            .enumerate()
            .filter(|(_, t)| t.lines().any(|l| l.starts_with("msgw_balance{")))
            .map(|(i, _)| i)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let holder = loop {
        let texts = vec![replicas[0].metrics().await, replicas[1].metrics().await];
        if let [one] = exporting(&texts)[..] {
            break one;
        }
        assert!(
            Instant::now() < deadline,
            "exactly one replica exports the balance"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The holder goes on refreshing while the other asks the gateway nothing.
    let balance_requests = |text: &str| -> u64 {
        text.lines()
            .find(|l| {
                l.starts_with("msgw_upstream_requests_total{")
                    && l.contains(r#"operation="balance""#)
                    && l.contains(r#"outcome="ok""#)
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let other = 1 - holder;
    let others_before = balance_requests(&replicas[other].metrics().await);
    let holders_before = balance_requests(&replicas[holder].metrics().await);
    let deadline = Instant::now() + Duration::from_secs(10);
    while balance_requests(&replicas[holder].metrics().await) < holders_before + 5 {
        assert!(
            Instant::now() < deadline,
            "the holder refreshes the balance"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        balance_requests(&replicas[other].metrics().await),
        others_before,
        "only the lease holder refreshes the balance"
    );
    // The holder dies: the other takes the lease over once it runs out (two periods).
    replicas.remove(holder).kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while exporting(&[replicas[0].metrics().await]).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the survivor took the balance over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each test of the suite, on PostgreSQL reached directly and through PgBouncer in
/// each mode.
macro_rules! each_way {
    ($($test:ident),* $(,)?) => {
        each_way!(@way direct, Database::direct(), $($test),*);
        each_way!(@way pgbouncer_session, Database::through_pgbouncer(Pooling::Session), $($test),*);
        each_way!(@way pgbouncer_transaction, Database::through_pgbouncer(Pooling::Transaction), $($test),*);
    };
    (@way $way:ident, $database:expr, $($test:ident),*) => {
        mod $way {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test($database.await).await
                }
            )*
        }
    };
}

each_way!(
    a_send_cut_on_one_replica_is_not_sent_again_by_another_inside_the_settle_window,
    duplicate_sends_spread_across_replicas_reach_the_gateway_once_per_id,
    webhooks_posted_to_any_replica_reach_every_replicas_subscribers,
    a_replica_killed_mid_load_loses_nothing_acknowledged_and_its_subscriber_resumes_elsewhere,
    a_send_left_in_flight_by_a_dead_replica_is_resolved_by_another_without_resending,
    while_the_database_is_away_calls_fail_unavailable_and_msgw_recovers_by_itself,
    connections_killed_mid_load_lose_nothing_and_send_nothing_twice,
    one_replica_at_a_time_refreshes_the_balance_and_another_takes_over_when_it_dies,
);
