//! One queued call, whether its request has left msgw, and what takes it out of the
//! queue when its caller goes away.

use std::sync::{
    Arc,
    atomic::{AtomicU8, Ordering},
};

use tokio::{sync::oneshot, time::Instant};

use super::{CallReply, Coalescer, Runner};
use crate::core::domain::{CallerName, Operation, Priority};

/// One queued call.
pub struct Call<R: Runner> {
    /// Its operations, in order.
    pub ops: Vec<Operation>,
    /// The lane it waits in.
    pub lane: Priority,
    /// Who made it (`None`: no caller authentication).
    pub caller: Option<CallerName>,
    /// When the caller stops waiting.
    pub deadline: Option<Instant>,
    /// How its claims are kept when its operations carry a secret.
    pub confidential: Option<crate::core::dispatch::Confidential>,
    /// The time a scheduled send's claim is keyed by, when the call is one.
    pub scheduled: Option<crate::core::dispatch::ScheduledKey>,
    /// What its preparation left it holding (its claims), until its envelope runs.
    pub held: R::Held,
    /// Where its answer goes.
    pub reply: oneshot::Sender<CallReply<R::Answer>>,
    pub(super) seq: u64,
    pub(super) phase: Arc<Phase>,
    pub(super) since: Instant,
    /// When its preparation began (its claims' time), once prepared.
    pub(super) claimed_at: Option<Instant>,
}

impl<R: Runner> Call<R> {
    /// Whether the caller still waits for the answer.
    pub fn wanted(&self) -> bool {
        !self.reply.is_closed() && !self.phase.is(Phase::ABANDONED)
    }

    /// When its preparation began (its claims' time), once prepared.
    pub fn claimed_at(&self) -> Option<Instant> {
        self.claimed_at
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
pub(super) struct Phase(pub(super) AtomicU8);

impl Phase {
    pub(super) const WAITING: u8 = 0;
    const SENDING: u8 = 1;
    const ABANDONED: u8 = 2;

    fn is(&self, phase: u8) -> bool {
        self.0.load(Ordering::Acquire) == phase
    }

    /// Gives up unless the request already left; true when it had not.
    pub(super) fn abandon(&self) -> bool {
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

/// Takes a caller's call out of the queue, or gives it up if its request has not left,
/// when the caller's future is dropped.
pub(super) struct Leave<'a, R: Runner> {
    pub(super) coalescer: &'a Arc<Coalescer<R>>,
    pub(super) seq: u64,
    pub(super) phase: &'a Phase,
}

impl<R: Runner> Drop for Leave<'_, R> {
    fn drop(&mut self) {
        // A call whose request is leaving was taken out of the queue for it: there is
        // nothing to take out (and no lock to take, on every send).
        if self.phase.is(Phase::SENDING) {
            return;
        }
        if !self.coalescer.remove(self.seq) {
            self.phase.abandon();
        }
    }
}

/// The latest deadline among `calls`: `None` when one of them has none (a request
/// that ends with the last caller waiting for it).
pub fn latest<'a, R: Runner + 'a>(calls: impl Iterator<Item = &'a Call<R>>) -> Option<Instant> {
    calls
        .map(|c| c.deadline)
        .try_fold(None, |latest: Option<Instant>, d| {
            d.map(|d| Some(latest.map_or(d, |l| l.max(d))))
        })
        .flatten()
}
