//! What the coalescer feeds: a [`Runner`] prepares calls and runs envelopes of them,
//! each holding a [`Slot`] of the in-flight bound while its gateway request is out.

use std::{future::Future, sync::Arc, time::Duration};

use super::{Call, Coalescer, gauge};
use crate::core::domain::Error;

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

/// One of the gateway requests in flight; dropping it frees the slot and starts what
/// queued meanwhile.
pub struct Slot<R: Runner>(pub(super) Arc<Coalescer<R>>);

impl<R: Runner> Drop for Slot<R> {
    fn drop(&mut self) {
        {
            let mut state = self.0.lock();
            state.in_flight -= 1;
            self.0
                .metrics
                .dispatch
                .requests_in_flight
                .set(gauge(state.in_flight));
        }
        self.0.pump();
    }
}
