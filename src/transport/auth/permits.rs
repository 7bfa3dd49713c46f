//! What a caller may do with one call, decided before its request is read: the
//! permission of the RPC (each item's, in a `Batch`), the priority each send asks
//! (at most the caller's `max_priority`), the sends among them taken from the caller's
//! send rate, and a call that sends nothing (a query, a stream opened, a list or a
//! change) from its query rate. A caller refused here learns nothing of its request,
//! valid or not.

use super::callers::{Caller, Permission};
use crate::base::metrics::Metrics;
use crate::core::dispatch::Lanes;
use crate::core::domain::{Error, OpKind, Priority, Violations};

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
    /// One gateway operation: its facts say the permission, and a send counts one;
    /// with the priority it asks (`msgw.v1.Priority`'s number).
    Operation(OpKind, i32),
    /// A `Batch`: each item's operation, asked priority and field name (`None`: an
    /// item that names none, which its parsing refuses), named by its index in a
    /// refusal.
    Batch(Vec<Option<(OpKind, i32, &'static str)>>),
}

/// Admits one call of `rpc` asking `asks`: every permission must be the caller's, every
/// priority asked at most its `max_priority`, and its sends must fit the caller's rate
/// (a call that sends nothing takes one query). Nothing of a refused call runs.
/// Answers the lane of each of its operations.
pub fn admit(caller: &Caller, rpc: &str, asks: &Asks, metrics: &Metrics) -> Result<Lanes, Error> {
    let (sends, lanes) = match asks {
        Asks::Rpc { permission, sends } => {
            permitted(caller, *permission, || rpc.to_owned())?;
            (*sends, Lanes::All(caller.priority))
        }
        Asks::Operation(kind, asked) => {
            let facts = kind.facts();
            permitted(caller, facts.permission, || facts.rpc.to_owned())?;
            let lane = lane(caller, *kind, *asked, "priority", metrics)?;
            (
                u32::from(facts.permission == Permission::Send),
                Lanes::All(lane),
            )
        }
        Asks::Batch(items) => {
            let mut sends = 0u32;
            let mut lanes = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let Some((kind, asked, name)) = item else {
                    lanes.push(caller.priority);
                    continue;
                };
                let facts = kind.facts();
                permitted(caller, facts.permission, || {
                    format!("items[{i}] ({})", facts.rpc)
                })?;
                let field = format!("items[{i}].{name}.priority");
                lanes.push(lane(caller, *kind, *asked, &field, metrics)?);
                if facts.permission == Permission::Send {
                    sends = sends.saturating_add(1);
                }
            }
            let all_one = lanes.windows(2).all(|w| w[0] == w[1]);
            let lanes = match lanes.first() {
                Some(first) if all_one => Lanes::All(*first),
                _ => Lanes::Each(lanes),
            };
            (sends, lanes)
        }
    };
    take_sends(caller, sends)?;
    Ok(lanes)
}

/// The lane of an operation of `kind` that asked priority `asked` (`field` names it):
/// the caller's default when it asked none, refused above its `max_priority`; one-time
/// codes always urgent.
fn lane(
    caller: &Caller,
    kind: OpKind,
    asked: i32,
    field: &str,
    metrics: &Metrics,
) -> Result<Priority, Error> {
    let asked = match asked {
        0 => None,
        1 => Some(Priority::Urgent),
        2 => Some(Priority::Normal),
        3 => Some(Priority::Bulk),
        other => {
            let mut violations = Violations::new();
            violations.scope("").add(
                field,
                format!("{other} is no msgw.v1.Priority (URGENT = 1, NORMAL = 2, BULK = 3)"),
            );
            return violations.finish(None);
        }
    };
    if let Some(asked) = asked
        && asked > caller.max_priority
    {
        metrics
            .dispatch
            .refused
            .with_label_values(&[asked.as_str(), "priority"])
            .inc();
        return Err(Error::PermissionDenied(format!(
            "{field} {asked} is above what caller {} may ask ({})",
            caller.label(),
            caller.max_priority
        )));
    }
    Ok(asked.unwrap_or(caller.priority).for_kind(kind))
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
