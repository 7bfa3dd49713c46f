//! The sandbox gateway on its own, spoken to in raw JSON like any gateway client would.

mod account;
mod api;
mod common;
mod delivery;
mod inbox;
mod rate;
mod validation;
