//! Verifications: starts against the phone limit and the one pending verification per
//! caller and number, and the conditional changes that keep checks and resends atomic
//! across replicas.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use msgw::domain::{CallerName, Channel, ClientId, Phone, VerificationStatus};
use msgw::store::{
    Created, NewVerification, PhoneLimit, Retention, Store, StoredCode, VerificationChange,
    VerificationRecord,
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

async fn started(store: &dyn Store, verification: &NewVerification) -> VerificationRecord {
    match store
        .create_verification(verification, limit(100), None)
        .await
        .map(|(created, _)| created)
    {
        Ok(Created::Started(record)) => record,
        other => panic!("expected a start, got {other:?}"),
    }
}

pub async fn a_verification_reads_back_exactly_by_number_and_by_send(fixture: Fixture) {
    let store = fixture.open().await;
    let at = Utc::now();
    let verification = new(1, caller("billing"), phone(1), at);
    let record = started(&*store, &verification).await;
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
    let pending = store
        .pending_verification(caller("billing").as_ref(), phone(1), Utc::now())
        .await
        .unwrap();
    assert_eq!(pending.as_ref(), Some(&record));
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
        let found = store
            .pending_verification(other.as_ref(), phone(1), Utc::now())
            .await
            .unwrap();
        assert_eq!(found, None);
    }
}

pub async fn a_caller_has_one_pending_verification_per_number_within_its_limit(fixture: Fixture) {
    let store = fixture.open().await;
    let at = Utc::now();
    started(&*store, &new(1, caller("billing"), phone(2), at)).await;
    // The same caller and number: the pending one, nothing written.
    match store
        .create_verification(&new(2, caller("billing"), phone(2), at), limit(100), None)
        .await
        .map(|(created, _)| created)
        .unwrap()
    {
        Created::Pending(record) => assert_eq!(record.id, id(1)),
        other => panic!("expected the pending one, got {other:?}"),
    }
    assert_eq!(store.verification_of_send(id(2)).await.unwrap(), None);
    // The same id again is taken.
    assert_eq!(
        store
            .create_verification(&new(1, caller("orders"), phone(3), at), limit(100), None)
            .await
            .map(|(created, _)| created)
            .unwrap(),
        Created::IdTaken
    );
    // Other callers count against the number's limit too.
    started(&*store, &new(3, caller("orders"), phone(2), at)).await;
    match store
        .create_verification(&new(4, None, phone(2), at), limit(2), None)
        .await
        .map(|(created, _)| created)
        .unwrap()
    {
        Created::PhoneLimited { oldest } => {
            assert_eq!(oldest.timestamp_millis(), at.timestamp_millis())
        }
        other => panic!("expected the limit, got {other:?}"),
    }
    // Starts of more than an hour ago do not count.
    let past = PhoneLimit {
        max: 2,
        since: at + chrono::Duration::milliseconds(1),
    };
    assert!(matches!(
        store
            .create_verification(&new(4, None, phone(2), at), past, None)
            .await
            .map(|(created, _)| created)
            .unwrap(),
        Created::Started(_)
    ));
}

pub async fn concurrent_wrong_codes_on_two_replicas_take_at_most_its_checks(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    let record = started(&*one, &new(1, None, phone(4), Utc::now())).await;
    let wrong = |store: std::sync::Arc<dyn Store>| async move {
        store
            .change_verification(&VerificationChange::WrongCode {
                id: record.id,
                at: Utc::now(),
            })
            .await
            .unwrap()
    };
    let results =
        join_all((0..12).map(|i| wrong(if i % 2 == 0 { one.clone() } else { two.clone() }))).await;
    let taken: Vec<VerificationRecord> = results.into_iter().flatten().collect();
    assert_eq!(taken.len(), 5, "{taken:#?}");
    let mut left: Vec<u32> = taken.iter().map(|r| r.checks_left).collect();
    left.sort_unstable();
    assert_eq!(left, [0, 1, 2, 3, 4], "each check once");
    let last = taken.iter().find(|r| r.checks_left == 0).unwrap();
    assert_eq!(last.status, VerificationStatus::Failed);
    assert_eq!(
        one.pending_verification(None, phone(4), Utc::now())
            .await
            .unwrap(),
        None
    );
}

pub async fn two_right_codes_on_two_replicas_approve_once(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    let record = started(&*one, &new(1, None, phone(5), Utc::now())).await;
    let approve = |store: std::sync::Arc<dyn Store>, mac: Vec<u8>| async move {
        store
            .change_verification(&VerificationChange::Approve {
                id: record.id,
                mac,
                at: Utc::now(),
            })
            .await
            .unwrap()
    };
    // A code replaced since it was read approves nothing.
    assert_eq!(approve(one.clone(), code(9).mac).await, None);
    let results = join_all((0..6).map(|i| {
        approve(
            if i % 2 == 0 { one.clone() } else { two.clone() },
            code(1).mac,
        )
    }))
    .await;
    let approved: Vec<VerificationRecord> = results.into_iter().flatten().collect();
    assert_eq!(approved.len(), 1, "{approved:#?}");
    assert_eq!(approved[0].status, VerificationStatus::Approved);
}

pub async fn a_resend_holds_once_per_interval_and_for_its_sends(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    let at = Utc::now() - chrono::Duration::seconds(60);
    let record = started(&*one, &new(1, None, phone(6), at)).await;
    let resend = |send: u64, at: DateTime<Utc>, interval: i64| VerificationChange::Resend {
        id: record.id,
        send: id(send),
        channels: vec![Channel::Telegram],
        forget_code: false,
        at,
        not_after: at - chrono::Duration::seconds(interval),
    };
    // Too soon: nothing changes, and the send id stays free.
    assert_eq!(
        one.change_verification(&resend(2, at + chrono::Duration::seconds(10), 30))
            .await
            .unwrap(),
        None
    );
    assert_eq!(one.verification_of_send(id(2)).await.unwrap(), None);
    // Two replicas resending at once after the interval: one resend.
    let now = Utc::now();
    let (resend_a, resend_b) = (resend(2, now, 30), resend(3, now, 30));
    let (a, b) = tokio::join!(
        one.change_verification(&resend_a),
        two.change_verification(&resend_b),
    );
    let done: Vec<VerificationRecord> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].sends_left, 3);
    assert_eq!(done[0].channels, [Channel::Telegram]);
    assert_eq!(done[0].code, Some(code(1)), "the same code");
    // Sends run out.
    let mut left = 3;
    for send in 10..20 {
        let later = Utc::now() + chrono::Duration::seconds(send as i64);
        if let Some(r) = one
            .change_verification(&resend(send, later, 0))
            .await
            .unwrap()
        {
            left -= 1;
            assert_eq!(r.sends_left, left);
        }
    }
    assert_eq!(left, 0);
    // A voice resend forgets the code until its call tells the new one.
    let record = started(&*one, &new(30, None, phone(7), at)).await;
    let voice = VerificationChange::Resend {
        id: record.id,
        send: id(31),
        channels: vec![Channel::Voice],
        forget_code: true,
        at: Utc::now(),
        not_after: Utc::now(),
    };
    let forgot = one.change_verification(&voice).await.unwrap().unwrap();
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
    started(&*store, &new(1, None, phone(8), long_ago)).await;
    started(&*store, &new(2, None, phone(9), Utc::now())).await;
    let first = store
        .expire_verifications(None, phone(8), Utc::now())
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].status, VerificationStatus::Expired);
    assert!(
        store
            .expire_verifications(None, phone(8), Utc::now())
            .await
            .unwrap()
            .is_empty()
    );
    let week = Duration::from_secs(7 * 86_400);
    let retention = Retention {
        max_age: week,
        max_events: 1_000,
        claims_max_age: week,
        guard_max_age: std::time::Duration::from_secs(3600),
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
    assert!(matches!(
        store
            .create_verification(&new(2, None, phone(9), Utc::now()), limit(100), None)
            .await
            .map(|(created, _)| created)
            .unwrap(),
        Created::Started(_)
    ));
}
