//! Priority lanes: queued calls by lane (urgent, normal, bulk), FIFO within a lane.
//! Urgent goes first, then normal, then bulk, with a floor for the lower lanes: while a
//! lower lane waits, every operation taken from a lane above it makes the lower lane
//! owed `share / (1 - share)` of one, and a lane owed a whole operation goes next. So a
//! lower lane gets at least `share` of what leaves while it waits, and is never starved
//! for good.

use std::collections::VecDeque;

use super::{Call, Runner};
use crate::base::metrics::Metrics;
use crate::core::domain::Priority;

const LANES: usize = Priority::LANES.len();

/// Calls queued by lane.
pub(super) struct Lanes<R: Runner> {
    queues: [VecDeque<Call<R>>; LANES],
    /// Operations queued in each lane.
    ops: [usize; LANES],
    /// Operations each lane is owed by the lanes above it.
    owed: [f64; LANES],
    /// What one operation of a lane above owes a waiting lower lane.
    per_op: f64,
}

impl<R: Runner> Lanes<R> {
    /// Empty lanes whose lower lanes get at least `share` (0 to 0.5) of what leaves.
    pub(super) fn new(share: f64) -> Self {
        let share = share.clamp(0.0, 0.5);
        Self {
            queues: std::array::from_fn(|_| VecDeque::new()),
            ops: [0; LANES],
            owed: [0.0; LANES],
            per_op: share / (1.0 - share),
        }
    }

    /// Operations queued in `lane`.
    pub(super) fn ops_of(&self, lane: Priority) -> usize {
        self.ops[lane.lane()]
    }

    /// Operations queued in every lane.
    pub(super) fn ops(&self) -> usize {
        self.ops.iter().sum()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    /// Queues `call` last in its lane (calls arrive in `seq` order).
    pub(super) fn push_back(&mut self, call: Call<R>) {
        let lane = call.lane.lane();
        self.ops[lane] += call.ops.len();
        self.queues[lane].push_back(call);
    }

    /// Queues `call` in its lane by its `seq` (prepared calls come back after calls
    /// that needed no preparation may have queued behind them).
    pub(super) fn insert(&mut self, call: Call<R>) {
        let lane = call.lane.lane();
        self.ops[lane] += call.ops.len();
        let queue = &mut self.queues[lane];
        if queue.back().is_none_or(|last| last.seq < call.seq) {
            queue.push_back(call);
        } else {
            let at = queue.partition_point(|c| c.seq < call.seq);
            queue.insert(at, call);
        }
    }

    /// The lane served next: the lowest lane owed a whole operation, else the most
    /// urgent lane with a call.
    fn next(&self) -> Option<usize> {
        let owed = (1..LANES)
            .rev()
            .find(|&l| self.owed[l] >= 1.0 && !self.queues[l].is_empty());
        owed.or_else(|| (0..LANES).find(|&l| !self.queues[l].is_empty()))
    }

    /// The call served next.
    pub(super) fn front(&self) -> Option<&Call<R>> {
        self.next().and_then(|l| self.queues[l].front())
    }

    /// Takes the call served next, crediting the waiting lanes below it.
    pub(super) fn pop(&mut self) -> Option<Call<R>> {
        let lane = self.next()?;
        let call = self.queues[lane].pop_front()?;
        let n = call.ops.len();
        self.ops[lane] -= n;
        if lane > 0 {
            // A large call repays what it took beyond what was owed before the lane is
            // owed again: the floor is a share of operations, not of calls.
            self.owed[lane] -= n as f64;
        }
        for below in lane + 1..LANES {
            if !self.queues[below].is_empty() {
                self.owed[below] += n as f64 * self.per_op;
            }
        }
        if self.queues[lane].is_empty() {
            // Nothing is owed to a lane that stopped waiting.
            self.owed[lane] = 0.0;
        }
        Some(call)
    }

    /// Takes call `seq` out of whichever lane holds it.
    pub(super) fn remove(&mut self, seq: u64) -> Option<Call<R>> {
        // Each lane is sorted by `seq`: a call taken already is found absent at once.
        for lane in 0..LANES {
            let queue = &mut self.queues[lane];
            if let Ok(at) = queue.binary_search_by_key(&seq, |c| c.seq) {
                let call = queue.remove(at)?;
                self.ops[lane] -= call.ops.len();
                if queue.is_empty() {
                    self.owed[lane] = 0.0;
                }
                return Some(call);
            }
        }
        None
    }
}

/// Each lane's series of the lane metrics, by [`Priority::lane`].
pub(super) struct LaneMetrics {
    pub(super) depth: [prometheus::IntGauge; Priority::LANES.len()],
    pub(super) wait: [prometheus::Histogram; Priority::LANES.len()],
    pub(super) sent: [prometheus::IntCounter; Priority::LANES.len()],
}

impl LaneMetrics {
    pub(super) fn of(metrics: &Metrics) -> Self {
        let d = &metrics.dispatch;
        Self {
            depth: Priority::LANES.map(|l| d.lane_queue_depth.with_label_values(&[l.as_str()])),
            wait: Priority::LANES.map(|l| d.lane_wait_seconds.with_label_values(&[l.as_str()])),
            sent: Priority::LANES.map(|l| d.operations_sent.with_label_values(&[l.as_str()])),
        }
    }
}
