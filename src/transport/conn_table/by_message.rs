//! What a stream holds a message at a time: events on their way to an event stream's
//! client come and go hundreds of thousands a second across a port's event streams. A
//! stream counts them exactly on its own, and on what every stream shares (the port's
//! budget, its connection, its caller, the gauges) in blocks of [`MESSAGE_BLOCK`], so
//! that an event costs no write to a counter every stream shares. The budget then
//! counts a stream's events as up to two blocks more than they are, never less.
//! (Answers are counted exactly: one is held only while its client's window is shut,
//! see `grpc/port/stream.rs`, where a block ahead would only over-count.)

use std::sync::{Mutex, MutexGuard};

use crate::core::held::HeldKind;

/// The block in which a stream's events are counted on what streams share.
pub const MESSAGE_BLOCK: usize = 8 * 1024;

/// A stream's events: what it holds, and what it has counted on what streams share.
#[derive(Default)]
pub(super) struct ByMessage(Mutex<Blocks>);

/// `used` exactly; `counted` at least `used` and less than `used` plus two
/// [`MESSAGE_BLOCK`]s.
#[derive(Default)]
struct Blocks {
    used: usize,
    counted: usize,
}

/// Whether `kind` is counted by message.
fn by_message(kind: HeldKind) -> bool {
    match kind {
        HeldKind::Replay => true,
        HeldKind::Connection
        | HeldKind::Stream
        | HeldKind::Request
        | HeldKind::Answer
        | HeldKind::Waiter => false,
    }
}

/// `bytes` rounded up to whole [`MESSAGE_BLOCK`]s.
fn whole_blocks(bytes: usize) -> usize {
    bytes.div_ceil(MESSAGE_BLOCK) * MESSAGE_BLOCK
}

impl ByMessage {
    /// Takes `bytes` more of `kind`: what to count on what streams share now (up to
    /// the next whole block once it holds more than it counted, else nothing). `None`: `kind` is not
    /// counted by message, and all of `bytes` is to be counted.
    pub(super) fn hold(&self, kind: HeldKind, bytes: usize) -> Option<usize> {
        if !by_message(kind) {
            return None;
        }
        let mut b = self.lock();
        b.used += bytes;
        let more = if b.used > b.counted {
            whole_blocks(b.used) - b.counted
        } else {
            0
        };
        b.counted += more;
        Some(more)
    }

    /// Lets go of `bytes` of `kind`: what to count no longer (down to the whole blocks
    /// it holds once it counts two blocks more, else nothing: a reservation given back
    /// and a stream that holds nothing count nothing). `None`: `kind` is not
    /// counted by message, and all of `bytes` is to be let go of.
    pub(super) fn release(&self, kind: HeldKind, bytes: usize) -> Option<usize> {
        if !by_message(kind) {
            return None;
        }
        let mut b = self.lock();
        b.used = b.used.saturating_sub(bytes);
        let less = if b.counted >= b.used + 2 * MESSAGE_BLOCK {
            b.counted - whole_blocks(b.used)
        } else {
            0
        };
        b.counted -= less;
        Some(less)
    }

    /// Whether the stream holds nothing of `kind` (`None`: not counted by message).
    pub(super) fn holds_none(&self, kind: HeldKind) -> Option<bool> {
        by_message(kind).then(|| self.lock().used == 0)
    }

    /// Takes `bytes` more of `kind`, counted exactly (a reservation made against the
    /// budget); nothing when `kind` is not counted by message.
    pub(super) fn hold_counted(&self, kind: HeldKind, bytes: usize) {
        if by_message(kind) {
            let mut b = self.lock();
            b.used += bytes;
            b.counted += bytes;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Blocks> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_block_ahead_and_gives_back_only_past_two() {
        let m = ByMessage::default();
        assert_eq!(m.hold(HeldKind::Stream, 100), None, "not by message");
        assert_eq!(m.hold(HeldKind::Answer, 100), None, "answers are exact");
        assert_eq!(m.hold(HeldKind::Replay, 300), Some(MESSAGE_BLOCK));
        assert_eq!(m.hold(HeldKind::Replay, 300), Some(0), "within the block");
        assert_eq!(m.release(HeldKind::Replay, 600), Some(0), "one block ahead");
        assert_eq!(m.hold(HeldKind::Replay, 300), Some(0));
        assert_eq!(m.release(HeldKind::Replay, 300), Some(0));
        assert_eq!(m.holds_none(HeldKind::Replay), Some(true));
        // A block counted: three blocks more are counted as three whole blocks.
        assert_eq!(
            m.hold(HeldKind::Replay, 3 * MESSAGE_BLOCK),
            Some(2 * MESSAGE_BLOCK)
        );
        assert_eq!(
            m.release(HeldKind::Replay, 3 * MESSAGE_BLOCK),
            Some(3 * MESSAGE_BLOCK),
            "holding nothing, it counts nothing"
        );
    }
}
