//! SMS parts before sending: EstimateSms counts a text's encoding, units and parts as
//! the gateway bills them, and SendSms's `max_parts` refuses a longer text before
//! anything reaches the gateway.

use msgw::transport::proto::*;
use tonic::Code;

use crate::helpers::{Callers, Entry, Options, TestApp, as_caller, error_info, spawn, violations};

async fn default_app() -> TestApp {
    spawn(Options::default()).await
}

async fn estimate(app: &TestApp, message: &str) -> EstimateSmsResponse {
    app.messaging()
        .estimate_sms(EstimateSmsRequest {
            message: message.to_owned(),
        })
        .await
        .unwrap_or_else(|e| panic!("EstimateSms of {} chars: {e:?}", message.chars().count()))
        .into_inner()
}

fn counted(r: &EstimateSmsResponse) -> (SmsEncoding, u32, u32) {
    (r.encoding(), r.units, r.parts)
}

#[tokio::test]
async fn gsm7_texts_take_160_in_one_part_and_153_in_each_of_more() {
    let app = default_app().await;
    use SmsEncoding::Gsm7;
    for (len, parts) in [
        (1, 1),
        (160, 1),
        (161, 2),
        (306, 2),
        (307, 3),
        (459, 3),
        (460, 4),
    ] {
        let r = estimate(&app, &"a".repeat(len)).await;
        assert_eq!(counted(&r), (Gsm7, len as u32, parts), "{len} characters");
        assert!(r.ucs2_characters.is_empty());
    }
    // The extension table's characters take two septets, and never split across parts.
    let r = estimate(&app, &format!("{}€", "a".repeat(158))).await;
    assert_eq!(counted(&r), (Gsm7, 160, 1));
    let r = estimate(&app, &format!("{}€", "a".repeat(159))).await;
    assert_eq!(counted(&r), (Gsm7, 161, 2));
    let r = estimate(&app, &format!("{}{{", "a".repeat(152))).await;
    assert_eq!(counted(&r), (Gsm7, 154, 1));
    // 152 septets then an escape pair: the pair moves whole to the second part.
    let r = estimate(&app, &format!("{}€{}", "a".repeat(152), "a".repeat(152))).await;
    assert_eq!(counted(&r), (Gsm7, 306, 3));
}

#[tokio::test]
async fn one_character_outside_gsm7_makes_the_text_ucs2_and_is_named() {
    let app = default_app().await;
    use SmsEncoding::Ucs2;
    // A character of the Basic Multilingual Plane takes one UTF-16 unit...
    let r = estimate(&app, &format!("ж{}", "a".repeat(69))).await;
    assert_eq!(counted(&r), (Ucs2, 70, 1));
    assert_eq!(r.ucs2_characters, ["ж"]);
    let r = estimate(&app, &format!("ж{}", "a".repeat(70))).await;
    assert_eq!(counted(&r), (Ucs2, 71, 2));
    // ...an emoji two (a surrogate pair, never split between parts).
    let r = estimate(&app, &format!("🙂{}", "a".repeat(68))).await;
    assert_eq!(counted(&r), (Ucs2, 70, 1));
    assert_eq!(r.ucs2_characters, ["🙂"]);
    let r = estimate(&app, &format!("🙂{}", "a".repeat(69))).await;
    assert_eq!(counted(&r), (Ucs2, 71, 2));
    let r = estimate(&app, &format!("{}🙂", "a".repeat(66))).await;
    assert_eq!(counted(&r), (Ucs2, 68, 1));
    let r = estimate(&app, &format!("{}🙂{}", "a".repeat(66), "a".repeat(70))).await;
    assert_eq!(counted(&r), (Ucs2, 138, 3));
    // Each character once, in order of first appearance.
    let r = estimate(&app, "“quoted” — ok “again”").await;
    assert_eq!(r.ucs2_characters, ["“", "”", "—"]);
}

#[tokio::test]
async fn estimate_checks_its_text_as_sendsms_does() {
    let app = default_app().await;
    for (message, what) in [(String::new(), "required"), ("a".repeat(5001), "5000")] {
        let refused = app
            .messaging()
            .estimate_sms(EstimateSmsRequest { message })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains("message"), "{refused:?}");
        assert!(refused.message().contains(what), "{refused:?}");
    }
    assert!(app.gateway.requests().is_empty());
}

fn sms(id: u64, message: String, max_parts: u32) -> SendSmsRequest {
    SendSmsRequest {
        id,
        phone: "380971234567".into(),
        message,
        signature: "msgw".into(),
        max_parts,
        ..Default::default()
    }
}

#[tokio::test]
async fn max_parts_refuses_a_longer_text_before_anything_is_sent() {
    let app = default_app().await;
    let refused = app
        .messaging()
        .send_sms(sms(1, format!("🙂{}", "a".repeat(69)), 1))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "TOO_MANY_PARTS");
    assert_eq!(metadata["parts"], "2");
    assert_eq!(metadata["max_parts"], "1");
    assert_eq!(metadata["encoding"], "UCS2");
    assert_eq!(metadata["units"], "71");
    assert_eq!(violations(&refused), ["message"]);
    assert!(app.gateway.requests().is_empty(), "nothing was sent");

    // Within the limit (or with none) it is sent, and the answer says what msgw counted.
    for (id, max_parts) in [(2, 2), (3, 0)] {
        let sent = app
            .messaging()
            .send_sms(sms(id, format!("🙂{}", "a".repeat(69)), max_parts))
            .await
            .unwrap()
            .into_inner();
        let counted = sent.estimate.expect("counted parts");
        assert_eq!(
            (counted.encoding(), counted.units, counted.parts),
            (SmsEncoding::Ucs2, 71, 2)
        );
        assert!(sent.receipt.is_some());
    }
    assert_eq!(app.gateway.requests().len(), 2);
}

#[tokio::test]
async fn a_batch_with_an_item_over_its_max_parts_sends_nothing() {
    let app = default_app().await;
    let item = |request| BatchItem {
        operation: Some(batch_item::Operation::SendSms(request)),
    };
    let refused = app
        .messaging()
        .batch(BatchRequest {
            items: vec![
                item(sms(1, "short".into(), 1)),
                item(sms(2, "b".repeat(161), 1)),
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert_eq!(error_info(&refused).0, "TOO_MANY_PARTS");
    assert_eq!(violations(&refused), ["items[1].send_sms.message"]);
    assert!(app.gateway.requests().is_empty(), "nothing was sent");

    // Accepted, each SendSms item answers its own count.
    let done = app
        .messaging()
        .batch(BatchRequest {
            items: vec![
                item(sms(1, "short".into(), 1)),
                item(sms(2, "b".repeat(161), 2)),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let parts: Vec<u32> = done
        .results
        .iter()
        .map(|r| match &r.result {
            Some(batch_result::Result::SendSms(s)) => s.estimate.as_ref().unwrap().parts,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(parts, [1, 2]);
}

#[tokio::test]
async fn estimating_needs_the_send_permission() {
    let app = spawn(Options {
        callers: Some(
            Callers::new()
                .caller(Entry::token("reader", "reader-token-0123456789").permissions(&["query"]))
                .caller(Entry::token("sender", "sender-token-0123456789").permissions(&["send"])),
        ),
        ..Options::default()
    })
    .await;
    let request = || EstimateSmsRequest {
        message: "hi".into(),
    };
    let refused = app
        .messaging()
        .estimate_sms(as_caller("reader-token-0123456789", request()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let r = app
        .messaging()
        .estimate_sms(as_caller("sender-token-0123456789", request()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.parts, 1);
}
