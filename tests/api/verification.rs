//! VerificationService end to end: codes in the gateway's requests, checks, resends,
//! expiry, fraud limits, callers, the sandbox, replicas, and where a code must never be.

use std::time::Duration;

use msgw::core::verify::Settings as VerifySettings;
use msgw::transport::proto::{
    CancelVerificationRequest, Channel, CheckVerificationRequest, GetVerificationRequest,
    StartVerificationRequest, Verification, VerificationStatus, VoiceGender, VoiceProfile,
};
use serde_json::{Value, json};
use tonic::Code;

use crate::helpers::{
    Callers, Entry, FakeGateway, Options, Reply, TestApp, as_caller, default_reply, error_info,
    spawn, spawn_app, spawn_sandboxed_app,
};
use crate::wait;

const PHONE: &str = "+380971234567";

/// A verification by SMS of `PHONE` with send id `id`, signed `msgw`.
fn start(id: u64) -> StartVerificationRequest {
    StartVerificationRequest {
        id,
        phone: PHONE.into(),
        signature: "msgw".into(),
        ..Default::default()
    }
}

fn check(code: &str) -> CheckVerificationRequest {
    CheckVerificationRequest {
        phone: PHONE.into(),
        code: code.into(),
    }
}

fn get() -> GetVerificationRequest {
    GetVerificationRequest {
        phone: PHONE.into(),
    }
}

async fn started(app: &TestApp, request: StartVerificationRequest) -> Verification {
    app.verification()
        .start_verification(request)
        .await
        .expect("verification starts")
        .into_inner()
        .verification
        .expect("a verification")
}

async fn checked(app: &TestApp, code: &str) -> Result<Verification, tonic::Status> {
    app.verification()
        .check_verification(check(code))
        .await
        .map(|r| r.into_inner().verification.expect("a verification"))
}

fn status(v: &Verification) -> VerificationStatus {
    VerificationStatus::try_from(v.status).unwrap()
}

/// The code at the end of a message ("Your verification code is 123456").
fn code_in(text: &str) -> String {
    let code = text.rsplit(' ').next().unwrap().to_owned();
    assert!(code.bytes().all(|b| b.is_ascii_digit()), "{text}");
    code
}

/// The code of the `n`-th SMS the gateway received.
fn nth_sms_code(gateway: &FakeGateway, n: usize) -> String {
    let items: Vec<Value> = gateway.envelopes().concat();
    let sms: Vec<&Value> = items.iter().filter(|i| i["type"] == "sms").collect();
    code_in(sms[n]["sms_message"].as_str().expect("an SMS text"))
}

fn assert_not_found(status: &tonic::Status) {
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert_eq!(error_info(status).0, "VERIFICATION_NOT_FOUND");
}

/// A code that is not `code` (same length).
fn wrong(code: &str) -> String {
    code.bytes()
        .map(|b| char::from(b'0' + (b - b'0' + 1) % 10))
        .collect()
}

fn with_verify(verify: VerifySettings) -> Options {
    Options {
        verify,
        ..Options::default()
    }
}

#[tokio::test]
async fn the_code_is_in_the_sms_text_and_the_right_code_approves_once() {
    let app = spawn_app().await;
    let v = started(&app, start(1)).await;
    assert_eq!(status(&v), VerificationStatus::Pending);
    assert_eq!((v.id, v.phone.as_str()), (1, PHONE));
    assert_eq!(v.channels, [Channel::Sms as i32]);
    assert_eq!((v.checks_left, v.sends_left), (5, 4));
    assert_eq!(v.sandbox_code, "", "never with a real gateway");
    let expires = v.expires_at.unwrap().seconds - chrono::Utc::now().timestamp();
    assert!((590..=600).contains(&expires), "{expires}");

    let item = app.gateway.only_item();
    assert_eq!(item["type"], "sms");
    assert_eq!(item["id"], json!(1));
    assert_eq!(item["sms_signature"], "msgw");
    let text = item["sms_message"].as_str().unwrap();
    assert!(text.starts_with("Your verification code is "), "{text}");
    let code = code_in(text);
    assert_eq!(code.len(), 6);

    let approved = checked(&app, &code).await.unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
    assert_not_found(&checked(&app, &code).await.unwrap_err());
    assert_not_found(
        &app.verification()
            .get_verification(get())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        app.metric("msgw_verification_checks_total{outcome=\"approved\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        app.metric("msgw_verifications_total{channel=\"sms\",event=\"approved\"}")
            .await,
        Some(1.0)
    );
}

#[tokio::test]
async fn a_retry_with_the_same_id_sends_nothing_and_starts_no_second_verification() {
    let app = spawn_app().await;
    let first = started(&app, start(7)).await;
    let again = started(&app, start(7)).await;
    assert_eq!(first, again);
    assert_eq!(app.gateway.requests().len(), 1, "sent once");
    assert_eq!(
        app.metric("msgw_verifications_total{channel=\"sms\",event=\"started\"}")
            .await,
        Some(1.0),
        "started once"
    );
    // The same id with another request is another message.
    let other = app
        .verification()
        .start_verification(StartVerificationRequest {
            message: "Code: {code}".into(),
            ..start(7)
        })
        .await
        .unwrap_err();
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
}

#[tokio::test]
async fn wrong_codes_count_down_and_the_fifth_locks_the_verification() {
    let app = spawn_app().await;
    started(&app, start(1)).await;
    let code = nth_sms_code(&app.gateway, 0);
    for left in (1..=4).rev() {
        let v = checked(&app, &wrong(&code)).await.unwrap();
        assert_eq!(
            (status(&v), v.checks_left),
            (VerificationStatus::Pending, left)
        );
    }
    let failed = checked(&app, &wrong(&code)).await.unwrap();
    assert_eq!(
        (status(&failed), failed.checks_left),
        (VerificationStatus::Failed, 0)
    );
    // Locked: even the right code finds nothing now.
    assert_not_found(&checked(&app, &code).await.unwrap_err());
    assert_eq!(
        app.metric("msgw_verification_checks_total{outcome=\"wrong\"}")
            .await,
        Some(4.0)
    );
    assert_eq!(
        app.metric("msgw_verifications_total{channel=\"sms\",event=\"failed\"}")
            .await,
        Some(1.0)
    );
}

#[tokio::test]
async fn a_resend_carries_the_same_code_on_the_new_channels_and_respects_the_interval() {
    let interval = Duration::from_secs(1);
    let app = spawn(with_verify(VerifySettings {
        resend_interval: interval,
        ..VerifySettings::default()
    }))
    .await;
    started(&app, start(1)).await;
    let sent_at = tokio::time::Instant::now();
    let code = nth_sms_code(&app.gateway, 0);

    let soon = app
        .verification()
        .start_verification(start(2))
        .await
        .unwrap_err();
    assert_eq!(soon.code(), Code::ResourceExhausted, "{soon:?}");
    assert_eq!(error_info(&soon).0, "RESEND_TOO_SOON");
    use tonic_types::StatusExt;
    let retry = soon.get_details_retry_info().unwrap().retry_delay.unwrap();
    assert!(retry <= interval, "{retry:?}");
    assert_eq!(app.gateway.requests().len(), 1, "nothing sent");

    tokio::time::sleep_until(sent_at + interval).await;
    let resent = started(&app, start(2)).await;
    assert_eq!((resent.id, resent.sends_left), (2, 3));
    assert_eq!(nth_sms_code(&app.gateway, 1), code, "the same code");

    // On the channels of the new request: Telegram carries the code itself.
    tokio::time::sleep(interval).await;
    let telegram = started(
        &app,
        StartVerificationRequest {
            channels: vec![Channel::Telegram as i32],
            signature: String::new(),
            ..start(3)
        },
    )
    .await;
    assert_eq!(telegram.channels, [Channel::Telegram as i32]);
    let items = app.gateway.envelopes().concat();
    let last = items.last().unwrap();
    assert_eq!(
        (&last["type"], &last["message"]),
        (&json!("telegram"), &json!(code))
    );

    let approved = checked(&app, &code).await.unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
}

#[tokio::test]
async fn a_verification_allows_five_sends() {
    let app = spawn(with_verify(VerifySettings {
        resend_interval: Duration::ZERO,
        ..VerifySettings::default()
    }))
    .await;
    for id in 1..=5 {
        let v = started(&app, start(id)).await;
        assert_eq!(v.sends_left, 5 - id as u32);
    }
    let sixth = app
        .verification()
        .start_verification(start(6))
        .await
        .unwrap_err();
    assert_eq!(sixth.code(), Code::ResourceExhausted, "{sixth:?}");
    assert_eq!(error_info(&sixth).0, "VERIFICATION_SENDS_EXHAUSTED");
    assert_eq!(app.gateway.requests().len(), 5);
}

/// Moves every verification's expiry into the past, as the clock would.
async fn let_expire(app: &TestApp) {
    use sqlx::Connection;
    let mut db = sqlx::SqliteConnection::connect(&app.store_url())
        .await
        .unwrap();
    sqlx::query("UPDATE verifications SET expires_at_ms = expires_at_ms - 3600000")
        .execute(&mut db)
        .await
        .unwrap();
    db.close().await.unwrap();
}

#[tokio::test]
async fn an_expired_verification_is_not_found_and_a_new_start_makes_a_new_code() {
    let app = spawn_app().await;
    started(&app, start(1)).await;
    let code = nth_sms_code(&app.gateway, 0);
    let_expire(&app).await;
    assert_not_found(&checked(&app, &code).await.unwrap_err());
    assert_not_found(
        &app.verification()
            .get_verification(get())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        app.metric("msgw_verifications_total{channel=\"sms\",event=\"expired\"}")
            .await,
        Some(1.0)
    );
    let fresh = started(&app, start(2)).await;
    assert_eq!((fresh.sends_left, fresh.checks_left), (4, 5), "a new one");
    let approved = checked(&app, &nth_sms_code(&app.gateway, 1)).await.unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
}

#[tokio::test]
async fn a_canceled_verification_is_canceled_and_then_not_found() {
    let app = spawn_app().await;
    started(&app, start(1)).await;
    let canceled = app
        .verification()
        .cancel_verification(CancelVerificationRequest {
            phone: PHONE.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!(status(&canceled), VerificationStatus::Canceled);
    let code = nth_sms_code(&app.gateway, 0);
    assert_not_found(&checked(&app, &code).await.unwrap_err());
}

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

#[tokio::test]
async fn callers_see_and_check_only_their_own_verifications() {
    let app = spawn(Options {
        callers: Some(
            Callers::new()
                .caller(Entry::token("alice", ALICE))
                .caller(Entry::token("bob", BOB))
                .caller(Entry::token("reader", "reader-token-0123456789").permissions(&["query"])),
        ),
        ..Options::default()
    })
    .await;
    let mut client = app.verification();
    client
        .start_verification(as_caller(ALICE, start(1)))
        .await
        .unwrap();
    let alice_code = nth_sms_code(&app.gateway, 0);

    let hidden = client
        .get_verification(as_caller(BOB, get()))
        .await
        .unwrap_err();
    assert_not_found(&hidden);
    let not_bobs = client
        .check_verification(as_caller(BOB, check(&alice_code)))
        .await
        .unwrap_err();
    assert_not_found(&not_bobs);
    let taken = client
        .start_verification(as_caller(BOB, start(1)))
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Code::AlreadyExists, "{taken:?}");

    // Bob's own verification of the same number is a new one, with its own code.
    let bobs = client
        .start_verification(as_caller(BOB, start(2)))
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!((bobs.id, bobs.sends_left), (2, 4));

    let reader = client
        .get_verification(as_caller("reader-token-0123456789", get()))
        .await
        .unwrap_err();
    assert_eq!(reader.code(), Code::PermissionDenied, "{reader:?}");

    let approved = client
        .check_verification(as_caller(ALICE, check(&alice_code)))
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
    let still = client
        .get_verification(as_caller(BOB, get()))
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!(status(&still), VerificationStatus::Pending);
}

#[tokio::test]
async fn the_sandbox_tells_its_code_so_ci_can_finish_a_verification() {
    let app = spawn_sandboxed_app(Duration::from_millis(20)).await;
    let v = started(&app, start(1)).await;
    assert_eq!(v.sandbox_code.len(), 6, "{v:?}");
    assert!(v.sandbox_code.bytes().all(|b| b.is_ascii_digit()));
    let approved = checked(&app, &v.sandbox_code).await.unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
    assert_eq!(approved.sandbox_code, "", "used up: no code to tell");

    // A voice call's code is the sandbox gateway's, and so is the one it tells.
    let phone = "+380971234568";
    let voice = started(
        &app,
        StartVerificationRequest {
            phone: phone.into(),
            channels: vec![Channel::Voice as i32],
            signature: String::new(),
            ..start(2)
        },
    )
    .await;
    assert_eq!(voice.sandbox_code.len(), 4, "{voice:?}");
    let approved = app
        .verification()
        .check_verification(CheckVerificationRequest {
            phone: phone.into(),
            code: voice.sandbox_code,
        })
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
}

/// The fake gateway's answers, with a voice call dialled from a number ending in `code`
/// and ids that cannot look like a code.
fn answering_voice_code(gateway: &FakeGateway, code: &'static str) {
    gateway.respond_with(move |body| {
        let items = body["data"].as_array().cloned().unwrap_or_default();
        let results: Vec<Value> = items
            .iter()
            .map(|item| match item["type"].as_str() {
                Some("call/otp") => {
                    json!({"success": true, "data": {"code": code, "price": 0.2}})
                }
                Some("status") => json!({"success": true, "data":
                    {"id": item["id"], "msg_id": "m", "type": "sms", "status": "DELIVERED"}}),
                _ => json!({"success": true, "data":
                    {"id": item["id"], "msg_id": "m", "data": 1, "parts": 1}}),
            })
            .collect();
        Reply::Json(json!({"success": true, "data": results}))
    });
}

#[tokio::test]
async fn a_lone_voice_channel_uses_the_code_the_gateways_call_dialled() {
    let app = spawn_app().await;
    answering_voice_code(&app.gateway, "7305");
    let v = started(
        &app,
        StartVerificationRequest {
            channels: vec![Channel::Voice as i32],
            signature: String::new(),
            ..start(1)
        },
    )
    .await;
    assert_eq!(status(&v), VerificationStatus::Pending);
    let item = app.gateway.only_item();
    assert_eq!(item["type"], "call/otp");
    assert_eq!(
        checked(&app, "7306").await.unwrap().checks_left,
        4,
        "another code is wrong"
    );
    let approved = checked(&app, "7305").await.unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
}

#[tokio::test]
async fn several_channels_go_in_one_pipeline_with_the_code_in_each_channels_text() {
    let app = spawn_app().await;
    let v = started(
        &app,
        StartVerificationRequest {
            channels: vec![
                Channel::Telegram as i32,
                Channel::Viber as i32,
                Channel::Voice as i32,
                Channel::Sms as i32,
            ],
            message: "{code} is your code".into(),
            code_length: 8,
            voice: Some(VoiceProfile {
                gender: VoiceGender::Female as i32,
                language: "uk-UA".into(),
                name: "uk-UA-Standard-A".into(),
            }),
            ..start(1)
        },
    )
    .await;
    assert_eq!(v.channels.len(), 4);
    let item = app.gateway.only_item();
    assert_eq!(item["type"], "pipeline");
    assert_eq!(
        item["pipeline"],
        json!(["telegram", "viber", "voice", "sms"])
    );
    let code = item["telegram"]["message"].as_str().unwrap().to_owned();
    assert_eq!(code.len(), 8);
    assert_eq!(
        item["sms"]["message"],
        json!(format!("{code} is your code"))
    );
    assert_eq!(
        item["viber"]["message"],
        json!(format!("{code} is your code"))
    );
    assert_eq!(item["sms"]["signature"], "msgw");
    assert_eq!(item["voice"]["language"], "uk-UA");
    let approved = checked(&app, &code).await.unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
}

#[tokio::test]
async fn a_start_names_every_broken_field_and_sends_nothing() {
    let app = spawn_app().await;
    let status = app
        .verification()
        .start_verification(StartVerificationRequest {
            id: 0,
            phone: "12".into(),
            channels: vec![
                Channel::Sms as i32,
                Channel::Voice as i32,
                Channel::Sms as i32,
            ],
            signature: String::new(),
            message: "no placeholder".into(),
            code_length: 3,
            ttl: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            voice: None,
            rate_limit_keys: [
                ("IP".to_owned(), "203.0.113.7".to_owned()),
                ("user".to_owned(), String::new()),
            ]
            .into(),
        })
        .await
        .unwrap_err();
    let mut fields = crate::helpers::violations(&status);
    fields.sort();
    assert_eq!(
        fields,
        [
            "channels[2]",
            "code_length",
            "id",
            "message",
            "phone",
            "rate_limit_keys",
            "rate_limit_keys[user]",
            "signature",
            "ttl",
            "voice"
        ]
    );
    assert!(app.gateway.requests().is_empty());
}

#[tokio::test]
async fn the_phone_limit_counts_new_verifications_of_a_number() {
    let app = spawn(with_verify(VerifySettings {
        phone_limit: 2,
        ..VerifySettings::default()
    }))
    .await;
    for id in 1..=2 {
        started(&app, start(id)).await;
        app.verification()
            .cancel_verification(CancelVerificationRequest {
                phone: PHONE.into(),
            })
            .await
            .unwrap();
    }
    let limited = app
        .verification()
        .start_verification(start(3))
        .await
        .unwrap_err();
    assert_eq!(limited.code(), Code::ResourceExhausted, "{limited:?}");
    assert_eq!(error_info(&limited).0, "PHONE_RATE_LIMITED");
    use tonic_types::StatusExt;
    let retry = limited
        .get_details_retry_info()
        .unwrap()
        .retry_delay
        .unwrap();
    assert!(retry > Duration::from_secs(3500), "{retry:?}");
    assert_eq!(app.gateway.requests().len(), 2, "nothing sent");
    // Another number has its own count.
    started(
        &app,
        StartVerificationRequest {
            phone: "+380971234568".into(),
            ..start(4)
        },
    )
    .await;
}

#[tokio::test]
async fn only_allowed_country_prefixes_get_codes() {
    let app = spawn(with_verify(VerifySettings {
        allowed_prefixes: vec!["48".into(), "1".into()],
        ..VerifySettings::default()
    }))
    .await;
    let denied = app
        .verification()
        .start_verification(start(1))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert_eq!(error_info(&denied).0, "DESTINATION_NOT_ALLOWED");
    assert!(app.gateway.requests().is_empty());
    let allowed = started(
        &app,
        StartVerificationRequest {
            phone: "+48501234567".into(),
            ..start(2)
        },
    )
    .await;
    assert_eq!(allowed.phone, "+48501234567");
}

#[tokio::test]
async fn a_refused_first_send_leaves_no_verification_and_its_retry_starts_afresh() {
    let app = spawn_app().await;
    app.gateway.respond_json(json!({"success": true, "data": [
        {"success": false, "error": "Error in Sender-name", "data": {"id": 1}}]}));
    let refused = app
        .verification()
        .start_verification(start(1))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_not_found(
        &app.verification()
            .get_verification(get())
            .await
            .unwrap_err(),
    );
    app.gateway.respond_with(default_reply);
    let v = started(&app, start(1)).await;
    assert_eq!(status(&v), VerificationStatus::Pending);
}

/// Every file under `dir`, as bytes.
fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn the_plain_code_is_neither_in_the_stores_files_nor_in_the_trace_log() {
    use std::io::BufRead;
    let gateway = FakeGateway::start().await;
    let voice_code = "73051946";
    answering_voice_code(&gateway, voice_code);
    let store = tempfile::tempdir().unwrap();
    let log = store.path().join("log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args(crate::helpers::serve_args(store.path()))
        .args([
            "--upstream-url",
            &gateway.url,
            "--api-key",
            crate::helpers::API_KEY,
            "--allow-unauthenticated",
            "--log-level",
            "trace",
            "--balance-refresh",
            "0",
        ])
        .env_remove("MSGW_VERIFY_SECRET")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("msgw starts");
    let serving = "msgw never logged that it serves";
    let addr: std::net::SocketAddr = wait::until_some(Duration::from_secs(30), serving, || {
        let text = std::fs::read_to_string(&log).unwrap();
        let serving = text.lines().find_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            (v["fields"]["message"] == "msgw serving")
                .then(|| v["fields"]["grpc_addr"].as_str().unwrap().parse().unwrap())
        });
        if serving.is_none() {
            assert!(child.try_wait().unwrap().is_none(), "msgw exited: {text}");
        }
        std::future::ready(serving)
    })
    .await;
    let channel = crate::helpers::connect(addr).await;
    let mut client =
        msgw::transport::proto::verification_service_client::VerificationServiceClient::new(
            channel,
        );
    client
        .start_verification(StartVerificationRequest {
            code_length: 8,
            ..start(1)
        })
        .await
        .unwrap();
    let sms_text = gateway.envelopes().concat()[0]["sms_message"]
        .as_str()
        .unwrap()
        .to_owned();
    let sms_code = code_in(&sms_text);
    client
        .check_verification(check(&wrong(&sms_code)))
        .await
        .unwrap();
    client
        .start_verification(StartVerificationRequest {
            phone: "+380971234568".into(),
            channels: vec![Channel::Voice as i32],
            signature: String::new(),
            ..start(2)
        })
        .await
        .unwrap();
    // Replays read the claims back.
    client
        .start_verification(StartVerificationRequest {
            code_length: 8,
            ..start(1)
        })
        .await
        .unwrap();
    client
        .start_verification(StartVerificationRequest {
            phone: "+380971234568".into(),
            channels: vec![Channel::Voice as i32],
            signature: String::new(),
            ..start(2)
        })
        .await
        .unwrap();
    let approved = client
        .check_verification(check(&sms_code))
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);

    let files = files_under(store.path());
    let names: Vec<_> = files.iter().map(|(p, _)| p.clone()).collect();
    assert!(
        names.iter().any(|p| p.ends_with("msgw.db.verify-secret")),
        "the generated secret is kept next to the database: {names:?}"
    );
    for (path, bytes) in &files {
        if path == &log {
            continue;
        }
        for code in [&sms_code, voice_code] {
            assert!(!contains(bytes, code), "{code} in {}", path.display());
            assert!(
                !contains(bytes, &sms_text),
                "the text in {}",
                path.display()
            );
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let log_file = std::fs::File::open(&log).unwrap();
    let lines: Vec<String> = std::io::BufReader::new(log_file)
        .lines()
        .map(Result::unwrap)
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("\"TRACE\"")),
        "the log is at trace"
    );
    for line in &lines {
        for code in [sms_code.as_str(), voice_code] {
            assert!(!line.contains(code), "{code} logged: {line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_on_two_postgres_replicas_approve_once_and_lock_after_five() {
    let schema = crate::postgres::TestSchema::create().await;
    checks_on_two_replicas(|| Options {
        store_url: Some(schema.url.clone()),
        ..Options::default()
    })
    .await;
}

/// Two msgw on one PostgreSQL store, each started with `on_store()`: a code sent by one
/// checks on the other, concurrent wrong codes on both take five attempts, no more, and
/// right codes on both approve once.
pub async fn checks_on_two_replicas(on_store: impl Fn() -> Options) {
    let (one, two) = (spawn(on_store()).await, spawn(on_store()).await);
    started(&one, start(1)).await;
    let code = nth_sms_code(&one.gateway, 0);
    // The code one replica sent checks on the other (they share the secret).
    let seen = two
        .verification()
        .get_verification(get())
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!(seen.checks_left, 5);

    let wrong_code = wrong(&code);
    let checks = (0..12).map(|i| {
        let mut client = if i % 2 == 0 {
            one.verification()
        } else {
            two.verification()
        };
        let request = check(&wrong_code);
        async move { client.check_verification(request).await }
    });
    let results = futures_util::future::join_all(checks).await;
    let counted: Vec<Verification> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|r| r.get_ref().verification.clone().unwrap())
        .collect();
    assert_eq!(counted.len(), 5, "five attempts, no more: {results:#?}");
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_not_found(refused);
    }
    assert!(
        counted
            .iter()
            .any(|v| status(v) == VerificationStatus::Failed)
    );
    assert_not_found(&checked(&one, &code).await.unwrap_err());

    // A new verification (another number): right codes on both replicas approve once.
    let other = "+380971234568";
    started(
        &one,
        StartVerificationRequest {
            phone: other.into(),
            ..start(2)
        },
    )
    .await;
    let code = nth_sms_code(&one.gateway, 1);
    let checks = (0..6).map(|i| {
        let mut client = if i % 2 == 0 {
            one.verification()
        } else {
            two.verification()
        };
        let request = CheckVerificationRequest {
            phone: other.into(),
            code: code.clone(),
        };
        async move { client.check_verification(request).await }
    });
    let results = futures_util::future::join_all(checks).await;
    let approved: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(approved.len(), 1, "{results:#?}");
    assert_eq!(
        status(
            approved[0]
                .as_ref()
                .unwrap()
                .get_ref()
                .verification
                .as_ref()
                .unwrap()
        ),
        VerificationStatus::Approved
    );
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_not_found(refused);
    }
}

#[tokio::test]
async fn a_verification_send_is_a_message_whose_status_reaches_the_event_stream() {
    let app = spawn_sandboxed_app(Duration::from_millis(20)).await;
    let mut stream = app
        .events()
        .stream_status_events(msgw::transport::proto::StreamStatusEventsRequest {
            from_oldest: true,
            ids: vec![41],
            final_only: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    started(&app, start(41)).await;
    let event = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("the final status arrives")
        .unwrap()
        .expect("an event");
    let event = event.event.expect("a status event");
    assert_eq!(event.id, 41);
    assert_eq!(event.raw_status, "DELIVERED");
}

#[tokio::test]
async fn a_callers_send_rate_counts_its_verification_sends() {
    let app = spawn(Options {
        callers: Some(Callers::new().caller(Entry::token("alice", ALICE).rate(0.01, 1))),
        ..Options::default()
    })
    .await;
    let mut client = app.verification();
    client
        .start_verification(as_caller(ALICE, start(1)))
        .await
        .unwrap();
    let limited = client
        .start_verification(as_caller(
            ALICE,
            StartVerificationRequest {
                phone: "+380971234568".into(),
                ..start(2)
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(limited.code(), Code::ResourceExhausted, "{limited:?}");
    assert_eq!(error_info(&limited).0, "RATE_LIMITED");
    assert_eq!(app.gateway.requests().len(), 1);
    // Checks send nothing and take nothing from the rate.
    let code = nth_sms_code(&app.gateway, 0);
    let approved = client
        .check_verification(as_caller(ALICE, check(&code)))
        .await
        .unwrap()
        .into_inner()
        .verification
        .unwrap();
    assert_eq!(status(&approved), VerificationStatus::Approved);
}
