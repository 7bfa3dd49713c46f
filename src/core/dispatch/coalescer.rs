//! Coalescing: calls queue, and while fewer than `connections` gateway requests are
//! in flight, the queued calls go out together in one envelope of at most
//! `batch_max` operations. There is no fixed delay: an idle dispatcher sends a lone
//! call at once, and under load every envelope takes what queued while the others
//! were in flight. A call's operations always share one envelope; the queue is
//! bounded in operations, and a call that would overflow it is refused.
//!
//! A caller is answered at its deadline whatever its envelope is doing: a gateway
//! request that has left is never cut for one caller (the gateway may carry it out
//! anyway), so the envelope runs on and records the outcome for the caller's retry.
//! Whether the request had left is decided once, atomically, between the caller giving
//! up and the envelope sending (`Phase`).
//!
//! Before a call waits for a slot, the runner may prepare it (claim its ids in the
//! store). Preparing is a group commit apart from the slots: one group at a time takes
//! every call queued to be prepared, from any number of callers, so under load the store
//! sees one write for many calls while the slots only wait for the gateway; a lone call
//! on an idle msgw is prepared at once.
//!
//! Calls queue in priority lanes (`lanes.rs`): envelopes and preparations are filled
//! from the lanes in order, urgent first, with a floor for the lower lanes. With a
//! contracted rate (`MSGW_UPSTREAM_RATE`), an envelope leaves only with the rate's
//! grant for its operations (`shaping.rs`).

use std::{
    future::Future,
    sync::{Arc, Mutex, MutexGuard, atomic::AtomicU8},
    time::Duration,
};

use tokio::{sync::oneshot, time::Instant};

use crate::base::metrics::Metrics;
use crate::core::dispatch::pace::Pace;
use crate::core::domain::{CallerName, Error, Operation, Priority, UnavailableCause};

/// What an envelope runner answers a call: one answer per operation, or an error of
/// the call as a whole (the envelope it rode in failed).
pub type CallReply<A> = Result<Vec<A>, Error>;

/// Prepares calls (claims) and runs envelopes of them (the gateway request, outcomes),
/// answering every call.
pub trait Runner: Send + Sync + Sized + 'static {
    /// The answer to one operation.
    type Answer: Send + 'static;
    /// What a prepared call holds until its envelope runs or it is discarded.
    type Held: Default + Send + 'static;

    /// Groups prepared at once at most.
    fn preparations(&self) -> usize {
        1
    }

    /// Whether `call` is prepared before it waits for a slot.
    fn prepares(&self, _call: &Call<Self>) -> bool {
        false
    }

    /// Prepares a group of calls at once; answers those it settles itself and returns
    /// the rest, to wait for a slot. At most [`Runner::preparations`] groups at a time.
    fn prepare(&self, calls: Vec<Call<Self>>) -> impl Future<Output = Vec<Call<Self>>> + Send {
        async { calls }
    }

    /// Gives back what prepared calls held when they leave the queue unsent (their
    /// caller left, their deadline passed).
    fn release(&self, _held: Vec<Self::Held>) {}

    /// How long after its preparation began a prepared call may still be sent; `None`:
    /// any time.
    fn held_for(&self) -> Option<Duration> {
        None
    }

    /// Whether a prepared call is bound by [`Runner::held_for`] (it holds something that
    /// goes stale).
    fn expires(&self, _call: &Call<Self>) -> bool {
        true
    }

    /// Answers prepared calls that waited longer than [`Runner::held_for`]: what they
    /// hold is given back, and their caller is to call again.
    fn expire(&self, _calls: Vec<Call<Self>>) {}

    /// Runs `calls` as one envelope, holding `slot` until its gateway request is
    /// answered (then the next envelope may start while this one records outcomes).
    fn run(&self, calls: Vec<Call<Self>>, slot: Slot<Self>) -> impl Future<Output = ()> + Send;
}

/// The queue, the in-flight bound and the runner they feed.
pub struct Coalescer<R: Runner> {
    runner: Arc<R>,
    limits: Limits,
    metrics: Arc<Metrics>,
    /// The contracted rate, when one is set.
    pace: Option<Arc<Pace>>,
    /// The lanes' own metrics, looked up once.
    lanes: LaneMetrics,
    state: Mutex<State<R>>,
}

impl<R: Runner> std::fmt::Debug for Coalescer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

struct State<R: Runner> {
    /// Calls waiting to be prepared, by lane, in `seq` order in each.
    preparing: Lanes<R>,
    /// Groups being prepared.
    preparing_now: usize,
    /// Calls waiting for a slot, by lane, in `seq` order in each.
    queue: Lanes<R>,
    /// Operations of the groups being prepared.
    claiming_ops: usize,
    /// Operations of the calls in both queues and in the groups being prepared.
    queued_ops: usize,
    /// The same, by lane.
    lane_ops: [usize; Priority::LANES.len()],
    /// The lanes' depth as last published to their gauges (each set only when it
    /// changed: gauges are shared by every thread that queues).
    lane_ops_shown: [usize; Priority::LANES.len()],
    in_flight: usize,
    next_seq: u64,
    /// The rate's grants not used yet (see `shaping.rs`).
    rate: shaping::Credit,
}

/// What [`Coalescer::take`] took: an envelope, calls to discard, calls to expire.
type Taken<R> = (Vec<Call<R>>, Vec<Call<R>>, Vec<Call<R>>);

/// Calls one preparation takes at most.
const PREPARE_MAX_CALLS: usize = 1024;

impl<R: Runner> Coalescer<R> {
    /// A coalescer feeding `runner`, keeping the rate of `limits` (if any) itself.
    #[cfg(test)]
    pub fn new(runner: Arc<R>, limits: Limits, metrics: Arc<Metrics>) -> Arc<Self> {
        let pace = limits.rate_limit().map(|l| Arc::new(Pace::local(l)));
        Self::paced(runner, limits, metrics, pace)
    }

    /// A coalescer feeding `runner` whose envelopes leave under `pace` when set.
    pub fn paced(
        runner: Arc<R>,
        limits: Limits,
        metrics: Arc<Metrics>,
        pace: Option<Arc<Pace>>,
    ) -> Arc<Self> {
        let limits = Limits {
            connections: limits.connections.max(1),
            batch_max: limits.batch_max.max(1),
            queue_max: limits.queue_max.max(1),
            ..limits
        };
        metrics
            .dispatch
            .rate_limit
            .set(pace.as_ref().map_or(0, |p| i64::from(p.limit().per_second)));
        Arc::new(Self {
            runner,
            limits,
            lanes: LaneMetrics::of(&metrics),
            metrics,
            pace,
            state: Mutex::new(State {
                preparing: Lanes::new(limits.bulk_share),
                preparing_now: 0,
                queue: Lanes::new(limits.bulk_share),
                claiming_ops: 0,
                queued_ops: 0,
                lane_ops: [0; Priority::LANES.len()],
                lane_ops_shown: [0; Priority::LANES.len()],
                in_flight: 0,
                next_seq: 0,
                rate: shaping::Credit::default(),
            }),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    #[cfg(test)]
    /// Queues `ops` as one call and waits for their answers, at most until `deadline`.
    /// Then a call whose request has not left is given up unsent (`DEADLINE_EXCEEDED`,
    /// nothing happened); one whose request left gets `DEADLINE_EXCEEDED` with an
    /// unknown outcome when it changes state, and its envelope runs on.
    pub async fn call(
        self: &Arc<Self>,
        ops: Vec<Operation>,
        deadline: Option<Instant>,
        caller: Option<CallerName>,
    ) -> CallReply<R::Answer> {
        self.call_kept(ops, Priority::Normal, deadline, caller, None, None)
            .await
    }

    /// [`Coalescer::call`] in `lane`, of operations that may carry a secret (their
    /// claims kept as `confidential` says) or be a scheduled send leaving.
    pub async fn call_kept(
        self: &Arc<Self>,
        ops: Vec<Operation>,
        lane: Priority,
        deadline: Option<Instant>,
        caller: Option<CallerName>,
        confidential: Option<super::Confidential>,
        scheduled: Option<super::ScheduledKey>,
    ) -> CallReply<R::Answer> {
        if deadline.is_some_and(|d| d <= Instant::now()) {
            return Err(not_sent());
        }
        let (reply, mut answer) = oneshot::channel();
        let queued_at = Instant::now();
        let size = ops.len();
        let changes_state = ops.iter().any(Operation::changes_state);
        let phase = Arc::new(Phase(AtomicU8::new(Phase::WAITING)));
        let seq = {
            let mut state = self.lock();
            if state.lane_ops[lane.lane()] + size > self.limits.queue_max {
                let retry_after = self.retry_after(&state, lane);
                drop(state);
                self.metrics.dispatch.queue_rejected.inc();
                self.refused(lane, "queue_full");
                return Err(Error::Overloaded { retry_after });
            }
            let seq = state.next_seq;
            state.next_seq += 1;
            state.queued_ops += size;
            state.lane_ops[lane.lane()] += size;
            let call = Call {
                ops,
                lane,
                caller,
                deadline,
                confidential,
                scheduled,
                held: R::Held::default(),
                reply,
                seq,
                phase: phase.clone(),
                since: Instant::now(),
                claimed_at: None,
            };
            if self.runner.prepares(&call) {
                state.preparing.push_back(call);
            } else {
                state.queue.push_back(call);
            }
            self.depth(&mut state);
            seq
        };
        self.prepare_next();
        self.pump();
        // Taken out of the queue if this caller goes away before its envelope forms.
        let _leave = Leave {
            coalescer: self,
            seq,
            phase: &phase,
        };
        let Some(deadline) = deadline else {
            return answer.await.unwrap_or_else(|_| Err(dropped()));
        };
        tokio::select! {
            got = &mut answer => got.unwrap_or_else(|_| Err(dropped())),
            () = tokio::time::sleep_until(deadline) => {
                if self.remove(seq) || phase.abandon() {
                    self.refused(lane, "deadline");
                    // It waited at least this long: a call that never left still counts
                    // in its lane's wait (the alert on urgent waits must see it).
                    self.lanes.wait[lane.lane()].observe(queued_at.elapsed().as_secs_f64());
                    Err(not_sent())
                } else {
                    Err(Error::DeadlineExceeded { outcome_unknown: changes_state })
                }
            }
        }
    }

    /// Starts envelopes while the in-flight bound allows and calls are queued.
    fn pump(self: &Arc<Self>) {
        loop {
            let (envelope, discarded, expired) = {
                let mut state = self.lock();
                if state.in_flight >= self.limits.connections {
                    return;
                }
                // Linger while busy: with other requests in flight, an envelope that
                // would leave short waits for the group being claimed (one store
                // write), whose end starts it. An idle msgw never waits.
                if state.preparing_now > 0
                    && state.in_flight > 0
                    && state.queue.ops() < self.limits.batch_max
                {
                    return;
                }
                // Under a rate, what the rate granted; else a whole envelope.
                let Some(room) = self.room(&mut state) else {
                    return;
                };
                let (envelope, discarded, expired) = self.take(&mut state, room);
                self.spend(&mut state, &envelope);
                if !envelope.is_empty() {
                    state.in_flight += 1;
                    self.metrics
                        .dispatch
                        .requests_in_flight
                        .set(gauge(state.in_flight));
                }
                (envelope, discarded, expired)
            };
            self.discard(discarded);
            if !expired.is_empty() {
                self.runner.expire(expired);
            }
            // Room in the round ahead: claim what waits.
            self.prepare_next();
            if envelope.is_empty() {
                return;
            }
            let size = envelope.iter().map(|c| c.ops.len()).sum::<usize>();
            self.metrics
                .dispatch
                .envelope_operations
                .observe(size as f64);
            let this = self.clone();
            tokio::spawn(async move {
                // Dropped by the runner, or with this task even if the runner panics.
                let slot = Slot(this.clone());
                this.runner.run(envelope, slot).await;
            });
        }
    }

    /// Takes queued calls for one envelope: whole calls, from the lanes in order, up to
    /// `room` operations (without a rate, a larger call goes alone). Calls whose
    /// deadline passed are answered unsent; those and calls whose caller left come back
    /// second, to be discarded; prepared calls held longer than the runner allows come
    /// back third, unsent.
    fn take(&self, state: &mut State<R>, room: usize) -> Taken<R> {
        let now = Instant::now();
        let held_for = self.runner.held_for();
        let (mut envelope, mut discarded, mut expired) = (Vec::new(), Vec::new(), Vec::new());
        let mut size = 0;
        let mut sent = [0u64; Priority::LANES.len()];
        while let Some(next) = state.queue.front() {
            let n = next.ops.len();
            if (size > 0 || self.pace.is_some()) && size + n > room {
                break;
            }
            let Some(call) = state.queue.pop() else {
                break;
            };
            state.queued_ops -= n;
            state.lane_ops[call.lane.lane()] -= n;
            if !call.wanted() || call.deadline.is_some_and(|d| d <= now) {
                discarded.push(call);
                continue;
            }
            if let (Some(at), Some(held_for)) = (call.claimed_at, held_for)
                && now.duration_since(at) > held_for
                && self.runner.expires(&call)
            {
                expired.push(call);
                continue;
            }
            let waited = (now - call.since).as_secs_f64();
            self.metrics.dispatch.queue_seconds.observe(waited);
            let lane = call.lane.lane();
            self.lanes.wait[lane].observe(waited);
            sent[lane] += n as u64;
            size += n;
            envelope.push(call);
        }
        for (counter, sent) in self.lanes.sent.iter().zip(sent) {
            if sent > 0 {
                counter.inc_by(sent);
            }
        }
        self.depth(state);
        (envelope, discarded, expired)
    }

    /// Publishes the queues' depth, in all and by lane (the lanes that changed).
    fn depth(&self, state: &mut State<R>) {
        self.metrics
            .dispatch
            .queue_depth
            .set(gauge(state.queued_ops));
        for (lane, gauge_of) in self.lanes.depth.iter().enumerate() {
            let ops = state.lane_ops[lane];
            if state.lane_ops_shown[lane] != ops {
                state.lane_ops_shown[lane] = ops;
                gauge_of.set(gauge(ops));
            }
        }
    }

    /// Counts a call of `lane` refused for `reason`.
    fn refused(&self, lane: Priority, reason: &str) {
        self.metrics
            .dispatch
            .refused
            .with_label_values(&[lane.as_str(), reason])
            .inc();
    }

    /// Takes call `seq` out of the queues, discarding it; false when it is in neither.
    fn remove(&self, seq: u64) -> bool {
        let removed = {
            let mut state = self.lock();
            let call = match state.preparing.remove(seq) {
                Some(call) => Some(call),
                None => state.queue.remove(seq),
            };
            if let Some(call) = &call {
                state.queued_ops -= call.ops.len();
                state.lane_ops[call.lane.lane()] -= call.ops.len();
                self.depth(&mut state);
            }
            call
        };
        match removed {
            Some(call) => {
                self.discard(vec![call]);
                true
            }
            None => false,
        }
    }

    /// Answers calls that leave the queues unsent (nothing of them happened) and gives
    /// back what their preparation made them hold.
    fn discard(&self, calls: Vec<Call<R>>) {
        if calls.is_empty() {
            return;
        }
        let held = calls
            .into_iter()
            .map(|mut call| {
                let held = std::mem::take(&mut call.held);
                let _ = call.reply.send(Err(not_sent()));
                held
            })
            .collect();
        self.runner.release(held);
    }

    fn lock(&self) -> MutexGuard<'_, State<R>> {
        // The state stays consistent at every unlock, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The deadline passed before the call left msgw.
fn not_sent() -> Error {
    Error::DeadlineExceeded {
        outcome_unknown: false,
    }
}

/// The runner dropped a call without answering (msgw is stopping).
fn dropped() -> Error {
    Error::Unavailable {
        cause: UnavailableCause::ShuttingDown,
        outcome_unknown: false,
        detail: "the call was dropped before it was answered".into(),
    }
}

mod call;
mod lanes;
mod limits;
mod prepare;
mod shaping;
#[cfg(test)]
mod shaping_tests;
mod slot;
#[cfg(test)]
mod tests;

pub use call::{Call, latest};
use call::{Leave, Phase};
use lanes::{LaneMetrics, Lanes};
pub use limits::Limits;
pub use slot::Slot;
