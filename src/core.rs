//! What msgw does, whatever carries the calls and wherever state is kept: validated
//! operations and their facts (with the RPC names the proto gives them), dispatch (claims, coalescing), one-time-code
//! verification and its fraud guard, the event log, reconcile, waits for a final status.

pub mod balance;
pub mod dispatch;
pub mod domain;
pub mod events;
pub mod group_commit;
pub mod hooks;
pub mod mac;
pub mod reconcile;
pub mod rpcs;
pub mod verify;
pub mod wait;
