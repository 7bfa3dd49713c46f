//! msgw end to end against its built-in sandbox, as `msgw serve` runs with no
//! gateway configured: every RPC, and the magic numbers seen through gRPC.

use std::time::Duration;

use msgw::transport::proto::*;
use tonic::Code;

use crate::builders::sms_to;
use crate::helpers::{TestApp, error_info, spawn_sandboxed_app};

/// The balance once it is no longer `before`: msgw gives a balance again for
/// `MSGW_ACCOUNT_CACHE` (1 s) before it asks the gateway anew. Fails after 5 s.
async fn balance_after(
    app: &TestApp,
    before: &msgw::transport::proto::google_type::Money,
) -> msgw::transport::proto::google_type::Money {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = app
            .account()
            .get_balance(GetBalanceRequest {})
            .await
            .unwrap()
            .into_inner()
            .amount
            .expect("an amount");
        if &now != before || std::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const STEP: Duration = Duration::from_millis(5);

/// Polls GetMessageStatus until `done` holds (or fails after a few seconds).
async fn wait_for(
    app: &TestApp,
    id: u64,
    done: impl Fn(&GetMessageStatusResponse) -> bool,
) -> GetMessageStatusResponse {
    let mut client = app.messaging();
    let mut last = None;
    for _ in 0..400 {
        let r = client
            .get_message_status(GetMessageStatusRequest {
                id,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if done(&r) {
            return r;
        }
        last = Some(r);
        tokio::time::sleep(STEP).await;
    }
    panic!("message {id} never got there; last status {last:?}");
}

/// Polls until the status is final.
async fn final_status(app: &TestApp, id: u64) -> GetMessageStatusResponse {
    wait_for(app, id, |r| {
        !matches!(
            r.status(),
            MessageStatus::Accepted | MessageStatus::Queued | MessageStatus::Routing
        )
    })
    .await
}

#[tokio::test]
async fn sms_is_sent_billed_and_delivered() {
    let app = spawn_sandboxed_app(STEP).await;
    let before = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap()
        .into_inner();
    let r = app
        .messaging()
        .send_sms(sms_to(1, "+380971234567"))
        .await
        .unwrap()
        .into_inner();
    let receipt = r.receipt.unwrap();
    assert_eq!((receipt.id, receipt.parts), (1, 1));
    assert!(!receipt.msg_id.is_empty());
    let status = final_status(&app, 1).await;
    assert_eq!(
        (status.status(), status.channel()),
        (MessageStatus::Delivered, Channel::Sms)
    );
    assert_eq!(status.msg_id, receipt.msg_id);
    assert!(status.updated.is_some());
    let before = before.amount.unwrap();
    let after = balance_after(&app, &before).await;
    assert_eq!(after.currency_code, "UAH");
    assert_eq!(
        (before.units - after.units, before.nanos - after.nanos),
        (1, 0),
        "one SMS part billed, exactly"
    );
}

#[tokio::test]
async fn every_viber_kind_and_fallback_is_accepted_by_the_sandbox() {
    let app = spawn_sandboxed_app(STEP).await;
    let slide = ViberCarouselSlide {
        caption: "c".into(),
        image_url: "https://example.org/i.png".into(),
        url: "https://example.org/u".into(),
        button: "b".into(),
        button2: "b2".into(),
        url2: "https://example.org/u2".into(),
    };
    let contents = [
        send_viber_request::Content::Text(ViberText {
            message: "t".into(),
        }),
        send_viber_request::Content::Image(ViberImage {
            image_url: "https://example.org/i.png".into(),
        }),
        send_viber_request::Content::TextLink(ViberTextLink {
            message: "t".into(),
            link_url: "https://example.org".into(),
            button: "b".into(),
        }),
        send_viber_request::Content::TextImageLink(ViberTextImageLink {
            message: "t".into(),
            image_url: "https://example.org/i.png".into(),
            link_url: "https://example.org".into(),
            button: "b".into(),
        }),
        send_viber_request::Content::Carousel(ViberCarousel {
            message: "t".into(),
            slides: vec![slide.clone(), slide],
        }),
    ];
    for (i, content) in contents.into_iter().enumerate() {
        let id = 10 + i as u64;
        let fallback = (i % 2 == 0).then(|| SmsFallback {
            message: "sms".into(),
            signature: "msgw".into(),
        });
        app.messaging()
            .send_viber(SendViberRequest {
                priority: 0,
                send_at: None,
                id,
                phone: "380971234560".into(),
                signature: "msgw".into(),
                content: Some(content),
                lifetime: Some(prost_types::Duration {
                    seconds: 3600,
                    nanos: 0,
                }),
                short_link: true,
                sms_fallback: fallback,
            })
            .await
            .unwrap_or_else(|e| panic!("viber kind {i} refused: {e:?}"));
        wait_for(&app, id, |r| r.status() == MessageStatus::Read).await;
    }
}

#[tokio::test]
async fn viber_fallback_to_sms_is_taken_for_the_fallback_number() {
    let app = spawn_sandboxed_app(STEP).await;
    app.messaging()
        .send_viber(SendViberRequest {
            id: 77,
            phone: "380000000007".into(),
            signature: "msgw".into(),
            content: Some(send_viber_request::Content::Text(ViberText {
                message: "t".into(),
            })),
            sms_fallback: Some(SmsFallback {
                message: "sms".into(),
                signature: "msgw".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    wait_for(&app, 77, |r| {
        (r.channel(), r.status()) == (Channel::Sms, MessageStatus::Delivered)
    })
    .await;
}

#[tokio::test]
async fn rcs_chains_telegram_voice_and_pipeline() {
    let app = spawn_sandboxed_app(STEP).await;
    let mut m = app.messaging();
    m.send_rcs(SendRcsRequest {
        priority: 0,
        send_at: None,
        id: 20,
        phone: "380000000007".into(),
        message: "r".into(),
        signature: "msgw".into(),
        image_url: "https://example.org/i.png".into(),
        button: "b".into(),
        link_url: "https://example.org".into(),
        lifetime: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        short_link: false,
        sms_fallback: Some(SmsFallback {
            message: "s".into(),
            signature: "msgw".into(),
        }),
        viber_fallback: Some(ViberFallback {
            signature: "msgw".into(),
            content: Some(viber_fallback::Content::Text(ViberText {
                message: "v".into(),
            })),
        }),
    })
    .await
    .unwrap();
    // The fallback number fails the first channel; Viber takes over and is read.
    wait_for(&app, 20, |r| {
        (r.channel(), r.status()) == (Channel::Viber, MessageStatus::Read)
    })
    .await;

    m.send_telegram_otp(SendTelegramOtpRequest {
        priority: 0,
        send_at: None,
        id: 21,
        phone: "380971234567".into(),
        code: "4821".into(),
        lifetime: None,
    })
    .await
    .unwrap();
    assert_eq!(
        final_status(&app, 21).await.status(),
        MessageStatus::Delivered
    );

    m.send_voice(SendVoiceRequest {
        priority: 0,
        send_at: None,
        id: 22,
        phone: "380971234567".into(),
        message: "Your code is 4821".into(),
        voice: Some(VoiceProfile {
            gender: VoiceGender::Female as i32,
            language: "uk-UA".into(),
            name: "uk-UA-Standard-A".into(),
        }),
        dtmf: true,
    })
    .await
    .unwrap();
    assert_eq!(final_status(&app, 22).await.channel(), Channel::Voice);

    let r = m
        .send_pipeline(SendPipelineRequest {
            id: 23,
            phone: "380971234567".into(),
            channels: vec![Channel::Whatsapp as i32, Channel::Sms as i32],
            whatsapp: Some(PipelineWhatsapp {
                message: "w".into(),
                signature: "msgw".into(),
            }),
            sms: Some(PipelineSms {
                message: "s".into(),
                signature: "msgw".into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.receipt.unwrap().id, 23);
    assert_eq!(final_status(&app, 23).await.channel(), Channel::Whatsapp);
}

#[tokio::test]
async fn voice_otp_code_is_the_calling_numbers_last_four_digits() {
    let app = spawn_sandboxed_app(STEP).await;
    // SANDBOX: code = (phone + id) mod 10000 → 380970000438 + 33 ends in 0471.
    let r = app
        .messaging()
        .send_voice_otp(SendVoiceOtpRequest {
            priority: 0,
            send_at: None,
            id: 33,
            phone: "380970000438".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.code.as_str(), r.price),
        ("0471", crate::helpers::money("", 0, 200_000_000))
    );
}

#[tokio::test]
async fn account_rpcs() {
    let app = spawn_sandboxed_app(STEP).await;
    let mut a = app.account();
    let senders = a
        .list_senders(ListSendersRequest {})
        .await
        .unwrap()
        .into_inner()
        .senders;
    assert!(
        senders
            .iter()
            .any(|s| s.name == "msgw" && s.status == "Verified by operator")
    );
    let hlr = a
        .lookup_hlr(LookupHlrRequest {
            id: 1,
            phone: "380971234567".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (hlr.phone.as_str(), hlr.mccmnc.as_str(), hlr.ported),
        ("380971234567", "25501", true)
    );
    assert_eq!(hlr.status(), MessageStatus::Delivered);
    assert_eq!(hlr.origin_network.unwrap().name, "Kyivstar");
    assert_eq!(hlr.ported_network.unwrap().country.unwrap().prefix, 380);
}

#[tokio::test]
async fn template_rpcs() {
    let app = spawn_sandboxed_app(STEP).await;
    let mut t = app.templates();
    let created = t
        .create_sms_template(CreateSmsTemplateRequest {
            text: "Code: %code%".into(),
            name: "otp".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .template
        .unwrap();
    assert_eq!(
        (created.name.as_str(), created.text.as_str(), created.parts),
        ("otp", "Code: %code%", 1)
    );
    let listed = t
        .list_sms_templates(ListSmsTemplatesRequest {})
        .await
        .unwrap()
        .into_inner()
        .templates;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].create_time.is_some());
    let deleted = t
        .delete_sms_templates(DeleteSmsTemplatesRequest {
            id: created.id.clone(),
            text: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .deleted;
    assert_eq!(deleted, 1);

    let viber = t
        .create_viber_template(CreateViberTemplateRequest {
            text: "Hi".into(),
            signature: "msgw".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .template
        .unwrap();
    assert_eq!(viber.status, "moderation");
    let vlist = t
        .list_viber_templates(ListViberTemplatesRequest {})
        .await
        .unwrap()
        .into_inner()
        .templates;
    assert_eq!(
        (vlist[0].id, vlist[0].signature.as_str()),
        (viber.id, "msgw")
    );
    let deleted = t
        .delete_viber_templates(DeleteViberTemplatesRequest {
            id: 0,
            text: "Hi".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .deleted;
    assert_eq!(deleted, 1);
}

#[tokio::test]
async fn batch_against_the_sandbox_fails_only_the_bad_item() {
    let app = spawn_sandboxed_app(STEP).await;
    let items = vec![
        BatchItem {
            operation: Some(batch_item::Operation::SendSms(sms_to(40, "380971234567"))),
        },
        BatchItem {
            operation: Some(batch_item::Operation::SendSms(sms_to(41, "380000000001"))),
        },
        BatchItem {
            operation: Some(batch_item::Operation::GetBalance(GetBalanceRequest {})),
        },
    ];
    let r = app
        .messaging()
        .batch(BatchRequest { items })
        .await
        .unwrap()
        .into_inner();
    let codes: Vec<i32> = r
        .results
        .iter()
        .map(|r| r.status.as_ref().unwrap().code)
        .collect();
    assert_eq!(codes, [0, Code::FailedPrecondition as i32, 0]);
    assert!(
        r.results[1]
            .status
            .as_ref()
            .unwrap()
            .message
            .contains("Phone number is blocked")
    );
}

#[tokio::test]
async fn magic_numbers_through_grpc() {
    let app = spawn_sandboxed_app(STEP).await;
    let mut m = app.messaging();

    let blocked = m.send_sms(sms_to(1, "380000000001")).await.unwrap_err();
    assert_eq!(blocked.code(), Code::FailedPrecondition);
    assert_eq!(
        error_info(&blocked).1["upstream_error"],
        "Phone number is blocked"
    );

    let sender = m.send_sms(sms_to(4, "380000000004")).await.unwrap_err();
    assert_eq!(
        error_info(&sender).1["upstream_error"],
        "Error in Sender-name"
    );

    for (id, phone, expected) in [
        (2, "380000000002", MessageStatus::Undeliverable),
        (3, "380000000003", MessageStatus::Expired),
        (5, "380000000005", MessageStatus::Delivered),
        (7, "380000000007", MessageStatus::Undeliverable),
        (8, "380000000008", MessageStatus::Rejected),
    ] {
        m.send_sms(sms_to(id, phone)).await.unwrap();
        assert_eq!(final_status(&app, id).await.status(), expected, "{phone}");
    }

    m.send_viber(SendViberRequest {
        id: 9,
        phone: "380000000009".into(),
        signature: "msgw".into(),
        content: Some(send_viber_request::Content::Text(ViberText {
            message: "Question?".into(),
        })),
        ..Default::default()
    })
    .await
    .unwrap();
    // READ counts as final too; the two-way number goes on to REPLIED.
    let replied = wait_for(&app, 9, |r| r.status() == MessageStatus::Replied).await;
    assert!(replied.replies.iter().any(|r| r.media.is_some()));
}

#[tokio::test]
async fn slow_number_is_still_in_flight_when_a_normal_one_is_done() {
    let app = spawn_sandboxed_app(Duration::from_millis(50)).await;
    let mut m = app.messaging();
    m.send_sms(sms_to(6, "380000000006")).await.unwrap();
    m.send_sms(sms_to(60, "380971234567")).await.unwrap();
    assert_eq!(
        final_status(&app, 60).await.status(),
        MessageStatus::Delivered
    );
    let slow = m
        .get_message_status(GetMessageStatusRequest {
            id: 6,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        matches!(
            slow.status(),
            MessageStatus::Accepted | MessageStatus::Routing
        ),
        "slow number still moving, got {:?}",
        slow.status()
    );
}

#[tokio::test]
async fn unknown_message_status_is_not_found() {
    let app = spawn_sandboxed_app(STEP).await;
    let e = app
        .messaging()
        .get_message_status(GetMessageStatusRequest {
            id: 999,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let (reason, metadata) = error_info(&e);
    assert_eq!(reason, "MESSAGE_NOT_FOUND");
    assert_eq!(metadata["upstream_error"], "Message not found");
}

#[tokio::test]
async fn lost_answer_magic_number_is_outcome_unknown_and_its_retry_is_not_sent_twice() {
    let app = spawn_sandboxed_app(STEP).await;
    let balance = || async {
        app.account()
            .get_balance(GetBalanceRequest {})
            .await
            .unwrap()
            .into_inner()
            .amount
            .expect("an amount")
    };
    let before = balance().await;
    let status = app
        .messaging()
        .send_sms(sms_to(90, "380000000010"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let (reason, metadata) = error_info(&status);
    assert_eq!(reason, "OUTCOME_UNKNOWN");
    assert_eq!(metadata["cause"], "http_502");

    // The sandbox did send it: the retry finds it by `status` and does not send again.
    let retry = app
        .messaging()
        .send_sms(sms_to(90, "380000000010"))
        .await
        .unwrap();
    assert_eq!(
        retry
            .metadata()
            .get("msgw-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true")
    );
    let receipt = retry.into_inner().receipt.unwrap();
    assert!(!receipt.msg_id.is_empty());
    let status = wait_for(&app, 90, |r| r.msg_id == receipt.msg_id).await;
    assert_eq!(status.msg_id, receipt.msg_id);
    let after = balance_after(&app, &before).await;
    assert_eq!(
        (before.units - after.units, before.nanos - after.nanos),
        (1, 0),
        "billed once: one SMS part"
    );
}

/// msgw on its sandbox again, on the same store, statuses moving every `step`.
async fn restarted(app: TestApp, step: Duration) -> TestApp {
    app.restart(crate::helpers::Options {
        sandbox_step: Some(step),
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn a_restart_changes_nothing_the_sandbox_showed() {
    let app = spawn_sandboxed_app(STEP).await;
    let first = app
        .messaging()
        .send_sms(sms_to(77, "380971234567"))
        .await
        .unwrap();
    let first = first.into_inner().receipt.unwrap();
    let delivered = final_status(&app, 77).await;
    app.templates()
        .create_sms_template(CreateSmsTemplateRequest {
            text: "Code: %code%".into(),
            name: "otp".into(),
        })
        .await
        .unwrap();
    let balance = app
        .account()
        .get_balance(GetBalanceRequest {})
        .await
        .unwrap();

    let app = restarted(app, STEP).await;
    let again = app
        .messaging()
        .get_message_status(GetMessageStatusRequest {
            id: 77,
            ..Default::default()
        })
        .await
        .expect("the sandbox still knows message 77")
        .into_inner();
    assert_eq!(
        (again.status(), &again.msg_id),
        (delivered.status(), &first.msg_id)
    );
    assert_eq!(
        app.account()
            .get_balance(GetBalanceRequest {})
            .await
            .unwrap()
            .into_inner(),
        balance.into_inner(),
        "the same balance"
    );
    let templates = app
        .templates()
        .list_sms_templates(ListSmsTemplatesRequest {})
        .await
        .unwrap()
        .into_inner()
        .templates;
    assert_eq!(templates.len(), 1, "{templates:?}");
    let next = app
        .messaging()
        .send_sms(sms_to(78, "380971234567"))
        .await
        .unwrap();
    assert_ne!(
        next.into_inner().receipt.unwrap().msg_id,
        first.msg_id,
        "message ids go on, never restart"
    );
}

#[tokio::test]
async fn a_delivery_under_way_at_a_restart_goes_on_after_it() {
    let step = Duration::from_millis(300);
    let app = spawn_sandboxed_app(step).await;
    app.messaging()
        .send_sms(sms_to(80, "380971234567"))
        .await
        .unwrap();
    let app = restarted(app, step).await;
    let done = final_status(&app, 80).await;
    assert_eq!(done.status(), MessageStatus::Delivered);
}
