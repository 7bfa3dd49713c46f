//! The `status` lookups of an unknown outcome: how many in a row left it unknown and
//! when the next may run are stored with the claim, for every replica.

use chrono::{DateTime, Duration, Utc};
use msgw::core::domain::ClientId;
use msgw::core::ports::store::{
    ClaimChange, ClaimReply, ClaimState, Fingerprint, Lookups, Settlement,
};

use crate::Fixture;

fn id(n: u64) -> ClientId {
    ClientId::new(n).unwrap()
}

fn whole_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap()
}

const A: Fingerprint = Fingerprint([1; 32]);

pub async fn a_lookups_backoff_reads_back_keeps_reconcile_off_and_a_take_over_clears_it(
    fixture: Fixture,
) {
    let (store, other) = (fixture.open().await, fixture.open().await);
    let now = whole_ms(Utc::now());
    let minute = Duration::minutes(1);
    let take_over = |attempt| ClaimChange::TakeOver {
        id: id(1),
        fingerprint: A,
        attempt,
        caller: None,
        at: now - minute * 10,
    };
    store
        .apply_claims(&[ClaimChange::Claim {
            id: id(1),
            fingerprint: A,
            caller: None,
            at: now - minute * 10,
        }])
        .await
        .unwrap();
    // A send whose outcome is unknown, then a lookup that told nothing: its backoff.
    assert_eq!(
        store.apply_claims(&[take_over(1)]).await.unwrap(),
        [ClaimReply::Claimed { attempt: 2 }]
    );
    let lookups = Lookups {
        unresolved: 3,
        next_at: now + minute,
    };
    let settled = store
        .apply_claims(&[ClaimChange::Settle {
            id: id(1),
            attempt: 2,
            settlement: Settlement::Unresolved {
                settle_until: now - minute,
                lookups,
            },
            at: now,
        }])
        .await
        .unwrap();
    assert_eq!(settled, [ClaimReply::Settled]);
    // Another replica reads it as written.
    assert_eq!(
        other.claim_of(id(1)).await.unwrap().unwrap().state,
        ClaimState::Unknown {
            settle_until: Some(now - minute),
            lookups: Some(lookups),
        }
    );
    // Reconcile's lookups keep to the backoff too.
    let open = |at| {
        let store = other.clone();
        async move {
            store
                .unsettled_claims(at, at - minute * 60, 10)
                .await
                .unwrap()
        }
    };
    assert!(open(now).await.is_empty(), "inside the backoff");
    assert_eq!(
        open(now + minute).await.len(),
        1,
        "once the next lookup may run"
    );

    // The next lookup takes the claim over: the backoff is its to record now.
    assert_eq!(
        other.apply_claims(&[take_over(2)]).await.unwrap(),
        [ClaimReply::Claimed { attempt: 3 }]
    );
    // A send's outcome, recorded by the send path's group statement, carries none.
    other
        .apply_claims(&[ClaimChange::Settle {
            id: id(1),
            attempt: 3,
            settlement: Settlement::Unknown {
                settle_until: now + minute,
            },
            at: now,
        }])
        .await
        .unwrap();
    assert_eq!(
        store.claim_of(id(1)).await.unwrap().unwrap().state,
        ClaimState::Unknown {
            settle_until: Some(now + minute),
            lookups: None,
        }
    );
}
