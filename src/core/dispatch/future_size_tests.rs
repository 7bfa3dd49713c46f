//! Every send's future is moved whole into a box (tonic's), so its size is paid on
//! every send. The dispatcher's part must hold the coalescer's call once: held twice
//! (a future kept in a local and awaited in another place), every send moved kilobytes
//! more and the SQLite send path lost 5 to 10 % of its sends a second.

use std::{future::Future, mem::size_of, sync::Arc};

use super::{Coalescer, Dispatcher, Engine};
use crate::core::domain::Priority;

fn dispatcher_future<'a, F: Future>(_: impl FnOnce(&'a Dispatcher) -> F) -> usize {
    size_of::<F>()
}

fn coalescer_future<'a, F: Future>(_: impl FnOnce(&'a Arc<Coalescer<Engine>>) -> F) -> usize {
    size_of::<F>()
}

#[test]
fn a_send_holds_its_coalescer_call_once() {
    let call =
        coalescer_future(|c| c.call_kept(Vec::new(), Priority::Normal, None, None, None, None));
    let send =
        dispatcher_future(|d| d.execute_all(Vec::new(), Priority::Normal.into(), None, None));
    // The call and the loop around it (results, the operations waiting, the claims'
    // wait), which is smaller than a second call and a quarter of a kilobyte.
    assert!(
        send < 2 * call + 256,
        "a send's future is {send} bytes around a coalescer call of {call}"
    );
}
