//! What msgw does, whatever carries the calls and wherever state is kept: validated
//! operations and their facts (with the RPC names the proto gives them), dispatch (claims, coalescing), one-time-code
//! verification and its fraud guard, opt-outs, the event log, reconcile, waits for a final status, queries
//! that reach the gateway once; and its ports (`ports/`): what it needs of the store and the gateway,
//! declared here and implemented by `adapters/`. Core names no layer above it (`tests/layers.rs`).

pub(crate) mod balance;
pub mod dispatch;
pub mod domain;
pub(crate) mod events;
pub(crate) mod group_commit;
pub(crate) mod held;
pub mod hooks;
pub(crate) mod mac;
pub mod numbers;
pub mod optout;
pub(crate) mod periodic;
pub mod ports;
pub(crate) mod queries;
pub mod reconcile;
pub(crate) mod rpcs;
pub(crate) mod schedule;
pub mod verify;
pub(crate) mod wait;
