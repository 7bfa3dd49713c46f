//! Number intelligence end to end: verification codes go only to the number types the
//! operator allows (premium-rate and made-up numbers are refused before anything is
//! sent, mobile numbers get their code, the sandbox's magic numbers and safe prefixes
//! are not checked), and LookupNumber says what msgw knows of a number.

use std::time::Duration;

use msgw::core::verify::Settings as VerifySettings;
use msgw::core::verify::guard::Settings as GuardSettings;
use msgw::transport::proto::*;
use tonic::Code;

use crate::helpers::{
    Callers, Entry, Options, TestApp, as_caller, error_info, spawn, spawn_app, spawn_sandboxed_app,
    violations,
};

fn start(id: u64, phone: &str) -> StartVerificationRequest {
    StartVerificationRequest {
        id,
        phone: phone.into(),
        signature: "msgw".into(),
        ..Default::default()
    }
}

/// The refusal of a start to `phone`, checked to be NUMBER_TYPE_NOT_ALLOWED: its
/// `number_type` and `voice_only`.
async fn refused_type(app: &TestApp, id: u64, phone: &str) -> (String, String) {
    let refused = app
        .verification()
        .start_verification(start(id, phone))
        .await
        .expect_err("a number of a refused type");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "NUMBER_TYPE_NOT_ALLOWED");
    (
        metadata["number_type"].clone(),
        metadata["voice_only"].clone(),
    )
}

async fn lookup(app: &TestApp, phone: &str) -> LookupNumberResponse {
    app.messaging()
        .lookup_number(LookupNumberRequest {
            phone: phone.into(),
        })
        .await
        .expect("LookupNumber answers")
        .into_inner()
}

#[tokio::test]
async fn premium_rate_and_invalid_numbers_get_no_code_and_a_mobile_number_does() {
    let app = spawn_app().await;
    assert_eq!(
        refused_type(&app, 1, "+449012345678").await,
        ("premium_rate".into(), "false".into())
    );
    for (id, invalid) in [(2, "+870123456789"), (3, "+882012345678")] {
        assert_eq!(refused_type(&app, id, invalid).await.0, "unknown");
    }
    // A fixed line: a voice call may reach it, a text may not.
    assert_eq!(
        refused_type(&app, 4, "+442079000001").await,
        ("fixed_line".into(), "true".into())
    );
    assert!(app.gateway.requests().is_empty(), "nothing was sent");

    let sent = app
        .verification()
        .start_verification(start(5, "+380971117790"))
        .await
        .expect("a mobile number gets its code");
    assert!(sent.into_inner().verification.is_some());
    assert_eq!(app.gateway.only_item()["phone"].to_string(), "380971117790");
}

/// Fix 45, finding 6: a fixed line's code goes only by the voice channel of the list,
/// never by SMS or Viber first.
#[tokio::test]
async fn a_fixed_line_gets_its_code_only_by_voice_whatever_the_list() {
    let app = spawn_app().await;
    let lists = [
        ("+441234567890", vec![Channel::Sms, Channel::Voice]),
        (
            "+442079000001",
            vec![Channel::Viber, Channel::Sms, Channel::Voice],
        ),
    ];
    for (id, (phone, list)) in (1..).zip(lists) {
        let request = StartVerificationRequest {
            channels: list.iter().map(|c| *c as i32).collect(),
            voice: Some(VoiceProfile {
                gender: VoiceGender::Female as i32,
                language: "en-GB".into(),
                name: "en-GB-Standard-A".into(),
            }),
            ..start(id, phone)
        };
        let started = app
            .verification()
            .start_verification(request)
            .await
            .expect("a fixed line with a voice channel")
            .into_inner()
            .verification
            .unwrap();
        assert_eq!(started.channels, [Channel::Voice as i32], "{phone}");
    }
    let items: Vec<String> = app
        .gateway
        .envelopes()
        .concat()
        .iter()
        .map(|i| i["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(items, ["call/otp", "call/otp"], "no text to a fixed line");
    // Without a voice channel: refused, nothing sent.
    let request = StartVerificationRequest {
        channels: vec![Channel::Viber as i32, Channel::Sms as i32],
        ..start(3, "+441234567890")
    };
    let refused = app.verification().start_verification(request).await;
    assert_eq!(refused.unwrap_err().code(), Code::FailedPrecondition);
    assert_eq!(app.gateway.envelopes().concat().len(), 2);
}

#[tokio::test]
async fn the_sandboxs_magic_numbers_get_codes_and_other_made_up_numbers_do_not() {
    let app = spawn_sandboxed_app(Duration::from_millis(20)).await;
    for (id, magic) in [(1, "+380000000002"), (2, "+380000000009")] {
        let v = app
            .verification()
            .start_verification(start(id, magic))
            .await
            .unwrap_or_else(|e| panic!("{magic} is served: {e:?}"))
            .into_inner()
            .verification
            .expect("a verification");
        assert!(
            !v.sandbox_code.is_empty(),
            "{magic}: the sandbox shows its code"
        );
    }
    assert_eq!(refused_type(&app, 3, "+380000000099").await.0, "unknown");
    let magic = lookup(&app, "+380000000002").await;
    assert_eq!(
        (
            magic.valid,
            magic.number_type(),
            magic.verification_codes(),
            magic.type_check_exempt
        ),
        (false, NumberType::Unknown, VerificationCodes::Allowed, true)
    );
}

#[tokio::test]
async fn safe_prefixes_and_the_number_types_option_decide_what_gets_codes() {
    let app = spawn(Options {
        verify: VerifySettings {
            number_types: "mobile,premium_rate".parse().unwrap(),
            guard: GuardSettings {
                safe_prefixes: "88201".parse().unwrap(),
                ..GuardSettings::default()
            },
            ..VerifySettings::default()
        },
        ..Options::default()
    })
    .await;
    for (id, phone) in [(1, "+449012345678"), (2, "+882012345678")] {
        app.verification()
            .start_verification(start(id, phone))
            .await
            .unwrap_or_else(|e| panic!("{phone}: {e:?}"));
    }
    // Not listed any more: the fixed line and the mobile-or-fixed of +1.
    assert_eq!(
        refused_type(&app, 3, "+14155550100").await.0,
        "fixed_line_or_mobile"
    );
    assert_eq!(refused_type(&app, 4, "+442079000001").await.1, "false");
    assert_eq!(app.gateway.requests().len(), 2);
}

#[tokio::test]
async fn mobiles_whose_plan_keeps_a_leading_zero_get_codes() {
    let app = spawn_app().await;
    for (phone, region) in [
        ("+2250701234567", "CI"),
        ("+2250501234567", "CI"),
        ("+2290195123456", "BJ"),
        ("+242061234567", "CG"),
    ] {
        let found = lookup(&app, phone).await;
        assert_eq!(
            (
                found.valid,
                found.region.as_str(),
                found.number_type(),
                found.verification_codes()
            ),
            (true, region, NumberType::Mobile, VerificationCodes::Allowed),
            "{phone}"
        );
    }
    let italian = lookup(&app, "+390612345678").await;
    assert_eq!(
        (
            italian.valid,
            italian.number_type(),
            italian.verification_codes()
        ),
        (true, NumberType::FixedLine, VerificationCodes::VoiceOnly)
    );
    let sent = app
        .verification()
        .start_verification(start(1, "+2250701234567"))
        .await
        .expect("a mobile number of Côte d'Ivoire gets its code");
    assert!(sent.into_inner().verification.is_some());
    assert_eq!(
        app.gateway.only_item()["phone"].to_string(),
        "2250701234567"
    );
}

#[tokio::test]
async fn lookup_number_says_what_msgw_knows_at_no_gateway_cost() {
    let app = spawn_app().await;
    let mobile = lookup(&app, "+380971117790").await;
    assert_eq!(
        (
            mobile.phone.as_str(),
            mobile.e164.as_str(),
            mobile.valid,
            mobile.calling_code,
            mobile.region.as_str(),
            mobile.number_type(),
            mobile.verification_codes(),
            mobile.type_check_exempt,
        ),
        (
            "380971117790",
            "+380971117790",
            true,
            380,
            "UA",
            NumberType::Mobile,
            VerificationCodes::Allowed,
            false
        )
    );
    let premium = lookup(&app, "449012345678").await;
    assert_eq!(
        (
            premium.region.as_str(),
            premium.number_type(),
            premium.verification_codes()
        ),
        ("GB", NumberType::PremiumRate, VerificationCodes::Refused)
    );
    let fixed = lookup(&app, "+442079000001").await;
    assert_eq!(fixed.verification_codes(), VerificationCodes::VoiceOnly);
    let satellite = lookup(&app, "+870123456789").await;
    assert_eq!(
        (
            satellite.valid,
            satellite.calling_code,
            satellite.region.as_str(),
            satellite.number_type()
        ),
        (false, 870, "001", NumberType::Unknown)
    );
    let unassigned = lookup(&app, "+2891234567").await;
    assert_eq!(
        (unassigned.calling_code, unassigned.region.as_str()),
        (0, "")
    );
    assert!(
        app.gateway.requests().is_empty(),
        "the gateway was not asked"
    );

    let bad = app
        .messaging()
        .lookup_number(LookupNumberRequest {
            phone: "+38097x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert_eq!(violations(&bad), ["phone"]);
}

#[tokio::test]
async fn lookup_number_needs_the_query_permission() {
    let app = spawn(Options {
        callers: Some(
            Callers::new()
                .caller(Entry::token("reader", "reader-token-0123456789").permissions(&["query"]))
                .caller(Entry::token("sender", "sender-token-0123456789").permissions(&["send"])),
        ),
        ..Options::default()
    })
    .await;
    let request = || LookupNumberRequest {
        phone: "+380971117790".into(),
    };
    let denied = app
        .messaging()
        .lookup_number(as_caller("sender-token-0123456789", request()))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    app.messaging()
        .lookup_number(as_caller("reader-token-0123456789", request()))
        .await
        .expect("a reader may look numbers up");
}
