//! Every operation and variant: the exact JSON object that reaches the gateway.

use msgw::transport::proto::{self, *};
use prost_types::Duration;
use serde_json::{Value, json};

use crate::builders::viber;
use crate::helpers::{TestApp, spawn_app};

fn viber_text() -> send_viber_request::Content {
    send_viber_request::Content::Text(ViberText {
        message: "Hello".into(),
    })
}

/// The operation msgw sent, after checking its injected hook and taking it out:
/// every send the gateway reports to a hook carries msgw's own, nothing else does.
async fn only_item(app: &TestApp) -> Value {
    let mut item = app.gateway.only_item();
    let kind = item["type"].as_str().unwrap().to_owned();
    let hook = item.as_object_mut().unwrap().remove("hook");
    let hooked = [
        "sms",
        "viber",
        "viber+sms",
        "rcs",
        "rcs+sms",
        "rcs+viber+sms",
        "telegram",
        "voice",
    ];
    if hooked.contains(&kind.as_str()) {
        let id = item["id"].as_u64().unwrap();
        assert_eq!(
            hook,
            Some(json!(app.hook_url(id))),
            "{kind} carries its hook"
        );
    } else {
        assert_eq!(hook, None, "{kind} carries no hook");
    }
    item
}

#[tokio::test]
async fn sms_with_every_field() {
    let app = spawn_app().await;
    let r = app
        .messaging()
        .send_sms(SendSmsRequest {
            priority: 0,
            max_parts: 0,
            send_at: None,
            id: 100500,
            phone: "+380971234567".into(),
            message: "Message text to be sent via SMS".into(),
            signature: "SMSTest".into(),
            lifetime: Some(Duration {
                seconds: 172800,
                nanos: 0,
            }),
            short_link: true,
            unsubscribe_link: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        only_item(&app).await,
        json!({"type": "sms", "id": 100500, "phone": 380971234567u64,
               "sms_message": "Message text to be sent via SMS", "sms_signature": "SMSTest",
               "sms_lifetime": 172800, "short_link": true, "unsubscribe_link": true})
    );
    let receipt = r.receipt.unwrap();
    assert_eq!(
        (receipt.id, receipt.msg_id.as_str(), receipt.parts),
        (100500, "123456789", 1)
    );
}

#[tokio::test]
async fn sms_minimal_sends_no_optional_fields() {
    let app = spawn_app().await;
    app.messaging()
        .send_sms(SendSmsRequest {
            id: 7,
            phone: "380971234567".into(),
            message: "Hi".into(),
            signature: "msgw".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        only_item(&app).await,
        json!({"type": "sms", "id": 7, "phone": 380971234567u64, "sms_message": "Hi", "sms_signature": "msgw"})
    );
}

async fn viber_item(content: send_viber_request::Content) -> Value {
    let app = spawn_app().await;
    app.messaging().send_viber(viber(content)).await.unwrap();
    only_item(&app).await
}

#[tokio::test]
async fn viber_text_kind() {
    assert_eq!(
        viber_item(self::viber_text()).await,
        json!({"type": "viber", "id": 1, "phone": 380971234567u64, "viber_signature": "msgw",
               "viber_type": "text", "viber_message": "Hello"})
    );
}

#[tokio::test]
async fn viber_image() {
    let item = viber_item(send_viber_request::Content::Image(ViberImage {
        image_url: "https://example.org/a.png".into(),
    }))
    .await;
    assert_eq!(
        item,
        json!({"type": "viber", "id": 1, "phone": 380971234567u64, "viber_signature": "msgw",
               "viber_type": "image", "viber_image": "https://example.org/a.png"})
    );
}

#[tokio::test]
async fn viber_text_link() {
    let item = viber_item(send_viber_request::Content::TextLink(ViberTextLink {
        message: "Sale".into(),
        link_url: "https://example.org/sale".into(),
        button: "Open".into(),
    }))
    .await;
    assert_eq!(
        item,
        json!({"type": "viber", "id": 1, "phone": 380971234567u64, "viber_signature": "msgw",
               "viber_type": "text+link", "viber_message": "Sale",
               "viber_link": "https://example.org/sale", "viber_button": "Open"})
    );
}

#[tokio::test]
async fn viber_text_image_link() {
    let item = viber_item(send_viber_request::Content::TextImageLink(
        ViberTextImageLink {
            message: "Sale".into(),
            image_url: "https://example.org/a.png".into(),
            link_url: "https://example.org/sale".into(),
            button: "Open".into(),
        },
    ))
    .await;
    assert_eq!(
        item,
        json!({"type": "viber", "id": 1, "phone": 380971234567u64, "viber_signature": "msgw",
               "viber_type": "text+image+link", "viber_message": "Sale",
               "viber_image": "https://example.org/a.png",
               "viber_link": "https://example.org/sale", "viber_button": "Open"})
    );
}

fn slide(n: u32, second: bool) -> ViberCarouselSlide {
    ViberCarouselSlide {
        caption: format!("Slide {n}"),
        image_url: format!("https://example.org/{n}.png"),
        url: format!("https://example.org/{n}"),
        button: "Buy".into(),
        button2: if second { "More".into() } else { String::new() },
        url2: if second {
            format!("https://example.org/{n}/more")
        } else {
            String::new()
        },
    }
}

#[tokio::test]
async fn viber_carousel_with_optional_second_button() {
    let item = viber_item(send_viber_request::Content::Carousel(ViberCarousel {
        message: "Pick one".into(),
        slides: vec![slide(1, true), slide(2, false)],
    }))
    .await;
    assert_eq!(
        item,
        json!({"type": "viber", "id": 1, "phone": 380971234567u64, "viber_signature": "msgw",
               "viber_type": "carousel", "viber_message": "Pick one",
               "viber_carousel": [
                   {"caption": "Slide 1", "image": "https://example.org/1.png", "url": "https://example.org/1",
                    "button": "Buy", "button2": "More", "url2": "https://example.org/1/more"},
                   {"caption": "Slide 2", "image": "https://example.org/2.png", "url": "https://example.org/2",
                    "button": "Buy"}]})
    );
}

#[tokio::test]
async fn viber_with_sms_fallback_is_viber_plus_sms() {
    let app = spawn_app().await;
    let mut req = viber(viber_text());
    req.lifetime = Some(Duration {
        seconds: 60,
        nanos: 0,
    });
    req.short_link = true;
    req.sms_fallback = Some(SmsFallback {
        message: "Hello by SMS".into(),
        signature: "msgw".into(),
    });
    app.messaging().send_viber(req).await.unwrap();
    assert_eq!(
        only_item(&app).await,
        json!({"type": "viber+sms", "id": 1, "phone": 380971234567u64, "viber_signature": "msgw",
               "viber_type": "text", "viber_message": "Hello", "viber_lifetime": 60, "short_link": true,
               "sms_message": "Hello by SMS", "sms_signature": "msgw"})
    );
}

fn rcs() -> SendRcsRequest {
    SendRcsRequest {
        id: 5,
        phone: "380971234567".into(),
        message: "Rich".into(),
        signature: "msgw".into(),
        image_url: "https://example.org/r.png".into(),
        button: "Go".into(),
        link_url: "https://example.org/go".into(),
        ..Default::default()
    }
}

fn rcs_json(kind: &str) -> Value {
    json!({"type": kind, "id": 5, "phone": 380971234567u64, "rcs_message": "Rich", "rcs_signature": "msgw",
           "rcs_image": "https://example.org/r.png", "rcs_button": "Go", "rcs_link": "https://example.org/go"})
}

fn merged(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

#[tokio::test]
async fn rcs_alone() {
    let app = spawn_app().await;
    let mut req = rcs();
    req.lifetime = Some(Duration {
        seconds: 600,
        nanos: 0,
    });
    app.messaging().send_rcs(req).await.unwrap();
    assert_eq!(
        only_item(&app).await,
        merged(rcs_json("rcs"), json!({"rcs_lifetime": 600}))
    );
}

#[tokio::test]
async fn rcs_with_sms_fallback() {
    let app = spawn_app().await;
    let mut req = rcs();
    req.sms_fallback = Some(SmsFallback {
        message: "Plain".into(),
        signature: "msgw".into(),
    });
    app.messaging().send_rcs(req).await.unwrap();
    assert_eq!(
        only_item(&app).await,
        merged(
            rcs_json("rcs+sms"),
            json!({"sms_message": "Plain", "sms_signature": "msgw"})
        )
    );
}

#[tokio::test]
async fn rcs_with_viber_then_sms_fallback() {
    let app = spawn_app().await;
    let mut req = rcs();
    req.sms_fallback = Some(SmsFallback {
        message: "Plain".into(),
        signature: "msgw".into(),
    });
    req.viber_fallback = Some(ViberFallback {
        signature: "msgwViber".into(),
        content: Some(viber_fallback::Content::TextImageLink(ViberTextImageLink {
            message: "V".into(),
            image_url: "https://example.org/v.png".into(),
            link_url: "https://example.org/v".into(),
            button: "See".into(),
        })),
    });
    app.messaging().send_rcs(req).await.unwrap();
    assert_eq!(
        only_item(&app).await,
        merged(
            rcs_json("rcs+viber+sms"),
            json!({"sms_message": "Plain", "sms_signature": "msgw", "viber_signature": "msgwViber",
                   "viber_type": "text+image+link", "viber_message": "V", "viber_image": "https://example.org/v.png",
                   "viber_link": "https://example.org/v", "viber_button": "See"})
        )
    );
}

#[tokio::test]
async fn telegram_otp() {
    let app = spawn_app().await;
    app.messaging()
        .send_telegram_otp(SendTelegramOtpRequest {
            priority: 0,
            send_at: None,
            id: 9,
            phone: "380971234567".into(),
            code: "0042".into(),
            lifetime: Some(Duration {
                seconds: 300,
                nanos: 0,
            }),
        })
        .await
        .unwrap();
    assert_eq!(
        only_item(&app).await,
        json!({"type": "telegram", "id": 9, "phone": 380971234567u64, "message": "0042", "telegram_lifetime": 300})
    );
}

#[tokio::test]
async fn voice_with_dtmf() {
    let app = spawn_app().await;
    app.messaging()
        .send_voice(SendVoiceRequest {
            priority: 0,
            send_at: None,
            id: 100500,
            phone: "380971234567".into(),
            message: "Your code is 100500".into(),
            voice: Some(VoiceProfile {
                gender: VoiceGender::Female as i32,
                language: "uk-UA".into(),
                name: "uk-UA-Standard-A".into(),
            }),
            dtmf: true,
        })
        .await
        .unwrap();
    assert_eq!(
        only_item(&app).await,
        json!({"type": "voice", "id": 100500, "phone": 380971234567u64, "message": "Your code is 100500",
               "voice": {"gender": "female", "language": "uk-UA", "name": "uk-UA-Standard-A"}, "dtmf": true})
    );
}

#[tokio::test]
async fn voice_otp_returns_code_and_fee() {
    let app = spawn_app().await;
    let r = app
        .messaging()
        .send_voice_otp(SendVoiceOtpRequest {
            priority: 0,
            send_at: None,
            id: 3,
            phone: "380971234567".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        only_item(&app).await,
        json!({"type": "call/otp", "id": 3, "phone": 380971234567u64})
    );
    assert_eq!(
        (r.code.as_str(), r.price),
        ("0471", crate::helpers::money("", 0, 200_000_000))
    );
}

#[tokio::test]
async fn pipeline_with_every_channel_in_order() {
    let app = spawn_app().await;
    let voice = VoiceProfile {
        gender: VoiceGender::Male as i32,
        language: "en-US".into(),
        name: "en-US-Standard-B".into(),
    };
    app.messaging()
        .send_pipeline(SendPipelineRequest {
            priority: 0,
            send_at: None,
            id: 11,
            phone: "+380971234567".into(),
            channels: [
                Channel::Whatsapp,
                Channel::Viber,
                Channel::Rcs,
                Channel::Telegram,
                Channel::Voice,
                Channel::Sms,
            ]
            .map(|c| c as i32)
            .to_vec(),
            sms: Some(PipelineSms {
                message: "s".into(),
                signature: "msgw".into(),
            }),
            telegram: Some(PipelineTelegram {
                code: "123456".into(),
            }),
            viber: Some(PipelineViber {
                message: "v".into(),
                signature: "msgw".into(),
                kind: ViberKind::Text as i32,
            }),
            voice: Some(PipelineVoice { voice: Some(voice) }),
            whatsapp: Some(PipelineWhatsapp {
                message: "w".into(),
                signature: "msgwWA".into(),
            }),
            rcs: Some(PipelineRcs {
                message: "r".into(),
                signature: "msgw".into(),
            }),
        })
        .await
        .unwrap();
    assert_eq!(
        only_item(&app).await,
        json!({"type": "pipeline", "id": 11, "phone": 380971234567u64,
               "pipeline": ["whatsapp", "viber", "rcs", "telegram", "voice", "sms"],
               "sms": {"message": "s", "signature": "msgw"},
               "telegram": {"message": "123456"},
               "viber": {"message": "v", "signature": "msgw", "type": "text"},
               "voice": {"gender": "male", "language": "en-US", "name": "en-US-Standard-B"},
               "whatsapp": {"message": "w", "signature": "msgwWA"},
               "rcs": {"message": "r", "signature": "msgw"}})
    );
}

#[tokio::test]
async fn account_operations() {
    let app = spawn_app().await;
    app.account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap();
    app.account()
        .list_senders(ListSendersRequest {})
        .await
        .unwrap();
    app.account()
        .lookup_hlr(LookupHlrRequest {
            id: 4,
            phone: "380971234567".into(),
        })
        .await
        .unwrap();
    app.messaging()
        .get_message_status(GetMessageStatusRequest {
            id: 10500,
            ..Default::default()
        })
        .await
        .unwrap();
    let items: Vec<Value> = app
        .gateway
        .requests()
        .iter()
        .map(|r| r.body["data"][0].clone())
        .collect();
    assert_eq!(
        items,
        [
            json!({"type": "balance"}),
            json!({"type": "sender"}),
            json!({"type": "hlr", "id": 4, "phone": 380971234567u64}),
            json!({"type": "status", "id": 10500}),
        ]
    );
}

#[tokio::test]
async fn template_operations() {
    let app = spawn_app().await;
    let mut t = app.templates();
    t.create_sms_template(CreateSmsTemplateRequest {
        text: "Code: %code%".into(),
        name: "otp".into(),
    })
    .await
    .unwrap();
    t.create_sms_template(CreateSmsTemplateRequest {
        text: "No name".into(),
        name: String::new(),
    })
    .await
    .unwrap();
    t.list_sms_templates(ListSmsTemplatesRequest {})
        .await
        .unwrap();
    t.delete_sms_templates(DeleteSmsTemplatesRequest {
        id: "17".into(),
        text: String::new(),
    })
    .await
    .unwrap();
    t.delete_sms_templates(DeleteSmsTemplatesRequest {
        id: String::new(),
        text: "No name".into(),
    })
    .await
    .unwrap();
    t.create_viber_template(CreateViberTemplateRequest {
        text: "Hi {name}".into(),
        signature: "msgw".into(),
    })
    .await
    .unwrap();
    t.list_viber_templates(ListViberTemplatesRequest {})
        .await
        .unwrap();
    t.delete_viber_templates(DeleteViberTemplatesRequest {
        id: 8,
        text: "Hi {name}".into(),
    })
    .await
    .unwrap();
    let items: Vec<Value> = app
        .gateway
        .requests()
        .iter()
        .map(|r| r.body["data"][0].clone())
        .collect();
    assert_eq!(
        items,
        [
            json!({"type": "template/create", "template": "Code: %code%", "name": "otp"}),
            json!({"type": "template/create", "template": "No name"}),
            json!({"type": "template/list"}),
            json!({"type": "template/delete", "id": "17"}),
            json!({"type": "template/delete", "template": "No name"}),
            json!({"type": "template/viber/create", "template": "Hi {name}", "signature": "msgw"}),
            json!({"type": "template/viber/list"}),
            json!({"type": "template/viber/delete", "id": 8, "template": "Hi {name}"}),
        ]
    );
}

#[tokio::test]
async fn batch_sends_one_envelope_and_answers_in_order() {
    let app = spawn_app().await;
    let items = vec![
        BatchItem {
            operation: Some(batch_item::Operation::SendSms(SendSmsRequest {
                id: 2,
                phone: "380971234567".into(),
                message: "a".into(),
                signature: "msgw".into(),
                ..Default::default()
            })),
        },
        BatchItem {
            operation: Some(batch_item::Operation::GetBalance(GetBalanceRequest {})),
        },
        BatchItem {
            operation: Some(batch_item::Operation::SendViber(viber(viber_text()))),
        },
    ];
    let r = app
        .messaging()
        .batch(BatchRequest { items })
        .await
        .unwrap()
        .into_inner();
    let requests = app.gateway.requests();
    assert_eq!(requests.len(), 1);
    let types: Vec<&str> = requests[0].body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["sms", "balance", "viber"]);
    assert_eq!(r.results.len(), 3);
    assert!(
        r.results
            .iter()
            .all(|r| r.status.as_ref().unwrap().code == 0)
    );
    assert!(matches!(
        r.results[0].result,
        Some(batch_result::Result::SendSms(_))
    ));
    match &r.results[1].result {
        Some(batch_result::Result::GetBalance(b)) => {
            assert_eq!(b.amount.as_ref().unwrap().currency_code, "UAH")
        }
        other => panic!("expected a balance, got {other:?}"),
    }
    assert!(matches!(
        r.results[2].result,
        Some(batch_result::Result::SendViber(_))
    ));
}

#[tokio::test]
async fn documented_sms_request_is_reproduced_exactly() {
    // The gateway's documented SMS request (docs/gateway.md#sms), minus the hook msgw
    // injects itself.
    let app = spawn_app().await;
    app.messaging()
        .send_sms(proto::SendSmsRequest {
            priority: 0,
            max_parts: 0,
            send_at: None,
            id: 100500,
            phone: "380971234567".into(),
            message: "Message text to be sent via SMS".into(),
            signature: "SMSTest".into(),
            lifetime: Some(Duration {
                seconds: 172800,
                nanos: 0,
            }),
            short_link: true,
            unsubscribe_link: false,
        })
        .await
        .unwrap();
    let documented: Value = serde_json::from_str(
        r#"{"type":"sms","id":100500,"phone":380971234567,"sms_signature":"SMSTest","sms_message":"Message text to be sent via SMS","sms_lifetime":172800,"short_link":true}"#,
    )
    .unwrap();
    assert_eq!(only_item(&app).await, documented);
}
