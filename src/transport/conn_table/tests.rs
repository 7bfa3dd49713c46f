//! The connection table: who makes room at the cap, and when; what its streams hold.

use super::by_message::MESSAGE_BLOCK;
use super::*;
use crate::base::metrics::Metrics;
use crate::core::held::HeldKind;

/// A gRPC port's table whose connections cost nothing: these tests count streams.
fn table(
    max: usize,
    idle_timeout: Duration,
    budget: usize,
    caller_share: f64,
    metrics: ConnMetrics,
) -> Arc<Table> {
    Table::build(
        max,
        idle_timeout,
        Duration::ZERO,
        (budget, 0),
        caller_share,
        metrics,
    )
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_a_connection_that_never_made_a_call_goes_before_a_callers_idle_one() {
    let table = table(
        2,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let caller = table.caller("billing", None);
    let used = table.admit().unwrap();
    drop({
        let stream = used.stream_opened(true, false, 0, 0).unwrap();
        stream.charge(caller).unwrap();
        stream
    });
    // Idle since now, as `used` is: the one that never carried a call goes.
    tokio::time::advance(Duration::from_secs(1)).await;
    let silent = table.admit().unwrap();
    let _third = table.admit().unwrap();
    assert_eq!(silent.closing().await, Close::Evicted);
    assert!(used.closed_for().is_none(), "the caller's connection stays");
}

#[tokio::test(start_paused = true)]
async fn connections_count_their_cost_and_at_the_budget_the_idle_one_makes_room() {
    let metrics = Metrics::new().unwrap();
    let table = Table::new(
        100,
        Duration::from_secs(60),
        4 * CONN_COST + 2 * STREAM_COST,
        0.35,
        ConnMetrics::grpc(&metrics),
    );
    let idle = table.admit().unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    let busy = table.admit().unwrap();
    let caller = table.caller("busy", None);
    let stream = busy.stream_opened(true, false, 0, 0).unwrap();
    stream.charge(caller.clone()).unwrap();
    assert_eq!(table.held(), 2 * CONN_COST + STREAM_COST);
    assert_eq!(
        caller.held(),
        CONN_COST + STREAM_COST,
        "a connection's cost is its first caller's"
    );
    // A second connection's cost does not fit the caller's share: refused.
    let second = table.admit().unwrap();
    let other = second.stream_opened(true, false, 0, 0).unwrap();
    assert_eq!(other.charge(caller.clone()), Err(Refused::CallerShare));
    drop(other);
    let _third = table.admit().unwrap();
    assert_eq!(table.held(), 4 * CONN_COST + STREAM_COST);
    // At the budget, under the cap: the connection idle longest makes room.
    let _fourth = table.admit().expect("admitted at the budget");
    assert_eq!(idle.closing().await, Close::Evicted);
    assert_eq!(table.held(), 5 * CONN_COST + STREAM_COST);
    idle.finished();
    assert_eq!(table.held(), 4 * CONN_COST + STREAM_COST);
    drop(stream);
    busy.finished();
    assert_eq!(caller.held(), 0, "the connection's cost goes with it");
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_the_longest_idle_connection_makes_room() {
    let table = table(
        2,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let first = table.admit().unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    let second = table.admit().unwrap();
    let _busy = first.stream_opened(true, false, 0, 0).unwrap();
    // `first` has a stream open: `second` is the one to go.
    let third = table.admit().unwrap();
    assert_eq!(second.closing().await, Close::Evicted);
    // Every connection not closing has a stream open: refused.
    let _busy_third = third.stream_opened(true, false, 0, 0).unwrap();
    assert!(table.admit().is_none());
    second.finished();
    assert!(
        table.admit().is_none(),
        "still full: first and third are busy"
    );
}

#[tokio::test(start_paused = true)]
async fn streams_needing_no_token_do_not_keep_a_connection_at_the_cap() {
    let table = table(
        2,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let watcher = table.admit().unwrap();
    let _watch = watcher.stream_opened(false, false, 0, 0).unwrap();
    let caller = table.admit().unwrap();
    let _call = caller.stream_opened(true, false, 0, 0).unwrap();
    let newcomer = table.admit().expect("the health watcher makes room");
    assert_eq!(watcher.closing().await, Close::Evicted);
    drop(newcomer);
}

#[tokio::test(start_paused = true)]
async fn a_connection_is_idle_from_its_last_stream_on() {
    let table = table(
        8,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let conn = table.admit().unwrap();
    let start = Instant::now();
    assert_eq!(conn.idle_deadline(), Some(start + Duration::from_secs(60)));
    let stream = conn.stream_opened(true, false, 0, 0).unwrap();
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
    let table = table(
        8,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
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
async fn a_connection_whose_streams_are_all_stalled_makes_room_at_the_cap() {
    let table = table(
        2,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let reading = table.admit().unwrap();
    let _call = reading.stream_opened(true, false, 0, 0).unwrap();
    let stalled = table.admit().unwrap();
    let stream = stalled.stream_opened(true, false, 0, 0).unwrap();
    let busy = stalled.stream_opened(true, false, 0, 0).unwrap();
    let mark = stream.stalled();
    assert!(table.admit().is_none(), "one stream still reads");
    let _mark = busy.stalled();
    let newcomer = table.admit().expect("every stream of `stalled` is stalled");
    assert_eq!(stalled.closing().await, Close::Evicted);
    drop((mark, newcomer));
}

#[tokio::test(start_paused = true)]
async fn a_connection_has_few_open_path_streams_but_any_number_of_checks_and_its_own() {
    let table = table(
        8,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let conn = table.admit().unwrap();
    let open: Vec<_> = (0..OPEN_PATH_STREAMS)
        .map(|_| conn.stream_opened(false, false, 0, 0).unwrap())
        .collect();
    assert_eq!(
        conn.stream_opened(false, false, 0, 0).err(),
        Some(Refused::OpenPathStreams)
    );
    let own: Vec<_> = (0..100)
        .map(|_| conn.stream_opened(true, false, 0, 0).unwrap())
        .collect();
    let checks: Vec<_> = (0..OPEN_PATH_STREAMS * 2)
        .map(|_| conn.stream_opened(false, true, 0, 0).unwrap())
        .collect();
    drop(open);
    assert!(conn.stream_opened(false, false, 0, 0).is_ok());
    drop(checks);
    drop(own);
}

#[tokio::test(start_paused = true)]
async fn at_the_memory_budget_streams_are_refused_and_the_heaviest_connection_goes() {
    let metrics = Metrics::new().unwrap();
    let budget = 10 * STREAM_COST;
    let table = table(
        8,
        Duration::from_secs(60),
        budget,
        1.0,
        ConnMetrics::grpc(&metrics),
    );
    let light = table.admit().unwrap();
    let heavy = table.admit().unwrap();
    let _light_stream = light.stream_opened(true, false, 100, 0).unwrap();
    let heavy_stream = heavy.stream_opened(true, false, 100, 0).unwrap();
    heavy_stream.hold(HeldKind::Answer, 6 * STREAM_COST);
    assert_eq!(table.held(), 8 * STREAM_COST + 200);
    assert_eq!(heavy.held(), 7 * STREAM_COST + 100);
    let _second = light.stream_opened(true, false, 0, 0).unwrap();
    assert_eq!(
        light.stream_opened(true, false, 0, 0).err(),
        Some(Refused::MemoryBudget)
    );
    let _probe = light
        .stream_opened(false, true, 0, 0)
        .expect("a health check is served at the budget");
    assert_eq!(
        light.stream_opened(true, false, 0, 0).err(),
        Some(Refused::MemoryBudget),
        "refused while the heavy connection lets go"
    );
    assert_eq!(
        light.closed_for(),
        None,
        "one connection goes, not every one"
    );
    heavy.aborted().await;
    assert_eq!(heavy.closed_for(), Some(Close::MemoryBudget));
    assert_eq!(light.closed_for(), None);
    // Once the heavy connection's streams are gone, there is room again.
    drop(heavy_stream);
    heavy.finished();
    assert_eq!(table.held(), 3 * STREAM_COST + 100);
    assert!(light.stream_opened(true, false, 0, 0).is_ok());
    assert_eq!(
        metrics
            .ports
            .grpc_connections_closed
            .with_label_values(&["memory_budget"])
            .get(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_connection_idle_less_than_the_least_idle_time_does_not_make_room_yet() {
    let least = Duration::from_millis(100);
    let table = Table::with_least_idle(
        1,
        Duration::from_secs(60),
        least,
        ConnMetrics::http(&Metrics::new().unwrap(), "admin"),
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
        ConnMetrics::http(&Metrics::new().unwrap(), "webhook"),
    );
    let serving = table.admit().unwrap();
    let request = serving.stream_opened(true, false, 0, 0).unwrap();
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

#[tokio::test(start_paused = true)]
async fn a_caller_at_its_share_is_refused_while_another_is_served() {
    let metrics = Metrics::new().unwrap();
    let table = table(
        8,
        Duration::from_secs(60),
        100 * STREAM_COST,
        0.25,
        ConnMetrics::grpc(&metrics),
    );
    let greedy = table.caller("greedy", None);
    let modest = table.caller("modest", None);
    assert_eq!(greedy.share(), 25 * STREAM_COST);
    let conn = table.admit().unwrap();
    let mut kept = Vec::new();
    for _ in 0..25 {
        let stream = conn.stream_opened(true, false, 0, 0).unwrap();
        stream.charge(greedy.clone()).unwrap();
        kept.push(stream);
    }
    assert_eq!(greedy.held(), 25 * STREAM_COST);
    let over = conn.stream_opened(true, false, 0, 0).unwrap();
    assert_eq!(over.charge(greedy.clone()), Err(Refused::CallerShare));
    assert!(
        !kept[0].has_room(1),
        "no window for the greedy caller's bodies"
    );
    // Another caller on the same port is served, and has room.
    let other = table
        .admit()
        .unwrap()
        .stream_opened(true, false, 0, 0)
        .unwrap();
    other.charge(modest.clone()).unwrap();
    assert!(other.has_room(1));
    assert_eq!(
        metrics
            .ports
            .grpc_memory
            .refused_by_caller
            .with_label_values(&["greedy"])
            .get(),
        1
    );
    // A caller's own share, from its entry.
    assert_eq!(table.caller("greedy", Some(0.5)).share(), 50 * STREAM_COST);
    let retry = conn.stream_opened(true, false, 0, 0).unwrap();
    assert_eq!(retry.charge(greedy.clone()), Ok(()));
    // A body waiting for room learns when streams let go of bytes.
    let room = kept[0].room();
    drop(kept.pop());
    tokio::time::timeout(Duration::from_secs(1), room)
        .await
        .expect("released bytes wake a waiting body");
    drop(kept);
    drop((over, retry));
    assert_eq!(greedy.held(), 0);
}

#[tokio::test(start_paused = true)]
async fn at_the_budget_the_caller_holding_the_most_gives_way_first() {
    let table = table(
        8,
        Duration::from_secs(60),
        12 * STREAM_COST,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let (many, one) = (table.caller("many", None), table.caller("one", None));
    let first = table.admit().unwrap();
    let second = table.admit().unwrap();
    let single = table.admit().unwrap();
    let mut kept = Vec::new();
    for (conn, caller, held) in [(&first, &many, 2), (&second, &many, 3), (&single, &one, 4)] {
        let stream = conn.stream_opened(true, false, 0, 0).unwrap();
        stream.charge(caller.clone()).unwrap();
        stream.hold(HeldKind::Replay, held * STREAM_COST);
        kept.push(stream);
    }
    // `single` holds the most of any one connection; `many` holds the most of any caller.
    // Whole blocks: counted exactly.
    assert_eq!(many.held(), 7 * STREAM_COST);
    assert_eq!(one.held(), 5 * STREAM_COST);
    assert_eq!(
        single.stream_opened(true, false, 0, 0).err(),
        Some(Refused::MemoryBudget)
    );
    second.aborted().await;
    assert_eq!(second.closed_for(), Some(Close::MemoryBudget));
    assert_eq!(single.closed_for(), None);
    assert_eq!(first.closed_for(), None);
}

#[test]
fn messages_are_counted_on_the_port_in_blocks_never_less_than_they_hold() {
    let table = table(
        8,
        Duration::from_secs(60),
        usize::MAX,
        1.0,
        ConnMetrics::grpc(&Metrics::new().unwrap()),
    );
    let conn = table.admit().unwrap();
    let stream = conn.stream_opened(true, false, 0, 0).unwrap();
    let caller = table.caller("events", None);
    stream.charge(caller.clone()).unwrap();
    let fixed = table.held();
    let counted = || table.held() - fixed;
    // Events of 300 bytes taken and let go in turn, as a live event stream does.
    let mut used = 0;
    for round in 0..2_000 {
        let (take, free) = if round % 3 == 2 { (0, 2) } else { (1, 0) };
        for _ in 0..take {
            stream.hold(HeldKind::Replay, 300);
            used += 300;
        }
        for _ in 0..free {
            stream.release(HeldKind::Replay, 300);
            used -= 300;
        }
        assert!(
            used <= counted() && counted() < used + 2 * MESSAGE_BLOCK,
            "round {round}: {used} held, {} counted",
            counted()
        );
        assert_eq!(caller.held(), table.held(), "the caller is counted alike");
    }
    drop(stream);
    conn.finished();
    assert_eq!(table.held(), 0, "nothing stays counted");
    assert_eq!(caller.held(), 0);
}
