//! Account operations: balance and billing, templates, status, HLR and voice OTP.

use std::time::Duration;

use crate::common::*;
use msgw::sandbox::SandboxConfig;
use serde_json::json;

#[tokio::test]
async fn balance_goes_down_by_billed_parts() {
    let sb = spawn_sandbox(test_config()).await;
    assert_eq!(
        sb.ok(json!({"type": "balance"})).await,
        // Exact decimal digits, as the gateway writes them: a whole amount has none.
        json!({"amount": 1000, "currency": "UAH"})
    );
    let cases = [
        ("a".repeat(160), 1),
        ("a".repeat(161), 2),
        ("{".repeat(80), 1),
        (format!("{}a", "{".repeat(80)), 2),
        ("ї".repeat(70), 1),
        ("ї".repeat(71), 2),
        ("a".repeat(307), 3),
    ];
    let mut expected = 1000.0;
    for (id, (text, parts)) in (1_u64..).zip(cases) {
        let mut op = sms(id, 380971234567);
        op["sms_message"] = json!(text);
        let data = sb.ok(op).await;
        assert_eq!(
            data["parts"],
            parts,
            "text of {} chars",
            text.chars().count()
        );
        expected -= f64::from(parts) * 1.0;
        assert!((sb.balance().await - expected).abs() < 1e-9);
    }
    // Viber bills one message at 0.5.
    sb.ok(viber_text(50, 380971234567)).await;
    expected -= 0.5;
    assert!((sb.balance().await - expected).abs() < 1e-9);
    assert!((sb.sandbox.balance() - expected).abs() < 1e-9);
}

#[tokio::test]
async fn insufficient_balance_refuses_the_send() {
    let sb = spawn_sandbox(SandboxConfig {
        balance: 1.5,
        ..test_config()
    })
    .await;
    let mut long = sms(1, 380971234567);
    long["sms_message"] = json!("a".repeat(161));
    assert_eq!(
        sb.op(long).await,
        json!({"success": false, "error": "Insufficient balance", "data": {"id": 1}})
    );
    sb.ok(sms(2, 380971234567)).await;
    assert_eq!(sb.balance().await, 0.5);
    assert_eq!(sb.err(sms(3, 380971234567)).await, "Insufficient balance");
}

#[tokio::test]
async fn sms_templates_are_created_listed_and_deleted() {
    let sb = spawn_sandbox(test_config()).await;
    let a = sb
        .ok(json!({"type": "template/create", "template": "Your code is {code}", "name": "otp"}))
        .await;
    assert_eq!(a["name"], "otp");
    assert_eq!(a["template"], "Your code is {code}");
    assert_eq!(a["chars"], 21, "extension chars count twice");
    assert_eq!(a["parts"], 1);
    assert!(a["id"].is_u64());
    let b = sb
        .ok(json!({"type": "template/create", "template": "ї".repeat(71)}))
        .await;
    assert_eq!(
        (b["chars"].clone(), b["parts"].clone(), b["name"].clone()),
        (json!(71), json!(2), json!(""))
    );
    sb.ok(json!({"type": "template/create", "template": "third"}))
        .await;

    let list = sb.ok(json!({"type": "template/list"})).await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3);
    let keys: Vec<&String> = list[0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["chars", "created", "id", "name", "parts", "template"]
    );
    let created = list[0]["created"].as_str().unwrap();
    assert!(
        created.ends_with("+00:00") && created.contains('T'),
        "{created}"
    );

    let by_id = json!({"type": "template/delete", "id": a["id"].as_u64().unwrap().to_string()});
    assert_eq!(sb.ok(by_id.clone()).await, json!({"deleted": 1}));
    assert_eq!(sb.ok(by_id).await, json!({"deleted": 0}));
    assert_eq!(
        sb.ok(json!({"type": "template/delete", "template": "third"}))
            .await,
        json!({"deleted": 1})
    );
    let left = sb.ok(json!({"type": "template/list"})).await;
    assert_eq!(left.as_array().unwrap().len(), 1);
    assert_eq!(left[0]["id"], b["id"]);
}

#[tokio::test]
async fn viber_templates_go_through_moderation() {
    let sb = spawn_sandbox(test_config()).await;
    let t = sb
        .ok(json!({"type": "template/viber/create", "template": "Order {n} shipped", "signature": "msgw"}))
        .await;
    assert_eq!(t["status"], "moderation");
    let id = t["id"].as_u64().unwrap();
    let plain = sb
        .ok(json!({"type": "template/viber/create", "template": "Hi"}))
        .await;
    assert_eq!(
        sb.err(json!({"type": "template/viber/create", "template": "x", "signature": "Nope"}))
            .await,
        "Error in Sender-name"
    );
    // Approval is time-based: poll the list instead of sleeping.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let list = sb.ok(json!({"type": "template/viber/list"})).await;
        assert_eq!(list[0]["id"], id);
        assert_eq!(list[0]["template"], "Order {n} shipped");
        assert_eq!(list[0]["signature"], "msgw");
        assert_eq!(list[1]["signature"], "");
        let keys: Vec<&String> = list[0].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["id", "signature", "status", "template"]);
        if list[0]["status"] == "approved" {
            break;
        }
        assert_eq!(list[0]["status"], "moderation");
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(
        sb.ok(json!({"type": "template/viber/delete", "id": id}))
            .await,
        json!({"deleted": 1})
    );
    assert_eq!(
        sb.ok(json!({"type": "template/viber/delete", "template": "Hi"}))
            .await,
        json!({"deleted": 1})
    );
    assert_eq!(
        sb.ok(json!({"type": "template/viber/list"})).await,
        json!([])
    );
    let _ = plain;
}

#[tokio::test]
async fn status_reports_the_current_record() {
    let sb = spawn_sandbox(test_config()).await;
    assert_eq!(
        sb.op(json!({"type": "status", "id": 404})).await,
        json!({"success": false, "error": "Message not found", "data": {"id": 404}})
    );
    let sent = sb.ok(sms(10, 380971234567)).await;
    let status = sb.wait_status(10, "DELIVERED").await;
    assert_eq!(status["id"], 10);
    assert_eq!(status["msg_id"], sent["msg_id"]);
    assert_eq!(status["type"], "sms");
    assert!(status["updated"].as_str().unwrap().ends_with("+00:00"));
    let keys: Vec<&String> = status.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "msg_id", "status", "type", "updated"]);

    sb.ok(viber_text(11, 380971234567)).await;
    assert_eq!(sb.wait_status(11, "READ").await["type"], "viber");
}

#[tokio::test]
async fn resending_a_client_id_replaces_its_record() {
    let sb = spawn_sandbox(test_config()).await;
    let first = sb.ok(sms(20, 380971234567)).await;
    sb.wait_status(20, "DELIVERED").await;
    let second = sb.ok(viber_text(20, 380971234567)).await;
    assert_ne!(first["msg_id"], second["msg_id"]);
    let status = sb.wait_status(20, "READ").await;
    assert_eq!(status["msg_id"], second["msg_id"]);
    assert_eq!(status["type"], "viber");
}

#[tokio::test]
async fn hlr_is_deterministic_and_fixture_shaped() {
    let sb = spawn_sandbox(test_config()).await;
    let hlr = sb
        .ok(json!({"type": "hlr", "id": 1, "phone": 380971234567_u64}))
        .await;
    assert_eq!(
        hlr,
        json!({"phone":380971234567_u64,"status":"DELIVERED","imsi":255010971234567_u64,"mccmnc":25501,"ported":true,
               "network":{"origin":{"name":"Kyivstar","prefix":97,"country":{"name":"Ukraine","prefix":380}},
                          "ported":{"name":"Vodafone Ukraine (fka MTS)","prefix":66,"country":{"name":"Ukraine","prefix":380}}}})
    );
    let again = sb
        .ok(json!({"type": "hlr", "id": 2, "phone": 380971234567_u64}))
        .await;
    assert_eq!(hlr, again);
    let even = sb
        .ok(json!({"type": "hlr", "id": 3, "phone": 380501234568_u64}))
        .await;
    assert_eq!(even["ported"], false);
    assert_eq!(even["mccmnc"], 25501);
    assert_eq!(even["network"]["origin"], even["network"]["ported"]);
    assert_eq!(even["network"]["origin"]["prefix"], 50);
    let foreign = sb
        .ok(json!({"type": "hlr", "id": 4, "phone": 48601234567_u64}))
        .await;
    assert_eq!(
        foreign["network"]["origin"]["country"],
        json!({"name": "Poland", "prefix": 48})
    );
    assert_eq!(foreign["mccmnc"], 26001);
    let dead = sb
        .ok(json!({"type": "hlr", "id": 5, "phone": 380000000002_u64}))
        .await;
    assert_eq!(dead["status"], "UNDELIVERABLE");
    assert!((sb.balance().await - (1000.0 - 5.0 * 0.1)).abs() < 1e-9);
}

#[tokio::test]
async fn voice_otp_code_is_last_four_digits_of_phone_plus_id() {
    let sb = spawn_sandbox(test_config()).await;
    let data = sb
        .ok(json!({"type": "call/otp", "id": 100500, "phone": 380971234567_u64}))
        .await;
    // (380971234567 + 100500) mod 10000 = 5067
    assert_eq!(data, json!({"code": "5067", "price": 0.2}));
    let padded = sb
        .ok(json!({"type": "call/otp", "id": 33, "phone": 380970000438_u64}))
        .await;
    assert_eq!(padded["code"], "0471");
    assert!((sb.balance().await - 999.6).abs() < 1e-9);
    assert_eq!(sb.wait_status(33, "DELIVERED").await["type"], "voice");
    assert_eq!(
        sb.err(json!({"type": "call/otp", "id": 34, "phone": 380000000001_u64}))
            .await,
        "Phone number is blocked"
    );
}
