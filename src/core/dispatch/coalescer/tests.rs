//! Unit tests of the coalescer: envelopes, bounds, deadlines, callers that leave.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use super::*;
use crate::core::domain::ClientId;

/// Answers every operation with the size of its envelope, after `hold`.
struct Echo {
    hold: Duration,
    running: AtomicUsize,
    most: AtomicUsize,
    envelopes: Mutex<Vec<usize>>,
}

impl Runner for Echo {
    type Answer = usize;
    type Held = ();

    async fn run(&self, calls: Vec<Call<Self>>, _slot: Slot<Self>) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let size: usize = calls.iter().map(|c| c.ops.len()).sum();
        self.envelopes.lock().unwrap().push(size);
        tokio::time::sleep(self.hold).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        for call in calls {
            let _ = call.reply.send(Ok(vec![size; call.ops.len()]));
        }
    }
}

fn echo(hold: Duration) -> Arc<Echo> {
    Arc::new(echo_of(hold))
}

fn echo_of(hold: Duration) -> Echo {
    Echo {
        hold,
        running: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        envelopes: Mutex::new(Vec::new()),
    }
}

fn ops(n: usize) -> Vec<Operation> {
    (0..n)
        .map(|i| Operation::GetMessageStatus(ClientId::new(i as u64 + 1).unwrap()))
        .collect()
}

fn limits(connections: usize, batch_max: usize, queue_max: usize) -> Limits {
    Limits {
        connections,
        batch_max,
        queue_max,
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_lone_call_goes_at_once_in_its_own_envelope() {
    let runner = echo(Duration::ZERO);
    let c = Coalescer::new(runner.clone(), Limits::default(), Metrics::new().unwrap());
    assert_eq!(c.call(ops(1), None, None).await.unwrap(), vec![1]);
    assert_eq!(*runner.envelopes.lock().unwrap(), vec![1]);
}

#[tokio::test]
async fn calls_queued_while_the_slots_are_busy_share_envelopes_within_bounds() {
    let runner = echo(Duration::from_millis(50));
    let c = Coalescer::new(runner.clone(), limits(2, 10, 1000), Metrics::new().unwrap());
    let calls: Vec<_> = (0..60)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.call(ops(1), None, None).await })
        })
        .collect();
    for call in calls {
        let sizes = call.await.unwrap().unwrap();
        assert!(sizes[0] >= 1 && sizes[0] <= 10, "{sizes:?}");
    }
    let envelopes = runner.envelopes.lock().unwrap().clone();
    assert_eq!(envelopes.iter().sum::<usize>(), 60);
    assert!(envelopes.len() < 60, "nothing coalesced: {envelopes:?}");
    assert!(runner.most.load(Ordering::SeqCst) <= 2);
}

#[tokio::test]
async fn a_call_keeps_its_operations_together() {
    let runner = echo(Duration::from_millis(20));
    let c = Coalescer::new(runner.clone(), limits(1, 5, 1000), Metrics::new().unwrap());
    let first = tokio::spawn({
        let c = c.clone();
        async move { c.call(ops(1), None, None).await }
    });
    tokio::task::yield_now().await;
    let (a, b) = tokio::join!(c.call(ops(3), None, None), c.call(ops(3), None, None));
    first.await.unwrap().unwrap();
    assert_eq!(a.unwrap(), vec![3; 3]);
    assert_eq!(b.unwrap(), vec![3; 3]);
}

#[tokio::test]
async fn a_full_queue_refuses_with_retry_advice() {
    let runner = echo(Duration::from_millis(200));
    let metrics = Metrics::new().unwrap();
    let c = Coalescer::new(runner, limits(1, 1, 2), metrics.clone());
    let busy: Vec<_> = (0..3)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.call(ops(1), None, None).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let refused = c.call(ops(1), None, None).await;
    assert!(
        matches!(refused, Err(Error::Overloaded { .. })),
        "{refused:?}"
    );
    assert_eq!(metrics.dispatch.queue_rejected.get(), 1);
    for call in busy {
        call.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_call_whose_deadline_passes_in_the_queue_is_never_run() {
    let runner = echo(Duration::from_millis(200));
    let c = Coalescer::new(runner.clone(), limits(1, 1, 100), Metrics::new().unwrap());
    let busy = tokio::spawn({
        let c = c.clone();
        async move { c.call(ops(1), None, None).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let deadline = Instant::now() + Duration::from_millis(30);
    let late = c.call(ops(1), Some(deadline), None).await;
    assert!(matches!(
        late,
        Err(Error::DeadlineExceeded {
            outcome_unknown: false
        })
    ));
    busy.await.unwrap().unwrap();
    assert_eq!(*runner.envelopes.lock().unwrap(), vec![1]);
}

#[tokio::test]
async fn a_caller_that_leaves_while_queued_is_never_run() {
    let runner = echo(Duration::from_millis(100));
    let metrics = Metrics::new().unwrap();
    let c = Coalescer::new(runner.clone(), limits(1, 1, 100), metrics.clone());
    let busy = tokio::spawn({
        let c = c.clone();
        async move { c.call(ops(1), None, None).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let gone = tokio::time::timeout(Duration::from_millis(20), c.call(ops(2), None, None)).await;
    assert!(gone.is_err(), "the caller gave up");
    assert_eq!(
        metrics.dispatch.queue_depth.get(),
        0,
        "its call left the queue"
    );
    busy.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(*runner.envelopes.lock().unwrap(), vec![1]);
}

/// Prepares every call (holding its number of operations), after `hold`; answers in
/// preparation the calls whose first id is 99; runs envelopes like `Echo`.
struct Preparing {
    hold: Duration,
    /// Groups prepared at once; a group whose first id is 1 takes four times `hold`.
    concurrency: usize,
    groups: Mutex<Vec<usize>>,
    released: Mutex<Vec<usize>>,
    /// How long a prepared call may wait for a slot.
    held_for: Option<Duration>,
    /// Operations of the calls sent round again.
    expired: Mutex<Vec<usize>>,
    echo: Echo,
}

impl Runner for Preparing {
    type Answer = usize;
    type Held = usize;

    fn preparations(&self) -> usize {
        self.concurrency
    }

    fn prepares(&self, _call: &Call<Self>) -> bool {
        true
    }

    async fn prepare(&self, calls: Vec<Call<Self>>) -> Vec<Call<Self>> {
        self.groups.lock().unwrap().push(calls.len());
        let slow = calls[0].ops[0] == Operation::GetMessageStatus(ClientId::new(1).unwrap());
        tokio::time::sleep(if slow { self.hold * 4 } else { self.hold }).await;
        let mut ready = Vec::new();
        for mut call in calls {
            if call.ops[0] == Operation::GetMessageStatus(ClientId::new(99).unwrap()) {
                let _ = call.reply.send(Ok(vec![0; call.ops.len()]));
            } else {
                call.held = call.ops.len();
                ready.push(call);
            }
        }
        ready
    }

    fn release(&self, held: Vec<usize>) {
        self.released.lock().unwrap().extend(held);
    }

    fn held_for(&self) -> Option<Duration> {
        self.held_for
    }

    fn expire(&self, calls: Vec<Call<Self>>) {
        for call in calls {
            self.expired.lock().unwrap().push(call.held);
            let _ = call.reply.send(Ok(vec![usize::MAX; call.ops.len()]));
        }
    }

    async fn run(&self, calls: Vec<Call<Self>>, _slot: Slot<Self>) {
        let size: usize = calls.iter().map(|c| c.ops.len()).sum();
        self.echo.envelopes.lock().unwrap().push(size);
        tokio::time::sleep(self.echo.hold).await;
        for call in calls {
            assert_eq!(call.held, call.ops.len(), "ran unprepared");
            let _ = call.reply.send(Ok(vec![size; call.ops.len()]));
        }
    }
}

fn preparing(hold: Duration, run: Duration) -> Arc<Preparing> {
    Arc::new(Preparing {
        hold,
        concurrency: 1,
        groups: Mutex::new(Vec::new()),
        released: Mutex::new(Vec::new()),
        held_for: None,
        expired: Mutex::new(Vec::new()),
        echo: echo_of(run),
    })
}

#[tokio::test]
async fn calls_queued_while_a_group_is_prepared_share_the_next_group() {
    let runner = preparing(Duration::from_millis(40), Duration::ZERO);
    let c = Coalescer::new(runner.clone(), limits(8, 50, 1000), Metrics::new().unwrap());
    let first = tokio::spawn({
        let c = c.clone();
        async move { c.call(ops(1), None, None).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let rest: Vec<_> = (0..20)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.call(ops(1), None, None).await })
        })
        .collect();
    first.await.unwrap().unwrap();
    for call in rest {
        call.await.unwrap().unwrap();
    }
    // A lone call is prepared at once; the twenty that came during its write share one.
    assert_eq!(*runner.groups.lock().unwrap(), vec![1, 20]);
    let envelopes = runner.echo.envelopes.lock().unwrap().clone();
    assert_eq!(envelopes.iter().sum::<usize>(), 21);
}

#[tokio::test]
async fn a_call_answered_in_preparation_never_takes_a_slot() {
    let runner = preparing(Duration::ZERO, Duration::ZERO);
    let metrics = Metrics::new().unwrap();
    let c = Coalescer::new(runner.clone(), Limits::default(), metrics.clone());
    let answered = c
        .call(
            vec![Operation::GetMessageStatus(ClientId::new(99).unwrap())],
            None,
            None,
        )
        .await;
    assert_eq!(answered.unwrap(), vec![0]);
    assert!(runner.echo.envelopes.lock().unwrap().is_empty());
    assert_eq!(
        metrics.dispatch.queue_depth.get(),
        0,
        "nothing left counted as queued"
    );
}

#[tokio::test]
async fn a_prepared_call_that_leaves_the_queue_gives_back_what_it_held() {
    let runner = preparing(Duration::ZERO, Duration::from_millis(150));
    let metrics = Metrics::new().unwrap();
    let c = Coalescer::new(runner.clone(), limits(1, 1, 100), metrics.clone());
    let busy = tokio::spawn({
        let c = c.clone();
        async move { c.call(ops(1), None, None).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let gone = tokio::time::timeout(Duration::from_millis(40), c.call(ops(2), None, None)).await;
    assert!(gone.is_err(), "the caller gave up");
    assert_eq!(
        *runner.released.lock().unwrap(),
        vec![2],
        "its claims went back"
    );
    let deadline = Instant::now() + Duration::from_millis(40);
    let late = c.call(ops(3), Some(deadline), None).await;
    assert!(matches!(
        late,
        Err(Error::DeadlineExceeded {
            outcome_unknown: false
        })
    ));
    assert_eq!(*runner.released.lock().unwrap(), vec![2, 3]);
    busy.await.unwrap().unwrap();
    assert_eq!(*runner.echo.envelopes.lock().unwrap(), vec![1]);
    assert_eq!(metrics.dispatch.queue_depth.get(), 0);
}

#[tokio::test]
async fn groups_prepared_at_once_may_end_out_of_order_and_their_calls_still_leave_cleanly() {
    let mut runner = preparing(Duration::from_millis(15), Duration::from_millis(300));
    Arc::get_mut(&mut runner).unwrap().concurrency = 2;
    let metrics = Metrics::new().unwrap();
    let c = Coalescer::new(runner.clone(), limits(1, 4, 100), metrics.clone());
    // The slow group (id 1) starts first; the fast one (id 2) starts beside it and
    // ends first, taking the only slot.
    let slow = tokio::spawn({
        let c = c.clone();
        async move { tokio::time::timeout(Duration::from_millis(120), c.call(ops(1), None, None)).await }
    });
    tokio::time::sleep(Duration::from_millis(2)).await;
    let fast = tokio::spawn({
        let c = c.clone();
        async move {
            c.call(
                vec![Operation::GetMessageStatus(ClientId::new(2).unwrap())],
                None,
                None,
            )
            .await
        }
    });
    // The slow call queued behind the fast one's envelope; its caller leaves.
    assert!(slow.await.unwrap().is_err(), "the slow caller gave up");
    assert_eq!(
        *runner.groups.lock().unwrap(),
        vec![1, 1],
        "two groups at once"
    );
    assert_eq!(
        *runner.released.lock().unwrap(),
        vec![1],
        "its claims went back"
    );
    assert_eq!(fast.await.unwrap().unwrap(), vec![1]);
    assert_eq!(*runner.echo.envelopes.lock().unwrap(), vec![1]);
    assert_eq!(metrics.dispatch.queue_depth.get(), 0);
}

#[tokio::test]
async fn calls_are_prepared_one_round_of_requests_ahead_at_most() {
    let runner = preparing(Duration::ZERO, Duration::from_millis(20));
    let c = Coalescer::new(runner.clone(), limits(1, 1, 100), Metrics::new().unwrap());
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.call(ops(1), None, None).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    // One request of one operation at a time: each call is claimed when a slot is
    // about to free, not all five at once.
    assert_eq!(*runner.groups.lock().unwrap(), vec![1; 5]);
}

#[tokio::test]
async fn a_prepared_call_held_past_its_time_is_sent_round_again_unsent() {
    let mut runner = preparing(Duration::ZERO, Duration::from_millis(150));
    Arc::get_mut(&mut runner).unwrap().held_for = Some(Duration::from_millis(50));
    let c = Coalescer::new(runner.clone(), limits(1, 1, 100), Metrics::new().unwrap());
    let busy = tokio::spawn({
        let c = c.clone();
        async move { c.call(ops(1), None, None).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Claimed at once (one round ahead), then held behind the busy slot for 140 ms.
    let held = c.call(ops(2), None, None).await;
    assert_eq!(held.unwrap(), vec![usize::MAX; 2], "sent round again");
    assert_eq!(*runner.expired.lock().unwrap(), vec![2]);
    busy.await.unwrap().unwrap();
    assert_eq!(
        *runner.echo.envelopes.lock().unwrap(),
        vec![1],
        "never sent"
    );
}
