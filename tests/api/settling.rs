//! Exactly once when the gateway is slow, cut off or flaky: a request that has left is
//! never abandoned for a caller's deadline, and a request cut while the gateway may
//! hold it opens a settle window inside which "not found" never leads to a second send.

use std::time::{Duration, Instant};

use msgw::transport::proto::{
    EventSource, StreamStatusEventsRequest, messaging_service_client::MessagingServiceClient,
};
use tonic::{Code, Request, transport::Channel};
use tonic_types::StatusExt;

use crate::builders::sms_saying as sms;
use crate::events::{next, subscribe};
use crate::helpers::{Options, TestApp, error_info, spawn};
use crate::idempotency::{replayed, upstream_types};
use crate::remembering::{Mode, Remembering};

async fn app(upstream_timeout: Duration, settle: Duration) -> (TestApp, Remembering) {
    let app = spawn(Options {
        upstream_timeout,
        upstream_settle: settle,
        ..Options::default()
    })
    .await;
    let gateway = Remembering::install(&app.gateway);
    (app, gateway)
}

/// A send of `id` with a deadline of `timeout`.
pub fn with_deadline(
    id: u64,
    timeout: Duration,
) -> Request<msgw::transport::proto::SendSmsRequest> {
    let mut request = Request::new(sms(id, "x"));
    request.set_timeout(timeout);
    request
}

/// Retries the send of `id` every 500 ms until it answers OK (or `within` passes);
/// every refusal on the way must be "outcome unknown, retry" (the gateway does not know
/// the message yet, or msgw's lookups of it back off), never a send.
pub async fn retry_until_ok(
    mut client: MessagingServiceClient<Channel>,
    id: u64,
    within: Duration,
) -> (
    tonic::Response<msgw::transport::proto::SendSmsResponse>,
    usize,
) {
    let give_up = Instant::now() + within;
    let mut refused = 0;
    loop {
        match client.send_sms(with_deadline(id, within)).await {
            Ok(response) => return (response, refused),
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                let (reason, metadata) = error_info(&status);
                assert_eq!(reason, "OUTCOME_UNKNOWN", "{status:?}");
                assert!(
                    ["settling", "lookup_backoff"].contains(&metadata["cause"].as_str()),
                    "{status:?}"
                );
                let delay = status
                    .get_details_retry_info()
                    .and_then(|r| r.retry_delay)
                    .expect("RetryInfo");
                assert!(delay > Duration::ZERO && delay <= Duration::from_secs(5));
                refused += 1;
            }
        }
        assert!(Instant::now() < give_up, "no OK within {within:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_send_whose_caller_deadline_passes_runs_on_and_the_retry_replays_its_answer() {
    let (app, gateway) = app(Duration::from_secs(10), Duration::from_secs(60)).await;
    gateway.set(Mode::SlowSends);
    let started = Instant::now();
    let status = app
        .messaging()
        .send_sms(with_deadline(8001, Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "answered at its deadline"
    );
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");

    let retry = app
        .messaging()
        .send_sms(with_deadline(8001, Duration::from_secs(10)))
        .await
        .expect("the retry waits for the running send");
    assert!(replayed(&retry));
    assert_eq!(
        retry.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000001",
        "the gateway's own answer"
    );
    assert_eq!(gateway.sends_of(8001), 1);
    assert_eq!(upstream_types(&app), [["sms"]]);
}

#[tokio::test]
async fn a_send_cut_by_the_upstream_timeout_is_never_sent_again_inside_the_settle_window() {
    let (app, gateway) = app(Duration::from_secs(2), Duration::from_secs(5)).await;
    gateway.set(Mode::SlowSends);
    let started = Instant::now();
    let status = app
        .messaging()
        .send_sms(with_deadline(8002, Duration::from_secs(30)))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let (reason, metadata) = error_info(&status);
    assert_eq!(
        (reason.as_str(), metadata["cause"].as_str()),
        ("OUTCOME_UNKNOWN", "timeout")
    );

    // The gateway carries the send out 3 s after it arrived; until then it does not know it.
    let (ok, refused) = retry_until_ok(app.messaging(), 8002, Duration::from_secs(15)).await;
    assert!(
        refused >= 1,
        "retries before the gateway knew the message were refused"
    );
    assert!(replayed(&ok));
    assert_eq!(ok.get_ref().receipt.as_ref().unwrap().msg_id, "500000001");
    assert_eq!(gateway.sends_of(8002), 1, "the gateway got id 8002 once");
    assert!(
        upstream_types(&app)
            .iter()
            .filter(|r| r[0] == "sms")
            .count()
            == 1,
        "{:?}",
        upstream_types(&app)
    );
}

#[tokio::test]
async fn a_connection_reset_after_the_gateway_carried_the_send_out_is_replayed() {
    let (app, gateway) = app(Duration::from_secs(5), Duration::from_secs(60)).await;
    gateway.set(Mode::ResetAfter);
    let status = app.messaging().send_sms(sms(8003, "x")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");
    gateway.set(Mode::Normal);
    let retry = app.messaging().send_sms(sms(8003, "x")).await.unwrap();
    assert!(replayed(&retry), "found by status inside the window");
    assert_eq!(gateway.sends_of(8003), 1);
    assert_eq!(upstream_types(&app), [["sms"], ["status"]]);
}

#[tokio::test]
async fn a_reset_before_the_gateway_saw_the_send_is_sent_once_after_the_window() {
    let window = Duration::from_secs(2);
    let (app, gateway) = app(Duration::from_secs(5), window).await;
    gateway.set(Mode::Reset);
    let cut = Instant::now();
    let status = app.messaging().send_sms(sms(8004, "x")).await.unwrap_err();
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN", "{status:?}");
    gateway.set(Mode::Normal);
    let (ok, refused) = retry_until_ok(app.messaging(), 8004, Duration::from_secs(10)).await;
    assert!(refused >= 1, "inside the window nothing is sent");
    assert!(cut.elapsed() >= window, "sent only after the window");
    assert!(!replayed(&ok), "really sent now: the gateway never had it");
    assert_eq!(gateway.sends_of(8004), 1);
}

#[tokio::test]
async fn without_a_retry_reconcile_resolves_a_cut_send_after_the_window_and_its_event_arrives() {
    let window = Duration::from_secs(2);
    let app = spawn(Options {
        upstream_timeout: Duration::from_secs(1),
        upstream_settle: window,
        reconcile_after: Duration::from_millis(200),
        ..Options::default()
    })
    .await;
    let gateway = Remembering::install(&app.gateway);
    *gateway.slow.lock().unwrap() = Duration::from_millis(1500);
    *gateway.status.lock().unwrap() = "DELIVERED";
    gateway.set(Mode::SlowSends);
    let mut events = subscribe(
        &app,
        StreamStatusEventsRequest {
            ids: vec![8005],
            ..Default::default()
        },
    )
    .await;
    let cut = Instant::now();
    let status = app.messaging().send_sms(sms(8005, "x")).await.unwrap_err();
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN", "{status:?}");

    let event = next(&mut events).await;
    assert!(cut.elapsed() >= window, "resolved only after the window");
    assert_eq!(event.id, 8005);
    assert_eq!(event.raw_status, "DELIVERED");
    assert_eq!(event.source, EventSource::Poll as i32);
    assert_eq!(event.msg_id, "500000001");

    // The claim is settled: a late retry is a plain replay, nothing more goes out.
    let before = app.gateway.requests().len();
    let retry = app.messaging().send_sms(sms(8005, "x")).await.unwrap();
    assert!(replayed(&retry));
    assert_eq!(
        retry.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000001"
    );
    assert_eq!(app.gateway.requests().len(), before);
    assert_eq!(gateway.sends_of(8005), 1);
}

#[tokio::test]
async fn a_status_refused_for_another_reason_than_not_found_never_leads_to_a_send() {
    // No settle window: "not found" is trusted at once, and only "not found".
    let (app, gateway) = app(Duration::from_secs(5), Duration::ZERO).await;
    gateway.set(Mode::Reset);
    let status = app.messaging().send_sms(sms(8011, "x")).await.unwrap_err();
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN", "{status:?}");

    gateway.set(Mode::Normal);
    *gateway.unknown_says.lock().unwrap() = "Service temporarily unavailable";
    let status = app.messaging().send_sms(sms(8011, "x")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN", "{status:?}");
    assert_eq!(
        gateway.sends_of(8011),
        0,
        "an outage is no proof of 'never sent'"
    );

    *gateway.unknown_says.lock().unwrap() = "Message not found";
    let (ok, _) = retry_until_ok(app.messaging(), 8011, Duration::from_secs(5)).await;
    assert!(
        !replayed(&ok),
        "'not found' after the window, once the backoff of the refused lookup is over: the first real send"
    );
    assert_eq!(gateway.sends_of(8011), 1);
}

/// A call may wait for a gateway request long after its id was claimed (a slow gateway,
/// a long queue). Its claim must not look abandoned meanwhile: a retry that arrives
/// then must not take the id over and send it beside the original. Both callers get the
/// one send's msg_id.
#[tokio::test]
async fn a_call_queued_past_the_life_of_a_claim_is_still_sent_once() {
    let app = spawn(Options {
        upstream_timeout: Duration::from_secs(1),
        limits: msgw::core::dispatch::Limits {
            rate: None,
            burst: None,
            bulk_share: 0.1,
            connections: 2,
            batch_max: 1,
            queue_max: 1000,
        },
        ..Options::default()
    })
    .await;
    let gateway = Remembering::install(&app.gateway);
    *gateway.slow.lock().unwrap() = Duration::from_millis(400);
    gateway.set(Mode::SlowSends);
    let ids: Vec<u64> = (9100..9140).collect();
    let send = |id: u64| {
        let mut client = app.messaging();
        tokio::spawn(async move {
            client
                .send_sms(with_deadline(id, Duration::from_secs(30)))
                .await
                .map(|r| r.into_inner().receipt.unwrap().msg_id)
        })
    };
    // The two connections take turns half a send apart: the first id goes alone. (The
    // shape of the load, not a wait for anything.)
    let mut first = vec![send(ids[0])];
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.extend(ids[1..].iter().map(|&id| send(id)));
    // Two sends every 0.4 s: after 6.5 s (past the upstream timeout plus the 5 s margin
    // after which a claim with no outcome counts as abandoned) the last ids still wait;
    // a retry of the last one queues right behind it and runs beside it. This wait
    // stays: the guarantee is about a call older than a claim's life, which only time
    // makes.
    tokio::time::sleep(Duration::from_millis(6300)).await;
    let again: Vec<_> = ids[39..].iter().map(|&id| send(id)).collect();
    let mut first_ids = Vec::new();
    for call in first {
        first_ids.push(call.await.unwrap().expect("the first call is answered OK"));
    }
    for (i, call) in again.into_iter().enumerate() {
        let msg_id = call.await.unwrap().expect("the retry is answered OK");
        assert_eq!(msg_id, first_ids[39 + i], "the retry answers the one send");
    }
    for id in ids {
        assert_eq!(gateway.sends_of(id), 1, "id {id} reached the gateway once");
    }
}

/// A retry that must first ask `status` spends part of its claim's life on that
/// request. If `status` then says the gateway never got the earlier request, the send
/// may not leave late with that claim: another retry could take the claim over once it
/// looks abandoned and send the id beside it. Past the claim's time, the claim goes back
/// and the call claims anew; every caller gets the one send's msg_id.
#[tokio::test]
async fn a_send_decided_by_a_slow_status_query_is_still_sent_once() {
    let (app, gateway) = app(Duration::from_secs(7), Duration::from_millis(200)).await;
    let id = 9300;
    let send = |timeout: Duration| {
        let mut client = app.messaging();
        tokio::spawn(async move {
            client
                .send_sms(with_deadline(id, timeout))
                .await
                .map(|r| r.into_inner().receipt.unwrap().msg_id)
        })
    };
    // The first send's outcome is unknown (502 after it may have arrived).
    gateway.set(Mode::Down);
    assert!(send(Duration::from_secs(5)).await.unwrap().is_err());
    // Status and sends slow: the retry asks status for 6.5 s, learns the gateway never
    // got the id, and would then send for another 6.5 s.
    *gateway.slow.lock().unwrap() = Duration::from_millis(6500);
    *gateway.slow_status.lock().unwrap() = Duration::from_millis(6500);
    gateway.set(Mode::SlowSends);
    // Past the settle window (200 ms), so that the retry asks `status` instead of being
    // refused: the window's real length, which msgw must wait out before it decides.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slow_retry = send(Duration::from_secs(40));
    // Past the retry's claim (7 s + 5 s) and the settle window, with status fast again,
    // another retry would find the claim abandoned and the id unknown to the gateway.
    // This wait stays: only a claim's real life makes it look abandoned.
    tokio::time::sleep(Duration::from_millis(12_500)).await;
    *gateway.slow_status.lock().unwrap() = Duration::ZERO;
    let late_retry = send(Duration::from_secs(30)).await.unwrap();
    let slow_retry = slow_retry.await.unwrap();
    let last = send(Duration::from_secs(30)).await.unwrap();
    assert_eq!(gateway.sends_of(id), 1, "one send reached the gateway");
    let msg_id = last.expect("a retry after all is answered");
    for m in [late_retry, slow_retry].into_iter().flatten() {
        assert_eq!(m, msg_id, "every OK names the one send");
    }
}

#[tokio::test]
async fn a_send_whose_outcome_cannot_be_recorded_is_not_answered_ok_and_its_retry_sends_nothing() {
    let (app, gateway) = app(Duration::from_secs(2), Duration::from_secs(60)).await;
    gateway.set(Mode::SlowSends);
    *gateway.slow.lock().unwrap() = Duration::from_secs(1);
    let mut client = app.messaging();
    let send = tokio::spawn(async move {
        client
            .send_sms(with_deadline(8101, Duration::from_secs(30)))
            .await
    });
    // Once the claim is stored (before the request leaves), another writer takes the
    // database file and keeps it past every attempt to record the outcome.
    let file = app.store.path().join("msgw.db");
    let lock = rusqlite::Connection::open(&file).unwrap();
    lock.busy_timeout(Duration::from_secs(5)).unwrap();
    let claimed = Instant::now() + Duration::from_secs(5);
    while lock
        .query_row(
            "SELECT COUNT(*) FROM claims WHERE client_id = 8101",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
        == 0
    {
        assert!(Instant::now() < claimed, "the claim is stored");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let status = send
        .await
        .unwrap()
        .expect_err("no OK without a recorded outcome");
    lock.execute_batch("COMMIT").unwrap();
    drop(lock);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");
    assert_eq!(gateway.sends_of(8101), 1, "the gateway carried it out");

    // The retry finds the claim without an outcome; once it may take it over it asks
    // `status`, which knows the message: answered from there, never sent again.
    let retry = app
        .messaging()
        .send_sms(with_deadline(8101, Duration::from_secs(30)))
        .await
        .expect("the retry is answered from the gateway's status");
    assert!(replayed(&retry));
    assert_eq!(
        retry.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000001"
    );
    assert_eq!(gateway.sends_of(8101), 1);
}
