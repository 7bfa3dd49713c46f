//! The conversion rule per region of a shared calling code (fix 45, finding 3): on +1,
//! real US users approving their codes do not open the calling code to a pumper spread
//! over Jamaica's (+1 876) mobile ranges. JM is held at the default cap (200) while a
//! new US user is still served; on SQLite and on two PostgreSQL replicas sharing the
//! counters, with concurrent callers.

use futures_util::{StreamExt as _, stream};
use msgw::core::verify::guard::Settings;
use msgw::transport::proto::{CheckVerificationRequest, ReleaseRangeRequest};
use tonic::Status;

use crate::fraud_guard::{assert_suspected, codes_to, held_ranges, request, start};
use crate::guard_codes::{Apps, On};
use crate::helpers::TestApp;

/// A US number (+1 201 2..), the `i`th real user.
fn us(i: u64) -> String {
    format!("+12012{:02}{:04}", i % 100, i % 10_000)
}

/// A Jamaican mobile number (+1 876 3.. or 4..), spread over 20 ranges (`18763d`,
/// `18764d`).
fn jamaican(i: u64) -> String {
    format!("+1876{}{}{:05}", 3 + (i % 20) / 10, i % 10, i % 100_000)
}

/// Starts a verification of `phone` on `app` and enters its code.
async fn approve(app: &TestApp, id: u64, phone: String) -> Result<(), Status> {
    start(app, request(id, &phone)).await?;
    let code = codes_to(&app.gateway, &phone[1..]).pop().expect("its code");
    app.verification()
        .check_verification(CheckVerificationRequest { phone, code })
        .await
        .map(|_| ())
}

async fn a_region_is_held_while_another_converts(on: On) {
    let case = Apps::start(on, Settings::default()).await;
    let apps = &case.apps;
    // 100 real US users approve their codes, on the apps in turn.
    let users = (0..100).map(|i| approve(&apps[i as usize % apps.len()], i + 1, us(i)));
    let approved: Vec<_> = stream::iter(users).buffered(8).collect().await;
    assert!(approved.iter().all(Result::is_ok), "{approved:?}");
    // A pumper asks 700 codes over 20 Jamaican mobile ranges; none is entered.
    let pumped = (0..700).map(|i| request(10_000 + i, &jamaican(i)));
    let results = case.run(pumped.collect()).await;
    let codes = case.codes_to("1876");
    let refused: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    println!(
        "regions ({on:?}): 100 US approvals, then {codes} codes to JM of 700 asked, {} refused",
        refused.len()
    );
    assert_eq!(
        codes, 200,
        "2 × MSGW_VERIFY_GUARD_COUNTRY_MIN_STARTS for the region"
    );
    assert_eq!(refused.len(), 500);
    for status in refused {
        assert_suspected(status, "1/JM");
    }
    let held = held_ranges(&apps[0]).await;
    let names: Vec<_> = held.iter().map(|h| h.range.as_str()).collect();
    assert_eq!(
        names,
        ["1/JM"],
        "neither +1 nor a JM range is held: {held:?}"
    );
    assert_eq!((held[0].unconverted, held[0].approved), (200, 0));
    let holds = case
        .metric("msgw_verify_guard_holds_total", &[r#"mode="on""#])
        .await;
    assert_eq!(holds, 1.0);
    // A new US user is still served, on every replica.
    for (i, app) in apps.iter().enumerate() {
        let id = 20_000 + i as u64;
        approve(app, id, us(id)).await.expect("a US user is served");
    }
    // Operators name the region as the listing does.
    let released = apps[apps.len() - 1]
        .fraud_guard()
        .release_range(ReleaseRangeRequest {
            range: "1/jm".into(),
        })
        .await
        .expect("the region is held")
        .into_inner()
        .range
        .expect("the released hold");
    assert_eq!(released.range, "1/JM");
    start(&apps[0], request(30_000, &jamaican(30_000)))
        .await
        .expect("released: judged afresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pumped_region_is_held_while_its_calling_codes_other_region_converts_on_sqlite() {
    a_region_is_held_while_another_converts(On::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pumped_region_is_held_while_its_calling_codes_other_region_converts_on_two_postgres_replicas()
 {
    a_region_is_held_while_another_converts(On::Postgres).await;
}
