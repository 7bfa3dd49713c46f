//! Traffic shaping end to end (docs/shaping.md): the contracted rate toward the
//! gateway (`MSGW_UPSTREAM_RATE`) on SQLite, on PostgreSQL and shared by two replicas;
//! a one-time code overtaking a flood of bulk sends; callers' highest priority; a call
//! whose deadline comes before its turn leaves nothing behind.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::{StreamExt as _, stream};
use msgw::core::dispatch::Limits;
use msgw::transport::proto::{
    BatchItem, BatchRequest, Priority, SendSmsRequest, SendTelegramOtpRequest,
    StartVerificationRequest, batch_item, messaging_service_client::MessagingServiceClient,
    verification_service_client::VerificationServiceClient,
};
use tokio::time::Instant;
use tonic::{Code, transport::Channel};

use crate::builders::sms;
use crate::helpers::{
    Callers, Entry, FakeGateway, Options, TestApp, as_caller, error_info, spawn, violations,
};
use crate::postgres::TestSchema;
use crate::replicas::Replica;

/// The contracted rate of these tests, and what the gateway may see in any one second
/// (the bound: the rate and a tenth for clocks and slots).
const RATE: u32 = 50;
const MOST_IN_A_SECOND: usize = 55;

/// Bulk sends fired at once.
const FLOOD: u64 = 400;

/// Where the one-time code goes: no bulk send does.
const CODE_PHONE: &str = "+380671234567";

fn shaped(rate: u32) -> Options {
    Options {
        limits: Limits {
            rate: Some(rate),
            ..Limits::default()
        },
        ..Options::default()
    }
}

fn bulk(id: u64) -> SendSmsRequest {
    SendSmsRequest {
        priority: Priority::Bulk as i32,
        ..sms(id)
    }
}

/// One flood at a time in this test process: each is three msgw-sized loads on two
/// cores, and the rate's guard covers the time from a grant to the gateway of a busy
/// msgw, not of one starved by two other floods beside it.
static FLOODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Fires `FLOOD` bulk sends at once, spread over `clients`, and a StartVerification one
/// second into the flood through `codes`: every send succeeds and reaches the gateway
/// once, no second at the gateway holds more than `MOST_IN_A_SECOND` operations, and
/// the code reaches the gateway within a second of its call.
async fn a_flood_leaves_at_the_rate_and_a_code_overtakes_it(
    clients: &[MessagingServiceClient<Channel>],
    mut codes: VerificationServiceClient<Channel>,
    gateway: &FakeGateway,
) {
    let _alone = FLOODS.lock().await;
    let started = Instant::now();
    let flood = stream::iter(1..=FLOOD)
        .map(|id| {
            let mut client = clients[id as usize % clients.len()].clone();
            async move { (id, client.send_sms(bulk(id)).await) }
        })
        .buffer_unordered(FLOOD as usize)
        .collect::<Vec<_>>();
    let code = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let called = std::time::Instant::now();
        codes
            .start_verification(StartVerificationRequest {
                id: 1_000_001,
                phone: CODE_PHONE.into(),
                signature: "msgw".into(),
                ..Default::default()
            })
            .await
            .expect("the verification starts");
        called
    };
    let (sent, called) = tokio::join!(flood, code);
    for (id, result) in &sent {
        assert!(result.is_ok(), "send {id}: {result:?}");
    }
    let took = started.elapsed();

    let arrivals = gateway.arrivals();
    let mut per_id: HashMap<u64, usize> = HashMap::new();
    let mut code_at = None;
    for (at, item) in &arrivals {
        if item["phone"].to_string().trim_matches('"') == CODE_PHONE.trim_start_matches('+') {
            code_at = Some(*at);
        } else if let Some(id) = item["id"].as_u64() {
            *per_id.entry(id).or_default() += 1;
        }
    }
    for id in 1..=FLOOD {
        assert_eq!(
            per_id.get(&id),
            Some(&1),
            "send {id} reached the gateway once"
        );
    }
    let most = gateway.most_in_one_second();
    assert!(
        most <= MOST_IN_A_SECOND,
        "{most} operations in one second at a rate of {RATE}: {:?}",
        gateway.busiest_second()
    );
    // 400 at 50 a second: about eight seconds, not much less (the rate held) and not
    // much more (the rate was used).
    assert!(
        took >= Duration::from_secs(7) && took < Duration::from_secs(12),
        "the flood took {took:?}"
    );
    let code_at = code_at.expect("the code reached the gateway");
    let waited = code_at.saturating_duration_since(called);
    eprintln!(
        "flood of {FLOOD} at {RATE}/s through {} replica(s): {took:?}, most in one second {most}, the code reached the gateway {waited:?} after its call",
        clients.len()
    );
    assert!(
        waited < Duration::from_secs(1),
        "the code reached the gateway {waited:?} after its call, behind {} bulk sends",
        FLOOD
    );
}

/// msgw with a rate of `RATE` on `store_url` (SQLite when `None`), in front of a
/// gateway of its own thread.
async fn shaped_app(store_url: Option<String>) -> (TestApp, FakeGateway) {
    let gateway = FakeGateway::start_apart();
    let app = spawn(Options {
        upstream_url: Some(gateway.url.clone()),
        store_url,
        ..shaped(RATE)
    })
    .await;
    (app, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_flood_of_bulk_sends_leaves_at_the_rate_and_a_code_overtakes_it() {
    let (app, gateway) = shaped_app(None).await;
    a_flood_leaves_at_the_rate_and_a_code_overtakes_it(
        &[app.messaging()],
        app.verification(),
        &gateway,
    )
    .await;
    assert_eq!(
        app.metric_sum("msgw_upstream_operations_sent_total", &["lane=\"bulk\""])
            .await,
        FLOOD as f64
    );
    assert_eq!(app.metric_sum("msgw_upstream_rate_limit", &[]).await, 50.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_flood_of_bulk_sends_leaves_at_the_rate_and_a_code_overtakes_it() {
    let schema = TestSchema::create().await;
    let (app, gateway) = shaped_app(Some(schema.url.clone())).await;
    a_flood_leaves_at_the_rate_and_a_code_overtakes_it(
        &[app.messaging()],
        app.verification(),
        &gateway,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_postgres_replicas_share_one_rate() {
    let schema = TestSchema::create().await;
    let gateway = FakeGateway::start_apart();
    let a = Replica::start_with(shaped(RATE), &schema, &gateway).await;
    let b = Replica::start_with(shaped(RATE), &schema, &gateway).await;
    // Half the flood through each replica: together they still hold the one rate.
    a_flood_leaves_at_the_rate_and_a_code_overtakes_it(
        &[a.messaging(), b.messaging()],
        VerificationServiceClient::new(b.channel()),
        &gateway,
    )
    .await;
}

#[tokio::test]
async fn a_call_whose_deadline_comes_before_its_turn_is_not_sent_and_its_retry_sends_once() {
    // At 5 a second, ten bulk sends ahead keep a bulk call waiting about two seconds.
    let app = spawn(shaped(5)).await;
    let ahead = stream::iter(1..=10u64)
        .map(|id| {
            let mut client = app.messaging();
            async move { client.send_sms(bulk(id)).await }
        })
        .buffer_unordered(10)
        .collect::<Vec<_>>();
    let late = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut request = tonic::Request::new(bulk(99));
        request.set_timeout(Duration::from_millis(500));
        app.messaging().send_sms(request).await
    };
    let (ahead, late) = tokio::join!(ahead, late);
    assert!(ahead.iter().all(Result::is_ok), "{ahead:?}");
    let status = late.expect_err("its deadline came first");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_ne!(error_info(&status).0, "OUTCOME_UNKNOWN", "{status:?}");
    let sent_99 = |gateway: &FakeGateway| {
        gateway
            .arrivals()
            .iter()
            .filter(|(_, item)| item["id"].as_u64() == Some(99))
            .count()
    };
    assert_eq!(sent_99(&app.gateway), 0, "the gateway never saw it");
    assert_eq!(
        app.metric_sum(
            "msgw_upstream_refused_total",
            &["lane=\"bulk\"", "reason=\"deadline\""]
        )
        .await,
        1.0
    );

    let retried = app.messaging().send_sms(bulk(99)).await.expect("the retry");
    assert_eq!(
        retried.metadata().get("msgw-replayed"),
        None,
        "sent, not replayed"
    );
    let again = app.messaging().send_sms(bulk(99)).await.expect("a replay");
    assert_eq!(
        again
            .metadata()
            .get("msgw-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true")
    );
    assert_eq!(sent_99(&app.gateway), 1, "sent once");
}

#[tokio::test]
async fn a_caller_asks_at_most_its_highest_priority_and_codes_are_always_urgent() {
    const TOKEN: &str = "newsletter-token-7d1e";
    let app = spawn(Options {
        callers: Some(
            Callers::new().caller(Entry::token("newsletter", TOKEN).priorities("bulk", "normal")),
        ),
        ..Options::default()
    })
    .await;
    let asking = |id, priority: Priority| {
        as_caller(
            TOKEN,
            SendSmsRequest {
                priority: priority as i32,
                ..sms(id)
            },
        )
    };
    let refused = app
        .messaging()
        .send_sms(asking(1, Priority::Urgent))
        .await
        .expect_err("above its highest priority");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("urgent"), "{refused:?}");
    let batch = BatchRequest {
        items: vec![BatchItem {
            operation: Some(batch_item::Operation::SendSms(SendSmsRequest {
                priority: Priority::Urgent as i32,
                ..sms(2)
            })),
        }],
    };
    let refused = app
        .messaging()
        .batch(as_caller(TOKEN, batch))
        .await
        .expect_err("a batch item above its highest priority");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("items[0].send_sms.priority"),
        "{refused:?}"
    );
    assert!(
        app.gateway.arrivals().is_empty(),
        "nothing refused was sent"
    );
    assert_eq!(
        app.metric_sum("msgw_upstream_refused_total", &["reason=\"priority\""])
            .await,
        2.0
    );

    let unknown = app
        .messaging()
        .send_sms(as_caller(
            TOKEN,
            SendSmsRequest {
                priority: 9,
                ..sms(3)
            },
        ))
        .await
        .expect_err("no such priority");
    assert_eq!(unknown.code(), Code::InvalidArgument, "{unknown:?}");
    assert!(
        violations(&unknown).iter().any(|v| v.contains("priority")),
        "{unknown:?}"
    );

    // Its default lane, a lane it may ask, and a code whatever it asks.
    app.messaging()
        .send_sms(asking(4, Priority::Unspecified))
        .await
        .unwrap();
    app.messaging()
        .send_sms(asking(5, Priority::Normal))
        .await
        .unwrap();
    app.messaging()
        .send_telegram_otp(as_caller(
            TOKEN,
            SendTelegramOtpRequest {
                id: 6,
                phone: "380971234567".into(),
                code: "1234".into(),
                priority: Priority::Bulk as i32,
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    for (lane, sent) in [("bulk", 1.0), ("normal", 1.0), ("urgent", 1.0)] {
        assert_eq!(
            app.metric_sum(
                "msgw_upstream_operations_sent_total",
                &[&format!("lane=\"{lane}\"")]
            )
            .await,
            sent,
            "{lane}"
        );
    }
}

#[tokio::test]
async fn a_scheduled_send_leaves_in_the_lane_it_asked_for() {
    let app = spawn(Options::default()).await;
    let at = chrono::Utc::now() + chrono::TimeDelta::milliseconds(800);
    let send_at = prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: at.timestamp_subsec_nanos() as i32,
    };
    let scheduled = app
        .messaging()
        .send_sms(SendSmsRequest {
            send_at: Some(send_at),
            ..bulk(7)
        })
        .await
        .expect("kept")
        .into_inner();
    assert!(scheduled.receipt.unwrap().scheduled_for.is_some());
    crate::wait::until(Duration::from_secs(10), "the scheduled send left", || {
        !app.gateway.arrivals().is_empty()
    })
    .await;
    assert_eq!(
        app.metric_sum("msgw_upstream_operations_sent_total", &["lane=\"bulk\""])
            .await,
        1.0,
        "it left in the bulk lane"
    );
}

/// A `Batch` of `n` bulk SMS from id `first`.
fn bulk_batch(first: u64, n: u64) -> BatchRequest {
    BatchRequest {
        items: (first..first + n)
            .map(|id| BatchItem {
                operation: Some(batch_item::Operation::SendSms(bulk(id))),
            })
            .collect(),
    }
}

/// Urgent sends every half second for `seconds` from id `first`: the longest any took.
async fn urgent_every_half_second(
    mut client: MessagingServiceClient<Channel>,
    first: u64,
    seconds: u64,
) -> Duration {
    let mut longest = Duration::ZERO;
    for id in first..first + seconds * 2 {
        let started = Instant::now();
        client
            .send_sms(SendSmsRequest {
                priority: Priority::Urgent as i32,
                ..sms(id)
            })
            .await
            .expect("an urgent send");
        longest = longest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    longest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_bulk_batches_leave_in_parts_beside_urgent_sends_across_replicas() {
    let schema = TestSchema::create().await;
    let gateway = FakeGateway::start_apart();
    let a = Replica::start_with(shaped(RATE), &schema, &gateway).await;
    let b = Replica::start_with(shaped(RATE), &schema, &gateway).await;
    let started = Instant::now();
    let batches = stream::iter([1u64, 101])
        .map(|first| {
            let mut client = b.messaging();
            async move {
                let results = client
                    .batch(bulk_batch(first, 50))
                    .await
                    .expect("the batch")
                    .into_inner()
                    .results;
                let ok = results
                    .iter()
                    .filter(|r| r.status.as_ref().is_none_or(|s| s.code == 0))
                    .count();
                (ok, started.elapsed())
            }
        })
        .buffer_unordered(2)
        .collect::<Vec<_>>();
    let (batches, on_a, on_b) = tokio::join!(
        batches,
        urgent_every_half_second(a.messaging(), 10_001, 4),
        urgent_every_half_second(b.messaging(), 20_001, 4),
    );
    for (ok, took) in &batches {
        assert_eq!(*ok, 50, "every item of the batch was sent");
        // 100 bulk and 16 urgent operations at 50 a second: under three seconds of
        // the rate, and not held back for whole seconds of room.
        assert!(*took < Duration::from_secs(6), "a batch took {took:?}");
    }
    assert!(
        on_a < Duration::from_secs(1) && on_b < Duration::from_secs(1),
        "urgent sends took up to {on_a:?} on one replica, {on_b:?} on the other"
    );
    let most = gateway.most_in_one_second();
    assert!(most <= MOST_IN_A_SECOND, "{most} in one second");
}
