//! Scheduled sends end to end: kept and answered at once, sent once at their time
//! (across a restart, after an upgrade from the form an earlier version kept, and by
//! one of two PostgreSQL replicas), cancelled before they
//! leave, replayed on retry, refused as they leave with an event saying why.

use std::time::Duration;

use msgw::transport::proto::*;
use prost::Message;
use serde_json::{Value, json};
use tokio::time::Instant;
use tonic::Code;

use crate::builders::sms;
use crate::events::{next, subscribe};
use crate::helpers::{
    FakeGateway, Options, Reply, TestApp, default_reply, error_info, spawn, spawn_app, violations,
};
use crate::postgres::TestSchema;
use crate::replicas::Replica;
use crate::wait;

/// The time `after` from now, as a proto timestamp.
fn in_(after: Duration) -> prost_types::Timestamp {
    let t = chrono::Utc::now() + chrono::TimeDelta::from_std(after).unwrap();
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    }
}

/// `by` after `t`.
fn later(t: prost_types::Timestamp, by: Duration) -> prost_types::Timestamp {
    let nanos = i64::from(t.nanos) + i64::try_from(by.as_nanos()).unwrap();
    prost_types::Timestamp {
        seconds: t.seconds + nanos / 1_000_000_000,
        nanos: (nanos % 1_000_000_000) as i32,
    }
}

fn at(send_at: prost_types::Timestamp, request: SendSmsRequest) -> SendSmsRequest {
    SendSmsRequest {
        send_at: Some(send_at),
        ..request
    }
}

/// Send items of `id` the gateway received.
fn sends_of(gateway: &FakeGateway, id: u64) -> usize {
    gateway
        .requests()
        .iter()
        .flat_map(|r| r.body["data"].as_array().cloned().unwrap_or_default())
        .filter(|item| {
            item["type"] == "sms"
                && (item["id"] == json!(id) || item["id"] == json!(id.to_string()))
        })
        .count()
}

/// Waits until the gateway has received a send of `id`, at most `within`.
async fn sent_within(gateway: &FakeGateway, id: u64, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if sends_of(gateway, id) > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// How long after a message that must not leave (or not leave again) a sentinel is
/// due. The loop wakes at the store's next due time and takes what is due in order of
/// time, so once the sentinel reached the gateway every pass that could have sent the
/// other message has run, and that send had this long a head start on the sentinel's.
const SENTINEL_AFTER: Duration = Duration::from_millis(500);

/// Schedules the sentinel `id` for `send_at` (see [`SENTINEL_AFTER`]).
async fn schedule_sentinel(app: &TestApp, id: u64, send_at: prost_types::Timestamp) {
    app.messaging()
        .send_sms(at(send_at, sms(id)))
        .await
        .expect("the sentinel is scheduled");
}

/// Waits until the sentinel `id` reached the gateway.
async fn sentinel_left(gateway: &FakeGateway, id: u64) {
    assert!(
        sent_within(gateway, id, Duration::from_secs(10)).await,
        "the sentinel {id} never left"
    );
}

async fn status_of(app: &TestApp, id: u64) -> MessageStatus {
    app.messaging()
        .get_message_status(GetMessageStatusRequest {
            id,
            ..Default::default()
        })
        .await
        .expect("status answers")
        .into_inner()
        .status()
}

#[tokio::test]
async fn a_scheduled_sms_is_scheduled_then_reaches_the_gateway_once_at_its_time() {
    let app = spawn_app().await;
    let started = Instant::now();
    let answer = app
        .messaging()
        .send_sms(at(in_(Duration::from_secs(3)), sms(301)))
        .await
        .expect("scheduled");
    let receipt = answer.into_inner().receipt.expect("receipt");
    assert!(receipt.scheduled_for.is_some(), "{receipt:?}");
    assert!(receipt.msg_id.is_empty());
    // Once a message due at 1 s left, the loop has looked past then and kept 301.
    schedule_sentinel(&app, 391, in_(Duration::from_secs(1))).await;
    sentinel_left(&app.gateway, 391).await;
    assert_eq!(status_of(&app, 301).await, MessageStatus::Scheduled);
    assert_eq!(sends_of(&app.gateway, 301), 0, "sent before its time");
    assert!(sent_within(&app.gateway, 301, Duration::from_secs(6)).await);
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(2900),
        "sent after {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(5), "sent after {elapsed:?}");
    schedule_sentinel(&app, 392, in_(SENTINEL_AFTER)).await;
    sentinel_left(&app.gateway, 392).await;
    assert_eq!(sends_of(&app.gateway, 301), 1, "sent more than once");
    assert!(app.metric_sum("msgw_scheduled_total", &["left"]).await >= 1.0);
}

#[tokio::test]
async fn a_scheduled_sms_survives_a_restart() {
    let app = spawn_app().await;
    app.messaging()
        .send_sms(at(in_(Duration::from_secs(3)), sms(302)))
        .await
        .expect("scheduled");
    // Kept across the restart like 302, and due after it.
    schedule_sentinel(&app, 392, in_(Duration::from_secs(3) + SENTINEL_AFTER)).await;
    let app = app.restart(Options::default()).await;
    assert_eq!(status_of(&app, 302).await, MessageStatus::Scheduled);
    assert!(sent_within(&app.gateway, 302, Duration::from_secs(8)).await);
    sentinel_left(&app.gateway, 392).await;
    assert_eq!(sends_of(&app.gateway, 302), 1);
}

#[tokio::test]
async fn a_message_an_earlier_version_kept_still_leaves_once() {
    let app = spawn_app().await;
    let request = sms(390);
    app.messaging()
        .send_sms(at(in_(Duration::from_secs(4)), request.clone()))
        .await
        .expect("scheduled");
    let store = app.store.clone();
    app.stop().await.expect("msgw stops cleanly");
    // As an earlier version kept it: in `scheduled`, the request as a Batch item without
    // its send_at (prost bytes); its claim as this version made it.
    let earlier = BatchItem {
        operation: Some(batch_item::Operation::SendSms(request)),
    }
    .encode_to_vec();
    let db = rusqlite::Connection::open(store.path().join("msgw.db")).unwrap();
    let rewritten = db
        .execute(
            "INSERT INTO scheduled SELECT client_id, send_at_ms, due_ms, ?1, caller, tries,
                                          created_at_ms
               FROM scheduled_ops WHERE client_id = 390",
            [earlier],
        )
        .unwrap();
    assert_eq!(rewritten, 1);
    db.execute("DELETE FROM scheduled_ops WHERE client_id = 390", [])
        .unwrap();
    drop(db);

    let app = spawn(Options {
        store: Some(store.clone()),
        ..Options::default()
    })
    .await;
    assert_eq!(status_of(&app, 390).await, MessageStatus::Scheduled);
    assert!(sent_within(&app.gateway, 390, Duration::from_secs(8)).await);
    // Once its request is dropped from both tables, nothing is left to send again.
    let db = rusqlite::Connection::open(store.path().join("msgw.db")).unwrap();
    let kept = || -> i64 {
        db.query_row(
            "SELECT (SELECT COUNT(*) FROM scheduled) + (SELECT COUNT(*) FROM scheduled_ops)",
            [],
            |row| row.get(0),
        )
        .unwrap()
    };
    let until = Instant::now() + Duration::from_secs(5);
    while kept() > 0 {
        assert!(Instant::now() < until, "its request is still kept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sends_of(&app.gateway, 390), 1);
}

#[tokio::test]
async fn a_cancelled_message_never_reaches_the_gateway_and_its_id_is_spent() {
    let app = spawn_app().await;
    let request = at(in_(Duration::from_secs(2)), sms(303));
    app.messaging()
        .send_sms(request.clone())
        .await
        .expect("scheduled");
    let canceled = app
        .messaging()
        .cancel_message(CancelMessageRequest { id: 303 })
        .await
        .expect("cancelled")
        .into_inner();
    assert_eq!(canceled.id, 303);
    assert_eq!(
        canceled.send_at.map(|t| t.seconds),
        request.send_at.map(|t| t.seconds)
    );
    // Cancelling again answers it again.
    let again = app
        .messaging()
        .cancel_message(CancelMessageRequest { id: 303 })
        .await
        .expect("cancelled again")
        .into_inner();
    assert_eq!(again.cancel_time, canceled.cancel_time);
    assert_eq!(status_of(&app, 303).await, MessageStatus::Canceled);
    let retry = app.messaging().send_sms(request).await.expect_err("spent");
    assert_eq!(retry.code(), Code::FailedPrecondition);
    assert_eq!(error_info(&retry).0, "MESSAGE_CANCELED");
    let due = canceled.send_at.expect("its time");
    schedule_sentinel(&app, 393, later(due, SENTINEL_AFTER)).await;
    sentinel_left(&app.gateway, 393).await;
    assert_eq!(sends_of(&app.gateway, 303), 0, "a cancelled message left");
}

#[tokio::test]
async fn cancelling_a_message_that_left_or_that_msgw_does_not_hold_is_refused() {
    let app = spawn_app().await;
    app.messaging().send_sms(sms(304)).await.expect("sent now");
    let sent = app
        .messaging()
        .cancel_message(CancelMessageRequest { id: 304 })
        .await
        .expect_err("already sent");
    assert_eq!(sent.code(), Code::FailedPrecondition);
    assert_eq!(error_info(&sent).0, "ALREADY_SENT");
    let unknown = app
        .messaging()
        .cancel_message(CancelMessageRequest { id: 399 })
        .await
        .expect_err("unknown");
    assert_eq!(unknown.code(), Code::NotFound);
    assert_eq!(error_info(&unknown).0, "MESSAGE_NOT_FOUND");
    let zero = app
        .messaging()
        .cancel_message(CancelMessageRequest { id: 0 })
        .await
        .expect_err("id 0");
    assert_eq!(zero.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn a_retry_replays_the_scheduled_answer_then_the_gateways() {
    let app = spawn_app().await;
    let request = at(in_(Duration::from_secs(2)), sms(305));
    let first = app
        .messaging()
        .send_sms(request.clone())
        .await
        .expect("scheduled");
    let retry = app
        .messaging()
        .send_sms(request.clone())
        .await
        .expect("replayed");
    assert_eq!(
        retry
            .metadata()
            .get("msgw-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true")
    );
    assert_eq!(
        retry
            .into_inner()
            .receipt
            .unwrap()
            .scheduled_for
            .map(|t| t.seconds),
        first
            .into_inner()
            .receipt
            .unwrap()
            .scheduled_for
            .map(|t| t.seconds)
    );
    // The same id at another time, or now, is another request.
    let other_time = app
        .messaging()
        .send_sms(at(in_(Duration::from_secs(20)), sms(305)))
        .await
        .expect_err("conflict");
    assert_eq!(other_time.code(), Code::AlreadyExists);
    assert_eq!(error_info(&other_time).0, "ID_CONFLICT");
    let now = app
        .messaging()
        .send_sms(sms(305))
        .await
        .expect_err("conflict");
    assert_eq!(now.code(), Code::AlreadyExists);
    assert!(sent_within(&app.gateway, 305, Duration::from_secs(5)).await);
    wait::until_some(
        Duration::from_secs(5),
        "its send was never settled",
        || async { (app.metric_sum("msgw_scheduled_total", &["left"]).await >= 1.0).then_some(()) },
    )
    .await;
    // After it left (its time has passed): the gateway's answer, replayed.
    let after = app
        .messaging()
        .send_sms(request)
        .await
        .expect("replayed after it left");
    assert_eq!(
        after
            .metadata()
            .get("msgw-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true")
    );
    let receipt = after.into_inner().receipt.unwrap();
    assert!(!receipt.msg_id.is_empty(), "{receipt:?}");
    assert!(receipt.scheduled_for.is_none());
    assert_eq!(sends_of(&app.gateway, 305), 1);
}

#[tokio::test]
async fn a_batch_sends_its_immediate_item_now_and_keeps_the_scheduled_one() {
    let app = spawn_app().await;
    let items = vec![
        BatchItem {
            operation: Some(batch_item::Operation::SendSms(at(
                in_(Duration::from_secs(2)),
                sms(306),
            ))),
        },
        BatchItem {
            operation: Some(batch_item::Operation::SendSms(sms(307))),
        },
    ];
    let results = app
        .messaging()
        .batch(BatchRequest { items })
        .await
        .expect("batch")
        .into_inner()
        .results;
    let receipt = |i: usize| match &results[i].result {
        Some(batch_result::Result::SendSms(r)) => r.receipt.clone().unwrap(),
        other => panic!("item {i}: {other:?}"),
    };
    assert!(receipt(0).scheduled_for.is_some());
    assert!(receipt(1).scheduled_for.is_none());
    assert_eq!(sends_of(&app.gateway, 307), 1);
    assert_eq!(sends_of(&app.gateway, 306), 0);
    assert!(sent_within(&app.gateway, 306, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_scheduled_send_refused_as_it_leaves_gets_a_rejected_event_with_the_reason() {
    let app = spawn_app().await;
    app.gateway.respond_with(|body: &Value| {
        let items = body["data"].as_array().cloned().unwrap_or_default();
        if items.iter().any(|i| i["type"] == "sms") {
            let results: Vec<Value> = items
                .iter()
                .map(|item| json!({"success": false, "error": "Not enough money", "data": {"id": item["id"]}}))
                .collect();
            return Reply::Json(json!({"success": true, "data": results}));
        }
        default_reply(body)
    });
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            from_oldest: true,
            ..Default::default()
        },
    )
    .await;
    app.messaging()
        .send_sms(at(in_(Duration::from_secs(1)), sms(308)))
        .await
        .expect("scheduled: money is checked when it leaves");
    let scheduled = next(&mut stream).await;
    assert_eq!(scheduled.id, 308);
    assert_eq!(scheduled.status(), MessageStatus::Scheduled);
    assert_eq!(scheduled.source(), EventSource::Msgw);
    assert!(!scheduled.r#final);
    let rejected = next(&mut stream).await;
    assert_eq!(rejected.id, 308);
    assert_eq!(rejected.status(), MessageStatus::Rejected);
    assert_eq!(rejected.source(), EventSource::Msgw);
    assert!(rejected.r#final);
    assert!(
        rejected.error.contains("Not enough money"),
        "{}",
        rejected.error
    );
    // Its status says so too (the gateway never knew it), and it cannot be cancelled.
    let status = app
        .messaging()
        .get_message_status(GetMessageStatusRequest {
            id: 308,
            ..Default::default()
        })
        .await
        .expect("msgw answers the status of a message refused as it left")
        .into_inner();
    assert_eq!(status.status(), MessageStatus::Rejected);
    assert!(status.is_final);
    let cancel = app
        .messaging()
        .cancel_message(CancelMessageRequest { id: 308 })
        .await
        .expect_err("it left the schedule");
    assert_eq!(cancel.code(), Code::FailedPrecondition);
    assert!(
        cancel.message().contains("refused as it left"),
        "{cancel:?}"
    );
}

#[tokio::test]
async fn send_at_is_validated() {
    let app = spawn_app().await;
    let far = app
        .messaging()
        .send_sms(at(in_(Duration::from_secs(36 * 86_400)), sms(309)))
        .await
        .expect_err("too far");
    assert_eq!(far.code(), Code::InvalidArgument);
    assert!(
        violations(&far).iter().any(|v| v.starts_with("send_at")),
        "{:?}",
        violations(&far)
    );
    let nanos = app
        .messaging()
        .send_sms(at(
            prost_types::Timestamp {
                seconds: chrono::Utc::now().timestamp() + 10,
                nanos: -5,
            },
            sms(309),
        ))
        .await
        .expect_err("bad nanos");
    assert_eq!(nanos.code(), Code::InvalidArgument);
    let voice_otp = app
        .messaging()
        .send_voice_otp(SendVoiceOtpRequest {
            priority: 0,
            id: 310,
            phone: "380971234567".into(),
            send_at: Some(in_(Duration::from_secs(60))),
        })
        .await
        .expect_err("a voice OTP call cannot be scheduled");
    assert_eq!(voice_otp.code(), Code::InvalidArgument);
    assert!(
        violations(&voice_otp)
            .iter()
            .any(|v| v.starts_with("send_at"))
    );
    // In the past: sent now.
    app.messaging()
        .send_sms(at(
            prost_types::Timestamp {
                seconds: chrono::Utc::now().timestamp() - 60,
                nanos: 0,
            },
            sms(311),
        ))
        .await
        .expect("sent now");
    assert_eq!(sends_of(&app.gateway, 311), 1);
    assert!(
        app.gateway
            .requests()
            .iter()
            .all(|r| !r.body.to_string().contains("309"))
    );
}

#[tokio::test]
async fn cancel_and_leave_race_exactly_one_wins() {
    let app = spawn_app().await;
    let ids: Vec<u64> = (320..340).collect();
    let send_at = in_(Duration::from_millis(1500));
    for &id in &ids {
        app.messaging()
            .send_sms(at(send_at, sms(id)))
            .await
            .expect("scheduled");
    }
    schedule_sentinel(&app, 390, later(send_at, SENTINEL_AFTER)).await;
    let until = Instant::now() + Duration::from_millis(1480);
    tokio::time::sleep_until(until).await;
    let mut canceled = Vec::new();
    let cancels = ids.iter().map(|&id| {
        let mut client = app.messaging();
        async move { (id, client.cancel_message(CancelMessageRequest { id }).await) }
    });
    for (id, result) in futures_util::future::join_all(cancels).await {
        match result {
            Ok(_) => canceled.push(id),
            Err(e) => {
                assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
                assert_eq!(error_info(&e).0, "ALREADY_SENT");
            }
        }
    }
    for id in ids.iter().filter(|id| !canceled.contains(id)) {
        assert!(
            sent_within(&app.gateway, *id, Duration::from_secs(5)).await,
            "id {id}"
        );
    }
    sentinel_left(&app.gateway, 390).await;
    for id in ids {
        let expected = usize::from(!canceled.contains(&id));
        assert_eq!(sends_of(&app.gateway, id), expected, "id {id}");
    }
}

#[tokio::test]
async fn two_postgresql_replicas_send_a_scheduled_message_once() {
    let schema = TestSchema::create().await;
    let gateway = FakeGateway::start().await;
    let replicas = Replica::start_all(2, &schema, &gateway).await;
    scheduled_once_on(&replicas, &gateway).await;
}

/// Ten messages scheduled half on each of two `replicas` are sent once each, on time.
pub async fn scheduled_once_on(replicas: &[Replica], gateway: &FakeGateway) {
    let send_at = in_(Duration::from_secs(3));
    for id in 350..360 {
        // Each replica schedules half; both look for due messages.
        replicas[(id % 2) as usize]
            .messaging()
            .send_sms(at(send_at, sms(id)))
            .await
            .expect("scheduled");
    }
    // One sentinel scheduled by each replica; both wake for the store's next due time.
    for (replica, id) in replicas.iter().zip([360, 361]) {
        replica
            .messaging()
            .send_sms(at(later(send_at, SENTINEL_AFTER), sms(id)))
            .await
            .expect("the sentinel is scheduled");
    }
    for id in 350..360 {
        assert!(
            sent_within(gateway, id, Duration::from_secs(8)).await,
            "id {id}"
        );
    }
    for id in [360, 361] {
        sentinel_left(gateway, id).await;
    }
    for id in 350..360 {
        assert_eq!(sends_of(gateway, id), 1, "id {id}");
    }
}
