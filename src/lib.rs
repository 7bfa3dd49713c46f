//! msgw: a typed gRPC facade for a multi-channel messaging gateway whose only
//! interface is one JSON-over-HTTP endpoint.

/// mimalloc: msgw allocates on one thread and frees on another all the time (a
/// request's buffers, the envelope's rows, the answers), where glibc's allocator
/// falls back to its locked bins.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod admin;
pub mod app;
pub mod auth;
pub mod balance;
pub mod check;
pub mod cli;
pub mod config;
pub mod conn_table;
pub mod cpus;
pub mod dispatch;
pub mod domain;
pub mod events;
pub mod fd_limit;
pub mod group_commit;
pub mod grpc;
pub mod hooks;
pub mod http_listener;
pub mod kept_secret;
pub mod listen;
pub mod mac;
pub mod memory;
pub mod metrics;
pub mod parse;
pub mod periodic;
pub mod proto;
pub mod reconcile;
pub mod rpcs;
pub mod sandbox;
pub mod secrets;
pub mod store;
pub mod telemetry;
pub mod upstream;
pub mod verify;
pub mod wait;
pub mod webhook;
