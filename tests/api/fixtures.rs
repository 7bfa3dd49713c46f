//! The gateway's published fixtures (docs/gateway.md#fixtures), decoded into typed responses.

use msgw::transport::proto::*;
use serde_json::{Value, json};

use crate::helpers::spawn_app;

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).expect("fixture is JSON")
}

fn ts(rfc3339: &str) -> prost_types::Timestamp {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).unwrap();
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: 0,
    }
}

#[tokio::test]
async fn balance_fixture() {
    let app = spawn_app().await;
    app.gateway.respond_json(fixture(
        r#"{"success":true,"data":[{"success":true,"data":{"amount":31.1683,"currency":"UAH"}}]}"#,
    ));
    let r = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap()
        .into_inner();
    // Exactly: 31.1683 is units 31 and nanos 168300000, not a float near it.
    assert_eq!(r.amount, crate::helpers::money("UAH", 31, 168_300_000));
    let raw = r.raw.unwrap();
    let Some(prost_types::value::Kind::StructValue(s)) = raw.kind else {
        panic!("raw is an object")
    };
    assert!(s.fields.contains_key("amount") && s.fields.contains_key("currency"));
}

#[tokio::test]
async fn send_fixture() {
    let app = spawn_app().await;
    app.gateway.respond_json(fixture(
        r#"{"success":true,"data":[{"success":true,"data":{"id":100500,"msg_id":123456789,"data":1,"parts":1}}]}"#,
    ));
    let r = app
        .messaging()
        .send_sms(SendSmsRequest {
            id: 100500,
            phone: "380971234567".into(),
            message: "x".into(),
            signature: "SMSTest".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.receipt,
        Some(SendReceipt {
            scheduled_for: None,
            id: 100500,
            msg_id: "123456789".into(),
            parts: 1
        })
    );
}

/// The published fixture, and the code as a number (its leading zero restored from the
/// four digits a voice OTP always has) with the price as a string.
#[tokio::test]
async fn voice_otp_fixtures() {
    let app = spawn_app().await;
    for answer in [
        fixture(r#"{"success":true,"data":[{"success":true,"data":{"code":"0471","price":0.2}}]}"#),
        json!({"success":true,"data":[{"success":true,"data":{"code":471,"price":"0.2"}}]}),
    ] {
        app.gateway.respond_json(answer.clone());
        let r = app
            .messaging()
            .send_voice_otp(SendVoiceOtpRequest {
                priority: 0,
                send_at: None,
                id: app.gateway.requests().len() as u64 + 1,
                phone: "380971234567".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (r.code.as_str(), r.price),
            ("0471", crate::helpers::money("", 0, 200_000_000)),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn status_read_fixture() {
    let app = spawn_app().await;
    app.gateway.respond_json(fixture(
        r#"{"success":true,"data":[{"success":true,"data":{"id":10500,"type":"viber","status":"READ"}}]}"#,
    ));
    let r = app
        .messaging()
        .get_message_status(GetMessageStatusRequest {
            id: 10500,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.id, 10500);
    assert_eq!(r.channel(), Channel::Viber);
    assert_eq!(r.raw_channel, "viber");
    assert_eq!(r.status(), MessageStatus::Read);
    assert_eq!(r.raw_status, "READ");
}

#[tokio::test]
async fn status_replied_fixture_with_text_and_media_replies() {
    let app = spawn_app().await;
    app.gateway.respond_json(fixture(
        r#"{"success":true,"data":[{"success":true,"data":{"id":10500,"type":"viber","status":"REPLIED","replies":[{"datetime":"2022-05-01T12:01:02+03:00","message":"Please wait"},{"datetime":"2022-05-03T14:21:17+03:00","media":{"url":"https://url.com/home/vibermedia/","filename":"invoice.pdf","filesize":67983}}]}}]}"#,
    ));
    let r = app
        .messaging()
        .get_message_status(GetMessageStatusRequest {
            id: 10500,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status(), MessageStatus::Replied);
    assert_eq!(
        r.replies,
        vec![
            Reply {
                datetime: Some(ts("2022-05-01T12:01:02+03:00")),
                message: "Please wait".into(),
                media: None
            },
            Reply {
                datetime: Some(ts("2022-05-03T14:21:17+03:00")),
                message: String::new(),
                media: Some(Media {
                    url: "https://url.com/home/vibermedia/".into(),
                    filename: "invoice.pdf".into(),
                    filesize: 67983
                }),
            },
        ]
    );
}

#[tokio::test]
async fn status_with_string_ids_unknown_status_and_extra_fields() {
    let app = spawn_app().await;
    app.gateway
        .respond_json(json!({"success":true,"data":[{"success":true,"data":{
        "id":"10500","msg_id":"987","type":"whatsapp","status":"ON HOLD",
        "updated":"2024-01-02T03:04:05+00:00","brand_new_field":{"x":1}}}]}));
    let r = app
        .messaging()
        .get_message_status(GetMessageStatusRequest {
            id: 10500,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.id, r.msg_id.as_str()), (10500, "987"));
    assert_eq!(r.channel(), Channel::Whatsapp);
    assert_eq!(r.status(), MessageStatus::Unspecified);
    assert_eq!(r.raw_status, "ON HOLD");
    assert_eq!(r.updated, Some(ts("2024-01-02T03:04:05+00:00")));
    let Some(prost_types::value::Kind::StructValue(raw)) = r.raw.unwrap().kind else {
        panic!()
    };
    assert!(
        raw.fields.contains_key("brand_new_field"),
        "unknown fields stay reachable in raw"
    );
}

#[tokio::test]
async fn hlr_fixture() {
    let app = spawn_app().await;
    app.gateway.respond_json(fixture(
        r#"{"success":true,"data":[{"success":true,"data":{"phone":380971234567,"status":"DELIVERED","imsi":255010000000000,"mccmnc":25501,"ported":true,"network":{"origin":{"name":"Kyivstar","prefix":97,"country":{"name":"Ukraine","prefix":380}},"ported":{"name":"Vodafone Ukraine (fka MTS)","prefix":66,"country":{"name":"Ukraine","prefix":380}}}}}]}"#,
    ));
    let r = app
        .account()
        .lookup_hlr(LookupHlrRequest {
            id: 1,
            phone: "380971234567".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let ukraine = Some(Country {
        name: "Ukraine".into(),
        prefix: 380,
    });
    assert_eq!(r.phone, "380971234567");
    assert_eq!(
        (r.status(), r.raw_status.as_str()),
        (MessageStatus::Delivered, "DELIVERED")
    );
    assert_eq!(
        (r.imsi.as_str(), r.mccmnc.as_str(), r.ported),
        ("255010000000000", "25501", true)
    );
    assert_eq!(
        r.origin_network,
        Some(Network {
            name: "Kyivstar".into(),
            prefix: 97,
            country: ukraine.clone()
        })
    );
    assert_eq!(
        r.ported_network,
        Some(Network {
            name: "Vodafone Ukraine (fka MTS)".into(),
            prefix: 66,
            country: ukraine
        })
    );
}

#[tokio::test]
async fn senders_templates_and_deletes() {
    let app = spawn_app().await;
    app.gateway.respond_with(|body| {
        let payload = match body["data"][0]["type"].as_str().unwrap() {
            "sender" => json!([{"name":"msgw","status":"Verified by operator"},{"name":"Other","status":"On moderation"}]),
            "template/create" => json!({"id":17,"name":"otp","template":"Code %code%","chars":11,"parts":1}),
            "template/list" => json!([{"id":"17","name":"otp","text":"Code %code%","chars":11,"parts":1,"created":"2024-05-01T10:00:00+03:00"}]),
            "template/viber/create" => json!({"id":5,"status":"moderation"}),
            "template/viber/list" => json!([{"id":5,"template":"Hi","signature":"msgw","status":"approved"}]),
            _ => json!({"deleted":2}),
        };
        crate::helpers::Reply::Json(json!({"success":true,"data":[{"success":true,"data":payload}]}))
    });
    let senders = app
        .account()
        .list_senders(ListSendersRequest {})
        .await
        .unwrap()
        .into_inner()
        .senders;
    assert_eq!(
        senders,
        vec![
            Sender {
                name: "msgw".into(),
                status: "Verified by operator".into()
            },
            Sender {
                name: "Other".into(),
                status: "On moderation".into()
            }
        ]
    );
    let mut t = app.templates();
    let created = t
        .create_sms_template(CreateSmsTemplateRequest {
            text: "Code %code%".into(),
            name: "otp".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .template
        .unwrap();
    assert_eq!(
        (
            created.id.as_str(),
            created.name.as_str(),
            created.text.as_str()
        ),
        ("17", "otp", "Code %code%")
    );
    assert_eq!((created.chars, created.parts), (11, 1));
    let listed = t
        .list_sms_templates(ListSmsTemplatesRequest {})
        .await
        .unwrap()
        .into_inner()
        .templates;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].text, "Code %code%");
    assert_eq!(listed[0].create_time, Some(ts("2024-05-01T10:00:00+03:00")));
    let viber = t
        .create_viber_template(CreateViberTemplateRequest {
            text: "Hi".into(),
            signature: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .template
        .unwrap();
    assert_eq!((viber.id, viber.status.as_str()), (5, "moderation"));
    let vlist = t
        .list_viber_templates(ListViberTemplatesRequest {})
        .await
        .unwrap()
        .into_inner()
        .templates;
    assert_eq!(
        (
            vlist[0].id,
            vlist[0].text.as_str(),
            vlist[0].signature.as_str(),
            vlist[0].status.as_str()
        ),
        (5, "Hi", "msgw", "approved")
    );
    let deleted = t
        .delete_viber_templates(DeleteViberTemplatesRequest {
            id: 5,
            text: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .deleted;
    assert_eq!(deleted, 2);
}
