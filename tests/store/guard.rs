//! The fraud guard's counters in the store: a range held by its unconverted starts,
//! approvals that keep it open, limits exact across replicas starting at once, a
//! release that judges the range afresh, and prune.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use futures_util::future::join_all;
use msgw::core::domain::Phone;
use msgw::core::ports::store::{
    GuardCheck, GuardFinding, KeyCheck, Retention, StartOutcome, Store, Window,
};

use crate::Fixture;
use crate::verifications::{check as check_code, limit, new, start as call};

pub fn pumped(n: u64) -> Phone {
    Phone::parse(&format!("881234{n:06}")).unwrap()
}

/// Held at the third unconverted start (every unapproved start counts at once),
/// below 20 % approved.
pub fn check(keys: Vec<KeyCheck>, country: Option<Window>) -> GuardCheck {
    let now = Utc::now();
    GuardCheck {
        enforce: true,
        range: "881234".into(),
        calling_code: "881".into(),
        since: now - chrono::Duration::hours(1),
        decided_before: now + chrono::Duration::seconds(1),
        min_starts: 3,
        min_conversion: 0.2,
        hold_until: now + chrono::Duration::hours(1),
        country,
        keys,
        judged: true,
        code_min_starts: None,
        region: None,
        key_limits: Vec::new(),
        trusted_since: None,
    }
}

pub async fn start(
    store: &dyn Store,
    n: u64,
    guard: &GuardCheck,
) -> (StartOutcome, Vec<GuardFinding>) {
    let verification = new(n, None, pumped(n), Utc::now());
    let decided = store
        .start_verification(&call(verification, limit(100), Some(guard.clone())))
        .await
        .unwrap();
    (decided.outcome, decided.findings)
}

pub async fn approve(store: &dyn Store, n: u64) {
    let approved = check_code(store, pumped(n), true).await.unwrap();
    assert_eq!(
        approved.status,
        msgw::core::domain::VerificationStatus::Approved
    );
}

pub async fn a_range_is_held_by_its_unconverted_starts_and_approvals_keep_it_open(
    fixture: Fixture,
) {
    let store = fixture.open().await;
    let guard = check(Vec::new(), None);
    for n in 1..=2 {
        assert!(matches!(
            start(&*store, n, &guard).await.0,
            StartOutcome::Started(_)
        ));
    }
    approve(&*store, 2).await;
    // 1 approved and up to 4 unconverted (1, 3, 4, 5): 1/5 is not below 20 %.
    for n in 3..=6 {
        let (created, findings) = start(&*store, n, &guard).await;
        assert!(
            matches!(created, StartOutcome::Started(_)),
            "{n}: {findings:?}"
        );
        let placed = matches!(findings.as_slice(), [GuardFinding::Placed { .. }]);
        assert_eq!(placed, n == 6, "{n}: {findings:?}");
    }
    // The sixth code brings the range to 5 unconverted and 1 approved: held as it goes.
    let (created, findings) = start(&*store, 7, &guard).await;
    assert!(matches!(created, StartOutcome::Refused), "{findings:?}");
    assert!(matches!(
        findings.as_slice(),
        [GuardFinding::Held { new: false, .. }]
    ));
    let hold = &store
        .range_hold("881234", Utc::now())
        .await
        .unwrap()
        .expect("held");
    assert_eq!(
        (hold.unconverted, hold.approved, hold.shadow),
        (5, 1, false)
    );
    // The hold outlives the refused start, on every handle, and refuses the next one.
    let other = fixture.open().await;
    assert_eq!(
        other
            .range_hold("881234", Utc::now())
            .await
            .unwrap()
            .as_ref(),
        Some(hold)
    );
    let (created, findings) = start(&*other, 8, &guard).await;
    assert!(matches!(created, StartOutcome::Refused));
    assert!(matches!(
        findings.as_slice(),
        [GuardFinding::Held { new: false, .. }]
    ));
    // Shadow: found, not refused; a shadow hold is placed once.
    let shadow = GuardCheck {
        enforce: false,
        range: "881235".into(),
        ..check(Vec::new(), None)
    };
    let mut placed = 0;
    for n in 10..=15 {
        let number = Phone::parse(&format!("881235{n:06}")).unwrap();
        let verification = new(n, None, number, Utc::now());
        let decided = store
            .start_verification(&call(verification, limit(100), Some(shadow.clone())))
            .await
            .unwrap();
        let (created, findings) = (decided.outcome, decided.findings);
        assert!(matches!(created, StartOutcome::Started(_)));
        placed += findings
            .iter()
            .filter(|f| {
                matches!(
                    f,
                    GuardFinding::Held { new: true, .. } | GuardFinding::Placed { .. }
                )
            })
            .count();
    }
    assert_eq!(placed, 1);
    let held = store.held_ranges(Utc::now(), "", 10).await.unwrap();
    let ranges: Vec<(&str, bool)> = held.iter().map(|h| (h.range.as_str(), h.shadow)).collect();
    assert_eq!(ranges, [("881234", false), ("881235", true)]);
    assert_eq!(
        store
            .held_ranges(Utc::now(), "881234", 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// Starts `ids` all at once, on the two handles in turn.
async fn at_once(
    a: &Arc<dyn Store>,
    b: &Arc<dyn Store>,
    ids: std::ops::RangeInclusive<u64>,
    guard: &GuardCheck,
) -> Vec<(StartOutcome, Vec<GuardFinding>)> {
    join_all(ids.map(|n| {
        let store = if n % 2 == 0 { a } else { b };
        async move { start(&**store, n, guard).await }
    }))
    .await
}

pub fn count_started(results: &[(StartOutcome, Vec<GuardFinding>)]) -> usize {
    results
        .iter()
        .filter(|(c, _)| matches!(c, StartOutcome::Started(_)))
        .count()
}

pub async fn limits_count_exactly_across_replicas_starting_at_once(fixture: Fixture) {
    let (a, b) = (fixture.open().await, fixture.open().await);
    let now = Utc::now();
    let window = Window {
        max: 5,
        since: now - chrono::Duration::hours(1),
    };
    let key = KeyCheck {
        name: "ip".into(),
        mac: vec![7; 32],
        window,
    };
    // Unconverted starts never hold here: the range rule needs 1000.
    let by_key = GuardCheck {
        min_starts: 1000,
        ..check(vec![key], None)
    };
    let results = at_once(&a, &b, 1..=20, &by_key).await;
    let started = count_started(&results);
    assert_eq!(started, 5, "{results:?}");
    for (created, findings) in &results {
        if matches!(created, StartOutcome::Refused) {
            assert!(
                matches!(findings.as_slice(), [GuardFinding::KeyLimited { name, .. }] if name == "ip")
            );
        }
    }
    let by_country = GuardCheck {
        min_starts: 1000,
        range: "881299".into(),
        ..check(Vec::new(), Some(Window { max: 8, ..window }))
    };
    let results = at_once(&a, &b, 100..=120, &by_country).await;
    let started = count_started(&results);
    // The key's five starts were of calling code 881 too.
    assert_eq!(started, 3, "{results:?}");
}

pub async fn a_release_judges_the_range_afresh_and_prune_drops_old_counts(fixture: Fixture) {
    let store = fixture.open().await;
    let guard = check(Vec::new(), None);
    for n in 1..=3 {
        start(&*store, n, &guard).await;
    }
    assert!(matches!(
        start(&*store, 4, &guard).await.0,
        StartOutcome::Refused
    ));
    let released = store.release_range("881234", Utc::now()).await.unwrap();
    assert!(released.is_some());
    assert_eq!(
        store.release_range("881234", Utc::now()).await.unwrap(),
        None
    );
    assert!(
        store
            .held_ranges(Utc::now(), "", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // The three unconverted starts before the release no longer count.
    for n in 5..=7 {
        assert!(matches!(
            start(&*store, n, &guard).await.0,
            StartOutcome::Started(_)
        ));
    }
    assert!(matches!(
        start(&*store, 8, &guard).await.0,
        StartOutcome::Refused
    ));

    // Pruned past the guard's longest window: a key limit of one finds nothing left.
    let key = |window| KeyCheck {
        name: "user".into(),
        mac: vec![9; 32],
        window,
    };
    let later = Utc::now() + chrono::Duration::hours(3);
    let week_ago = Window {
        max: 1,
        since: later - chrono::Duration::days(7),
    };
    let other_range = |keys| GuardCheck {
        range: "881777".into(),
        ..check(keys, None)
    };
    assert!(matches!(
        start(&*store, 20, &other_range(vec![key(week_ago)]))
            .await
            .0,
        StartOutcome::Started(_)
    ));
    let week = Duration::from_secs(7 * 86_400);
    let retention = Retention {
        max_age: week,
        max_events: 1_000,
        claims_max_age: week,
        guard_max_age: Duration::from_secs(3600),
        trusted_keys_max_age: Duration::from_secs(3600),
    };
    store.prune(retention, later).await.unwrap();
    assert!(
        store
            .held_ranges(Utc::now(), "", 10)
            .await
            .unwrap()
            .is_empty()
    );
    let (created, findings) = start(&*store, 21, &other_range(vec![key(week_ago)])).await;
    assert!(matches!(created, StartOutcome::Started(_)), "{findings:?}");
}
