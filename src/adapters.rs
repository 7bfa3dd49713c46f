//! What msgw talks to: the gateway's JSON API (upstream) and the store (SQLite or
//! PostgreSQL), each implementing a port core declares (`core/ports/`).

pub mod store;
pub mod upstream;
