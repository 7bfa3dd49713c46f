//! A retry of an id whose outcome is unknown asks the gateway's `status` first; those
//! lookups are bounded per claim, across callers and replicas: one at a time, and after
//! one that told nothing, none until its backoff is over (retries meanwhile are
//! answered `OUTCOME_UNKNOWN` with `RetryInfo`, and the gateway is not asked).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures_util::future::join_all;
use msgw::transport::proto::{SendSmsResponse, messaging_service_client::MessagingServiceClient};
use tonic::{Code, transport::Channel};
use tonic_types::StatusExt;

use crate::builders::sms_saying;
use crate::helpers::{FakeGateway, Options, Reply, default_reply, error_info, spawn_app};
use crate::idempotency::replayed;
use crate::postgres::TestSchema;
use crate::replicas::Replica;

/// A gateway whose answers to sends are lost (HTTP 502: the outcome is unknown) and
/// whose `status` fails the same way after `latency`, until told that it has the
/// message; it counts the requests of each kind.
#[derive(Clone)]
struct LostStatus {
    statuses: Arc<AtomicUsize>,
    sends: Arc<AtomicUsize>,
    found: Arc<AtomicBool>,
}

impl LostStatus {
    fn install(gateway: &FakeGateway, latency: Duration) -> Self {
        let this = Self {
            statuses: Arc::default(),
            sends: Arc::default(),
            found: Arc::default(),
        };
        let counts = this.clone();
        gateway.respond_with(move |body| {
            let items = body["data"].as_array().cloned().unwrap_or_default();
            if !items.iter().all(|item| item["type"] == "status") {
                counts.sends.fetch_add(1, Ordering::SeqCst);
                return Reply::Http(502, "bad gateway");
            }
            counts.statuses.fetch_add(1, Ordering::SeqCst);
            if counts.found.load(Ordering::SeqCst) {
                return default_reply(body);
            }
            Reply::After(latency, Box::new(Reply::Http(502, "bad gateway")))
        });
        this
    }

    fn statuses(&self) -> usize {
        self.statuses.load(Ordering::SeqCst)
    }
}

async fn send(
    mut client: MessagingServiceClient<Channel>,
    id: u64,
) -> Result<tonic::Response<SendSmsResponse>, tonic::Status> {
    client.send_sms(sms_saying(id, "x")).await
}

/// Checks that `status` says "outcome unknown, nothing sent, retry after the backoff";
/// the delay it gives.
fn backing_off(status: &tonic::Status) -> Duration {
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let (reason, metadata) = error_info(status);
    assert_eq!(reason, "OUTCOME_UNKNOWN", "{status:?}");
    assert_eq!(metadata["cause"], "lookup_backoff", "{status:?}");
    let delay = status
        .get_details_retry_info()
        .and_then(|r| r.retry_delay)
        .expect("RetryInfo");
    assert!(
        delay > Duration::ZERO && delay <= msgw::core::dispatch::LOOKUP_BACKOFF_MAX,
        "{delay:?}"
    );
    delay
}

/// `n` retries of `id` at once, spread over `clients` in turn: the longest delay they
/// were told to wait, each having been answered "outcome unknown, retry later".
async fn retries_at_once(
    clients: &[MessagingServiceClient<Channel>],
    id: u64,
    n: usize,
) -> Duration {
    let answers = join_all((0..n).map(|i| send(clients[i % clients.len()].clone(), id))).await;
    answers
        .iter()
        .map(|answer| backing_off(answer.as_ref().expect_err("nothing to replay yet")))
        .max()
        .unwrap_or_default()
}

/// Waits as long as the last answer said: the backoff is then over.
async fn after(delay: Duration) {
    tokio::time::sleep(delay + Duration::from_millis(50)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_retries_of_an_unknown_id_ask_the_gateway_once_then_back_off() {
    let app = spawn_app().await;
    let gateway = LostStatus::install(&app.gateway, Duration::from_millis(300));
    let status = send(app.messaging(), 9101).await.unwrap_err();
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN", "{status:?}");

    // Twenty at once: one asks `status`, the others wait for its outcome.
    let clients = [app.messaging()];
    let delay = retries_at_once(&clients, 9101, 20).await;
    assert_eq!(gateway.statuses(), 1, "one lookup for twenty retries");
    assert!(
        delay <= msgw::core::dispatch::LOOKUP_BACKOFF_FIRST,
        "{delay:?}"
    );
    // Inside the backoff: answered without asking.
    for _ in 0..5 {
        backing_off(&send(app.messaging(), 9101).await.unwrap_err());
    }
    assert_eq!(gateway.statuses(), 1, "no lookup inside the backoff");

    // After it, one more lookup; it fails too, and the backoff doubles.
    after(delay).await;
    let delay = retries_at_once(&clients, 9101, 5).await;
    assert_eq!(gateway.statuses(), 2);
    assert!(
        delay > msgw::core::dispatch::LOOKUP_BACKOFF_FIRST,
        "the second backoff is longer: {delay:?}"
    );

    // The gateway answers again: the next lookup, after the backoff, finds the message.
    gateway.found.store(true, Ordering::SeqCst);
    backing_off(&send(app.messaging(), 9101).await.unwrap_err());
    after(delay).await;
    let ok = send(app.messaging(), 9101).await.expect("found by status");
    assert!(replayed(&ok));
    assert_eq!(ok.get_ref().receipt.as_ref().unwrap().msg_id, "99");
    assert_eq!(gateway.statuses(), 3);
    assert_eq!(gateway.sends.load(Ordering::SeqCst), 1, "never sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_spread_over_two_replicas_ask_the_gateway_once_per_backoff() {
    let schema = TestSchema::create().await;
    let gateway = FakeGateway::start().await;
    let lost = LostStatus::install(&gateway, Duration::from_millis(300));
    let a = Replica::start_with(Options::default(), &schema, &gateway).await;
    let b = Replica::start_with(Options::default(), &schema, &gateway).await;
    let status = send(a.messaging(), 9201).await.unwrap_err();
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN", "{status:?}");

    let clients = [a.messaging(), b.messaging()];
    let delay = retries_at_once(&clients, 9201, 20).await;
    assert_eq!(lost.statuses(), 1, "one lookup across both replicas");
    for client in &clients {
        backing_off(&send(client.clone(), 9201).await.unwrap_err());
    }
    assert_eq!(
        lost.statuses(),
        1,
        "no lookup inside the backoff, on either replica"
    );

    after(delay).await;
    retries_at_once(&clients, 9201, 10).await;
    assert_eq!(
        lost.statuses(),
        2,
        "one more lookup once the backoff is over"
    );
    assert_eq!(lost.sends.load(Ordering::SeqCst), 1, "never sent again");
}
