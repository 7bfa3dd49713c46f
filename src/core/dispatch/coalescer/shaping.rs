//! The contracted rate in the coalescer: an envelope leaves only with the rate's grant
//! for its operations. Grants are asked one at a time: for an urgent call at once and
//! for what it needs; for the other lanes, paced (see `RateWindow::grant`: a tenth of a
//! second's worth when that much waits), so a flood leaves in envelopes of several
//! operations at a steady rate rather than one by one. A refused ask says when
//! it would fit, and the coalescer asks again then (or sooner, for an urgent call).

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;

use super::{Call, Coalescer, Runner, State};
use crate::core::dispatch::pace::Pace;
use crate::core::domain::Priority;

/// How long granted operations may wait to leave: a grant is used at once, and what is
/// left of it (the calls it was for left meanwhile) must not leave late, when other
/// grants may already fill the second it was counted in.
const CREDIT_FOR: Duration = Duration::from_millis(20);

/// The least and most a refused call is told to wait before calling again.
const RETRY_LEAST: Duration = Duration::from_millis(100);
const RETRY_MOST: Duration = Duration::from_secs(3600);

/// The rate's grants as the coalescer holds them.
#[derive(Debug, Default)]
pub(super) struct Credit {
    /// Operations granted and not yet sent.
    granted: usize,
    /// Until when they may still leave.
    until: Option<Instant>,
    /// An ask of the rate is under way.
    asking: bool,
    /// When the last refused ask said the rate would have room: for urgent calls (from
    /// the burst) and for the others (paced) apart, so an urgent call asks past a paced
    /// refusal once, and never again before its own refusal's time.
    retry_at: [Option<Instant>; 2],
    /// Whether the ask under way is for an urgent call.
    urgent: bool,
}

impl<R: Runner> Coalescer<R> {
    /// How many operations the next envelope may carry: `None` when it must wait for
    /// the rate (an ask for it is then under way or due).
    pub(super) fn room(self: &Arc<Self>, state: &mut State<R>) -> Option<usize> {
        let Some(pace) = &self.pace else {
            return Some(self.limits.batch_max);
        };
        let now = Instant::now();
        if state.rate.until.is_some_and(|until| until < now) {
            state.rate.granted = 0;
        }
        let front = state.queue.front()?;
        let (need, lane) = (front.ops.len(), front.lane);
        let credit = &state.rate;
        if credit.granted >= need {
            return Some(credit.granted.min(self.limits.batch_max));
        }
        let urgent = lane == Priority::Urgent;
        if credit.asking || credit.retry_at[usize::from(urgent)].is_some_and(|at| at > now) {
            return None;
        }
        let free = self.limits.connections - state.in_flight;
        let (want, at_least, paced) = ask_for(
            pace,
            need,
            lane,
            &state.queue_ops(),
            free,
            self.limits.batch_max,
        );
        let have = state.rate.granted;
        state.rate.asking = true;
        state.rate.urgent = urgent;
        self.ask(
            pace.clone(),
            want.saturating_sub(have).max(1),
            at_least.saturating_sub(have).max(1),
            paced,
        );
        None
    }

    /// Takes what `envelope` sends out of the grants.
    pub(super) fn spend(&self, state: &mut State<R>, envelope: &[Call<R>]) {
        if self.pace.is_some() {
            let sent: usize = envelope.iter().map(|c| c.ops.len()).sum();
            state.rate.granted = state.rate.granted.saturating_sub(sent);
        }
    }

    /// Asks the rate for operations, then pumps again with what it granted, or when it
    /// says it will have room.
    fn ask(self: &Arc<Self>, pace: Arc<Pace>, want: usize, at_least: usize, paced: bool) {
        let this = self.clone();
        tokio::spawn(async move {
            // Ends the ask even if the rate's store panics.
            let mut asking = Asking {
                coalescer: this.clone(),
                granted: 0,
                retry_in: Duration::from_millis(100),
            };
            let grant = pace.grant(want, at_least, paced).await;
            asking.granted = grant.granted as usize;
            asking.retry_in = Duration::from_millis(grant.retry_in_ms);
        });
    }

    /// How long a caller refused in `lane` should wait: the time the operations ahead
    /// of it (its lane's and the lanes above) take to leave at the rate, else a tenth
    /// of a second.
    pub(super) fn retry_after(&self, state: &State<R>, lane: Priority) -> Duration {
        let Some(pace) = &self.pace else {
            return RETRY_LEAST;
        };
        let ahead: usize = state.lane_ops[..=lane.lane()].iter().sum();
        let rate = f64::from(pace.limit().per_second);
        Duration::from_secs_f64(ahead as f64 / rate).clamp(RETRY_LEAST, RETRY_MOST)
    }
}

/// What to ask the rate for the call served next (`need` operations in `lane`): an
/// urgent call what the urgent lane holds, at once and from the burst; the other lanes
/// what can leave in the free slots, paced (the rate waits for a tenth of a second's
/// worth of them, see `RateWindow::grant`). A call larger than the paced bucket asks
/// from the burst, or it would never fit.
fn ask_for(
    pace: &Pace,
    need: usize,
    lane: Priority,
    queued: &[usize; Priority::LANES.len()],
    free: usize,
    batch_max: usize,
) -> (usize, usize, bool) {
    if lane == Priority::Urgent {
        let want = queued[Priority::Urgent.lane()]
            .min(free * batch_max)
            .max(need);
        return (want, need, false);
    }
    let all: usize = queued.iter().sum();
    let want = all.min(free * batch_max).max(need);
    (want, need, need <= pace.paced_max())
}

impl<R: Runner> State<R> {
    /// Operations waiting for a slot, by lane.
    fn queue_ops(&self) -> [usize; Priority::LANES.len()] {
        Priority::LANES.map(|lane| self.queue.ops_of(lane))
    }
}

/// An ask of the rate under way; dropping it records the answer and pumps.
struct Asking<R: Runner> {
    coalescer: Arc<Coalescer<R>>,
    granted: usize,
    retry_in: Duration,
}

impl<R: Runner> Drop for Asking<R> {
    fn drop(&mut self) {
        let retry_at = {
            let mut state = self.coalescer.lock();
            let credit = &mut state.rate;
            credit.asking = false;
            let now = Instant::now();
            if self.granted > 0 {
                credit.granted += self.granted;
                credit.until = Some(now + CREDIT_FOR);
                credit.retry_at = [None, None];
                None
            } else {
                let at = now + self.retry_in;
                credit.retry_at[usize::from(credit.urgent)] = Some(at);
                Some(at)
            }
        };
        if let Some(at) = retry_at {
            let again = self.coalescer.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                again.pump();
            });
        }
        self.coalescer.pump();
    }
}
