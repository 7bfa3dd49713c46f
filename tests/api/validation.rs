//! Every validation rule of docs/gateway.md#validation-rules: INVALID_ARGUMENT naming
//! every violated field, and not a single request to the gateway.

use msgw::transport::proto::*;
use prost_types::Duration;

use crate::builders::{sms, viber};
use crate::helpers::{TestApp, spawn_app, violations};

/// Runs `call` against a fresh msgw, expects INVALID_ARGUMENT, checks that the
/// gateway saw nothing, and returns the violated field paths.
macro_rules! refused {
    (|$app:ident| $call:expr) => {{
        let $app: TestApp = spawn_app().await;
        let status = $call.await.expect_err("request must be refused");
        let fields = violations(&status);
        assert!(
            $app.gateway.requests().is_empty(),
            "nothing may reach the gateway"
        );
        fields
    }};
}

fn secs(seconds: i64) -> Option<Duration> {
    Some(Duration { seconds, nanos: 0 })
}

fn full_slide() -> ViberCarouselSlide {
    ViberCarouselSlide {
        caption: "c".into(),
        image_url: "https://example.org/i.png".into(),
        url: "https://example.org/u".into(),
        button: "b".into(),
        ..Default::default()
    }
}

fn carousel(slides: Vec<ViberCarouselSlide>) -> send_viber_request::Content {
    send_viber_request::Content::Carousel(ViberCarousel {
        message: "m".into(),
        slides,
    })
}

/// Sends each request to one msgw: every one is refused INVALID_ARGUMENT naming
/// exactly `fields`, and the gateway sees nothing.
async fn refuses_each<R, F, Fut>(cases: Vec<(&str, R, &[&str])>, call: F)
where
    F: Fn(&TestApp, R) -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let app: TestApp = spawn_app().await;
    for (case, request, fields) in cases {
        let status = call(&app, request).await.expect_err(case);
        assert_eq!(violations(&status), fields, "{case}");
    }
    assert!(
        app.gateway.requests().is_empty(),
        "nothing may reach the gateway"
    );
}

fn send_sms(
    app: &TestApp,
    r: SendSmsRequest,
) -> impl Future<Output = Result<(), tonic::Status>> + use<> {
    let mut client = app.messaging();
    async move { client.send_sms(r).await.map(drop) }
}

fn send_viber(
    app: &TestApp,
    r: SendViberRequest,
) -> impl Future<Output = Result<(), tonic::Status>> + use<> {
    let mut client = app.messaging();
    async move { client.send_viber(r).await.map(drop) }
}

#[tokio::test]
async fn sms_violating_a_rule_is_refused_naming_each_field() {
    let lifetime = |l| SendSmsRequest {
        lifetime: l,
        ..sms(1)
    };
    let phone = |p: &str| SendSmsRequest {
        phone: p.into(),
        ..sms(1)
    };
    let cases: Vec<(&str, SendSmsRequest, &[&str])> = vec![
        ("id zero", SendSmsRequest { id: 0, ..sms(1) }, &["id"]),
        ("phone with letters", phone("38097abc4567"), &["phone"]),
        ("phone too short", phone("+123456"), &["phone"]),
        ("phone too long", phone("1234567890123456"), &["phone"]),
        ("phone with a leading zero", phone("0971234567"), &["phone"]),
        (
            "empty text and signature",
            SendSmsRequest {
                message: " ".into(),
                signature: String::new(),
                ..sms(1)
            },
            &["message", "signature"],
        ),
        (
            "lifetime under an hour",
            lifetime(secs(3599)),
            &["lifetime"],
        ),
        (
            "lifetime over 3 days",
            lifetime(secs(259_201)),
            &["lifetime"],
        ),
        (
            "fractional lifetime",
            lifetime(Some(Duration {
                seconds: 3600,
                nanos: 5,
            })),
            &["lifetime"],
        ),
        ("negative lifetime", lifetime(secs(-3600)), &["lifetime"]),
    ];
    refuses_each(cases, send_sms).await;
}

#[tokio::test]
async fn viber_violating_a_rule_is_refused_naming_each_field() {
    use send_viber_request::Content;
    let text = || {
        Content::Text(ViberText {
            message: "m".into(),
        })
    };
    let slides = |slides| viber(carousel(slides));
    let cases: Vec<(&str, SendViberRequest, &[&str])> = vec![
        (
            "lifetime under a minute",
            SendViberRequest {
                lifetime: secs(59),
                ..viber(text())
            },
            &["lifetime"],
        ),
        (
            "no content",
            SendViberRequest {
                content: None,
                ..viber(carousel(vec![]))
            },
            &["content"],
        ),
        (
            "text without message",
            viber(Content::Text(ViberText::default())),
            &["text.message"],
        ),
        (
            "image without image",
            viber(Content::Image(ViberImage::default())),
            &["image.image_url"],
        ),
        (
            "text and link missing fields",
            viber(Content::TextLink(ViberTextLink::default())),
            &[
                "text_link.message",
                "text_link.link_url",
                "text_link.button",
            ],
        ),
        (
            "text, image and link missing fields",
            viber(Content::TextImageLink(ViberTextImageLink::default())),
            &[
                "text_image_link.message",
                "text_image_link.image_url",
                "text_image_link.link_url",
                "text_image_link.button",
            ],
        ),
        (
            "link that is not http",
            viber(Content::TextLink(ViberTextLink {
                message: "m".into(),
                link_url: "ftp://example.org/x".into(),
                button: "b".into(),
            })),
            &["text_link.link_url"],
        ),
        (
            "relative image URL",
            viber(Content::Image(ViberImage {
                image_url: "/relative.png".into(),
            })),
            &["image.image_url"],
        ),
        (
            "carousel with one slide",
            slides(vec![full_slide()]),
            &["carousel.slides"],
        ),
        (
            "carousel with six slides",
            slides(vec![full_slide(); 6]),
            &["carousel.slides"],
        ),
        (
            "carousel without message",
            viber(Content::Carousel(ViberCarousel {
                message: String::new(),
                slides: vec![full_slide(), full_slide()],
            })),
            &["carousel.message"],
        ),
        (
            "incomplete slide",
            slides(vec![full_slide(), ViberCarouselSlide::default()]),
            &[
                "carousel.slides[1].caption",
                "carousel.slides[1].image_url",
                "carousel.slides[1].url",
                "carousel.slides[1].button",
            ],
        ),
        (
            "second button without its URL and the other way round",
            slides(vec![
                ViberCarouselSlide {
                    button2: "More".into(),
                    ..full_slide()
                },
                ViberCarouselSlide {
                    url2: "https://example.org/more".into(),
                    ..full_slide()
                },
            ]),
            &["carousel.slides[0].url2", "carousel.slides[1].button2"],
        ),
        (
            "incomplete SMS fallback",
            SendViberRequest {
                sms_fallback: Some(SmsFallback {
                    message: String::new(),
                    signature: "msgw".into(),
                }),
                ..viber(text())
            },
            &["sms_fallback.message"],
        ),
    ];
    refuses_each(cases, send_viber).await;
}

fn rcs() -> SendRcsRequest {
    SendRcsRequest {
        id: 1,
        phone: "380971234567".into(),
        message: "m".into(),
        signature: "msgw".into(),
        image_url: "https://example.org/i.png".into(),
        button: "b".into(),
        link_url: "https://example.org/l".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn rejects_rcs_missing_required_fields() {
    let f = refused!(|app| app.messaging().send_rcs(SendRcsRequest {
        id: 1,
        phone: "380971234567".into(),
        ..Default::default()
    }));
    assert_eq!(
        f,
        ["message", "signature", "image_url", "button", "link_url"]
    );
}

#[tokio::test]
async fn rejects_rcs_lifetime_under_a_minute() {
    let f = refused!(|app| app.messaging().send_rcs(SendRcsRequest {
        lifetime: secs(30),
        ..rcs()
    }));
    assert_eq!(f, ["lifetime"]);
}

#[tokio::test]
async fn rejects_rcs_viber_fallback_without_sms_fallback() {
    let f = refused!(|app| app.messaging().send_rcs(SendRcsRequest {
        viber_fallback: Some(ViberFallback {
            signature: "msgw".into(),
            content: Some(viber_fallback::Content::Text(ViberText {
                message: "v".into()
            })),
        }),
        ..rcs()
    }));
    assert_eq!(f, ["sms_fallback"]);
}

#[tokio::test]
async fn rejects_rcs_viber_fallback_breaking_viber_rules() {
    let f = refused!(|app| app.messaging().send_rcs(SendRcsRequest {
        viber_fallback: Some(ViberFallback {
            signature: String::new(),
            content: Some(viber_fallback::Content::Carousel(ViberCarousel {
                message: "m".into(),
                slides: vec![full_slide()]
            })),
        }),
        sms_fallback: Some(SmsFallback {
            message: "s".into(),
            signature: "msgw".into()
        }),
        ..rcs()
    }));
    assert_eq!(
        f,
        ["viber_fallback.signature", "viber_fallback.carousel.slides"]
    );
}

fn telegram(code: &str) -> SendTelegramOtpRequest {
    SendTelegramOtpRequest {
        priority: 0,
        send_at: None,
        id: 1,
        phone: "380971234567".into(),
        code: code.into(),
        lifetime: None,
    }
}

#[tokio::test]
async fn rejects_telegram_code_not_four_to_eight_digits() {
    for bad in ["123", "123456789", "12a4", ""] {
        let f = refused!(|app| app.messaging().send_telegram_otp(telegram(bad)));
        assert_eq!(f, ["code"], "{bad:?}");
    }
}

#[tokio::test]
async fn rejects_telegram_lifetime_under_a_minute() {
    let f = refused!(
        |app| app.messaging().send_telegram_otp(SendTelegramOtpRequest {
            lifetime: secs(59),
            ..telegram("1234")
        })
    );
    assert_eq!(f, ["lifetime"]);
}

#[tokio::test]
async fn rejects_voice_without_profile_or_gender() {
    let base = SendVoiceRequest {
        priority: 0,
        send_at: None,
        id: 1,
        phone: "380971234567".into(),
        message: "m".into(),
        voice: None,
        dtmf: false,
    };
    let f = refused!(|app| app.messaging().send_voice(base.clone()));
    assert_eq!(f, ["voice"]);
    let f = refused!(|app| app.messaging().send_voice(SendVoiceRequest {
        voice: Some(VoiceProfile {
            gender: 0,
            language: String::new(),
            name: "n".into()
        }),
        ..base.clone()
    }));
    assert_eq!(f, ["voice.gender", "voice.language"]);
}

fn pipeline(channels: &[Channel]) -> SendPipelineRequest {
    SendPipelineRequest {
        id: 1,
        phone: "380971234567".into(),
        channels: channels.iter().map(|c| *c as i32).collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn rejects_empty_pipeline() {
    let f = refused!(|app| app.messaging().send_pipeline(pipeline(&[])));
    assert_eq!(f, ["channels"]);
}

#[tokio::test]
async fn rejects_repeated_pipeline_channel() {
    let f = refused!(|app| app.messaging().send_pipeline(SendPipelineRequest {
        sms: Some(PipelineSms {
            message: "s".into(),
            signature: "msgw".into()
        }),
        ..pipeline(&[Channel::Sms, Channel::Sms])
    }));
    assert_eq!(f, ["channels[1]"]);
}

#[tokio::test]
async fn rejects_unspecified_pipeline_channel() {
    let f = refused!(|app| app
        .messaging()
        .send_pipeline(pipeline(&[Channel::Unspecified])));
    assert_eq!(f, ["channels[0]"]);
}

#[tokio::test]
async fn rejects_pipeline_channel_without_settings() {
    let f = refused!(|app| app.messaging().send_pipeline(pipeline(&[
        Channel::Whatsapp,
        Channel::Voice,
        Channel::Telegram,
        Channel::Viber,
        Channel::Rcs,
        Channel::Sms
    ])));
    assert_eq!(f, ["whatsapp", "voice", "telegram", "viber", "rcs", "sms"]);
}

#[tokio::test]
async fn rejects_pipeline_settings_of_unlisted_channel() {
    let f = refused!(|app| app.messaging().send_pipeline(SendPipelineRequest {
        sms: Some(PipelineSms {
            message: "s".into(),
            signature: "msgw".into()
        }),
        viber: Some(PipelineViber {
            message: "v".into(),
            signature: "msgw".into(),
            kind: ViberKind::Text as i32
        }),
        ..pipeline(&[Channel::Sms])
    }));
    assert_eq!(f, ["viber"]);
}

#[tokio::test]
async fn rejects_pipeline_voice_without_gender_and_bad_subfields() {
    let f = refused!(|app| app.messaging().send_pipeline(SendPipelineRequest {
        voice: Some(PipelineVoice {
            voice: Some(VoiceProfile {
                gender: 0,
                language: "uk-UA".into(),
                name: "n".into()
            })
        }),
        telegram: Some(PipelineTelegram { code: "12".into() }),
        viber: Some(PipelineViber {
            message: "v".into(),
            signature: "msgw".into(),
            kind: 0
        }),
        whatsapp: Some(PipelineWhatsapp::default()),
        ..pipeline(&[
            Channel::Voice,
            Channel::Telegram,
            Channel::Viber,
            Channel::Whatsapp
        ])
    }));
    assert_eq!(
        f,
        [
            "voice.voice.gender",
            "telegram.code",
            "viber.kind",
            "whatsapp.message",
            "whatsapp.signature"
        ]
    );
}

#[tokio::test]
async fn rejects_template_delete_without_id_or_text() {
    let f = refused!(|app| app
        .templates()
        .delete_sms_templates(DeleteSmsTemplatesRequest::default()));
    assert_eq!(f, ["id"]);
    let f = refused!(|app| app
        .templates()
        .delete_viber_templates(DeleteViberTemplatesRequest::default()));
    assert_eq!(f, ["id"]);
}

#[tokio::test]
async fn rejects_template_create_without_text() {
    let f = refused!(|app| app
        .templates()
        .create_sms_template(CreateSmsTemplateRequest::default()));
    assert_eq!(f, ["text"]);
    let f = refused!(|app| app
        .templates()
        .create_viber_template(CreateViberTemplateRequest::default()));
    assert_eq!(f, ["text"]);
}

#[tokio::test]
async fn rejects_status_and_hlr_without_valid_ids() {
    let f = refused!(
        |app| app.messaging().get_message_status(GetMessageStatusRequest {
            id: 0,
            ..Default::default()
        })
    );
    assert_eq!(f, ["id"]);
    let f = refused!(|app| app.account().lookup_hlr(LookupHlrRequest {
        id: 0,
        phone: "12".into()
    }));
    assert_eq!(f, ["id", "phone"]);
    let f = refused!(|app| app.messaging().send_voice_otp(SendVoiceOtpRequest {
        priority: 0,
        send_at: None,
        id: 1,
        phone: String::new()
    }));
    assert_eq!(f, ["phone"]);
}

#[tokio::test]
async fn lists_every_violation_at_once() {
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        id: 0,
        phone: "x".into(),
        message: String::new(),
        signature: String::new(),
        lifetime: secs(1),
        ..Default::default()
    }));
    assert_eq!(f, ["id", "phone", "message", "signature", "lifetime"]);
}

#[tokio::test]
async fn rejects_whole_batch_when_any_item_is_invalid() {
    let items = vec![
        BatchItem {
            operation: Some(batch_item::Operation::SendSms(sms(1))),
        },
        BatchItem {
            operation: Some(batch_item::Operation::SendSms(SendSmsRequest {
                phone: "1".into(),
                ..sms(1)
            })),
        },
        BatchItem { operation: None },
        BatchItem {
            operation: Some(batch_item::Operation::SendTelegramOtp(telegram("1"))),
        },
    ];
    let f = refused!(|app| app.messaging().batch(BatchRequest {
        items: items.clone()
    }));
    assert_eq!(
        f,
        [
            "items[1].send_sms.phone",
            "items[2].operation",
            "items[3].send_telegram_otp.code"
        ]
    );
}

#[tokio::test]
async fn rejects_empty_and_oversized_batches() {
    let f = refused!(|app| app.messaging().batch(BatchRequest { items: vec![] }));
    assert_eq!(f, ["items"]);
    let item = BatchItem {
        operation: Some(batch_item::Operation::GetBalance(GetBalanceRequest {})),
    };
    let f = refused!(|app| app.messaging().batch(BatchRequest {
        items: vec![item.clone(); 101]
    }));
    assert_eq!(f, ["items"]);
}

#[tokio::test]
async fn accepts_plus_prefixed_phone_and_boundary_values() {
    let app = spawn_app().await;
    app.messaging()
        .send_sms(SendSmsRequest {
            phone: "+1234567".into(),
            lifetime: secs(3600),
            ..sms(1)
        })
        .await
        .unwrap();
    app.messaging()
        .send_sms(SendSmsRequest {
            id: 2,
            phone: "123456789012345".into(),
            lifetime: secs(259_200),
            ..sms(1)
        })
        .await
        .unwrap();
    app.messaging()
        .send_viber(SendViberRequest {
            id: 3,
            ..viber(carousel(vec![full_slide(); 5]))
        })
        .await
        .unwrap();
    app.messaging()
        .send_telegram_otp(SendTelegramOtpRequest {
            id: 4,
            ..telegram("12345678")
        })
        .await
        .unwrap();
    assert_eq!(app.gateway.requests().len(), 4);
}

/// The bytes a client must accept to read this status: message and details.
fn status_size(status: &tonic::Status) -> usize {
    status.message().len() + status.details().len()
}

#[tokio::test]
async fn a_flood_of_violations_stays_small_enough_for_every_client() {
    let app = spawn_app().await;
    // 100 items, each with a bad phone.
    let items = (1..=100)
        .map(|id| BatchItem {
            operation: Some(batch_item::Operation::SendSms(SendSmsRequest {
                id,
                phone: "not-a-phone-number".into(),
                ..sms(1)
            })),
        })
        .collect();
    let status = app
        .messaging()
        .batch(BatchRequest { items })
        .await
        .unwrap_err();
    let fields = violations(&status);
    assert!(
        status_size(&status) <= 8 * 1024,
        "{} bytes",
        status_size(&status)
    );
    assert_eq!(fields[0], "items");
    assert_eq!(fields.last().map(String::as_str), Some(""), "{fields:?}");
    assert!(status.message().contains("more"), "{}", status.message());

    // 10,000 empty carousel slides.
    let slides = vec![ViberCarouselSlide::default(); 10_000];
    let status = app
        .messaging()
        .send_viber(viber(carousel(slides)))
        .await
        .unwrap_err();
    let fields = violations(&status);
    assert!(
        status_size(&status) <= 8 * 1024,
        "{} bytes",
        status_size(&status)
    );
    assert!(fields.len() <= 51, "{} violations listed", fields.len());
    assert!(app.gateway.requests().is_empty(), "nothing is sent");
}

#[tokio::test]
async fn texts_urls_signatures_and_ids_beyond_their_bounds_are_refused() {
    let app = spawn_app().await;
    let long = |n: usize| "x".repeat(n);
    let cases: Vec<(SendSmsRequest, &str)> = vec![
        (
            SendSmsRequest {
                message: long(5_001),
                ..sms(1)
            },
            "message",
        ),
        (
            SendSmsRequest {
                signature: long(100_000),
                ..sms(1)
            },
            "signature",
        ),
        (
            SendSmsRequest {
                id: 1 << 63,
                ..sms(1)
            },
            "id",
        ),
    ];
    for (request, field) in cases {
        let status = app.messaging().send_sms(request).await.unwrap_err();
        assert_eq!(violations(&status), [field]);
    }
    let mut image = viber(send_viber_request::Content::Image(ViberImage {
        image_url: format!("https://example.com/{}", long(3_000)),
    }));
    image.id = 2;
    let status = app.messaging().send_viber(image).await.unwrap_err();
    assert_eq!(violations(&status), ["image.image_url"]);
    // At the bounds, everything is accepted.
    let at_bounds = SendSmsRequest {
        id: i64::MAX as u64,
        message: long(5_000),
        signature: long(64),
        ..sms(1)
    };
    app.messaging()
        .send_sms(at_bounds)
        .await
        .expect("within every bound");
    assert_eq!(
        app.gateway.requests().len(),
        1,
        "nothing beyond a bound was sent"
    );
}
