//! What a caller may do with one call, decided before its request is read: the
//! permission of the RPC (each item's, in a `Batch`), the sends among them taken from
//! the caller's send rate, and a call that sends nothing (a query, a stream opened, a
//! list or a change) from its query rate. A caller refused here learns nothing of its
//! request, valid or not.

use super::callers::{Caller, Permission};
use crate::core::domain::{Error, OpKind};

/// What a call asks of its caller's permissions and rates, known from the RPC alone
/// (and, in a `Batch`, from which operation each item names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asks {
    /// An RPC that is no gateway operation: the permission it needs, and the messages it
    /// sends (0: it counts one query).
    Rpc {
        /// The permission.
        permission: Permission,
        /// Messages sent (a verification's code).
        sends: u32,
    },
    /// One gateway operation: its facts say the permission, and a send counts one.
    Operation(OpKind),
    /// A `Batch`: each item's operation (`None`: an item that names none, which its
    /// parsing refuses), named by its index in a refusal.
    Batch(Vec<Option<OpKind>>),
}

/// Admits one call of `rpc` asking `asks`: every permission must be the caller's, and
/// its sends must fit the caller's rate (a call that sends nothing takes one query).
/// Nothing of a refused call runs.
pub fn admit(caller: &Caller, rpc: &str, asks: &Asks) -> Result<(), Error> {
    let sends = match asks {
        Asks::Rpc { permission, sends } => {
            permitted(caller, *permission, || rpc.to_owned())?;
            *sends
        }
        Asks::Operation(kind) => {
            let facts = kind.facts();
            permitted(caller, facts.permission, || facts.rpc.to_owned())?;
            u32::from(facts.permission == Permission::Send)
        }
        Asks::Batch(kinds) => {
            let mut sends = 0u32;
            for (i, kind) in kinds.iter().enumerate() {
                let Some(kind) = kind else { continue };
                let facts = kind.facts();
                permitted(caller, facts.permission, || {
                    format!("items[{i}] ({})", facts.rpc)
                })?;
                if facts.permission == Permission::Send {
                    sends = sends.saturating_add(1);
                }
            }
            sends
        }
    };
    take_sends(caller, sends)
}

/// Refuses a caller without `needed`; `what` names what needs it.
fn permitted(
    caller: &Caller,
    needed: Permission,
    what: impl FnOnce() -> String,
) -> Result<(), Error> {
    if caller.may(needed) {
        return Ok(());
    }
    Err(Error::PermissionDenied(format!(
        "{} needs the {:?} permission, which caller {} does not have",
        what(),
        needed.as_str(),
        caller.label()
    )))
}

/// Takes the call from the caller's query rate when it sends nothing (`sends` is 0).
fn take_sends(caller: &Caller, sends: u32) -> Result<(), Error> {
    if sends == 0 {
        return take_query(caller);
    }
    caller
        .take_sends(sends)
        .map_err(|retry_after| Error::RateLimited {
            caller: caller.label().to_owned(),
            sends,
            retry_after,
        })
}

/// Takes one call that sends nothing from the caller's query rate, or says when to retry.
fn take_query(caller: &Caller) -> Result<(), Error> {
    caller
        .take_query()
        .map_err(|retry_after| Error::QueryRateLimited {
            caller: caller.label().to_owned(),
            retry_after,
        })
}
