//! What a call makes msgw hold in memory on its caller's behalf (events loaded for a
//! replay, a status waiter's subscription), told to whoever keeps the memory budget: the
//! gRPC port counts it against its budget and the caller's share. Core only reports
//! what it holds; transport decides what is too much.

use std::{future::Future, pin::Pin, sync::Arc};

/// What held bytes are for (the `kind` label of `msgw_grpc_held_bytes_by_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldKind {
    /// A connection's fixed cost: its buffers, its HTTP/2 state and a header block
    /// being received.
    Connection,
    /// A stream's fixed cost and its request headers.
    Stream,
    /// A request body received and not yet done with, and the flow-control window
    /// granted to a request body not yet finished (what its client may still send
    /// unasked).
    Request,
    /// An answer waiting for its client's flow-control window.
    Answer,
    /// Events loaded for a stream and not yet handed to its encoder.
    Replay,
    /// A `wait_for_final` waiter's subscription to the event log.
    Waiter,
}

impl HeldKind {
    /// Every kind, in label order.
    pub const ALL: [Self; 6] = [
        Self::Connection,
        Self::Stream,
        Self::Request,
        Self::Answer,
        Self::Replay,
        Self::Waiter,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Connection => "connection",
            Self::Stream => "stream",
            Self::Request => "request",
            Self::Answer => "answer",
            Self::Replay => "replay",
            Self::Waiter => "waiter",
        }
    }
}

/// Where held bytes are counted: a call's stream on the port it came through.
pub trait Account: Send + Sync {
    /// Counts `bytes` more held for `kind`.
    fn hold(&self, kind: HeldKind, bytes: usize);
    /// Counts `bytes` of `kind` no longer held.
    fn release(&self, kind: HeldKind, bytes: usize);
    /// Counts up to `want` bytes more held for `kind`, as many as the caller's share
    /// and the budget have room for, and returns how many; `None` (nothing counted)
    /// when there is room for fewer than `least`. A stream that holds nothing of
    /// `kind` yet gets `least` all the same, so that every stream makes progress.
    fn try_hold(&self, kind: HeldKind, want: usize, least: usize) -> Option<usize>;
    /// Resolves once bytes may have been let go of (there may be room again); make it
    /// before [`Account::try_hold`] fails, so that no release falls in between.
    fn room(&self) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// A call's account, if its transport keeps one (calls made inside msgw have none).
pub type CallAccount = Option<Arc<dyn Account>>;

/// Bytes counted on an account until this is dropped.
#[must_use = "the bytes are released when this is dropped"]
pub struct Held {
    account: CallAccount,
    kind: HeldKind,
    bytes: usize,
}

impl Held {
    /// Counts `bytes` of `kind` on `account` (nothing without one).
    pub fn new(account: &CallAccount, kind: HeldKind, bytes: usize) -> Self {
        if let Some(account) = account {
            account.hold(kind, bytes);
        }
        Self {
            account: account.clone(),
            kind,
            bytes,
        }
    }

    /// Counts up to `want` bytes of `kind` on `account`, as many as its caller's share
    /// and the budget have room for but at least `least`, waiting for room if need be
    /// (at once, all of `want`, without an account). See [`Account::try_hold`].
    pub async fn reserve(account: &CallAccount, kind: HeldKind, want: usize, least: usize) -> Self {
        let mut bytes = want;
        if let Some(on) = account {
            loop {
                let room = on.room();
                if let Some(held) = on.try_hold(kind, want, least) {
                    bytes = held;
                    break;
                }
                room.await;
            }
        }
        Self {
            account: account.clone(),
            kind,
            bytes,
        }
    }

    /// Counts `bytes` from now on instead of what it held (more or less, at once).
    pub fn resize(&mut self, bytes: usize) {
        if let Some(account) = &self.account {
            if bytes > self.bytes {
                account.hold(self.kind, bytes - self.bytes);
            } else if bytes < self.bytes {
                account.release(self.kind, self.bytes - bytes);
            }
        }
        self.bytes = bytes;
    }

    /// Splits `bytes` off into a charge of its own (at most what this one holds).
    pub fn split(&mut self, bytes: usize) -> Self {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Self {
            account: self.account.clone(),
            kind: self.kind,
            bytes,
        }
    }

    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(account) = &self.account
            && self.bytes > 0
        {
            account.release(self.kind, self.bytes);
        }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("kind", &self.kind)
            .field("bytes", &self.bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Account for Count {
        fn hold(&self, _: HeldKind, bytes: usize) {
            self.0.fetch_add(bytes, Ordering::Relaxed);
        }
        fn release(&self, _: HeldKind, bytes: usize) {
            self.0.fetch_sub(bytes, Ordering::Relaxed);
        }
        fn try_hold(&self, kind: HeldKind, want: usize, least: usize) -> Option<usize> {
            let room = 1000usize.saturating_sub(self.0.load(Ordering::Relaxed));
            let held = want.min(room);
            (held >= least).then(|| {
                self.hold(kind, held);
                held
            })
        }
        fn room(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            Box::pin(tokio::time::sleep(std::time::Duration::from_millis(10)))
        }
    }

    #[tokio::test]
    async fn a_reservation_waits_for_room_then_takes_the_size_it_turns_out_to_have() {
        let count = Arc::new(Count::default());
        let account: CallAccount = Some(count.clone());
        let first = Held::reserve(&account, HeldKind::Replay, 800, 100).await;
        let partly = Held::reserve(&account, HeldKind::Replay, 800, 100).await;
        assert_eq!(partly.bytes(), 200, "as much as there is room for");
        let waiting = tokio::spawn({
            let account = account.clone();
            async move { Held::reserve(&account, HeldKind::Replay, 800, 100).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "no room while 1000 of 1000 are held"
        );
        drop((first, partly));
        let mut second = waiting.await.unwrap();
        assert_eq!(count.0.load(Ordering::Relaxed), 800);
        second.resize(300);
        assert_eq!(count.0.load(Ordering::Relaxed), 300);
        second.resize(900);
        assert_eq!(count.0.load(Ordering::Relaxed), 900);
        drop(second);
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn split_charges_release_exactly_what_was_held() {
        let count = Arc::new(Count::default());
        let account: CallAccount = Some(count.clone());
        let mut page = Held::new(&account, HeldKind::Replay, 1000);
        let first = page.split(300);
        let rest = page.split(5000);
        assert_eq!((first.bytes(), rest.bytes(), page.bytes()), (300, 700, 0));
        assert_eq!(count.0.load(Ordering::Relaxed), 1000);
        drop(page);
        drop(first);
        assert_eq!(count.0.load(Ordering::Relaxed), 700);
        drop(rest);
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
        // No account: nothing to count, nothing to release.
        drop(Held::new(&None, HeldKind::Waiter, 10));
    }
}
