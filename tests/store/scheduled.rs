//! Scheduled sends as stored: the claim and the kept request together, the
//! cancellation that fences a take-over, due messages taken by one replica at a time
//! (again after the lease), and retention keeping a scheduled claim.

use std::time::Duration;

use chrono::{DateTime, Utc};
use msgw::core::domain::{CallerName, ClientId};
use msgw::core::ports::store::{
    ClaimChange, ClaimReply, ClaimState, Fingerprint, NewScheduled, Retention, ScheduleReply,
};

use crate::Fixture;

fn id(n: u64) -> ClientId {
    ClientId::new(n).unwrap()
}

fn ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap()
}

fn scheduled(n: u64, send_at: DateTime<Utc>) -> NewScheduled {
    NewScheduled {
        id: id(n),
        fingerprint: Fingerprint([n as u8; 32]),
        caller: Some(CallerName::parse("billing").unwrap()),
        send_at: ms(send_at),
        payload: vec![1, 2, 3, n as u8],
        at: Utc::now(),
    }
}

pub async fn a_scheduled_message_is_claimed_kept_and_cancelled_once(fixture: Fixture) {
    let store = fixture.open().await;
    let send_at = Utc::now() + chrono::TimeDelta::seconds(60);
    let new = scheduled(1, send_at);
    assert_eq!(
        store.schedule(&new).await.unwrap(),
        ScheduleReply::Scheduled
    );
    let ScheduleReply::Existing(record) = store.schedule(&new).await.unwrap() else {
        panic!("the id is claimed");
    };
    assert_eq!(
        record.state,
        ClaimState::Scheduled {
            send_at: ms(send_at)
        }
    );
    assert_eq!(record.fingerprint, new.fingerprint);
    assert_eq!(record.caller, new.caller);
    let summary = store.scheduled_summary().await.unwrap();
    assert_eq!((summary.pending, summary.next_due), (1, Some(ms(send_at))));

    // A take-over that looked before the cancellation is fenced by it.
    let canceled_at = ms(Utc::now());
    assert_eq!(
        store.cancel_scheduled(id(1), canceled_at).await.unwrap(),
        Some(ms(send_at))
    );
    assert_eq!(
        store.cancel_scheduled(id(1), canceled_at).await.unwrap(),
        None
    );
    let take = ClaimChange::TakeOver {
        id: id(1),
        fingerprint: new.fingerprint,
        attempt: record.attempt,
        caller: new.caller.clone(),
        at: Utc::now(),
    };
    let replies = store.apply_claims(&[take]).await.unwrap();
    assert!(matches!(replies[0], ClaimReply::Existing(_)), "{replies:?}");
    let record = store.claim_of(id(1)).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        ClaimState::Canceled {
            send_at: ms(send_at),
            at: canceled_at
        }
    );
    assert_eq!(store.scheduled_summary().await.unwrap().pending, 0);
}

pub async fn due_messages_are_taken_by_one_replica_until_the_lease_ends(fixture: Fixture) {
    let (a, b) = (fixture.open().await, fixture.open().await);
    let now = Utc::now();
    for n in 1..=40 {
        let at = if n <= 30 {
            now - chrono::TimeDelta::seconds(1)
        } else {
            now + chrono::TimeDelta::hours(1)
        };
        a.schedule(&scheduled(n, at)).await.unwrap();
    }
    let lease = Duration::from_secs(60);
    let (from_a, from_b) = tokio::join!(
        a.take_due_scheduled(now, 20, lease),
        b.take_due_scheduled(now, 20, lease)
    );
    let mut taken: Vec<u64> = from_a
        .unwrap()
        .into_iter()
        .chain(from_b.unwrap())
        .map(|d| {
            assert_eq!(d.payload, vec![1, 2, 3, d.id.get() as u8]);
            assert_eq!(d.tries, 1);
            d.id.get()
        })
        .collect();
    taken.sort_unstable();
    assert_eq!(taken, (1..=30).collect::<Vec<_>>(), "each due message once");
    assert!(
        a.take_due_scheduled(now, 100, lease)
            .await
            .unwrap()
            .is_empty()
    );
    // After the lease, another replica takes what was never forgotten.
    a.forget_scheduled(&(1..=29).map(id).collect::<Vec<_>>())
        .await
        .unwrap();
    let later = now + chrono::TimeDelta::seconds(61);
    let again = b.take_due_scheduled(later, 100, lease).await.unwrap();
    assert_eq!(
        again
            .iter()
            .map(|d| (d.id.get(), d.tries))
            .collect::<Vec<_>>(),
        [(30, 2)]
    );
    assert_eq!(a.scheduled_summary().await.unwrap().pending, 11);
}

pub async fn retention_keeps_a_scheduled_claim(fixture: Fixture) {
    let store = fixture.open().await;
    let far = Utc::now() + chrono::TimeDelta::days(30);
    store.schedule(&scheduled(7, far)).await.unwrap();
    let retention = Retention {
        max_age: Duration::from_secs(1),
        max_events: 10,
        claims_max_age: Duration::ZERO,
        guard_max_age: Duration::from_secs(1),
        trusted_keys_max_age: Duration::from_secs(1),
    };
    store
        .prune(retention, Utc::now() + chrono::TimeDelta::days(60))
        .await
        .unwrap();
    assert!(matches!(
        store.claim_of(id(7)).await.unwrap().unwrap().state,
        ClaimState::Scheduled { .. }
    ));
}

/// Replicas on one PostgreSQL schema hear each other's schedules (NOTIFY at the
/// commit): a replica's scheduler wakes for a message another one scheduled sooner
/// than its next look, not up to a second late. Through PgBouncer in transaction mode
/// too, where the notification leaves through the pooler and arrives on the direct
/// connection.
async fn another_replica_hears_the_send_time(fixture: Fixture) {
    let (a, b) = (fixture.open().await, fixture.open().await);
    let mut heard = b.scheduled_heard();
    let send_at = Utc::now() + chrono::TimeDelta::milliseconds(700);
    // The listener of b may still be connecting: schedule until it hears (each id
    // once), within seconds.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut n = 700;
    loop {
        assert_eq!(
            a.schedule(&scheduled(n, send_at)).await.unwrap(),
            ScheduleReply::Scheduled
        );
        let got = tokio::time::timeout(Duration::from_millis(500), heard.changed()).await;
        if got.is_ok() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never heard");
        n += 1;
    }
    assert_eq!(*heard.borrow_and_update(), Some(ms(send_at)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_hear_each_others_schedules() {
    another_replica_hears_the_send_time(Fixture::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_transaction_replicas_hear_each_others_schedules() {
    let fixture = Fixture::pgbouncer(msgw::adapters::store::Pooling::Transaction).await;
    another_replica_hears_the_send_time(fixture).await;
}
