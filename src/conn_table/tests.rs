//! The connection table: who makes room at the cap, and when.

use super::*;

#[tokio::test(start_paused = true)]
async fn at_the_cap_the_longest_idle_connection_makes_room() {
    let table = Table::new(
        2,
        Duration::from_secs(60),
        ConnMetrics::grpc(&Metrics::new()),
    );
    let first = table.admit().unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    let second = table.admit().unwrap();
    let _busy = first.stream_opened(true);
    // `first` has a stream open: `second` is the one to go.
    let third = table.admit().unwrap();
    assert_eq!(second.closing().await, Close::Evicted);
    // Every connection not closing has a stream open: refused.
    let _busy_third = third.stream_opened(true);
    assert!(table.admit().is_none());
    second.finished();
    assert!(
        table.admit().is_none(),
        "still full: first and third are busy"
    );
}

#[tokio::test(start_paused = true)]
async fn streams_needing_no_token_do_not_keep_a_connection_at_the_cap() {
    let table = Table::new(
        2,
        Duration::from_secs(60),
        ConnMetrics::grpc(&Metrics::new()),
    );
    let watcher = table.admit().unwrap();
    let _watch = watcher.stream_opened(false);
    let caller = table.admit().unwrap();
    let _call = caller.stream_opened(true);
    let newcomer = table.admit().expect("the health watcher makes room");
    assert_eq!(watcher.closing().await, Close::Evicted);
    drop(newcomer);
}

#[tokio::test(start_paused = true)]
async fn a_connection_is_idle_from_its_last_stream_on() {
    let table = Table::new(
        8,
        Duration::from_secs(60),
        ConnMetrics::grpc(&Metrics::new()),
    );
    let conn = table.admit().unwrap();
    let start = Instant::now();
    assert_eq!(conn.idle_deadline(), Some(start + Duration::from_secs(60)));
    let stream = conn.stream_opened(true);
    assert_eq!(conn.idle_deadline(), None);
    tokio::time::advance(Duration::from_secs(10)).await;
    drop(stream);
    assert_eq!(conn.idle_deadline(), Some(start + Duration::from_secs(70)));
    conn.finished();
    table.emptied().await;
}

#[tokio::test(start_paused = true)]
async fn at_the_ceiling_the_oldest_closing_connection_is_dropped_at_once() {
    // Cap 8: the ceiling is 10 connections, closing ones included.
    let table = Table::new(
        8,
        Duration::from_secs(60),
        ConnMetrics::grpc(&Metrics::new()),
    );
    let mut conns: Vec<_> = (0..8).map(|_| table.admit().unwrap()).collect();
    conns.push(table.admit().unwrap()); // evicts conns[0]
    conns.push(table.admit().unwrap()); // evicts conns[1]
    let waiting = {
        let table = table.clone();
        tokio::spawn(async move { table.room().await })
    };
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "at the ceiling");
    conns[0].aborted().await;
    conns[0].finished();
    waiting.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_connection_idle_less_than_the_least_idle_time_does_not_make_room_yet() {
    let least = Duration::from_millis(100);
    let table = Table::with_least_idle(
        1,
        Duration::from_secs(60),
        least,
        ConnMetrics::http(&Metrics::new(), "admin"),
    );
    let first = table.admit().unwrap();
    let admitted = Instant::now();
    assert_eq!(table.try_admit().err(), Some(Some(admitted + least)));
    tokio::time::advance(least).await;
    let second = table.admit().expect("room once it has waited long enough");
    assert_eq!(first.closing().await, Close::Evicted);
    drop(second);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_stops_serving_frees_room_for_the_one_waiting() {
    let table = Table::with_least_idle(
        1,
        Duration::from_secs(60),
        Duration::ZERO,
        ConnMetrics::http(&Metrics::new(), "webhook"),
    );
    let serving = table.admit().unwrap();
    let request = serving.stream_opened(true);
    assert_eq!(
        table.try_admit().err(),
        Some(None),
        "every connection is serving"
    );
    let waiting = {
        let table = table.clone();
        tokio::spawn(async move { table.freed().await })
    };
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    drop(request);
    waiting.await.unwrap();
    assert!(
        table.try_admit().is_ok(),
        "the answered connection makes room"
    );
    assert_eq!(serving.closing().await, Close::Evicted);
}
