//! Exactly-once sends: the client `id` is the idempotency key, across retries,
//! concurrent calls, lost answers and restarts. The fake gateway here keeps the
//! messages it accepted, so its `status` knows them, like the real one
//! (`remembering`); `settling` covers slow and cut requests.

use std::time::Duration;

use msgw::transport::proto::{
    BatchItem, BatchRequest, GetBalanceRequest, SendVoiceOtpRequest, batch_item::Operation as Item,
    batch_result::Result as Res,
};
use serde_json::json;
use tonic::{Code, Request};

use super::builders::sms_saying;
use super::helpers::{
    Options, Reply, TestApp, default_reply, error_info, spawn, spawn_app, violations,
};
use super::remembering::{Mode, Remembering};

/// The `type` of every operation the gateway received, request by request.
pub fn upstream_types(app: &TestApp) -> Vec<Vec<String>> {
    app.gateway
        .requests()
        .iter()
        .map(|r| {
            r.body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["type"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect()
}

pub fn replayed<T>(response: &tonic::Response<T>) -> bool {
    response
        .metadata()
        .get("msgw-replayed")
        .is_some_and(|v| v == "true")
}

#[tokio::test]
async fn sequential_retry_is_replayed_without_a_second_send() {
    let app = spawn_app().await;
    Remembering::install(&app.gateway);
    let first = app
        .messaging()
        .send_sms(sms_saying(42, "hello"))
        .await
        .unwrap();
    let again = app
        .messaging()
        .send_sms(sms_saying(42, "hello"))
        .await
        .unwrap();
    assert!(!replayed(&first), "the first call is not a replay");
    assert!(replayed(&again), "the retry says it is a replay");
    assert_eq!(first.get_ref(), again.get_ref(), "identical response");
    assert_eq!(
        first.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000001"
    );
    assert_eq!(first.get_ref().receipt.as_ref().unwrap().parts, 2);
    assert_eq!(upstream_types(&app), [["sms"]], "one gateway send");
}

#[tokio::test]
async fn same_number_with_or_without_plus_is_the_same_request() {
    let app = spawn_app().await;
    Remembering::install(&app.gateway);
    app.messaging().send_sms(sms_saying(7, "hi")).await.unwrap();
    let mut plain = sms_saying(7, "hi");
    plain.phone = "380971234567".into();
    let again = app.messaging().send_sms(plain).await.unwrap();
    assert!(replayed(&again));
    assert_eq!(app.gateway.requests().len(), 1);
}

#[tokio::test]
async fn voice_otp_retry_returns_the_same_code() {
    let app = spawn_app().await;
    Remembering::install(&app.gateway);
    let request = || SendVoiceOtpRequest {
        priority: 0,
        send_at: None,
        id: 77,
        phone: "380970000438".into(),
    };
    let first = app.messaging().send_voice_otp(request()).await.unwrap();
    let again = app.messaging().send_voice_otp(request()).await.unwrap();
    assert!(replayed(&again));
    assert_eq!(first.get_ref(), again.get_ref());
    assert_eq!(again.get_ref().code, "0471");
    assert_eq!(upstream_types(&app), [["call/otp"]]);
}

#[tokio::test]
async fn fifty_concurrent_identical_sends_reach_the_gateway_once() {
    let app = spawn_app().await;
    let recording = Remembering::install(&app.gateway);
    // A slow gateway, so the calls overlap the first one's request.
    app.gateway.respond_with({
        let r = recording.clone();
        move |body| {
            let id = body["data"][0]["id"].as_u64().unwrap_or_default();
            r.accepted.lock().unwrap().insert(id, 500_000_001);
            Reply::After(
                Duration::from_millis(300),
                Box::new(Reply::Json(json!({"success": true, "data": [
                    {"success": true, "data": {"id": id, "msg_id": 500_000_001u64, "data": 1, "parts": 1}}
                ]}))),
            )
        }
    });
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let mut client = app.messaging();
        calls.spawn(async move { client.send_sms(sms_saying(9, "once")).await });
    }
    let (mut ok, mut replays) = (0, 0);
    while let Some(result) = calls.join_next().await {
        let response = result.unwrap().expect("every call answers OK");
        assert_eq!(
            response.get_ref().receipt.as_ref().unwrap().msg_id,
            "500000001"
        );
        ok += 1;
        replays += usize::from(replayed(&response));
    }
    assert_eq!(ok, 50);
    assert_eq!(replays, 49, "all but the first are replays");
    assert_eq!(upstream_types(&app), [["sms"]], "exactly one gateway send");
}

#[tokio::test]
async fn a_call_whose_deadline_passes_while_another_sends_is_aborted() {
    let app = spawn_app().await;
    app.gateway.respond_with(|body| {
        Reply::After(Duration::from_millis(800), Box::new(default_reply(body)))
    });
    let mut first = app.messaging();
    let sending = tokio::spawn(async move { first.send_sms(sms_saying(11, "slow")).await });
    app.gateway.first_request().await;
    let mut request = Request::new(sms_saying(11, "slow"));
    request.set_timeout(Duration::from_millis(200));
    let status = app.messaging().send_sms(request).await.unwrap_err();
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    let (reason, _) = error_info(&status);
    assert_eq!(reason, "SEND_IN_PROGRESS");
    use tonic_types::StatusExt;
    assert!(status.get_details_retry_info().is_some(), "RetryInfo");
    assert!(sending.await.unwrap().is_ok());
    assert_eq!(app.gateway.requests().len(), 1);
}

#[tokio::test]
async fn same_id_with_other_content_is_already_exists() {
    let app = spawn_app().await;
    Remembering::install(&app.gateway);
    app.messaging()
        .send_sms(sms_saying(5, "first"))
        .await
        .unwrap();
    let status = app
        .messaging()
        .send_sms(sms_saying(5, "second"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    let (reason, metadata) = error_info(&status);
    assert_eq!(reason, "ID_CONFLICT");
    assert_eq!(
        metadata.get("msg_id").map(String::as_str),
        Some("500000001")
    );
    assert_eq!(
        app.gateway.requests().len(),
        1,
        "the conflict is never sent"
    );
}

#[tokio::test]
async fn lost_answer_is_resolved_by_status_without_a_second_send() {
    let app = spawn_app().await;
    let gateway = Remembering::install(&app.gateway);
    gateway.set(Mode::LoseAnswers);
    let status = app
        .messaging()
        .send_sms(sms_saying(21, "x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");

    gateway.set(Mode::Normal);
    let retry = app.messaging().send_sms(sms_saying(21, "x")).await.unwrap();
    assert!(replayed(&retry));
    assert_eq!(
        retry.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000001",
        "the original message"
    );
    assert_eq!(upstream_types(&app), [["sms"], ["status"]]);
    // Resolved for good: a third call is a plain replay, not another status query.
    let third = app.messaging().send_sms(sms_saying(21, "x")).await.unwrap();
    assert_eq!(
        third.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000001"
    );
    assert_eq!(app.gateway.requests().len(), 2);
}

#[tokio::test]
async fn unknown_outcome_the_gateway_never_saw_is_sent_once() {
    let app = spawn_app().await;
    let gateway = Remembering::install(&app.gateway);
    gateway.set(Mode::Down);
    let status = app
        .messaging()
        .send_sms(sms_saying(22, "x"))
        .await
        .unwrap_err();
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");

    gateway.set(Mode::Normal);
    let retry = app.messaging().send_sms(sms_saying(22, "x")).await.unwrap();
    assert!(!replayed(&retry), "really sent now");
    assert_eq!(upstream_types(&app), [["sms"], ["status"], ["sms"]]);
}

#[tokio::test]
async fn failed_status_query_keeps_the_outcome_unknown_and_sends_nothing() {
    let app = spawn_app().await;
    let gateway = Remembering::install(&app.gateway);
    gateway.set(Mode::LoseAnswers);
    app.messaging()
        .send_sms(sms_saying(23, "x"))
        .await
        .unwrap_err();
    gateway.set(Mode::Down);
    let status = app
        .messaging()
        .send_sms(sms_saying(23, "x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");
    assert_eq!(upstream_types(&app), [["sms"], ["status"]], "no resend");

    gateway.set(Mode::Normal);
    // The next lookup waits for the backoff; retries meanwhile ask nothing.
    let (retry, _) =
        crate::settling::retry_until_ok(app.messaging(), 23, Duration::from_secs(5)).await;
    assert_eq!(
        retry.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000001"
    );
    assert_eq!(upstream_types(&app), [["sms"], ["status"], ["status"]]);
}

#[tokio::test]
async fn rejected_send_retried_with_a_corrected_signature_is_sent() {
    let app = spawn_app().await;
    let gateway = Remembering::install(&app.gateway);
    gateway.set(Mode::StrictSender);
    let mut wrong = sms_saying(31, "x");
    wrong.signature = "Unregistered".into();
    let status = app.messaging().send_sms(wrong).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);

    let fixed = app.messaging().send_sms(sms_saying(31, "x")).await.unwrap();
    assert!(!replayed(&fixed));
    assert_eq!(upstream_types(&app), [["sms"], ["sms"]]);
    assert_eq!(
        app.gateway.requests()[1].body["data"][0]["sms_signature"],
        "msgw"
    );
}

#[tokio::test]
async fn unreachable_gateway_releases_the_id_and_a_restart_on_the_same_store_sends_once() {
    let (closed, _held) = crate::helpers::refusing_addr();
    let app = spawn(Options {
        upstream_url: Some(format!("http://{closed}")),
        ..Options::default()
    })
    .await;
    let status = app
        .messaging()
        .send_sms(sms_saying(41, "x"))
        .await
        .unwrap_err();
    assert_eq!(error_info(&status).0, "UPSTREAM_UNAVAILABLE");
    let app = app.restart(Options::default()).await;
    Remembering::install(&app.gateway);
    let sent = app.messaging().send_sms(sms_saying(41, "x")).await.unwrap();
    assert!(!replayed(&sent));
    assert_eq!(
        upstream_types(&app),
        [["sms"]],
        "sent once, no status query needed"
    );
}

#[tokio::test]
async fn retry_after_a_restart_on_the_same_store_is_replayed() {
    let app = spawn_app().await;
    Remembering::install(&app.gateway);
    let first = app.messaging().send_sms(sms_saying(51, "x")).await.unwrap();
    let app = app.restart(Options::default()).await;
    let again = app.messaging().send_sms(sms_saying(51, "x")).await.unwrap();
    assert!(replayed(&again));
    assert_eq!(first.get_ref(), again.get_ref());
    assert!(
        app.gateway.requests().is_empty(),
        "nothing sent after the restart"
    );
}

#[tokio::test]
async fn claim_left_in_flight_by_a_crash_is_resolved_once_it_is_stale() {
    let options = || Options {
        upstream_timeout: Duration::from_secs(1),
        ..Options::default()
    };
    let app = spawn(options()).await;
    Remembering::install(&app.gateway);
    app.gateway
        .respond_with(|body| Reply::After(Duration::from_secs(5), Box::new(default_reply(body))));
    app.messaging()
        .send_sms(sms_saying(61, "x"))
        .await
        .unwrap_err();
    let store = app.store.clone();
    let store_url = app.store_url();
    app.stop().await.unwrap();
    // What msgw leaves behind when it dies between the claim and the gateway's answer.
    let pool = sqlx::SqlitePool::connect(&store_url).await.unwrap();
    let now_ms = chrono::Utc::now().timestamp_millis();
    sqlx::query("UPDATE claims SET state = 'in_flight', claimed_at_ms = ? WHERE client_id = 61")
        .bind(now_ms)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let app = spawn(Options {
        store: Some(store),
        ..options()
    })
    .await;
    let gateway = Remembering::install(&app.gateway);
    gateway.accepted.lock().unwrap().insert(61, 500_000_777);
    let started = std::time::Instant::now();
    let retry = app.messaging().send_sms(sms_saying(61, "x")).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "waited until the claim was stale (upstream timeout + margin)"
    );
    assert!(replayed(&retry));
    assert_eq!(
        retry.get_ref().receipt.as_ref().unwrap().msg_id,
        "500000777"
    );
    assert_eq!(
        upstream_types(&app),
        [["status"]],
        "resolved by status, not resent"
    );
}

fn batch_sms(id: u64) -> BatchItem {
    BatchItem {
        operation: Some(Item::SendSms(sms_saying(id, "batch"))),
    }
}

#[tokio::test]
async fn batch_with_two_sends_of_one_id_is_invalid() {
    let app = spawn_app().await;
    let status = app
        .messaging()
        .batch(BatchRequest {
            items: vec![batch_sms(1), batch_sms(2), batch_sms(1)],
        })
        .await
        .unwrap_err();
    assert_eq!(violations(&status), ["items[2].send_sms.id"]);
    assert!(app.gateway.requests().is_empty());
}

#[tokio::test]
async fn retried_batch_replays_each_accepted_item() {
    let app = spawn_app().await;
    Remembering::install(&app.gateway);
    let request = || BatchRequest {
        items: vec![
            batch_sms(71),
            BatchItem {
                operation: Some(Item::GetBalance(GetBalanceRequest {})),
            },
            batch_sms(72),
        ],
    };
    let first = app.messaging().batch(request()).await.unwrap().into_inner();
    let again = app.messaging().batch(request()).await.unwrap().into_inner();
    let msg_id = |r: &msgw::transport::proto::BatchResult| match &r.result {
        Some(Res::SendSms(s)) => s.receipt.as_ref().unwrap().msg_id.clone(),
        other => panic!("{other:?}"),
    };
    for i in [0, 2] {
        assert!(!first.results[i].replayed);
        assert!(again.results[i].replayed, "item {i} replayed");
        assert_eq!(msg_id(&first.results[i]), msg_id(&again.results[i]));
    }
    assert!(!again.results[1].replayed, "a balance query is not keyed");
    assert_eq!(
        upstream_types(&app),
        [vec!["sms", "balance", "sms"], vec!["balance"]],
        "the retry sends only the unkeyed item"
    );
}
