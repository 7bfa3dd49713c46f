//! Opt-outs: msgw's suppression list of numbers that sends never reach, on any channel
//! (verification codes included). A reply whose text is an opt-out keyword adds its
//! number and an opt-in keyword lifts it (the event log applies them as it stores the
//! report, `events/`); SuppressionService's callers add, remove and read entries here.
//! Every change commits with its event in one transaction. Sends are refused in
//! `dispatch/`, before their ids are claimed as sent.

mod settings;

use std::sync::Arc;

use chrono::{SubsecRound, Utc};

use crate::core::domain::{
    CallerName, Error, Phone, Reason, Suppression, SuppressionChange, SuppressionSource,
};
use crate::core::events::EventLog;
use crate::core::ports::store::{Appended, Store, StoreError};
pub use settings::Settings;

/// Entries of a ListSuppressions page when the caller names no size.
pub const PAGE_DEFAULT: u32 = 100;
/// Entries of a page at most.
pub const PAGE_MAX: u32 = 1000;

fn store_error(e: StoreError) -> Error {
    e.unavailable("msgw's store is unavailable")
}

/// The suppression list, as SuppressionService reads and changes it.
#[derive(Clone)]
pub struct Suppressions {
    store: Arc<dyn Store>,
    events: Arc<EventLog>,
}

impl std::fmt::Debug for Suppressions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suppressions").finish_non_exhaustive()
    }
}

impl Suppressions {
    /// The list in `store`; its changes go through `events`, each with its event.
    pub(crate) fn new(store: Arc<dyn Store>, events: Arc<EventLog>) -> Self {
        Self { store, events }
    }

    /// The metrics changes count into.
    pub fn metrics(&self) -> &Arc<crate::base::metrics::Metrics> {
        self.events.metrics()
    }

    /// Adds `phone` for `caller`: its entry, new or (already suppressed) unchanged.
    pub async fn add(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        reason: Reason,
    ) -> Result<Suppression, Error> {
        let change = api_change(caller, phone, reason, true);
        let done = self.change(change).await?;
        done.entry
            .ok_or_else(|| Error::Internal("an add answered no entry".into()))
    }

    /// Makes a caller's change: what it did, or NEWER_DECISION when a later decision
    /// the other way stands (a reply whose time is after the call's, e.g. stamped by a
    /// replica whose clock is ahead).
    async fn change(&self, change: SuppressionChange) -> Result<Appended, Error> {
        let (phone, suppressed) = (change.phone, change.suppressed);
        let done = self
            .events
            .change_suppression(change)
            .await
            .map_err(store_error)?;
        match done.superseded {
            Some(decided_at) => Err(Error::NewerDecision {
                phone,
                opted_out: !suppressed,
                decided_at,
            }),
            None => Ok(done),
        }
    }

    /// Removes `phone` for `caller`: its entry as it was; NOT_FOUND when it was not on
    /// the list.
    pub async fn remove(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        reason: Reason,
    ) -> Result<Suppression, Error> {
        let change = api_change(caller, phone, reason, false);
        self.change(change)
            .await?
            .entry
            .ok_or(Error::PhoneNotSuppressed { phone })
    }

    /// The entry of `phone`; NOT_FOUND when it is not on the list.
    pub async fn get(&self, phone: Phone) -> Result<Suppression, Error> {
        self.store
            .suppression(phone)
            .await
            .map_err(store_error)?
            .ok_or(Error::PhoneNotSuppressed { phone })
    }

    /// Up to `size` entries after `after` in number order, and the number to pass as
    /// `after` for the next page (`None` after the last).
    pub async fn list(
        &self,
        after: Option<Phone>,
        size: u32,
    ) -> Result<(Vec<Suppression>, Option<Phone>), Error> {
        let size = size.clamp(1, PAGE_MAX);
        let mut page = self
            .store
            .suppressions(after, size + 1)
            .await
            .map_err(store_error)?;
        let more = page.len() > size as usize;
        page.truncate(size as usize);
        let next = more.then(|| page.last().map(|s| s.phone)).flatten();
        Ok((page, next))
    }
}

/// A caller's change of `phone`, now: a decision at the time of the call, as a reply
/// is one at its own.
fn api_change(
    caller: Option<&CallerName>,
    phone: Phone,
    reason: Reason,
    suppressed: bool,
) -> SuppressionChange {
    SuppressionChange {
        phone,
        suppressed,
        source: SuppressionSource::Api,
        reason,
        client_id: None,
        caller: caller.cloned(),
        // As the store keeps it: the entry answered now is the one read back later.
        at: Utc::now().trunc_subsecs(3),
    }
}
