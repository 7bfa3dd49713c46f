//! Opt-outs end to end: STOP replies in delivery webhooks (and status polls) suppress
//! the number, START lifts it, sends to a suppressed number are refused before they
//! reach the gateway on every path (Batch items, verifications), SuppressionService,
//! and the list's changes on the event stream.

use std::time::Duration;

use msgw::transport::proto::*;
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::{Code, Streaming};

use crate::builders::{sms, sms_to};
use crate::events::subscribe;
use crate::helpers::{
    Callers, Entry, FakeGateway, Options, Reply, TestApp, as_caller, default_reply, error_info,
    spawn, spawn_app, spawn_sandboxed_app, violations,
};
use crate::postgres::TestSchema;
use crate::replicas::Replica;

/// The number the builders send to.
const PHONE: &str = "380971234567";

/// The body of message `id`'s delivery webhook (DELIVERED) carrying `replies` (texts).
fn replied(id: u64, replies: &[&str]) -> serde_json::Value {
    let replies: Vec<_> = replies
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"datetime": format!("2026-03-01T10:00:0{i}+00:00"), "message": text}))
        .collect();
    json!({"success": true, "id": id.to_string(), "msg_id": "123456789",
           "type": "sms", "status": "DELIVERED", "replies": replies})
}

/// POSTs the delivery webhook of message `id` (DELIVERED) carrying `replies` (texts).
async fn webhook_with_replies(app: &TestApp, id: u64, replies: &[&str]) -> u16 {
    let body = replied(id, replies);
    app.post_webhook(&app.hook_path(id), body.to_string()).await
}

/// The ErrorInfo of a send refused because its number opted out, checked.
fn assert_opted_out(status: &tonic::Status, phone: &str) {
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let (reason, metadata) = error_info(status);
    assert_eq!(reason, "RECIPIENT_OPTED_OUT");
    assert_eq!(metadata["phone"], phone);
}

/// Sends SMS `id` to `phone` and expects the opt-out refusal.
async fn refused(app: &TestApp, id: u64, phone: &str) {
    let status = app
        .messaging()
        .send_sms(sms_to(id, phone))
        .await
        .expect_err("a send to a suppressed number is refused");
    assert_opted_out(&status, phone);
}

async fn entry(app: &TestApp, phone: &str) -> Result<Suppression, tonic::Status> {
    app.suppressions()
        .get_suppression(GetSuppressionRequest {
            phone: phone.into(),
        })
        .await
        .map(|r| r.into_inner().suppression.expect("an entry"))
}

#[tokio::test]
async fn a_stop_reply_suppresses_the_number_on_every_channel_and_start_lifts_it() {
    let app = spawn_app().await;
    app.messaging().send_sms(sms(1)).await.unwrap();
    assert_eq!(webhook_with_replies(&app, 1, &["STOP"]).await, 200);

    let e = entry(&app, PHONE).await.expect("suppressed");
    assert_eq!(
        (e.source(), e.reason.as_str(), e.id, e.caller.as_str()),
        (SuppressionSource::Reply, "STOP", 1, "")
    );
    refused(&app, 2, PHONE).await;
    let viber = app
        .messaging()
        .send_viber(SendViberRequest {
            id: 5,
            ..crate::builders::viber(send_viber_request::Content::Text(ViberText {
                message: "hi".into(),
            }))
        })
        .await
        .expect_err("Viber too");
    assert_opted_out(&viber, PHONE);
    assert_eq!(
        app.gateway.requests().len(),
        1,
        "the gateway saw only the first send"
    );
    // Another number is not affected.
    app.messaging()
        .send_sms(sms_to(3, "380971234568"))
        .await
        .unwrap();

    // The webhook again, now with a START after the STOP: the STOP is not applied twice,
    // the START lifts the opt-out.
    assert_eq!(webhook_with_replies(&app, 1, &["STOP", "START"]).await, 200);
    assert_eq!(entry(&app, PHONE).await.unwrap_err().code(), Code::NotFound);
    // The refused id was never claimed as sent: its retry goes out now.
    let sent = app.messaging().send_sms(sms_to(2, PHONE)).await.unwrap();
    assert_eq!(sent.into_inner().receipt.unwrap().id, 2);
    assert_eq!(app.gateway.requests().len(), 3);
    assert!(
        app.metric_sum("msgw_opt_out_refusals_total", &[r#"operation="SendSms""#])
            .await
            >= 1.0
    );
    assert_eq!(
        app.metric_sum("msgw_suppression_changes_total", &[r#"source="reply""#])
            .await,
        2.0
    );
}

#[tokio::test]
async fn keywords_ignore_case_and_spaces_and_other_replies_change_nothing() {
    let app = spawn_app().await;
    app.messaging().send_sms(sms(1)).await.unwrap();
    assert_eq!(
        webhook_with_replies(&app, 1, &["Stop please", "STOPP", "thanks"]).await,
        200
    );
    assert_eq!(entry(&app, PHONE).await.unwrap_err().code(), Code::NotFound);
    app.messaging().send_sms(sms(2)).await.unwrap();
    assert_eq!(
        webhook_with_replies(&app, 2, &["  \tUnSubScribe \n"]).await,
        200
    );
    assert_eq!(entry(&app, PHONE).await.unwrap().reason, "UnSubScribe");
    refused(&app, 3, PHONE).await;
    app.messaging()
        .send_sms(sms_to(4, "380971234568"))
        .await
        .unwrap();
    assert_eq!(webhook_with_replies(&app, 4, &[" unstop "]).await, 200);
    // An opt-in of a number that is not suppressed changes nothing.
    assert_eq!(
        entry(&app, "380971234568").await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(webhook_with_replies(&app, 2, &["x", "unStop"]).await, 200);
    app.messaging().send_sms(sms(3)).await.unwrap();
}

#[tokio::test]
async fn a_reply_to_a_message_msgw_never_sent_changes_nothing() {
    let app = spawn_app().await;
    assert_eq!(webhook_with_replies(&app, 41, &["STOP"]).await, 200);
    let list = app
        .suppressions()
        .list_suppressions(ListSuppressionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(list.suppressions.is_empty());
}

#[tokio::test]
async fn a_configured_keyword_list_replaces_the_defaults() {
    let app = spawn(Options {
        opt_out: msgw::core::optout::Settings {
            opt_out_keywords: vec!["ARRÊT".into(), "halt".into()],
            opt_in_keywords: vec!["Reprise".into()],
        },
        ..Options::default()
    })
    .await;
    app.messaging().send_sms(sms(1)).await.unwrap();
    assert_eq!(webhook_with_replies(&app, 1, &["STOP"]).await, 200);
    app.messaging().send_sms(sms(2)).await.unwrap();
    assert_eq!(webhook_with_replies(&app, 2, &["arrêt"]).await, 200);
    refused(&app, 3, PHONE).await;
    assert_eq!(
        webhook_with_replies(&app, 2, &["arrêt", "START"]).await,
        200
    );
    refused(&app, 3, PHONE).await;
    assert_eq!(
        webhook_with_replies(&app, 2, &["arrêt", "REPRISE"]).await,
        200
    );
    app.messaging().send_sms(sms(3)).await.unwrap();
}

#[tokio::test]
async fn the_sandboxs_opting_out_number_replies_stop_and_its_next_send_is_refused() {
    const OPTS_OUT: &str = "380000000011";
    let app = spawn_sandboxed_app(Duration::from_millis(5)).await;
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            include_suppressions: true,
            ..Default::default()
        },
    )
    .await;
    app.messaging().send_sms(sms_to(1, OPTS_OUT)).await.unwrap();
    let status = next_any(&mut stream)
        .await
        .event
        .expect("the delivery first");
    assert_eq!((status.id, status.status()), (1, MessageStatus::Delivered));
    assert_eq!(status.replies[0].message, "STOP");
    let change = next_any(&mut stream)
        .await
        .suppression
        .expect("then the opt-out");
    assert_eq!(
        (
            change.phone.as_str(),
            change.suppressed,
            change.source(),
            change.id
        ),
        (OPTS_OUT, true, SuppressionSource::Reply, 1)
    );
    assert!(change.cursor > status.cursor);
    refused(&app, 2, OPTS_OUT).await;
}

/// The next item of a stream that includes list changes.
async fn next_any(
    stream: &mut Streaming<StreamStatusEventsResponse>,
) -> StreamStatusEventsResponse {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream is open")
        .expect("an event, not an error")
}

#[tokio::test]
async fn suppression_service_adds_reads_pages_and_removes() {
    let app = spawn_app().await;
    let mut list = app.suppressions();
    let added = list
        .add_suppression(AddSuppressionRequest {
            phone: "+380971234567".into(),
            reason: "asked by phone".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .suppression
        .unwrap();
    assert_eq!(
        (
            added.phone.as_str(),
            added.source(),
            added.reason.as_str(),
            added.id
        ),
        (PHONE, SuppressionSource::Api, "asked by phone", 0)
    );
    assert!(added.create_time.is_some());
    // Again: the entry as it was.
    let again = list
        .add_suppression(AddSuppressionRequest {
            phone: PHONE.into(),
            reason: "other".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .suppression
        .unwrap();
    assert_eq!(again, added);
    refused(&app, 1, PHONE).await;
    assert!(app.gateway.requests().is_empty());

    for phone in ["12345678", "4470000000", "99912345678", "380971234560"] {
        list.add_suppression(AddSuppressionRequest {
            phone: phone.into(),
            reason: String::new(),
        })
        .await
        .unwrap();
    }
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let page = list
            .list_suppressions(ListSuppressionsRequest {
                page_size: 2,
                page_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        pages.push(
            page.suppressions
                .iter()
                .map(|s| s.phone.clone())
                .collect::<Vec<_>>(),
        );
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(
        pages,
        [
            vec!["12345678", "4470000000"],
            vec!["99912345678", "380971234560"],
            vec!["380971234567"]
        ]
    );
    let all = list
        .list_suppressions(ListSuppressionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (all.suppressions.len(), all.next_page_token.as_str()),
        (5, "")
    );

    let removed = list
        .remove_suppression(RemoveSuppressionRequest {
            phone: PHONE.into(),
            reason: "consent given again".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .suppression
        .unwrap();
    assert_eq!(removed, added);
    let gone = list
        .remove_suppression(RemoveSuppressionRequest {
            phone: PHONE.into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(error_info(&gone).0, "PHONE_NOT_SUPPRESSED");
    let missing = entry(&app, PHONE).await.unwrap_err();
    assert_eq!(error_info(&missing).0, "PHONE_NOT_SUPPRESSED");
    app.messaging().send_sms(sms(1)).await.unwrap();
}

#[tokio::test]
async fn suppression_requests_are_validated() {
    let app = spawn_app().await;
    let mut list = app.suppressions();
    let bad = list
        .add_suppression(AddSuppressionRequest {
            phone: "12ab".into(),
            reason: "x".repeat(257),
        })
        .await
        .unwrap_err();
    assert_eq!(violations(&bad), ["phone", "reason"]);
    let bad = list
        .remove_suppression(RemoveSuppressionRequest {
            phone: String::new(),
            reason: "a\nb".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(violations(&bad), ["phone", "reason"]);
    let bad = list
        .get_suppression(GetSuppressionRequest {
            phone: "0971234567".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(violations(&bad), ["phone"]);
    let bad = list
        .list_suppressions(ListSuppressionsRequest {
            page_size: 1001,
            page_token: "not a number".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(violations(&bad), ["page_size", "page_token"]);
}

const TOKEN: &str = "token-of-billing-0123456789";
const LISTS_TOKEN: &str = "token-of-compliance-0123456789";

#[tokio::test]
async fn the_list_and_its_events_need_the_suppressions_permission() {
    let app = spawn(Options {
        callers: Some(
            Callers::new()
                .caller(Entry::token("billing", TOKEN))
                .caller(
                    Entry::token("compliance", LISTS_TOKEN)
                        .permissions(&["suppressions", "events"]),
                ),
        ),
        ..Options::default()
    })
    .await;
    let mut list = app.suppressions();
    let request = || AddSuppressionRequest {
        phone: PHONE.into(),
        reason: String::new(),
    };
    let denied = list
        .add_suppression(as_caller(TOKEN, request()))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("suppressions"), "{denied:?}");
    for denied in [
        list.get_suppression(as_caller(
            TOKEN,
            GetSuppressionRequest {
                phone: PHONE.into(),
            },
        ))
        .await
        .unwrap_err(),
        list.list_suppressions(as_caller(TOKEN, ListSuppressionsRequest::default()))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(denied.code(), Code::PermissionDenied);
    }
    let stream = app
        .events()
        .stream_status_events(as_caller(
            TOKEN,
            StreamStatusEventsRequest {
                include_suppressions: true,
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(stream.code(), Code::PermissionDenied);

    let added = list
        .add_suppression(as_caller(LISTS_TOKEN, request()))
        .await
        .unwrap()
        .into_inner()
        .suppression
        .unwrap();
    assert_eq!(added.caller, "compliance");
    let status = app
        .messaging()
        .send_sms(as_caller(TOKEN, sms(1)))
        .await
        .unwrap_err();
    assert_opted_out(&status, PHONE);
}

#[tokio::test]
async fn list_changes_stream_in_cursor_order_only_to_streams_that_ask() {
    let app = spawn_app().await;
    let mut with = subscribe(
        &app,
        StreamStatusEventsRequest {
            include_suppressions: true,
            // The filters are the status events' only.
            ids: vec![7],
            ..Default::default()
        },
    )
    .await;
    let mut without = subscribe(&app, StreamStatusEventsRequest::default()).await;
    let mut list = app.suppressions();
    list.add_suppression(AddSuppressionRequest {
        phone: PHONE.into(),
        reason: "web form".into(),
    })
    .await
    .unwrap();
    list.remove_suppression(RemoveSuppressionRequest {
        phone: PHONE.into(),
        reason: "consent".into(),
    })
    .await
    .unwrap();
    // A remove of a number not on the list makes no event.
    let _ = list
        .remove_suppression(RemoveSuppressionRequest {
            phone: PHONE.into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    let sentinel =
        json!({"success": true, "id": "7", "msg_id": "m7", "type": "sms", "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(&app.hook_path(7), sentinel.to_string())
            .await,
        200
    );

    let added = next_any(&mut with).await.suppression.expect("the add");
    assert_eq!(
        (
            added.phone.as_str(),
            added.suppressed,
            added.source(),
            added.reason.as_str()
        ),
        (PHONE, true, SuppressionSource::Api, "web form")
    );
    assert!(added.time.is_some());
    let removed = next_any(&mut with).await.suppression.expect("the remove");
    assert_eq!(
        (removed.suppressed, removed.reason.as_str()),
        (false, "consent")
    );
    let status = next_any(&mut with).await.event.expect("the sentinel");
    assert!(added.cursor < removed.cursor && removed.cursor < status.cursor);

    let first = next_any(&mut without).await;
    assert_eq!(
        first.event.map(|e| e.id),
        Some(7),
        "a stream without include_suppressions sees no list change"
    );

    // Resuming after the add replays the remove first.
    let mut resumed = subscribe(
        &app,
        StreamStatusEventsRequest {
            include_suppressions: true,
            after_cursor: Some(added.cursor),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        next_any(&mut resumed).await.suppression.map(|s| s.cursor),
        Some(removed.cursor)
    );
}

#[tokio::test]
async fn a_repeated_webhook_makes_no_second_change_event() {
    let app = spawn_app().await;
    app.messaging().send_sms(sms(1)).await.unwrap();
    for _ in 0..3 {
        assert_eq!(webhook_with_replies(&app, 1, &["STOP"]).await, 200);
    }
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            include_suppressions: true,
            from_oldest: true,
            ..Default::default()
        },
    )
    .await;
    assert!(next_any(&mut stream).await.event.is_some());
    assert!(next_any(&mut stream).await.suppression.is_some());
    let sentinel =
        json!({"success": true, "id": "9", "msg_id": "m9", "type": "sms", "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(&app.hook_path(9), sentinel.to_string())
            .await,
        200
    );
    assert_eq!(next_any(&mut stream).await.event.map(|e| e.id), Some(9));
}

#[tokio::test]
async fn in_a_batch_only_the_suppressed_item_fails() {
    let app = spawn_app().await;
    app.suppressions()
        .add_suppression(AddSuppressionRequest {
            phone: "380971234568".into(),
            reason: String::new(),
        })
        .await
        .unwrap();
    let item = |r: SendSmsRequest| BatchItem {
        operation: Some(batch_item::Operation::SendSms(r)),
    };
    let results = app
        .messaging()
        .batch(BatchRequest {
            items: vec![
                item(sms_to(1, PHONE)),
                item(sms_to(2, "380971234568")),
                item(sms_to(3, "380971234569")),
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    let codes: Vec<i32> = results
        .iter()
        .map(|r| r.status.as_ref().map_or(0, |s| s.code))
        .collect();
    assert_eq!(codes, [0, Code::FailedPrecondition as i32, 0]);
    let sent: Vec<u64> = app
        .gateway
        .envelopes()
        .concat()
        .iter()
        .map(|op| op["id"].as_u64().unwrap())
        .collect();
    assert_eq!(sent, [1, 3]);
}

#[tokio::test]
async fn a_verification_to_a_suppressed_number_is_refused_and_leaves_nothing_pending() {
    let app = spawn_app().await;
    app.suppressions()
        .add_suppression(AddSuppressionRequest {
            phone: PHONE.into(),
            reason: String::new(),
        })
        .await
        .unwrap();
    let status = app
        .verification()
        .start_verification(StartVerificationRequest {
            id: 1,
            phone: PHONE.into(),
            signature: "msgw".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_opted_out(&status, PHONE);
    assert!(app.gateway.requests().is_empty(), "nothing sent");
    let pending = app
        .verification()
        .get_verification(GetVerificationRequest {
            phone: PHONE.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(pending.code(), Code::NotFound, "no verification pending");
}

#[tokio::test]
async fn a_stop_in_a_polled_status_suppresses_the_number_too() {
    let app = spawn(Options {
        reconcile_after: Duration::from_millis(50),
        ..Options::default()
    })
    .await;
    app.gateway.respond_with(|body| {
        let op = &body["data"][0];
        if op["type"] != "status" {
            return default_reply(body);
        }
        Reply::Json(json!({"success": true, "data": [{"success": true, "data": {
            "id": op["id"].to_string(), "msg_id": 7, "type": "viber", "status": "REPLIED",
            "replies": [{"datetime": "2026-03-01T10:00:00+03:00", "message": "Stop"}]}}]}))
    });
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            include_suppressions: true,
            ..Default::default()
        },
    )
    .await;
    app.messaging().send_sms(sms(1)).await.unwrap();
    let polled = next_any(&mut stream)
        .await
        .event
        .expect("the polled status");
    assert_eq!(polled.source(), EventSource::Poll);
    let change = next_any(&mut stream)
        .await
        .suppression
        .expect("the opt-out");
    assert_eq!((change.phone.as_str(), change.id), (PHONE, 1));
    refused(&app, 2, PHONE).await;
}

#[tokio::test]
async fn an_opt_out_through_one_replica_refuses_sends_through_the_other() {
    let schema = TestSchema::create().await;
    let gateway = FakeGateway::start().await;
    let a = Replica::start_with(Options::default(), &schema, &gateway).await;
    let b = Replica::start_with(Options::default(), &schema, &gateway).await;
    let mut changes = event_service_client::EventServiceClient::new(a.channel())
        .stream_status_events(StreamStatusEventsRequest {
            include_suppressions: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    a.messaging().send_sms(sms(1)).await.unwrap();
    // The STOP arrives at the other replica's webhook listener.
    let token =
        msgw::core::hooks::HookSigner::new(&crate::helpers::WEBHOOK_SECRET.to_owned().into())
            .token(msgw::core::domain::ClientId::new(1).unwrap());
    let answer = reqwest::Client::new()
        .post(format!(
            "http://{}/v1/webhooks/status/{token}",
            b.http_addr()
        ))
        .json(&replied(1, &["STOP"]))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let status = a.messaging().send_sms(sms(2)).await.unwrap_err();
    assert_opted_out(&status, PHONE);
    assert!(next_any(&mut changes).await.event.is_some());
    let change = next_any(&mut changes)
        .await
        .suppression
        .expect("B's change on A's stream");
    assert!(change.suppressed);

    // A caller's change through A refuses sends through B.
    suppression_service_client::SuppressionServiceClient::new(a.channel())
        .add_suppression(AddSuppressionRequest {
            phone: "380971234568".into(),
            reason: String::new(),
        })
        .await
        .unwrap();
    let status = b
        .messaging()
        .send_sms(sms_to(3, "380971234568"))
        .await
        .unwrap_err();
    assert_opted_out(&status, "380971234568");
    let sent: Vec<u64> = gateway
        .envelopes()
        .concat()
        .iter()
        .map(|op| op["id"].as_u64().unwrap())
        .collect();
    assert_eq!(sent, [1]);
}

/// The body of message `id`'s delivery webhook carrying `replies`, each written at its
/// own time.
fn dated(id: u64, replies: &[(&str, chrono::DateTime<chrono::Utc>)]) -> serde_json::Value {
    let replies: Vec<_> = replies
        .iter()
        .map(|(text, at)| json!({"datetime": at.to_rfc3339(), "message": text}))
        .collect();
    json!({"success": true, "id": id.to_string(), "msg_id": format!("9{id}"),
           "type": "sms", "status": "DELIVERED", "replies": replies})
}

/// `minutes` ago.
fn ago(minutes: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() - chrono::Duration::minutes(minutes)
}

async fn post_dated(app: &TestApp, id: u64, replies: &[(&str, chrono::DateTime<chrono::Utc>)]) {
    let body = dated(id, replies).to_string();
    assert_eq!(app.post_webhook(&app.hook_path(id), body).await, 200);
}

/// The issue's case: two messages to one number, the second's webhook carries STOP
/// (now-5min), then the first's late webhook carries START (now-10min).
const CASE: &str = "380971117790";

#[tokio::test]
async fn a_late_webhook_with_an_older_start_does_not_undo_a_newer_stop() {
    let app = spawn_app().await;
    for id in [1, 2] {
        app.messaging().send_sms(sms_to(id, CASE)).await.unwrap();
    }
    post_dated(&app, 2, &[("STOP", ago(5))]).await;
    post_dated(&app, 1, &[("START", ago(10))]).await;
    assert_eq!(
        entry(&app, CASE).await.expect("still opted out").reason,
        "STOP"
    );
    refused(&app, 3, CASE).await;
    assert_eq!(app.gateway.requests().len(), 2, "the third send never left");

    // Inside one webhook, [STOP@t2, START@t1] ends opted out too, and on equal times
    // STOP wins whatever the order.
    let tie = ago(3);
    for (id, phone, replies) in [
        (4, "380971117791", vec![("STOP", ago(2)), ("START", ago(4))]),
        (5, "380971117792", vec![("START", tie), ("STOP", tie)]),
        (6, "380971117793", vec![("STOP", tie), ("START", tie)]),
    ] {
        app.messaging().send_sms(sms_to(id, phone)).await.unwrap();
        post_dated(&app, id, &replies).await;
        refused(&app, 10 + id, phone).await;
    }
}

#[tokio::test]
async fn stop_with_punctuation_opts_out_and_a_newer_start_opts_back_in() {
    let app = spawn_app().await;
    app.messaging().send_sms(sms_to(1, CASE)).await.unwrap();
    post_dated(&app, 1, &[("Stop.", ago(3))]).await;
    assert_eq!(entry(&app, CASE).await.expect("opted out").reason, "Stop.");
    refused(&app, 2, CASE).await;
    post_dated(&app, 1, &[("Stop.", ago(3)), ("START!", ago(1))]).await;
    assert_eq!(entry(&app, CASE).await.unwrap_err().code(), Code::NotFound);
    app.messaging()
        .send_sms(sms_to(2, CASE))
        .await
        .expect("opted back in");
}

#[tokio::test]
async fn callers_changes_are_decisions_at_their_time() {
    let app = spawn_app().await;
    app.messaging().send_sms(sms_to(1, CASE)).await.unwrap();
    // Added by a caller now: a START the recipient wrote before, arriving late, does
    // not lift it.
    app.suppressions()
        .add_suppression(AddSuppressionRequest {
            phone: CASE.into(),
            reason: "asked by phone".into(),
        })
        .await
        .unwrap();
    post_dated(&app, 1, &[("START", ago(2))]).await;
    assert_eq!(entry(&app, CASE).await.unwrap().reason, "asked by phone");
    // Removed by a caller now: an older STOP arriving late does not bring it back...
    app.suppressions()
        .remove_suppression(RemoveSuppressionRequest {
            phone: CASE.into(),
            reason: "opted in on the web".into(),
        })
        .await
        .unwrap();
    post_dated(&app, 1, &[("STOP", ago(1))]).await;
    assert_eq!(entry(&app, CASE).await.unwrap_err().code(), Code::NotFound);
    app.messaging().send_sms(sms_to(2, CASE)).await.unwrap();
    // ...and a STOP written after the remove is not undone by it.
    post_dated(&app, 2, &[("STOP", chrono::Utc::now())]).await;
    refused(&app, 3, CASE).await;
}

#[tokio::test]
async fn a_poll_learning_an_older_start_after_a_webhook_stop_leaves_the_number_opted_out() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let app = spawn(Options {
        reconcile_after: Duration::from_millis(50),
        ..Options::default()
    })
    .await;
    // Message 1's status says nothing until the STOP is in; then it carries a START
    // written before that STOP.
    let stopped = Arc::new(AtomicBool::new(false));
    let start_at = ago(10).to_rfc3339();
    let answered = stopped.clone();
    app.gateway.respond_with(move |body| {
        let op = &body["data"][0];
        if op["type"] != "status" {
            return default_reply(body);
        }
        let (status, replies) = if answered.load(Ordering::SeqCst) {
            (
                "REPLIED",
                json!([{"datetime": start_at, "message": "START"}]),
            )
        } else {
            ("ACCEPTED", json!([]))
        };
        Reply::Json(json!({"success": true, "data": [{"success": true, "data": {
            "id": op["id"].to_string(), "msg_id": 7, "type": "sms", "status": status,
            "replies": replies}}]}))
    });
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            include_suppressions: true,
            ids: vec![1],
            ..Default::default()
        },
    )
    .await;
    app.messaging().send_sms(sms_to(1, CASE)).await.unwrap();
    app.messaging().send_sms(sms_to(2, CASE)).await.unwrap();
    post_dated(&app, 2, &[("STOP", ago(5))]).await;
    stopped.store(true, Ordering::SeqCst);
    // Wait for the poll that carries the START.
    loop {
        let next = next_any(&mut stream).await;
        if let Some(e) = next.event
            && e.id == 1
            && !e.replies.is_empty()
        {
            break;
        }
    }
    assert_eq!(
        entry(&app, CASE).await.expect("still opted out").reason,
        "STOP"
    );
    refused(&app, 3, CASE).await;
}

#[tokio::test]
async fn replicas_applying_out_of_order_replies_at_once_end_opted_out() {
    let schema = TestSchema::create().await;
    let gateway = FakeGateway::start().await;
    let a = Replica::start_with(Options::default(), &schema, &gateway).await;
    let b = Replica::start_with(Options::default(), &schema, &gateway).await;
    let signer =
        msgw::core::hooks::HookSigner::new(&crate::helpers::WEBHOOK_SECRET.to_owned().into());
    let phones: Vec<String> = (0..8).map(|i| format!("38097111780{i}")).collect();
    for (i, phone) in phones.iter().enumerate() {
        let i = i as u64;
        a.messaging()
            .send_sms(sms_to(100 + i, phone))
            .await
            .unwrap();
        a.messaging()
            .send_sms(sms_to(200 + i, phone))
            .await
            .unwrap();
    }
    // For each number, A takes the second message's STOP (now-5min) while B takes the
    // first's START (now-10min), at once.
    let client = reqwest::Client::new();
    let post = |replica: &Replica, id: u64, body: serde_json::Value| {
        let token = signer.token(msgw::core::domain::ClientId::new(id).unwrap());
        let request = client
            .post(format!(
                "http://{}/v1/webhooks/status/{token}",
                replica.http_addr()
            ))
            .json(&body);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let mut posts = Vec::new();
    for i in 0..phones.len() as u64 {
        posts.push(post(&a, 200 + i, dated(200 + i, &[("STOP", ago(5))])));
        posts.push(post(&b, 100 + i, dated(100 + i, &[("START", ago(10))])));
    }
    for answer in futures_util::future::join_all(posts).await {
        assert_eq!(answer, 200);
    }
    for (i, phone) in phones.iter().enumerate() {
        let through = if i % 2 == 0 { &a } else { &b };
        let status = through
            .messaging()
            .send_sms(sms_to(300 + i as u64, phone))
            .await
            .unwrap_err();
        assert_opted_out(&status, phone);
    }
}
