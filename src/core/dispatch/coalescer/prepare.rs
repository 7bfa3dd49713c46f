//! The preparation stage: groups of queued calls claimed one store write at a time
//! (or as many at once as the runner allows), one round of gateway requests ahead.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Call, Coalescer, PREPARE_MAX_CALLS, Runner};
use crate::core::domain::Priority;

impl<R: Runner> Coalescer<R> {
    /// Starts preparing the calls queued for it, unless the runner's preparations are
    /// all under way (then they make the next group, once one is done).
    pub(super) fn prepare_next(self: &Arc<Self>) {
        let (group, discarded) = {
            let mut state = self.lock();
            if state.preparing_now >= self.runner.preparations() || state.preparing.is_empty() {
                return;
            }
            let (mut group, mut discarded) = (Vec::new(), Vec::new());
            let now = Instant::now();
            // Claims are made for one round of gateway requests ahead at most (under a
            // rate, one second of it): a prepared call waits for a slot briefly, never
            // long enough for its claim to count as abandoned (see `Runner::held_for`).
            let mut round = self.limits.connections * self.limits.batch_max;
            if let Some(pace) = &self.pace {
                round = round.min((pace.limit().per_second as usize).max(self.limits.batch_max));
            }
            let mut ahead = state.queue.ops() + state.claiming_ops;
            while group.len() < PREPARE_MAX_CALLS && ahead < round {
                let Some(call) = state.preparing.pop() else {
                    break;
                };
                if !call.wanted() || call.deadline.is_some_and(|d| d <= now) {
                    state.queued_ops -= call.ops.len();
                    state.lane_ops[call.lane.lane()] -= call.ops.len();
                    discarded.push(call);
                    continue;
                }
                ahead += call.ops.len();
                group.push(call);
            }
            state.preparing_now += usize::from(!group.is_empty());
            self.depth(&mut state);
            (group, discarded)
        };
        self.discard(discarded);
        if group.is_empty() {
            return;
        }
        let mut ops = [0; Priority::LANES.len()];
        for call in &group {
            ops[call.lane.lane()] += call.ops.len();
        }
        self.lock().claiming_ops += ops.iter().sum::<usize>();
        let this = self.clone();
        tokio::spawn(async move {
            // Ends the preparation even if the runner panics.
            let mut done = Prepared {
                coalescer: this.clone(),
                ops,
                started: Instant::now(),
                ready: Vec::new(),
            };
            done.ready = this.runner.prepare(group).await;
        });
    }
}

/// A group being prepared; dropping it queues the calls still to send, ends the
/// preparation and starts what queued meanwhile.
struct Prepared<R: Runner> {
    coalescer: Arc<Coalescer<R>>,
    /// Operations of the group, by lane.
    ops: [usize; Priority::LANES.len()],
    /// When it began.
    started: Instant,
    /// The calls the preparation left to send.
    ready: Vec<Call<R>>,
}

impl<R: Runner> Drop for Prepared<R> {
    fn drop(&mut self) {
        {
            let mut state = self.coalescer.lock();
            let mut ready = [0; Priority::LANES.len()];
            for call in &self.ready {
                ready[call.lane.lane()] += call.ops.len();
            }
            // Calls answered in preparation leave the counts; the rest stay in them.
            for (lane, (ops, ready)) in self.ops.iter().zip(ready).enumerate() {
                let answered = ops.saturating_sub(ready);
                state.queued_ops -= answered.min(state.queued_ops);
                state.lane_ops[lane] -= answered.min(state.lane_ops[lane]);
            }
            let ops = self.ops.iter().sum::<usize>();
            state.claiming_ops -= ops.min(state.claiming_ops);
            // Each lane stays in `seq` order: calls that needed no preparation may have
            // queued behind the group meanwhile.
            for mut call in self.ready.drain(..) {
                call.claimed_at = Some(self.started);
                state.queue.insert(call);
            }
            state.preparing_now -= 1;
            self.coalescer.depth(&mut state);
        }
        self.coalescer.prepare_next();
        self.coalescer.pump();
    }
}
