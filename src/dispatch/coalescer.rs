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

use std::{
    collections::VecDeque,
    future::Future,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU8, Ordering},
    },
    time::Duration,
};

use tokio::{sync::oneshot, time::Instant};

use crate::domain::{CallerName, Error, Operation, UnavailableCause};
use crate::metrics::Metrics;

/// How many gateway requests, and operations, msgw allows itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Gateway requests in flight at most (and so connections to the gateway).
    pub connections: usize,
    /// Operations in one envelope at most.
    pub batch_max: usize,
    /// Operations waiting for an envelope at most.
    pub queue_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 8,
            batch_max: 50,
            queue_max: 10_000,
        }
    }
}

/// What an envelope runner answers a call: one answer per operation, or an error of
/// the call as a whole (the envelope it rode in failed).
pub type CallReply<A> = Result<Vec<A>, Error>;

/// One queued call.
pub struct Call<A> {
    /// Its operations, in order.
    pub ops: Vec<Operation>,
    /// Who made it (`None`: no caller authentication).
    pub caller: Option<CallerName>,
    /// When the caller stops waiting.
    pub deadline: Option<Instant>,
    /// How its claims are kept when its operations carry a secret.
    pub confidential: Option<super::Confidential>,
    /// Where its answer goes.
    pub reply: oneshot::Sender<CallReply<A>>,
    seq: u64,
    phase: Arc<Phase>,
}

impl<A> Call<A> {
    /// Whether the caller still waits for the answer.
    pub fn wanted(&self) -> bool {
        !self.reply.is_closed() && !self.phase.is(Phase::ABANDONED)
    }

    /// Gives the call up unsent (its deadline passed before its request left).
    pub fn abandon(&self) {
        self.phase.abandon();
    }

    /// Marks the call's request as leaving for the gateway; false when the caller gave
    /// up first (then nothing of it may be sent).
    pub fn begin_send(&self) -> bool {
        self.phase
            .0
            .compare_exchange(
                Phase::WAITING,
                Phase::SENDING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
            && !self.reply.is_closed()
    }
}

/// Whether a call's request has left msgw: set once, by whichever comes first of the
/// envelope sending it and the caller giving up.
struct Phase(AtomicU8);

impl Phase {
    const WAITING: u8 = 0;
    const SENDING: u8 = 1;
    const ABANDONED: u8 = 2;

    fn is(&self, phase: u8) -> bool {
        self.0.load(Ordering::Acquire) == phase
    }

    /// Gives up unless the request already left; true when it had not.
    fn abandon(&self) -> bool {
        match self.0.compare_exchange(
            Self::WAITING,
            Self::ABANDONED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(phase) => phase == Self::ABANDONED,
        }
    }
}

/// Runs one envelope of calls (claims, the gateway request, outcomes) and answers
/// every call in it.
pub trait Runner: Send + Sync + Sized + 'static {
    /// The answer to one operation.
    type Answer: Send + 'static;

    /// Runs `calls` as one envelope, holding `slot` until its gateway request is
    /// answered (then the next envelope may start while this one records outcomes).
    fn run(
        &self,
        calls: Vec<Call<Self::Answer>>,
        slot: Slot<Self>,
    ) -> impl Future<Output = ()> + Send;
}

/// The queue, the in-flight bound and the runner they feed.
pub struct Coalescer<R: Runner> {
    runner: Arc<R>,
    limits: Limits,
    metrics: Arc<Metrics>,
    state: Mutex<State<R::Answer>>,
}

impl<R: Runner> std::fmt::Debug for Coalescer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

struct Queued<A> {
    call: Call<A>,
    since: Instant,
}

struct State<A> {
    queue: VecDeque<Queued<A>>,
    queued_ops: usize,
    in_flight: usize,
    next_seq: u64,
}

impl<R: Runner> Coalescer<R> {
    /// A coalescer feeding `runner`.
    pub fn new(runner: Arc<R>, limits: Limits, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            runner,
            limits: Limits {
                connections: limits.connections.max(1),
                batch_max: limits.batch_max.max(1),
                queue_max: limits.queue_max.max(1),
            },
            metrics,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued_ops: 0,
                in_flight: 0,
                next_seq: 0,
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
        self.call_kept(ops, deadline, caller, None).await
    }

    /// [`Coalescer::call`] of operations carrying a secret, whose claims are kept as
    /// `confidential` says.
    pub async fn call_kept(
        self: &Arc<Self>,
        ops: Vec<Operation>,
        deadline: Option<Instant>,
        caller: Option<CallerName>,
        confidential: Option<super::Confidential>,
    ) -> CallReply<R::Answer> {
        if deadline.is_some_and(|d| d <= Instant::now()) {
            return Err(not_sent());
        }
        let (reply, mut answer) = oneshot::channel();
        let size = ops.len();
        let changes_state = ops.iter().any(Operation::changes_state);
        let phase = Arc::new(Phase(AtomicU8::new(Phase::WAITING)));
        let seq = {
            let mut state = self.lock();
            if state.queued_ops + size > self.limits.queue_max {
                drop(state);
                self.metrics.queue_rejected.inc();
                return Err(Error::Overloaded {
                    retry_after: Duration::from_millis(100),
                });
            }
            let seq = state.next_seq;
            state.next_seq += 1;
            state.queued_ops += size;
            state.queue.push_back(Queued {
                call: Call {
                    ops,
                    caller,
                    deadline,
                    confidential,
                    reply,
                    seq,
                    phase: phase.clone(),
                },
                since: Instant::now(),
            });
            self.metrics.queue_depth.set(gauge(state.queued_ops));
            seq
        };
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
            let envelope = {
                let mut state = self.lock();
                if state.in_flight >= self.limits.connections {
                    return;
                }
                let envelope = self.take(&mut state);
                if envelope.is_empty() {
                    return;
                }
                state.in_flight += 1;
                self.metrics.requests_in_flight.set(gauge(state.in_flight));
                envelope
            };
            let size = envelope.iter().map(|c| c.ops.len()).sum::<usize>();
            self.metrics.envelope_operations.observe(size as f64);
            let this = self.clone();
            tokio::spawn(async move {
                // Dropped by the runner, or with this task even if the runner panics.
                let slot = Slot(this.clone());
                this.runner.run(envelope, slot).await;
            });
        }
    }

    /// Takes queued calls for one envelope: whole calls, in order, up to `batch_max`
    /// operations (a larger call goes alone). Calls whose deadline passed are answered
    /// unsent; calls whose caller left are dropped.
    fn take(&self, state: &mut State<R::Answer>) -> Vec<Call<R::Answer>> {
        let now = Instant::now();
        let mut envelope = Vec::new();
        let mut size = 0;
        while let Some(next) = state.queue.front() {
            let n = next.call.ops.len();
            if size > 0 && size + n > self.limits.batch_max {
                break;
            }
            let Some(Queued { call, since }) = state.queue.pop_front() else {
                break;
            };
            state.queued_ops -= n;
            if !call.wanted() {
                continue;
            }
            if call.deadline.is_some_and(|d| d <= now) {
                let _ = call.reply.send(Err(not_sent()));
                continue;
            }
            self.metrics
                .queue_seconds
                .observe((now - since).as_secs_f64());
            size += n;
            envelope.push(call);
        }
        self.metrics.queue_depth.set(gauge(state.queued_ops));
        envelope
    }

    /// Takes call `seq` out of the queue; false when it is no longer there.
    fn remove(&self, seq: u64) -> bool {
        let mut state = self.lock();
        // Calls queue in `seq` order and leave it only by removal, so the queue stays
        // sorted: a taken call is found absent without scanning.
        let Ok(at) = state.queue.binary_search_by_key(&seq, |q| q.call.seq) else {
            return false;
        };
        if let Some(q) = state.queue.remove(at) {
            state.queued_ops -= q.call.ops.len();
            self.metrics.queue_depth.set(gauge(state.queued_ops));
        }
        true
    }

    fn lock(&self) -> MutexGuard<'_, State<R::Answer>> {
        // The state stays consistent at every unlock, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One of the gateway requests in flight; dropping it frees the slot and starts what
/// queued meanwhile.
pub struct Slot<R: Runner>(Arc<Coalescer<R>>);

impl<R: Runner> Drop for Slot<R> {
    fn drop(&mut self) {
        {
            let mut state = self.0.lock();
            state.in_flight -= 1;
            self.0
                .metrics
                .requests_in_flight
                .set(gauge(state.in_flight));
        }
        self.0.pump();
    }
}

/// Takes a caller's call out of the queue, or gives it up if its request has not left,
/// when the caller's future is dropped.
struct Leave<'a, R: Runner> {
    coalescer: &'a Arc<Coalescer<R>>,
    seq: u64,
    phase: &'a Phase,
}

impl<R: Runner> Drop for Leave<'_, R> {
    fn drop(&mut self) {
        if !self.coalescer.remove(self.seq) {
            self.phase.abandon();
        }
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

#[cfg(test)]
mod tests;
