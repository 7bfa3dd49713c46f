//! Opt-outs on the send path, which every send takes (lone calls, Batch items,
//! verification codes): a group's numbers are read from the suppression list once,
//! by the store call that claims its ids (`acquire`), and an operation to a suppressed number is
//! answered RECIPIENT_OPTED_OUT with its fresh claim given back, so nothing of it
//! reaches the gateway and a later send with the id (after the number opts back in)
//! goes out. A retry of an id the gateway already took is answered from its claim as
//! before: that message left before the opt-out.

use std::collections::HashSet;

use super::Tracking;
use super::acquire::{Entry, Slot};
use super::answers::list_unread;
use super::exactly_once::Owned;
use crate::base::metrics::Metrics;
use crate::core::domain::{Error, Phone};
use crate::core::ports::store::Settlement;

/// Why a refused operation's claim was given back.
const OPTED_OUT: &str = "the recipient opted out: nothing was sent";

/// The distinct numbers the operations of `entries` reach.
pub(super) fn recipients<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<Phone> {
    let mut seen = HashSet::new();
    entries
        .into_iter()
        .filter_map(|e| e.op.recipient())
        .filter(|phone| seen.insert(*phone))
        .collect()
}

/// Which of `phones` are on the suppression list: one store read. Without delivery
/// tracking msgw has no store and no list.
pub(super) async fn opted_out(
    tracking: Option<&Tracking>,
    phones: Vec<Phone>,
) -> Result<HashSet<Phone>, Error> {
    let Some(tracking) = tracking else {
        return Ok(HashSet::new());
    };
    if phones.is_empty() {
        return Ok(HashSet::new());
    }
    match tracking.store.suppressed(&phones).await {
        Ok(found) => Ok(found.into_iter().collect()),
        Err(e) => Err(list_unread(e)),
    }
}

/// Answers each operation about to be sent on a fresh claim (`Send`) whose number
/// `opted_out` holds: RECIPIENT_OPTED_OUT, its claim released. When the list could
/// not be read, every such operation that reaches a person fails instead: a send
/// never goes out unchecked.
pub(super) fn refuse_opted_out(
    metrics: &Metrics,
    entries: &mut [Entry],
    opted_out: &Result<HashSet<Phone>, Error>,
    settlements: &mut Vec<(Owned, Settlement)>,
) {
    for entry in entries.iter_mut() {
        let Slot::Send(owned) = entry.slot else {
            continue;
        };
        let Some(phone) = entry.op.recipient() else {
            continue;
        };
        let refusal = match opted_out {
            Ok(numbers) if numbers.contains(&phone) => {
                metrics
                    .events
                    .opt_out_refusals_total
                    .with_label_values(&[entry.op.rpc_name()])
                    .inc();
                tracing::info!(
                    client_id = entry.op.client_id().map(|id| id.get()),
                    "send refused: its recipient opted out"
                );
                Error::RecipientOptedOut { phone }
            }
            Ok(_) => continue,
            Err(e) => e.clone(),
        };
        if let Some(owned) = owned {
            settlements.push((owned, Settlement::Released(OPTED_OUT.into())));
        }
        entry.slot = Slot::Done(Err(refusal));
    }
}
