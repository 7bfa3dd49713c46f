//! The preparation stage: groups of queued calls claimed one store write at a time
//! (or as many at once as the runner allows), one round of gateway requests ahead.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Call, Coalescer, PREPARE_MAX_CALLS, Runner, gauge};

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
            // Claims are made for one round of gateway requests ahead at most: a
            // prepared call waits for a slot briefly, never long enough for its claim
            // to count as abandoned (see `Runner::held_for`).
            let round = self.limits.connections * self.limits.batch_max;
            let mut ahead = state.ready_ops + state.claiming_ops;
            while group.len() < PREPARE_MAX_CALLS && ahead < round {
                let Some(call) = state.preparing.pop_front() else {
                    break;
                };
                if !call.wanted() || call.deadline.is_some_and(|d| d <= now) {
                    state.queued_ops -= call.ops.len();
                    discarded.push(call);
                    continue;
                }
                ahead += call.ops.len();
                group.push(call);
            }
            state.preparing_now += usize::from(!group.is_empty());
            self.metrics
                .dispatch
                .queue_depth
                .set(gauge(state.queued_ops));
            (group, discarded)
        };
        self.discard(discarded);
        if group.is_empty() {
            return;
        }
        let ops = group.iter().map(|c| c.ops.len()).sum();
        self.lock().claiming_ops += ops;
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
    /// Operations of the group.
    ops: usize,
    /// When it began.
    started: Instant,
    /// The calls the preparation left to send.
    ready: Vec<Call<R>>,
}

impl<R: Runner> Drop for Prepared<R> {
    fn drop(&mut self) {
        {
            let mut state = self.coalescer.lock();
            let ready: usize = self.ready.iter().map(|c| c.ops.len()).sum();
            // Calls answered in preparation leave the count; the rest stay in it.
            state.queued_ops -= self.ops.saturating_sub(ready).min(state.queued_ops);
            state.claiming_ops -= self.ops.min(state.claiming_ops);
            // Keep the queue in `seq` order: calls that needed no preparation may have
            // queued behind the group meanwhile.
            for mut call in self.ready.drain(..) {
                call.claimed_at = Some(self.started);
                state.ready_ops += call.ops.len();
                if state.queue.back().is_none_or(|last| last.seq < call.seq) {
                    state.queue.push_back(call);
                } else {
                    let at = state.queue.partition_point(|c| c.seq < call.seq);
                    state.queue.insert(at, call);
                }
            }
            state.preparing_now -= 1;
            self.coalescer
                .metrics
                .dispatch
                .queue_depth
                .set(gauge(state.queued_ops));
        }
        self.coalescer.prepare_next();
        self.coalescer.pump();
    }
}
