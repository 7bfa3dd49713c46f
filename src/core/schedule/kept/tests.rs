use super::*;
use crate::core::domain::{
    Gender, HttpUrl, Lifetime, OtpCode, Phone, PipelineSend, PipelineStep, RcsFallback, RcsSend,
    Recipient, Slide, SmsFallback, SmsSend, TelegramOtp, Text, TextKind, ViberContent, ViberKind,
    ViberSend, ViberStage, Voice, VoiceSend,
};

fn t(s: &str) -> Text {
    Text::parse(s, TextKind::Message).unwrap()
}

fn url(s: &str) -> HttpUrl {
    HttpUrl::parse(s).unwrap()
}

fn to(id: u64) -> Recipient {
    Recipient {
        id: ClientId::new(id).unwrap(),
        phone: Phone::parse("+380971234567").unwrap(),
    }
}

fn voice() -> Voice {
    Voice {
        gender: Gender::Female,
        language: t("uk-UA"),
        name: t("uk-UA-Standard-A"),
    }
}

fn carousel() -> ViberContent {
    let slide = |second| Slide {
        caption: t("caption"),
        image: url("https://example.org/a.png"),
        url: url("https://example.org/a"),
        button: t("Buy"),
        second,
    };
    ViberContent::Carousel {
        message: t("pick one"),
        slides: vec![
            slide(None),
            slide(Some((t("More"), url("https://example.org/b")))),
        ],
    }
}

fn schedulable() -> Vec<Operation> {
    let sms = SmsFallback {
        message: t("fallback ✓"),
        signature: t("Shop"),
    };
    vec![
        Operation::SendSms(SmsSend {
            to: to(1),
            message: t("hello, ünïcode"),
            signature: t("Shop"),
            lifetime: Some(Lifetime::sms(3600).unwrap()),
            short_link: true,
            unsubscribe_link: false,
        }),
        Operation::SendViber(ViberSend {
            to: to(2),
            signature: t("Shop"),
            content: carousel(),
            lifetime: None,
            short_link: false,
            sms_fallback: Some(sms.clone()),
        }),
        Operation::SendViber(ViberSend {
            to: to(3),
            signature: t("Shop"),
            content: ViberContent::TextImageLink {
                message: t("m"),
                image: url("http://example.org/i.png"),
                link: url("https://example.org/l?q=1"),
                button: t("Go"),
            },
            lifetime: Some(Lifetime::at_least_minute(60).unwrap()),
            short_link: true,
            sms_fallback: None,
        }),
        Operation::SendRcs(RcsSend {
            to: to(4),
            message: t("rcs"),
            signature: t("Shop"),
            image: url("https://example.org/i.png"),
            button: t("Go"),
            link: url("https://example.org/"),
            lifetime: None,
            short_link: false,
            fallback: RcsFallback::ViberThenSms(
                ViberStage {
                    signature: t("Shop"),
                    content: ViberContent::Image {
                        image: url("https://example.org/v.png"),
                    },
                },
                sms.clone(),
            ),
        }),
        Operation::SendRcs(RcsSend {
            to: to(5),
            message: t("rcs"),
            signature: t("Shop"),
            image: url("https://example.org/i.png"),
            button: t("Go"),
            link: url("https://example.org/"),
            lifetime: None,
            short_link: false,
            fallback: RcsFallback::Sms(sms),
        }),
        Operation::SendTelegramOtp(TelegramOtp {
            to: to(6),
            code: OtpCode::parse("123456").unwrap(),
            lifetime: None,
        }),
        Operation::SendVoice(VoiceSend {
            to: to(7),
            message: t("your code is 1 2 3"),
            voice: voice(),
            dtmf: true,
        }),
        Operation::SendPipeline(PipelineSend {
            to: to(8),
            steps: vec![
                PipelineStep::Viber {
                    message: t("v"),
                    signature: t("Shop"),
                    kind: ViberKind::Text,
                },
                PipelineStep::Telegram {
                    code: OtpCode::parse("1234").unwrap(),
                },
                PipelineStep::Voice(voice()),
                PipelineStep::Whatsapp {
                    message: t("w"),
                    signature: t("Shop"),
                },
                PipelineStep::Rcs {
                    message: t("r"),
                    signature: t("Shop"),
                },
                PipelineStep::Sms {
                    message: t("s"),
                    signature: t("Shop"),
                },
            ],
        }),
    ]
}

#[test]
fn every_schedulable_operation_reads_back_as_it_was_kept() {
    for op in schedulable() {
        assert!(op.schedulable(), "{op:?}");
        let kept = encode(&op, Priority::Bulk).unwrap();
        assert_eq!(decode(&kept).unwrap(), (op, Priority::Bulk));
    }
}

#[test]
fn what_cannot_be_scheduled_is_never_kept() {
    for op in [Operation::SendVoiceOtp(to(9)), Operation::GetBalance] {
        assert!(!op.schedulable());
        assert!(
            matches!(encode(&op, Priority::Normal), Err(Error::Internal(_))),
            "{op:?}"
        );
    }
}

#[test]
fn a_kept_request_is_validated_again_and_another_form_is_refused() {
    let op = &schedulable()[0];
    let kept = String::from_utf8(encode(op, Priority::Normal).unwrap()).unwrap();
    let bad_phone = kept.replace("380971234567", "123");
    let Err(Error::InvalidArgument(v)) = decode(bad_phone.as_bytes()) else {
        panic!("a bad phone read back");
    };
    assert_eq!(v[0].field, "phone");
    let other_form = kept.replace("\"form\":1", "\"form\":2");
    assert!(matches!(
        decode(other_form.as_bytes()),
        Err(Error::Internal(_))
    ));
    // An earlier version's form (prost bytes) is not read here.
    assert!(matches!(
        decode(&[0x0a, 0x02, 0x08, 0x01]),
        Err(Error::Internal(_))
    ));
}
