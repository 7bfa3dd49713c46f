//! "Send, then wait for the outcome": GetMessageStatus with `wait_for_final`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use msgw::transport::proto::*;
use serde_json::{Value, json};

use crate::helpers::{
    FakeGateway, Options, Reply, TestApp, default_reply, sms, spawn, spawn_app, violations,
};

/// Status answers: ACCEPTED for the first `accepted` queries, DELIVERED after; sends as
/// usual. Returns the count of status queries.
fn status_after(gateway: &FakeGateway, accepted: usize) -> Arc<AtomicUsize> {
    let queries = Arc::new(AtomicUsize::new(0));
    let counted = queries.clone();
    gateway.respond_with(move |body: &Value| {
        let Reply::Json(mut answer) = default_reply(body) else {
            unreachable!("the default reply is JSON")
        };
        for (i, op) in body["data"].as_array().into_iter().flatten().enumerate() {
            if op["type"] == "status" {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                let status = if n < accepted {
                    "ACCEPTED"
                } else {
                    "DELIVERED"
                };
                answer["data"][i]["data"]["status"] = json!(status);
            }
        }
        Reply::Json(answer)
    });
    queries
}

fn wait(id: u64, timeout: Duration) -> tonic::Request<GetMessageStatusRequest> {
    let mut request = tonic::Request::new(GetMessageStatusRequest {
        id,
        wait_for_final: true,
    });
    request.set_timeout(timeout);
    request
}

/// The answer to a wait for `id`'s final status with this deadline.
async fn waited(app: &TestApp, id: u64, timeout: Duration) -> GetMessageStatusResponse {
    app.messaging()
        .get_message_status(wait(id, timeout))
        .await
        .expect("answered before the deadline, not DEADLINE_EXCEEDED")
        .into_inner()
}

async fn webhook(app: &TestApp, id: u64, status: &str) {
    let body = json!({"success": status == "DELIVERED", "id": id.to_string(), "msg_id": format!("m{id}"),
                      "type": "sms", "status": status});
    assert_eq!(
        app.post_webhook(&app.hook_path(id), body.to_string()).await,
        200
    );
}

#[tokio::test]
async fn a_wait_answers_when_the_webhook_brings_the_final_status() {
    let app = spawn_app().await;
    let queries = status_after(&app.gateway, usize::MAX);
    let mut client = app.messaging();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        client
            .get_message_status(wait(1, Duration::from_secs(20)))
            .await
    });
    while queries.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no status query"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    webhook(&app, 1, "DELIVERED").await;
    let answer = waiting.await.unwrap().expect("answered").into_inner();
    assert_eq!(answer.status(), MessageStatus::Delivered);
    assert!(answer.is_final);
    assert_eq!(answer.msg_id, "m1");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered on the webhook, not at the deadline"
    );
    assert_eq!(
        queries.load(Ordering::SeqCst),
        1,
        "one gateway query, no polling"
    );
}

#[tokio::test]
async fn a_wait_answers_at_once_from_a_final_status_msgw_holds_without_asking_the_gateway() {
    let app = spawn_app().await;
    let queries = status_after(&app.gateway, usize::MAX);
    webhook(&app, 2, "DELIVERED").await;
    let answer = waited(&app, 2, Duration::from_secs(20)).await;
    assert_eq!(
        (answer.status(), answer.is_final),
        (MessageStatus::Delivered, true)
    );
    // `raw` is what the webhook said, in the gateway's field names.
    let Some(prost_types::Value {
        kind: Some(prost_types::value::Kind::StructValue(raw)),
    }) = answer.raw
    else {
        panic!("raw is an object: {:?}", answer.raw)
    };
    let text = |key: &str| match raw.fields.get(key).and_then(|v| v.kind.clone()) {
        Some(prost_types::value::Kind::StringValue(s)) => s,
        other => panic!("{key}: {other:?}"),
    };
    assert_eq!(
        (text("status"), text("msg_id")),
        ("DELIVERED".into(), "m2".into())
    );
    assert_eq!(
        queries.load(Ordering::SeqCst),
        0,
        "no status query was made"
    );
}

#[tokio::test]
async fn a_wait_answers_at_the_deadline_with_the_newest_status_known() {
    let app = spawn_app().await;
    let queries = status_after(&app.gateway, usize::MAX);
    let started = Instant::now();
    let answer = waited(&app, 3, Duration::from_millis(700)).await;
    let took = started.elapsed();
    assert_eq!(
        (answer.status(), answer.is_final),
        (MessageStatus::Accepted, false)
    );
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(700),
        "waited until just before the deadline: {took:?}"
    );
    assert_eq!(queries.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_wait_answers_when_a_reconcile_poll_finds_the_final_status() {
    let app = spawn(Options {
        reconcile_after: Duration::from_millis(300),
        ..Options::default()
    })
    .await;
    // The wait's own query sees ACCEPTED; reconcile's poll later sees DELIVERED.
    let queries = status_after(&app.gateway, 1);
    app.messaging().send_sms(sms(4)).await.expect("sent");
    let answer = waited(&app, 4, Duration::from_secs(20)).await;
    assert_eq!(
        (answer.status(), answer.is_final),
        (MessageStatus::Delivered, true)
    );
    assert_eq!(
        queries.load(Ordering::SeqCst),
        2,
        "the wait's query and reconcile's poll"
    );
}

#[tokio::test]
async fn without_wait_the_answer_says_whether_the_status_is_final() {
    let app = spawn_app().await;
    status_after(&app.gateway, 1);
    let mut client = app.messaging();
    let first = client
        .get_message_status(GetMessageStatusRequest {
            id: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (first.status(), first.is_final),
        (MessageStatus::Accepted, false)
    );
    // Asked again: the last lookup's answer until MSGW_STATUS_FRESHNESS (1 s) has
    // passed, then the gateway's new one.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let second = loop {
        let answer = client
            .get_message_status(GetMessageStatusRequest {
                id: 5,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if answer.is_final || std::time::Instant::now() > deadline {
            break answer;
        }
        assert_eq!(answer.status(), MessageStatus::Accepted);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (second.status(), second.is_final),
        (MessageStatus::Delivered, true)
    );
}

#[tokio::test]
async fn a_batch_item_cannot_wait() {
    let app = spawn_app().await;
    let refused = app
        .messaging()
        .batch(BatchRequest {
            items: vec![BatchItem {
                operation: Some(batch_item::Operation::GetMessageStatus(
                    GetMessageStatusRequest {
                        id: 6,
                        wait_for_final: true,
                    },
                )),
            }],
        })
        .await
        .expect_err("refused");
    assert_eq!(
        violations(&refused),
        ["items[0].get_message_status.wait_for_final"]
    );
    assert!(app.gateway.requests().is_empty());
}
