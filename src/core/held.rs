//! What a call makes msgw hold in memory on its caller's behalf (events loaded for a
//! replay, a status waiter's subscription), told to whoever keeps the memory budget: the
//! gRPC port counts it against its budget and the caller's share. Core only reports
//! what it holds; transport decides what is too much.

use std::sync::Arc;

/// What held bytes are for (the `kind` label of `msgw_grpc_held_bytes_by_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldKind {
    /// A stream's fixed cost and its request headers.
    Stream,
    /// A request body received and not yet done with.
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
    pub const ALL: [Self; 5] = [
        Self::Stream,
        Self::Request,
        Self::Answer,
        Self::Replay,
        Self::Waiter,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
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
