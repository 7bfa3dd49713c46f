//! Delivery events end to end: webhooks in, the resumable gRPC stream out.

use std::{sync::Arc, time::Duration};

use msgw::adapters::store::SqlStore;
use msgw::core::ports::store::{Retention, Store};
use msgw::transport::proto::*;
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::{Code, Streaming};

use crate::builders::sms_to;
use crate::helpers::{ACCOUNT_TOKEN, Options, TestApp, error_info, spawn, spawn_sandboxed_app};

const STEP: Duration = Duration::from_millis(5);

pub async fn subscribe(
    app: &TestApp,
    request: StreamStatusEventsRequest,
) -> Streaming<StreamStatusEventsResponse> {
    app.events()
        .stream_status_events(request)
        .await
        .expect("stream opens")
        .into_inner()
}

/// The next event, failing the test if none comes within a few seconds.
pub async fn next(stream: &mut Streaming<StreamStatusEventsResponse>) -> StatusEvent {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream is open")
        .expect("an event, not an error")
        .event
        .expect("event set")
}

/// Asserts that nothing is on `stream` before a sentinel: a webhook of message `id`
/// on `channel` (which the stream's filter must let through) is its next event.
async fn nothing_before(
    app: &TestApp,
    stream: &mut Streaming<StreamStatusEventsResponse>,
    id: u64,
    channel: &str,
) {
    let body = json!({"success": true, "id": id.to_string(), "msg_id": format!("m{id}"),
                      "type": channel, "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(&app.hook_path(id), body.to_string()).await,
        200
    );
    assert_eq!(
        next(stream).await.id,
        id,
        "an event came before the sentinel"
    );
}

fn webhook(id: u64, status: &str) -> String {
    json!({"success": status == "DELIVERED", "id": id.to_string(), "msg_id": format!("m{id}"), "type": "sms",
           "status": status, "updated": "2026-01-02T03:04:05+00:00"})
    .to_string()
}

#[tokio::test]
async fn a_send_ends_in_its_final_status_on_the_stream() {
    let app = spawn_sandboxed_app(STEP).await;
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            ids: vec![1, 2],
            ..Default::default()
        },
    )
    .await;
    let receipt = app
        .messaging()
        .send_sms(sms_to(1, "380971234567"))
        .await
        .unwrap()
        .into_inner()
        .receipt
        .unwrap();
    let e = next(&mut stream).await;
    assert_eq!((e.id, e.msg_id.as_str()), (1, receipt.msg_id.as_str()));
    assert_eq!(
        (e.status(), e.raw_status.as_str()),
        (MessageStatus::Delivered, "DELIVERED")
    );
    assert_eq!(
        (e.channel(), e.source()),
        (Channel::Sms, EventSource::Webhook)
    );
    assert!(e.success && e.r#final && e.cursor > 0);
    assert!(e.updated.is_some() && e.receive_time.is_some());

    // A failed message: success false, the gateway's reason, still final.
    app.messaging()
        .send_sms(sms_to(2, "380000000002"))
        .await
        .unwrap();
    let e = next(&mut stream).await;
    assert_eq!(
        (e.id, e.status(), e.success),
        (2, MessageStatus::Undeliverable, false)
    );
    assert!(!e.error.is_empty());
}

#[tokio::test]
async fn resuming_after_the_last_cursor_gives_exactly_the_missed_events() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    assert_eq!(
        app.post_webhook(&app.hook_path(1), webhook(1, "DELIVERED"))
            .await,
        200
    );
    let first = next(&mut stream).await;
    drop(stream);

    for id in 2..=4 {
        assert_eq!(
            app.post_webhook(&app.hook_path(id), webhook(id, "DELIVERED"))
                .await,
            200
        );
    }
    let mut resumed = subscribe(
        &app,
        StreamStatusEventsRequest {
            after_cursor: Some(first.cursor),
            ..Default::default()
        },
    )
    .await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next(&mut resumed).await);
    }
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(
        got.iter().map(|e| e.cursor).collect::<Vec<_>>(),
        [first.cursor + 1, first.cursor + 2, first.cursor + 3]
    );
    // The hand-over to live: the next event comes once, right after the replay.
    assert_eq!(
        app.post_webhook(&app.hook_path(5), webhook(5, "DELIVERED"))
            .await,
        200
    );
    let live = next(&mut resumed).await;
    assert_eq!((live.id, live.cursor), (5, first.cursor + 4));
    nothing_before(&app, &mut resumed, 6, "sms").await;
}

#[tokio::test]
async fn an_event_reads_the_same_live_and_replayed() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    assert_eq!(
        app.post_webhook(&app.hook_path(1), webhook(1, "DELIVERED"))
            .await,
        200
    );
    let live = next(&mut stream).await;
    let mut replay = subscribe(
        &app,
        StreamStatusEventsRequest {
            from_oldest: true,
            ..Default::default()
        },
    )
    .await;
    let replayed = next(&mut replay).await;
    let nanos = live.receive_time.as_ref().map(|t| t.nanos % 1_000_000);
    assert_eq!(nanos, Some(0), "receive_time to the millisecond: {live:?}");
    assert_eq!(replayed, live, "the same event, field for field");
}

#[tokio::test]
async fn events_survive_a_restart_on_the_same_store() {
    let app = spawn(Options::default()).await;
    for id in [7, 8] {
        assert_eq!(
            app.post_webhook(&app.hook_path(id), webhook(id, "DELIVERED"))
                .await,
            200
        );
    }
    let app = app.restart(Options::default()).await;
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            from_oldest: true,
            ..Default::default()
        },
    )
    .await;
    let (a, b) = (next(&mut stream).await, next(&mut stream).await);
    assert_eq!(((a.id, a.cursor), (b.id, b.cursor)), ((7, 1), (8, 2)));
    // New events continue the same cursor sequence.
    assert_eq!(
        app.post_webhook(&app.hook_path(9), webhook(9, "DELIVERED"))
            .await,
        200
    );
    assert_eq!(next(&mut stream).await.cursor, 3);
}

#[tokio::test]
async fn forged_or_missing_tokens_are_refused_without_an_event() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    for path in [
        app.hook_path(2).as_str(), // another message's token
        "/v1/webhooks/status/AAAA",
        "/v1/webhooks/status/",
        "/v1/webhooks/account/nope-nope-nope-nope",
    ] {
        let answer = app.post_webhook(path, webhook(1, "DELIVERED")).await;
        assert_eq!(answer, 401, "{path}");
    }
    nothing_before(&app, &mut stream, 3, "sms").await;
}

#[tokio::test]
async fn malformed_or_oversized_bodies_are_refused_without_an_event() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    let path = app.hook_path(1);
    let huge = format!(
        r#"{{"success":true,"id":"1","error":"{}"}}"#,
        "x".repeat(100 * 1024)
    );
    for (body, code) in [
        ("not json", 400),
        (r#"{"id":"1","status":"DELIVERED"}"#, 400), // success is required
        (r#"{"success":true,"id":"x1"}"#, 400),
        ("[1,2]", 400),
        (&huge, 413),
    ] {
        let answer = app.post_webhook(&path, body.to_owned()).await;
        assert_eq!(answer, code, "{:.60}", body);
    }
    nothing_before(&app, &mut stream, 2, "sms").await;
}

#[tokio::test]
async fn the_same_webhook_twice_is_one_event() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    assert_eq!(
        app.post_webhook(&app.hook_path(1), webhook(1, "DELIVERED"))
            .await,
        200
    );
    assert_eq!(
        app.post_webhook(&app.hook_path(1), webhook(1, "DELIVERED"))
            .await,
        200
    );
    assert_eq!(next(&mut stream).await.id, 1);
    nothing_before(&app, &mut stream, 2, "sms").await;
    let mut all = subscribe(
        &app,
        StreamStatusEventsRequest {
            from_oldest: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(next(&mut all).await.cursor, 1);
    assert_eq!(next(&mut all).await.id, 2, "the duplicate was not stored");
}

#[tokio::test]
async fn a_lost_webhook_still_ends_in_a_final_event_from_polling() {
    let app = spawn(Options {
        sandbox_step: Some(STEP),
        reconcile_after: Duration::from_millis(50),
        ..Options::default()
    })
    .await;
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            ids: vec![5],
            final_only: true,
            ..Default::default()
        },
    )
    .await;
    // The sandbox never sends this number's webhook.
    app.messaging()
        .send_sms(sms_to(5, "380000000005"))
        .await
        .unwrap();
    let e = next(&mut stream).await;
    assert_eq!(
        (e.id, e.status(), e.source()),
        (5, MessageStatus::Delivered, EventSource::Poll)
    );
    assert!(e.r#final && e.success);
}

#[tokio::test]
async fn pipeline_statuses_arrive_through_the_account_endpoint() {
    let app = spawn_sandboxed_app(STEP).await;
    let mut stream = subscribe(
        &app,
        StreamStatusEventsRequest {
            ids: vec![30],
            ..Default::default()
        },
    )
    .await;
    app.messaging()
        .send_pipeline(SendPipelineRequest {
            id: 30,
            phone: "380971234567".into(),
            channels: vec![Channel::Whatsapp as i32],
            whatsapp: Some(PipelineWhatsapp {
                message: "Hi".into(),
                signature: "msgw".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let e = next(&mut stream).await;
    assert_eq!(
        (e.id, e.channel(), e.status()),
        (30, Channel::Whatsapp, MessageStatus::Delivered)
    );

    // The account endpoint takes any message's status with the account token only.
    let body =
        json!({"success": false, "id": "31", "type": "sms", "status": "REJECTED", "error": "spam"})
            .to_string();
    assert_eq!(
        app.post_webhook(&format!("/v1/webhooks/account/{ACCOUNT_TOKEN}"), body)
            .await,
        200
    );
}

#[tokio::test]
async fn filters_select_by_id_msg_id_channel_and_finality() {
    let app = spawn(Options::default()).await;
    let mut by_channel = subscribe(
        &app,
        StreamStatusEventsRequest {
            channels: vec![Channel::Viber as i32],
            ..Default::default()
        },
    )
    .await;
    let mut by_msg = subscribe(
        &app,
        StreamStatusEventsRequest {
            msg_ids: vec!["m3".into()],
            ..Default::default()
        },
    )
    .await;
    let mut finals = subscribe(
        &app,
        StreamStatusEventsRequest {
            final_only: true,
            ..Default::default()
        },
    )
    .await;

    let viber =
        json!({"success": true, "id": "1", "msg_id": "m1", "type": "viber", "status": "READ"})
            .to_string();
    assert_eq!(app.post_webhook(&app.hook_path(1), viber).await, 200);
    let routing =
        json!({"success": false, "id": "2", "msg_id": "m2", "type": "sms", "status": "ROUTING"})
            .to_string();
    assert_eq!(app.post_webhook(&app.hook_path(2), routing).await, 200);
    assert_eq!(
        app.post_webhook(&app.hook_path(3), webhook(3, "DELIVERED"))
            .await,
        200
    );

    assert_eq!(next(&mut by_channel).await.id, 1);
    assert_eq!(next(&mut by_msg).await.id, 3);
    assert_eq!(
        (next(&mut finals).await.id, next(&mut finals).await.id),
        (1, 3)
    );
    nothing_before(&app, &mut by_channel, 4, "viber").await;

    let bad = app
        .events()
        .stream_status_events(StreamStatusEventsRequest {
            channels: vec![0],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
}

/// Resumes after `cursor`, which must be OUT_OF_RANGE; the cursor msgw offers instead.
async fn oldest_available(app: &TestApp, cursor: u64) -> String {
    let status = app
        .events()
        .stream_status_events(StreamStatusEventsRequest {
            after_cursor: Some(cursor),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    error_info(&status).1["oldest_available_cursor"].clone()
}

#[tokio::test]
async fn cursors_outside_the_retention_are_out_of_range() {
    let app = spawn(Options::default()).await;
    for id in 1..=5 {
        assert_eq!(
            app.post_webhook(&app.hook_path(id), webhook(id, "DELIVERED"))
                .await,
            200
        );
    }
    // Events 1..5 are retained: resuming after 0 gets them all.
    assert_eq!(oldest_available(&app, 99).await, "0");

    // Keep the newest two events only.
    let store = SqlStore::sqlite(&app.store_url(), Duration::from_secs(60))
        .await
        .unwrap();
    let retention = Retention {
        max_age: Duration::from_secs(3600),
        max_events: 2,
        claims_max_age: Duration::from_secs(3600),
        guard_max_age: std::time::Duration::from_secs(3600),
        trusted_keys_max_age: std::time::Duration::from_secs(3600),
    };
    assert_eq!(store.prune(retention, chrono::Utc::now()).await.unwrap(), 3);
    store.close().await;

    assert_eq!(oldest_available(&app, 1).await, "3");
    assert_eq!(
        oldest_available(&app, 1041).await,
        "3",
        "the oldest cursor to resume after, not the newest event"
    );
    // Resuming exactly at the boundary works.
    let mut ok = subscribe(
        &app,
        StreamStatusEventsRequest {
            after_cursor: Some(3),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(next(&mut ok).await.cursor, 4);
}

#[tokio::test]
async fn a_slow_subscriber_catches_up_from_the_store_without_blocking_others() {
    let app = Arc::new(
        spawn(Options {
            fan_out: 16,
            ..Options::default()
        })
        .await,
    );
    let mut slow = subscribe(&app, StreamStatusEventsRequest::default()).await;
    let mut fast = subscribe(&app, StreamStatusEventsRequest::default()).await;
    // Far more events than the in-memory fan-out (16) and the stream buffers hold,
    // while `slow` reads nothing.
    let total = 2000u64;
    let client = reqwest::Client::new();
    let mut posts = tokio::task::JoinSet::new();
    for chunk in 0..10u64 {
        let (client, app) = (client.clone(), app.clone());
        posts.spawn(async move {
            for id in (chunk * total / 10 + 1)..=((chunk + 1) * total / 10) {
                let status = client
                    .post(format!("http://{}{}", app.http_addr, app.hook_path(id)))
                    .header("content-type", "application/json")
                    .body(webhook(id, "DELIVERED"))
                    .send()
                    .await
                    .unwrap()
                    .status();
                assert_eq!(status, 200);
            }
        });
    }
    let mut fast_cursors = Vec::new();
    while fast_cursors.len() < total as usize {
        fast_cursors.push(next(&mut fast).await.cursor);
    }
    while posts.join_next().await.is_some() {}
    let mut slow_cursors = Vec::new();
    while slow_cursors.len() < total as usize {
        slow_cursors.push(next(&mut slow).await.cursor);
    }
    let expected: Vec<u64> = (1..=total).collect();
    assert_eq!(fast_cursors, expected, "in order, no gap, no duplicate");
    assert_eq!(slow_cursors, expected, "the slow one got everything too");
}

#[tokio::test]
async fn shutdown_ends_open_streams_with_unavailable() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    let stopped = tokio::spawn(app.stop());
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the stream ends promptly");
    match end {
        Some(Err(status)) => {
            assert_eq!(status.code(), Code::Unavailable);
            assert_eq!(error_info(&status).0, "SHUTTING_DOWN");
            assert!(
                status.message().starts_with("msgw is shutting down"),
                "not a gateway problem: {}",
                status.message()
            );
        }
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
    stopped.await.unwrap().expect("clean stop");
}

/// `msgw_event_streams_open` as `/metrics` shows it.
async fn open_streams(app: &TestApp) -> f64 {
    app.metric("msgw_event_streams_open").await.unwrap_or(-1.0)
}

#[tokio::test]
async fn cancelled_filtered_streams_are_freed_without_waiting_for_an_event() {
    let app = spawn(Options::default()).await;
    let baseline = open_streams(&app).await;
    let mut streams = Vec::new();
    for _ in 0..500 {
        let request = StreamStatusEventsRequest {
            ids: vec![999_999],
            ..Default::default()
        };
        streams.push(
            app.events()
                .stream_status_events(request)
                .await
                .unwrap()
                .into_inner(),
        );
    }
    assert_eq!(open_streams(&app).await, baseline + 500.0);
    drop(streams);
    // No event ever matches their filter: only the client leaving can end them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while open_streams(&app).await != baseline {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} streams still open a second after their clients left",
            open_streams(&app).await - baseline
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Intake is unaffected: a webhook is still stored and streamed.
    let mut live = subscribe(&app, StreamStatusEventsRequest::default()).await;
    assert_eq!(
        app.post_webhook(&app.hook_path(7), webhook(7, "DELIVERED"))
            .await,
        200
    );
    let event = live.next().await.unwrap().unwrap().event.unwrap();
    assert_eq!(event.id, 7);
}

/// Posts a valid webhook for `id` and checks it is the next event on `stream`: whatever
/// was refused before it produced no event.
async fn next_is_sentinel(
    app: &TestApp,
    stream: &mut Streaming<StreamStatusEventsResponse>,
    id: u64,
) {
    assert_eq!(
        app.post_webhook(&app.hook_path(id), webhook(id, "DELIVERED"))
            .await,
        200
    );
    let event = stream.next().await.unwrap().unwrap().event.unwrap();
    assert_eq!(event.id, id, "an earlier refused webhook produced an event");
}

#[tokio::test]
async fn webhooks_prove_their_message_before_anything_else_and_need_a_status() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    // A forged token is refused before the body is read: garbage gets 401, not 400.
    let mac = app.hook_path(5).rsplit_once('.').unwrap().1.to_owned();
    assert_eq!(
        app.post_webhook(&format!("/v1/webhooks/status/6.{mac}"), "not json")
            .await,
        401
    );
    // A body about another message than its token's.
    assert_eq!(
        app.post_webhook(&app.hook_path(5), webhook(6, "DELIVERED"))
            .await,
        401
    );
    // No status: nothing to record (it would have counted as final).
    assert_eq!(
        app.post_webhook(
            &app.hook_path(5),
            r#"{"success":true,"id":"5","msg_id":"m5","type":"sms"}"#
        )
        .await,
        400
    );
    // A body with only msg_id is the token's message.
    assert_eq!(
        app.post_webhook(
            &app.hook_path(5),
            r#"{"success":true,"msg_id":"m5","type":"sms","status":"DELIVERED"}"#
        )
        .await,
        200
    );
    let event = stream.next().await.unwrap().unwrap().event.unwrap();
    assert_eq!((event.id, event.msg_id.as_str()), (5, "m5"));
    // A hook URL from before the client id was part of the token still works.
    assert_eq!(
        app.post_webhook(&format!("/v1/webhooks/status/{mac}"), webhook(5, "READ"))
            .await,
        200
    );
    assert_eq!(stream.next().await.unwrap().unwrap().event.unwrap().id, 5);
    next_is_sentinel(&app, &mut stream, 8).await;
}

#[tokio::test]
async fn an_account_status_of_a_message_msgw_never_sent_is_not_stored() {
    let app = spawn(Options::default()).await;
    let mut stream = subscribe(&app, StreamStatusEventsRequest::default()).await;
    let body =
        json!({"success": true, "msg_id": "never-sent", "type": "sms", "status": "DELIVERED"});
    assert_eq!(
        app.post_webhook(
            &format!("/v1/webhooks/account/{ACCOUNT_TOKEN}"),
            body.to_string()
        )
        .await,
        404
    );
    next_is_sentinel(&app, &mut stream, 9).await;
}

#[tokio::test]
async fn a_webhook_with_an_unrepresentable_time_or_duration_cannot_break_replay() {
    let app = spawn(Options::default()).await;
    let account = format!("/v1/webhooks/account/{ACCOUNT_TOKEN}");
    for (id, updated) in [
        (2, "9999-12-31T23:59:59-23:59"),
        (3, "0000-01-01T00:00:00+00:00"),
    ] {
        let body = json!({"success": true, "id": id.to_string(), "type": "sms",
                          "status": "DELIVERED", "updated": updated});
        assert_eq!(app.post_webhook(&account, body.to_string()).await, 200);
    }
    let huge = json!({"success": true, "id": "4", "type": "voice", "status": "DELIVERED",
                      "duration": 1e300});
    assert_eq!(app.post_webhook(&account, huge.to_string()).await, 400);
    let mut replay = subscribe(
        &app,
        StreamStatusEventsRequest {
            from_oldest: true,
            ..Default::default()
        },
    )
    .await;
    for id in [2, 3] {
        let event = replay
            .next()
            .await
            .unwrap()
            .expect("replay works")
            .event
            .unwrap();
        assert_eq!((event.id, event.updated), (id, None));
    }
}

#[tokio::test]
async fn one_unreadable_stored_row_does_not_block_the_replay() {
    let app = spawn(Options::default()).await;
    for id in 1..=3 {
        assert_eq!(
            app.post_webhook(&app.hook_path(id), webhook(id, "DELIVERED"))
                .await,
            200
        );
    }
    // A row written before msgw bounded its fields: a year no client can hold, a
    // duration no Duration can hold, replies that are not JSON.
    let pool = sqlx::SqlitePool::connect(&app.store_url()).await.unwrap();
    sqlx::query(
        "UPDATE events SET updated = '+10000-12-31T23:59:59Z', duration_s = 1e300,
                           replies = 'not json' WHERE client_id = 2",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let mut replay = subscribe(
        &app,
        StreamStatusEventsRequest {
            from_oldest: true,
            ..Default::default()
        },
    )
    .await;
    for id in 1..=3 {
        let event = replay
            .next()
            .await
            .unwrap()
            .expect("replay works")
            .event
            .unwrap();
        assert_eq!(event.id, id);
        if id == 2 {
            assert_eq!((event.updated, event.duration), (None, None));
            assert!(event.replies.is_empty());
        }
    }
}

#[tokio::test]
async fn a_webhook_signed_before_a_secret_rotation_is_still_taken() {
    const OLD: &str = "the-webhook-secret-before-rotation";
    let app = spawn(Options {
        webhook_secret_previous: Some(OLD.into()),
        ..Options::default()
    })
    .await;
    let signed_with = |secret: &str| {
        let token = msgw::core::hooks::HookSigner::new(&secret.to_owned().into())
            .token(msgw::core::domain::ClientId::new(77).unwrap());
        format!("/v1/webhooks/status/{token}")
    };
    assert_eq!(
        app.post_webhook(&signed_with(OLD), webhook(77, "DELIVERED"))
            .await,
        200,
        "a hook msgw handed out before the rotation"
    );
    assert_eq!(
        app.post_webhook(&app.hook_path(77), webhook(77, "READ"))
            .await,
        200,
        "and one of the current secret"
    );
    assert_eq!(
        app.post_webhook(
            &signed_with("some-other-secret-0123456"),
            webhook(77, "EXPIRED")
        )
        .await,
        401
    );
}

#[tokio::test]
async fn a_filter_on_id_zero_is_refused_with_the_field_named() {
    let app = spawn(Options::default()).await;
    let status = app
        .events()
        .stream_status_events(StreamStatusEventsRequest {
            ids: vec![5, 0],
            ..Default::default()
        })
        .await
        .expect_err("id 0 names no message");
    assert_eq!(crate::helpers::violations(&status), ["ids[1]"]);
}
