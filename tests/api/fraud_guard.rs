//! The fraud guard end to end: SMS pumping to one range is held while real users of
//! another range are served, shadow mode, caller-supplied keys, country budgets, safe
//! prefixes, release by RPC and by `msgw guard`, and two PostgreSQL replicas sharing
//! the counters.

use std::time::Duration;

use msgw::core::verify::Settings as VerifySettings;
use msgw::core::verify::guard::{Mode, Settings};
use msgw::transport::proto::{
    CheckVerificationRequest, ListHeldRangesRequest, ReleaseRangeRequest, StartVerificationRequest,
    Verification, VerificationStatus,
};
use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::helpers::{Callers, Entry, FakeGateway, Options, TestApp, error_info, spawn};

/// A satellite range (GMSS, +881): where pumping sends its codes.
pub const PUMPED: &str = "881234";

pub fn pumped(i: u64) -> String {
    format!("+{PUMPED}{i:06}")
}

pub fn real_user(i: u64) -> String {
    format!("+380971{i:06}")
}

/// The issue's pumping figures: unapproved for a second counts as unconverted, 20 of
/// them below 20 % approved hold the range.
pub fn pumping_guard() -> Settings {
    Settings {
        grace: Duration::from_secs(1),
        min_starts: 20,
        ..Settings::default()
    }
}

/// A guard that holds a range at its third unconverted verification at once.
pub fn quick_guard() -> Settings {
    Settings {
        grace: Duration::ZERO,
        min_starts: 3,
        ..Settings::default()
    }
}

pub fn guarded(guard: Settings) -> Options {
    Options {
        verify: VerifySettings {
            guard,
            resend_interval: Duration::ZERO,
            ..VerifySettings::default()
        },
        ..Options::default()
    }
}

pub fn request(id: u64, phone: &str) -> StartVerificationRequest {
    StartVerificationRequest {
        id,
        phone: phone.into(),
        signature: "msgw".into(),
        ..Default::default()
    }
}

pub fn with_keys(
    mut r: StartVerificationRequest,
    keys: &[(&str, &str)],
) -> StartVerificationRequest {
    r.rate_limit_keys = keys
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    r
}

pub async fn start(app: &TestApp, r: StartVerificationRequest) -> Result<Verification, Status> {
    app.verification()
        .start_verification(r)
        .await
        .map(|r| r.into_inner().verification.expect("a verification"))
}

/// The codes of the SMS the gateway received for numbers beginning with `prefix`.
pub fn codes_to(gateway: &FakeGateway, prefix: &str) -> Vec<String> {
    gateway
        .envelopes()
        .concat()
        .iter()
        .filter(|i| i["type"] == "sms" && i["phone"].to_string().starts_with(prefix))
        .filter_map(|i| {
            i["sms_message"]
                .as_str()?
                .rsplit(' ')
                .next()
                .map(str::to_owned)
        })
        .collect()
}

pub fn assert_suspected(status: &Status, range: &str) {
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let (reason, metadata) = error_info(status);
    assert_eq!(reason, "SUSPECTED_FRAUD");
    assert_eq!(metadata["range"], range);
    assert!(metadata["held_until"].ends_with('Z'), "{metadata:?}");
}

/// Starts `count` verifications to distinct numbers of the pumped range, `every`
/// apart, with ids and numbers from `first`, on the apps in turn; none is ever checked.
pub async fn pump(
    apps: &[&TestApp],
    first: u64,
    count: u64,
    every: Duration,
) -> Vec<Result<(), Status>> {
    let mut tick = tokio::time::interval(every);
    let mut results = Vec::new();
    for i in 0..count {
        tick.tick().await;
        let app = apps[i as usize % apps.len()];
        results.push(
            start(app, request(first + i, &pumped(first + i)))
                .await
                .map(|_| ()),
        );
    }
    results
}

/// How many starts went out before the first refusal; every later one must be
/// refused as suspected fraud.
pub fn sent_before_the_hold(results: &[Result<(), Status>]) -> usize {
    let sent = results.iter().take_while(|r| r.is_ok()).count();
    for refused in &results[sent..] {
        assert_suspected(refused.as_ref().unwrap_err(), PUMPED);
    }
    sent
}

pub async fn held_ranges(app: &TestApp) -> Vec<msgw::transport::proto::HeldRange> {
    app.fraud_guard()
        .list_held_ranges(ListHeldRangesRequest::default())
        .await
        .expect("the anonymous caller may list")
        .into_inner()
        .ranges
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pumping_one_range_is_held_while_real_users_of_another_are_all_served() {
    let app = spawn(guarded(pumping_guard())).await;
    let apps = [&app];
    let attack = pump(&apps, 1, 300, Duration::from_millis(100));
    let users = async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut approved = 0;
        for i in 0..100 {
            tick.tick().await;
            let phone = real_user(i);
            start(&app, request(100_000 + i, &phone))
                .await
                .expect("a real user's start");
            let code = codes_to(&app.gateway, &phone[1..])
                .pop()
                .expect("their code");
            let checked = app
                .verification()
                .check_verification(CheckVerificationRequest { phone, code })
                .await
                .expect("their check")
                .into_inner()
                .verification
                .unwrap();
            if checked.status == VerificationStatus::Approved as i32 {
                approved += 1;
            }
        }
        approved
    };
    let (results, approved) = tokio::join!(attack, users);

    let sent = sent_before_the_hold(&results);
    println!("pumping: {sent} codes sent before the hold; real users approved: {approved}/100");
    assert!(
        (20..=35).contains(&sent),
        "{sent} codes went out before the hold"
    );
    assert_eq!(
        codes_to(&app.gateway, PUMPED).len(),
        sent,
        "the gateway got no more"
    );
    assert_eq!(approved, 100, "every real user is served");
    let held = held_ranges(&app).await;
    assert_eq!(held.len(), 1, "only the pumped range is held: {held:?}");
    assert_eq!((held[0].range.as_str(), held[0].shadow), (PUMPED, false));
    assert!(
        held[0].unconverted >= 20 && held[0].approved == 0,
        "{held:?}"
    );
    assert_eq!(
        app.metric_sum("msgw_verify_guard_holds_total", &[r#"mode="on""#])
            .await,
        1.0
    );
    let refused = app
        .metric_sum(
            "msgw_verify_guard_refusals_total",
            &[r#"reason="suspected_fraud""#],
        )
        .await;
    assert_eq!(refused as usize, 300 - sent);
    let approved_380 = app
        .metric_sum(
            "msgw_verifications_by_country_total",
            &[r#"calling_code="380""#, r#"event="approved""#],
        )
        .await;
    assert_eq!(approved_380, 100.0);
}

#[tokio::test]
async fn shadow_mode_sends_every_code_and_counts_the_hold() {
    let app = spawn(guarded(Settings {
        mode: Mode::Shadow,
        ..pumping_guard()
    }))
    .await;
    let results = pump(&[&app], 1, 60, Duration::from_millis(50)).await;
    assert!(results.iter().all(Result::is_ok), "shadow refuses nothing");
    assert_eq!(codes_to(&app.gateway, PUMPED).len(), 60);
    assert_eq!(
        app.metric_sum("msgw_verify_guard_holds_total", &[r#"mode="shadow""#])
            .await,
        1.0
    );
    let would = app
        .metric_sum(
            "msgw_verify_guard_refusals_total",
            &[r#"mode="shadow""#, r#"reason="suspected_fraud""#],
        )
        .await;
    assert!(
        would >= 1.0,
        "the starts after the hold count as would-be refusals"
    );
    let held = held_ranges(&app).await;
    assert_eq!((held.len(), held[0].shadow), (1, true), "{held:?}");
}

#[tokio::test]
async fn the_eleventh_start_with_one_ip_is_refused_and_the_ip_is_never_stored() {
    let app = spawn(guarded(Settings {
        key_limits: "ip=10/1h".parse().unwrap(),
        ..Settings::default()
    }))
    .await;
    let ip = "203.0.113.7";
    for i in 0..10 {
        let r = with_keys(
            request(i + 1, &real_user(i)),
            &[("ip", ip), ("device", "d-1")],
        );
        start(&app, r).await.expect("within the ip's limit");
    }
    let refused = start(&app, with_keys(request(11, &real_user(10)), &[("ip", ip)]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let (reason, metadata) = error_info(&refused);
    assert_eq!(
        (reason.as_str(), metadata["key"].as_str()),
        ("KEY_RATE_LIMITED", "ip")
    );
    let retry = refused.get_details_retry_info().expect("RetryInfo");
    assert!(retry.retry_delay.unwrap() > Duration::from_secs(3500));
    // Another end user, and a start without keys, are not limited by that one.
    start(
        &app,
        with_keys(request(12, &real_user(11)), &[("ip", "198.51.100.1")]),
    )
    .await
    .unwrap();
    start(&app, request(13, &real_user(12))).await.unwrap();
    assert_eq!(codes_to(&app.gateway, "380971").len(), 12);

    for entry in std::fs::read_dir(app.store.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !bytes.windows(ip.len()).any(|w| w == ip.as_bytes()),
            "the store holds the IP in plain text"
        );
    }
}

#[tokio::test]
async fn country_budgets_count_per_calling_code_and_safe_prefixes_are_exempt() {
    let app = spawn(guarded(Settings {
        country_limits: "44=3/1h,*=5/1h".parse().unwrap(),
        safe_prefixes: "447700900".parse().unwrap(),
        ..Settings::default()
    }))
    .await;
    for i in 0..3 {
        // Mobile numbers: a fixed line takes no text code (MSGW_VERIFY_NUMBER_TYPES).
        start(&app, request(i + 1, &format!("+4474100000{i:02}")))
            .await
            .unwrap();
    }
    let refused = start(&app, request(4, "+447410000099")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "COUNTRY_RATE_LIMITED");
    assert_eq!(metadata["calling_code"], "44");
    assert!(refused.get_details_retry_info().is_some());
    // The company's own test numbers pass whatever the budget.
    for i in 0..5 {
        start(&app, request(10 + i, &format!("+4477009000{i:02}")))
            .await
            .unwrap();
    }
    // Every other calling code has a budget of its own (`*`).
    for i in 0..5 {
        start(&app, request(20 + i, &real_user(i))).await.unwrap();
    }
    let refused = start(&app, request(30, &real_user(99))).await.unwrap_err();
    assert_eq!(error_info(&refused).1["calling_code"], "380");
    start(&app, request(31, "+14155550100"))
        .await
        .expect("+1 has its own budget");
}

#[tokio::test]
async fn a_held_range_refuses_resends_until_released_by_rpc_or_command_line() {
    let app = spawn(guarded(quick_guard())).await;
    let results = pump(&[&app], 1, 5, Duration::from_millis(1)).await;
    assert_eq!(sent_before_the_hold(&results), 3);
    // A resend to a held range costs what a start costs: refused too.
    assert_suspected(
        &start(&app, request(50, &pumped(0))).await.unwrap_err(),
        PUMPED,
    );
    let held = held_ranges(&app).await;
    assert_eq!(
        (held.len(), held[0].unconverted, held[0].approved),
        (1, 3, 0)
    );

    let released = app
        .fraud_guard()
        .release_range(ReleaseRangeRequest {
            range: format!("+{PUMPED}"),
        })
        .await
        .unwrap()
        .into_inner()
        .range
        .unwrap();
    assert_eq!(released.range, PUMPED);
    let again = app
        .fraud_guard()
        .release_range(ReleaseRangeRequest {
            range: PUMPED.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (again.code(), error_info(&again).0.as_str()),
        (Code::NotFound, "RANGE_NOT_HELD")
    );
    // Judged afresh from the release: three more go out, then it is held again.
    let results = pump(&[&app], 100, 4, Duration::from_millis(1)).await;
    assert_eq!(sent_before_the_hold(&results), 3);

    let guard = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_msgw"))
            .arg("guard")
            .args(args)
            .env("MSGW_STORE_URL", app.store_url())
            .output()
            .expect("msgw runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = guard(&["list"]);
    assert!(
        listed.starts_with(PUMPED) && listed.contains("3 unconverted"),
        "{listed}"
    );
    assert!(guard(&["release", PUMPED]).contains(&format!("released {PUMPED}")));
    assert_eq!(guard(&["list"]).trim(), "no range is held");
    start(&app, request(200, &pumped(200)))
        .await
        .expect("released");
}

#[tokio::test]
async fn only_admin_callers_may_see_or_release_holds() {
    let app = spawn(Options {
        callers: Some(
            Callers::new()
                .caller(Entry::token("signup", "signup-token"))
                .caller(Entry::token("oncall", "oncall-token").permissions(&["admin"])),
        ),
        ..guarded(quick_guard())
    })
    .await;
    let as_caller =
        |token: &str| crate::helpers::as_caller(token, ListHeldRangesRequest::default());
    let denied = app
        .fraud_guard()
        .list_held_ranges(as_caller("signup-token"))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("\"admin\""), "{denied:?}");
    let listed = app
        .fraud_guard()
        .list_held_ranges(as_caller("oncall-token"))
        .await
        .unwrap();
    assert!(listed.into_inner().ranges.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_replicas_share_the_counters_and_hold_as_fast() {
    let schema = crate::postgres::TestSchema::create().await;
    let on_schema = || Options {
        store_url: Some(schema.url.clone()),
        ..guarded(pumping_guard())
    };
    let (one, two) = (spawn(on_schema()).await, spawn(on_schema()).await);
    let results = pump(&[&one, &two], 1, 100, Duration::from_millis(100)).await;
    let sent = sent_before_the_hold(&results);
    let delivered = codes_to(&one.gateway, PUMPED).len() + codes_to(&two.gateway, PUMPED).len();
    println!("two replicas: {sent} codes sent before the hold");
    assert_eq!(delivered, sent);
    assert!(
        (20..=35).contains(&sent),
        "{sent} codes went out before the hold"
    );
    // Both see the hold, whichever placed it.
    assert_eq!(held_ranges(&one).await.len(), 1);
    assert_eq!(held_ranges(&two).await.len(), 1);
}
