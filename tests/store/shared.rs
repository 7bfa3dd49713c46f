//! Work replicas share: reconcile polls taken by one replica at a time, and leases.

use std::time::Duration;

use chrono::Utc;
use msgw::core::domain::{Channel, ClientId};
use msgw::core::ports::store::{
    AcceptedOutcome, ClaimChange, Fingerprint, SandboxSave, SentMessage, Settlement, Store,
};

use crate::{Fixture, events::event};

/// Claims and accepts `n` sends, so reconcile tracks them (first poll due at once).
pub async fn sent(store: &dyn Store, ids: std::ops::RangeInclusive<u64>) {
    let claims: Vec<ClaimChange> = ids
        .clone()
        .map(|n| ClaimChange::Claim {
            caller: None,
            id: ClientId::new(n).unwrap(),
            fingerprint: Fingerprint([0; 32]),
            at: Utc::now(),
        })
        .collect();
    store.apply_claims(&claims).await.unwrap();
    let settlements: Vec<ClaimChange> = ids
        .map(|n| ClaimChange::Settle {
            id: ClientId::new(n).unwrap(),
            attempt: 1,
            settlement: Settlement::Accepted(
                AcceptedOutcome {
                    msg_id: Some(format!("m{n}")),
                    parts: 1,
                    payload: serde_json::json!({"msg_id": format!("m{n}")}),
                    recovered: false,
                },
                Some(SentMessage {
                    client_id: ClientId::new(n).unwrap(),
                    msg_id: format!("m{n}"),
                    channel: Channel::Sms,
                    sent_at: Utc::now() - chrono::Duration::seconds(120),
                    lifetime: Duration::from_secs(3600),
                    phone: None,
                }),
            ),
            at: Utc::now(),
        })
        .collect();
    store.apply_claims(&settlements).await.unwrap();
}

pub async fn a_due_message_is_taken_by_one_replica_until_its_lease_ends(fixture: Fixture) {
    let (a, b) = (fixture.open().await, fixture.open().await);
    sent(a.as_ref(), 1..=30).await;
    let now = Utc::now();
    let lease = Duration::from_secs(60);
    let (from_a, from_b) = tokio::join!(
        a.take_due_for_poll(now, 20, lease),
        b.take_due_for_poll(now, 20, lease)
    );
    let (from_a, from_b) = (from_a.unwrap(), from_b.unwrap());
    let mut taken: Vec<u64> = from_a
        .iter()
        .chain(&from_b)
        .map(|m| m.client_id.get())
        .collect();
    taken.sort_unstable();
    assert_eq!(taken, (1..=30).collect::<Vec<_>>(), "each exactly once");
    assert!(
        a.take_due_for_poll(now, 50, lease)
            .await
            .unwrap()
            .is_empty()
    );
    // The replica that took id 1 stopped without rescheduling it: it is due again
    // once the lease is over.
    let after = now + chrono::Duration::seconds(61);
    assert_eq!(
        b.take_due_for_poll(after, 50, lease).await.unwrap().len(),
        30
    );
    // A final status stops the polling.
    a.schedule_poll(ClientId::new(1).unwrap(), Some(now))
        .await
        .unwrap();
    a.append_batch(&[event(1, "DELIVERED")]).await.unwrap();
    let later = after + chrono::Duration::seconds(61);
    let due: Vec<u64> = a
        .take_due_for_poll(later, 50, lease)
        .await
        .unwrap()
        .iter()
        .map(|m| m.client_id.get())
        .collect();
    assert_eq!(due.len(), 29);
    assert!(!due.contains(&1));
    assert_eq!(
        a.client_id_of("m7").await.unwrap(),
        msgw::core::domain::ClientId::new(7).ok()
    );
}

pub async fn a_lease_is_held_by_one_replica_until_it_expires(fixture: Fixture) {
    let (a, b) = (fixture.open().await, fixture.open().await);
    let now = Utc::now();
    let ttl = Duration::from_secs(10);
    assert!(a.try_lease("retention", "a", ttl, now).await.unwrap());
    assert!(!b.try_lease("retention", "b", ttl, now).await.unwrap());
    assert!(
        b.try_lease("balance", "b", ttl, now).await.unwrap(),
        "another name"
    );
    let renewed = now + chrono::Duration::seconds(5);
    assert!(a.try_lease("retention", "a", ttl, renewed).await.unwrap());
    let not_yet = now + chrono::Duration::seconds(11);
    assert!(
        !b.try_lease("retention", "b", ttl, not_yet).await.unwrap(),
        "renewed by a"
    );
    let expired = now + chrono::Duration::seconds(16);
    assert!(b.try_lease("retention", "b", ttl, expired).await.unwrap());
    assert!(!a.try_lease("retention", "a", ttl, expired).await.unwrap());
}

pub async fn the_sandboxs_state_reads_back_as_saved_from_any_replica(fixture: Fixture) {
    let (a, b) = (fixture.open().await, fixture.open().await);
    assert_eq!(
        a.sandbox_state("sandbox").await.unwrap(),
        None,
        "nothing saved yet"
    );
    assert_eq!(a.sandbox_messages("sandbox").await.unwrap(), vec![]);
    let save = |account: Option<&str>, messages: &[(u64, &str)]| SandboxSave {
        account: account.map(str::to_owned),
        messages: messages
            .iter()
            .map(|(id, record)| (*id, (*record).to_owned()))
            .collect(),
    };
    a.save_sandbox(
        "sandbox",
        &save(Some(r#"{"balance":1}"#), &[(1, "one"), (2, "two")]),
    )
    .await
    .unwrap();
    // Only what changed: a record replaced, one added (an id above i64::MAX too), the
    // document left as it was.
    a.save_sandbox(
        "sandbox",
        &save(None, &[(2, "two again"), (u64::MAX, "last")]),
    )
    .await
    .unwrap();
    a.save_sandbox("sandbox", &save(Some(r#"{"balance":2}"#), &[]))
        .await
        .unwrap();
    assert_eq!(
        b.sandbox_state("sandbox").await.unwrap().as_deref(),
        Some(r#"{"balance":2}"#),
        "the last save, seen by another handle"
    );
    let mut messages = b.sandbox_messages("sandbox").await.unwrap();
    messages.sort();
    assert_eq!(
        messages,
        vec![
            (1, "one".to_owned()),
            (2, "two again".to_owned()),
            (u64::MAX, "last".to_owned())
        ]
    );
    assert_eq!(
        b.sandbox_messages("another").await.unwrap(),
        vec![],
        "per account"
    );
}
