//! The sandbox's HTTP surface, envelope and non-delivery operations.

use std::time::Duration;

use crate::common::*;
use msgw::sandbox::SandboxConfig;
use serde_json::{Value, json};

const KEY: &str = "sandbox-api-key";

#[tokio::test]
async fn documented_sms_request_gets_fixture_shaped_answer() {
    // A long step delay keeps the sandbox from ever calling the documented
    // public hook URL: the server stops before the message is final.
    let sb = spawn_sandbox(SandboxConfig {
        step_delay: Duration::from_secs(3600),
        ..test_config()
    })
    .await;
    let raw = r#"{"auth":"sandbox-api-key","data":[{"type":"sms","id":100500,"phone":380971234567,"sms_signature":"SMSTest","sms_message":"Message text to be sent via SMS","sms_lifetime":172800,"short_link":true,"hook":"https://example.org/webhook/url.php"}]}"#;
    let reply = sb.post_raw(Some("application/json"), raw).await;
    let msg_id = reply["data"][0]["data"]["msg_id"].clone();
    assert!(msg_id.is_u64(), "msg_id is a number: {reply}");
    assert_eq!(
        reply,
        json!({"success":true,"data":[{"success":true,"data":{"id":100500,"msg_id":msg_id,"data":1,"parts":1}}]})
    );
    let status = sb.ok(json!({"type": "status", "id": 100500})).await;
    assert_eq!(status["status"], "ACCEPTED");
    sb.stop().await;
}

#[tokio::test]
async fn refuses_requests_without_json_content_type() {
    let sb = spawn_sandbox(test_config()).await;
    let body = json!({"auth": KEY, "data": [{"type": "balance"}]}).to_string();
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let reply = sb.post_raw(ct, body.clone()).await;
        assert_eq!(
            reply,
            json!({"success": false, "error": "Content-Type must be application/json"}),
            "content type {ct:?}"
        );
    }
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let reply = sb.post_raw(Some(ct), body.clone()).await;
        assert_eq!(reply["success"], true, "content type {ct}: {reply}");
    }
}

#[tokio::test]
async fn unknown_key_is_access_denied() {
    let sb = spawn_sandbox(test_config()).await;
    let reply = sb
        .envelope(json!({"auth": "wrong", "data": [{"type": "balance"}]}))
        .await;
    assert_eq!(reply, json!({"success": false, "error": "Access denied"}));
}

#[tokio::test]
async fn malformed_envelopes_get_clear_errors() {
    let sb = spawn_sandbox(test_config()).await;
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "not json",
            "{not json".into(),
            "Request body is not valid JSON",
        ),
        (
            "empty body",
            String::new(),
            "Request body is not valid JSON",
        ),
        (
            "array body",
            "[]".into(),
            "Request body must be a JSON object with auth and data",
        ),
        (
            "missing auth",
            json!({"data": [{"type": "balance"}]}).to_string(),
            "Missing auth",
        ),
        (
            "numeric auth",
            json!({"auth": 1, "data": []}).to_string(),
            "auth must be a string",
        ),
        (
            "missing data",
            json!({"auth": KEY}).to_string(),
            "Missing data",
        ),
        (
            "empty data",
            json!({"auth": KEY, "data": []}).to_string(),
            "data must be a non-empty array",
        ),
        (
            "object data",
            json!({"auth": KEY, "data": {"type": "balance"}}).to_string(),
            "data must be a non-empty array",
        ),
        (
            "too large",
            format!(
                "{{\"auth\":\"{KEY}\",\"data\":[{{\"type\":\"balance\",\"pad\":\"{}\"}}]}}",
                "x".repeat(1024 * 1024)
            ),
            "Request body is larger than 1 MiB",
        ),
    ];
    for (name, body, error) in cases {
        let reply = sb.post_raw(Some("application/json"), body).await;
        assert_eq!(
            reply,
            json!({"success": false, "error": error}),
            "case {name}"
        );
    }
}

#[tokio::test]
async fn whatsapp_and_unknown_types_are_invalid_message_type() {
    let sb = spawn_sandbox(test_config()).await;
    let whatsapp = json!({"type": "whatsapp", "id": 7, "phone": 380971234567_u64,
                          "whatsapp": {"message": "hi", "signature": "msgw"}});
    assert_eq!(
        sb.op(whatsapp).await,
        json!({"success": false, "error": "Invalid message type", "data": {"id": 7}})
    );
    for op in [
        json!({"type": "fax", "id": 8}),
        json!({"type": 5}),
        json!({"type": "SMS"}),
    ] {
        assert_eq!(sb.err(op).await, "Invalid message type");
    }
    assert_eq!(sb.err(json!({"id": 9})).await, "Missing type");
    let items = sb.ops(vec![json!("balance")]).await;
    assert_eq!(
        items[0],
        json!({"success": false, "error": "Invalid operation: expected an object"})
    );
}

#[tokio::test]
async fn several_operations_are_answered_in_order_each_on_its_own() {
    let sb = spawn_sandbox(test_config()).await;
    let items = sb
        .ops(vec![
            json!({"type": "balance"}),
            json!({"type": "sms", "id": 1, "phone": 380971234567_u64, "sms_message": "x", "sms_signature": "nobody"}),
            sms(2, 380971234567),
            json!({"type": "sender"}),
            json!({"type": "whatsapp", "id": 3}),
        ])
        .await;
    assert_eq!(items.len(), 5);
    assert_eq!(items[0]["data"]["currency"], "UAH");
    assert_eq!(
        items[1],
        json!({"success": false, "error": "Error in Sender-name", "data": {"id": 1}})
    );
    assert_eq!(items[2]["success"], true);
    assert_eq!(items[2]["data"]["id"], 2);
    assert_eq!(items[3]["data"][0]["name"], "msgw");
    assert_eq!(items[4]["error"], "Invalid message type");
}

/// A valid operation of every send type, with the parts it bills.
fn every_send() -> Vec<(&'static str, Value)> {
    let phone = 380971234567_u64;
    let slide = json!({"caption": "c", "image": "https://e.org/i.png", "url": "https://e.org", "button": "Go"});
    let rcs = json!({"rcs_message": "m", "rcs_signature": "msgw", "rcs_image": "https://e.org/i.png",
                     "rcs_button": "Go", "rcs_link": "https://e.org", "rcs_lifetime": 60});
    let merge = |base: &Value, extra: Value| {
        let mut out = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            out[k] = v.clone();
        }
        out
    };
    let viber = json!({"phone": phone, "viber_signature": "msgw"});
    vec![
        ("sms", sms(1, phone)),
        (
            "viber text",
            merge(
                &viber,
                json!({"type": "viber", "id": 2, "viber_type": "text", "viber_message": "m", "viber_lifetime": 60}),
            ),
        ),
        (
            "viber image",
            merge(
                &viber,
                json!({"type": "viber", "id": 3, "viber_type": "image", "viber_image": "https://e.org/i.png"}),
            ),
        ),
        (
            "viber text+link",
            merge(
                &viber,
                json!({"type": "viber", "id": 4, "viber_type": "text+link", "viber_message": "m", "viber_link": "https://e.org", "viber_button": "Go"}),
            ),
        ),
        (
            "viber text+image+link",
            merge(
                &viber,
                json!({"type": "viber", "id": 5, "viber_type": "text+image+link", "viber_message": "m", "viber_image": "https://e.org/i.png", "viber_link": "https://e.org", "viber_button": "Go"}),
            ),
        ),
        (
            "viber carousel",
            merge(
                &viber,
                json!({"type": "viber", "id": 6, "viber_type": "carousel", "viber_message": "m",
            "viber_carousel": [slide, merge(&slide, json!({"button2": "More", "url2": "https://e.org/2"}))]}),
            ),
        ),
        (
            "viber+sms",
            merge(
                &viber,
                json!({"type": "viber+sms", "id": 7, "viber_type": "text", "viber_message": "m", "sms_message": "s", "sms_signature": "SMSTest", "short_link": false}),
            ),
        ),
        (
            "rcs",
            merge(&rcs, json!({"type": "rcs", "id": 8, "phone": phone})),
        ),
        (
            "rcs+sms",
            merge(
                &rcs,
                json!({"type": "rcs+sms", "id": 9, "phone": phone, "sms_message": "s", "sms_signature": "msgw"}),
            ),
        ),
        (
            "rcs+viber+sms",
            merge(
                &rcs,
                json!({"type": "rcs+viber+sms", "id": 10, "phone": phone, "sms_message": "s", "sms_signature": "msgw",
            "viber_signature": "msgw", "viber_type": "image", "viber_image": "https://e.org/i.png"}),
            ),
        ),
        (
            "telegram",
            json!({"type": "telegram", "id": 11, "phone": phone, "message": "123456", "telegram_lifetime": 60}),
        ),
        (
            "voice",
            json!({"type": "voice", "id": 12, "phone": phone, "message": "Your code is 100500",
            "voice": {"gender": "female", "language": "uk-UA", "name": "uk-UA-Standard-A"}, "dtmf": false}),
        ),
        (
            "pipeline",
            json!({"type": "pipeline", "id": 13, "phone": phone,
            "pipeline": ["voice", "telegram", "viber", "rcs", "sms", "whatsapp"],
            "voice": {"gender": "male", "language": "en-US", "name": "en-US-Standard-B"},
            "telegram": {"message": "1234"},
            "viber": {"message": "m", "signature": "msgw", "type": "text"},
            "rcs": {"message": "m", "signature": "msgw"},
            "sms": {"message": "m", "signature": "msgw"},
            "whatsapp": {}}),
        ),
    ]
}

#[tokio::test]
async fn every_send_type_is_accepted_with_the_fixture_shape() {
    let sb = spawn_sandbox(test_config()).await;
    for (name, op) in every_send() {
        let id = op["id"].clone();
        let data = sb.ok(op).await;
        let keys: Vec<&String> = data.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["data", "id", "msg_id", "parts"], "{name}");
        assert_eq!(data["id"], id, "{name}");
        assert!(data["msg_id"].is_u64(), "{name}");
        assert_eq!(data["data"], 1, "{name}");
        assert_eq!(data["parts"], 1, "{name}");
    }
}

#[tokio::test]
async fn senders_are_listed_as_verified() {
    let sb = spawn_sandbox(test_config()).await;
    assert_eq!(
        sb.ok(json!({"type": "sender"})).await,
        json!([{"name": "msgw", "status": "Verified by operator"}, {"name": "SMSTest", "status": "Verified by operator"}])
    );
}

#[tokio::test]
async fn unregistered_signatures_are_sender_name_errors() {
    let sb = spawn_sandbox(test_config()).await;
    let fixture =
        json!({"success": false, "error": "Error in Sender-name", "data": {"id": 100500}});
    let mut bad_sms = sms(100500, 380971234567);
    bad_sms["sms_signature"] = json!("Unknown");
    assert_eq!(sb.op(bad_sms).await, fixture);
    let mut bad_fallback = viber_text(100500, 380971234567);
    bad_fallback["type"] = json!("viber+sms");
    bad_fallback["sms_message"] = json!("s");
    bad_fallback["sms_signature"] = json!("msgw ");
    assert_eq!(sb.op(bad_fallback).await, fixture);
    let pipeline = json!({"type": "pipeline", "id": 100500, "phone": 380971234567_u64, "pipeline": ["viber", "sms"],
        "viber": {"message": "m", "signature": "msgw", "type": "text"}, "sms": {"message": "m", "signature": "smstest"}});
    assert_eq!(sb.op(pipeline).await, fixture);
    let mut rcs = every_send()
        .into_iter()
        .find(|(n, _)| *n == "rcs")
        .unwrap()
        .1;
    rcs["rcs_signature"] = json!("Other");
    assert_eq!(sb.err(rcs).await, "Error in Sender-name");
    // Magic number 4 fails whatever the signature.
    assert_eq!(sb.err(sms(5, 380000000004)).await, "Error in Sender-name");
    assert_eq!(sb.balance().await, 1000.0, "refused sends are not billed");
}
