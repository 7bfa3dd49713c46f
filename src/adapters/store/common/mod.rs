//! What both databases speak, written once as plain functions over a connection of
//! either ([`conn::Conn`]): the reads, the claims written change by change, the event
//! log's reads, upkeep, verifications, the fraud guard, the suppression list and the
//! sandbox's account. What
//! differs between them lives in `sqlite/` and `postgres/`.

pub(super) mod claim_sql;
pub(super) mod conn;
pub(super) mod events;
pub(super) mod guard;
pub(super) mod holds;
pub(super) mod pending;
pub(super) mod sandbox;
pub(super) mod scheduled;
pub(super) mod suppressions;
pub(super) mod upkeep;
pub(super) mod verification_changes;
pub(super) mod verifications;
