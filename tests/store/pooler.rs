//! PostgreSQL behind PgBouncer: what msgw says at start when the pooler and
//! `MSGW_STORE_POOLING` disagree, or the settings cannot work together. (Every test of
//! the suite also runs through PgBouncer in both modes: see `main.rs`.)

use std::time::Duration;

use msgw::adapters::store::{Pooling, StoreTarget, open};

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
        error.contains("different schemas") && error.contains(&schema.name),
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
