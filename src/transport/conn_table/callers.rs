//! What each caller's streams hold across the port, against the caller's share of the
//! memory budget: one caller (or everyone without a token, as `anonymous`) cannot
//! take the whole budget from the others.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use super::Table;
use crate::base::metrics::TOP_CALLERS;

/// Accounts kept without a live stream before unused ones are dropped.
const KEPT_ACCOUNTS: usize = 1024;

/// One caller's account on a port: what its streams hold, and its share.
#[derive(Debug)]
pub struct CallerHeld {
    label: Arc<str>,
    held: AtomicUsize,
    /// What it may hold, bytes.
    share: AtomicUsize,
}

impl CallerHeld {
    /// Its name as metrics show it.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// What its streams hold now, bytes.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// What it may hold, bytes.
    pub fn share(&self) -> usize {
        self.share.load(Ordering::Relaxed)
    }

    /// Whether `more` bytes would take it past its share.
    pub(super) fn would_pass(&self, more: usize) -> bool {
        self.held() + more > self.share()
    }

    /// Adds as much of `want` as its share has room for and returns it; `None`
    /// (nothing added) when that is less than `least`, unless `first` (the stream
    /// holds nothing of the kind yet: it gets `least`, so that it makes progress).
    pub(super) fn try_add_up_to(&self, want: usize, least: usize, first: bool) -> Option<usize> {
        let share = self.share();
        let mut added = 0;
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                let room = share.saturating_sub(held).min(want);
                added = if room >= least {
                    room
                } else if first {
                    least
                } else {
                    return None;
                };
                Some(held + added)
            })
            .ok()
            .map(|_| added)
    }

    pub(super) fn add(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(super) fn sub(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Table {
    /// The account of caller `label`, whose share of the budget is `share` (a
    /// fraction; `None`: the port's default).
    pub fn caller(&self, label: &str, share: Option<f64>) -> Arc<CallerHeld> {
        let share = share.unwrap_or(self.caller_share);
        let bytes = if self.budget == usize::MAX {
            usize::MAX
        } else {
            (self.budget as f64 * share) as usize
        };
        let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(account) = accounts.get(label) {
            account.share.store(bytes, Ordering::Relaxed);
            return account.clone();
        }
        if accounts.len() >= KEPT_ACCOUNTS {
            accounts.retain(|_, a| Arc::strong_count(a) > 1 || a.held() > 0);
        }
        let account = Arc::new(CallerHeld {
            label: label.into(),
            held: AtomicUsize::new(0),
            share: AtomicUsize::new(bytes),
        });
        accounts.insert(account.label.clone(), account.clone());
        account
    }

    /// The caller holding the most now, if any holds anything.
    pub(super) fn heaviest_caller(&self) -> Option<Arc<CallerHeld>> {
        let accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        accounts
            .values()
            .filter(|a| a.held() > 0)
            .max_by_key(|a| a.held())
            .cloned()
    }

    /// Shows the callers holding the most in `msgw_grpc_caller_held_bytes` (at most
    /// [`TOP_CALLERS`] of them; the others' series are removed).
    pub fn report_callers(&self) {
        let Some(memory) = &self.metrics.memory else {
            return;
        };
        let mut held: Vec<(Arc<str>, usize)> = {
            let accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
            accounts
                .values()
                .map(|a| (a.label.clone(), a.held()))
                .collect()
        };
        held.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        let mut shown = memory
            .shown_callers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut now = HashSet::new();
        for (label, bytes) in held.into_iter().filter(|(_, b)| *b > 0).take(TOP_CALLERS) {
            memory
                .by_caller
                .with_label_values(&[&*label])
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            now.insert(label);
        }
        for label in shown.iter() {
            if !now.contains(label) {
                let _ = memory.by_caller.remove_label_values(&[&**label]);
            }
        }
        *shown = now;
    }
}
