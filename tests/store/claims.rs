//! Idempotency claims: insert-if-absent, compare-and-set take-overs and settlements.

use msgw::adapters::store::StoreTarget;
use std::time::Duration;

use chrono::{DateTime, Utc};
use msgw::core::domain::{Channel, ClientId};
use msgw::core::ports::store::{
    AcceptedOutcome, ClaimChange, ClaimReply, ClaimState, Fingerprint, SentMessage, Settlement,
    Store,
};

use crate::Fixture;

fn id(n: u64) -> ClientId {
    ClientId::new(n).unwrap()
}

const A: Fingerprint = Fingerprint([1; 32]);
const B: Fingerprint = Fingerprint([2; 32]);

fn claim(n: u64, fingerprint: Fingerprint) -> ClaimChange {
    ClaimChange::Claim {
        caller: None,
        id: id(n),
        fingerprint,
        at: Utc::now(),
    }
}

pub async fn the_second_claim_of_an_id_in_one_group_sees_the_first(fixture: Fixture) {
    let store = fixture.open().await;
    let replies = store
        .apply_claims(&[claim(1, A), claim(1, A), claim(2, B)])
        .await
        .unwrap();
    assert_eq!(replies[0], ClaimReply::Claimed { attempt: 1 });
    let ClaimReply::Existing(record) = &replies[1] else {
        panic!("{:?}", replies[1])
    };
    assert_eq!(record.fingerprint, A);
    assert!(matches!(record.state, ClaimState::InFlight { .. }));
    assert_eq!(replies[2], ClaimReply::Claimed { attempt: 1 });
}

pub async fn a_take_over_wins_once_and_fences_the_old_owner(fixture: Fixture) {
    let store = fixture.open().await;
    store.apply_claims(&[claim(1, A)]).await.unwrap();
    let take = |fingerprint| ClaimChange::TakeOver {
        caller: None,
        id: id(1),
        fingerprint,
        attempt: 1,
        at: Utc::now(),
    };
    let replies = store.apply_claims(&[take(B), take(A)]).await.unwrap();
    assert_eq!(replies[0], ClaimReply::Claimed { attempt: 2 });
    assert!(matches!(&replies[1], ClaimReply::Existing(r) if r.attempt == 2 && r.fingerprint == B));

    let settle = |attempt| ClaimChange::Settle {
        id: id(1),
        attempt,
        settlement: Settlement::Released("Error in Sender-name".into()),
        at: Utc::now(),
    };
    let replies = store.apply_claims(&[settle(1), settle(2)]).await.unwrap();
    assert_eq!(replies, [ClaimReply::Superseded, ClaimReply::Settled]);
    let record = store.claim_of(id(1)).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        ClaimState::Released {
            reason: "Error in Sender-name".into()
        }
    );
}

pub async fn taking_over_a_pruned_claim_claims_it_anew(fixture: Fixture) {
    let store = fixture.open().await;
    let take = ClaimChange::TakeOver {
        caller: None,
        id: id(9),
        fingerprint: A,
        attempt: 3,
        at: Utc::now(),
    };
    assert_eq!(
        store.apply_claims(&[take]).await.unwrap(),
        [ClaimReply::Claimed { attempt: 1 }]
    );
}

/// An open claim (in flight, or its outcome unknown) is the only record that its send
/// may have left: pruning it by age would let a retry send again.
pub async fn retention_never_drops_a_claim_whose_outcome_is_open(fixture: Fixture) {
    let store = fixture.open().await;
    let then = Utc::now() - chrono::Duration::hours(2);
    let old = |n: u64| ClaimChange::Claim {
        caller: None,
        id: id(n),
        fingerprint: A,
        at: then,
    };
    store.apply_claims(&[old(1), old(2), old(3)]).await.unwrap();
    let settle = |n: u64, settlement: Settlement| ClaimChange::Settle {
        id: id(n),
        attempt: 1,
        settlement,
        at: then,
    };
    store
        .apply_claims(&[
            settle(
                2,
                Settlement::Unknown {
                    settle_until: whole_ms(then),
                },
            ),
            settle(3, Settlement::Released("refused".into())),
        ])
        .await
        .unwrap();
    let retention = msgw::core::ports::store::Retention {
        max_age: std::time::Duration::from_secs(3600),
        max_events: 1_000_000,
        claims_max_age: std::time::Duration::from_secs(3600),
        guard_max_age: std::time::Duration::from_secs(3600),
        trusted_keys_max_age: std::time::Duration::from_secs(3600),
    };
    store.prune(retention, Utc::now()).await.unwrap();
    assert!(store.claim_of(id(1)).await.unwrap().is_some(), "in flight");
    assert!(store.claim_of(id(2)).await.unwrap().is_some(), "unknown");
    assert!(
        store.claim_of(id(3)).await.unwrap().is_none(),
        "settled and old"
    );
}

pub async fn an_accepted_outcome_reads_back_exactly(fixture: Fixture) {
    let store = fixture.open().await;
    store
        .apply_claims(&[claim(ClientId::MAX, A)])
        .await
        .unwrap();
    let outcome = AcceptedOutcome {
        msg_id: Some("123456789".into()),
        parts: 3,
        payload: serde_json::json!({"id": 1, "msg_id": 123456789, "data": 1, "parts": 3, "x": 0.1}),
        recovered: false,
    };
    let settle = ClaimChange::Settle {
        id: id(ClientId::MAX),
        attempt: 1,
        settlement: Settlement::Accepted(outcome.clone(), None),
        at: Utc::now(),
    };
    assert_eq!(
        store.apply_claims(&[settle]).await.unwrap(),
        [ClaimReply::Settled]
    );
    let record = store.claim_of(id(ClientId::MAX)).await.unwrap().unwrap();
    assert_eq!(record.state, ClaimState::Accepted(outcome));
    assert_eq!(record.fingerprint, A);
}

pub async fn a_group_of_settlements_fences_each_id_and_tracks_only_what_it_settled(
    fixture: Fixture,
) {
    let store = fixture.open().await;
    store
        .apply_claims(&[claim(1, A), claim(2, A), claim(3, A)])
        .await
        .unwrap();
    let accepted = |n: u64| {
        Settlement::Accepted(
            AcceptedOutcome {
                msg_id: Some(format!("m{n}")),
                parts: 1,
                payload: serde_json::json!({"msg_id": format!("m{n}")}),
                recovered: false,
            },
            Some(SentMessage {
                client_id: id(n),
                msg_id: format!("m{n}"),
                channel: Channel::Sms,
                sent_at: Utc::now(),
                lifetime: Duration::from_secs(3600),
                phone: None,
            }),
        )
    };
    let settle = |n: u64, attempt, settlement| ClaimChange::Settle {
        id: id(n),
        attempt,
        settlement,
        at: Utc::now(),
    };
    let replies = store
        .apply_claims(&[
            settle(1, 1, accepted(1)),
            // Someone took id 2 over: this outcome must not land, nor its tracking.
            settle(2, 7, accepted(2)),
            settle(
                3,
                1,
                Settlement::Unknown {
                    settle_until: whole_ms(Utc::now()),
                },
            ),
        ])
        .await
        .unwrap();
    assert_eq!(
        replies,
        [
            ClaimReply::Settled,
            ClaimReply::Superseded,
            ClaimReply::Settled
        ]
    );
    assert!(matches!(
        store.claim_of(id(1)).await.unwrap().unwrap().state,
        ClaimState::Accepted(_)
    ));
    assert!(matches!(
        store.claim_of(id(2)).await.unwrap().unwrap().state,
        ClaimState::InFlight { .. }
    ));
    assert!(matches!(
        store.claim_of(id(3)).await.unwrap().unwrap().state,
        ClaimState::Unknown {
            settle_until: Some(_),
            lookups: None,
        }
    ));
    assert_eq!(store.client_id_of("m1").await.unwrap(), Some(id(1)));
    assert_eq!(store.client_id_of("m2").await.unwrap(), None);
}

/// Stores write a group's rows in id order (so concurrent groups lock rows in one
/// order), but answer each change in the group's own order.
pub async fn a_group_out_of_id_order_is_answered_in_its_own_order(fixture: Fixture) {
    let store = fixture.open().await;
    let claimed = store
        .apply_claims(&[claim(3, A), claim(1, A), claim(2, A)])
        .await
        .unwrap();
    assert_eq!(claimed, vec![ClaimReply::Claimed { attempt: 1 }; 3]);
    let take = |n: u64, attempt| ClaimChange::TakeOver {
        caller: None,
        id: id(n),
        fingerprint: B,
        attempt,
        at: Utc::now(),
    };
    // Take-overs run change by change: 3 is taken, 5 claimed, 1 is not at attempt 9.
    let taken = store
        .apply_claims(&[take(3, 1), claim(5, B), take(1, 9)])
        .await
        .unwrap();
    assert_eq!(taken[0], ClaimReply::Claimed { attempt: 2 });
    assert_eq!(taken[1], ClaimReply::Claimed { attempt: 1 });
    assert!(matches!(&taken[2], ClaimReply::Existing(r) if r.attempt == 1 && r.fingerprint == A));
    let settle = |n: u64, attempt| ClaimChange::Settle {
        id: id(n),
        attempt,
        settlement: Settlement::Released("Error in Sender-name".into()),
        at: Utc::now(),
    };
    let settled = store
        .apply_claims(&[settle(3, 2), settle(2, 7), settle(1, 1)])
        .await
        .unwrap();
    assert_eq!(
        settled,
        [
            ClaimReply::Settled,
            ClaimReply::Superseded,
            ClaimReply::Settled
        ]
    );
    assert!(matches!(
        store.claim_of(id(2)).await.unwrap().unwrap().state,
        ClaimState::InFlight { .. }
    ));
}

/// Two groups taking over the same hot ids in opposite orders at once: each takes an
/// id exactly once between them, and neither fails (on PostgreSQL, rows locked in the
/// groups' own orders deadlocked, failing one group after a second).
pub async fn groups_taking_over_the_same_ids_in_opposite_orders_do_not_deadlock(fixture: Fixture) {
    let store = fixture.open().await;
    let ids: Vec<u64> = (1..=20).collect();
    let claims: Vec<ClaimChange> = ids.iter().map(|&n| claim(n, A)).collect();
    store.apply_claims(&claims).await.unwrap();
    for attempt in 1..=3 {
        let take = |n: u64| ClaimChange::TakeOver {
            caller: None,
            id: id(n),
            fingerprint: B,
            attempt,
            at: Utc::now(),
        };
        let forward: Vec<ClaimChange> = ids.iter().map(|&n| take(n)).collect();
        let backward: Vec<ClaimChange> = ids.iter().rev().map(|&n| take(n)).collect();
        let (a, b) = tokio::join!(store.apply_claims(&forward), store.apply_claims(&backward));
        let (a, b) = (a.unwrap(), b.unwrap());
        let won = |replies: &[ClaimReply]| {
            replies
                .iter()
                .filter(
                    |r| matches!(r, ClaimReply::Claimed { attempt: won } if *won == attempt + 1),
                )
                .count()
        };
        assert_eq!(won(&a) + won(&b), ids.len(), "each id taken once");
    }
}

/// A time as the store keeps it (milliseconds).
fn whole_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap()
}

pub async fn a_settle_window_survives_a_take_over_and_a_claim_is_open_for_reconcile_only_after_it(
    fixture: Fixture,
) {
    let store = fixture.open().await;
    let now = whole_ms(Utc::now());
    let hour = chrono::Duration::hours(1);
    store
        .apply_claims(&[claim(1, A), claim(2, A), claim(3, A), claim(4, A)])
        .await
        .unwrap();
    let settle = |n: u64, settlement| ClaimChange::Settle {
        id: id(n),
        attempt: 1,
        settlement,
        at: now,
    };
    store
        .apply_claims(&[
            settle(
                1,
                Settlement::Unknown {
                    settle_until: now + hour,
                },
            ),
            settle(
                2,
                Settlement::Unknown {
                    settle_until: now - chrono::Duration::seconds(1),
                },
            ),
            settle(4, Settlement::Released("refused".into())),
        ])
        .await
        .unwrap();
    let open = |at, in_flight_before| {
        let store = store.clone();
        async move {
            let mut ids: Vec<u64> = store
                .unsettled_claims(at, in_flight_before, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|(id, _)| id.get())
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(
        open(now, now - hour).await,
        [2],
        "only the window that ended"
    );
    assert_eq!(
        open(now + hour * 2, now + hour).await,
        [1, 2, 3],
        "later: every window over, and the claim left in flight"
    );

    // A retry takes id 1 over to ask `status`; the window stays with the claim.
    let taken = store
        .apply_claims(&[ClaimChange::TakeOver {
            id: id(1),
            fingerprint: A,
            attempt: 1,
            caller: None,
            at: now,
        }])
        .await
        .unwrap();
    assert_eq!(taken, [ClaimReply::Claimed { attempt: 2 }]);
    store
        .apply_claims(&[ClaimChange::Settle {
            id: id(1),
            attempt: 2,
            settlement: Settlement::Unknown {
                settle_until: now + hour,
            },
            at: now,
        }])
        .await
        .unwrap();
    assert_eq!(
        store.claim_of(id(1)).await.unwrap().unwrap().state,
        ClaimState::Unknown {
            settle_until: Some(now + hour),
            lookups: None,
        }
    );
}

pub async fn replicas_claiming_the_same_ids_at_once_own_each_exactly_once(fixture: Fixture) {
    let (a, b) = (fixture.open().await, fixture.open().await);
    let ids: Vec<u64> = (1..=200).collect();
    let group =
        |order: Vec<u64>| -> Vec<ClaimChange> { order.into_iter().map(|n| claim(n, A)).collect() };
    let mut handles = Vec::new();
    for (i, store) in [a.clone(), b.clone(), a, b].into_iter().enumerate() {
        // Opposite orders too: overlapping groups must not deadlock.
        let mut order = ids.clone();
        if i % 2 == 1 {
            order.reverse();
        }
        let changes = group(order);
        handles.push(tokio::spawn(async move {
            let replies = store.apply_claims(&changes).await.unwrap();
            changes
                .iter()
                .zip(replies)
                .filter(|(_, r)| matches!(r, ClaimReply::Claimed { .. }))
                .map(|(c, _)| match c {
                    ClaimChange::Claim { id, .. } => id.get(),
                    _ => unreachable!(),
                })
                .collect::<Vec<u64>>()
        }));
    }
    let mut owned = Vec::new();
    for handle in handles {
        owned.extend(handle.await.unwrap());
    }
    owned.sort_unstable();
    assert_eq!(owned, ids, "every id owned by exactly one claimer");
}

fn caller(name: &str) -> Option<msgw::core::domain::CallerName> {
    Some(msgw::core::domain::CallerName::parse(name).unwrap())
}

pub async fn a_claim_records_its_caller_and_its_messages_events_carry_it(fixture: Fixture) {
    let store = fixture.open().await;
    let claims = [
        ClaimChange::Claim {
            caller: caller("billing"),
            id: id(1),
            fingerprint: A,
            at: Utc::now(),
        },
        claim(2, A),
    ];
    store.apply_claims(&claims).await.unwrap();
    assert_eq!(
        store.claim_of(id(1)).await.unwrap().unwrap().caller,
        caller("billing")
    );
    assert_eq!(store.claim_of(id(2)).await.unwrap().unwrap().caller, None);
    // A released claim taken over by another caller becomes that caller's.
    let settle = ClaimChange::Settle {
        id: id(2),
        attempt: 1,
        settlement: Settlement::Released("refused".into()),
        at: Utc::now(),
    };
    store.apply_claims(&[settle]).await.unwrap();
    let take = ClaimChange::TakeOver {
        id: id(2),
        fingerprint: B,
        attempt: 1,
        caller: caller("orders"),
        at: Utc::now(),
    };
    store.apply_claims(&[take]).await.unwrap();
    assert_eq!(
        store.claim_of(id(2)).await.unwrap().unwrap().caller,
        caller("orders")
    );

    // Events are stamped with their message's caller when appended; an unknown
    // message's events have none.
    let events = [
        crate::events::event(1, "DELIVERED"),
        crate::events::event(2, "DELIVERED"),
        crate::events::event(3, "DELIVERED"),
    ];
    let appended = store.append_batch(&events).await.unwrap();
    let callers: Vec<_> = appended
        .iter()
        .flatten()
        .map(|e| e.caller.clone())
        .collect();
    assert_eq!(callers, vec![caller("billing"), caller("orders"), None]);
    let read: Vec<_> = store
        .events_after(msgw::core::domain::Cursor::START, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.into_status().expect("only statuses were appended").caller)
        .collect();
    assert_eq!(
        read, callers,
        "the log reads back what the append published"
    );
    assert_eq!(
        store.last_event_of(id(1)).await.unwrap().unwrap().caller,
        caller("billing")
    );
}

/// PostgreSQL only: the send path's connections are not pinged before use; when the
/// database drops them (a restart, a failover, `pg_terminate_backend`), the next claim
/// and settlement retry once on a new connection instead of failing their callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_send_path_writes_survive_their_connections_being_dropped() {
    let schema = crate::postgres::TestSchema::create().await;
    let store = msgw::adapters::store::SqlStore::postgres(
        &StoreTarget::new(&schema.url),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let claim = |id: u64| ClaimChange::Claim {
        id: ClientId::new(id).unwrap(),
        fingerprint: Fingerprint([7; 32]),
        caller: None,
        at: Utc::now(),
    };
    let settle = |id: u64| ClaimChange::Settle {
        id: ClientId::new(id).unwrap(),
        attempt: 1,
        settlement: Settlement::Released("refused".into()),
        at: Utc::now(),
    };
    assert_eq!(
        store.apply_claims(&[claim(1)]).await.unwrap(),
        vec![ClaimReply::Claimed { attempt: 1 }]
    );
    assert_eq!(
        store.apply_claims(&[settle(1)]).await.unwrap(),
        vec![ClaimReply::Settled]
    );
    for round in 0..2 {
        schema.terminate_connections().await;
        let id = 10 + round;
        assert_eq!(
            store.apply_claims(&[claim(id)]).await.unwrap(),
            vec![ClaimReply::Claimed { attempt: 1 }],
            "round {round}"
        );
        assert_eq!(
            store.apply_claims(&[settle(id)]).await.unwrap(),
            vec![ClaimReply::Settled],
            "round {round}"
        );
    }
    store.close().await;
}

/// A group of only take-overs (scheduled messages leaving together) is written at once
/// and answered in its own order: a claim at the attempt its taker saw is taken, one
/// that moved on answers its record, one pruned meanwhile is claimed anew.
pub async fn a_group_of_take_overs_is_answered_in_its_own_order(fixture: Fixture) {
    let store = fixture.open().await;
    store
        .apply_claims(&[claim(12, A), claim(11, A)])
        .await
        .unwrap();
    let take = |n: u64, attempt| ClaimChange::TakeOver {
        caller: None,
        id: id(n),
        fingerprint: B,
        attempt,
        at: Utc::now(),
    };
    let taken = store
        .apply_claims(&[take(12, 1), take(13, 4), take(11, 2)])
        .await
        .unwrap();
    assert_eq!(taken[0], ClaimReply::Claimed { attempt: 2 });
    assert_eq!(
        taken[1],
        ClaimReply::Claimed { attempt: 1 },
        "pruned: claimed anew"
    );
    assert!(
        matches!(&taken[2], ClaimReply::Existing(r) if r.attempt == 1 && r.fingerprint == A),
        "{:?}",
        taken[2]
    );
    let record = store.claim_of(id(12)).await.unwrap().unwrap();
    assert_eq!((record.attempt, record.fingerprint), (2, B));
    assert!(matches!(record.state, ClaimState::InFlight { .. }));
}
