//! Unit tests of the coalescer's lanes and rate: urgent calls overtake, lower lanes
//! get their floor, each lane has its own bound, and envelopes leave within the rate.

use std::{sync::Mutex, time::Duration};

use super::*;
use crate::core::domain::ClientId;

/// Records each envelope: when it left and the lane of each of its calls, after `hold`.
struct Record {
    hold: Duration,
    envelopes: Mutex<Vec<(Instant, Vec<Priority>, usize)>>,
}

impl Runner for Record {
    type Answer = ();
    type Held = ();

    async fn run(&self, calls: Vec<Call<Self>>, _slot: Slot<Self>) {
        let lanes = calls.iter().map(|c| c.lane).collect();
        let ops = calls.iter().map(|c| c.ops.len()).sum();
        self.envelopes
            .lock()
            .unwrap()
            .push((Instant::now(), lanes, ops));
        tokio::time::sleep(self.hold).await;
        for call in calls {
            let _ = call.reply.send(Ok(vec![(); call.ops.len()]));
        }
    }
}

fn record(hold: Duration) -> Arc<Record> {
    Arc::new(Record {
        hold,
        envelopes: Mutex::new(Vec::new()),
    })
}

fn ops(n: usize) -> Vec<Operation> {
    (0..n)
        .map(|i| Operation::GetMessageStatus(ClientId::new(i as u64 + 1).unwrap()))
        .collect()
}

fn limits(connections: usize, batch_max: usize, rate: Option<u32>) -> Limits {
    Limits {
        connections,
        batch_max,
        queue_max: 10_000,
        rate,
        ..Limits::default()
    }
}

/// Queues one call of `n` operations in `lane` (in the background) and lets it reach
/// the queue.
async fn queue(
    c: &Arc<Coalescer<Record>>,
    lane: Priority,
    n: usize,
) -> tokio::task::JoinHandle<CallReply<()>> {
    let c = c.clone();
    let call = tokio::spawn(async move { c.call_kept(ops(n), lane, None, None, None, None).await });
    tokio::task::yield_now().await;
    call
}

#[tokio::test(start_paused = true)]
async fn an_urgent_call_leaves_before_the_bulk_calls_queued_ahead_of_it() {
    let runner = record(Duration::from_millis(50));
    let c = Coalescer::new(runner.clone(), limits(1, 1, None), Metrics::new().unwrap());
    let mut calls = Vec::new();
    for _ in 0..4 {
        calls.push(queue(&c, Priority::Bulk, 1).await);
    }
    calls.push(queue(&c, Priority::Normal, 1).await);
    calls.push(queue(&c, Priority::Urgent, 1).await);
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let order: Vec<Priority> = runner
        .envelopes
        .lock()
        .unwrap()
        .iter()
        .map(|(_, lanes, _)| lanes[0])
        .collect();
    use Priority::*;
    // The first bulk call was alone and left at once; then urgent, normal, the rest.
    assert_eq!(order, vec![Bulk, Urgent, Normal, Bulk, Bulk, Bulk]);
}

#[tokio::test(start_paused = true)]
async fn a_lower_lane_gets_its_floor_while_a_higher_one_is_busy() {
    let runner = record(Duration::from_millis(10));
    let c = Coalescer::new(runner.clone(), limits(1, 1, None), Metrics::new().unwrap());
    let mut calls = Vec::new();
    calls.push(queue(&c, Priority::Urgent, 1).await);
    for _ in 0..30 {
        calls.push(queue(&c, Priority::Bulk, 1).await);
    }
    for _ in 0..100 {
        calls.push(queue(&c, Priority::Urgent, 1).await);
    }
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let envelopes = runner.envelopes.lock().unwrap();
    // While urgent calls were waiting (the first 101 envelopes would all be urgent
    // without a floor), bulk still got about a tenth.
    let bulk_early = envelopes[..101]
        .iter()
        .filter(|(_, lanes, _)| lanes[0] == Priority::Bulk)
        .count();
    assert!((9..=12).contains(&bulk_early), "{bulk_early} bulk of 101");
}

#[tokio::test]
async fn each_lane_has_its_own_bound_and_a_refusal_says_when_the_lane_will_have_left() {
    let runner = record(Duration::from_secs(3600));
    let c = Coalescer::new(
        runner.clone(),
        Limits {
            queue_max: 5,
            ..limits(1, 1, Some(10))
        },
        Metrics::new().unwrap(),
    );
    let mut held = Vec::new();
    // One leaves and holds the only slot; five fill the bulk lane.
    for _ in 0..6 {
        held.push(queue(&c, Priority::Bulk, 1).await);
    }
    let refused = c
        .call_kept(ops(1), Priority::Bulk, None, None, None, None)
        .await;
    let Err(Error::Overloaded { retry_after }) = refused else {
        panic!("the bulk lane is full: {refused:?}");
    };
    // Five operations ahead at ten a second.
    assert_eq!(retry_after, Duration::from_millis(500));
    assert_eq!(
        c.metrics
            .dispatch
            .refused
            .with_label_values(&["bulk", "queue_full"])
            .get(),
        1
    );
    // The urgent lane has room of its own.
    held.push(queue(&c, Priority::Urgent, 1).await);
    let depth = |lane: &str| {
        c.metrics
            .dispatch
            .lane_queue_depth
            .with_label_values(&[lane])
            .get()
    };
    assert_eq!((depth("urgent"), depth("bulk")), (1, 5));
    for call in held {
        call.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn envelopes_leave_within_the_rate_in_tenths_of_a_second() {
    let runner = record(Duration::from_millis(5));
    let c = Coalescer::new(
        runner.clone(),
        limits(8, 50, Some(20)),
        Metrics::new().unwrap(),
    );
    let started = Instant::now();
    let mut calls = Vec::new();
    for _ in 0..60 {
        calls.push(queue(&c, Priority::Bulk, 1).await);
    }
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let envelopes = runner.envelopes.lock().unwrap();
    let took = started.elapsed();
    // 60 at 20 a second, paced from the start: about three seconds.
    assert!(
        took >= Duration::from_millis(2800) && took <= Duration::from_millis(3300),
        "{took:?}"
    );
    for (at, _, _) in envelopes.iter() {
        let in_second: usize = envelopes
            .iter()
            .filter(|(t, _, _)| *t >= *at && *t < *at + Duration::from_secs(1))
            .map(|(_, _, n)| n)
            .sum();
        assert!(in_second <= 20, "{in_second} in one second");
    }
    // A tenth or two of a second's worth at a time, not one by one.
    assert!(envelopes.iter().all(|(_, _, n)| *n <= 4), "{envelopes:?}");
    assert!(envelopes.len() <= 35, "{} envelopes", envelopes.len());
}

#[tokio::test(start_paused = true)]
async fn an_urgent_call_under_a_full_rate_leaves_within_a_tenth_of_a_second() {
    let runner = record(Duration::from_millis(5));
    let c = Coalescer::new(
        runner.clone(),
        limits(8, 50, Some(20)),
        Metrics::new().unwrap(),
    );
    let mut calls = Vec::new();
    for _ in 0..60 {
        calls.push(queue(&c, Priority::Bulk, 1).await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked = Instant::now();
    queue(&c, Priority::Urgent, 1).await.await.unwrap().unwrap();
    let waited = asked.elapsed();
    assert!(waited <= Duration::from_millis(120), "{waited:?}");
    for call in calls {
        call.await.unwrap().unwrap();
    }
}
