//! PostgreSQL behind PgBouncer: what msgw says at start when the pooler and
//! `MSGW_STORE_POOLING` disagree, or the settings cannot work together. (Every test of
//! the suite also runs through PgBouncer in both modes: see `main.rs`.)

use std::time::Duration;

use msgw::adapters::store::{Pooling, StoreTarget, copy, open};
use sqlx::Connection;

use crate::pgbouncer::Bouncer;
use crate::postgres::TestSchema;

async fn refused(target: &StoreTarget) -> String {
    match open(target, Duration::ZERO).await {
        Ok(_) => panic!("the store opened through {}", target.url),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_msgw_was_not_told_of_fails_the_start_naming_the_setting() {
    let schema = TestSchema::create().await;
    let bouncer = Bouncer::start(&schema, "transaction");
    let error = refused(&StoreTarget::new(bouncer.url())).await;
    assert!(
        error.contains("pooler in transaction mode")
            && error.contains("MSGW_STORE_POOLING=transaction")
            && error.contains("MSGW_STORE_DIRECT_URL"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_pooling_needs_the_direct_url_and_no_session_settings() {
    let schema = TestSchema::create().await;
    let bouncer = Bouncer::start(&schema, "transaction");
    let mut target = StoreTarget::new(bouncer.url());
    target.pooling = Pooling::Transaction;
    let error = refused(&target).await;
    assert!(error.contains("needs MSGW_STORE_DIRECT_URL"), "{error}");

    target.direct_url = Some(schema.url.clone());
    target.url = format!("{}&options=-c%20statement_timeout%3D5s", bouncer.url());
    let error = refused(&target).await;
    assert!(
        error.contains("statement_timeout=5s") && error.contains("ALTER ROLE"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_url_to_another_schema_fails_the_start_naming_both() {
    let schema = TestSchema::create().await;
    let bouncer = Bouncer::start(&schema, "transaction");
    let mut target = StoreTarget::new(bouncer.url());
    target.pooling = Pooling::Transaction;
    let other = schema.url.replace(
        &format!("search_path%3D{}", schema.name),
        "search_path%3Dpublic",
    );
    assert_ne!(
        other, schema.url,
        "the test schema's URL sets its search_path"
    );
    target.direct_url = Some(other);
    let error = refused(&target).await;
    assert!(
        error.contains("different places") && error.contains(&format!("schema {}", schema.name)),
        "{error}"
    );
}

/// Through a session pooler, the URL's `options` (which PgBouncer refuses as a startup
/// parameter) are set once connected; `transaction` there works, with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pooler_takes_the_urls_settings_and_either_mode() {
    let schema = TestSchema::create().await;
    let bouncer = Bouncer::start(&schema, "session");
    let url = format!(
        "{}&options=-c%20search_path%3D{}",
        bouncer.url(),
        schema.name
    );
    let store = open(&StoreTarget::new(&url), Duration::ZERO)
        .await
        .expect("open through a session pooler, the URL's options set once connected");
    assert_eq!(store.latest_cursor().await.unwrap().get(), 0);
    store.close().await;

    let mut target = StoreTarget::new(bouncer.url());
    target.pooling = Pooling::Transaction;
    target.direct_url = Some(schema.url.clone());
    let store = open(&target, Duration::ZERO)
        .await
        .expect("transaction mode works on a session pooler");
    store.close().await;
}

/// A session pooler with one server session cannot serve msgw: the start says so
/// within seconds, not after PgBouncer's two-minute wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pool_too_small_for_msgw_fails_the_start_saying_so() {
    let schema = TestSchema::create().await;
    let bouncer = Bouncer::start_with_pool(&schema, "session", 1);
    let started = std::time::Instant::now();
    let error = refused(&StoreTarget::new(bouncer.url())).await;
    assert!(
        error.contains("no second server session") && error.contains("pool is too small"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// A direct URL to another database, even with a schema of the same name: msgw would
/// migrate there and LISTEN where no other replica NOTIFYs. Refused, naming both
/// places, before anything is written to either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_url_to_another_database_fails_the_start_before_writing() {
    let schema = TestSchema::create().await;
    let other = crate::postgres::TestDatabase::create(&schema).await;
    let bouncer = Bouncer::start(&schema, "transaction");
    let mut target = StoreTarget::new(bouncer.url());
    target.pooling = Pooling::Transaction;
    target.direct_url = Some(other.url.clone());
    let error = refused(&target).await;
    assert!(
        error.contains("different places")
            && error.contains(&format!("database {}", other.name))
            && error.contains("database test"),
        "{error}"
    );
    // Nothing was migrated into the other database.
    let mut conn = crate::postgres::connect(&other.url).await;
    let (tables,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(tables, 0);
    let _ = conn.close().await;

    // copy-store checks the same before it writes to --to-direct.
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("msgw.db").display());
    open(&StoreTarget::new(&sqlite), Duration::ZERO)
        .await
        .unwrap()
        .close()
        .await;
    let refused = copy::run(&sqlite, &bouncer.url(), Some(&other.url), None).await;
    let Err(error) = refused else {
        panic!("copied")
    };
    let error = error.to_string();
    assert!(
        error.contains("different places") && error.contains("--to-direct"),
        "{error}"
    );
    // And through a transaction pooler without --to-direct, it says to give one.
    let refused = copy::run(&sqlite, &bouncer.url(), None, None).await;
    let Err(error) = refused else {
        panic!("copied")
    };
    let error = error.to_string();
    assert!(error.contains("give --to-direct"), "{error}");
}

/// A direct URL that leads to a pooler in transaction mode cannot hold the
/// migrations' lock or LISTEN: refused at start, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_url_through_a_transaction_pooler_fails_the_start_naming_it() {
    let schema = TestSchema::create().await;
    let bouncer = Bouncer::start(&schema, "transaction");
    let mut target = StoreTarget::new(bouncer.url());
    target.pooling = Pooling::Transaction;
    target.direct_url = Some(bouncer.url());
    let error = refused(&target).await;
    assert!(
        error.contains("MSGW_STORE_DIRECT_URL leads to a connection pooler in transaction mode"),
        "{error}"
    );
}

/// While the direct connection (LISTEN) is cut and the pooler serves on, a replica
/// still learns of other replicas' events within about a second: it reads the newest
/// cursor through the pooler meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_a_replica_whose_listening_connection_is_cut() {
    let schema = TestSchema::create().await;
    let pooler = Bouncer::start(&schema, "transaction");
    // A way to PostgreSQL "itself" that the test can cut: a session pooler.
    let direct_path = Bouncer::start(&schema, "session");
    let mut target = StoreTarget::new(pooler.url());
    target.pooling = Pooling::Transaction;
    target.direct_url = Some(direct_path.url());
    let writer = open(&target, Duration::ZERO).await.unwrap();
    let reader = open(&target, Duration::ZERO).await.unwrap();
    drop(direct_path);
    let mut appended = reader.appended();
    for id in 1..=3u64 {
        let event = crate::events::event(id, "DELIVERED");
        let cursor = writer.append_batch(&[event]).await.unwrap()[0]
            .as_ref()
            .expect("appended")
            .cursor;
        let heard =
            tokio::time::timeout(Duration::from_secs(3), appended.wait_for(|c| *c >= cursor)).await;
        assert!(heard.is_ok(), "event {id} not heard within 3 s");
    }
    writer.close().await;
    reader.close().await;
}
