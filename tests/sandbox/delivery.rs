//! Status timelines, magic numbers and webhooks.

use std::time::{Duration, Instant};

use crate::common::*;
use msgw::sandbox::SandboxConfig;
use serde_json::{Value, json};

const PHONE: u64 = 380971234567;

fn viber_sms(id: u64, phone: u64) -> Value {
    let mut op = viber_text(id, phone);
    op["type"] = json!("viber+sms");
    op["sms_message"] = json!("fallback");
    op["sms_signature"] = json!("SMSTest");
    op
}

fn voice(id: u64, phone: u64, dtmf: bool) -> Value {
    json!({"type": "voice", "id": id, "phone": phone, "message": "Your code is 100500",
        "voice": {"gender": "female", "language": "uk-UA", "name": "uk-UA-Standard-A"}, "dtmf": dtmf})
}

fn rcs_viber_sms(id: u64, phone: u64) -> Value {
    json!({"type": "rcs+viber+sms", "id": id, "phone": phone, "rcs_message": "m", "rcs_signature": "msgw",
        "rcs_image": "https://e.org/i.png", "rcs_button": "Go", "rcs_link": "https://e.org",
        "sms_message": "s", "sms_signature": "msgw", "viber_signature": "msgw", "viber_type": "text", "viber_message": "v"})
}

/// Sends `op` hooked to a fresh receiver and returns the send payload and the webhook.
async fn send_and_receive(sb: &TestSandbox, op: Value) -> (Value, Value) {
    let mut rx = spawn_receiver(0).await;
    let sent = sb.ok(hooked(op, &rx.url)).await;
    let got = rx.next().await;
    assert_eq!(got.content_type, "application/json");
    (sent, got.body)
}

fn assert_hook(body: &Value, sent: &Value, success: bool, kind: &str, status: &str) {
    assert_eq!(body["success"], success, "{body}");
    assert_eq!(body["id"], sent["id"].to_string(), "id is a string: {body}");
    assert_eq!(
        body["msg_id"],
        sent["msg_id"].to_string(),
        "msg_id is a string: {body}"
    );
    assert_eq!(body["type"], kind, "{body}");
    assert_eq!(body["status"], status, "{body}");
    assert!(
        body["updated"].as_str().unwrap().ends_with("+00:00"),
        "{body}"
    );
    assert_eq!(
        body.get("error").is_some(),
        !success,
        "error only on failure: {body}"
    );
}

#[tokio::test]
async fn sms_is_delivered_and_hooked() {
    let sb = spawn_sandbox(test_config()).await;
    let (sent, body) = send_and_receive(&sb, sms(1, PHONE)).await;
    assert_hook(&body, &sent, true, "sms", "DELIVERED");
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["id", "msg_id", "status", "success", "type", "updated"]
    );
    assert_eq!(
        sb.ok(json!({"type": "status", "id": 1})).await["status"],
        "DELIVERED"
    );
}

#[tokio::test]
async fn timelines_of_every_channel_end_as_documented() {
    let sb = spawn_sandbox(test_config()).await;
    let (sent, body) = send_and_receive(&sb, viber_text(1, PHONE)).await;
    assert_hook(&body, &sent, true, "viber", "READ");
    let rcs = json!({"type": "rcs", "id": 2, "phone": PHONE, "rcs_message": "m", "rcs_signature": "msgw",
        "rcs_image": "https://e.org/i.png", "rcs_button": "Go", "rcs_link": "https://e.org"});
    let (sent, body) = send_and_receive(&sb, rcs).await;
    assert_hook(&body, &sent, true, "rcs", "DELIVERED");
    let telegram = json!({"type": "telegram", "id": 3, "phone": PHONE, "message": "1234"});
    let (sent, body) = send_and_receive(&sb, telegram).await;
    assert_hook(&body, &sent, true, "telegram", "DELIVERED");
    let (sent, body) = send_and_receive(&sb, voice(4, PHONE, true)).await;
    assert_hook(&body, &sent, true, "voice", "DELIVERED");
    assert_eq!(body["duration"], 12);
    assert!(body.get("reply").is_none(), "no digit pressed: {body}");
    let (sent, body) = send_and_receive(&sb, viber_sms(5, PHONE)).await;
    assert_hook(&body, &sent, true, "viber", "READ");
}

#[tokio::test]
async fn status_walks_through_the_intermediate_states() {
    let sb = spawn_sandbox(SandboxConfig {
        step_delay: Duration::from_millis(100),
        ..test_config()
    })
    .await;
    sb.ok(viber_text(1, PHONE)).await;
    let mut seen = vec![
        sb.ok(json!({"type": "status", "id": 1})).await["status"]
            .as_str()
            .unwrap()
            .to_owned(),
    ];
    let deadline = Instant::now() + WAIT;
    while seen.last().map(String::as_str) != Some("READ") {
        assert!(Instant::now() < deadline, "stuck: {seen:?}");
        let status = sb.ok(json!({"type": "status", "id": 1})).await["status"]
            .as_str()
            .unwrap()
            .to_owned();
        if seen.last() != Some(&status) {
            seen.push(status);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(seen, ["ACCEPTED", "ROUTING", "DELIVERED", "READ"]);
}

#[tokio::test]
async fn magic_undeliverable_expired_and_rejected_fail_with_an_error() {
    let sb = spawn_sandbox(test_config()).await;
    for (phone, status) in [
        (380000000002, "UNDELIVERABLE"),
        (380000000003, "EXPIRED"),
        (380000000008, "REJECTED"),
    ] {
        let (sent, body) = send_and_receive(&sb, sms(phone % 100, phone)).await;
        assert_hook(&body, &sent, false, "sms", status);
        assert!(!body["error"].as_str().unwrap().is_empty());
        let (sent, body) = send_and_receive(&sb, viber_sms(phone % 100 + 50, phone)).await;
        assert_hook(&body, &sent, false, "sms", status);
    }
}

#[tokio::test]
async fn magic_fallback_moves_to_the_next_channel() {
    let sb = spawn_sandbox(test_config()).await;
    let phone = 380000000007;
    let (sent, body) = send_and_receive(&sb, viber_sms(1, phone)).await;
    assert_hook(&body, &sent, true, "sms", "DELIVERED");
    assert_eq!(
        sb.ok(json!({"type": "status", "id": 1})).await["type"],
        "sms"
    );
    let (sent, body) = send_and_receive(&sb, rcs_viber_sms(2, phone)).await;
    assert_hook(&body, &sent, true, "viber", "READ");
    let (sent, body) = send_and_receive(&sb, sms(3, phone)).await;
    assert_hook(&body, &sent, false, "sms", "UNDELIVERABLE");
}

#[tokio::test]
async fn magic_two_way_viber_replies_and_voice_dtmf() {
    let sb = spawn_sandbox(test_config()).await;
    let phone = 380000000009;
    let (sent, body) = send_and_receive(&sb, viber_text(1, phone)).await;
    assert_hook(&body, &sent, true, "viber", "REPLIED");
    let replies = body["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 2);
    assert!(replies[0]["message"].is_string() && replies[0]["datetime"].is_string());
    let media = &replies[1]["media"];
    assert!(
        media["url"].is_string() && media["filename"].is_string() && media["filesize"].is_u64()
    );
    let status = sb.ok(json!({"type": "status", "id": 1})).await;
    assert_eq!(status["status"], "REPLIED");
    assert_eq!(status["replies"], body["replies"]);

    let (sent, body) = send_and_receive(&sb, voice(2, phone, true)).await;
    assert_hook(&body, &sent, true, "voice", "DELIVERED");
    assert_eq!(body["reply"], "1");
    assert_eq!(body["duration"], 12);
}

#[tokio::test]
async fn magic_opting_out_number_is_delivered_and_replies_stop() {
    let sb = spawn_sandbox(test_config()).await;
    let phone = 380000000011;
    let (sent, body) = send_and_receive(&sb, sms(1, phone)).await;
    assert_hook(&body, &sent, true, "sms", "DELIVERED");
    let replies = body["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["message"], "STOP");
    assert!(replies[0]["datetime"].is_string());
    let status = sb.ok(json!({"type": "status", "id": 1})).await;
    assert_eq!(status["replies"], body["replies"]);
    // Viber is read, then the STOP comes.
    let (sent, body) = send_and_receive(&sb, viber_text(2, phone)).await;
    assert_hook(&body, &sent, true, "viber", "READ");
    assert_eq!(body["replies"][0]["message"], "STOP");
}

#[tokio::test]
async fn magic_no_webhook_is_delivered_silently() {
    let sb = spawn_sandbox(test_config()).await;
    let mut rx = spawn_receiver(0).await;
    sb.ok(hooked(sms(1, 380000000005), &rx.url)).await;
    sb.wait_status(1, "DELIVERED").await;
    // A later message to the same hook must be the first thing it receives.
    sb.ok(hooked(sms(2, PHONE), &rx.url)).await;
    assert_eq!(rx.next_body().await["id"], "2");
    assert!(rx.try_next().is_none());
}

#[tokio::test]
async fn magic_slow_takes_ten_times_longer() {
    let sb = spawn_sandbox(test_config()).await;
    let start = Instant::now();
    let (sent, body) = send_and_receive(&sb, sms(1, 380000000006)).await;
    assert_hook(&body, &sent, true, "sms", "DELIVERED");
    // Two steps of 10 x 5 ms.
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn magic_blocked_and_sender_name_refuse_at_once() {
    let sb = spawn_sandbox(test_config()).await;
    assert_eq!(
        sb.op(sms(1, 380000000001)).await,
        json!({"success": false, "error": "Phone number is blocked", "data": {"id": 1}})
    );
    assert_eq!(
        sb.err(viber_text(2, 380000000004)).await,
        "Error in Sender-name"
    );
    assert_eq!(
        sb.err(json!({"type": "telegram", "id": 3, "phone": 380000000004_u64, "message": "1234"}))
            .await,
        "Error in Sender-name"
    );
    assert_eq!(
        sb.err(json!({"type": "status", "id": 1})).await,
        "Message not found"
    );
}

#[tokio::test]
async fn webhook_is_retried_until_acknowledged() {
    let sb = spawn_sandbox(test_config()).await;
    let mut rx = spawn_receiver(2).await;
    sb.ok(hooked(sms(1, PHONE), &rx.url)).await;
    let attempts = [rx.next().await, rx.next().await, rx.next().await];
    assert_eq!(
        attempts.each_ref().map(|a| a.acknowledged),
        [false, false, true]
    );
    assert!(attempts.iter().all(|a| a.body == attempts[0].body));
}

#[tokio::test]
async fn webhook_gives_up_after_the_configured_attempts() {
    let sb = spawn_sandbox(SandboxConfig {
        webhook_attempts: 3,
        ..test_config()
    })
    .await;
    let mut rx = spawn_receiver(usize::MAX).await;
    sb.ok(hooked(sms(1, PHONE), &rx.url)).await;
    for _ in 0..3 {
        assert!(!rx.next().await.acknowledged);
    }
    // A later message's webhook comes next: the first one was given up.
    sb.ok(hooked(sms(2, PHONE), &rx.url)).await;
    assert_eq!(rx.next_body().await["id"], "2");
}

fn pipeline(id: u64, phone: u64, hook: &str) -> Value {
    json!({"type": "pipeline", "id": id, "phone": phone, "hook": hook, "pipeline": ["viber", "sms"],
        "viber": {"message": "m", "signature": "msgw", "type": "text"}, "sms": {"message": "m", "signature": "msgw"}})
}

#[tokio::test]
async fn pipeline_reports_to_the_account_address_not_the_hook() {
    let mut account = spawn_receiver(0).await;
    let mut hook = spawn_receiver(0).await;
    let sb = spawn_sandbox(SandboxConfig {
        account_webhook_url: Some(account.url.clone()),
        ..test_config()
    })
    .await;
    let sent = sb.ok(pipeline(1, PHONE, &hook.url)).await;
    let body = account.next_body().await;
    assert_hook(&body, &sent, true, "viber", "READ");
    let sent = sb.ok(pipeline(2, 380000000007, &hook.url)).await;
    let body = account.next_body().await;
    assert_hook(&body, &sent, true, "sms", "DELIVERED");
    // The hook got nothing: a plain send to it is the first thing it sees.
    sb.ok(hooked(sms(3, PHONE), &hook.url)).await;
    assert_eq!(hook.next_body().await["id"], "3");
    assert!(hook.try_next().is_none());
}

#[tokio::test]
async fn pipeline_uses_the_account_address_set_later() {
    let sb = spawn_sandbox(test_config()).await;
    let mut account = spawn_receiver(0).await;
    // Without an address the status is only polled.
    sb.ok(pipeline(1, PHONE, "http://127.0.0.1:1/unused")).await;
    sb.wait_status(1, "READ").await;
    sb.sandbox
        .set_account_webhook_url(Some(account.url.clone()));
    sb.ok(pipeline(2, PHONE, "http://127.0.0.1:1/unused")).await;
    assert_eq!(account.next_body().await["id"], "2");
    assert!(account.try_next().is_none());
}

#[tokio::test]
async fn stopping_the_server_stops_deliveries() {
    let sb = spawn_sandbox(SandboxConfig {
        step_delay: Duration::from_millis(200),
        ..test_config()
    })
    .await;
    let mut rx = spawn_receiver(0).await;
    sb.ok(hooked(sms(1, PHONE), &rx.url)).await;
    let sandbox = sb.sandbox.clone();
    sb.stop().await;
    // Had the delivery task survived, its webhook would arrive after ~400 ms.
    let late = tokio::time::timeout(Duration::from_millis(1000), rx.next()).await;
    assert!(late.is_err(), "a webhook arrived after shutdown");
    assert!(sandbox.balance() < 1000.0);
}

#[tokio::test]
async fn magic_lost_answer_carries_the_send_out_and_answers_502() {
    let sb = spawn_sandbox(test_config()).await;
    let before = sb.balance().await;
    let body = json!({"auth": sb.sandbox.api_key(), "data": [sms(7, 380000000010)]});
    let resp = sb
        .client
        .post(&sb.url)
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    // The send happened: billed, and `status` knows it.
    assert!((before - sb.balance().await - 1.0).abs() < 1e-9);
    let status = sb.ok(json!({"type": "status", "id": 7})).await;
    assert_eq!(status["id"], json!(7));
    assert!(status["msg_id"].as_u64().is_some(), "{status}");
}
