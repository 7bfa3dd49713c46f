//! Verifications: starts against the phone limit and the one pending verification per
//! caller and number, resends, checks and cancels, each one store call that keeps them
//! atomic across replicas.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use msgw::core::domain::{CallerName, Channel, ClientId, Phone, VerificationStatus};
use msgw::core::ports::store::{
    Decided, GuardCheck, NewVerification, PhoneLimit, Retention, Start, StartOutcome, Store,
    StoredCode, VerificationChange, VerificationRecord,
};

use crate::Fixture;

pub fn id(n: u64) -> ClientId {
    ClientId::new(n).unwrap()
}

pub fn phone(n: u64) -> Phone {
    Phone::parse(&format!("3809712{n:05}")).unwrap()
}

fn caller(name: &str) -> Option<CallerName> {
    Some(CallerName::parse(name).unwrap())
}

pub fn code(tag: u8) -> StoredCode {
    StoredCode {
        mac: vec![tag; 32],
        sealed: vec![tag; 6],
        nonce: vec![tag; 16],
    }
}

pub fn new(n: u64, who: Option<CallerName>, number: Phone, at: DateTime<Utc>) -> NewVerification {
    NewVerification {
        id: id(n),
        caller: who,
        phone: number,
        channels: vec![Channel::Sms, Channel::Viber],
        code: Some(code(1)),
        checks: 5,
        sends_left: 4,
        at,
        expires_at: at + chrono::Duration::minutes(10),
    }
}

pub fn limit(max: u32) -> PhoneLimit {
    PhoneLimit {
        max,
        since: Utc::now() - chrono::Duration::hours(1),
    }
}

/// A call starting `verification` (or resending the pending one, 30 s after its latest
/// send at the earliest).
pub fn start(verification: NewVerification, limit: PhoneLimit, guard: Option<GuardCheck>) -> Start {
    Start {
        not_after: verification.at - chrono::Duration::seconds(30),
        new: verification,
        limit,
        guard,
        request_mac: vec![1; 32],
    }
}

/// What a call starting `verification` did.
pub async fn begin(store: &dyn Store, verification: NewVerification) -> StartOutcome {
    store
        .start_verification(&start(verification, limit(100), None))
        .await
        .unwrap()
        .outcome
}

pub async fn started(store: &dyn Store, verification: NewVerification) -> VerificationRecord {
    match begin(store, verification).await {
        StartOutcome::Started(record) => record,
        other => panic!("expected a start, got {other:?}"),
    }
}

/// The caller's pending verification of `number` now.
async fn pending(
    store: &dyn Store,
    who: Option<&CallerName>,
    number: Phone,
) -> Option<VerificationRecord> {
    let decided = store.pending_verification(who, number, Utc::now()).await;
    decided.unwrap().outcome
}

/// Checks a code against the pending verification of `number`: `right` when it is its.
pub async fn check(store: &dyn Store, number: Phone, right: bool) -> Option<VerificationRecord> {
    let judge = move |_: &VerificationRecord| right;
    let decided = store.check_verification(None, number, Utc::now(), &judge, None);
    decided.await.unwrap().outcome
}

pub async fn a_verification_reads_back_exactly_by_number_and_by_send(fixture: Fixture) {
    let store = fixture.open().await;
    let at = Utc::now();
    let record = started(&*store, new(1, caller("billing"), phone(1), at)).await;
    assert_eq!(record.id, id(1));
    assert_eq!(record.last_send, id(1));
    assert_eq!(record.caller, caller("billing"));
    assert_eq!(record.phone, phone(1));
    assert_eq!(record.status, VerificationStatus::Pending);
    assert_eq!(record.channels, [Channel::Sms, Channel::Viber]);
    assert_eq!(record.code, Some(code(1)));
    assert_eq!((record.checks_left, record.sends_left), (5, 4));
    assert_eq!(
        record.expires_at.timestamp_millis(),
        (at + chrono::Duration::minutes(10)).timestamp_millis()
    );
    let found = pending(&*store, caller("billing").as_ref(), phone(1)).await;
    assert_eq!(found.as_ref(), Some(&record));
    assert_eq!(
        store.verification_of_send(id(1)).await.unwrap(),
        Some((record.clone(), false))
    );
    store
        .change_verification(&VerificationChange::Sent { send: id(1) })
        .await
        .unwrap();
    assert_eq!(
        store.verification_of_send(id(1)).await.unwrap(),
        Some((record, true))
    );
    // Another caller's, or no caller's, is another verification.
    for other in [caller("orders"), None] {
        assert_eq!(pending(&*store, other.as_ref(), phone(1)).await, None);
    }
}

pub async fn a_caller_has_one_pending_verification_per_number_within_its_limit(fixture: Fixture) {
    let store = fixture.open().await;
    let at = Utc::now();
    started(&*store, new(1, caller("billing"), phone(2), at)).await;
    // The same caller and number: the pending one, too soon to send again; nothing
    // written.
    match begin(&*store, new(2, caller("billing"), phone(2), at)).await {
        StartOutcome::TooSoon { last_send_at } => {
            assert_eq!(last_send_at.timestamp_millis(), at.timestamp_millis())
        }
        other => panic!("expected the pending one, got {other:?}"),
    }
    assert_eq!(store.verification_of_send(id(2)).await.unwrap(), None);
    // The same id again is a send of the first: its replay for the same request, and
    // another request's id (another caller or number) otherwise.
    match begin(&*store, new(1, caller("billing"), phone(2), at)).await {
        StartOutcome::Replay { record, sent } => {
            assert_eq!(
                (record.id, record.caller, sent),
                (id(1), caller("billing"), false)
            )
        }
        other => panic!("expected the replay, got {other:?}"),
    }
    for (who, to) in [("orders", 2), ("billing", 3)] {
        let other = begin(&*store, new(1, caller(who), phone(to), at)).await;
        assert_eq!(other, StartOutcome::IdTaken, "{who} to {to}");
    }
    // Other callers count against the number's limit too.
    started(&*store, new(3, caller("orders"), phone(2), at)).await;
    let limited = store
        .start_verification(&start(new(4, None, phone(2), at), limit(2), None))
        .await
        .unwrap();
    match limited.outcome {
        StartOutcome::PhoneLimited { oldest } => {
            assert_eq!(oldest.timestamp_millis(), at.timestamp_millis())
        }
        other => panic!("expected the limit, got {other:?}"),
    }
    // Starts of more than an hour ago do not count.
    let past = PhoneLimit {
        max: 2,
        since: at + chrono::Duration::milliseconds(1),
    };
    let fresh = store
        .start_verification(&start(new(4, None, phone(2), at), past, None))
        .await
        .unwrap();
    assert!(matches!(fresh.outcome, StartOutcome::Started(_)));
}

pub async fn concurrent_wrong_codes_on_two_replicas_take_at_most_its_checks(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    started(&*one, new(1, None, phone(4), Utc::now())).await;
    let results = join_all((0..12).map(|i| {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        async move { check(&*store, phone(4), false).await }
    }))
    .await;
    let taken: Vec<VerificationRecord> = results.into_iter().flatten().collect();
    assert_eq!(taken.len(), 5, "{taken:#?}");
    let mut left: Vec<u32> = taken.iter().map(|r| r.checks_left).collect();
    left.sort_unstable();
    assert_eq!(left, [0, 1, 2, 3, 4], "each check once");
    let last = taken.iter().find(|r| r.checks_left == 0).unwrap();
    assert_eq!(last.status, VerificationStatus::Failed);
    assert_eq!(pending(&*one, None, phone(4)).await, None);
}

pub async fn two_right_codes_on_two_replicas_approve_once(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    started(&*one, new(1, None, phone(5), Utc::now())).await;
    // A code that is not the verification's approves nothing: it takes a check.
    let wrong = check(&*one, phone(5), false).await.unwrap();
    assert_eq!(
        (wrong.status, wrong.checks_left),
        (VerificationStatus::Pending, 4)
    );
    let results = join_all((0..6).map(|i| {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        async move { check(&*store, phone(5), true).await }
    }))
    .await;
    let approved: Vec<VerificationRecord> = results.into_iter().flatten().collect();
    assert_eq!(approved.len(), 1, "{approved:#?}");
    assert_eq!(approved[0].status, VerificationStatus::Approved);
}

pub async fn a_resend_holds_once_per_interval_and_for_its_sends(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    let at = Utc::now() - chrono::Duration::seconds(60);
    started(&*one, new(1, None, phone(6), at)).await;
    let resend = |send: u64, at: DateTime<Utc>, interval: i64| Start {
        new: NewVerification {
            channels: vec![Channel::Telegram],
            ..new(send, None, phone(6), at)
        },
        not_after: at - chrono::Duration::seconds(interval),
        limit: limit(100),
        guard: None,
        request_mac: vec![1; 32],
    };
    // Too soon: nothing changes, and the send id stays free.
    let soon = one
        .start_verification(&resend(2, at + chrono::Duration::seconds(10), 30))
        .await
        .unwrap();
    assert!(
        matches!(soon.outcome, StartOutcome::TooSoon { .. }),
        "{soon:?}"
    );
    assert_eq!(one.verification_of_send(id(2)).await.unwrap(), None);
    // Two replicas resending at once after the interval: one resend.
    let now = Utc::now();
    let (resend_a, resend_b) = (resend(2, now, 30), resend(3, now, 30));
    let (a, b) = tokio::join!(
        one.start_verification(&resend_a),
        two.start_verification(&resend_b),
    );
    let done: Vec<VerificationRecord> = [a.unwrap(), b.unwrap()]
        .into_iter()
        .filter_map(|d| match d.outcome {
            StartOutcome::Resent(record) => Some(record),
            StartOutcome::TooSoon { .. } => None,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].sends_left, 3);
    assert_eq!(done[0].channels, [Channel::Telegram]);
    assert_eq!(done[0].code, Some(code(1)), "the same code");
    // Sends run out.
    let mut left = 3;
    for send in 10..20 {
        let later = Utc::now() + chrono::Duration::seconds(send as i64);
        match one
            .start_verification(&resend(send, later, 0))
            .await
            .unwrap()
            .outcome
        {
            StartOutcome::Resent(r) => {
                left -= 1;
                assert_eq!(r.sends_left, left);
            }
            StartOutcome::Exhausted => assert_eq!(left, 0),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(left, 0);
    // A voice resend forgets the code until its call tells the new one.
    let record = started(&*one, new(30, None, phone(7), at)).await;
    let voice = Start {
        new: NewVerification {
            channels: vec![Channel::Voice],
            code: None,
            ..new(31, None, phone(7), Utc::now())
        },
        not_after: Utc::now(),
        limit: limit(100),
        guard: None,
        request_mac: vec![1; 32],
    };
    let forgot = match one.start_verification(&voice).await.unwrap().outcome {
        StartOutcome::Resent(record) => record,
        other => panic!("{other:?}"),
    };
    assert_eq!(forgot.code, None);
    let stale = VerificationChange::SetCode {
        id: record.id,
        send: id(30),
        code: code(2),
    };
    assert_eq!(one.change_verification(&stale).await.unwrap(), None);
    let set = VerificationChange::SetCode {
        id: record.id,
        send: id(31),
        code: code(3),
    };
    let told = one.change_verification(&set).await.unwrap().unwrap();
    assert_eq!(told.code, Some(code(3)));
}

pub async fn expired_verifications_are_marked_once_and_pruned_after_the_hour(fixture: Fixture) {
    let store = fixture.open().await;
    let long_ago = Utc::now() - chrono::Duration::hours(2);
    started(&*store, new(1, None, phone(8), long_ago)).await;
    started(&*store, new(2, None, phone(9), Utc::now())).await;
    let first = store
        .pending_verification(None, phone(8), Utc::now())
        .await
        .unwrap();
    assert_eq!(first.outcome, None);
    assert_eq!(first.expired.len(), 1);
    assert_eq!(first.expired[0].status, VerificationStatus::Expired);
    let again = store
        .pending_verification(None, phone(8), Utc::now())
        .await
        .unwrap();
    assert!(again.expired.is_empty());
    let week = Duration::from_secs(7 * 86_400);
    let retention = Retention {
        max_age: week,
        max_events: 1_000,
        claims_max_age: week,
        guard_max_age: std::time::Duration::from_secs(3600),
        trusted_keys_max_age: std::time::Duration::from_secs(3600),
    };
    store.prune(retention, Utc::now()).await.unwrap();
    assert_eq!(store.verification_of_send(id(1)).await.unwrap(), None);
    assert!(store.verification_of_send(id(2)).await.unwrap().is_some());
    // The forgotten (a refused first send) go at once, with their sends.
    store
        .change_verification(&VerificationChange::Forget { id: id(2) })
        .await
        .unwrap();
    assert_eq!(store.verification_of_send(id(2)).await.unwrap(), None);
    started(&*store, new(2, None, phone(9), Utc::now())).await;
}

/// Twenty starts of one number at once on two handles, each with an id of its own:
/// one verification starts, every other call finds it too soon to send again; and
/// twenty starts of one id: one starts, every other replays it. No call fails (no
/// SQLITE_BUSY, no serialization failure reaches the caller).
pub async fn concurrent_starts_of_one_number_start_one_verification(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    let at_once = |ids: Vec<u64>, number: Phone| {
        let (one, two) = (one.clone(), two.clone());
        join_all(ids.into_iter().enumerate().map(move |(i, n)| {
            let store = if i % 2 == 0 { one.clone() } else { two.clone() };
            async move {
                let call = start(new(n, None, number, Utc::now()), limit(100), None);
                store.start_verification(&call).await
            }
        }))
    };
    let outcomes: Vec<Decided<StartOutcome>> = at_once((1..=20).collect(), phone(40))
        .await
        .into_iter()
        .map(|done| done.expect("no store error"))
        .collect();
    let first: Vec<&VerificationRecord> = outcomes
        .iter()
        .filter_map(|d| match &d.outcome {
            StartOutcome::Started(record) => Some(record),
            StartOutcome::TooSoon { .. } => None,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(first.len(), 1, "{outcomes:#?}");
    assert_eq!(
        pending(&*one, None, phone(40)).await.as_ref(),
        Some(first[0])
    );
    let mut sends = 0;
    for n in 1..=20 {
        sends += usize::from(one.verification_of_send(id(n)).await.unwrap().is_some());
    }
    assert_eq!(sends, 1, "one send claimed");

    let outcomes: Vec<Decided<StartOutcome>> = at_once(vec![100; 20], phone(41))
        .await
        .into_iter()
        .map(|done| done.expect("no store error"))
        .collect();
    let mut started = 0;
    for decided in &outcomes {
        match &decided.outcome {
            StartOutcome::Started(record) => {
                started += 1;
                assert_eq!(record.id, id(100));
            }
            StartOutcome::Replay { record, sent } => {
                assert_eq!((record.id, *sent), (id(100), false));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(started, 1, "{outcomes:#?}");
}
