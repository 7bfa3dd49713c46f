//! msgw replicas on PostgreSQL through PgBouncer (Debian's, one pooler per test), in
//! session mode and in transaction mode (`MSGW_STORE_POOLING=transaction`, LISTEN and
//! migrations over `MSGW_STORE_DIRECT_URL`): events cross replicas within the
//! documented delay, scheduled sends and verification work, and a pooler msgw was not
//! told of fails the start with the fix. (The replica suite, `replicas.rs`, runs
//! through PgBouncer in both modes too.)

use std::time::Duration;

use msgw::adapters::store::Pooling;
use msgw::process::app::Application;

use crate::helpers::{FakeGateway, Options, config};
use crate::replicas::{Database, event_delays, webhooks_reach_every_subscriber};

/// Events posted to one replica reach a subscriber of the other within the delay
/// docs/replicas.md gives (LISTEN wakes it at once; each replica also reads the head
/// every second): the median well under the second a lost LISTEN would show.
async fn events_cross_replicas_within_the_documented_delay(database: Database, via: &str) {
    let gateway = FakeGateway::start().await;
    let replicas = database.replicas(2, &gateway).await;
    let mut delays = event_delays(&replicas[0], &replicas[1], 40).await;
    delays.sort_unstable();
    let (median, max) = (delays[delays.len() / 2], delays[delays.len() - 1]);
    println!("event to the other replica's subscriber, {via}: median {median:?}, max {max:?}");
    assert!(
        median < Duration::from_millis(250) && max < Duration::from_secs(2),
        "{via}: median {median:?}, max {max:?}"
    );
    webhooks_reach_every_subscriber(&replicas, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn directly_events_cross_replicas_within_the_documented_delay() {
    events_cross_replicas_within_the_documented_delay(Database::direct().await, "direct").await;
}

/// The same tests through PgBouncer in each mode.
macro_rules! through_pgbouncer {
    ($($mode:ident: $pooling:expr),* $(,)?) => {
        $(
            mod $mode {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn events_cross_replicas_within_the_documented_delay() {
                    let database = Database::through_pgbouncer($pooling).await;
                    let via = concat!("PgBouncer, ", stringify!($mode), " mode");
                    super::events_cross_replicas_within_the_documented_delay(database, via).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn scheduled_sends_leave_once() {
                    let database = Database::through_pgbouncer($pooling).await;
                    let gateway = FakeGateway::start().await;
                    let replicas = database.replicas(2, &gateway).await;
                    crate::scheduling::scheduled_once_on(&replicas, &gateway).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn verification_codes_check_once_across_replicas() {
                    let database = Database::through_pgbouncer($pooling).await;
                    crate::verification::checks_on_two_replicas(|| database.options()).await;
                }
            }
        )*
    };
}

through_pgbouncer!(
    session: Pooling::Session,
    transaction: Pooling::Transaction,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_msgw_was_not_told_of_fails_the_start_with_the_fix() {
    let database = Database::through_pgbouncer(Pooling::Transaction).await;
    let gateway = FakeGateway::start().await;
    let (config, _dir) = config(
        Options {
            store_pooling: Pooling::Session,
            store_direct_url: None,
            ..database.options()
        },
        &gateway,
    );
    let error = match Application::build(config).await {
        Ok(_) => panic!("msgw started through a transaction pooler set as session"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("cannot open the store")
            && error.contains("pooler in transaction mode")
            && error.contains("MSGW_STORE_POOLING=transaction"),
        "{error}"
    );
}
