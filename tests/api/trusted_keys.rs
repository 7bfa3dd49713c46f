//! Fix 45, finding 2: one approval trusts only the keys its verification started with
//! (not keys its resends added), and only in the calling code of its number. On SQLite
//! and on two PostgreSQL replicas.

use std::time::Duration;

use msgw::core::verify::guard::Settings;
use msgw::transport::proto::CheckVerificationRequest;

use crate::fraud_guard::{codes_to, held_ranges, request, start, with_keys};
use crate::guard_codes::{Apps, On};
use crate::helpers::error_info;

/// Sends ten codes to range `range` (numbers of `digits` digits) with no keys, one at
/// a time on the apps in turn: it is held.
async fn hold(case: &Apps, first_id: u64, range: &str, digits: usize) {
    for i in 0..10u64 {
        let app = &case.apps[i as usize % case.apps.len()];
        let number = format!("+{range}{i:0width$}", width = digits - range.len());
        let _ = start(app, request(first_id + i, &number)).await;
    }
    let held = held_ranges(&case.apps[0]).await;
    assert!(held.iter().any(|h| h.range == range), "{held:?}");
}

async fn one_approval_trusts_its_start_keys_in_its_country(on: On) {
    let case = Apps::start(
        on,
        Settings {
            grace: Duration::ZERO,
            min_starts: 6,
            key_limits: "ip=10/1h".parse().unwrap(),
            ..Settings::default()
        },
    )
    .await;
    let app = |i: usize| &case.apps[i % case.apps.len()];
    let own = "+380971230000";
    let ip = |n: u64| format!("203.0.113.{n}");
    // The attacker's own number: a start and four resends, each with another ip.
    for n in 0..5u64 {
        start(
            app(n as usize),
            with_keys(request(1 + n, own), &[("ip", &ip(n))]),
        )
        .await
        .expect("a send");
    }
    let code = codes_to(&app(0).gateway, &own[1..])
        .into_iter()
        .chain(codes_to(&app(1).gateway, &own[1..]))
        .last()
        .expect("its code");
    app(1)
        .verification()
        .check_verification(CheckVerificationRequest {
            phone: own.into(),
            code,
        })
        .await
        .expect("approved");

    // A hold in another calling code (+371): no key passes it, the start's included.
    hold(&case, 100, "371220", 11).await;
    for n in 0..5u64 {
        let call = with_keys(
            request(200 + n, &format!("+3712209{n:04}")),
            &[("ip", &ip(n))],
        );
        let refused = start(app(n as usize), call).await.unwrap_err();
        assert_eq!(error_info(&refused).0, "SUSPECTED_FRAUD", "ip {n}");
    }
    // A hold in its own calling code (+380): the start's key passes it, the keys the
    // resends added do not.
    hold(&case, 300, "380501", 12).await;
    let returning = with_keys(request(400, "+380501999001"), &[("ip", &ip(0))]);
    start(app(1), returning)
        .await
        .expect("the key the verification started with, in its calling code");
    for n in 1..5u64 {
        let call = with_keys(
            request(400 + n, &format!("+38050199{n:04}")),
            &[("ip", &ip(n))],
        );
        let refused = start(app(n as usize), call).await.unwrap_err();
        assert_eq!(error_info(&refused).0, "SUSPECTED_FRAUD", "ip {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approval_trusts_only_its_start_keys_in_its_calling_code_on_sqlite() {
    one_approval_trusts_its_start_keys_in_its_country(On::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approval_trusts_only_its_start_keys_in_its_calling_code_on_two_postgres_replicas() {
    one_approval_trusts_its_start_keys_in_its_country(On::Postgres).await;
}
