//! Moving from SQLite to PostgreSQL with `msgw copy-store`.

use std::time::Duration;

use chrono::Utc;
use msgw::domain::ClientId;
use msgw::store::{ClaimChange, Fingerprint, Retention, StoreError, copy};

use crate::{Fixture, events::event};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_moves_to_postgres_with_its_claims_tracking_and_cursors() {
    let (sqlite, postgres) = (Fixture::sqlite().await, Fixture::postgres().await);
    let old = sqlite.open().await;
    crate::shared::sent(old.as_ref(), 1..=3).await;
    // A caller's claim, whose events carry the caller: both must survive the copy.
    old.apply_claims(&[ClaimChange::Claim {
        caller: Some(msgw::domain::CallerName::parse("billing").unwrap()),
        id: ClientId::new(4).unwrap(),
        fingerprint: Fingerprint([4; 32]),
        at: Utc::now(),
    }])
    .await
    .unwrap();
    let events: Vec<_> = (1..=6).map(|n| event(n, "DELIVERED")).collect();
    old.append_batch(&events).await.unwrap();
    // Pruned events leave the log starting above 1: the cursors must carry over as they are.
    let keep_three = Retention {
        max_age: Duration::from_secs(3600),
        max_events: 3,
        claims_max_age: Duration::from_secs(3600),
        guard_max_age: std::time::Duration::from_secs(3600),
    };
    old.prune(keep_three, Utc::now()).await.unwrap();
    old.append_batch(&[event(3, "READ")]).await.unwrap();
    old.close().await;

    let copied = copy::run(sqlite.url(), postgres.url(), None).await.unwrap();
    assert_eq!((copied.claims, copied.messages, copied.events), (4, 3, 4));
    assert_eq!(copied.latest_cursor.get(), 7);

    let (old, new) = (sqlite.open().await, postgres.open().await);
    for n in 1..=4 {
        let id = ClientId::new(n).unwrap();
        assert_eq!(
            new.claim_of(id).await.unwrap(),
            old.claim_of(id).await.unwrap()
        );
    }
    assert_eq!(
        new.client_id_of("m2").await.unwrap(),
        msgw::domain::ClientId::new(2).ok()
    );
    let billing = new
        .events_after(msgw::domain::Cursor::START, 100)
        .await
        .unwrap();
    assert!(
        billing
            .iter()
            .any(|e| e.event.report.client_id.map(|id| id.get()) == Some(4) && e.caller.is_some()),
        "{billing:?}"
    );
    assert_eq!(
        new.events_after(msgw::domain::Cursor::START, 100)
            .await
            .unwrap(),
        old.events_after(msgw::domain::Cursor::START, 100)
            .await
            .unwrap()
    );
    assert_eq!(new.oldest_cursor().await.unwrap().map(|c| c.get()), Some(4));
    assert_eq!(new.latest_cursor().await.unwrap().get(), 7);
    // Every tracked message got a final status before the copy: it stays final, so
    // reconcile has nothing to poll.
    let due = new
        .take_due_for_poll(Utc::now(), 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(due.is_empty(), "{due:?}");
    let next = new.append_batch(&[event(9, "DELIVERED")]).await.unwrap();
    assert_eq!(
        next[0].as_ref().unwrap().cursor.get(),
        8,
        "the log continues"
    );

    let again = copy::run(sqlite.url(), postgres.url(), None).await;
    assert!(
        matches!(again, Err(StoreError::Config(ref m)) if m.contains("not empty")),
        "{again:?}"
    );
}
