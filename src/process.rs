//! The process: the command line and its options, the checked configuration, startup
//! (binding the ports, wiring the layers), logs and traces, what msgw reads of the
//! machine (CPUs, memory, file limit).

pub mod app;
pub mod check;
pub mod cli;
pub mod config;
pub mod cpus;
#[cfg(test)]
mod event_log_tests;
pub(crate) mod fd_limit;
pub(crate) mod kept_secret;
pub(crate) mod kept_upgrade;
pub(crate) mod memory;
pub(crate) mod secrets;
mod signal;
pub mod telemetry;
