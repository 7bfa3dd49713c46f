//! The in-flight bound: each envelope holds a [`Slot`] while its gateway request is
//! out, and freeing it starts what queued meanwhile.

use std::sync::Arc;

use super::{Coalescer, Runner, gauge};

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
