//! The inbox (`/sandbox/`, `/sandbox/api/messages`): what each message said, its
//! statuses, its code; ending a message by hand fires its webhook.

use std::time::Duration;

use msgw::sandbox::SandboxConfig;
use serde_json::{Value, json};

use crate::common::{WAIT, hooked, spawn_receiver, spawn_sandbox, test_config};

/// The base URL of a test sandbox's pages.
fn base(url: &str) -> String {
    url.trim_end_matches("/api/json.php").to_owned()
}

async fn get_json(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A sandbox whose messages stay ACCEPTED (an hour per step) until ended by hand.
fn held() -> SandboxConfig {
    SandboxConfig {
        step_delay: Duration::from_secs(3600),
        ..test_config()
    }
}

#[tokio::test]
async fn lists_what_each_message_said_newest_first_with_its_code_parts_and_cost() {
    let sandbox = spawn_sandbox(held()).await;
    sandbox
        .ok(json!({"type": "sms", "id": 7001, "phone": 380971234567u64,
                   "sms_message": "Your verification code is 482910", "sms_signature": "msgw"}))
        .await;
    sandbox
        .ok(json!({"type": "sms", "id": 7002, "phone": 380971234568u64,
                   "sms_message": "Привіт, це довгий текст".repeat(4), "sms_signature": "SMSTest"}))
        .await;
    sandbox
        .ok(json!({"type": "telegram", "id": 7003, "phone": 380971234569u64, "message": "0471"}))
        .await;
    let otp = sandbox
        .ok(json!({"type": "call/otp", "id": 7004, "phone": 380971234570u64}))
        .await;

    let base = base(&sandbox.url);
    let (status, list) = get_json(&format!("{base}/sandbox/api/messages")).await;
    assert_eq!(status, 200);
    let ids: Vec<u64> = list["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [7004, 7003, 7002, 7001], "newest first");

    let (_, sms) = get_json(&format!("{base}/sandbox/api/messages/7001")).await;
    assert_eq!(sms["phone"], "380971234567");
    assert_eq!(sms["code"], "482910");
    assert_eq!(sms["status"], "ACCEPTED");
    assert_eq!(sms["final"], false);
    assert_eq!(sms["cost"], json!({"amount": 1, "currency": "UAH"}));
    assert_eq!(
        sms["pieces"][0],
        json!({"channel": "sms", "sender": "msgw", "text": "Your verification code is 482910",
               "parts": 1, "chars": 32, "encoding": "GSM-7"})
    );
    assert_eq!(sms["timeline"][0]["status"], "ACCEPTED");

    let (_, long) = get_json(&format!("{base}/sandbox/api/messages/7002")).await;
    assert_eq!(long["pieces"][0]["encoding"], "UCS-2");
    assert_eq!(long["pieces"][0]["parts"], 2);
    assert_eq!(long["code"], Value::Null);

    let (_, telegram) = get_json(&format!("{base}/sandbox/api/messages/7003")).await;
    assert_eq!(telegram["code"], "0471");
    let (_, call) = get_json(&format!("{base}/sandbox/api/messages/7004")).await;
    assert_eq!(
        call["code"], otp["code"],
        "the code the call's number ends with"
    );

    let (_, one) = get_json(&format!(
        "{base}/sandbox/api/messages?phone=%2B380971234568"
    ))
    .await;
    assert_eq!(one["messages"][0]["id"], 7002);
    assert_eq!(one["messages"].as_array().unwrap().len(), 1);
    let (_, by_id) = get_json(&format!("{base}/sandbox/api/messages?id=7003")).await;
    assert_eq!(by_id["messages"].as_array().unwrap().len(), 1);
    let (status, _) = get_json(&format!("{base}/sandbox/api/messages/1")).await;
    assert_eq!(status, 404);
    sandbox.stop().await;
}

#[tokio::test]
async fn ending_a_message_by_hand_fires_its_webhook_once_with_that_status() {
    let sandbox = spawn_sandbox(held()).await;
    let mut hooks = spawn_receiver(0).await;
    let op = json!({"type": "sms", "id": 7101, "phone": 380971234567u64,
                    "sms_message": "Hello", "sms_signature": "msgw"});
    sandbox.ok(hooked(op, &hooks.url)).await;
    let base = base(&sandbox.url);
    let client = reqwest::Client::new();
    let end = |body: Value| {
        client
            .post(format!("{base}/sandbox/api/messages/7101/end"))
            .json(&body)
            .send()
    };
    let ended = end(json!({"status": "UNDELIVERABLE"})).await.unwrap();
    assert_eq!(ended.status(), 200);
    let ended: Value = ended.json().await.unwrap();
    assert_eq!(ended["status"], "UNDELIVERABLE");
    assert_eq!(ended["ended_by_hand"], true);
    let hook = hooks.next_body().await;
    assert_eq!(hook["status"], "UNDELIVERABLE");
    assert_eq!(hook["success"], false);
    assert_eq!(hook["id"], "7101");
    assert_eq!(sandbox.wait_status(7101, "UNDELIVERABLE").await["id"], 7101);

    // A reply to it: REPLIED, the text in `replies`.
    let replied: Value = end(json!({"reply": "STOP"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replied["status"], "REPLIED");
    let hook = hooks.next_body().await;
    assert_eq!(hook["status"], "REPLIED");
    assert_eq!(hook["replies"][0]["message"], "STOP");
    // Another reply joins the first: the webhook carries both, oldest first.
    end(json!({"reply": "START"})).await.unwrap();
    let hook = hooks.next_body().await;
    let texts: Vec<&str> = hook["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["STOP", "START"]);

    assert_eq!(end(json!({"status": "READ"})).await.unwrap().status(), 400);
    // A page of another site cannot press the buttons.
    let forged = client
        .post(format!("{base}/sandbox/messages/7101/end"))
        .header("Origin", "https://evil.example")
        .form(&[("status", "DELIVERED")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    // The page's own form (no script) ends it and goes back to the page.
    let own = client
        .post(format!("{base}/sandbox/messages/7101/end"))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("status", "DELIVERED")])
        .send()
        .await
        .unwrap();
    assert!(own.url().path().starts_with("/sandbox/"), "{}", own.url());
    assert_eq!(hooks.next_body().await["status"], "DELIVERED");
    sandbox.stop().await;
}

#[tokio::test]
async fn the_page_shows_each_message_escaped_and_tells_of_changes_as_they_happen() {
    let sandbox = spawn_sandbox(test_config()).await;
    let base = base(&sandbox.url);
    let page = reqwest::get(format!("{base}/sandbox/")).await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("No message yet"), "{html}");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external asset"
    );

    let mut events = reqwest::get(format!("{base}/sandbox/events"))
        .await
        .unwrap();
    assert_eq!(
        events.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    sandbox
        .ok(json!({"type": "sms", "id": 7201, "phone": 380971234567u64,
                   "sms_message": "<script>alert(1)</script> & more", "sms_signature": "msgw"}))
        .await;
    let first = tokio::time::timeout(WAIT, events.chunk())
        .await
        .expect("an event in time")
        .unwrap()
        .unwrap();
    let first = String::from_utf8_lossy(&first);
    assert!(
        first.contains("event: message") && first.contains("data: 7201"),
        "{first}"
    );

    let card = reqwest::get(format!("{base}/sandbox/messages/7201"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        card.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"),
        "{card}"
    );
    assert!(!card.contains("<script>"), "{card}");
    let filtered = reqwest::get(format!("{base}/sandbox/messages/7201?q=380000000009"))
        .await
        .unwrap();
    assert_eq!(filtered.status(), 204, "not this page's filter");
    sandbox.stop().await;
}
