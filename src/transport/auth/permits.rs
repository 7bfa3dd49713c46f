//! What a caller may do with the operations of one call: each operation's permission,
//! the sends among them taken from the caller's send rate, and a call that sends
//! nothing (a query, a stream opened, a list or a change) from its query rate.

use super::callers::{Caller, Permission};
use crate::core::domain::{Error, Operation};

/// Admits the operations of one call (`batch`: a `Batch`, whose items are named in
/// errors): every one must be permitted, and its sends must fit the caller's rate.
/// Nothing of a refused call runs.
pub fn admit(caller: &Caller, ops: &[Operation], batch: bool) -> Result<(), Error> {
    let mut sends = 0u32;
    for (i, op) in ops.iter().enumerate() {
        let needed = op.facts().permission;
        if !caller.may(needed) {
            let what = if batch {
                format!("items[{i}] ({})", op.rpc_name())
            } else {
                op.rpc_name().to_owned()
            };
            return Err(Error::PermissionDenied(format!(
                "{what} needs the {:?} permission, which caller {} does not have",
                needed.as_str(),
                caller.label()
            )));
        }
        if needed == Permission::Send {
            sends = sends.saturating_add(1);
        }
    }
    take_sends(caller, sends)
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

/// Admits a caller to a VerificationService RPC (`rpc`) that sends `sends` messages:
/// the `send` permission covers the service, and its sends come from the caller's rate.
pub fn admit_verification(caller: &Caller, rpc: &str, sends: u32) -> Result<(), Error> {
    if !caller.may(Permission::Send) {
        return Err(Error::PermissionDenied(format!(
            "{rpc} needs the \"send\" permission, which caller {} does not have",
            caller.label()
        )));
    }
    take_sends(caller, sends)
}

/// Admits a caller to the delivery event stream: opening one counts one query.
pub fn admit_events(caller: &Caller) -> Result<(), Error> {
    if caller.may(Permission::Events) {
        take_query(caller)
    } else {
        Err(Error::PermissionDenied(format!(
            "{} needs the \"events\" permission, which caller {} does not have",
            crate::core::rpcs::event_service::STREAM_STATUS_EVENTS,
            caller.label()
        )))
    }
}

/// Admits a caller to an operators' RPC (`rpc`): the `admin` permission.
pub fn admit_admin(caller: &Caller, rpc: &str) -> Result<(), Error> {
    admit_rpc(caller, rpc, Permission::Admin)
}

/// Admits a caller to an RPC (`rpc`) that is no gateway operation and needs `needed`:
/// it sends nothing, so it counts one query.
pub fn admit_rpc(caller: &Caller, rpc: &str, needed: Permission) -> Result<(), Error> {
    if caller.may(needed) {
        take_query(caller)
    } else {
        Err(Error::PermissionDenied(format!(
            "{rpc} needs the {:?} permission, which caller {} does not have",
            needed.as_str(),
            caller.label()
        )))
    }
}
