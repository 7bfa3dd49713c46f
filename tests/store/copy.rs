//! Moving from SQLite to PostgreSQL with `msgw copy-store`: every table, or a refusal
//! that names what it cannot copy.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;
use msgw::adapters::store::copy;
use msgw::core::domain::{CallerName, ClientId, Phone};
use msgw::core::ports::store::{
    ClaimChange, Fingerprint, GuardCheck, GuardFinding, KeyCheck, Retention, SandboxSave,
    StartOutcome, StoreError, VerificationChange, Window,
};
use sqlx::Connection;

use crate::verifications::{id, limit, new, phone, start};
use crate::{Fixture, events::event};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_moves_to_postgres_with_its_claims_tracking_and_cursors() {
    let (sqlite, postgres) = (Fixture::sqlite().await, Fixture::postgres().await);
    let old = sqlite.open().await;
    crate::shared::sent(old.as_ref(), 1..=3).await;
    // A caller's claim, whose events carry the caller: both must survive the copy.
    old.apply_claims(&[ClaimChange::Claim {
        caller: Some(msgw::core::domain::CallerName::parse("billing").unwrap()),
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
        trusted_keys_max_age: std::time::Duration::from_secs(3600),
    };
    old.prune(keep_three, Utc::now()).await.unwrap();
    old.append_batch(&[event(3, "READ")]).await.unwrap();
    old.close().await;

    let copied = copy::run(sqlite.url(), postgres.url(), None, None)
        .await
        .unwrap();
    let rows = ["claims", "messages", "events"].map(|table| copied.rows(table));
    assert_eq!(rows, [4, 3, 4]);
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
        msgw::core::domain::ClientId::new(2).ok()
    );
    let billing = new
        .events_after(msgw::core::domain::Cursor::START, 100)
        .await
        .unwrap();
    assert!(
        billing.iter().filter_map(|e| e.status()).any(|e| e
            .event
            .report
            .client_id
            .map(|id| id.get())
            == Some(4)
            && e.caller.is_some()),
        "{billing:?}"
    );
    assert_eq!(
        new.events_after(msgw::core::domain::Cursor::START, 100)
            .await
            .unwrap(),
        old.events_after(msgw::core::domain::Cursor::START, 100)
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

    let again = copy::run(sqlite.url(), postgres.url(), None, None).await;
    assert!(
        matches!(again, Err(StoreError::Config(ref m)) if m.contains("not empty")),
        "{again:?}"
    );
}

/// The tables (and their columns) of a freshly migrated store, by name.
async fn schema(fixture: &Fixture) -> Vec<(String, BTreeSet<String>)> {
    fixture.open().await.close().await;
    let tables: Vec<(String,)>;
    let mut schema = Vec::new();
    if fixture.url().starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(fixture.url())
            .await
            .unwrap();
        tables = sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        for (table,) in tables {
            let columns: Vec<(String,)> = sqlx::query_as("SELECT name FROM pragma_table_info($1)")
                .bind(&table)
                .fetch_all(&mut conn)
                .await
                .unwrap();
            schema.push((table, columns.into_iter().map(|(c,)| c).collect()));
        }
    } else {
        let mut conn = crate::postgres::connect(fixture.url()).await;
        tables = sqlx::query_as(
            "SELECT table_name::TEXT FROM information_schema.tables
              WHERE table_schema = current_schema()",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        for (table,) in tables {
            let columns: Vec<(String,)> = sqlx::query_as(
                "SELECT column_name::TEXT FROM information_schema.columns
                  WHERE table_schema = current_schema() AND table_name = $1",
            )
            .bind(&table)
            .fetch_all(&mut conn)
            .await
            .unwrap();
            schema.push((table, columns.into_iter().map(|(c,)| c).collect()));
        }
    }
    schema
}

/// Fails when a migration adds a table (or a column to one database only) that
/// copy-store does not know: teach `src/adapters/store/copy.rs` to copy it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_store_knows_every_table_of_both_schemas() {
    let sqlite = schema(&Fixture::sqlite().await).await;
    let postgres = schema(&Fixture::postgres().await).await;
    let known: BTreeSet<&str> = copy::TABLES
        .iter()
        .copied()
        .chain(copy::BOOKKEEPING.iter().map(|(table, _)| *table))
        .collect();
    for (table, _) in sqlite.iter().chain(&postgres) {
        assert!(
            known.contains(table.as_str()),
            "copy-store does not know the table {table}: copy it in src/adapters/store/copy.rs"
        );
    }
    for table in copy::TABLES {
        let columns = |schema: &[(String, BTreeSet<String>)]| {
            schema
                .iter()
                .find(|(name, _)| name == table)
                .map(|(_, columns)| columns.clone())
                .unwrap_or_else(|| panic!("{table} is missing from a schema"))
        };
        let mut in_postgres = columns(&postgres);
        for (postgres_only, column) in copy::POSTGRES_ONLY {
            if postgres_only == table {
                in_postgres.remove(*column);
            }
        }
        assert_eq!(columns(&sqlite), in_postgres, "the columns of {table}");
    }
}

/// A table copy-store does not know (here one added by hand) is named, and nothing is
/// copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_copy_store_does_not_know_is_named_and_nothing_is_copied() {
    let (sqlite, postgres) = (Fixture::sqlite().await, Fixture::postgres().await);
    let old = sqlite.open().await;
    crate::shared::sent(old.as_ref(), 1..=2).await;
    old.close().await;
    let mut conn = sqlx::SqliteConnection::connect(sqlite.url()).await.unwrap();
    sqlx::query("CREATE TABLE coupons (code TEXT)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let refused = copy::run(sqlite.url(), postgres.url(), None, None).await;
    assert!(
        matches!(refused, Err(StoreError::Config(ref m)) if m.contains("coupons")),
        "{refused:?}"
    );
    let new = postgres.open().await;
    assert_eq!(new.claim_of(id(1)).await.unwrap(), None);
}

/// Another program's SQLite file, or an empty one (a wrong path or mount), is refused
/// as not msgw's, and left as it was: copy-store never migrates a file it was not
/// given by msgw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_an_msgw_store_is_refused_and_left_untouched() {
    let postgres = Fixture::postgres().await;
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("foreign.db");
    let url = format!("sqlite://{}", foreign.display());
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&foreign)
        .create_if_missing(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE users (id INTEGER, name TEXT)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let before = std::fs::read(&foreign).unwrap();
    let refused = copy::run(&url, postgres.url(), None, None).await;
    assert!(
        matches!(refused, Err(StoreError::Config(ref m)) if m.contains("not an msgw store")),
        "{refused:?}"
    );
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "the file is untouched"
    );

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let refused = copy::run(
        &format!("sqlite://{}", empty.display()),
        postgres.url(),
        None,
        None,
    )
    .await;
    assert!(
        matches!(refused, Err(StoreError::Config(ref m)) if m.contains("empty")),
        "{refused:?}"
    );
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
}

fn guard(range: &str, calling_code: &str, min_starts: u32, keys: Vec<KeyCheck>) -> GuardCheck {
    let now = Utc::now();
    GuardCheck {
        enforce: true,
        range: range.into(),
        calling_code: calling_code.into(),
        since: now - chrono::Duration::hours(1),
        decided_before: now + chrono::Duration::seconds(1),
        min_starts,
        min_conversion: 0.2,
        hold_until: now + chrono::Duration::hours(1),
        country: Some(Window {
            max: 1,
            since: now - chrono::Duration::hours(1),
        }),
        keys,
        judged: true,
        code_min_starts: None,
        region: None,
        key_limits: Vec::new(),
        trusted_since: None,
    }
}

/// Verifications (pending ones stay checkable, sends keep their state), the fraud
/// guard's counts and holds and the sandbox's account move too; the stopped msgw's
/// leases do not (they would hold the new replicas off until they expire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifications_the_guards_counts_and_the_sandbox_move_too() {
    let (sqlite, postgres) = (Fixture::sqlite().await, Fixture::postgres().await);
    let old = sqlite.open().await;
    let billing = Some(CallerName::parse("billing").unwrap());
    let key = KeyCheck {
        name: "ip".into(),
        mac: vec![5; 32],
        window: Window {
            max: 1,
            since: Utc::now() - chrono::Duration::hours(1),
        },
    };
    // A pending verification, its first send accepted and one resend; its start
    // counted by the guard against a key and calling code 380.
    let first = new(
        1,
        billing.clone(),
        phone(1),
        Utc::now() - chrono::Duration::minutes(1),
    );
    let counted = guard("380971", "380", 1000, vec![key.clone()]);
    let created = old
        .start_verification(&start(first, limit(100), Some(counted.clone())))
        .await
        .unwrap();
    assert!(
        matches!(created.outcome, StartOutcome::Started(_)),
        "{created:?}"
    );
    old.change_verification(&VerificationChange::Sent { send: id(1) })
        .await
        .unwrap();
    // The resend's code counts too: room for a second under the key and the budget.
    let room = |w: Window| Window { max: 2, ..w };
    let counted = GuardCheck {
        keys: vec![KeyCheck {
            window: room(key.window),
            ..key.clone()
        }],
        country: counted.country.map(room),
        ..counted
    };
    let again = new(2, billing.clone(), phone(1), Utc::now());
    let resent = old
        .start_verification(&start(again, limit(100), Some(counted)))
        .await
        .unwrap();
    assert!(
        matches!(resent.outcome, StartOutcome::Resent(_)),
        "{resent:?}"
    );
    // A range held at its second unconverted start.
    let pumped = |n: u64| Phone::parse(&format!("881234{n:06}")).unwrap();
    let held = guard("881234", "881", 1, Vec::new());
    for n in [10, 11] {
        let call = start(
            new(n, None, pumped(n), Utc::now()),
            limit(100),
            Some(held.clone()),
        );
        old.start_verification(&call).await.unwrap();
    }
    let hold = old.range_hold("881234", Utc::now()).await.unwrap();
    assert!(hold.is_some());
    let save = SandboxSave {
        account: Some(r#"{"balance":7}"#.into()),
        messages: vec![(1, "one".into()), (u64::MAX, "last".into())],
    };
    old.save_sandbox("sandbox", &save).await.unwrap();
    let ttl = Duration::from_secs(60);
    assert!(
        old.try_lease("retention", "old", ttl, Utc::now())
            .await
            .unwrap()
    );
    old.close().await;

    let copied = copy::run(sqlite.url(), postgres.url(), None, None)
        .await
        .unwrap();
    let tables: Vec<&str> = copied.tables.iter().map(|(table, _)| *table).collect();
    assert_eq!(tables, copy::TABLES);
    let rows = [
        "verifications",
        "verification_sends",
        "guard_codes",
        "guard_code_keys",
        "guard_trusted_keys",
        "guard_holds",
        "sandbox_state",
        "sandbox_messages",
    ]
    .map(|table| copied.rows(table));
    assert_eq!(rows, [2, 3, 3, 2, 0, 1, 1, 2], "{copied}");

    let (old, new) = (sqlite.open().await, postgres.open().await);
    let now = Utc::now();
    let pending = new
        .pending_verification(billing.as_ref(), phone(1), now)
        .await
        .unwrap()
        .outcome;
    assert!(pending.is_some());
    let before = old.pending_verification(billing.as_ref(), phone(1), now);
    assert_eq!(pending, before.await.unwrap().outcome);
    for send in [id(1), id(2)] {
        assert_eq!(
            new.verification_of_send(send).await.unwrap(),
            old.verification_of_send(send).await.unwrap()
        );
    }
    assert_eq!(new.range_hold("881234", now).await.unwrap(), hold);
    // The counts carry on: the key had its two codes, calling code 881 its one.
    let by_key = guard("380972", "380", 1000, vec![key]);
    let call = start(new_start(20, phone(20)), limit(100), Some(by_key));
    let refused = new.start_verification(&call).await.unwrap();
    let (created, findings) = (refused.outcome, refused.findings);
    assert!(matches!(created, StartOutcome::Refused), "{created:?}");
    assert!(
        matches!(findings.as_slice(), [GuardFinding::KeyLimited { .. }]),
        "{findings:?}"
    );
    let by_country = guard("881777", "881", 1000, Vec::new());
    let call = start(new_start(21, pumped(21)), limit(100), Some(by_country));
    let refused = new.start_verification(&call).await.unwrap();
    let (created, findings) = (refused.outcome, refused.findings);
    assert!(matches!(created, StartOutcome::Refused), "{created:?}");
    assert!(
        matches!(findings.as_slice(), [GuardFinding::CountryLimited { .. }]),
        "{findings:?}"
    );
    assert_eq!(
        new.sandbox_state("sandbox").await.unwrap().as_deref(),
        Some(r#"{"balance":7}"#)
    );
    let mut messages = new.sandbox_messages("sandbox").await.unwrap();
    messages.sort();
    assert_eq!(messages, save.messages);
    assert!(
        new.try_lease("retention", "new", ttl, Utc::now())
            .await
            .unwrap(),
        "the stopped msgw's lease does not hold the replicas off"
    );
}

fn new_start(n: u64, number: Phone) -> msgw::core::ports::store::NewVerification {
    new(n, None, number, Utc::now())
}
