//! Error mapping (docs/api.md#errors): every gateway failure mode → its gRPC status.

use std::time::Duration;

use msgw::transport::proto::*;
use serde_json::json;
use tonic::Code;

use crate::builders::sms;
use crate::helpers::{API_KEY, Reply, TestApp, error_info, spawn_app, spawn_app_with};

async fn send(app: &TestApp) -> tonic::Status {
    app.messaging()
        .send_sms(sms(100500))
        .await
        .expect_err("must fail")
}

fn assert_no_key(status: &tonic::Status) {
    let text = format!("{status:?} {}", String::from_utf8_lossy(status.details()));
    assert!(!text.contains(API_KEY), "the API key leaked: {text}");
}

#[tokio::test]
async fn access_denied_is_unauthenticated() {
    let app = spawn_app().await;
    app.gateway
        .respond_json(json!({"success":false,"error":"Access denied"}));
    let status = send(&app).await;
    assert_eq!(status.code(), Code::Unauthenticated);
    assert_eq!(error_info(&status).0, "UPSTREAM_ACCESS_DENIED");
    assert_no_key(&status);
    let status = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
}

#[tokio::test]
async fn rejected_operation_is_failed_precondition_with_gateway_text() {
    let app = spawn_app().await;
    app.gateway.respond_json(json!({"success":true,"data":[{"success":false,"error":"Error in Sender-name","data":{"id":100500}}]}));
    let status = send(&app).await;
    assert_eq!(status.code(), Code::FailedPrecondition);
    let (reason, metadata) = error_info(&status);
    assert_eq!(reason, "UPSTREAM_REJECTED");
    assert_eq!(metadata["upstream_error"], "Error in Sender-name");
}

#[tokio::test]
async fn rejected_item_inside_batch_fails_only_that_item() {
    let app = spawn_app().await;
    app.gateway.respond_json(json!({"success":true,"data":[
        {"success":true,"data":{"id":1,"msg_id":11,"data":1,"parts":1}},
        {"success":false,"error":"Error in Sender-name","data":{"id":2}},
        {"success":true,"data":{"amount":5,"currency":"EUR"}}]}));
    let item = |id| BatchItem {
        operation: Some(batch_item::Operation::SendSms(SendSmsRequest {
            id,
            ..sms(100500)
        })),
    };
    let r = app
        .messaging()
        .batch(BatchRequest {
            items: vec![
                item(1),
                item(2),
                BatchItem {
                    operation: Some(batch_item::Operation::GetBalance(GetBalanceRequest {})),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let codes: Vec<i32> = r
        .results
        .iter()
        .map(|r| r.status.as_ref().unwrap().code)
        .collect();
    assert_eq!(
        codes,
        [
            Code::Ok as i32,
            Code::FailedPrecondition as i32,
            Code::Ok as i32
        ]
    );
    assert!(r.results[1].result.is_none());
    let failed = r.results[1].status.clone().unwrap();
    assert!(failed.message.contains("Error in Sender-name"));
    // The item's status carries the same ErrorInfo a single RPC would.
    let info = failed
        .details
        .iter()
        .find(|a| a.type_url.ends_with("google.rpc.ErrorInfo"))
        .expect("ErrorInfo in the item status");
    let info: tonic_types::pb::ErrorInfo = prost::Message::decode(info.value.as_slice()).unwrap();
    assert_eq!(info.reason, "UPSTREAM_REJECTED");
    assert_eq!(info.metadata["upstream_error"], "Error in Sender-name");
    match &r.results[2].result {
        Some(batch_result::Result::GetBalance(b)) => {
            assert_eq!(b.amount, crate::helpers::money("EUR", 5, 0))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn server_error_makes_a_send_outcome_unknown() {
    let app = spawn_app().await;
    app.gateway
        .respond_with(|_| Reply::Http(502, "bad gateway"));
    let status = send(&app).await;
    assert_eq!(status.code(), Code::Unavailable);
    let (reason, metadata) = error_info(&status);
    assert_eq!(reason, "OUTCOME_UNKNOWN");
    assert_eq!(metadata["cause"], "http_502");
}

#[tokio::test]
async fn server_error_on_a_query_is_plain_unavailable() {
    let app = spawn_app().await;
    app.gateway.respond_with(|_| Reply::Http(503, "down"));
    let status = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(error_info(&status).0, "UPSTREAM_UNAVAILABLE");
}

#[tokio::test]
async fn garbage_body_is_unavailable() {
    let app = spawn_app().await;
    app.gateway
        .respond_with(|_| Reply::Http(200, "<html>maintenance</html>"));
    let status = send(&app).await;
    assert_eq!(status.code(), Code::Unavailable);
    let (reason, metadata) = error_info(&status);
    assert_eq!(
        (reason.as_str(), metadata["cause"].as_str()),
        ("OUTCOME_UNKNOWN", "bad_response")
    );
    assert_no_key(&status);
}

#[tokio::test]
async fn wrong_number_of_results_is_unavailable() {
    let app = spawn_app().await;
    app.gateway.respond_json(json!({"success":true,"data":[]}));
    let status = send(&app).await;
    assert_eq!(status.code(), Code::Unavailable);
}

#[tokio::test]
async fn unreadable_payload_of_accepted_send_is_outcome_unknown() {
    let app = spawn_app().await;
    app.gateway.respond_json(
        json!({"success":true,"data":[{"success":true,"data":{"msg_id":{"nested":true}}}]}),
    );
    let status = send(&app).await;
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");
}

#[tokio::test]
async fn unreachable_gateway_is_unavailable_and_outcome_known() {
    let (closed, _held) = crate::helpers::refusing_addr();
    let app = spawn_app_with(Duration::from_secs(2), Some(format!("http://{closed}"))).await;
    let status = send(&app).await;
    assert_eq!(status.code(), Code::Unavailable);
    let (reason, metadata) = error_info(&status);
    assert_eq!(
        (reason.as_str(), metadata["cause"].as_str()),
        ("UPSTREAM_UNAVAILABLE", "unreachable")
    );
    assert!(
        !status.message().contains(&closed.to_string()),
        "the gateway's internal address leaks to callers: {}",
        status.message()
    );
}

#[tokio::test]
async fn upstream_timeout_is_unavailable_outcome_unknown() {
    let app = spawn_app_with(Duration::from_millis(200), None).await;
    app.gateway.respond_with(|b| {
        Reply::After(
            Duration::from_secs(3),
            Box::new(crate::helpers::default_reply(b)),
        )
    });
    let status = send(&app).await;
    assert_eq!(status.code(), Code::Unavailable);
    let (reason, metadata) = error_info(&status);
    assert_eq!(
        (reason.as_str(), metadata["cause"].as_str()),
        ("OUTCOME_UNKNOWN", "timeout")
    );
}

#[tokio::test]
async fn a_caller_is_answered_at_its_deadline_while_its_send_runs_on() {
    let app = spawn_app_with(Duration::from_secs(10), None).await;
    app.gateway.respond_with(|b| {
        Reply::After(
            Duration::from_secs(1),
            Box::new(crate::helpers::default_reply(b)),
        )
    });
    let mut request = tonic::Request::new(sms(100500));
    request.set_timeout(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let status = app.messaging().send_sms(request).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the caller is answered at its deadline"
    );
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(error_info(&status).0, "OUTCOME_UNKNOWN");
    // The request was not abandoned: the gateway answers it and msgw records that.
    app.gateway.idle().await;
    assert_eq!(
        app.gateway.most_concurrent(),
        1,
        "one request, kept open until the gateway answered"
    );
}

#[tokio::test]
async fn other_envelope_rejection_is_failed_precondition() {
    let app = spawn_app().await;
    app.gateway
        .respond_json(json!({"success":false,"error":"Too many requests"}));
    let status = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(error_info(&status).1["upstream_error"], "Too many requests");
}

#[tokio::test]
async fn success_flag_as_integer_is_accepted() {
    let app = spawn_app().await;
    app.gateway.respond_json(
        json!({"success":1,"data":[{"success":1,"data":{"amount":"12.5","currency":"UAH"}}]}),
    );
    let r = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.amount, crate::helpers::money("UAH", 12, 500_000_000));
}

#[tokio::test]
async fn oversized_requests_are_resource_exhausted_and_nothing_is_sent() {
    let app = spawn_app().await;
    for megabytes in [2, 5, 10] {
        let mut request = sms(100500);
        request.message = "x".repeat(megabytes * 1024 * 1024);
        let status = app.messaging().send_sms(request).await.unwrap_err();
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "{megabytes} MB: {status:?}"
        );
    }
    // A normal request on the same connection still goes through.
    let mut request = sms(100500);
    request.message = "x".repeat(1000);
    app.messaging()
        .send_sms(request)
        .await
        .expect("a normal request");
    assert_eq!(
        app.gateway.requests().len(),
        1,
        "only the normal request was sent"
    );
}
