//! Every validation rule of docs/gateway.md#validation-rules: INVALID_ARGUMENT naming
//! every violated field, and not a single request to the gateway.

use msgw::proto::*;
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

#[tokio::test]
async fn rejects_id_zero() {
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest { id: 0, ..sms(1) }));
    assert_eq!(f, ["id"]);
}

#[tokio::test]
async fn rejects_phone_with_letters() {
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        phone: "38097abc4567".into(),
        ..sms(1)
    }));
    assert_eq!(f, ["phone"]);
}

#[tokio::test]
async fn rejects_phone_too_short_or_too_long() {
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        phone: "+123456".into(),
        ..sms(1)
    }));
    assert_eq!(f, ["phone"]);
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        phone: "1234567890123456".into(),
        ..sms(1)
    }));
    assert_eq!(f, ["phone"]);
}

#[tokio::test]
async fn rejects_phone_with_leading_zero() {
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        phone: "0971234567".into(),
        ..sms(1)
    }));
    assert_eq!(f, ["phone"]);
}

#[tokio::test]
async fn rejects_empty_sms_text_and_signature() {
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        message: " ".into(),
        signature: String::new(),
        ..sms(1)
    }));
    assert_eq!(f, ["message", "signature"]);
}

#[tokio::test]
async fn rejects_sms_lifetime_out_of_bounds() {
    for bad in [3599, 259_201] {
        let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
            lifetime: secs(bad),
            ..sms(1)
        }));
        assert_eq!(f, ["lifetime"], "{bad}");
    }
}

#[tokio::test]
async fn rejects_fractional_or_negative_lifetime() {
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        lifetime: Some(Duration {
            seconds: 3600,
            nanos: 5
        }),
        ..sms(1)
    }));
    assert_eq!(f, ["lifetime"]);
    let f = refused!(|app| app.messaging().send_sms(SendSmsRequest {
        lifetime: secs(-3600),
        ..sms(1)
    }));
    assert_eq!(f, ["lifetime"]);
}

#[tokio::test]
async fn rejects_viber_lifetime_under_a_minute() {
    let f = refused!(|app| app.messaging().send_viber(SendViberRequest {
        lifetime: secs(59),
        ..viber(send_viber_request::Content::Text(ViberText {
            message: "m".into()
        }))
    }));
    assert_eq!(f, ["lifetime"]);
}

#[tokio::test]
async fn rejects_viber_without_content() {
    let f = refused!(|app| app.messaging().send_viber(SendViberRequest {
        content: None,
        ..viber(carousel(vec![]))
    }));
    assert_eq!(f, ["content"]);
}

#[tokio::test]
async fn rejects_viber_text_without_message() {
    let f = refused!(|app| app
        .messaging()
        .send_viber(viber(send_viber_request::Content::Text(
            ViberText::default()
        ))));
    assert_eq!(f, ["text.message"]);
}

#[tokio::test]
async fn rejects_viber_image_without_image() {
    let f = refused!(|app| app
        .messaging()
        .send_viber(viber(send_viber_request::Content::Image(
            ViberImage::default()
        ))));
    assert_eq!(f, ["image.image_url"]);
}

#[tokio::test]
async fn rejects_viber_text_link_missing_fields() {
    let f =
        refused!(|app| app
            .messaging()
            .send_viber(viber(send_viber_request::Content::TextLink(
                ViberTextLink::default()
            ))));
    assert_eq!(
        f,
        [
            "text_link.message",
            "text_link.link_url",
            "text_link.button"
        ]
    );
}

#[tokio::test]
async fn rejects_viber_text_image_link_missing_fields() {
    let f = refused!(|app| app.messaging().send_viber(viber(
        send_viber_request::Content::TextImageLink(ViberTextImageLink::default())
    )));
    assert_eq!(
        f,
        [
            "text_image_link.message",
            "text_image_link.image_url",
            "text_image_link.link_url",
            "text_image_link.button"
        ]
    );
}

#[tokio::test]
async fn rejects_links_that_are_not_absolute_http_urls() {
    let f =
        refused!(|app| app
            .messaging()
            .send_viber(viber(send_viber_request::Content::TextLink(
                ViberTextLink {
                    message: "m".into(),
                    link_url: "ftp://example.org/x".into(),
                    button: "b".into()
                }
            ))));
    assert_eq!(f, ["text_link.link_url"]);
    let f = refused!(|app| app
        .messaging()
        .send_viber(viber(send_viber_request::Content::Image(ViberImage {
            image_url: "/relative.png".into()
        }))));
    assert_eq!(f, ["image.image_url"]);
}

#[tokio::test]
async fn rejects_carousel_with_one_slide() {
    let f = refused!(|app| app
        .messaging()
        .send_viber(viber(carousel(vec![full_slide()]))));
    assert_eq!(f, ["carousel.slides"]);
}

#[tokio::test]
async fn rejects_carousel_with_six_slides() {
    let f = refused!(|app| app
        .messaging()
        .send_viber(viber(carousel(vec![full_slide(); 6]))));
    assert_eq!(f, ["carousel.slides"]);
}

#[tokio::test]
async fn rejects_carousel_without_message() {
    let f =
        refused!(|app| app
            .messaging()
            .send_viber(viber(send_viber_request::Content::Carousel(
                ViberCarousel {
                    message: String::new(),
                    slides: vec![full_slide(), full_slide()]
                }
            ))));
    assert_eq!(f, ["carousel.message"]);
}

#[tokio::test]
async fn rejects_incomplete_slide() {
    let f = refused!(|app| app.messaging().send_viber(viber(carousel(vec![
        full_slide(),
        ViberCarouselSlide::default()
    ]))));
    assert_eq!(
        f,
        [
            "carousel.slides[1].caption",
            "carousel.slides[1].image_url",
            "carousel.slides[1].url",
            "carousel.slides[1].button"
        ]
    );
}

#[tokio::test]
async fn rejects_second_button_without_its_url_and_vice_versa() {
    let f = refused!(|app| app.messaging().send_viber(viber(carousel(vec![
        ViberCarouselSlide {
            button2: "More".into(),
            ..full_slide()
        },
        ViberCarouselSlide {
            url2: "https://example.org/more".into(),
            ..full_slide()
        },
    ]))));
    assert_eq!(f, ["carousel.slides[0].url2", "carousel.slides[1].button2"]);
}

#[tokio::test]
async fn rejects_incomplete_sms_fallback() {
    let f = refused!(|app| app.messaging().send_viber(SendViberRequest {
        sms_fallback: Some(SmsFallback {
            message: String::new(),
            signature: "msgw".into()
        }),
        ..viber(send_viber_request::Content::Text(ViberText {
            message: "m".into()
        }))
    }));
    assert_eq!(f, ["sms_fallback.message"]);
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
