//! SQLite: every write of the store waits its turn behind another connection's write
//! (the send path's writer has a connection of its own) instead of failing. A
//! transaction that reads before it writes must take the write lock first: begun
//! deferred, its write is refused at once ("database is locked", no busy handler)
//! whenever another connection holds the lock or committed since its read.

use std::{
    future::Future,
    path::{Path, PathBuf},
    time::Duration,
};

use chrono::Utc;
use msgw::core::domain::ClientId;
use msgw::core::ports::store::{ClaimChange, Fingerprint, Retention, StartOutcome, StoreError};

use crate::{Fixture, events::event, shared::sent, verifications};

/// How long the other connection holds the write lock.
const HOLD: Duration = Duration::from_millis(200);

/// Runs `write` while another connection holds the file's write lock, writes and
/// commits `HOLD` later: `write` must wait its turn and succeed.
async fn behind_another_writer<T>(
    path: &Path,
    what: &str,
    write: impl Future<Output = Result<T, StoreError>>,
) -> T {
    let (locked, is_locked) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    let other = std::thread::spawn(move || {
        let db = rusqlite::Connection::open(path).unwrap();
        db.execute_batch(
            "BEGIN IMMEDIATE;
             INSERT INTO leases (name, holder, until_ms) VALUES ('beside', 'test', 0)
               ON CONFLICT (name) DO UPDATE SET until_ms = leases.until_ms + 1;",
        )
        .unwrap();
        locked.send(()).unwrap();
        std::thread::sleep(HOLD);
        db.execute_batch("COMMIT").unwrap();
    });
    is_locked.recv().unwrap();
    let done = write.await;
    other.join().unwrap();
    done.unwrap_or_else(|e| panic!("{what} failed instead of waiting its turn: {e}"))
}

fn id(n: u64) -> ClientId {
    ClientId::new(n).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_waits_its_turn_behind_another_connections_write() {
    let fixture = Fixture::sqlite().await;
    let path = PathBuf::from(fixture.url().strip_prefix("sqlite://").unwrap());
    let store = fixture.open().await;
    let at = Utc::now() - chrono::Duration::minutes(1);

    let first = verifications::new(1, None, verifications::phone(1), at);
    let call = verifications::start(first.clone(), verifications::limit(100), None);
    let created = behind_another_writer(
        &path,
        "a verification's start",
        store.start_verification(&call),
    )
    .await;
    assert!(
        matches!(created.outcome, StartOutcome::Started(_)),
        "{created:?}"
    );
    let resend = verifications::start(
        verifications::new(2, None, verifications::phone(1), Utc::now()),
        verifications::limit(100),
        None,
    );
    let resent = behind_another_writer(&path, "a resend", store.start_verification(&resend)).await;
    assert!(
        matches!(&resent.outcome, StartOutcome::Resent(r) if r.last_send == id(2)),
        "{resent:?}"
    );
    let right = |_: &msgw::core::ports::store::VerificationRecord| false;
    let checked = store.check_verification(None, verifications::phone(1), Utc::now(), &right, None);
    behind_another_writer(&path, "a check", checked).await;
    behind_another_writer(
        &path,
        "a cancel",
        store.cancel_verification(None, verifications::phone(1), Utc::now()),
    )
    .await;
    behind_another_writer(
        &path,
        "expiring verifications",
        store.pending_verification(None, verifications::phone(1), Utc::now()),
    )
    .await;

    // Claims and settlements go to the send path's writer; a take-over to the pool's.
    let send_path = async {
        sent(&*store, 10..=11).await;
        Ok(())
    };
    behind_another_writer(&path, "claims and settlements", send_path).await;
    let take_over = ClaimChange::TakeOver {
        caller: None,
        id: id(10),
        fingerprint: Fingerprint([3; 32]),
        attempt: 1,
        at: Utc::now(),
    };
    behind_another_writer(&path, "a take-over", store.apply_claims(&[take_over])).await;

    behind_another_writer(
        &path,
        "an event append",
        store.append_batch(&[event(11, "DELIVERED")]),
    )
    .await;
    behind_another_writer(
        &path,
        "taking due polls",
        store.take_due_for_poll(Utc::now(), 10, Duration::from_secs(60)),
    )
    .await;
    behind_another_writer(
        &path,
        "scheduling a poll",
        store.schedule_poll(id(11), Some(Utc::now())),
    )
    .await;
    let lease = store.try_lease("prune", "replica", Duration::from_secs(60), Utc::now());
    assert!(behind_another_writer(&path, "a lease", lease).await);
    let retention = Retention {
        max_age: Duration::from_secs(3600),
        max_events: 1000,
        claims_max_age: Duration::from_secs(3600),
        guard_max_age: std::time::Duration::from_secs(3600),
        trusted_keys_max_age: std::time::Duration::from_secs(3600),
    };
    behind_another_writer(&path, "retention", store.prune(retention, Utc::now())).await;
    behind_another_writer(
        &path,
        "saving the sandbox's state",
        store.save_sandbox(
            "sandbox",
            &msgw::core::ports::store::SandboxSave {
                account: Some("{}".into()),
                messages: vec![(1, "{}".into())],
            },
        ),
    )
    .await;
    store.close().await;
}
