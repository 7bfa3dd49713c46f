//! A request body read from HTTP/2 on the gRPC port, counted against its stream's
//! memory: what it read, the window its client may still fill, and the messages
//! tonic reserves room for.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use h2::{Reason, RecvStream};
use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};

use super::framing::{Framing, Step};
use crate::core::held::HeldKind;
use crate::transport::conn_table::{Room, StreamGuard};
use crate::transport::grpc::limits::MAX_REQUEST_BYTES;

/// A request body read from HTTP/2: what it read counts towards its stream's memory
/// until the stream ends, and so does the window the client has been granted and not
/// used yet (what it may still send unasked). Each chunk's window is given back as
/// msgw takes it only while the stream's caller is under its share and the port
/// under its budget. Otherwise the window stays shut (the client cannot send more)
/// until streams let go of bytes.
///
/// tonic reserves a message's whole declared length on reading its prefix, so that
/// length counts from the prefix on (its bytes fill it as they come), and a chunk
/// whose prefixes declare more than the caller's share has room for waits here,
/// counted, until there is room.
pub(super) struct Received {
    recv: RecvStream,
    data_done: bool,
    stream: StreamGuard,
    /// Bytes read whose window has not been given back.
    owed: usize,
    /// Window granted and not used yet, counted as held (`Request`) until the body
    /// ends.
    window: usize,
    /// While `owed`: resolves when streams let go of bytes.
    room: Option<Pin<Box<Room>>>,
    /// Where the body stands in its gRPC messages.
    framing: Framing,
    /// Declared message bytes counted and not received yet.
    unfilled: usize,
    /// A chunk read whose declared messages wait for room.
    pending: Option<(Bytes, Step)>,
    /// While `pending`: resolves when streams let go of bytes.
    declared_room: Option<Pin<Box<Room>>>,
}

impl Received {
    /// The body `recv` of `stream`, whose client was granted `window` bytes (counted
    /// as held already).
    pub(super) fn new(recv: RecvStream, stream: StreamGuard, window: usize) -> Self {
        Self {
            recv,
            data_done: false,
            stream,
            owed: 0,
            window,
            room: None,
            framing: Framing::default(),
            unfilled: 0,
            pending: None,
            declared_room: None,
        }
    }

    /// Gives back the window of what was read, if there is room now; else makes sure
    /// the task is woken when there may be.
    fn give_back(&mut self, cx: &mut Context<'_>) {
        if self.owed == 0 {
            return;
        }
        // Once the body is over its window costs nothing, and the connection's window
        // must come back for its other streams.
        if self.data_done || self.recv.is_end_stream() {
            self.room = None;
        } else if !room_for(&self.stream, &mut self.room, self.owed, cx) {
            return;
        }
        let owed = std::mem::take(&mut self.owed);
        self.grant(owed);
    }
}

/// Whether `stream` has room for `bytes` now; else makes sure the task is woken (by
/// the wait kept in `wait`) when streams let go of bytes.
fn room_for(
    stream: &StreamGuard,
    wait: &mut Option<Pin<Box<Room>>>,
    bytes: usize,
    cx: &mut Context<'_>,
) -> bool {
    loop {
        // Made before looking, so that no release falls in between.
        let room = wait.get_or_insert_with(|| Box::pin(stream.room()));
        if stream.has_room(bytes) {
            *wait = None;
            return true;
        }
        match room.as_mut().poll(cx) {
            Poll::Pending => return false,
            // Something was let go of: look again, with a fresh wait.
            Poll::Ready(()) => *wait = None,
        }
    }
}

impl Received {
    /// Gives `bytes` of window back to the client, counted until they arrive.
    /// Once the body is over, the connection's window still comes back, uncounted.
    fn grant(&mut self, bytes: usize) {
        let granted = self.recv.flow_control().release_capacity(bytes).is_ok();
        if granted && !self.data_done && !self.recv.is_end_stream() {
            self.stream.hold(HeldKind::Request, bytes);
            self.window += bytes;
        }
    }

    /// The body is over: no window is left to count.
    fn no_more_window(&mut self) {
        let window = std::mem::take(&mut self.window);
        if window > 0 {
            self.stream.release(HeldKind::Request, window);
        }
    }
}

impl Received {
    /// Whether `declared` message bytes may be counted now; else makes sure the task
    /// is woken when they may. A length tonic refuses (over the largest request) or
    /// one that could never fit passes: tonic ends the stream, or its caller's share
    /// cannot grow.
    fn declared_fits(&mut self, declared: usize, cx: &mut Context<'_>) -> bool {
        declared > MAX_REQUEST_BYTES
            || !self.stream.could_hold(declared)
            || room_for(&self.stream, &mut self.declared_room, declared, cx)
    }

    /// Counts what a chunk declares and lets go of what it fills.
    fn count_messages(&mut self, step: Step) {
        if step.declared > 0 {
            self.stream.hold(HeldKind::Request, step.declared);
            self.unfilled += step.declared;
        }
        let filled = step.filled.min(self.unfilled);
        if filled > 0 {
            self.unfilled -= filled;
            self.stream.release(HeldKind::Request, filled);
        }
    }
}

/// What reading a body's next chunk from HTTP/2 gave.
enum Read {
    /// A chunk, and where it leaves the body's messages.
    Data(Bytes, Step),
    /// The body is over (trailers may follow).
    Done,
    /// The answer to give tonic as it is.
    Answer(Poll<Option<Result<Frame<Bytes>, h2::Error>>>),
}

impl Received {
    /// Reads the next chunk: held until the stream ends (tonic keeps what it read
    /// until the message is whole, and the message while it is handled), out of the
    /// window granted, which counted it already.
    fn read(&mut self, cx: &mut Context<'_>) -> Read {
        match self.recv.poll_data(cx) {
            Poll::Pending => Read::Answer(Poll::Pending),
            Poll::Ready(Some(Ok(data))) => {
                let used = data.len().min(self.window);
                self.window -= used;
                self.stream.hold(HeldKind::Request, data.len() - used);
                let step = self.framing.read(&data);
                Read::Data(data, step)
            }
            Poll::Ready(Some(Err(error))) => {
                self.no_more_window();
                // The client ended its side or cancelled: not an error of the body.
                Read::Answer(match error.reason() {
                    Some(Reason::NO_ERROR | Reason::CANCEL) => Poll::Ready(None),
                    _ => Poll::Ready(Some(Err(error))),
                })
            }
            Poll::Ready(None) => {
                self.data_done = true;
                self.no_more_window();
                Read::Done
            }
        }
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        self.no_more_window();
        if self.unfilled > 0 {
            self.stream.release(HeldKind::Request, self.unfilled);
        }
    }
}

impl HttpBody for Received {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        this.give_back(cx);
        if !this.data_done {
            let chunk = match this.pending.take() {
                Some(pending) => Some(pending),
                None => match this.read(cx) {
                    Read::Data(data, step) => Some((data, step)),
                    Read::Done => None,
                    Read::Answer(answer) => return answer,
                },
            };
            if let Some((data, step)) = chunk {
                if step.declared > 0 && !this.declared_fits(step.declared, cx) {
                    this.pending = Some((data, step));
                    return Poll::Pending;
                }
                this.count_messages(step);
                // Its window comes back once tonic takes it, if there is room.
                if this.owed == 0 && this.stream.has_room(data.len()) {
                    this.grant(data.len());
                } else {
                    this.owed += data.len();
                    this.give_back(cx);
                }
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
        }
        match this.recv.poll_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(error)) => match error.reason() {
                Some(Reason::NO_ERROR | Reason::CANCEL) => Poll::Ready(None),
                _ => Poll::Ready(Some(Err(error))),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
