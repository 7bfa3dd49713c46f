//! msgw end to end over real gRPC and HTTP on loopback.

mod admin;
mod browser;
mod budgets;
mod builders;
#[path = "../common/callers.rs"]
mod callers;
mod coalescing;
mod connections;
mod errors;
mod estimate;
mod events;
mod examples;
mod first_hour;
mod fixtures;
#[path = "../common/h2frames.rs"]
mod frames;
mod fraud_guard;
#[path = "../common/gateway.rs"]
mod gateway;
mod gateway_rate;
mod guard_bursts;
mod guard_codes;
mod guard_regions;
mod helpers;
mod hostile;
mod idempotency;
mod lifecycle;
mod listener;
mod lookups;
mod memory_limit;
mod numbers;
mod operations;
mod optout;
#[path = "../common/pgbouncer.rs"]
mod pgbouncer;
mod pooler;
#[path = "../common/postgres.rs"]
mod postgres;
mod queries;
mod remembering;
mod replicas;
mod sandbox_crashes;
mod sandboxed;
mod scheduling;
mod security;
mod settling;
mod shaping;
mod tls;
mod tools;
mod translation;
mod trusted_keys;
mod validation;
mod verification;
mod verification_load;
mod verify_retries;
#[path = "../common/wait.rs"]
mod wait;
mod waiting;
