//! The suppression list: callers' changes and keyword replies, each with its event in
//! the one log, read back exactly, in number order, on both stores.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use msgw::core::domain::{
    CallerName, Channel, ClientId, Cursor, Keywords, LogEvent, Phone, Reason, Reply,
    SuppressionChange, SuppressionSource,
};
use msgw::core::ports::store::{
    AcceptedOutcome, ClaimChange, ClaimReply, Fingerprint, LogAppend, SentMessage, Settlement,
    Store,
};

use crate::Fixture;
use crate::events::event;

pub fn phone(n: u64) -> Phone {
    Phone::parse(&n.to_string()).unwrap()
}

/// A time the store keeps exactly (milliseconds).
fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).unwrap()
}

fn change(n: u64, suppressed: bool, reason: &str) -> LogAppend {
    LogAppend::Change(SuppressionChange {
        phone: phone(n),
        suppressed,
        source: SuppressionSource::Api,
        reason: Reason::parse(reason).unwrap(),
        client_id: None,
        caller: Some(CallerName::parse("compliance").unwrap()),
        at: at(1_700_000_000_123),
    })
}

/// Message `id` sent to `to`, as the send path records it.
pub async fn sent(store: &dyn Store, id: u64, to: u64) {
    let client_id = ClientId::new(id).unwrap();
    store
        .apply_claims(&[ClaimChange::Claim {
            id: client_id,
            fingerprint: Fingerprint([3; 32]),
            caller: None,
            at: Utc::now(),
        }])
        .await
        .unwrap();
    store
        .apply_claims(&[ClaimChange::Settle {
            id: client_id,
            attempt: 1,
            settlement: Settlement::Accepted(
                AcceptedOutcome {
                    msg_id: Some(format!("m{id}")),
                    parts: 1,
                    payload: serde_json::json!({}),
                    recovered: false,
                },
                Some(SentMessage {
                    client_id,
                    msg_id: format!("m{id}"),
                    channel: Channel::Sms,
                    sent_at: Utc::now(),
                    lifetime: Duration::from_secs(3600),
                    phone: Some(phone(to)),
                }),
            ),
            at: Utc::now(),
        }])
        .await
        .unwrap();
}

/// The delivery report of message `id` with these reply texts, written a millisecond
/// apart from 2023-11-14.
fn report(id: u64, replies: &[&str]) -> LogAppend {
    let dated: Vec<(&str, Option<DateTime<Utc>>)> = replies
        .iter()
        .enumerate()
        .map(|(i, text)| (*text, Some(at(1_700_000_000_000 + i as i64))))
        .collect();
    dated_report(id, &dated)
}

/// The delivery report of message `id` with these replies, each at its own time (or
/// none).
pub fn dated_report(id: u64, replies: &[(&str, Option<DateTime<Utc>>)]) -> LogAppend {
    let mut e = event(id, "DELIVERED");
    e.report.replies = replies
        .iter()
        .map(|(text, datetime)| Reply {
            datetime: *datetime,
            time_unreadable: false,
            message: Some((*text).to_owned()),
            media: None,
        })
        .collect();
    let keywords = Keywords::new(&["STOP".into()], &["START".into()]).replies_of(&e.report);
    LogAppend::Report { event: e, keywords }
}

pub async fn a_callers_change_commits_with_its_event_and_reads_back(fixture: Fixture) {
    let store = fixture.open().await;
    let added = store
        .append_log(&[change(380971234567, true, "web form")])
        .await
        .unwrap();
    let entry = added[0].entry.clone().expect("the new entry");
    assert_eq!(
        (entry.phone, entry.source, entry.reason.as_str()),
        (phone(380971234567), SuppressionSource::Api, "web form")
    );
    assert_eq!(
        entry.caller.as_ref().map(CallerName::as_str),
        Some("compliance")
    );
    assert_eq!(entry.created_at, at(1_700_000_000_123));
    assert_eq!(added[0].suppressions.len(), 1);
    assert_eq!(
        store.suppression(phone(380971234567)).await.unwrap(),
        Some(entry.clone())
    );

    // Adding again changes nothing and makes no event; removing an absent number too.
    let again = store
        .append_log(&[
            change(380971234567, true, "other"),
            change(4470000000, false, ""),
        ])
        .await
        .unwrap();
    assert_eq!(again[0].entry, Some(entry.clone()));
    assert!(again[0].suppressions.is_empty() && again[1].suppressions.is_empty());
    assert_eq!(again[1].entry, None);
    assert_eq!(store.latest_cursor().await.unwrap(), Cursor::new(1));

    for n in [99912345678, 12345678, 4470000000] {
        store.append_log(&[change(n, true, "")]).await.unwrap();
    }
    let listed = |after, limit| {
        let store = store.clone();
        async move {
            store
                .suppressions(after, limit)
                .await
                .unwrap()
                .iter()
                .map(|s| s.phone.get())
                .collect::<Vec<u64>>()
        }
    };
    assert_eq!(
        listed(None, 10).await,
        [12345678, 4470000000, 99912345678, 380971234567],
        "number order"
    );
    assert_eq!(listed(Some(phone(4470000000)), 1).await, [99912345678]);
    let mut found: Vec<u64> = store
        .suppressed(&[phone(12345678), phone(380971234568), phone(99912345678)])
        .await
        .unwrap()
        .into_iter()
        .map(Phone::get)
        .collect();
    found.sort_unstable();
    assert_eq!(found, [12345678, 99912345678]);
    assert!(store.suppressed(&[]).await.unwrap().is_empty());

    // A millisecond after the add: the newer decision (at the same time, an add wins).
    let removed = store
        .append_log(&[change_at(380971234567, false, at(1_700_000_000_124))])
        .await
        .unwrap();
    assert_eq!(removed[0].entry, Some(entry));
    assert_eq!(store.suppression(phone(380971234567)).await.unwrap(), None);

    // Every change is in the log, in order, and reads back exactly.
    let log = store.events_after(Cursor::START, 10).await.unwrap();
    let changes: Vec<(u64, u64, bool)> = log
        .iter()
        .map(|e| match e {
            LogEvent::Suppression(s) => {
                (e.cursor().get(), s.change.phone.get(), s.change.suppressed)
            }
            LogEvent::Status(_) => panic!("no status was appended"),
        })
        .collect();
    assert_eq!(
        changes,
        [
            (1, 380971234567, true),
            (2, 99912345678, true),
            (3, 12345678, true),
            (4, 4470000000, true),
            (5, 380971234567, false)
        ]
    );
    let LogEvent::Suppression(last) = &log[4] else {
        unreachable!()
    };
    assert_eq!(last, &removed[0].suppressions[0]);
    assert_eq!(last.change.reason.as_str(), "consent");
}

pub async fn keyword_replies_change_their_messages_number_once_in_order(fixture: Fixture) {
    let store = fixture.open().await;
    sent(store.as_ref(), 1, 380971234567).await;
    let first = store.append_log(&[report(1, &["STOP"])]).await.unwrap();
    let status = first[0].status.clone().expect("the status is stored");
    let opted_out = &first[0].suppressions;
    assert_eq!(opted_out.len(), 1);
    assert!(opted_out[0].cursor > status.cursor);
    let c = &opted_out[0].change;
    assert_eq!(
        (
            c.phone.get(),
            c.suppressed,
            c.source,
            c.reason.as_str(),
            c.client_id
        ),
        (
            380971234567,
            true,
            SuppressionSource::Reply,
            "STOP",
            ClientId::new(1).ok()
        )
    );
    let entry = store
        .suppression(phone(380971234567))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (entry.client_id, entry.caller),
        (ClientId::new(1).ok(), None)
    );

    // The same webhook again: a duplicate status, and the STOP is not applied twice.
    let again = store.append_log(&[report(1, &["STOP"])]).await.unwrap();
    assert_eq!(
        (again[0].status.is_none(), again[0].suppressions.len()),
        (true, 0)
    );
    // STOP then START (a poll seeing one more reply): only the START is new; the group's
    // second report repeats it and changes nothing more.
    let more = store
        .append_log(&[report(1, &["STOP", "START"]), report(1, &["STOP", "START"])])
        .await
        .unwrap();
    let lifted: Vec<bool> = more[0]
        .suppressions
        .iter()
        .map(|s| s.change.suppressed)
        .collect();
    assert_eq!((lifted, more[1].suppressions.len()), (vec![false], 0));
    assert_eq!(store.suppression(phone(380971234567)).await.unwrap(), None);
    // STOP, START, STOP in one report, written after those: each in order, the number
    // ends suppressed.
    sent(store.as_ref(), 2, 380971234567).await;
    let later = |ms: i64| Some(at(1_700_000_001_000 + ms));
    let three = store
        .append_log(&[dated_report(
            2,
            &[
                ("stop", later(0)),
                ("start", later(1)),
                (" Stop ", later(2)),
            ],
        )])
        .await
        .unwrap();
    let order: Vec<bool> = three[0]
        .suppressions
        .iter()
        .map(|s| s.change.suppressed)
        .collect();
    assert_eq!(order, [true, false, true]);
    assert!(
        store
            .suppression(phone(380971234567))
            .await
            .unwrap()
            .is_some()
    );

    // A reply to a message msgw has no number of changes nothing.
    let unknown = store.append_log(&[report(3, &["STOP"])]).await.unwrap();
    assert!(unknown[0].status.is_some() && unknown[0].suppressions.is_empty());

    // A message's own status is still its newest event, not a list change.
    let last = store
        .last_event_of(ClientId::new(2).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last.event.report.client_id, ClientId::new(2).ok());
    // Statuses and changes share one cursor order without gaps.
    let log = store.events_after(Cursor::START, 100).await.unwrap();
    let cursors: Vec<u64> = log.iter().map(|e| e.cursor().get()).collect();
    assert_eq!(cursors, (1..=cursors.len() as u64).collect::<Vec<_>>());
}

/// The time now less `minutes`, as the store keeps it.
pub fn ago(minutes: i64) -> DateTime<Utc> {
    at((Utc::now() - chrono::Duration::minutes(minutes)).timestamp_millis())
}

pub async fn listed(store: &dyn Store, n: u64) -> bool {
    store.suppression(phone(n)).await.unwrap().is_some()
}

/// A caller's change of `n` at `time`.
fn change_at(n: u64, suppressed: bool, time: DateTime<Utc>) -> LogAppend {
    let LogAppend::Change(c) = change(n, suppressed, "consent") else {
        unreachable!()
    };
    LogAppend::Change(SuppressionChange { at: time, ..c })
}

pub async fn the_newest_reply_decides_whatever_order_replies_arrive_in(fixture: Fixture) {
    let store = fixture.open().await;
    let s = store.as_ref();
    let (a, b, c, d, e, f) = (
        380971117790,
        380971117791,
        380971117792,
        380971117793,
        380971117794,
        380971117795,
    );
    for (id, to) in [(1, a), (2, a), (3, b), (4, c), (5, d), (6, e), (7, f)] {
        sent(s, id, to).await;
    }

    // One webhook listing [STOP@t2, START@t1]: the START is older and changes nothing.
    let one = s
        .append_log(&[dated_report(
            1,
            &[("STOP", Some(ago(2))), ("START", Some(ago(3)))],
        )])
        .await
        .unwrap();
    assert_eq!(one[0].suppressions.len(), 1);
    assert!(listed(s, a).await);
    // The second message's STOP at now-5min, then the first's START at now-10min (a
    // late webhook, or a poll learning it): still opted out.
    s.append_log(&[dated_report(2, &[("STOP", Some(ago(5)))])])
        .await
        .unwrap();
    let late = s
        .append_log(&[dated_report(1, &[("START", Some(ago(10)))])])
        .await
        .unwrap();
    assert!(late[0].suppressions.is_empty() && listed(s, a).await);
    // A newer START lifts it, and the older STOPs repeated after it do not come back.
    s.append_log(&[dated_report(2, &[("START", Some(ago(1)))])])
        .await
        .unwrap();
    s.append_log(&[dated_report(
        1,
        &[("STOP", Some(ago(2))), ("Stop.", Some(ago(4)))],
    )])
    .await
    .unwrap();
    assert!(!listed(s, a).await);

    // Equal times: STOP wins, in either order.
    let tie = ago(7);
    s.append_log(&[dated_report(
        3,
        &[("START", Some(tie)), ("STOP", Some(tie))],
    )])
    .await
    .unwrap();
    s.append_log(&[dated_report(
        4,
        &[("STOP", Some(tie)), ("START", Some(tie))],
    )])
    .await
    .unwrap();
    assert!(listed(s, b).await && listed(s, c).await);

    // No `datetime`: the report's `updated`, else its arrival; a reply dated in the
    // future counts as of its arrival, so a later call still decides.
    let mut undated = dated_report(5, &[("STOP", None)]);
    if let LogAppend::Report { event, .. } = &mut undated {
        event.report.updated = Some(ago(20));
    }
    s.append_log(&[undated]).await.unwrap();
    let entry = s.suppression(phone(d)).await.unwrap().expect("listed");
    let drift = (entry.created_at - ago(20)).num_seconds().abs();
    assert!(drift < 60, "decided at {}", entry.created_at);
    let future = Utc::now() + chrono::Duration::days(365);
    s.append_log(&[dated_report(
        6,
        &[("STOP", Some(at(future.timestamp_millis())))],
    )])
    .await
    .unwrap();
    let entry = s.suppression(phone(e)).await.unwrap().expect("listed");
    assert!(entry.created_at <= Utc::now());
    let removed = s
        .append_log(&[change_at(e, false, Utc::now())])
        .await
        .unwrap();
    assert!(removed[0].superseded.is_none() && !listed(s, e).await);

    // A caller's remove older than a STOP reply does not undo it, and says why.
    s.append_log(&[dated_report(7, &[("STOP", Some(ago(2)))])])
        .await
        .unwrap();
    let stopped_at = s.suppression(phone(f)).await.unwrap().expect("listed");
    let older = s.append_log(&[change_at(f, false, ago(3))]).await.unwrap();
    assert_eq!(older[0].superseded, Some(stopped_at.created_at));
    assert!(older[0].suppressions.is_empty() && listed(s, f).await);
    // An add older than a newer opt-in, the same.
    let older = s.append_log(&[change_at(a, true, ago(30))]).await.unwrap();
    assert!(older[0].superseded.is_some() && !listed(s, a).await);
}

pub async fn replicas_applying_replies_out_of_order_end_in_the_newest_state(fixture: Fixture) {
    let (one, two) = (fixture.open().await, fixture.open().await);
    const NUMBERS: u64 = 20;
    for i in 0..NUMBERS {
        sent(one.as_ref(), 100 + i, 380971200000 + i).await;
        sent(one.as_ref(), 200 + i, 380971200000 + i).await;
    }
    // Each number: one replica applies its STOP at now-5min while the other applies
    // its START at now-10min, at once; even numbers' START goes first.
    let mut tasks = Vec::new();
    for i in 0..NUMBERS {
        let (stop, start) = (
            dated_report(100 + i, &[("STOP", Some(ago(5)))]),
            dated_report(200 + i, &[("START", Some(ago(10)))]),
        );
        let (first, second) = if i % 2 == 0 {
            (start, stop)
        } else {
            (stop, start)
        };
        for (store, append) in [(one.clone(), first), (two.clone(), second)] {
            tasks.push(tokio::spawn(async move {
                store.append_log(&[append]).await.unwrap();
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    for i in 0..NUMBERS {
        assert!(listed(one.as_ref(), 380971200000 + i).await, "number {i}");
        assert!(listed(two.as_ref(), 380971200000 + i).await, "number {i}");
    }
    let found = one
        .suppressed(
            &(0..NUMBERS)
                .map(|i| phone(380971200000 + i))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    assert_eq!(found.len(), NUMBERS as usize);
}

/// The send path's one store call per dispatch group: the claims written as
/// `apply_claims` writes them, and exactly the listed numbers among the recipients
/// answered, for a group of only claims (one statement or writer transaction) and for
/// a group with a take-over (written and read beside each other).
pub async fn a_claims_group_reads_the_list_in_the_same_store_call(fixture: Fixture) {
    let store = fixture.open().await;
    for n in [380971234567, 4470000000] {
        store.append_log(&[change(n, true, "")]).await.unwrap();
    }
    let claim = |n: u64| ClaimChange::Claim {
        id: ClientId::new(n).unwrap(),
        fingerprint: Fingerprint([7; 32]),
        caller: None,
        at: Utc::now(),
    };
    let recipients = [phone(380971234567), phone(380971234568), phone(4470000000)];
    let checked = store
        .claim_checking(&[claim(501), claim(502), claim(501)], &recipients)
        .await
        .unwrap();
    assert_eq!(checked.replies.len(), 3);
    assert_eq!(checked.replies[0], ClaimReply::Claimed { attempt: 1 });
    assert_eq!(checked.replies[1], ClaimReply::Claimed { attempt: 1 });
    assert!(
        matches!(checked.replies[2], ClaimReply::Existing(_)),
        "{:?}",
        checked.replies[2]
    );
    let mut found: Vec<u64> = checked.suppressed.into_iter().map(Phone::get).collect();
    found.sort_unstable();
    assert_eq!(found, [4470000000, 380971234567]);

    // Nothing to read: the claims alone; nothing listed: nothing found.
    let alone = store.claim_checking(&[claim(503)], &[]).await.unwrap();
    assert_eq!(alone.replies, [ClaimReply::Claimed { attempt: 1 }]);
    assert!(alone.suppressed.is_empty());
    let unlisted = store
        .claim_checking(&[claim(504)], &[phone(380971234568)])
        .await
        .unwrap();
    assert_eq!(unlisted.replies, [ClaimReply::Claimed { attempt: 1 }]);
    assert!(unlisted.suppressed.is_empty());

    // A group that is not only claims (a settlement) takes the other way, same answer.
    let mixed = store
        .claim_checking(
            &[
                claim(505),
                ClaimChange::Settle {
                    id: ClientId::new(504).unwrap(),
                    attempt: 1,
                    settlement: Settlement::Released("test".into()),
                    at: Utc::now(),
                },
            ],
            &[phone(4470000000), phone(380971234568)],
        )
        .await
        .unwrap();
    assert_eq!(mixed.replies.len(), 2);
    assert_eq!(mixed.replies[0], ClaimReply::Claimed { attempt: 1 });
    assert_eq!(
        mixed
            .suppressed
            .into_iter()
            .map(Phone::get)
            .collect::<Vec<_>>(),
        [4470000000]
    );
}

/// Many dispatch groups at once (as several envelopes' claims meet the writer thread
/// or the claims connection together): every group gets its own replies and exactly
/// its own listed numbers, and every id is claimed once.
pub async fn concurrent_claims_groups_each_read_their_own_numbers(fixture: Fixture) {
    let store = fixture.open().await;
    // Numbers 380970000000 + k; the even ones opted out.
    let number = |k: u64| 380_970_000_000 + k;
    for k in (0..40).step_by(2) {
        store
            .append_log(&[change(number(k), true, "")])
            .await
            .unwrap();
    }
    let groups = (0..16u64).map(|g| {
        let store = store.clone();
        async move {
            let claims: Vec<ClaimChange> = (0..8u64)
                .map(|i| ClaimChange::Claim {
                    id: ClientId::new(10_000 + g * 8 + i).unwrap(),
                    fingerprint: Fingerprint([9; 32]),
                    caller: None,
                    at: Utc::now(),
                })
                .collect();
            // Each group asks about its own five numbers, some shared with others.
            let asked: Vec<u64> = (0..5).map(|i| (g * 2 + i) % 40).collect();
            let recipients: Vec<Phone> = asked.iter().map(|&k| phone(number(k))).collect();
            let checked = store.claim_checking(&claims, &recipients).await.unwrap();
            (asked, checked)
        }
    });
    let done = futures_util::future::join_all(groups).await;
    let mut claimed = 0;
    for (asked, checked) in done {
        claimed += checked
            .replies
            .iter()
            .filter(|r| **r == ClaimReply::Claimed { attempt: 1 })
            .count();
        let mut found: Vec<u64> = checked.suppressed.into_iter().map(Phone::get).collect();
        found.sort_unstable();
        let mut listed: Vec<u64> = asked
            .into_iter()
            .filter(|k| k % 2 == 0)
            .map(number)
            .collect();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(found, listed);
    }
    assert_eq!(claimed, 16 * 8, "each id claimed once, by its own group");
}
