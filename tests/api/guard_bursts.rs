//! The fraud guard against faster and subtler pumping: a bot faster than the grace
//! period held at the cap as it reaches it, codes pumped through resends, approvals that end a hold early, concurrent
//! retries of one start, and `msgw guard` pointed at a database that is not msgw's.

use std::time::Duration;

use msgw::core::verify::guard::Settings;
use msgw::transport::proto::{CheckVerificationRequest, ListHeldRangesRequest};

use crate::fraud_guard::{
    PUMPED, assert_suspected, codes_to, guarded, held_ranges, pump, pumped, quick_guard, request,
    sent_before_the_hold, start,
};
use crate::helpers::spawn;

#[tokio::test]
async fn a_bot_faster_than_the_grace_period_is_held_the_moment_it_reaches_the_cap() {
    // The default grace: nothing is judged unconverted for two minutes.
    let app = spawn(guarded(Settings::default())).await;
    let results = pump(&[&app], 1, 40, Duration::from_millis(1)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // The 40th code (2 × MSGW_VERIFY_GUARD_MIN_STARTS) held the range as it went:
    // listed and counted before any further start.
    let held = held_ranges(&app).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!((held[0].range.as_str(), held[0].unconverted), (PUMPED, 40));
    assert_eq!(
        app.metric_sum("msgw_verify_guard_holds_total", &[r#"mode="on""#])
            .await,
        1.0
    );
    let results = pump(&[&app], 100, 10, Duration::from_millis(1)).await;
    assert_eq!(sent_before_the_hold(&results), 0);
    assert_eq!(codes_to(&app.gateway, PUMPED).len(), 40);
}

#[tokio::test]
async fn codes_pumped_through_resends_count_and_hold_the_range() {
    // Never unconverted within the test (grace 50m): only the codes count, up to the
    // cap of 2 × 3: four starts and two resends.
    let app = spawn(guarded(Settings {
        grace: Duration::from_secs(3000),
        min_starts: 3,
        ..Settings::default()
    }))
    .await;
    for n in 1..=4 {
        start(&app, request(n, &pumped(n))).await.expect("a start");
    }
    let mut refused = None;
    'rounds: for round in 1..=4 {
        for n in 1..=4 {
            match start(&app, request(round * 100 + n, &pumped(n))).await {
                Ok(_) => {}
                Err(status) => {
                    refused = Some(status);
                    break 'rounds;
                }
            }
        }
    }
    assert_suspected(&refused.expect("a resend is refused"), PUMPED);
    assert_eq!(codes_to(&app.gateway, PUMPED).len(), 6);
}

#[tokio::test]
async fn approvals_end_a_hold_once_the_range_converts_again() {
    let app = spawn(guarded(quick_guard())).await;
    let results = pump(&[&app], 1, 4, Duration::from_millis(1)).await;
    assert_eq!(sent_before_the_hold(&results), 3);
    // The first verification's user enters the code: 1 of 3 approved is above 20 %.
    let code = codes_to(&app.gateway, &pumped(1)[1..]).pop().unwrap();
    app.verification()
        .check_verification(CheckVerificationRequest {
            phone: pumped(1),
            code,
        })
        .await
        .expect("a check in a held range");
    let held = app
        .fraud_guard()
        .list_held_ranges(ListHeldRangesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .ranges;
    assert!(held.is_empty(), "{held:?}");
    start(&app, request(50, &pumped(50)))
        .await
        .expect("open again");
}

#[tokio::test]
async fn concurrent_retries_of_one_start_all_replay_it() {
    let app = spawn(guarded(Settings::default())).await;
    let tries = (0..20).map(|_| start(&app, request(7, "+380971234567")));
    let results = futures_util::future::join_all(tries).await;
    for result in &results {
        assert!(result.is_ok(), "{result:?}");
    }
    assert_eq!(codes_to(&app.gateway, "380971234567").len(), 1);
}

#[tokio::test]
async fn msgw_guard_refuses_a_database_that_is_not_msgws_and_leaves_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.db");
    let db = rusqlite::Connection::open(&other).unwrap();
    db.execute_batch("CREATE TABLE foo (x INTEGER)").unwrap();
    drop(db);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_msgw"))
        .args(["guard", "list"])
        .env("MSGW_STORE_URL", format!("sqlite://{}", other.display()))
        .output()
        .expect("msgw runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not msgw's store"), "{stderr}");
    let db = rusqlite::Connection::open(&other).unwrap();
    let tables: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "nothing was created in it");
}
