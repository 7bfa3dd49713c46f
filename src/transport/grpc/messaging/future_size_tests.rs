//! Every send's future is moved whole into a box (tonic's), so its bytes are copied on
//! every send, and a copy beyond 4 KiB takes glibc's slower path. The layers around a
//! send (the pipeline, its tracing and timing) hold what they wrap once: an `async fn`
//! that takes a future and awaits it in a block of its own holds it up to three times
//! (the send's future was 7.9 KiB in a debug build, 3.6 KiB once they did not).

use std::{future::Future, mem::size_of};

use tonic::Request;

use super::Messaging;
use crate::transport::proto::{SendSmsRequest, SendSmsResponse};

fn send_future<'a, F: Future>(
    _: impl FnOnce(&'a Messaging, Request<SendSmsRequest>) -> F,
) -> usize {
    size_of::<F>()
}

#[test]
fn a_send_future_stays_within_4_kib() {
    let send = send_future(|m, r| m.send::<SendSmsRequest, SendSmsResponse>(r));
    assert!(send <= 4096, "a SendSms future is {send} bytes");
}
