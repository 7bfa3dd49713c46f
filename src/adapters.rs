//! What msgw talks to: the gateway's JSON API (upstream) and the store (SQLite or
//! PostgreSQL).

pub mod store;
pub mod upstream;
