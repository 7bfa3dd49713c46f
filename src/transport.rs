//! What faces msgw's callers and the gateway's webhooks: the gRPC port and its
//! services, caller authentication, the webhook and admin HTTP listeners, the bounds of
//! their connections, and the generated proto types.

pub mod admin;
pub mod auth;
pub(crate) mod conn_table;
pub mod grpc;
pub mod http_listener;
pub mod listen;
pub mod proto;
pub(crate) mod webhook;
